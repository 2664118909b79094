"""nbgrader past its public API: which of Autograde's two steps is running, the gradebook's
schema revision read without a process, and one database engine per gradebook for the process.

Everything else the grader changes in nbgrader goes through its public surface: preprocessors
in `Autograde.sanitize_preprocessors` / `autograde_preprocessors`, `preprocess_cell`
(SaveAutoGrades' score of a cell), a converter's `exporter` and its preprocessors' `parent`.
"""

from __future__ import annotations

import collections
import functools
import threading
from pathlib import Path


def sanitizing(converter) -> bool:
    """Whether nbgrader's Autograde `converter` is in its first step (the handed-in notebook
    cleaned: outputs cleared, cells restored) rather than its second (the notebook executed and
    scored). The same exporter converts the notebook in both, and nbgrader keeps which step it is
    in only in the private `Autograde._sanitizing`. True for any other converter."""
    return bool(getattr(converter, "_sanitizing", True))


@functools.cache
def schema_head() -> str:
    """The revision of the gradebook's schema, read from nbgrader's own migration scripts."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    config = Config()
    config.set_main_option("script_location", ALEMBIC_DIR)
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None  # nbgrader ships its migration scripts: their head is its schema's revision
    return head


def fast_schema_stamp() -> None:
    """nbgrader stamps a new gradebook with its schema's revision, which `nbgrader.api`'s
    get_alembic_version reads by running the `alembic` command: a Python process, about 1.8 s.
    The same revision, read from the same migration scripts in this process (`schema_head`),
    takes 0.07 s, once per process. The function is replaced where nbgrader.api looks it up."""
    import nbgrader.api

    nbgrader.api.get_alembic_version = schema_head


#: The engines shared_gradebook_engines keeps, by (database URL, options): the last few used.
_ENGINES: collections.OrderedDict = collections.OrderedDict()
_ENGINES_KEPT = 4
_ENGINES_LOCK = threading.Lock()


def shared_gradebook_engines(scratch: Path | None = None) -> None:
    """nbgrader's Gradebook makes a new SQLAlchemy engine each time it is opened (about eleven
    times a notebook it autogrades), and SQLAlchemy keeps compiled statements per engine: every
    statement was compiled again each time, about 0.5 s of a student's grading. One engine per
    database, kept for the process (the last few), compiles each statement once.

    The engines pool no connection (NullPool): each connection is closed when it is given back, as
    with an engine of its own per gradebook. A gradebook that failed half-opened, its session never
    removed, so leaves nothing that a later gradebook at the same path (the next student's, where
    the last one's file was deleted) could be handed. Replaced where nbgrader.api looks
    create_engine up.

    `scratch`: a folder whose gradebooks are a grading worker's copies, one per student, read back
    by the same process and thrown away. Their writes do not wait for the disk (`fast_writes`):
    nbgrader commits about 45 times a student, and each commit's wait for the disk cost 3 ms here.
    Every other gradebook (the class gradebook above all) is written as SQLite writes by default."""
    import nbgrader.api
    import sqlalchemy
    from sqlalchemy import event
    from sqlalchemy.pool import NullPool

    def create_engine(url, **options):
        options = {"poolclass": NullPool, **options}
        fast = scratch is not None and _sqlite_file_under(url, scratch)
        key = (str(url), fast, tuple(sorted((name, repr(value)) for name, value in options.items())))
        with _ENGINES_LOCK:
            engine = _ENGINES.pop(key, None)
            if engine is None:
                engine = sqlalchemy.create_engine(url, **options)
                if fast:
                    event.listen(engine, "connect", fast_writes)
            _ENGINES[key] = engine  # the most recently used last
            while len(_ENGINES) > _ENGINES_KEPT:
                _ENGINES.popitem(last=False)
        return engine

    nbgrader.api.create_engine = create_engine


def _sqlite_file_under(url, folder: Path) -> bool:
    """Whether `url` names an SQLite database file inside `folder`, read as SQLAlchemy reads it (the
    file's name percent-decoded; a URL with a query, which can change what is opened, never is)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.query or parsed.database in (None, "", ":memory:"):
        return False
    return Path(parsed.database).resolve().is_relative_to(Path(folder).resolve())


def fast_writes(connection, _record) -> None:
    """An SQLite connection that does not wait for the disk: no sync at a commit, the rollback
    journal kept in memory. A crash can leave the file inconsistent, so only a gradebook that is
    thrown away after a crash (a worker's copy for one student) is opened so."""
    cursor = connection.cursor()
    try:
        cursor.execute("PRAGMA synchronous=OFF")
        cursor.execute("PRAGMA journal_mode=MEMORY")
    finally:
        cursor.close()


def begun_student_folder(preprocessor, student: str, assignment: str) -> str | None:
    """The autograded folder nbgrader's Autograde began for (student, assignment) in this run, as the
    converter running `preprocessor` names it (its own course directory: a relative root is read
    as nbgrader reads it); None when the run converts only some notebooks (`--notebook`): nbgrader
    then keeps the folder and the notebooks already graded in it. The converter is the parent of
    the preprocessor's exporter; its private `_format_dest` is how nbgrader names the folder."""
    exporter = getattr(preprocessor, "parent", None)
    converter = getattr(exporter, "parent", None)
    coursedir, format_dest = getattr(converter, "coursedir", None), getattr(converter, "_format_dest", None)
    if coursedir is None or format_dest is None:
        return None
    folder = str(format_dest(assignment, student))
    if coursedir.notebook_id != "*" and any(Path(folder).glob("*.ipynb")):
        return None  # notebooks graded before this run of some notebooks: kept
    return folder  # (a run of some notebooks began it for a student graded nowhere yet: a full run would skip them)
