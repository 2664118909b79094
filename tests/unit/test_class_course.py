"""Unit tests of autograder/gradebook/class_course.py: the assignment's structure, compared, and the
files kept or cleared around the class gradebook."""

from __future__ import annotations

from pathlib import Path

import nbgrader.api
import pytest
from nbgrader.api import Gradebook

from autograder.gradebook import class_course
from autograder.gradebook.class_course import assignment_structure, structure_changes
from autograder.gradebook.class_gradebook import db_url
from autograder.upstream.nbgrader import schema_head


def _kinds(**cells) -> dict:
    """One notebook's structure: every kind present, as assignment_structure gives it."""
    return {
        kind: cells.get(kind.replace(" ", "_"), {})
        for kind in ("grade cell", "solution cell", "task cell", "source cell")
    }


def _course(folder: Path, build) -> Path:
    """A course folder holding assignment ps1 (its notebooks in source/) and a gradebook `build(gb)` filled."""
    course = folder / "course"
    (course / "source" / "ps1").mkdir(parents=True)
    (course / "source" / "ps1" / "01.ipynb").write_text("{}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nbgrader.api, "get_alembic_version", schema_head)  # read here, not by running `alembic`
        gb = Gradebook(db_url(course))
    with gb:
        build(gb)
    return course


def _ps1(gb, points: float = 2, locked: bool = True) -> None:
    gb.add_assignment("ps1")
    gb.add_notebook("01", "ps1")
    gb.add_grade_cell("check", "01", "ps1", max_score=points, cell_type="code")
    gb.add_solution_cell("answer", "01", "ps1")
    gb.add_grade_cell("answer", "01", "ps1", max_score=1.5, cell_type="markdown")
    gb.add_task_cell("task", "01", "ps1", max_score=3, cell_type="markdown")
    gb.add_source_cell("check", "01", "ps1", cell_type="code", locked=locked, source="assert True")
    gb.add_source_cell("answer", "01", "ps1", cell_type="markdown", locked=False, source="")
    gb.add_notebook("02", "ps1")


def test_structure_changes_none_when_equal():
    """Two equal structures have no changes."""
    structure = lambda: {"01": _kinds(grade_cell={"check": "code, 2 points"}, solution_cell={"answer": "answer"})}
    assert structure_changes(structure(), structure()) == []
    assert structure_changes({}, {}) == []


def test_structure_changes_notebook_add_remove():
    """A notebook only in the new structure is new; one only in the old is no longer in the assignment; sorted by name."""
    old = {"01": _kinds(), "02": _kinds()}
    new = {"01": _kinds(), "03": _kinds(grade_cell={"check": "code, 1 points"})}
    assert structure_changes(old, new) == [
        "notebook 02 is no longer in the assignment",
        "notebook 03 is new",
    ]


def test_structure_changes_cell_edits():
    """Each kind of cell reports removed, new and changed cells, one line each, in name order."""
    old = {"01": _kinds(grade_cell={"a": "code, 1 points", "b": "code, 2 points", "c": "code, 3 points"})}
    new = {"01": _kinds(grade_cell={"b": "code, 2 points", "c": "markdown, 3 points", "d": "code, 4 points"})}
    assert structure_changes(old, new) == [
        "01: grade cell 'a' was removed",
        "01: grade cell 'c' changed (code, 3 points -> markdown, 3 points)",
        "01: grade cell 'd' is new (code, 4 points)",
    ]


def test_structure_changes_name_in_two_kinds():
    """A cell name of one kind is not matched against another kind's cells."""
    old = {"01": _kinds(grade_cell={"x": "code, 1 points"}, source_cell={"x": "code, locked"})}
    new = {"01": _kinds(grade_cell={"x": "code, 1 points"}, source_cell={"x": "code"})}
    assert structure_changes(old, new) == ["01: source cell 'x' changed (code, locked -> code)"]


def test_structure_changes_kind_missing_in_old():
    """A kind the old structure lacks counts as empty there: its cells are new."""
    old = {"01": {"grade cell": {}}}
    new = {"01": _kinds(task_cell={"t": "markdown, 3 points"})}
    assert structure_changes(old, new) == ["01: task cell 't' is new (markdown, 3 points)"]


def test_assignment_structure_reads_cell_kinds(tmp_path):
    """The structure names each notebook's grade, solution, task and source cells with their type, points and lock."""
    course = _course(tmp_path, _ps1)
    assert assignment_structure(course) == {
        "01": {
            "grade cell": {"check": "code, 2 points", "answer": "markdown, 1.5 points"},
            "solution cell": {"answer": "answer"},
            "task cell": {"task": "markdown, 3 points"},
            "source cell": {"check": "code, locked", "answer": "markdown"},
        },
        "02": _kinds(),
    }


def test_structure_empty_without_assignment(tmp_path):
    """A gradebook that does not hold the course's assignment has an empty structure."""
    course = _course(tmp_path, lambda gb: gb.add_assignment("other"))
    assert assignment_structure(course) == {}


def test_structure_changes_between_gradebooks(tmp_path):
    """Two gradebooks differing in a cell's points and lock compare as exactly those changes."""
    before = assignment_structure(_course(tmp_path / "a", _ps1))
    after = assignment_structure(_course(tmp_path / "b", lambda gb: _ps1(gb, points=3, locked=False)))
    assert structure_changes(before, before) == []
    assert structure_changes(before, after) == [
        "01: grade cell 'check' changed (code, 2 points -> code, 3 points)",
        "01: source cell 'check' changed (code, locked -> code)",
    ]


def test_backup_gradebook_never_overwrites(tmp_path, monkeypatch):
    """Backups made in the same second get distinct names, each a copy of the gradebook; none without a gradebook."""
    course = tmp_path / "out" / "course"
    course.mkdir(parents=True)
    assert class_course.backup_gradebook(course) is None
    (course / "gradebook.db").write_bytes(b"first")
    one = class_course.backup_gradebook(course)
    (course / "gradebook.db").write_bytes(b"second")
    two = class_course.backup_gradebook(course)
    three = class_course.backup_gradebook(course)
    assert len({one, two, three}) == 3
    assert all(p.parent == tmp_path / "out" / class_course.BACKUPS for p in (one, two, three))
    assert (one.read_bytes(), two.read_bytes(), three.read_bytes()) == (b"first", b"second", b"second")


def test_clear_outputs_only_without_gradebook(tmp_path):
    """A new class starts without the earlier class files; with a gradebook to reuse nothing is removed."""
    out = tmp_path / "out"
    (out / "feedback" / "ada").mkdir(parents=True)
    for name in ("grades.csv", "lms-canvas.csv", "notes.txt"):
        (out / name).write_text("x")
    (out / "course").mkdir()
    (out / "course" / "gradebook.db").write_bytes(b"db")
    class_course.clear_outputs(out)
    assert (out / "grades.csv").exists() and (out / "feedback" / "ada").exists()
    class_course.clear_outputs(out, fresh=True)
    assert sorted(p.name for p in out.iterdir()) == ["course", "notes.txt"]


@pytest.mark.parametrize("name", ["plain", "grades 100%41", "a?x=1"])
def test_nbgraders_own_tools_open_the_class_gradebook(tmp_path, monkeypatch, name):
    """formgrader and `nbgrader db` in OUT/course build the gradebook's URL from the folder's path
    unescaped: where that opens another file, the course's config names the escaped URL; any
    other course's config is the checkout's own (it names no path)."""
    from nbgrader.coursedir import CourseDirectory
    from sqlalchemy.engine import make_url
    from traitlets.config.loader import PyFileConfigLoader

    from autograder.course.paths import ROOT

    course = class_course.update_class_course(tmp_path / name / "course")
    monkeypatch.chdir(course)  # (the config is code: it runs as nbgrader runs it, from the course)
    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    opened = make_url(CourseDirectory(config=config, root=str(course)).db_url).database
    assert (course / opened).resolve() == (course / "gradebook.db").resolve()  # (the lesson's: relative to it)
    pinned = (course / "nbgrader_config.py").read_text() != (ROOT / "nbgrader_config.py").read_text()
    assert pinned == (name != "plain")
