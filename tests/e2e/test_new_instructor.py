"""What a new instructor does: the README's instructor quick start, run as written, outside this checkout.

The code block is taken from README.md itself and run by bash in a home folder of its own: a
fresh virtual environment, `pip install` of this checkout with the lesson's extra and the lock
as constraints, `nbgrader quickstart`, the assignment installed and configured, generated; then,
where the block's comment says to put each learner's notebooks, the test puts a small class;
then both routes grade it, formgrader is started at the address it prints (the one step an
instructor does by hand: the test opens the address and stops the server), feedback and export.
Only `BUNDLE=` is given its value. CI runs it as an ordinary user (ci-grader).

The class has what a real one has: ann answers stages 1 and 4 (4's written answer waits for a
person), bob hands in a blank stage 1, carol a stage 2 that is not JSON and her stage 1 under
another name (`01-understand (1).ipynb`). Both routes must give the same score in every cell,
then again after a person grades ann's written answer and overrides a test of hers, and ann
changes that answer (a re-check, printed by both routes).
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

from autograder.adapters.lesson import ASSIGNMENT
from autograder.course.paths import RELEASE, ROOT, SOLUTIONS

README = ROOT / "README.md"
#: The line of the block that the test gives a value, and the comment where the class goes.
BUNDLE_LINE = "BUNDLE=/path/to/this/checkout"
COLLECT = "# otherwise put each learner's notebooks in submitted/<student_id>/performance-05/."
BROKEN = '{"cells": [{"cell_type": "code", "source": "def layer_backward('
CLASS = {
    "ann": {
        "01-understand.ipynb": SOLUTIONS / "01-understand.ipynb",
        "04-exercise.ipynb": SOLUTIONS / "04-exercise.ipynb",
    },
    "bob": {"01-understand.ipynb": RELEASE / "01-understand.ipynb"},
    "carol": {"01-understand (1).ipynb": SOLUTIONS / "01-understand.ipynb", "02-build.ipynb": BROKEN},
}
WRITTEN = ("04-exercise", "answer-why-hvp")  # ann's written answer: a person grades it
OVERRIDDEN = ("01-understand", "test-layer-backward")  # a test of ann's a person overrides

#: Started for the block's `jupyter lab` line: the server it starts, its address opened, then stopped.
#: (Jupyter refuses root without --allow-root; an instructor, as CI's ci-grader, is no root.)
FORMGRADER_SHIM = r"""
jupyter() {
  if [ "$1" != lab ]; then command jupyter "$@"; return; fi
  local as_root=(); [ "$(id -u)" = 0 ] && as_root=(--allow-root)
  command jupyter "$@" "${as_root[@]}" > "$HOME/formgrader.log" 2>&1 &
  local server=$!
  python "$HOME/open-formgrader.py" "$HOME/formgrader.log"
  local opened=$?
  kill "$server"; wait "$server" || true
  return $opened
}
"""
OPEN_FORMGRADER = r"""
import re, sys, time, urllib.request
log, deadline = sys.argv[1], time.monotonic() + 180
while time.monotonic() < deadline:
    found = re.search(r"http://(?:localhost|127\.0\.0\.1):\d+/formgrader\?token=\w+", open(log).read())
    if found:
        page = urllib.request.urlopen(found.group(0), timeout=60).read().decode()
        print("formgrader answered at", found.group(0).split("?")[0], "with", len(page), "characters")
        sys.exit(0 if "formgrader" in page.lower() else 1)
    time.sleep(1)
sys.exit("formgrader printed no address:\n" + open(log).read()[-2000:])
"""


def readme_block() -> str:
    """The instructor quick start's one code block, as README.md shows it."""
    text = README.read_text()
    section = text[text.index("**Instructors**") :]
    block = section[section.index("```bash\n") + len("```bash\n") :]
    return block[: block.index("```")]


def _script(block: str, bundle: Path, collect: str) -> str:
    """The block as bash runs it: `set -e`, BUNDLE given, the class put where the comment says."""
    assert block.count(BUNDLE_LINE) == 1 and block.count(COLLECT) == 1, "the README's block changed its shape"
    block = block.replace(BUNDLE_LINE, f"BUNDLE={bundle}").replace(COLLECT, f"{COLLECT}\n{collect}")
    return "set -e\n" + FORMGRADER_SHIM + block


def _home_env(home: Path) -> dict:
    """A new instructor's shell: their home, the system's commands, nothing of this checkout."""
    return {
        "HOME": str(home),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "TMPDIR": str(home / "tmp"),
    }


def _run(command: list, cwd: Path, env: dict, timeout: int = 1500) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command}: {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


def _gradebook(python: Path, db: Path, env: dict, code: str, *args) -> str:
    """Run `code` with the instructor's own Python against the gradebook at db (nbgrader's API, as
    formgrader uses it); its standard output."""
    prelude = "import json, sys\nfrom nbgrader.api import Gradebook\ngb = Gradebook(sys.argv[1])\n"
    return _run([python, "-c", prelude + code, f"sqlite:///{db}", *args], db.parent, env).stdout


def _cells(python: Path, db: Path, env: dict) -> dict[tuple[str, str, str], tuple[float, bool]]:
    code = (
        f"print(json.dumps([[s.student.id, nb.name, g.name, g.score, g.needs_manual_grade]\n"
        f"    for s in gb.find_assignment({ASSIGNMENT!r}).submissions for nb in s.notebooks for g in nb.grades]))"
    )
    rows = json.loads(_gradebook(python, db, env, code))
    return {(s, nb, g): (float(score), bool(pending)) for s, nb, g, score, pending in rows}


def _grade_by_hand(python: Path, db: Path, env: dict, cell: tuple[str, str], score: float) -> None:
    code = (
        f"g = gb.find_grade({cell[1]!r}, {cell[0]!r}, {ASSIGNMENT!r}, 'ann')\n"
        "g.manual_score = float(sys.argv[2]); g.needs_manual_grade = False\ngb.db.commit()"
    )
    _gradebook(python, db, env, code, str(score))


def _totals(cells: dict) -> dict[str, float]:
    totals: dict[str, float] = {}
    for (student, _, _), (score, _) in cells.items():
        if student in CLASS:  # quickstart's own example students may be in the course's gradebook
            totals[student] = totals.get(student, 0.0) + score
    return totals


def _csv(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _exported(path: Path) -> dict[str, float]:
    return {r["student_id"]: float(r["raw_score"]) for r in _csv(path) if r["assignment"] == ASSIGNMENT}


def test_readme_instructor_quick_start(tmp_path_factory):
    """The README's instructor quick start runs as written, and grades a class alike by both routes."""
    home = tmp_path_factory.mktemp("new-instructor")
    assert not home.is_relative_to(ROOT)
    (home / "tmp").mkdir()
    (home / "open-formgrader.py").write_text(OPEN_FORMGRADER)
    klass = home / "the-class"
    for student, notebooks in CLASS.items():
        folder = klass / student / ASSIGNMENT
        folder.mkdir(parents=True)
        for name, origin in notebooks.items():
            if isinstance(origin, Path):
                shutil.copyfile(origin, folder / name)
            else:
                (folder / name).write_text(origin)
    collect = f"mkdir -p submitted && cp -r {klass}/. submitted/"
    env = _home_env(home)
    done = subprocess.run(
        ["bash", "-c", _script(readme_block(), ROOT, collect)],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=3000,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-6000:]

    course, venv = home / "my-course", home / "grading"
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    env = {**env, "PATH": f"{bin_dir}:{env['PATH']}", "VIRTUAL_ENV": str(venv)}
    # The installed grader knows nothing of the checkout.
    where = _run([python, "-c", "import autograder; print(autograder.__file__)"], home, env).stdout
    assert not Path(where.strip()).is_relative_to(ROOT)
    # formgrader answered at the address it printed.
    assert "formgrader answered at http://" in log
    # Route A named every problem; nbgrader alone would have stopped carol at NotJSONError.
    for line in (
        "BROKEN  carol: 02-build.ipynb: not a readable notebook",
        "NOTE    carol: 01-understand (1).ipynb: not a notebook of the assignment (perhaps 01-understand.ipynb",
        "MISSING bob: 02-build.ipynb, 03-experiment.ipynb, 04-exercise.ipynb, 05-evidence.ipynb: not handed in",
    ):
        assert line in log, line
    assert "NotJSONError" not in log and "SAWarning" not in log and "has changed!" not in log

    out = course / "autograder" / ASSIGNMENT
    route_a = _cells(python, course / "gradebook.db", env)
    route_b = _cells(python, out / "course" / "gradebook.db", env)
    assert route_b == route_a, "the two routes disagree"
    assert route_a[("ann", *WRITTEN)] == (0.0, True), "the written answer does not wait for a person"
    earned = {k: score for k, (score, _) in route_a.items() if (k[1], k[2]) != WRITTEN}
    assert all(
        score > 0 for (s, nb, _), score in earned.items() if s == "ann" and nb in ("01-understand", "04-exercise")
    )
    assert all(score == 0 for (s, _, _), score in earned.items() if s in ("bob", "carol"))
    # Both routes' class reports, where the README's table says.
    for report in (course / "class-report" / ASSIGNMENT, out):
        problems = {(r["student"], r["notebook"], r["kind"]) for r in _csv(report / "report" / "needs-a-person.csv")}
        assert {("carol", "02-build", "unreadable"), ("carol", "01-understand (1)", "renamed")} <= problems, report
        assert ("bob", "02-build", "missing") in problems
    # Feedback (route A: nbgrader's, hidden tests out), and nbgrader's export of route A's gradebook.
    pages = sorted((course / "feedback").rglob("*.html"))
    assert {p.parent.parent.name for p in pages} == set(CLASS)
    assert not [p for p in pages if "BEGIN HIDDEN TESTS" in p.read_text()]
    carol = (course / "feedback" / "carol" / ASSIGNMENT / "02-build.html").read_text()
    assert "The grader could not read this notebook" in carol and "Not graded in this assignment" in carol
    assert _exported(course / "grades.csv") == pytest.approx(_totals(route_a))
    # ... and names what its totals count before a person graded it: ann's written answer.
    waiting = [line for line in log.splitlines() if f"PENDING ann: {ASSIGNMENT}: " in line]
    assert len(waiting) == 1 and f"{WRITTEN[0]}/{WRITTEN[1]}" in waiting[0], log[-3000:]
    # The reference run is kept beside route B's out, for the next run.
    assert (course / "autograder" / "reference-cache").is_dir()

    # A person grades ann's written answer and overrides a test of hers, on both routes; then ann
    # changes the written answer. Both routes keep both grades, re-check the changed one only.
    for db in (course / "gradebook.db", out / "course" / "gradebook.db"):
        _grade_by_hand(python, db, env, WRITTEN, 1.5)
        _grade_by_hand(python, db, env, OVERRIDDEN, 2.0)
    exercise = course / "submitted" / "ann" / ASSIGNMENT / "04-exercise.ipynb"
    notebook = nbformat.read(exercise, as_version=4)
    (answer,) = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == WRITTEN[1]]
    answer.source += "\n\nAnd one more reason, added after grading."
    nbformat.write(notebook, exercise)
    again_a = _run([bin_dir / "nbgrader", "autograde", ASSIGNMENT, "--force"], course, env)
    again_b = _run(
        [bin_dir / "autograder", "grade", "submitted", "--course", ".", "--assignment", ASSIGNMENT], course, env
    )
    recheck = f"RECHECK ann: {WRITTEN[0]}/{WRITTEN[1]}: the answer changed since it was graded by hand"
    assert recheck in again_a.stdout + again_a.stderr and recheck in again_b.stdout
    assert f"RECHECK ann: {OVERRIDDEN[0]}" not in again_a.stdout + again_a.stderr + again_b.stdout
    assert "reference run: kept from an earlier run" in again_b.stdout
    route_a = _cells(python, course / "gradebook.db", env)
    route_b = _cells(python, out / "course" / "gradebook.db", env)
    assert route_b == route_a, "the two routes disagree after the re-check"
    assert route_a[("ann", *WRITTEN)] == (1.5, True) and route_a[("ann", *OVERRIDDEN)] == (2.0, False)

    # Every output of route B counts what its gradebook counts: the table, cells.csv, grades.csv,
    # the report; route A's report and nbgrader's export what the course's gradebook counts.
    totals = _totals(route_b)
    table = {
        words[0]: float(next(w for w in reversed(words) if "/" in w).split("/")[0])
        for words in (line.split() for line in again_b.stdout.splitlines())
        if words and words[0] in CLASS
    }
    from_cells: dict[str, float] = {}
    for row in _csv(out / "cells.csv"):
        from_cells[row["student_id"]] = from_cells.get(row["student_id"], 0.0) + float(row["score"])
    report_b = {r["student"]: float(r["total"]) for r in _csv(out / "report" / "scores.csv")}
    assert table == from_cells == report_b == pytest.approx(totals)
    assert {r["student_id"]: float(r["raw_score"]) for r in _csv(out / "grades.csv")} == pytest.approx(totals)
    report_a = {
        r["student"]: float(r["total"]) for r in _csv(course / "class-report" / ASSIGNMENT / "report" / "scores.csv")
    }
    assert {s: v for s, v in report_a.items() if s in CLASS} == pytest.approx(_totals(route_a))

    # Nothing of the class inside the environment every kernel reads (nbgrader ships a
    # gradebook.db of its own among its tests' files), nor left in the instructor's temporary folder.
    made = [p for p in venv.rglob("gradebook.db") if "nbgrader/tests/" not in str(p)]
    assert made == [] and not list(venv.rglob(ASSIGNMENT))
    assert [p.name for p in (home / "tmp").iterdir() if p.name.startswith("autograder-")] == []


def test_the_blocks_commands_are_the_ones_the_docs_name():
    """Each command of the README's block is one a reader can find again in docs/instructors.md, and
    the block keeps its `cd`s: one into the home folder, one into the course."""
    block = readme_block()
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert [c for c in commands if c.startswith("cd ")] == ["cd ~ && nbgrader quickstart my-course", "cd my-course"]
    docs = (ROOT / "docs" / "instructors.md").read_text()
    for word in (
        "install-assignment",
        "configure",
        "generate_assignment",
        "autograde",
        "autograder grade",
        "formgrader",
        "generate_feedback",
        "nbgrader export",
    ):
        assert word in block and word in docs, word
    assert re.search(r"http://localhost:8888/formgrader\?token=", block)
