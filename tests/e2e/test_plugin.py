"""nbgrader's own commands grade safely with the grader installed (autograder/notebook/plugin.py).

An instructor's course folder, with the lines `autograder configure` writes in its
nbgrader_config.py, is graded with `nbgrader generate_assignment`, `nbgrader autograde`,
`nbgrader generate_feedback` and `nbgrader export`, as nbgrader's documentation runs them:

- this lesson: the fixtures' perfect, wrong and forged submissions score exactly what
  expected-scores.csv says they score with `make autograde` (the forged one what its unanswered
  stage 2 deserves), and a canary in the instructor's home is read by no kernel;
- a second assignment, not this lesson's (tests/fixtures/second_assignment.py): honest students
  score what stock nbgrader gives them, the hostile one is contained;
- where the sandbox cannot start, `nbgrader autograde` stops with exit 3 and grades nobody;
- a class with a notebook that is not JSON, one missing, one renamed and a re-check is graded
  alike by `nbgrader autograde` and by `autograder grade`, cell by cell, every problem named, and
  every output of a route gives the same totals and the same pending cells.
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
    env = (
        stock_nbgrader_env(tmp or home / "tmp")
        if stock
        else {k: v for k, v in nbgrader_env().items() if k != "PYTHONPATH"}
    )
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
    counted = ("attempted", "not attempted", "not checked")
    assert oracle and all(sum(int(row[c]) for c in counted) == len(STUDENTS) for row in oracle)
    # the mistake fails them; the forged submission's stage 2 is unanswered: not attempted
    assert min(int(row["attempted"]) - int(row["passed"]) for row in oracle) >= 1
    assert all(int(row["not attempted"]) >= 1 for row in oracle)
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


def test_a_refused_run_leaves_no_student_half_graded(tmp_path, instructor_home):
    """A run refused before anyone is graded (no sandbox: exit 3; a checks module the source lacks:
    exit 2) leaves no student's autograded folder, which nbgrader would skip next time: once the
    course is mended, the next run grades everyone, without --force."""
    home, _ = instructor_home
    env = _env(home, tmp=tmp_path / "tmp")
    assignment = second_assignment.ASSIGNMENT
    course = second_assignment.make_course(tmp_path / "course", plugin=True, judged=True)
    honest = {"right", "partly-wrong"}
    for student in set(second_assignment.SUBMISSIONS) - honest:
        shutil.rmtree(course / "submitted" / student)
    assert _nbgrader(course, "generate_assignment", assignment, "--force", env=env).returncode == 0
    config = course / "nbgrader_config.py"
    mended = config.read_text()

    def begun() -> list[str]:
        return sorted(p.parent.name for p in (course / "autograded").glob(f"*/{assignment}"))

    refused = _nbgrader(course, "autograde", assignment, env={**env, "AUTOGRADER_BWRAP": "/bin/false"}, timeout=300)
    assert refused.returncode == 3 and "nobody can be graded safely" in refused.stderr, refused.stderr[-2000:]
    assert begun() == []
    misnamed = second_assignment.CHECKS_MODULE + "_misnamed"
    config.write_text(mended.replace(repr(second_assignment.CHECKS_MODULE), repr(misnamed)))
    refused = _nbgrader(course, "autograde", assignment, env=env, timeout=300)
    assert refused.returncode == 2 and "nobody is graded" in refused.stderr, refused.stderr[-2000:]
    assert begun() == []

    config.write_text(mended)
    graded = _nbgrader(course, "autograde", assignment, env=env, timeout=600)
    assert graded.returncode == 0, graded.stdout[-3000:] + graded.stderr[-3000:]
    assert "Skipping existing" not in graded.stdout + graded.stderr
    assert begun() == sorted(honest)
    scores = _scores(course, assignment)
    found = {(student, nb): score for (student, nb, grade_id), score in scores.items() if grade_id.startswith("test-")}
    assert found == {key: value for key, value in second_assignment.EXPECTED.items() if key[0] in honest}


def test_configure_writes_the_lines_once(tmp_path):
    from autograder.notebook.plugin import main

    (tmp_path / "nbgrader_config.py").write_text("c = get_config()  # noqa: F821\nc.Execute.timeout = 5\n")
    assert main([str(tmp_path), "--checks-module", "remat_checks"]) == 0
    text = (tmp_path / "nbgrader_config.py").read_text()
    assert "configure(c, checks_module='remat_checks')" in text and "c.Execute.timeout = 5" in text
    assert main([str(tmp_path)]) == 0 and (tmp_path / "nbgrader_config.py").read_text() == text
    assert main([str(tmp_path), "--checks-module", "remat_checks"]) == 0
    # Another module, once configured: refused, the file unchanged (it is edited by hand).
    assert main([str(tmp_path), "--checks-module", "remat_check"]) == 2
    assert (tmp_path / "nbgrader_config.py").read_text() == text
    (tmp_path / "nbgrader_config.py").write_text(text.replace("'remat_checks'", '"remat_checks"'))  # as typed by hand
    assert main([str(tmp_path), "--checks-module", "remat_checks"]) == 0
    assert main([str(tmp_path / "missing")]) == 2


def test_configure_reads_the_config_as_code(tmp_path, capsys):
    """The grader's lines in a comment or a string do not configure it (nbgrader would grade with
    no sandbox): configure writes them; a config that is not Python is refused, unchanged."""
    from autograder.notebook.plugin import main

    config = tmp_path / "nbgrader_config.py"
    for inert in ("# from autograder.notebook.plugin import configure\n", 'NOTE = "autograder.notebook.plugin"\n'):
        config.write_text("c = get_config()  # noqa: F821\n" + inert)
        assert main([str(tmp_path)]) == 0
        assert "wrote the grader's lines" in capsys.readouterr().out
        assert config.read_text().count("\nfrom autograder.notebook.plugin import configure\n") == 1
    config.write_text("c = get_config(\n")
    assert main([str(tmp_path)]) == 2
    assert "is not Python nbgrader can read (line 1" in capsys.readouterr().err
    assert config.read_text() == "c = get_config(\n"


def test_configure_refuses_a_checks_module_no_assignment_holds(tmp_path, capsys):
    from autograder.notebook.plugin import main

    for assignment in ("ps1", "ps2", ".ipynb_checkpoints", "__pycache__"):  # (neither is an assignment)
        (tmp_path / "source" / assignment).mkdir(parents=True)
    (tmp_path / "source" / "ps1" / "ps1_checks.py").write_text("")
    assert main([str(tmp_path), "--assignment", "ps1"]) == 2  # an assignment of no module: a slip
    assert "give both" in capsys.readouterr().err
    for module, said in [
        ("ps1_check", "ps1_check.py is not in the source of ps1, ps2"),
        ("ps1_checks.py", "give the checks module's name, 'ps1_checks'"),
        ("sub/ps1_checks", "must be a module's name"),
        ("ps1_checks", "ps1_checks.py is not in the source of ps2"),  # every assignment: ps2 lacks it
    ]:
        assert main([str(tmp_path), "--checks-module", module]) == 2, module
        assert said in capsys.readouterr().err, module
    assert main([str(tmp_path), "--checks-module", "ps1_check", "--assignment", "ps1"]) == 2
    said = capsys.readouterr().err
    assert "ps1_check.py is not in the source of ps1" in said and "--assignment" not in said  # given already
    for name in ("ps[12]", ".ipynb_checkpoints", "__pycache__"):
        assert main([str(tmp_path), "--checks-module", "ps1_checks", "--assignment", name]) == 2, name
        assert "not an assignment's name" in capsys.readouterr().err, name
    assert not (tmp_path / "nbgrader_config.py").exists()
    assert main([str(tmp_path), "--checks-module", "ps1_checks", "--assignment", "ps3"]) == 0  # not installed yet
    assert "not looked for" in capsys.readouterr().out
    # Configured for ps3 only: ps1's module is another (none) there, refused; ps3's again, done.
    assert main([str(tmp_path), "--checks-module", "ps1_checks", "--assignment", "ps1"]) == 2
    assert "with no checks module for ps1 (a module for one assignment is named with --assignment)" in (
        capsys.readouterr().err
    )
    assert main([str(tmp_path), "--checks-module", "ps1_checks", "--assignment", "ps3"]) == 0
    assert main([str(tmp_path / "other")]) == 2


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


def _cells(db: Path, assignment: str) -> dict[tuple[str, str, str], tuple[float, bool]]:
    """{(student, notebook, cell): (score as the gradebook counts it, pending)}."""
    with Gradebook(f"sqlite:///{db}") as gb:
        return {
            (submission.student.id, nb.name, grade.name): (float(grade.score), bool(grade.needs_manual_grade))
            for submission in gb.find_assignment(assignment).submissions
            for nb in submission.notebooks
            for grade in nb.grades
        }


def _override(db: Path, student: str, notebook: str, cell: str, score: float) -> None:
    """What formgrader's box does: a person's score for a cell."""
    with Gradebook(f"sqlite:///{db}") as gb:
        grade = gb.find_grade(cell, notebook, second_assignment.ASSIGNMENT, student)
        grade.manual_score, grade.needs_manual_grade = score, False
        gb.db.commit()


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _totals(cells: dict) -> dict[str, float]:
    found: dict[str, float] = {}
    for (student, _, _), (score, _) in cells.items():
        found[student] = found.get(student, 0.0) + score
    return found


def _report_totals(report: Path) -> dict[str, float]:
    return {row["student"]: float(row["total"]) for row in _rows(report / "report" / "scores.csv")}


def _report_problems(report: Path) -> set[tuple[str, str, str]]:
    return {(row["student"], row["notebook"], row["kind"]) for row in _rows(report / "report" / "needs-a-person.csv")}


def test_both_routes_agree_on_a_class_with_problems(tmp_path, instructor_home):
    """A class with a notebook that is not JSON (erin's text), one missing and one handed in under
    another name (fay's arithmetic), and a re-check (partly-wrong's overridden test, whose answer
    then changes): `nbgrader autograde` grades erin's other notebook as `autograder grade` does,
    both name every problem in their log, report and feedback, give the same score in every cell
    after the regrade, and every output of each gives the same totals and pending cells."""
    home, _ = instructor_home
    env = _env(home, tmp=tmp_path / "tmp")
    assignment = second_assignment.ASSIGNMENT
    course = second_assignment.make_course(tmp_path / "course", plugin=True, judged=True)
    submitted = course / "submitted"
    shutil.rmtree(submitted / "hostile")
    shutil.copytree(submitted / "right", submitted / "erin")
    (submitted / "erin" / assignment / "text.ipynb").write_text('{"cells": [{"cell_type": "code", ')
    shutil.copytree(submitted / "right", submitted / "fay")
    (submitted / "fay" / assignment / "arithmetic.ipynb").rename(
        submitted / "fay" / assignment / "arithmetic (1).ipynb"
    )
    assert _nbgrader(course, "generate_assignment", assignment, "--force", env=env).returncode == 0

    # Route A: nbgrader's own command. nbgrader alone stops erin at NotJSONError.
    first_a = _nbgrader(course, "autograde", assignment, env=env, timeout=600)
    log_a = first_a.stdout + first_a.stderr
    assert first_a.returncode == 0, log_a[-3000:]
    assert "NotJSONError" not in log_a, log_a[-3000:]
    assert "SAWarning" not in log_a, log_a[-3000:]
    for line in (
        "BROKEN  erin: text.ipynb: not a readable notebook",
        "MISSING fay: arithmetic.ipynb: not handed in; graded 0",
        "NOTE    fay: arithmetic (1).ipynb: not a notebook of the assignment (perhaps arithmetic.ipynb, renamed)",
    ):
        assert line in log_a, line
    route_a = _cells(course / "gradebook.db", assignment)
    assert route_a[("erin", "arithmetic", "test-arithmetic")] == (2.0, False)  # her other notebook, graded
    assert route_a[("erin", "text", "test-text")] == (0.0, False)
    assert route_a[("fay", "arithmetic", "test-arithmetic")] == (0.0, False)
    assert route_a[("fay", "text", "test-text")] == (2.0, False)

    # Route B: the grader's own run on the same course.
    bin_dir = Path(PY).parent
    grade = [str(bin_dir / "autograder"), "grade", "submitted", "--course", ".", "--assignment", assignment]
    env_b = {**env, "PATH": f"{bin_dir}:{env['PATH']}"}
    first_b = subprocess.run(grade, cwd=course, env=env_b, capture_output=True, text=True, timeout=900)
    assert first_b.returncode == 0, first_b.stdout[-3000:] + first_b.stderr[-3000:]
    assert "BROKEN erin (" in first_b.stdout  # counted as it finishes, not only after
    for line in (
        "BROKEN  erin: text.ipynb: not a readable notebook",
        "MISSING fay: arithmetic.ipynb: not handed in; graded 0",
        "NOTE    fay: arithmetic (1).ipynb: not a notebook of the assignment (perhaps arithmetic.ipynb, renamed)",
        "1 with a notebook not read (BROKEN), 1 with notebooks missing (MISSING), "
        "1 with a notebook under another name (NOTE)",
        "judge seed: ",
    ):
        assert line in first_b.stdout, line
    out = course / "autograder" / assignment
    assert _cells(out / "course" / "gradebook.db", assignment) == route_a

    # Each route's report and feedback name the problems.
    report_a = course / CLASS_REPORT / assignment
    problems = {("erin", "text", "unreadable"), ("fay", "arithmetic", "missing"), ("fay", "arithmetic (1)", "renamed")}
    assert _report_problems(report_a) == problems == _report_problems(out)
    assert _nbgrader(course, "generate_feedback", assignment, env=env).returncode == 0
    for folder in (course / "feedback" / "erin" / assignment, out / "feedback" / "erin"):
        page = (folder / "arithmetic.html").read_text()
        assert "Not graded in this assignment" in page and "text.ipynb" in page, folder
    unreadable_page = (course / "feedback" / "erin" / assignment / "text.html").read_text()
    assert "The grader could not read this notebook" in unreadable_page

    # A person overrides partly-wrong's arithmetic test on both routes; then the answer changes.
    for db in (course / "gradebook.db", out / "course" / "gradebook.db"):
        _override(db, "partly-wrong", "arithmetic", "test-arithmetic", 1.0)
    fixed = second_assignment._answered(
        "arithmetic.ipynb", "def add(a, b):\n    return a + b", second_assignment.JUDGED_SOURCES
    )
    nbformat.write(fixed, submitted / "partly-wrong" / assignment / "arithmetic.ipynb")
    again_a = _nbgrader(course, "autograde", assignment, "--force", env=env, timeout=600)
    assert again_a.returncode == 0, again_a.stderr[-3000:]
    again_b = subprocess.run(grade, cwd=course, env=env_b, capture_output=True, text=True, timeout=900)
    assert again_b.returncode == 0, again_b.stdout[-3000:] + again_b.stderr[-3000:]
    recheck = "RECHECK partly-wrong: arithmetic/test-arithmetic: the answer changed since it was graded by hand"
    assert recheck in again_a.stdout + again_a.stderr and recheck in again_b.stdout
    route_a = _cells(course / "gradebook.db", assignment)
    route_b = _cells(out / "course" / "gradebook.db", assignment)
    assert route_b == route_a, "the two routes disagree after the re-check"
    assert route_a[("partly-wrong", "arithmetic", "test-arithmetic")] == (1.0, True)  # kept, to check again

    # One truth on route B: the terminal, cells.csv, grades.csv, the report, formgrader's API, the
    # LMS file and nbgrader's own export agree on every total and on what is pending.
    truth, pending = _totals(route_b), {(s, nb, g) for (s, nb, g), (_, p) in route_b.items() if p}
    table = {
        line.split()[0]: float(next(w for w in reversed(line.split()) if "/" in w).split("/")[0])
        for line in again_b.stdout.splitlines()
        if line.split() and line.split()[0] in truth
    }
    cells = _rows(out / "cells.csv")
    from_cells: dict[str, float] = {}
    for row in cells:
        from_cells[row["student_id"]] = from_cells.get(row["student_id"], 0.0) + float(row["score"])
    assert {(r["student_id"], r["notebook"], r["grade_id"]) for r in cells if r["pending"] == "yes"} == pending
    grades = {row["student_id"]: float(row["raw_score"]) for row in _rows(out / "grades.csv")}
    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}") as gb:
        formgrader = {s["student"]: float(s["score"]) for s in gb.submission_dicts(assignment)}
    exported = subprocess.run(
        [str(bin_dir / "autograder"), "export", "--out", str(out), "--allow-pending"],
        cwd=course,
        env=env_b,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert exported.returncode == 0, exported.stderr
    assert "PENDING partly-wrong: arithmetic/test-arithmetic" in exported.stdout
    lms = {row["SIS User ID"]: float(row[assignment]) for row in _rows(out / f"lms-{assignment}.csv")[1:]}
    assert _nbgrader(out / "course", "export", env=env).returncode == 0
    nbgrader_own = {row["student_id"]: float(row["raw_score"]) for row in _rows(out / "course" / "grades.csv")}
    report = _report_totals(out)
    report_pending = {
        (student, row["notebook"], row["cell"])
        for row in _rows(out / "report" / "pending-manual.csv")
        for student in row["who"].split(", ")
    }
    assert table == from_cells == grades == formgrader == nbgrader_own == report == truth
    assert lms == {s: v for s, v in truth.items() if s not in {p[0] for p in pending}}
    assert report_pending == pending
    # And on route A: the report and nbgrader's export count what its gradebook counts, and the
    # export names what awaits a person.
    course_said = _nbgrader(course, "export", env=env)
    assert course_said.returncode == 0, course_said.stderr
    waiting: dict[str, list[str]] = {}
    for student, notebook, cell in pending:
        waiting.setdefault(student, []).append(f"{notebook}/{cell}")
    for student, cells in waiting.items():
        assert f"PENDING {student}: {assignment}: {', '.join(sorted(cells))}" in course_said.stderr, course_said.stderr
    assert f"{len(waiting)} submission(s) have cells awaiting a person" in course_said.stderr
    course_export = {row["student_id"]: float(row["raw_score"]) for row in _rows(course / "grades.csv")}
    assert _report_totals(report_a) == course_export == _totals(route_a)
