"""nbgrader's own commands grade safely with the grader installed (autograder/notebook/plugin.py).

An instructor's course folder, with the lines `autograder configure` writes in its
nbgrader_config.py, is graded with `nbgrader generate_assignment`, `nbgrader autograde`,
`nbgrader generate_feedback` and `nbgrader export`, as nbgrader's documentation runs them:

- this lesson: the fixtures' perfect, wrong and forged submissions score exactly what
  expected-scores.csv says they score with `make autograde` (the forged one what its unanswered
  stage 2 deserves), and a canary in the instructor's home is read by no kernel;
- a second assignment, not this lesson's (tests/fixtures/second_assignment.py): honest students
  score what stock nbgrader gives them, the hostile one is contained;
- where the sandbox cannot start, `nbgrader autograde` stops with exit 3 and grades nobody.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder.adapters.lesson import ASSIGNMENT
from autograder.course.assignment import nbgrader_env, new_course, stock_nbgrader_env
from autograder.notebook.plugin import CLASS_REPORT
from tests.fixtures import build as fixtures
from tests.fixtures import second_assignment

PY = sys.executable
STUDENTS = (
    "solutions",
    "mistake-oracle-weights-not-transposed",
    "hostile-forged-stdout-report",
    "hostile-searches-host",
)


def _nbgrader(course: Path, *args, env: dict, timeout: int = 1200) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PY, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True, text=True, timeout=timeout
    )


def _env(home: Path, stock: bool = False, tmp: Path | None = None) -> dict:
    """nbgrader's environment for an instructor whose home is `home`: no PYTHONPATH, the grader
    found because it is installed (`make venv` installs it). stock: no config file read but the
    course's own (the venv's, written by `make venv`, holds the grader's lines). tmp: the
    instructor's temporary folder (TMPDIR), to see what is left in it."""
    env = stock_nbgrader_env() if stock else {k: v for k, v in nbgrader_env().items() if k != "PYTHONPATH"}
    if tmp is not None:
        tmp.mkdir(parents=True, exist_ok=True)
        env["TMPDIR"] = str(tmp)
    return {**env, "HOME": str(home), "INSTRUCTOR_HOME": str(home)}


def _left_by_the_grader(tmp: Path) -> list[str]:
    """What the grader's notebooks left in the instructor's temporary folder (each notebook's
    scratch folder, its copy of the shipped files included, goes when the notebook is graded)."""
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("autograder-"))


def _scores(course: Path, assignment: str) -> dict[tuple[str, str, str], float | None]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {
            (submission.student.id, nb.name, grade.name): (None if grade.needs_manual_grade else float(grade.score))
            for submission in gb.find_assignment(assignment).submissions
            for nb in submission.notebooks
            for grade in nb.grades
        }


@pytest.fixture(scope="module")
def instructor_home(tmp_path_factory) -> tuple[Path, str]:
    home = tmp_path_factory.mktemp("instructor-home")
    secret = f"instructor-canary-{uuid.uuid4().hex}"
    (home / "performance05-canary.txt").write_text(secret)
    return home, secret


def test_plugin_autograde_scores_as_make(tmp_path, instructor_home):
    """nbgrader autograde with the plugin scores the lesson as `make autograde`."""
    home, secret = instructor_home
    course = new_course(tmp_path / "course")
    assert "autograder.notebook.plugin import configure" in (course / "nbgrader_config.py").read_text()
    env = _env(home, tmp=tmp_path / "tmp")
    assert _nbgrader(course, "generate_assignment", ASSIGNMENT, "--force", env=env).returncode == 0
    for student in STUDENTS:
        shutil.copytree(fixtures.SUBMISSIONS / student, course / "submitted" / student / ASSIGNMENT)
    graded = _nbgrader(course, "autograde", ASSIGNMENT, "--force", env=env)
    assert graded.returncode == 0, graded.stdout[-3000:] + graded.stderr[-3000:]
    found = _scores(course, ASSIGNMENT)
    expected = {
        (row["student_id"], row["notebook"], row["grade_id"]): (float(row["score"]) if row["score"] else None)
        for row in csv.DictReader(open(fixtures.EXPECTED_SCORES))
        if row["student_id"] in STUDENTS
    }
    assert expected and {k: found.get(k) for k in expected} == expected
    assert _left_by_the_grader(tmp_path / "tmp") == []
    # The forged reports earned nothing: its stage 2 is unanswered.
    assert (
        sum(v or 0 for (s, nb, _), v in found.items() if (s, nb) == ("hostile-forged-stdout-report", "02-build")) == 0
    )
    # The class report, written after each student's last notebook: every student, and the
    # transposed oracle's failure counted against its items.
    report = course / CLASS_REPORT / ASSIGNMENT
    assert all(student in (report / "report.html").read_text() for student in STUDENTS)
    items = list(csv.DictReader(open(report / "report" / "items.csv")))
    oracle = [row for row in items if row["cell"] == "test-reverse-oracle"]
    assert oracle and all(row["of"] == str(len(STUDENTS)) for row in oracle)
    assert min(int(row["passed"]) for row in oracle) <= len(STUDENTS) - 2  # the mistake and the unanswered one
    feedback = _nbgrader(course, "generate_feedback", ASSIGNMENT, "--force", env=env)
    assert feedback.returncode == 0, feedback.stderr[-3000:]
    pages = list((course / "feedback").rglob("*.html"))
    assert len(pages) >= len(STUDENTS)
    assert _nbgrader(course, "export", env=env).returncode == 0
    everything = [p for p in course.rglob("*") if p.is_file() and p.suffix in (".ipynb", ".html", ".csv", ".db")]
    assert [str(p) for p in everything if secret.encode() in p.read_bytes()] == []


def _second_course(folder: Path, plugin: bool, env: dict, students=None) -> dict:
    course = second_assignment.make_course(folder, plugin=plugin)
    for student in set(second_assignment.SUBMISSIONS) - set(students or second_assignment.SUBMISSIONS):
        shutil.rmtree(course / "submitted" / student)
    assert _nbgrader(course, "generate_assignment", second_assignment.ASSIGNMENT, "--force", env=env).returncode == 0
    graded = _nbgrader(course, "autograde", second_assignment.ASSIGNMENT, "--force", env=env, timeout=600)
    assert graded.returncode == 0, graded.stdout[-3000:] + graded.stderr[-3000:]
    scores = _scores(course, second_assignment.ASSIGNMENT)
    return {(student, nb): score for (student, nb, grade_id), score in scores.items() if grade_id.startswith("test-")}


def test_second_assignment_graded_as_stock(tmp_path, instructor_home):
    """A second assignment is graded as stock nbgrader grades it and its hostile student contained."""
    home, secret = instructor_home
    env = _env(home, tmp=tmp_path / "tmp")
    honest = ("right", "partly-wrong")
    stock = _second_course(tmp_path / "stock", False, _env(home, stock=True), students=honest)
    Path(second_assignment.ESCAPE).unlink(missing_ok=True)
    safe = _second_course(tmp_path / "safe", True, env)
    assert safe == second_assignment.EXPECTED
    assert _left_by_the_grader(tmp_path / "tmp") == []
    assert {key: value for key, value in safe.items() if key[0] in honest} == stock
    autograded = (
        tmp_path / "safe" / "autograded" / "hostile" / second_assignment.ASSIGNMENT / "arithmetic.ipynb"
    ).read_text()
    assert secret not in autograded and "cannot write outside" in autograded
    assert not Path(second_assignment.ESCAPE).exists()
    leftover = subprocess.run(["pgrep", "-f", "sleep 1000"], capture_output=True, text=True).stdout.split()
    assert leftover == [], "a process of the hostile student's outlived its notebook"


def test_second_assignment_checks_judged(tmp_path, instructor_home):
    """ps1 with a checks module of its own (the judge's protocol, nothing of this lesson): every
    test cell is checked by the judge in the grader, and every student gets the stock scores."""
    home, secret = instructor_home
    env = _env(home, tmp=tmp_path / "tmp")
    course = second_assignment.make_course(tmp_path / "judged", plugin=True, judged=True)
    assert _nbgrader(course, "generate_assignment", second_assignment.ASSIGNMENT, "--force", env=env).returncode == 0
    graded = _nbgrader(course, "autograde", second_assignment.ASSIGNMENT, "--force", env=env, timeout=600)
    assert graded.returncode == 0, graded.stdout[-3000:] + graded.stderr[-3000:]
    scores = _scores(course, second_assignment.ASSIGNMENT)
    found = {(student, nb): score for (student, nb, grade_id), score in scores.items() if grade_id.startswith("test-")}
    assert found == second_assignment.EXPECTED
    for student in ("right", "partly-wrong"):
        for name in second_assignment.NOTEBOOKS:
            notebook = nbformat.read(
                course / "autograded" / student / second_assignment.ASSIGNMENT / name, as_version=4
            )
            (test,) = [cell for cell in notebook.cells if cell.metadata.get("nbgrader", {}).get("grade")]
            text = "".join(output.get("text", "") for output in test.outputs)
            assert "checked by the grader's judge" in text and "checked in this process" not in text, text
    assert _left_by_the_grader(tmp_path / "tmp") == []


def test_autograde_without_sandbox_exits_3(tmp_path, instructor_home):
    """Without a sandbox, nbgrader autograde grades nobody and exits 3."""
    home, _ = instructor_home
    env = {**_env(home), "AUTOGRADER_BWRAP": "/bin/false"}  # a bubblewrap that cannot work here
    course = second_assignment.make_course(tmp_path / "course", plugin=True)
    assert _nbgrader(course, "generate_assignment", second_assignment.ASSIGNMENT, "--force", env=env).returncode == 0
    graded = _nbgrader(course, "autograde", second_assignment.ASSIGNMENT, "--force", env=env, timeout=300)
    assert graded.returncode == 3, graded.stdout[-2000:] + graded.stderr[-2000:]
    assert "nobody can be graded safely" in graded.stderr
    assert not (course / "autograded").exists() or not list((course / "autograded").rglob("*.ipynb"))


def test_configure_writes_the_lines_once(tmp_path):
    from autograder.notebook.plugin import main

    (tmp_path / "nbgrader_config.py").write_text("c = get_config()  # noqa: F821\nc.Execute.timeout = 5\n")
    assert main([str(tmp_path), "--checks-module", "remat_checks"]) == 0
    text = (tmp_path / "nbgrader_config.py").read_text()
    assert "configure(c, checks_module='remat_checks')" in text and "c.Execute.timeout = 5" in text
    assert main([str(tmp_path)]) == 0 and (tmp_path / "nbgrader_config.py").read_text() == text
    assert main([str(tmp_path / "missing")]) == 2


def test_wheel_holds_the_grader_alone(tmp_path):
    """`python -m build` makes a wheel of the autograder package and its command: no lesson, no
    fixtures, no sample submissions."""
    import zipfile

    from autograder.course.paths import ROOT

    built = subprocess.run(
        [PY, "-m", "build", "--wheel", "--outdir", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    packages = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert packages == {"autograder"}, packages
    assert not [name for name in names if "samples" in name or name.endswith(".ipynb")]
    # Every module of every subpackage (the text sent into sandboxes included), nothing left behind.
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "autograder").rglob("*.py")}
    assert len(modules) > 50 and sorted(modules - set(names)) == []
    entry_points = next(name for name in names if name.endswith("entry_points.txt"))
    assert "autograder = autograder.commands.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
