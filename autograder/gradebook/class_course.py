"""The class course: built once, then reused, so manual grades survive regrading.

OUT/course is an nbgrader course folder: the assignment's source, nbgrader_config.py, the class
gradebook (gradebook.db) and the students' submitted/, autograded/ and feedback/ folders, which
formgrader reads. The first grading run builds it. Every later run reuses it:

- update_class_course() puts the current source beside the existing gradebook (never deletes it);
- prepare_class_course() regenerates the assignment in a scratch course and compares its
  structure (notebooks; grade, solution, task and source cells; cell types; points) with the
  class gradebook's. Unchanged: the class gradebook keeps every student and manual grade, and
  only the cells' text is refreshed. Changed: GradebookError, and the course is left as it was;
  `--fresh-gradebook` starts a new gradebook, the old one backed up in OUT/gradebook-backups/.

Merging a run's results is autograder/gradebook/merge.py; the class files written from the gradebook,
autograder/gradebook/reports.py.
"""

from __future__ import annotations

import datetime
import logging
import shutil
import tempfile
from pathlib import Path

from autograder.course.assignment import assignment_of, nbgrader_setting, new_course
from autograder.course.task_template import CourseSource, TaskTemplate
from autograder.gradebook.class_gradebook import GradebookError, db_url, open_api
from autograder.gradebook.class_report import JUDGED, REPORT_DATA, REPORT_PAGE

log = logging.getLogger(__name__)

BACKUPS = "gradebook-backups"

_PREVIOUS = ".previous-course"  # OUT/.previous-course: the source replaced by update_class_course, until checked


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


def update_class_course(course: Path, fresh: bool = False, origin=None) -> Path:
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
            log.info("the previous class gradebook is kept as %s", saved)
    if fresh or not (course / "gradebook.db").exists():
        return _gradebook_url_pinned(new_course(course, origin))
    staged = new_course(previous / "next", origin)
    for name in ("source", "nbgrader_config.py"):
        if (course / name).exists():
            shutil.move(str(course / name), str(previous / name))
        shutil.move(str(staged / name), str(course / name))
    shutil.rmtree(staged)
    return _gradebook_url_pinned(course)


def _gradebook_url_pinned(course: Path) -> Path:
    """nbgrader (formgrader, `nbgrader db`, route A) builds the gradebook's URL from the course
    folder's path unescaped: where that would open another file (a `%XX` or `?` in the path), the
    course's config names the escaped URL, so they open this gradebook. Any other course's config
    is left as copied (it names no path, and the folder can be moved). Returns `course`."""
    from sqlalchemy.engine import make_url

    gradebook = course.resolve() / "gradebook.db"
    if make_url(f"sqlite:///{gradebook}").database != str(gradebook):
        with open(course / "nbgrader_config.py", "a") as config:
            config.write(f"c.CourseDirectory.db_url = {db_url(course.resolve())!r}  # the path, escaped as a URL\n")
    return course


def _put_back_previous_source(course: Path) -> None:
    previous = course.parent / _PREVIOUS
    for name in ("source", "nbgrader_config.py"):
        if (previous / name).exists():
            target = course / name
            shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
            shutil.move(str(previous / name), str(target))
    shutil.rmtree(previous, ignore_errors=True)


def assignment_structure(course: Path) -> dict[str, dict[str, dict]]:
    """{notebook: {kind: {cell name: what must not change}}} as stored in the course's gradebook."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url(course)) as gb:
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
    with Gradebook(db_url(scratch)) as new, Gradebook(db_url(course)) as gb:
        for nb in new.find_assignment(name).notebooks:
            stored = gb.find_notebook(nb.name, name)
            stored.kernelspec = nb.kernelspec
            for cell in nb.source_cells:
                target = gb.find_source_cell(cell.name, nb.name, name)
                target.source, target.checksum = cell.source, cell.checksum
        gb.db.commit()


def prepare_class_course(course: Path, source: CourseSource) -> tuple[TaskTemplate, int | None]:
    """Generate the assignment (source: the course's, as read) and make the class gradebook
    hold it; return the task template (config, source, a gradebook with the assignment and no
    student) and the per-cell timeout (nbgrader's default where the config is silent; None: no limit).

    A new class gradebook is the generated one. An existing one is kept when the assignment's
    structure is unchanged (the cells' text is refreshed); otherwise GradebookError, and the
    course's previous source is put back.
    """
    course = Path(course)
    name = assignment_of(course).id
    scratch = Path(tempfile.mkdtemp(prefix=f"{name}-assignment-"))
    try:
        source.write_course(scratch)
        api, config = open_api(scratch)
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
                    f"gradebook with `autograder grade --fresh-gradebook`: the old one is copied to "
                    f"{out / BACKUPS}/ first, and every manual grade must then be entered again. "
                    "Or grade into another --out."
                )
            _refresh_cell_text(course, scratch)
        else:
            shutil.copy2(scratch / "gradebook.db", course / "gradebook.db")
        shutil.rmtree(course / "release", ignore_errors=True)
        shutil.copytree(scratch / "release", course / "release")
        shutil.rmtree(course.parent / _PREVIOUS, ignore_errors=True)
        return TaskTemplate(source, (scratch / "gradebook.db").read_bytes()), nbgrader_setting(
            config, "Execute", "timeout"
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def clear_outputs(out: Path, fresh: bool = False) -> None:
    """Before grading: a new class (no gradebook yet, or fresh) starts without the files of an
    earlier one. With a gradebook to reuse nothing goes: each student graded now has their own
    files replaced (merge_into_gradebook), the class files are rewritten (write_class_files)."""
    out = Path(out)
    if (out / "course" / "gradebook.db").exists() and not fresh:
        return
    stale = [
        "feedback",
        "grades.csv",
        "cells.csv",
        "flags.csv",
        REPORT_PAGE,
        REPORT_DATA,
        JUDGED,
        *(p.name for p in out.glob("lms-*.csv")),
    ]
    for name in stale:
        target = out / name
        shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
