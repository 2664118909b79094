"""Unit tests of autograder/gradebook/merge.py: a run's results merged into a small nbgrader gradebook."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import nbformat
import nbgrader.api
import pytest
from nbgrader.api import Gradebook

from autograder.course.outcomes import CellGrade, NotebookGrades, Trouble, TroubleKind
from autograder.gradebook.class_gradebook import db_url, quiet_gradebook_warnings
from autograder.gradebook.merge import answer_for, answers_of, merge_into_gradebook
from autograder.run.worker import StudentResult
from autograder.upstream.nbgrader import schema_head

ASSIGNMENT = "ps1"


def _notebook(answers: dict[str, str]) -> str:
    """An autograded notebook's JSON: one solution cell per answer, and a cell that is no answer."""
    cells = [nbformat.v4.new_markdown_cell("# Instructions")]
    for grade_id, source in answers.items():
        cell = nbformat.v4.new_code_cell(source)
        cell.metadata["nbgrader"] = {"solution": True, "grade_id": grade_id}
        cells.append(cell)
    return nbformat.writes(nbformat.v4.new_notebook(cells=cells))


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A gradebook with one assignment, notebook 01: a test cell `check` (2 points), a written
    answer `answer` (1 point, graded by hand) and a code answer `code` that `check` tests."""
    quiet_gradebook_warnings()
    folder = tmp_path_factory.mktemp("template")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nbgrader.api, "get_alembic_version", schema_head)  # read here, not by running `alembic`
        gb = Gradebook(f"sqlite:///{folder / 'gradebook.db'}")
    with gb:
        gb.add_assignment(ASSIGNMENT)
        gb.add_notebook("01", ASSIGNMENT)
        gb.add_grade_cell("check", "01", ASSIGNMENT, max_score=2, cell_type="code")
        gb.add_solution_cell("answer", "01", ASSIGNMENT)
        gb.add_grade_cell("answer", "01", ASSIGNMENT, max_score=1, cell_type="markdown")
        gb.add_solution_cell("code", "01", ASSIGNMENT)
    return folder / "gradebook.db"


@pytest.fixture
def course(tmp_path, template) -> Path:
    course = tmp_path / "out" / "course"
    (course / "source" / ASSIGNMENT).mkdir(parents=True)
    (course / "source" / ASSIGNMENT / "01.ipynb").write_text(_notebook({}))
    shutil.copy2(template, course / "gradebook.db")
    return course


def _result(student: str, check: float = 1.5, answers: dict | None = None, **notebook) -> StudentResult:
    """What a worker returns for a student whose notebook 01 was graded."""
    answers = {"answer": "Because it is faster.", "code": "x = 1"} if answers is None else answers
    graded = {
        "grades": {"check": CellGrade(check, False), "answer": CellGrade(None, True)},
        "comments": {"answer": None, "code": "No comment"},
        "late_penalty": 0.0,
    }
    graded |= notebook
    return StudentResult(
        student,
        timestamp="2024-05-01 10:00:00",
        notebooks={"01": NotebookGrades(**graded)},
        autograded={"01.ipynb": _notebook(answers)},
    )


def _flag(notebook: str) -> Trouble:
    return Trouble(TroubleKind.REVIEW, "odd", notebook)


def _previous_run(course: Path, student: str, answers: dict | None = None) -> None:
    """What the last run left in OUT/course/autograded for the student (write_student_files)."""
    answers = {"answer": "Because it is faster.", "code": "x = 1"} if answers is None else answers
    folder = course / "autograded" / student / ASSIGNMENT
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "01.ipynb").write_text(_notebook(answers))


def _grade_by_hand(course: Path, student: str, cell: str, *, score=None, extra=None, comment=None) -> None:
    with Gradebook(db_url(course)) as gb:
        grade = gb.find_grade(cell, "01", ASSIGNMENT, student)
        grade.manual_score, grade.extra_credit, grade.needs_manual_grade = score, extra, False
        if comment is not None:
            gb.find_comment(cell, "01", ASSIGNMENT, student).manual_comment = comment
        gb.db.commit()


def _stored(course: Path, student: str) -> dict:
    """What the gradebook holds of a student's notebook 01."""
    with Gradebook(db_url(course)) as gb:
        nb = gb.find_submission_notebook("01", ASSIGNMENT, student)
        return {
            "grades": {
                g.name: (g.auto_score, g.manual_score, g.extra_credit, bool(g.needs_manual_grade)) for g in nb.grades
            },
            "auto_comments": {c.name: c.auto_comment for c in nb.comments},
            "manual_comments": {c.name: c.manual_comment for c in nb.comments},
            "late_penalty": nb.late_submission_penalty,
            "flagged": nb.flagged,
            "timestamp": gb.find_submission(ASSIGNMENT, student).timestamp,
        }


def test_merge_stores_new_students_scores(course):
    """A student new to the gradebook gets the run's automatic scores, comments, penalty, flag and timestamp."""
    merged = merge_into_gradebook(course, [_result("ada", late_penalty=0.5)], {"ada": [_flag("01.ipynb")]})
    assert merged.failed == {} and merged.rechecks == []
    stored = _stored(course, "ada")
    assert stored["grades"] == {"check": (1.5, None, None, False), "answer": (None, None, None, True)}
    assert stored["auto_comments"] == {"answer": None, "code": "No comment"}
    assert stored["late_penalty"] == 0.5
    assert stored["flagged"] is True
    assert stored["timestamp"].isoformat().startswith("2024-05-01T10:00:00")


def test_merge_replaces_earlier_auto_scores(course):
    """A second run's automatic scores and comments replace the first run's."""
    merge_into_gradebook(course, [_result("ada", check=2.0)], {})
    merge_into_gradebook(course, [_result("ada", check=0.5, comments={"answer": None, "code": "Try again"})], {})
    stored = _stored(course, "ada")
    assert stored["grades"]["check"] == (0.5, None, None, False)
    assert stored["auto_comments"]["code"] == "Try again"


def test_merge_clears_flag_no_longer_raised(course):
    """A notebook flagged by an earlier run is unflagged when this run finds nothing against it."""
    merge_into_gradebook(course, [_result("ada")], {"ada": [_flag("01.ipynb")]})
    merge_into_gradebook(course, [_result("ada")], {"ada": [_flag("02.ipynb")]})
    assert _stored(course, "ada")["flagged"] is False


def test_merge_keeps_manual_grade_if_unchanged(course):
    """A manual score and comment on an unchanged answer stay as the instructor left them, with no RECHECK."""
    merge_into_gradebook(course, [_result("ada")], {})
    _grade_by_hand(course, "ada", "answer", score=0.5, comment="Say why.")
    _previous_run(course, "ada")
    merged = merge_into_gradebook(course, [_result("ada", check=1.0)], {})
    assert merged.rechecks == []
    stored = _stored(course, "ada")
    assert stored["grades"]["answer"] == (None, 0.5, None, False)
    assert stored["grades"]["check"] == (1.0, None, None, False)
    assert stored["manual_comments"]["answer"] == "Say why."


def test_merge_marks_changedanswer_for_recheck(course):
    """A manual score on an answer that changed is kept, marked as needing a manual grade, and named in a RECHECK."""
    merge_into_gradebook(course, [_result("ada")], {})
    _grade_by_hand(course, "ada", "answer", score=0.5)
    _previous_run(course, "ada")
    merged = merge_into_gradebook(course, [_result("ada", answers={"answer": "Rewritten.", "code": "x = 1"})], {})
    assert _stored(course, "ada")["grades"]["answer"] == (None, 0.5, None, True)
    assert len(merged.rechecks) == 1
    line = merged.rechecks[0]
    assert line.startswith("RECHECK ada: 01/answer: the answer changed")
    assert "the manual grade is kept (0.5 of 1)" in line


def test_merge_recheck_names_kept_manual_comment(course):
    """The RECHECK line of a changed answer says the manual comment is kept too when there is one."""
    merge_into_gradebook(course, [_result("ada")], {})
    _grade_by_hand(course, "ada", "answer", score=1.0, comment="Well put.")
    _previous_run(course, "ada")
    merged = merge_into_gradebook(course, [_result("ada", answers={"answer": "Other.", "code": "x = 1"})], {})
    assert [("grade and comment are" in line, "(1 of 1)" in line) for line in merged.rechecks] == [(True, True)]
    assert _stored(course, "ada")["manual_comments"]["answer"] == "Well put."


def test_merge_rechecks_test_cell_on_change(course):
    """Extra credit on a test cell is kept and rechecked when any answer of the notebook changed, and the unchanged written answer is not."""
    merge_into_gradebook(course, [_result("ada")], {})
    _grade_by_hand(course, "ada", "check", extra=1.0)
    _grade_by_hand(course, "ada", "answer", score=1.0)
    _previous_run(course, "ada")
    merged = merge_into_gradebook(
        course, [_result("ada", answers={"answer": "Because it is faster.", "code": "x = 2"})], {}
    )
    assert len(merged.rechecks) == 1
    assert merged.rechecks[0].startswith("RECHECK ada: 01/check:")
    assert "(the automatic score + 1 extra credit of 2)" in merged.rechecks[0]
    stored = _stored(course, "ada")["grades"]
    assert stored["check"] == (1.5, None, 1.0, True)
    assert stored["answer"] == (None, 1.0, None, False)


def test_merge_rechecks_without_earlier(course):
    """A manual grade whose earlier autograded notebook is gone cannot be compared, so it is rechecked."""
    merge_into_gradebook(course, [_result("ada")], {})
    _grade_by_hand(course, "ada", "answer", score=0.0)
    merged = merge_into_gradebook(course, [_result("ada")], {})
    assert [line.split(": ")[1] for line in merged.rechecks] == ["01/answer"]
    assert "(0 of 1)" in merged.rechecks[0]


def test_merge_zeroes_notebook_not_graded(course):
    """A notebook missing from the results gets 0 points, no automatic comment and no penalty."""
    merge_into_gradebook(course, [_result("ada", late_penalty=1.0)], {})
    result = _result("ada")
    result.notebooks, result.autograded = {}, {}
    merge_into_gradebook(course, [result], {})
    stored = _stored(course, "ada")
    assert stored["grades"] == {"check": (0.0, None, None, False), "answer": (0.0, None, None, False)}
    assert stored["auto_comments"] == {"answer": None, "code": None}
    assert stored["late_penalty"] is None


def test_merge_rolls_back_failed_student(course):
    """A student whose results cannot be stored keeps the earlier scores and files, is named, and the others are merged."""
    merge_into_gradebook(course, [_result("ada", check=2.0)], {})
    for student in ("ada", "cy"):
        _previous_run(course, student)
    malformed = _result("ada", check=0.0)
    # fails after the new scores were set, before the next student
    malformed.notebooks["01"] = dataclasses.replace(malformed.notebooks["01"], comments=None)
    merged = merge_into_gradebook(course, [_result("cy"), malformed], {})
    assert list(merged.failed) == ["ada"]
    assert merged.failed["ada"].startswith("AttributeError: ")
    assert _stored(course, "ada")["grades"]["check"] == (2.0, None, None, False)
    assert _stored(course, "cy")["grades"]["check"] == (1.5, None, None, False)
    assert (course / "autograded" / "ada" / ASSIGNMENT / "01.ipynb").exists()
    assert not (course / "autograded" / "cy").joinpath(ASSIGNMENT).exists()


def test_merge_failed_new_student_left_out(course):
    """A student new to the gradebook whose results cannot be stored is left out of it, with no submission scored 0."""
    malformed = _result("zed")
    malformed.notebooks["01"] = dataclasses.replace(malformed.notebooks["01"], comments=None)
    assert list(merge_into_gradebook(course, [malformed], {}).failed) == ["zed"]
    with Gradebook(db_url(course)) as gb:
        left = ([s.student.id for s in gb.find_assignment(ASSIGNMENT).submissions], [s.id for s in gb.students])
    assert left == ([], [])


def test_merge_failed_keeps_earlier_timestamp(course):
    """A student whose results cannot be stored keeps the earlier run's submission time."""
    merge_into_gradebook(course, [_result("ada")], {})
    malformed = _result("ada")
    malformed.timestamp = "2030-01-01 00:00:00"
    malformed.notebooks["01"] = dataclasses.replace(malformed.notebooks["01"], comments=None)
    assert list(merge_into_gradebook(course, [malformed], {}).failed) == ["ada"]
    assert _stored(course, "ada")["timestamp"].year == 2024


def test_merge_empties_merged_students_folders(course):
    """After a student is merged, their submitted, autograded and feedback folders are removed, and no one else's."""
    for student in ("ada", "cy"):
        for kind in ("submitted", "autograded", "feedback"):
            (course / kind / student / ASSIGNMENT).mkdir(parents=True)
        (course.parent / "feedback" / student).mkdir(parents=True, exist_ok=True)
    merge_into_gradebook(course, [_result("ada")], {})
    for kind in ("submitted", "autograded", "feedback"):
        assert not (course / kind / "ada" / ASSIGNMENT).exists()
        assert (course / kind / "cy" / ASSIGNMENT).exists()
    assert not (course.parent / "feedback" / "ada").exists()
    assert (course.parent / "feedback" / "cy").exists()


def test_answers_reads_solution_cells_only():
    """The answers of a notebook are its solution cells' stripped sources by grade id; an unreadable notebook has none."""
    assert answers_of(_notebook({"a": "  one\n", "b": "two"})) == {"a": "one", "b": "two"}
    assert answers_of("not a notebook") is None
    assert answers_of(None) is None


def testanswer_for_test_cell_is_every_answer():
    """A solution cell's grade judges its own answer; a test cell's grade judges all the notebook's answers."""
    answers = {"a": "one", "b": "two"}
    assert answer_for(answers, "a") == "one"
    assert answer_for(answers, "check") == answer_for({"a": "one", "b": "two"}, "other")
    assert answer_for(answers, "check") != answer_for({"a": "one", "b": "2"}, "check")
    assert answer_for(None, "a") is None
