"""Reading a class's submissions folder: who is graded, who is rejected and why, what is left out."""

from __future__ import annotations

import pytest

from autograder.adapters.lesson import BUNDLE
from autograder.course.errors import UsageError
from autograder.course.intake import NotANotebook, read_notebook
from autograder.course.submissions import find_submissions, student_id_problem

LESSON = BUNDLE.as_assignment()


def _student(folder, name, *files):
    (folder / name).mkdir(parents=True)
    for file in files:
        (folder / name / file).write_text("{}")


@pytest.mark.parametrize("name", ["ann", "zoë", "Ann.Smith@uni.edu", "s-01", "学生7", "x+y", "a" * 128])
def test_usable_student_ids(name):
    assert student_id_problem(name) is None


@pytest.mark.parametrize(
    "name, why",
    [
        ("ann smith", "no spaces"),
        (".hidden", "starts with a dot"),
        ("-ann", "start with a letter or digit"),
        ("ann/..", "no spaces"),
        ("ann\tb", "no spaces"),
        ("e\u0301", "normal form C"),
        ("a" * 129, "at most 128 characters"),
    ],
)
def test_unusable_student_ids_say_why(name, why):
    assert why in (student_id_problem(name) or "")


def test_each_student_is_graded_or_rejected_alone(tmp_path):
    _student(tmp_path, "ann", "01-understand.ipynb", "timestamp.txt", "scratch.ipynb", "notes.txt")
    _student(tmp_path, "ann smith", "01-understand.ipynb")
    _student(tmp_path, ".ipynb_checkpoints", "01-understand.ipynb")
    _student(tmp_path, "bob", "homework.ipynb")
    (tmp_path / "README.txt").write_text("the class")
    found = find_submissions(tmp_path, LESSON)
    assert set(found.students) == {"ann"}
    assert sorted(found.students["ann"]) == ["01-understand.ipynb", "timestamp.txt"]
    assert found.notes["ann"] == ["left out, not notebooks of performance-05: notes.txt"]
    assert found.other_notebooks["ann"] == ["scratch.ipynb"]  # named as a notebook not graded
    assert set(found.rejected) == {"ann smith", ".ipynb_checkpoints", "bob"}
    assert "holds no notebook" in found.rejected["bob"]


@pytest.mark.parametrize(
    "layout, message",
    [
        ("missing", "does not exist: put each learner's notebooks in"),
        ("file", "is a file"),
        ("flat", "sits at the top"),
        ("nobody", "no student folder that can be graded"),
    ],
)
def test_wrong_folder_layout_is_usage_error(tmp_path, layout, message):
    """A folder laid out wrongly as a whole is a usage error."""
    folder = tmp_path / "subs"
    if layout == "file":
        folder.write_text("")
    elif layout != "missing":
        folder.mkdir()
    if layout == "flat":
        (folder / "01-understand.ipynb").write_text("{}")
    elif layout == "nobody":
        _student(folder, "ann smith", "01-understand.ipynb")
    with pytest.raises(UsageError, match=message):
        find_submissions(folder, LESSON)


def test_nbgrader_submitted_layout_is_read(tmp_path):
    """nbgrader's submitted layout is read as nbgrader reads it.

    A course's submitted/<student_id>/<assignment>/<notebook>.ipynb (what `nbgrader collect`
    writes), beside a student handed in the flat way."""
    _student(tmp_path / "ann", "performance-05", "01-understand.ipynb", "timestamp.txt")
    _student(tmp_path, "bob", "02-build.ipynb")
    found = find_submissions(tmp_path, LESSON)
    assert set(found.students) == {"ann", "bob"}
    assert set(found.students["ann"]) == {"01-understand.ipynb", "timestamp.txt"}
    assert found.students["ann"]["01-understand.ipynb"] == tmp_path / "ann" / "performance-05" / "01-understand.ipynb"


def test_unreadable_notebooks_are_named(tmp_path):
    (tmp_path / "half.ipynb").write_text('{"cells": [')
    (tmp_path / "binary.ipynb").write_bytes(b"\xff\xfe\x00")
    (tmp_path / "no-cells.ipynb").write_text('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}}')
    for name, why in (("half", "not a readable notebook"), ("binary", "not UTF-8"), ("no-cells", "no cell list")):
        with pytest.raises(NotANotebook, match=why):
            read_notebook((tmp_path / f"{name}.ipynb").read_bytes())


def test_a_symbolic_link_is_never_a_submission(tmp_path):
    """A link in a submission could hand in any file of the grading machine (the instructor's
    solutions, a host file that then shows in the feedback page): a linked notebook is left out,
    a linked student or assignment folder is rejected, and the other students are graded."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "01-understand.ipynb").write_text("{}")
    subs = tmp_path / "subs"
    _student(subs, "honest", "01-understand.ipynb")
    (subs / "linker").mkdir()
    (subs / "linker" / "01-understand.ipynb").symlink_to(elsewhere / "01-understand.ipynb")
    (subs / "linker" / "02-build.ipynb").write_text("{}")
    (subs / "folder-link").symlink_to(elsewhere)
    (subs / "nested" / "performance-05").parent.mkdir(parents=True)
    (subs / "nested" / "performance-05").symlink_to(elsewhere)
    found = find_submissions(subs, LESSON)
    assert set(found.students) == {"honest", "linker"}
    assert list(found.students["linker"]) == ["02-build.ipynb"]
    assert any("symbolic link" in note for note in found.notes["linker"])
    assert "symbolic link" in found.rejected["folder-link"] and "symbolic link" in found.rejected["nested"]
