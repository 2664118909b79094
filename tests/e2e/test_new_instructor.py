"""What a new instructor does, from the README alone, outside this checkout.

A fresh virtual environment in a folder of its own, `pip install` of the built wheel (with the
lesson's extra), `nbgrader quickstart`, the assignment installed by `autograder
install-assignment`, `autograder configure`, then a small class graded both ways, `nbgrader
autograde` and `autograder grade --course`, feedback, export, a manual grade and a regrade of
each. Nothing of the checkout is on the path: the commands are the venv's own. CI runs it as an
ordinary user (ci-grader).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.course.defaults import ASSIGNMENT
from autograder.course.paths import RELEASE, ROOT, SOLUTIONS

#: ann answers stages 1 and 4 (4's written answer waits for a person); bob hands in a blank stage 1.
CLASS = {
    "ann": {"01-understand.ipynb": SOLUTIONS, "04-exercise.ipynb": SOLUTIONS},
    "bob": {"01-understand.ipynb": RELEASE},
}
MANUAL = ("04-exercise", "answer-why-hvp")


def _run(*command, cwd: Path, env: dict, timeout: int = 900) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command}: {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def instructor(tmp_path_factory) -> dict:
    """A fresh venv with the grader installed from its wheel, in a folder outside the checkout."""
    home = tmp_path_factory.mktemp("new-instructor")
    assert not home.is_relative_to(ROOT)
    wheels = home / "wheels"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(wheels), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = wheels.glob("*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(home / "venv")], check=True, timeout=300)
    bin_dir = home / "venv" / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "JUPYTER_CONFIG_DIR")}
    env |= {"PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", "HOME": str(home), "MPLBACKEND": "Agg"}
    # The releases the bundle is tested with (its lock), taken from pip's cache: the same
    # environment on every run, not whatever the index holds today.
    _run(
        bin_dir / "pip",
        "install",
        "--quiet",
        "--no-compile",  # half of pip's time; Python compiles what it imports
        f"{wheel}[lesson]",
        "--constraint",
        ROOT / "requirements-grader.txt",
        cwd=home,
        env=env,
    )
    return {"home": home, "env": env, "bin": bin_dir}


def _scores(python: Path, course: Path, env: dict) -> dict:
    """{(student, notebook, cell): (score, needs_manual_grade)} from the course's gradebook, read
    by the instructor's own Python (nbgrader's Gradebook, as formgrader reads it)."""
    code = (
        "import json, sys\nfrom nbgrader.api import Gradebook\n"
        "with Gradebook(sys.argv[1]) as gb:\n"
        "    print(json.dumps([[s.student.id, nb.name, g.name, g.score, g.needs_manual_grade]\n"
        f"        for s in gb.find_assignment({ASSIGNMENT!r}).submissions for nb in s.notebooks for g in nb.grades]))\n"
    )
    done = _run(python, "-c", code, f"sqlite:///{course / 'gradebook.db'}", cwd=course, env=env)
    return {(s, nb, g): (score, manual) for s, nb, g, score, manual in json.loads(done.stdout)}


def _grade_by_hand(python: Path, course: Path, env: dict, score: float) -> None:
    """What formgrader's box does: the manual score of ann's written answer, in the gradebook."""
    code = (
        "import sys\nfrom nbgrader.api import Gradebook\n"
        "with Gradebook(sys.argv[1]) as gb:\n"
        f"    g = gb.find_grade({MANUAL[1]!r}, {MANUAL[0]!r}, {ASSIGNMENT!r}, 'ann')\n"
        "    g.manual_score = float(sys.argv[2]); g.needs_manual_grade = False\n"
        "    gb.db.commit()\n"
    )
    _run(python, "-c", code, f"sqlite:///{course / 'gradebook.db'}", str(score), cwd=course, env=env)


def _exported(path: Path) -> dict[str, float]:
    """nbgrader export's raw score of each student of the class in this assignment (quickstart's
    own example students and assignment may be in the course's gradebook too)."""
    rows = csv.DictReader(open(path))
    return {
        r["student_id"]: float(r["raw_score"])
        for r in rows
        if r["assignment"] == ASSIGNMENT and r["student_id"] in CLASS
    }


def _totals(rows: dict) -> dict[str, float]:
    totals: dict[str, float] = {}
    for (student, _, _), (score, _) in rows.items():
        totals[student] = totals.get(student, 0.0) + (score or 0.0)
    return totals


def test_new_instructor_grades_from_readme(instructor):
    """A new instructor grades a class from the README."""
    home, env, bin_dir = instructor["home"], instructor["env"], instructor["bin"]
    python = bin_dir / "python"
    # The installed grader knows nothing of the checkout.
    where = _run(python, "-c", "import autograder; print(autograder.__file__)", cwd=home, env=env).stdout
    assert not Path(where.strip()).is_relative_to(ROOT)
    _run(bin_dir / "nbgrader", "quickstart", "course", cwd=home, env=env, timeout=1200)
    course = home / "course"
    shutil.rmtree(course / "source" / "ps1")  # quickstart's example assignment; its header stays
    installed = _run(bin_dir / "autograder", "install-assignment", ROOT, course, cwd=home, env=env).stdout
    assert "remat_sweep_reference.py" not in installed
    _run(bin_dir / "autograder", "configure", course, "--checks-module", "remat_checks", cwd=home, env=env)
    _run(bin_dir / "nbgrader", "generate_assignment", ASSIGNMENT, cwd=course, env=env)
    for student, notebooks in CLASS.items():
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        for name, origin in notebooks.items():
            shutil.copyfile(origin / name, folder / name)

    # Route 1: nbgrader's own commands, the grader's lines in the course's config.
    graded = _run(bin_dir / "nbgrader", "autograde", ASSIGNMENT, cwd=course, env=env)
    assert "has changed!" not in graded.stdout + graded.stderr  # an honest class: no checksum warning
    stock = _scores(python, course, env)
    assert stock[("ann", *MANUAL)][1] is True, "the written answer does not wait for a person"
    auto = {k: v for k, v in stock.items() if (k[1], k[2]) != MANUAL}
    handed_in = {(s, nb) for s, notebooks in CLASS.items() for nb in (Path(n).stem for n in notebooks)}
    # ann's answers earn their points; every other notebook (bob's blank one, those not handed in) 0.
    assert all(score > 0 for (s, nb, _), (score, _) in auto.items() if s == "ann" and (s, nb) in handed_in), auto
    assert all(score == 0 for (s, nb, _), (score, _) in auto.items() if s == "bob" or (s, nb) not in handed_in), auto
    _run(bin_dir / "nbgrader", "generate_feedback", ASSIGNMENT, cwd=course, env=env)
    pages = sorted((course / "feedback").rglob("*.html"))
    assert len(pages) == 3 and not [p for p in pages if "BEGIN HIDDEN TESTS" in p.read_text()]
    _run(bin_dir / "nbgrader", "export", cwd=course, env=env)
    exported = _exported(course / "grades.csv")
    assert exported == pytest.approx(_totals(stock))

    # Route 2: the grader's own command on the same course; the out is derived from it.
    cache = home / "reference-cache"
    command = [bin_dir / "autograder", "grade", course / "submitted", "--course", course, "--assignment", ASSIGNMENT]
    command += ["--reference-cache", cache]
    first = _run(*command, cwd=home, env=env, timeout=1500)
    out = course / "autograder" / ASSIGNMENT
    ours = _scores(python, out / "course", env)
    assert ours == stock, "the two routes disagree on an honest class"

    # A person grades the written answer on both routes; a regrade keeps it and does not ask again.
    _grade_by_hand(python, course, env, 1.5)
    _grade_by_hand(python, out / "course", env, 1.5)
    _run(bin_dir / "nbgrader", "autograde", ASSIGNMENT, "--force", cwd=course, env=env)
    again = _scores(python, course, env)
    assert again[("ann", *MANUAL)] == (1.5, False), "nbgrader autograde --force asked for the grade again"
    regraded = _run(*command, cwd=home, env=env, timeout=1500)
    assert "RECHECK" not in regraded.stdout
    ours = _scores(python, out / "course", env)
    assert ours[("ann", *MANUAL)] == (1.5, False)
    assert ours == again
    # The console table, grades.csv and nbgrader's export agree.
    table = {
        line.split()[0]: [t for t in line.split() if "/" in t][-1]
        for line in regraded.stdout.splitlines()
        if line.startswith(("ann ", "bob "))
    }
    grades = _exported(out / "grades.csv")
    _run(bin_dir / "nbgrader", "export", cwd=out / "course", env=env)
    assert grades == _exported(out / "course" / "grades.csv") == pytest.approx(_totals(ours))
    assert {s: float(t.split("/")[0]) for s, t in table.items()} == pytest.approx(grades)
    assert "reference run" in first.stdout + first.stderr
    assert "kept from an earlier run" in regraded.stdout + regraded.stderr
    # Nothing of the class inside the environment every kernel reads.
    # (nbgrader ships a gradebook.db of its own among its tests' files.)
    nbgraders = home / "venv" / "lib"
    made = [p for p in (home / "venv").rglob("gradebook.db") if "nbgrader/tests/" not in str(p.relative_to(nbgraders))]
    assert made == [] and not list((home / "venv").rglob(f"{ASSIGNMENT}"))
