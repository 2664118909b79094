"""The class gradebook of performance-05: built once, then reused, so manual grades survive regrading.

OUT/course is an nbgrader course folder: the assignment's source, nbgrader_config.py, the class
gradebook (gradebook.db) and the students' submitted/, autograded/ and feedback/ folders, which
formgrader reads. The first grading run builds it. Every later run reuses it:

- build_course() refreshes the source beside the existing gradebook (never deletes it);
- prepare_class_course() regenerates the assignment in a scratch course and compares its
  structure (notebooks; grade, solution, task and source cells; cell types; points) with the
  class gradebook's. Unchanged: the class gradebook keeps every student and manual grade, and
  only the cells' text is refreshed. Changed: GradebookError, and the course is left as it was;
  `--fresh-gradebook` starts a new gradebook, the old one backed up in OUT/gradebook-backups/;
- merge_into_gradebook() writes the new automatic scores and keeps every manual score, extra
  credit and manual comment. Where a student's answer changed since it was graded by hand, the
  manual score is kept but the cell is marked as needing a manual grade again (formgrader then
  shows its "Mark as graded" button) and a RECHECK line is printed;
- write_class_files() regenerates OUT/cells.csv, OUT/grades.csv, OUT/flags.csv and the LMS
  import file OUT/lms-performance-05.csv from the gradebook alone (python -m autograder.export).
"""

from __future__ import annotations

import csv
import datetime
import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from . import course as _course
from .course import assignment_of

CELL_COLUMNS = ("student_id", "notebook", "grade_id", "score", "max_score")
FLAG_COLUMNS = ("student_id", "finding")
#: Canvas's gradebook import layout: these columns, then one column per assignment.
LMS_ID_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
LMS_POINTS_ROW = "    Points Possible"  # as Canvas writes it in its own export
LMS_FILE = "lms-{assignment}.csv"  # the LMS import file, named for the assignment


def lms_file(course: Path) -> str:
    return LMS_FILE.format(assignment=assignment_of(course).id)


BACKUPS = "gradebook-backups"
_PREVIOUS = ".previous-course"  # OUT/.previous-course: the source replaced by build_course, until checked


class GradebookError(ValueError):
    """The class gradebook cannot be used as asked (missing, or built from another structure)."""


def _db_url(course: Path) -> str:
    return f"sqlite:///{course / 'gradebook.db'}"


def _quiet() -> None:
    from .worker import quiet_gradebook_warnings

    quiet_gradebook_warnings()


# ----------------------------------------------------------------------------------------
# Building the class course, or reusing it
# ----------------------------------------------------------------------------------------
def _api(course: Path):
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.db_url = _db_url(course)
    config.Exchange.root = str(course / "exchange")  # unused here; nbgrader checks it is writable
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config), config


def backup_gradebook(course: Path) -> Path | None:
    """Copy OUT/course/gradebook.db to OUT/gradebook-backups/gradebook-<UTC time>.db; return the copy."""
    gradebook = course / "gradebook.db"
    if not gradebook.exists():
        return None
    folder = course.parent / BACKUPS
    folder.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    target = folder / f"gradebook-{stamp}.db"
    counter = 1
    while target.exists():
        counter += 1
        target = folder / f"gradebook-{stamp}-{counter}.db"
    shutil.copy2(gradebook, target)
    return target


def build_course(course: Path, fresh: bool = False, origin=None) -> Path:
    """Put the assignment's current source into the class course at `course`; return `course`.

    Without a class gradebook there (or with fresh=True, after backing the gradebook up) the
    course is built from scratch. Otherwise only source/ and nbgrader_config.py are replaced;
    the gradebook and the students' folders stay, and the previous source is set aside until
    prepare_class_course() has found the assignment's structure unchanged (it is put back if not).
    """
    course = Path(course)
    previous = course.parent / _PREVIOUS
    if previous.exists():
        shutil.rmtree(previous)
    if fresh:
        saved = backup_gradebook(course)
        if saved is not None:
            print(f"the previous class gradebook is kept as {saved}")
    if fresh or not (course / "gradebook.db").exists():
        return _course.build_course(course, origin)
    staged = _course.build_course(previous / "next", origin)
    for name in ("source", "nbgrader_config.py"):
        if (course / name).exists():
            shutil.move(str(course / name), str(previous / name))
        shutil.move(str(staged / name), str(course / name))
    shutil.rmtree(staged)
    return course


def _put_back_previous_source(course: Path) -> None:
    previous = course.parent / _PREVIOUS
    for name in ("source", "nbgrader_config.py"):
        if (previous / name).exists():
            target = course / name
            shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
            shutil.move(str(previous / name), str(target))
    shutil.rmtree(previous, ignore_errors=True)


def source_files(course: Path) -> dict[str, bytes]:
    """The course's source folder by relative path: what the compile cache is filled from."""
    return {
        str(p.relative_to(course)): p.read_bytes()
        for p in sorted((course / "source").rglob("*"))
        if p.is_file() and ".ipynb_checkpoints" not in p.parts
    }


def assignment_structure(course: Path) -> dict[str, dict[str, dict]]:
    """{notebook: {kind: {cell name: what must not change}}} as stored in the course's gradebook."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(_db_url(course)) as gb:
        try:
            assignment = gb.find_assignment(assignment_of(course).id)
        except MissingEntry:
            return {}
        return {
            nb.name: {
                "grade cell": {c.name: f"{c.cell_type}, {c.max_score:g} points" for c in nb.grade_cells},
                "solution cell": {c.name: "answer" for c in nb.solution_cells},
                "task cell": {c.name: f"{c.cell_type}, {c.max_score:g} points" for c in nb.task_cells},
                "source cell": {c.name: f"{c.cell_type}{', locked' if c.locked else ''}" for c in nb.source_cells},
            }
            for nb in assignment.notebooks
        }


def structure_changes(old: dict, new: dict) -> list[str]:
    """What differs between two assignment_structure()s, one line each; [] when they agree."""
    lines = []
    for name in sorted(set(old) | set(new)):
        if name not in new:
            lines.append(f"notebook {name} is no longer in the assignment")
            continue
        if name not in old:
            lines.append(f"notebook {name} is new")
            continue
        for kind in new[name]:
            before, after = old[name].get(kind, {}), new[name][kind]
            for cell in sorted(set(before) | set(after)):
                if cell not in after:
                    lines.append(f"{name}: {kind} {cell!r} was removed")
                elif cell not in before:
                    lines.append(f"{name}: {kind} {cell!r} is new ({after[cell]})")
                elif before[cell] != after[cell]:
                    lines.append(f"{name}: {kind} {cell!r} changed ({before[cell]} -> {after[cell]})")
    return lines


def _refresh_cell_text(course: Path, scratch: Path) -> None:
    """Copy the cells' text (and checksums, kernelspec) of the regenerated assignment into the
    class gradebook; ids stay, so no grade or comment is touched."""
    from nbgrader.api import Gradebook

    name = assignment_of(course).id
    with Gradebook(_db_url(scratch)) as new, Gradebook(_db_url(course)) as gb:
        for nb in new.find_assignment(name).notebooks:
            stored = gb.find_notebook(nb.name, name)
            stored.kernelspec = nb.kernelspec
            for cell in nb.source_cells:
                target = gb.find_source_cell(cell.name, nb.name, name)
                target.source, target.checksum = cell.source, cell.checksum
        gb.db.commit()


def prepare_class_course(course: Path, source: dict[str, bytes]) -> tuple[dict[str, bytes], int]:
    """Generate the assignment (source: the course's source_files) and make the class gradebook
    hold it; return the task template (config, source, a gradebook with the assignment and no
    student) and the per-cell timeout.

    A new class gradebook is the generated one. An existing one is kept when the assignment's
    structure is unchanged (the cells' text is refreshed); otherwise GradebookError, and the
    course's previous source is put back.
    """
    course = Path(course)
    name = assignment_of(course).id
    scratch = Path(tempfile.mkdtemp(prefix=f"{name}-assignment-"))
    try:
        shutil.copy2(course / "nbgrader_config.py", scratch / "nbgrader_config.py")
        for relative, data in source.items():
            (scratch / relative).parent.mkdir(parents=True, exist_ok=True)
            (scratch / relative).write_bytes(data)
        api, config = _api(scratch)
        outcome = api.generate_assignment(name, force=True, create=True)
        if not outcome["success"]:
            _put_back_previous_source(course)
            raise RuntimeError(
                f"nbgrader generate_assignment failed:\n{outcome.get('log', '')}{outcome.get('error', '')}"
            )
        if (course / "gradebook.db").exists():
            changes = structure_changes(assignment_structure(course), assignment_structure(scratch))
            if changes:
                _put_back_previous_source(course)
                out = course.parent
                raise GradebookError(
                    f"the class gradebook {course / 'gradebook.db'} holds another version of {name}:\n  "
                    + "\n  ".join(changes)
                    + "\nNothing was changed. Either put the assignment back as it was, or start a new class "
                    f"gradebook with --fresh-gradebook (make autograde FRESH=1): the old one is copied to "
                    f"{out / BACKUPS}/ first, and every manual grade must then be entered again. "
                    "Or grade into another --out."
                )
            _refresh_cell_text(course, scratch)
        else:
            shutil.copy2(scratch / "gradebook.db", course / "gradebook.db")
        shutil.rmtree(course / "release", ignore_errors=True)
        shutil.copytree(scratch / "release", course / "release")
        shutil.rmtree(course.parent / _PREVIOUS, ignore_errors=True)
        template = {
            "nbgrader_config.py": (scratch / "nbgrader_config.py").read_bytes(),
            "gradebook.db": (scratch / "gradebook.db").read_bytes(),
            **source,
        }
        return template, int(config.Execute.timeout)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def clear_outputs(out: Path, fresh: bool = False) -> None:
    """Before grading: a new class (no gradebook yet, or fresh) starts without the files of an
    earlier one. With a gradebook to reuse nothing goes: each student graded now has their own
    files replaced (merge_into_gradebook), the class files are rewritten (write_class_files)."""
    out = Path(out)
    if (out / "course" / "gradebook.db").exists() and not fresh:
        return
    stale = ["feedback", "grades.csv", "cells.csv", "flags.csv", *(p.name for p in out.glob("lms-*.csv"))]
    for name in stale:
        target = out / name
        shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)


# ----------------------------------------------------------------------------------------
# Merging a run's results, keeping what was graded by hand
# ----------------------------------------------------------------------------------------
def _student_folders(course: Path, student: str) -> list[Path]:
    name = assignment_of(course).id
    return [course / kind / student / name for kind in ("submitted", "autograded", "feedback")]


def _answers(text: str | None) -> dict[str, str] | None:
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


def _answer_for(answers: dict[str, str] | None, grade_id: str) -> str | None:
    """What a grade judges: the answer cell itself for a written or free-response answer, every
    answer of the notebook for a test cell."""
    if answers is None:
        return None
    if grade_id in answers:
        return answers[grade_id]
    return json.dumps(list(answers.items()))


def merge_into_gradebook(course: Path, results: list, flagged: dict[str, dict[str, list[str]]]) -> dict[str, str]:
    """Write each student's results into the class gradebook, in one process, in order.

    Automatic scores and comments are replaced. A grade entered by hand (manual score or extra
    credit) and every manual comment are kept. When the student's answer behind a manual grade
    changed since the last run (compared with OUT/course/autograded), the grade is kept but marked
    as needing a manual grade, and a RECHECK line says so (printed). The student's course folders
    are then emptied for write_student_files. Each student is merged on their own: one whose
    merge fails is rolled back and left as they were; returns {student: why} for those.
    """
    from nbgrader.api import Gradebook

    _quiet()
    failed = {}
    with Gradebook(_db_url(course)) as gb:
        for result in sorted(results, key=lambda r: r.student_id):
            try:
                rechecks = _merge_one(gb, course, result, flagged)
                gb.db.commit()
            except Exception as error:  # this student's results only: the class goes on
                gb.db.rollback()
                failed[result.student_id] = f"{type(error).__name__}: {str(error)[:300]}"
                continue
            for line in rechecks:
                print(line)
            student = result.student_id
            for folder in _student_folders(course, student):
                shutil.rmtree(folder, ignore_errors=True)
            shutil.rmtree(course.parent / "feedback" / student, ignore_errors=True)
    return failed


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
        before = _answers(old_file.read_text() if old_file.exists() else None)
        after = _answers(result.autograded.get(f"{notebook.name}.ipynb"))
        comments = {c.name: c for c in notebook.comments}
        for grade in notebook.grades:
            saved = graded["grades"].get(grade.name) if graded else None
            # Not graded (missing, unreadable or broken notebook): 0, like nbgrader does for a missing one.
            grade.auto_score = saved["auto_score"] if saved else 0.0
            by_hand = grade.manual_score is not None or grade.extra_credit is not None
            if not by_hand:
                grade.needs_manual_grade = saved["needs_manual_grade"] if saved else False
            elif _answer_for(before, grade.name) != _answer_for(after, grade.name):
                grade.needs_manual_grade = True
                kept = f"{grade.manual_score:g}" if grade.manual_score is not None else "the automatic score"
                if grade.extra_credit:
                    kept += f" + {grade.extra_credit:g} extra credit"
                comment = comments.get(grade.name)
                what = "grade and comment are" if comment is not None and comment.manual_comment else "grade is"
                rechecks.append(
                    f"RECHECK {student}: {notebook.name}/{grade.name}: the answer changed since it was "
                    f"graded by hand; the manual {what} kept ({kept} of {grade.max_score:g}) and the cell "
                    "is marked for a manual re-check in formgrader"
                )
            # else: the same answer: the instructor's grade stands, as it stood.
        for comment in notebook.comments:
            comment.auto_comment = graded["comments"].get(comment.name) if graded else None
        notebook.late_submission_penalty = graded["late_penalty"] if graded else None
        notebook.flagged = bool(flagged.get(student, {}).get(f"{notebook.name}.ipynb"))
    return rechecks


# ----------------------------------------------------------------------------------------
# Reading the gradebook: cells, grades, the LMS file
# ----------------------------------------------------------------------------------------
def require_gradebook(out: Path) -> Path:
    """OUT/course, checked to hold a class gradebook; GradebookError with what to do otherwise."""
    out = Path(out)
    if not out.exists():
        raise GradebookError(
            f"the out folder {out} does not exist: grade the class first (make autograde), "
            "or give the --out that grading used"
        )
    course = out / "course"
    if not (course / "gradebook.db").is_file():
        raise GradebookError(
            f"no class gradebook at {course / 'gradebook.db'}: grade the class first "
            f"(make autograde, or python -m autograder.grade SUBMISSIONS --out {out})"
        )
    return course


def class_students(course: Path) -> list[str]:
    """Every student with a submission of the assignment in the class gradebook, sorted."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(_db_url(course)) as gb:
        try:
            return sorted(s.student.id for s in gb.find_assignment(assignment_of(course).id).submissions)
        except MissingEntry:
            return []


def graded_by_hand(course: Path, students: list[str]) -> list[str]:
    """Those of `students` with a manual score, extra credit or manual comment in the gradebook."""
    from nbgrader.api import Gradebook, MissingEntry

    found = []
    with Gradebook(_db_url(course)) as gb:
        for student in sorted(students):
            try:
                submission = gb.find_submission(assignment_of(course).id, student)
            except MissingEntry:
                continue
            grades = [g for nb in submission.notebooks for g in nb.grades]
            comments = [c for nb in submission.notebooks for c in nb.comments]
            if any(g.manual_score is not None or g.extra_credit is not None for g in grades) or any(
                c.manual_comment for c in comments
            ):
                found.append(student)
    return found


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


def read_cells(course: Path, students: list[str] | None = None) -> list[dict]:
    """One row per graded cell per student (default: every student with a submission); score
    empty while a cell awaits manual grading."""
    from nbgrader.api import Gradebook

    rows = []
    order = source_cell_order(course)
    assignment = assignment_of(course)
    with Gradebook(_db_url(course)) as gb:
        for student in sorted(class_students(course) if students is None else students):
            for name in assignment.notebooks:
                notebook = gb.find_submission_notebook(Path(name).stem, assignment.id, student)
                grades = {g.name: g for g in notebook.grades}
                for grade_id in order[Path(name).stem]:
                    grade = grades[grade_id]
                    score = "" if grade.needs_manual_grade else float(grade.score)
                    rows.append(
                        {
                            "student_id": student,
                            "notebook": Path(name).stem,
                            "grade_id": grade_id,
                            "score": score,
                            "max_score": float(grade.max_score),
                        }
                    )
    return rows


def export_grades(course: Path, destination: Path) -> None:
    """nbgrader's own CSV export of the class gradebook (what `nbgrader export` writes)."""
    from nbgrader.api import Gradebook
    from nbgrader.plugins import CsvExportPlugin

    with Gradebook(_db_url(course)) as gb:
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

    Columns: Student, ID, SIS User ID, SIS Login ID, Section, then `performance-05` (the total
    after late penalties) and, unless total_only, `performance-05 <notebook>` for each notebook.
    Student is "Last, First" when the gradebook has the names, else the student id; ID is the
    gradebook's lms_user_id (Canvas's user id, when set); SIS User ID is the nbgrader student id.
    A student without a submission scores 0. A student with a cell awaiting manual grading (or a
    re-check) has no row: they are listed in `pending` instead.
    """
    from nbgrader.api import Gradebook, MissingEntry

    assignment = assignment_of(course)
    stems, name = assignment.stems, assignment.id
    header = [*LMS_ID_COLUMNS, name] + ([] if total_only else [f"{name} {s}" for s in stems])
    with Gradebook(_db_url(course)) as gb:
        stored = gb.find_assignment(name)
        maxima = {nb.name: nb.max_score for nb in stored.notebooks}
        points = [LMS_POINTS_ROW, "", "", "", "", _number(stored.max_score)]
        points += [] if total_only else [_number(maxima[s]) for s in stems]
        rows, pending = [], {}
        for student in sorted(gb.students, key=lambda s: s.id):
            scores = dict.fromkeys(stems, 0.0)
            try:
                submission = gb.find_submission(name, student.id)
            except MissingEntry:
                submission = None
            if submission is not None:
                waiting = [
                    f"{nb.name}/{g.name}" for nb in submission.notebooks for g in nb.grades if g.needs_manual_grade
                ]
                if waiting:
                    pending[student.id] = sorted(waiting)
                    continue
                for nb in submission.notebooks:
                    scores[nb.name] = max(0.0, nb.score - (nb.late_submission_penalty or 0.0))
            name = (
                f"{student.last_name}, {student.first_name}" if student.last_name and student.first_name else student.id
            )
            row = [name, student.lms_user_id or "", student.id, "", "", _number(sum(scores.values()))]
            rows.append(row + ([] if total_only else [_number(scores[s]) for s in stems]))
    return LmsExport(header, points, rows, pending)


def pending_lines(pending: dict[str, list[str]]) -> list[str]:
    return [f"PENDING {student}: {', '.join(cells)}" for student, cells in sorted(pending.items())]


def write_lms_file(
    out: Path, course: Path, allow_pending: bool = False, total_only: bool = False
) -> tuple[Path | None, LmsExport]:
    """Write OUT/lms-performance-05.csv; (its path, the export). While any cell awaits manual
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


def write_class_files(out: Path, course: Path, flagged: dict[str, list[str]], graded: list[str]) -> list[dict]:
    """After a grading run: OUT/cells.csv, grades.csv and the LMS file from the class gradebook
    (every student in it, not only those graded now), and OUT/flags.csv: this run's findings for
    the students graded now, the earlier ones for the others. Returns cells.csv's rows."""
    out = Path(out)
    kept = [(who, finding) for who, finding in read_flags(out) if who not in set(graded)]
    rows = kept + [(student, finding) for student in flagged for finding in flagged[student]]
    with open(out / "flags.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(FLAG_COLUMNS)
        writer.writerows(sorted(rows, key=lambda r: r[0]))
    cells = regenerate_class_files(out)
    written, export = write_lms_file(out, course)
    if written is None:
        print(
            f"{lms_file(course)} not written: {len(export.pending)} student(s) have cells awaiting manual grading "
            f"(formgrader on {course}); then run `python -m autograder.export --out {out}` (make export)"
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
