"""The class files, written from the class gradebook alone: cells.csv, grades.csv, flags.csv and
the LMS import file (lms-<assignment>.csv). `python -m autograder.commands.export` rewrites them.
"""

from __future__ import annotations

import csv
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder.course.assignment import assignment_of
from autograder.course.outcomes import Trouble
from autograder.gradebook.class_gradebook import db_url, require_gradebook
from autograder.gradebook.totals import ClassTotals, class_totals, totals_in

log = logging.getLogger(__name__)

#: cells.csv: `score` is what the gradebook counts now; `pending` says the cell awaits a person
#: (a written answer not graded yet, or a RECHECK), its score counted as it stands (gradebook/totals.py).
CELL_COLUMNS = ("student_id", "notebook", "grade_id", "score", "max_score", "pending")

FLAG_COLUMNS = ("student_id", "finding")

#: Canvas's gradebook import layout: these columns, then one column per assignment.
LMS_ID_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")

LMS_POINTS_ROW = "    Points Possible"  # as Canvas writes it in its own export

LMS_FILE = "lms-{assignment}.csv"  # the LMS import file, named for the assignment


def lms_file(course: Path) -> str:
    return LMS_FILE.format(assignment=assignment_of(course).id)


def source_cell_order(course: Path) -> dict[str, list[str]]:
    """Graded cells' grade_ids per notebook, in the order they appear in the course's source
    (the one the class gradebook was built from)."""
    order = {}
    assignment = assignment_of(course)
    for name in assignment.notebooks:
        notebook = nbformat.read(course / "source" / assignment.id / name, as_version=4)
        order[Path(name).stem] = [
            c.metadata["nbgrader"]["grade_id"] for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade")
        ]
    return order


def course_totals(course: Path, students: list[str] | None = None) -> ClassTotals:
    """The class's scores (gradebook/totals.py), each notebook's cells in the source's order."""
    return class_totals(db_url(course), assignment_of(course).id, students, source_cell_order(course))


def read_cells(course: Path, students: list[str] | None = None) -> list[dict]:
    """cells.csv's rows: one per graded cell per student (default: every student with a
    submission), from the one reading of the gradebook every output shares."""
    return [
        {
            "student_id": cell.student,
            "notebook": cell.notebook,
            "grade_id": cell.grade_id,
            "score": cell.score,
            "max_score": cell.max_score,
            "pending": "yes" if cell.pending else "no",
        }
        for cell in course_totals(course, students).cells
    ]


def export_grades(course: Path, destination: Path) -> None:
    """nbgrader's own CSV export of the class gradebook (what `nbgrader export` writes)."""
    from nbgrader.api import Gradebook
    from nbgrader.plugins import CsvExportPlugin

    with Gradebook(db_url(course)) as gb:
        CsvExportPlugin(to=str(destination)).export(gb)


@dataclass
class LmsExport:
    """The LMS file's rows, and the students left out of it because cells await manual grading."""

    header: list[str]
    points: list[str]
    rows: list[list[str]]
    pending: dict[str, list[str]]  # student -> ["notebook/grade_id", ...]


def _number(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def lms_export(course: Path, total_only: bool = False) -> LmsExport:
    """Canvas's gradebook import layout, one row per student of the class gradebook.

    Columns: Student, ID, SIS User ID, SIS Login ID, Section, then the assignment's name (the total
    after late penalties, as grades.csv's `score`) and, unless total_only, `<assignment> <notebook>`
    for each notebook. Student is "Last, First" when the gradebook has the names, else the student
    id; ID is the gradebook's lms_user_id (Canvas's user id, when set); SIS User ID is the nbgrader
    student id. A student without a submission scores 0. A student with a cell awaiting a person
    (a written answer, or a re-check) has no row: they are listed in `pending` instead.
    """
    from nbgrader.api import Gradebook

    totals = course_totals(course)
    assignment = assignment_of(course)
    stems, name = assignment.stems, assignment.id
    header = [*LMS_ID_COLUMNS, name] + ([] if total_only else [f"{name} {s}" for s in stems])
    points = [LMS_POINTS_ROW, "", "", "", "", _number(totals.maximum())]
    points += [] if total_only else [_number(totals.maximum(s)) for s in stems]
    rows, pending = [], totals.pending_by_student()
    with Gradebook(db_url(course)) as gb:
        for student in sorted(gb.students, key=lambda s: s.id):
            if student.id in pending:
                continue
            shown = (
                f"{student.last_name}, {student.first_name}" if student.last_name and student.first_name else student.id
            )
            row = [shown, student.lms_user_id or "", student.id, "", "", _number(totals.posted(student.id))]
            rows.append(row + ([] if total_only else [_number(totals.posted(student.id, s)) for s in stems]))
    return LmsExport(header, points, rows, pending)


#: The longest PENDING line: under the console's cut (1,000 characters), so that a line never
#: loses its count or half a name to it.
PENDING_LINE_WIDTH = 960


def pending_lines(pending: dict[str, list[str]], assignment: str | None = None) -> list[str]:
    """One PENDING line per student: the cells (notebook/grade_id) that await a person, after the
    assignment's name where a course has more than the one; as many names as fit in
    PENDING_LINE_WIDTH characters, then how many more (a name is shown whole or not at all)."""
    where = f"{assignment}: " if assignment is not None else ""
    lines = []
    for student, cells in sorted(pending.items()):
        start = f"PENDING {student}: {where}"
        room = PENDING_LINE_WIDTH - len(start) - len(f" and {len(cells)} more")
        shown: list[str] = []
        width = 0  # of ", ".join(shown)
        for cell in cells:
            width += len(cell) + (2 if shown else 0)
            if width > room:
                break
            shown.append(cell)
        left = len(cells) - len(shown)
        if not shown:
            lines.append(f"{start}{left} cell(s), their names too long for this line")
        else:
            lines.append(start + ", ".join(shown) + (f" and {left} more" if left else ""))
    return lines


def awaiting_a_person(gb, assignments: list[str], students=()) -> dict[str, dict[str, list[str]]]:
    """{assignment: {student: ["notebook/grade_id", ...]}}: the pending cells (gradebook/totals.py)
    of each of these assignments' submissions, of these students (all where none are named), in
    the open gradebook gb."""
    waiting = {
        assignment: totals_in(gb, assignment, students or None).pending_by_student() for assignment in assignments
    }
    return {assignment: named for assignment, named in waiting.items() if named}


def write_lms_file(
    out: Path, course: Path, allow_pending: bool = False, total_only: bool = False
) -> tuple[Path | None, LmsExport]:
    """Write OUT/lms-<assignment>.csv; (its path, the export). While any cell awaits manual
    grading the file is not written (a stale one is removed), unless allow_pending: then it is
    written without the students whose grading is not finished."""
    export = lms_export(course, total_only)
    target = Path(out) / lms_file(course)
    if export.pending and not allow_pending:
        target.unlink(missing_ok=True)
        return None, export
    with open(target, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(export.header)
        writer.writerow(export.points)
        writer.writerows(export.rows)
    return target, export


def read_flags(out: Path) -> list[tuple[str, str]]:
    """OUT/flags.csv's (student_id, finding) rows; [] when there is none."""
    path = Path(out) / "flags.csv"
    if not path.exists():
        return []
    with open(path, newline="") as handle:
        return [(row["student_id"], row["finding"]) for row in csv.DictReader(handle)]


def flag_findings(out: Path, student: str) -> dict[str, list[str]]:
    """{notebook file name: [finding, ...]} of one student, from OUT/flags.csv."""
    found: dict[str, list[str]] = {}
    for who, finding in read_flags(out):
        match = re.match(r"^(\S+\.ipynb): (.*)$", finding, re.S)
        if who == student and match:
            found.setdefault(match.group(1), []).append(match.group(2))
    return found


def write_class_files(out: Path, course: Path, flagged: dict[str, list[Trouble]], graded: list[str]) -> list[dict]:
    """After a grading run: OUT/cells.csv, grades.csv and the LMS file from the class gradebook
    (every student in it, not only those graded now), and OUT/flags.csv: this run's findings for
    the students graded now, the earlier ones for the others. Returns cells.csv's rows."""
    out = Path(out)
    kept = [(who, finding) for who, finding in read_flags(out) if who not in set(graded)]
    rows = kept + [(student, finding.line()) for student in flagged for finding in flagged[student]]
    by_student = sorted(rows, key=lambda r: r[0])
    with open(out / "flags.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(FLAG_COLUMNS)
        writer.writerows(by_student)
    cells = regenerate_class_files(out)
    written, export = write_lms_file(out, course)
    if written is None:
        log.warning(
            "%s not written: %d student(s) have cells awaiting manual grading (formgrader on %s); then run "
            "`autograder export --out %s`",
            lms_file(course),
            len(export.pending),
            course,
            out,
        )
    return cells


def regenerate_class_files(out: Path) -> list[dict]:
    """OUT/cells.csv and OUT/grades.csv again from the class gradebook, which is not rebuilt."""
    out = Path(out)
    course = require_gradebook(out)
    cells = read_cells(course)
    with open(out / "cells.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CELL_COLUMNS)
        writer.writeheader()
        writer.writerows(cells)
    export_grades(course, out / "grades.csv")
    return cells
