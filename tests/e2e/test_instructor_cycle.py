"""The instructor's cycle after autograding, from the command line: manual grades survive a
regrade (and are flagged for a re-check when the answer behind them changed), a changed
assignment is refused until the instructor starts a fresh gradebook, the LMS export's layout and
numbers, and feedback regenerated from the gradebook with the manual grade and comment in it.

The samples (autograder/samples/) are graded once per session; every test works on its own copy of
that OUT.
Manual grades are entered through nbgrader's Gradebook API, the way formgrader's handlers
enter them. The browser path is tests/e2e/browser/test_formgrader.py.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook, MissingEntry

from autograder.adapters.lesson import ASSIGNMENT, NOTEBOOKS
from autograder.course.paths import AUTOGRADER, RELEASE, ROOT, SOLUTIONS
from autograder.gradebook.class_gradebook import GradebookError
from autograder.run.grade import class_line, grade
from tests.grading import graded_samples, options

SAMPLES = AUTOGRADER / "samples"
LMS_FILE = f"lms-{ASSIGNMENT}.csv"
PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{Path(PY).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
STEMS = [Path(n).stem for n in NOTEBOOKS]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", *args], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)


def _db(out: Path) -> str:
    return f"sqlite:///{out / 'course' / 'gradebook.db'}"


def _cells(out: Path) -> list[dict]:
    with open(out / "cells.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def _row(out: Path, student: str, notebook: str, cell: str) -> dict:
    return next(r for r in _cells(out) if (r["student_id"], r["notebook"], r["grade_id"]) == (student, notebook, cell))


def _score(out: Path, student: str, notebook: str, cell: str) -> str:
    return _row(out, student, notebook, cell)["score"]


def grade_by_hand(
    out: Path,
    student: str,
    notebook: str,
    cell: str,
    score: float | None,
    comment: str | None = None,
    extra_credit: float | None = None,
) -> None:
    """What formgrader's grade and comment handlers do when an instructor saves a score or comment."""
    with Gradebook(_db(out)) as gb:
        grade_row = gb.find_grade(cell, notebook, ASSIGNMENT, student)
        grade_row.manual_score, grade_row.extra_credit = score, extra_credit
        grade_row.needs_manual_grade = grade_row.manual_score is None and grade_row.auto_score is None
        if comment is not None:
            gb.find_comment(cell, notebook, ASSIGNMENT, student).manual_comment = comment
        gb.db.commit()


def _stored(out: Path, student: str, notebook: str, cell: str) -> tuple:
    with Gradebook(_db(out)) as gb:
        row = gb.find_grade(cell, notebook, ASSIGNMENT, student)
        try:
            comment = gb.find_comment(cell, notebook, ASSIGNMENT, student).manual_comment
        except MissingEntry:  # test cells have no comment, only answers do
            comment = None
        return row.manual_score, row.extra_credit, row.needs_manual_grade, comment


def _with_answer(path: Path, grade_id: str, extra: str) -> None:
    notebook = nbformat.read(path, as_version=4)
    cells = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    assert len(cells) == 1, f"{path.name} has no single {grade_id} cell"
    cells[0].source += extra
    nbformat.write(notebook, path)


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> Path:
    """OUT of the samples, autograded once per session (tests/grading.py); no manual grade yet."""
    return graded_samples(tmp_path_factory.mktemp("graded") / "out")


@pytest.fixture
def out(graded, tmp_path) -> Path:
    copy = tmp_path / "out"
    shutil.copytree(graded, copy)
    return copy


def _documented_sample_scores() -> dict[str, dict[str, tuple[float, float]]]:
    """autograder/samples/README.md's table: {student: {notebook: (points, maximum)}}."""
    table = {}
    for line in (SAMPLES / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| `sample-"):
            pairs = [tuple(float(x) for x in c.rstrip("*").split("/")) for c in cells[1:]]
            table[cells[0].strip("`")] = dict(zip([*STEMS, "total"], pairs))
    return table


def test_the_samples_score_what_their_readme_says(graded):
    documented = _documented_sample_scores()
    assert sorted(documented) == sorted(p.name for p in SAMPLES.iterdir() if p.is_dir())
    found: dict[str, dict[str, list[float]]] = {}
    for row in _cells(graded):
        points = found.setdefault(row["student_id"], {}).setdefault(row["notebook"], [0.0, 0.0])
        points[0] += float(row["score"])
        points[1] += float(row["max_score"])
    # `*`: the notebook was handed in and a written answer in it waits for a person (none in a missing one).
    starred = {
        (line.split("|")[1].strip().strip("`"), STEMS[i])
        for line in (SAMPLES / "README.md").read_text().splitlines()
        if line.startswith("| `sample-")
        for i, cell in enumerate(line.strip().strip("|").split("|")[1 : len(STEMS) + 1])
        if cell.strip().endswith("*")
    }
    pending = {(row["student_id"], row["notebook"]) for row in _cells(graded) if row["pending"] == "yes"}
    assert starred == pending
    for student, notebooks in documented.items():
        for notebook in STEMS:
            assert tuple(found[student][notebook]) == notebooks[notebook], (student, notebook)
        total = tuple(sum(found[student][n][i] for n in STEMS) for i in (0, 1))
        assert total == notebooks["total"], student


def test_flags_csv_clean_for_honest_samples(graded):
    """flags.csv has its header and no finding for honest samples."""
    with open(graded / "flags.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows == [["student_id", "finding"]]


def _manual_cells(out: Path) -> set[tuple[str, str]]:
    """(notebook, grade_id) of the cells that wait for a human, read from the gradebook."""
    with Gradebook(_db(out)) as gb:
        return {
            (nb.name, g.name)
            for s in gb.find_assignment(ASSIGNMENT).submissions
            for nb in s.notebooks
            for g in nb.grades
            if g.needs_manual_grade
        }


# ----------------------------------------------------------------------------------------
# Regrading keeps manual grades
# ----------------------------------------------------------------------------------------
COMPLETE_COMMENT = "Right about recomputation; the linearity in v is missing."
MISTAKES_COMMENT = "Half right: why does a nonuniform direction matter?"
OLD_TEXT = "# the test as an earlier version of the lesson had it"


@pytest.fixture(scope="module")
def regraded(graded, tmp_path_factory):
    """Manual grades entered, then two students graded again (sample-partial is not), one of
    whom changed a written answer since it was graded by hand."""
    root = tmp_path_factory.mktemp("regrade")
    out = root / "out"
    shutil.copytree(graded, out)
    assert ("04-exercise", "answer-why-hvp") in _manual_cells(out)
    grade_by_hand(out, "sample-complete", "04-exercise", "answer-why-hvp", 1.5, COMPLETE_COMMENT)
    grade_by_hand(out, "sample-complete", "05-evidence", "explanation", 2.0, extra_credit=0.5)
    grade_by_hand(out, "sample-two-mistakes", "04-exercise", "answer-why-hvp", 1.0, MISTAKES_COMMENT)
    # An override of an automatic score: partial credit for a failed test.
    grade_by_hand(out, "sample-two-mistakes", "01-understand", "test-layer-backward", 1.0)
    # The gradebook's copy of a test cell as an earlier version of the lesson had it.
    with Gradebook(_db(out)) as gb:
        gb.find_source_cell("test-hvp", "04-exercise", ASSIGNMENT).source = OLD_TEXT
        gb.db.commit()
    before = _cells(out)
    pages_before = {p.name: p.read_text() for p in (out / "feedback" / "sample-partial").glob("*.html")}

    submissions = root / "submissions"
    for student in ("sample-complete", "sample-two-mistakes"):
        shutil.copytree(SAMPLES / student, submissions / student)
    _with_answer(
        submissions / "sample-two-mistakes" / "04-exercise.ipynb",
        "answer-why-hvp",
        "\n\nAdded after the deadline: the HVP is linear in the direction.",
    )
    result = grade(submissions, out, options(), io.StringIO())
    return out, result, "\n".join(result.rechecks), before, pages_before


def test_regrade_keeps_manual_grades_and_comments(regraded):
    out, result, printed, before, pages_before = regraded
    assert result.students == ["sample-complete", "sample-two-mistakes"]
    assert result.in_class == ["sample-complete", "sample-partial", "sample-two-mistakes"]
    assert class_line(result) is not None and class_line(result).endswith(
        "3 student(s): 2 graded in this run, 1 kept as earlier runs stored them (sample-partial)"
    )
    assert _stored(out, "sample-complete", "04-exercise", "answer-why-hvp") == (1.5, None, False, COMPLETE_COMMENT)
    assert _stored(out, "sample-complete", "05-evidence", "explanation") == (2.0, 0.5, False, None)
    assert _stored(out, "sample-two-mistakes", "01-understand", "test-layer-backward")[:3] == (1.0, None, False)
    assert "RECHECK sample-complete" not in printed
    assert "RECHECK sample-two-mistakes: 01-understand" not in printed  # its answers there did not change
    assert _score(out, "sample-complete", "04-exercise", "answer-why-hvp") == "1.5"
    assert _score(out, "sample-complete", "05-evidence", "explanation") == "2.5"
    assert _score(out, "sample-two-mistakes", "01-understand", "test-layer-backward") == "1.0"
    # The student not graded this time keeps their rows, files and pages, as they were.
    assert [r for r in _cells(out) if r["student_id"] == "sample-partial"] == [
        r for r in before if r["student_id"] == "sample-partial"
    ]
    assert {p.name: p.read_text() for p in (out / "feedback" / "sample-partial").glob("*.html")} == pages_before
    assert (out / "course" / "autograded" / "sample-partial" / ASSIGNMENT / "01-understand.ipynb").exists()
    # The regraded students' feedback is regenerated from the gradebook: the manual grade is in it.
    page = (out / "feedback" / "sample-complete" / "04-exercise.html").read_text()
    assert COMPLETE_COMMENT in page and "Score: 1.5 / 2.0" in page
    with open(out / "grades.csv", newline="") as handle:
        assert {row["student_id"] for row in csv.DictReader(handle)} == {
            "sample-complete",
            "sample-partial",
            "sample-two-mistakes",
        }
    # A changed text of a cell (a fixed test) is taken over; its grades stay.
    with Gradebook(_db(out)) as gb:
        source = gb.find_source_cell("test-hvp", "04-exercise", ASSIGNMENT).source
    assert source != OLD_TEXT and "checks.score()" in source


def test_changed_answer_keeps_grade_for_recheck(regraded):
    """A changed answer keeps the grade but flags it for a recheck."""
    out, result, printed, before, pages_before = regraded
    manual_score, _, needs_manual_grade, comment = _stored(out, "sample-two-mistakes", "04-exercise", "answer-why-hvp")
    assert (manual_score, comment) == (1.0, MISTAKES_COMMENT), "the manual grade or comment was lost"
    assert needs_manual_grade is True, "the changed answer is not marked for a re-check"
    line = next(
        (
            line
            for line in printed.splitlines()
            if line.startswith("RECHECK sample-two-mistakes: 04-exercise/answer-why-hvp")
        ),
        None,
    )
    assert line is not None, printed
    assert "changed" in line and "kept" in line
    # Awaits the instructor again, counted as it stands (the kept grade), as grades.csv counts it.
    assert _row(out, "sample-two-mistakes", "04-exercise", "answer-why-hvp") | {"score": "1.0", "pending": "yes"} == (
        _row(out, "sample-two-mistakes", "04-exercise", "answer-why-hvp")
    )
    export = _cli("autograder.commands.export", "--out", str(out))
    assert export.returncode == 1
    assert re.search(r"^PENDING sample-two-mistakes: .*04-exercise/answer-why-hvp", export.stdout, re.M), export.stdout
    # Re-saving the score in formgrader (its "Resolve" button) settles it.
    grade_by_hand(out, "sample-two-mistakes", "04-exercise", "answer-why-hvp", 1.0)
    settled = _cli("autograder.commands.export", "--out", str(out))
    assert settled.returncode == 1  # its other written answer was never graded
    assert "PENDING sample-two-mistakes: 05-evidence/explanation\n" in settled.stdout, settled.stdout
    assert _row(out, "sample-two-mistakes", "04-exercise", "answer-why-hvp")["pending"] == "no"
    assert _score(out, "sample-two-mistakes", "04-exercise", "answer-why-hvp") == "1.0"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_changed_assignment_needs_new_gradebook(out, tmp_path):
    """A changed assignment is refused until a fresh gradebook."""
    # The gradebook as an earlier version of the lesson left it: another point value for a test.
    with Gradebook(_db(out)) as gb:
        gb.find_grade_cell("test-hvp", "04-exercise", ASSIGNMENT).max_score = 4.0
        gb.db.commit()
    marker = out / "course" / "source" / ASSIGNMENT / "kept.txt"
    marker.write_text("the previous source")
    gradebook, cells = _digest(out / "course" / "gradebook.db"), (out / "cells.csv").read_text()
    submissions = tmp_path / "submissions"
    (submissions / "late-student").mkdir(parents=True)
    shutil.copyfile(RELEASE / NOTEBOOKS[0], submissions / "late-student" / NOTEBOOKS[0])

    refused = _cli(
        "autograder.run.grade", str(submissions), "--bundle", str(ROOT), "--out", str(out), "--no-compile-cache"
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.startswith("error: ")
    assert "04-exercise: grade cell 'test-hvp' changed (code, 4 points -> code, 3 points)" in refused.stderr
    assert "--fresh-gradebook" in refused.stderr
    assert _digest(out / "course" / "gradebook.db") == gradebook and (out / "cells.csv").read_text() == cells
    assert marker.exists(), "the course's previous source was not put back"
    with pytest.raises(GradebookError):
        grade(submissions, out, options(), io.StringIO())

    result = grade(submissions, out, options(fresh_gradebook=True), io.StringIO())
    assert result.students == ["late-student"]
    backups = sorted((out / "gradebook-backups").glob("gradebook-*.db"))
    assert len(backups) == 1 and _digest(backups[0]) == gradebook
    with Gradebook(f"sqlite:///{backups[0]}") as gb:
        assert sorted(s.id for s in gb.students) == ["sample-complete", "sample-partial", "sample-two-mistakes"]
    assert {r["student_id"] for r in _cells(out)} == {"late-student"}
    assert sorted(p.name for p in (out / "feedback").iterdir()) == ["late-student"]


# ----------------------------------------------------------------------------------------
# The LMS export
# ----------------------------------------------------------------------------------------
def _lms(out: Path) -> list[list[str]]:
    with open(out / LMS_FILE, newline="") as handle:
        return list(csv.reader(handle))


def test_lms_export_layout_and_numbers(out):
    cells = _cells(out)
    pending = {}
    for row in cells:
        if row["pending"] == "yes":
            pending.setdefault(row["student_id"], []).append(f"{row['notebook']}/{row['grade_id']}")
    assert sorted(pending) == ["sample-complete", "sample-two-mistakes"], pending

    # While written answers wait, no LMS file: every waiting cell is named.
    refused = _cli("autograder.commands.export", "--out", str(out))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    for student, waiting in pending.items():
        assert f"PENDING {student}: {', '.join(sorted(waiting))}" in refused.stdout
    assert "not written" in refused.stderr and not (out / LMS_FILE).exists()

    header = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", ASSIGNMENT] + [
        f"{ASSIGNMENT} {s}" for s in STEMS
    ]
    maxima = {
        s: sum(float(r["max_score"]) for r in cells if r["notebook"] == s and r["student_id"] == cells[0]["student_id"])
        for s in STEMS
    }

    def points(student: str, manual: dict) -> dict[str, float]:
        by_notebook = dict.fromkeys(STEMS, 0.0)
        for row in cells:
            if row["student_id"] == student:
                value = manual.get(row["grade_id"]) if row["pending"] == "yes" else float(row["score"])
                by_notebook[row["notebook"]] += value
        return by_notebook

    def number(text: str) -> float:
        return float(text)

    # --allow-pending: only the students whose grading is finished.
    partial = _cli("autograder.commands.export", "--out", str(out), "--allow-pending")
    assert partial.returncode == 0, partial.stdout + partial.stderr
    rows = _lms(out)
    assert rows[0] == header
    assert rows[1][:6] == ["    Points Possible", "", "", "", "", f"{sum(maxima.values()):g}"]
    assert [number(v) for v in rows[1][6:]] == [maxima[s] for s in STEMS]
    assert [r[2] for r in rows[2:]] == ["sample-partial"]
    expected = points("sample-partial", {})
    assert [number(v) for v in rows[2][5:]] == [sum(expected.values())] + [expected[s] for s in STEMS]
    # sample-partial answered stage 1 only: its total is stage 1's full marks.
    assert number(rows[2][5]) == maxima["01-understand"] > 0

    # The written answers graded by hand; a name and Canvas's user id in the gradebook.
    manual = {
        "sample-complete": {"answer-why-hvp": 2.0, "explanation": 1.5},
        "sample-two-mistakes": {"answer-why-hvp": 0.5, "explanation": 2.0},
    }
    for student, scores in manual.items():
        for cell, score in scores.items():
            notebook = next(r["notebook"] for r in cells if r["grade_id"] == cell)
            grade_by_hand(out, student, notebook, cell, score)
    with Gradebook(_db(out)) as gb:
        gb.update_or_create_student("sample-complete", first_name="Ada", last_name="Lovelace", lms_user_id="4711")
    done = _cli("autograder.commands.export", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    rows = _lms(out)
    assert rows[0] == header and rows[1][0] == "    Points Possible"
    by_id = {r[2]: r for r in rows[2:]}
    assert sorted(by_id) == ["sample-complete", "sample-partial", "sample-two-mistakes"]
    assert by_id["sample-complete"][:5] == ["Lovelace, Ada", "4711", "sample-complete", "", ""]
    assert by_id["sample-partial"][:5] == ["sample-partial", "", "sample-partial", "", ""]
    with open(out / "grades.csv", newline="") as handle:
        nbgrader_totals = {r["student_id"]: float(r["score"]) for r in csv.DictReader(handle)}
    for student, row in by_id.items():
        expected = points(student, manual.get(student, {}))
        assert [number(v) for v in row[6:]] == [expected[s] for s in STEMS], student
        assert number(row[5]) == pytest.approx(sum(expected.values())) == pytest.approx(nbgrader_totals[student])

    # What the samples were made to show: the complete one earns every automatic point, the one
    # with two mistakes loses exactly the points of two cells.
    automatic = [r for r in cells if r["pending"] == "no"]
    complete = [r for r in automatic if r["student_id"] == "sample-complete"]
    assert all(float(r["score"]) == float(r["max_score"]) for r in complete)
    assert number(by_id["sample-complete"][5]) == sum(float(r["max_score"]) for r in complete) + sum(
        manual["sample-complete"].values()
    )
    mistakes = [r for r in automatic if r["student_id"] == "sample-two-mistakes"]
    lost = [r for r in mistakes if float(r["score"]) < float(r["max_score"])]
    assert len(lost) == 2, lost
    assert number(by_id["sample-two-mistakes"][5]) == pytest.approx(
        sum(float(r["max_score"]) for r in mistakes)
        - sum(float(r["max_score"]) - float(r["score"]) for r in lost)
        + sum(manual["sample-two-mistakes"].values())
    )

    total_only = _cli("autograder.commands.export", "--out", str(out), "--total-only")
    assert total_only.returncode == 0
    assert [r[:6] for r in _lms(out)] == [r[:6] for r in rows] and all(len(r) == 6 for r in _lms(out))


def test_export_and_feedback_say_what_is_missing(tmp_path, graded):
    for module in ("autograder.commands.export", "autograder.run.feedback"):
        missing = _cli(module, "--out", str(tmp_path / "nowhere"))
        assert missing.returncode == 2 and "does not exist" in missing.stderr, missing.stderr
        (tmp_path / "empty").mkdir(exist_ok=True)
        empty = _cli(module, "--out", str(tmp_path / "empty"))
        assert empty.returncode == 2 and "no class gradebook" in empty.stderr, empty.stderr
    unknown = _cli("autograder.run.feedback", "--out", str(graded), "--student", "nobody")
    assert unknown.returncode == 2
    assert "'nobody'" in unknown.stderr and "sample-complete" in unknown.stderr


# ----------------------------------------------------------------------------------------
# Feedback from the gradebook
# ----------------------------------------------------------------------------------------
def _hidden_lines(student_folder: Path) -> list[str]:
    """Lines of the hidden tests that neither the release nor this student's notebooks contain."""
    lines = []
    for name in NOTEBOOKS:
        seen = "\n".join(c.source for c in nbformat.read(RELEASE / name, as_version=4).cells)
        if (student_folder / name).exists():
            seen += "\n".join(c.source for c in nbformat.read(student_folder / name, as_version=4).cells)
        for cell in nbformat.read(SOLUTIONS / name, as_version=4).cells:
            match = re.search(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", cell.source, re.S)
            if match:
                lines += [
                    line.strip()
                    for line in match.group(1).splitlines()
                    if len(line.strip()) > 25 and line.strip() not in seen
                ]
    return lines


def _without_times(html: str) -> str:
    return re.sub(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?(\+00:00| UTC)?", "<time>", html)


def test_regenerated_feedback_has_manual_grade(out):
    """Feedback is regenerated with the manual grade and no hidden tests."""
    student = "sample-complete"
    comment = "Good: the HVP differentiates the recomputation too. Add why a nonuniform v matters."
    pages = out / "feedback" / student
    written = (pages / "04-exercise.html").read_text()
    assert comment not in written
    assert re.search(r"Written response</a>\s*\(Score: 0\.0 / 2\.0\)", written)
    untouched = {p: p.read_text() for p in (out / "feedback" / "sample-two-mistakes").glob("*.html")}
    grade_by_hand(out, student, "04-exercise", "answer-why-hvp", 1.5, comment)
    with open(out / "flags.csv", "a", newline="") as handle:  # as the grader records a finding
        csv.writer(handle).writerow((student, "03-experiment.ipynb: line 4: touches the IPython shell"))

    run = _cli("autograder.run.feedback", "--out", str(out), "--student", student)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{student}: 5 page(s)" in run.stdout
    page = (pages / "04-exercise.html").read_text()
    assert comment in page
    assert re.search(r"Written response</a>\s*\(Score: 1\.5 / 2\.0\)", page), "the new score is not in the feedback"
    assert (out / "course" / "feedback" / student / ASSIGNMENT / "04-exercise.html").read_text() == page
    assert "Flagged for instructor review" in (pages / "03-experiment.html").read_text()
    assert "Flagged for instructor review" not in page
    hidden = _hidden_lines(SAMPLES / student)
    assert hidden, "the lesson has hidden tests to hide"
    for path in sorted(pages.glob("*.html")):
        text = path.read_text()
        assert "BEGIN HIDDEN TESTS" not in text, path
        for line in hidden:
            assert line not in text, f"{path.name} shows hidden test source: {line}"
    assert {p: p.read_text() for p in untouched} == untouched, "another student's feedback changed"
    assert sorted(p.name for p in (out / "course" / "feedback" / student / ASSIGNMENT).iterdir()) == sorted(
        f"{s}.html" for s in STEMS
    ), "only feedback pages belong in the feedback folder"

    # The whole class: a student without manual grades gets the very pages grading wrote.
    everyone = _cli("autograder.run.feedback", "--out", str(out))
    assert everyone.returncode == 0, everyone.stdout + everyone.stderr
    for path, before in untouched.items():
        assert _without_times(path.read_text()) == _without_times(before), path.name
    assert sorted(p.name for p in (out / "feedback" / "sample-partial").glob("*.html")) == [
        "01-understand.html",
        "02-build.html",
    ]
