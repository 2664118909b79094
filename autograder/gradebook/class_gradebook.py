"""The class gradebook: where it lives, how it is opened, who is in it.

OUT/course/gradebook.db is an nbgrader gradebook (SQLite). Every module that reads or writes it
opens it through here: `db_url` for nbgrader's Gradebook, `open_api` for nbgrader's API on the
course folder, with the warnings that say nothing to an instructor silenced once.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from autograder.course.assignment import assignment_of, resolve_in_course
from autograder.course.errors import ExitCode, GraderError
from autograder.upstream.nbgrader import fast_schema_stamp


class GradebookError(GraderError, ValueError):
    """The class gradebook cannot be used as asked (missing, or built from another structure)."""

    exit_code = ExitCode.USAGE


def db_url(course: Path) -> str:
    """The SQLAlchemy URL of the gradebook in `course`, its path escaped as a URL: SQLAlchemy
    decodes %XX and ends the file's name at a ?, so a folder named with them would open another file."""
    from sqlalchemy.engine import URL

    return URL.create("sqlite", database=str(course / "gradebook.db")).render_as_string(hide_password=False)


def quiet_gradebook_warnings() -> None:
    """Warnings that say nothing to an instructor. nbgrader's add_submission trips SQLAlchemy
    autoflush warnings; the rows come out right."""
    from sqlalchemy.exc import SAWarning

    warnings.filterwarnings("ignore", message=r"Object of type <Submitted", category=SAWarning)
    # Notebooks saved by older tools lack cell ids; nbformat fills them in and warns each time.
    warnings.filterwarnings("ignore", message=r"Cell is missing an id field")


def open_api(course: Path):
    """nbgrader's API on the course folder `course`, configured from its nbgrader_config.py; (api, config)."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    quiet_gradebook_warnings()
    fast_schema_stamp()
    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    resolve_in_course(config, course)
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.db_url = db_url(course)
    config.Exchange.root = str(course / "exchange")  # unused here; nbgrader checks it is writable
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config), config


def require_gradebook(out: Path) -> Path:
    """OUT/course, checked to hold a class gradebook; GradebookError with what to do otherwise."""
    out = Path(out)
    if not out.exists():
        raise GradebookError(
            f"the out folder {out} does not exist: grade the class first (`autograder grade`), "
            "or give the --out that grading used"
        )
    course = out / "course"
    if not (course / "gradebook.db").is_file():
        raise GradebookError(
            f"no class gradebook at {course / 'gradebook.db'}: grade the class first "
            f"(`autograder grade SUBMISSIONS --out {out} ...`)"
        )
    return course


def class_students(course: Path) -> list[str]:
    """Every student with a submission of the assignment in the class gradebook, sorted."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url(course)) as gb:
        try:
            return sorted(s.student.id for s in gb.find_assignment(assignment_of(course).id).submissions)
        except MissingEntry:
            return []


def graded_by_hand(course: Path, students: list[str]) -> list[str]:
    """Those of `students` with a manual score, extra credit or manual comment in the gradebook."""
    from nbgrader.api import Gradebook, MissingEntry

    found = []
    with Gradebook(db_url(course)) as gb:
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
