"""The instructor's manual grading in formgrader, in a real JupyterLab, in headless Chromium.

The bundled samples (autograder/samples/, 3 students), autograded once per test session, are
copied into a temporary OUT; then formgrader is started as the README says (`make formgrader
OUT=...`: JupyterLab from the venv, with nbgrader's server extensions, in OUT/course, where it
finds nbgrader_config.py and gradebook.db). In the browser the instructor goes Manual Grading ->
performance-05 -> 04-exercise -> sample-complete, types a score and a comment into the written
answer `answer-why-hvp`, and reloads the page to see them kept. Then, from the command line:
`python -m autograder.commands.export` regenerates cells.csv from the gradebook (not rebuilt: the grade
formgrader wrote to is still the same row), `nbgrader export` in the course folder carries the
score, and `python -m autograder.run.feedback` regenerates the student's feedback page with the
score and the comment, which the browser opens last.

Screenshots of every step: runs/browser/test_formgrader_manual_grade_to_export-NN-<step>.png.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import labdriver as lab
import pytest
from labdriver import ROOT, VENV
from nbgrader.api import Gradebook

pytestmark = pytest.mark.browser

ASSIGNMENT = "performance-05"
STUDENT, NOTEBOOK, CELL = "sample-complete", "04-exercise", "answer-why-hvp"
SCORE = 1.5
LOADED = lab.FORMGRADER_LOADED


def _grades_csv(path: Path) -> dict[str, dict]:
    with open(path, newline="") as handle:
        return {row["student_id"]: row for row in csv.DictReader(handle)}


def _cells_csv(path: Path) -> dict[tuple[str, str, str], tuple[str, str]]:
    """cells.csv's (score, pending) of each cell."""
    with open(path, newline="") as handle:
        return {
            (r["student_id"], r["notebook"], r["grade_id"]): (r["score"], r["pending"]) for r in csv.DictReader(handle)
        }


@pytest.fixture(scope="module")
def graded_class(chromium_path, tmp_path_factory) -> Path:
    """OUT after autograding the samples, a copy of the session's grading of them
    (tests/grading.py; the browser is checked first: no grading to skip)."""
    from tests.grading import graded_samples

    out = graded_samples(tmp_path_factory.mktemp("formgrader") / "out")
    assert sorted(_grades_csv(out / "grades.csv")) == ["sample-complete", "sample-partial", "sample-two-mistakes"]
    assert _cells_csv(out / "cells.csv")[(STUDENT, NOTEBOOK, CELL)] == ("0.0", "yes"), (
        "the written answer should await manual grading"
    )
    return out


@pytest.fixture(scope="module")
def formgrader(graded_class, serve_formgrader):
    with serve_formgrader(graded_class, "formgrader") as server:
        yield server


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(ROOT)}
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_formgrader_manual_grade_to_export(formgrader, graded_class, make_page):
    out, course = graded_class, graded_class / "course"
    before = float(_grades_csv(out / "grades.csv")[STUDENT]["score"])
    comment = f"Right about the recomputation; say why the HVP is linear in v. [{uuid.uuid4().hex[:8]}]"

    page = make_page()
    shot = page.shots
    # 1-3. formgrader's address -> Manual Grading -> the assignment -> the notebook -> the submission.
    listing = lab.open_formgrader_submission(page, formgrader, ASSIGNMENT, NOTEBOOK, STUDENT, shot)
    # One row per student whose notebook was autograded (formgrader lists what it can show).
    shown = sorted(p.parent.parent.name for p in (course / "autograded").glob(f"*/{ASSIGNMENT}/{NOTEBOOK}.ipynb"))
    assert STUDENT in shown
    assert listing["listed"] == len(shown)
    assert "needs manual grade" in listing["row"].lower(), listing["row"]

    # 4. The submission: the written answer's score box and comment box, once formgrader has loaded.
    score = page.locator(f"input.score#{CELL}")
    box = page.locator(f"textarea#{CELL}-comment")
    assert score.input_value() == "", "the answer already has a manual score"
    assert "needs_manual_grade" in (score.get_attribute("class") or "")
    lab.show(page, box)
    shot("answer-before-grading")

    # Saved when the box loses focus, as when the instructor tabs on to the comment.
    saved, said = lab.save_manual_grade(page, CELL, SCORE, comment)
    grade_id = saved["id"]
    assert saved["manual_score"] == SCORE and saved["needs_manual_grade"] is False
    assert said["manual_comment"] == comment
    lab.show(page, box)
    shot("answer-graded")

    # 5. Reloaded, the page shows what the server kept.
    page.reload(wait_until="domcontentloaded")
    page.wait_for_function(LOADED)
    assert float(score.input_value()) == SCORE
    assert box.input_value() == comment
    lab.show(page, box)
    shot("answer-after-reload")

    # 6. The gradebook holds it, in the row formgrader wrote to.
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        grade = gb.find_grade(CELL, NOTEBOOK, ASSIGNMENT, STUDENT)
        assert (grade.id, grade.manual_score, grade.needs_manual_grade) == (grade_id, SCORE, False)
        assert gb.find_comment(CELL, NOTEBOOK, ASSIGNMENT, STUDENT).manual_comment == comment

    # 7. cells.csv and grades.csv regenerated from the gradebook (README: make export), which is kept.
    export = _run(sys.executable, "-m", "autograder.commands.export", "--out", str(out))
    assert export.returncode == 1, export.stdout + export.stderr  # other written answers still wait
    assert f"PENDING {STUDENT}: 05-evidence/explanation" in export.stdout, export.stdout
    assert "not written" in export.stderr
    assert _cells_csv(out / "cells.csv")[(STUDENT, NOTEBOOK, CELL)] == (str(SCORE), "no")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        assert gb.find_grade(CELL, NOTEBOOK, ASSIGNMENT, STUDENT).id == grade_id, "the gradebook was rebuilt"
    assert float(_grades_csv(out / "grades.csv")[STUDENT]["score"]) == pytest.approx(before + SCORE)

    # 8. nbgrader's own export, in the course folder, carries the score too.
    (course / "grades.csv").unlink(missing_ok=True)
    stock = _run(str(VENV / "bin" / "nbgrader"), "export", cwd=course)
    assert stock.returncode == 0, stock.stdout + stock.stderr
    exported = _grades_csv(course / "grades.csv")
    assert float(exported[STUDENT]["score"]) == pytest.approx(before + SCORE), exported[STUDENT]
    for other in ("sample-partial", "sample-two-mistakes"):
        assert exported[other]["score"] == _grades_csv(out / "grades.csv")[other]["score"]

    # 9. The student's feedback, regenerated (make feedback STUDENT=...), shows score and comment.
    feedback = _run(sys.executable, "-m", "autograder.run.feedback", "--out", str(out), "--student", STUDENT)
    assert feedback.returncode == 0, feedback.stdout + feedback.stderr
    html_page = out / "feedback" / STUDENT / f"{NOTEBOOK}.html"
    page.goto(html_page.as_uri(), wait_until="load")
    anchor = page.locator(f'a[name="comment-{CELL}"]')
    assert anchor.count() == 1, "the feedback page has no comment for the written answer"
    text = page.locator("body").inner_text()
    assert comment in text
    assert re.search(rf"Written response\s*\(Score: {SCORE} / 2\.0\)", text), text[:3000]
    assert "BEGIN HIDDEN TESTS" not in text
    anchor.scroll_into_view_if_needed()
    page.mouse.wheel(0, -250)
    shot("feedback-page")

    # formgrader's pages load MathJax from a CDN; offline, that script fails and takes formgrader's
    # keyboard shortcuts with it (scores and comments still save). Nothing else may fail.
    errors = [m for m in page.console_messages if m.startswith("[pageerror]") and "MathJax is not defined" not in m]
    assert errors == [], errors
