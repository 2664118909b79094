"""Merging a grading run's results into the class gradebook, keeping what was graded by hand.

Automatic scores and comments are replaced; manual scores, extra credit and manual comments are
kept. Where a student's answer changed since it was graded by hand, the manual score is kept but
the cell is marked as needing a manual grade again (formgrader then shows its "Mark as graded"
button), and a RECHECK line says so.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder.course.assignment import assignment_of
from autograder.course.outcomes import Trouble
from autograder.gradebook.class_gradebook import db_url, quiet_gradebook_warnings


def _student_folders(course: Path, student: str) -> list[Path]:
    name = assignment_of(course).id
    return [course / kind / student / name for kind in ("submitted", "autograded", "feedback")]


def answers_of(text: str | None) -> dict[str, str] | None:
    """The learner's answers in a notebook: {grade_id of each solution cell: its source}, in order."""
    if text is None:
        return None
    try:
        notebook = nbformat.reads(text, as_version=4)
    except Exception:
        return None
    found = {}
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id"):
            found[meta["grade_id"]] = cell.source.strip()
    return found


def answer_for(answers: dict[str, str] | None, grade_id: str) -> str | None:
    """What a grade judges: the answer cell itself for a written or free-response answer, every
    answer of the notebook for a test cell."""
    if answers is None:
        return None
    if grade_id in answers:
        return answers[grade_id]
    return json.dumps(list(answers.items()))


def recheck_line(student: str, notebook: str, grade, comment) -> str:
    """The RECHECK line of a manual grade kept on an answer that changed (both routes print it):
    `grade` and `comment` are the gradebook's rows (nbgrader's Grade, and its Comment or None)."""
    kept = f"{grade.manual_score:g}" if grade.manual_score is not None else "the automatic score"
    if grade.extra_credit:
        kept += f" + {grade.extra_credit:g} extra credit"
    what = "grade and comment are" if comment is not None and comment.manual_comment else "grade is"
    return (
        f"RECHECK {student}: {notebook}/{grade.name}: the answer changed since it was graded by hand; the "
        f"manual {what} kept ({kept} of {grade.max_score:g}) and the cell is marked for a manual re-check in formgrader"
    )


@dataclass
class Merged:
    """What a merge could not store ({student: why}) and the RECHECK lines of manual grades to look at again."""

    failed: dict[str, str] = field(default_factory=dict)
    rechecks: list[str] = field(default_factory=list)


def merge_into_gradebook(course: Path, results: list, flagged: dict[str, list[Trouble]]) -> Merged:
    """Write each student's results into the class gradebook, in one process, in order.

    Automatic scores and comments are replaced. A grade entered by hand (manual score or extra
    credit) and every manual comment are kept. When the student's answer behind a manual grade
    changed since the last run (compared with OUT/course/autograded), the grade is kept but marked
    as needing a manual grade, and a RECHECK line says so. The student's course folders are then
    emptied for write_student_files. Each student is merged on their own: one whose merge fails
    is rolled back and left as they were, and named in `failed`.
    """
    from nbgrader.api import Gradebook

    quiet_gradebook_warnings()
    merged = Merged()
    with Gradebook(db_url(course)) as gb:
        for result in sorted(results, key=lambda r: r.student_id):
            before = _as_it_was(gb, course, result.student_id)
            try:
                rechecks = _merge_one(gb, course, result, flagged)
                gb.db.commit()
            except Exception as error:  # this student's results only: the class goes on
                gb.db.rollback()
                _put_back(gb, course, result.student_id, before)
                merged.failed[result.student_id] = f"{type(error).__name__}: {str(error)[:300]}"
                continue
            merged.rechecks += rechecks
            student = result.student_id
            for folder in _student_folders(course, student):
                shutil.rmtree(folder, ignore_errors=True)
            shutil.rmtree(course.parent / "feedback" / student, ignore_errors=True)
    return merged


def _as_it_was(gb, course: Path, student: str) -> tuple[bool, bool, object]:
    """Whether the student and their submission were in the gradebook, and its timestamp: nbgrader's
    update_or_create_student and _submission commit on their own, so a rollback cannot undo them."""
    from nbgrader.api import MissingEntry

    try:
        return True, True, gb.find_submission(assignment_of(course).id, student).timestamp
    except MissingEntry:
        pass
    try:
        gb.find_student(student)
        return True, False, None
    except MissingEntry:
        return False, False, None


def _put_back(gb, course: Path, student: str, before: tuple[bool, bool, object]) -> None:
    """Undo what nbgrader committed of a failed merge: a student or submission it added, a timestamp."""
    had_student, had_submission, timestamp = before
    name = assignment_of(course).id
    try:
        if not had_student:
            gb.remove_student(student)
        elif not had_submission:
            gb.remove_submission(name, student)
        else:
            gb.find_submission(name, student).timestamp = timestamp
            gb.db.commit()
    except Exception:  # nothing was added after all: as it was
        gb.db.rollback()


def _merge_one(gb, course: Path, result, flagged) -> list[str]:
    """One student's results into the open gradebook (not committed); the RECHECK lines."""
    rechecks = []
    student = result.student_id
    gb.update_or_create_student(student)
    extra = {"timestamp": result.timestamp} if result.timestamp else {}
    name = assignment_of(course).id
    submission = gb.update_or_create_submission(name, student, **extra)
    before_folder = course / "autograded" / student / name
    for notebook in submission.notebooks:
        graded = result.notebooks.get(notebook.name)
        old_file = before_folder / f"{notebook.name}.ipynb"
        before = answers_of(old_file.read_text() if old_file.exists() else None)
        after = answers_of(result.autograded.get(f"{notebook.name}.ipynb"))
        comments = {c.name: c for c in notebook.comments}
        for grade in notebook.grades:
            saved = graded.grades.get(grade.name) if graded else None
            # Not graded (missing, unreadable or broken notebook): 0, like nbgrader does for a missing one.
            grade.auto_score = saved.auto_score if saved else 0.0
            by_hand = grade.manual_score is not None or grade.extra_credit is not None
            if not by_hand:
                grade.needs_manual_grade = saved.needs_manual_grade if saved else False
            elif answer_for(before, grade.name) != answer_for(after, grade.name):
                grade.needs_manual_grade = True
                rechecks.append(recheck_line(student, notebook.name, grade, comments.get(grade.name)))
            # else: the same answer: the instructor's grade stands, as it stood.
        for comment in notebook.comments:
            comment.auto_comment = graded.comments.get(comment.name) if graded else None
        notebook.late_submission_penalty = graded.late_penalty if graded else None
        notebook.flagged = any(finding.notebook == f"{notebook.name}.ipynb" for finding in flagged.get(student, []))
    return rechecks
