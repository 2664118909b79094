"""A graded student's files, written as a grading run merges them: the course folders a stock
nbgrader run would leave (for formgrader) and the feedback pages in OUT/feedback/<student>/.

Regenerating feedback later, from the gradebook, is autograder/run/feedback.py.
"""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

from autograder.course.assignment import assignment_of
from autograder.course.outcomes import Trouble


def flag_note(page: str, findings: list[str]) -> str:
    items = "".join(f"<li>{html.escape(f)}</li>" for f in findings)
    note = (
        '<div class="alert alert-warning" style="border:2px solid #c60;padding:1em;margin:1em">'
        "<strong>Flagged for instructor review.</strong> The grader found code that can interfere "
        f"with grading; an instructor will look at it. Your scores are unchanged.<ul>{items}</ul></div>"
    )
    return re.sub(r"(<body[^>]*>)", lambda m: m.group(1) + note, page, count=1)


def write_student_files(out: Path, course: Path, result, submission: dict[str, Path], findings: list[Trouble]) -> None:
    """The course folder a stock nbgrader run would leave (for formgrader), and OUT/feedback/."""
    student, assignment = result.student_id, assignment_of(course).id
    submitted = course / "submitted" / student / assignment
    autograded = course / "autograded" / student / assignment
    feedback = course / "feedback" / student / assignment
    for folder in (submitted, autograded, feedback, out / "feedback" / student):
        folder.mkdir(parents=True, exist_ok=True)
    for name, path in submission.items():
        shutil.copyfile(path, submitted / name)
    for name, text in result.autograded.items():
        (autograded / name).write_text(text)
    # The assignment's other files beside the notebooks, as nbgrader's own autograde leaves them.
    for source in sorted((course / "source" / assignment).iterdir()) if result.autograded else []:
        if source.is_file() and source.suffix == ".py":
            shutil.copyfile(source, autograded / source.name)
    for name, page in result.feedback.items():
        notes = [finding.message for finding in findings if finding.notebook == Path(name).stem + ".ipynb"]
        if notes:
            page = flag_note(page, notes)
        (feedback / name).write_text(page)
        (out / "feedback" / student / name).write_text(page)
