"""One database engine per gradebook for the process (autograder/upstream/nbgrader.py's
shared_gradebook_engines): nbgrader's Gradebook opened again compiles no statement again, a
closed gradebook keeps no connection open, and a grading worker gives each of its students the
same folder's name, so their gradebooks share that engine (worker._scratch); a worker's copies,
and only they, are written without waiting for the disk."""

from __future__ import annotations

import nbgrader.api
import pytest
from nbgrader.api import Gradebook

from autograder.gradebook.class_gradebook import db_url
from autograder.run import worker
from autograder.upstream import nbgrader as upstream
from autograder.upstream.nbgrader import schema_head, shared_gradebook_engines


@pytest.fixture
def engines(monkeypatch):
    """nbgrader.api with the engines shared, and nothing kept from another test."""
    monkeypatch.setattr(nbgrader.api, "create_engine", nbgrader.api.create_engine)
    monkeypatch.setattr(nbgrader.api, "get_alembic_version", schema_head)
    monkeypatch.setattr(upstream, "_ENGINES", type(upstream._ENGINES)())
    shared_gradebook_engines()
    return upstream._ENGINES


def _misses(gradebook) -> int:
    """How many statements the gradebook's engine compiled (SQLAlchemy's cache misses)."""
    return len(gradebook.engine._compiled_cache)


def test_a_gradebook_opened_again_compiles_nothing_again(engines, tmp_path):
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(url) as first:
        first.add_student("ann")
        first.find_student("ann")
        compiled = _misses(first)
    with Gradebook(url) as again:
        again.add_student("bob")
        again.find_student("bob")
        assert again.engine is first.engine
        assert _misses(again) == compiled > 0
        assert [s.id for s in again.students] == ["ann", "bob"]


def test_a_half_opened_gradebook_leaves_nothing_to_the_next_at_its_path(engines, tmp_path):
    """A gradebook whose session ended without close() (nbgrader's __init__ raised after a query):
    its connection is not handed to the next gradebook at the same path, the next student's, whose
    file is new."""
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    failed = Gradebook(url)
    failed.add_student("ann")
    failed.db.remove()  # the session ends; the engine is never disposed
    (tmp_path / "gradebook.db").unlink()  # the student's folder removed; the next one's made
    with Gradebook(url) as fresh:
        assert fresh.engine is failed.engine
        assert fresh.students == []
        fresh.add_student("bob")  # a write to the new file, not to the deleted one
        assert [s.id for s in fresh.students] == ["bob"]


def test_only_the_last_few_engines_are_kept(engines, tmp_path):
    made = []
    for k in range(upstream._ENGINES_KEPT + 2):
        with Gradebook(f"sqlite:///{tmp_path / f'{k}.db'}") as gradebook:
            made.append(gradebook.engine)
    assert list(engines.values()) == made[-upstream._ENGINES_KEPT :]


def test_every_student_graded_shares_the_engines():
    """grade_student installs the shared engines before it opens any gradebook."""
    import inspect

    source = inspect.getsource(worker.grade_student)
    assert source.index("shared_gradebook_engines(scratch=_folder())") < source.index("autograde_api(")


def _journal(gradebook) -> tuple[int, str]:
    """(PRAGMA synchronous, PRAGMA journal_mode) of a connection of the gradebook's engine."""
    from sqlalchemy import text

    return (
        gradebook.db.execute(text("PRAGMA synchronous")).scalar(),
        gradebook.db.execute(text("PRAGMA journal_mode")).scalar(),
    )


@pytest.mark.filterwarnings("ignore:Query string argument")  # the pysqlite driver ignores the query
def test_only_a_workers_copies_skip_waiting_for_the_disk(monkeypatch, tmp_path):
    monkeypatch.setattr(nbgrader.api, "create_engine", nbgrader.api.create_engine)
    monkeypatch.setattr(nbgrader.api, "get_alembic_version", schema_head)
    monkeypatch.setattr(upstream, "_ENGINES", type(upstream._ENGINES)())
    work, course = tmp_path / "work", tmp_path / "course"
    (work / "student").mkdir(parents=True)
    course.mkdir()
    (work / "link").symlink_to(course, target_is_directory=True)
    shared_gradebook_engines(scratch=work)
    with Gradebook(f"sqlite:///{work / 'student' / 'gradebook.db'}") as copy:
        copy.add_student("ann")
        assert _journal(copy) == (0, "memory")  # synchronous=OFF, the journal in memory
    # SQLite's defaults (synchronous=FULL, a journal file) for every other path, whatever its spelling.
    outside = (
        f"sqlite:///{course / 'gradebook.db'}",
        f"sqlite:///{work / '..' / 'course' / 'other.db'}",
        f"sqlite:///{work / 'link' / 'linked.db'}",
        f"sqlite:///{work / '%2e%2e' / 'course' / 'decoded.db'}",  # SQLAlchemy decodes the name
        f"sqlite:///{course / 'query.db'}?x=/../../{work.name}/student/y",  # the query is no part of it
    )
    for url in outside:
        with Gradebook(url) as kept:
            kept.add_student("bob")
            assert _journal(kept) == (2, "delete"), url
    opened = ["decoded.db", "gradebook.db", "linked.db", "other.db", "query.db"]
    assert sorted(p.name for p in course.iterdir()) == opened
    # The same process later grading without a worker folder: no engine is made fast.
    shared_gradebook_engines()
    with Gradebook(f"sqlite:///{work / 'student' / 'gradebook.db'}") as copy:
        assert _journal(copy) == (2, "delete")


@pytest.mark.parametrize("name", ["grades 100%41", "a?x=1", "b#c", "d@e:f"])
def test_a_folder_named_with_url_characters_opens_its_own_gradebook(engines, tmp_path, name):
    """db_url escapes the path: SQLAlchemy decodes %XX and ends a file's name at a ?, so the
    name as written would open another file (tmp/grades 100A/..., or tmp/a)."""
    work = tmp_path / name
    (work / "course").mkdir(parents=True)
    shared_gradebook_engines(scratch=work)
    with Gradebook(db_url(work / "course")) as gradebook:
        gradebook.add_student("ann")
        assert _journal(gradebook) == (0, "memory")  # classified as inside the worker's folder
    assert [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()] == [f"{name}/course/gradebook.db"]


def test_each_student_of_a_worker_has_the_same_folder_name(monkeypatch, tmp_path):
    monkeypatch.setattr(worker, "_FOLDER", tmp_path)
    first = worker._scratch()
    first.rmdir()  # graded and removed
    assert worker._scratch() == first
    # Not removed (a file it could not delete): the next student gets a folder of its own.
    other = worker._scratch()
    assert other != first and other.parent == tmp_path and other.is_dir()
