"""Submission repair, on notebooks made here (autograder/notebook/repair.py): metadata from the source,
duplicated cells made plain, deleted test cells restored in the right place."""

from __future__ import annotations

from types import SimpleNamespace

import nbformat
import pytest
from traitlets.config import Config

from autograder.notebook.repair import DeduplicateIdsCleanly, MetadataFromSource, RestoreMissingCells


def _graded(grade_id: str, source: str = "", **meta) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade_id": grade_id, "schema_version": 3, **meta}
    return cell


@pytest.fixture
def course(tmp_path):
    """A course folder whose source/ps1/ holds the notebook, as nbgrader's config names it."""
    source = nbformat.v4.new_notebook(
        cells=[
            _graded("answer", "def f(x): ...", solution=True, grade=False, locked=False),
            _graded("check", "assert f(1) == 1", solution=False, grade=True, points=2, locked=True),
        ]
    )
    (tmp_path / "source" / "ps1").mkdir(parents=True)
    nbformat.write(source, tmp_path / "source" / "ps1" / "01-understand.ipynb")
    config = Config()
    config.CourseDirectory.root = str(tmp_path)
    return config


def _resources() -> dict:
    return {"nbgrader": {"notebook": "01-understand", "assignment": "ps1", "student": "ada"}}


def test_submission_gets_source_metadata(course):
    """A submission gets the source's metadata back."""
    submitted = nbformat.v4.new_notebook(
        cells=[
            _graded("answer", "def f(x): return x", solution=True, grade=True, points=100),  # points raised
            _graded("check", "pass", solution=False, grade=True, points=50, locked=False),
            _graded("made-up", "print(1)", grade=True, points=10),  # a graded cell of the learner's own
            nbformat.v4.new_code_cell("plain = 1"),
        ]
    )
    submitted.cells[3].metadata["nbgrader"] = "not a dict"
    repaired, _ = MetadataFromSource(config=course).preprocess(submitted, _resources())
    meta = [cell.metadata.get("nbgrader") for cell in repaired.cells]
    assert meta[0]["grade"] is False and "points" not in meta[0]
    assert meta[1]["points"] == 2 and meta[1]["locked"] is True
    assert meta[2] is None and meta[3] is None  # ordinary cells now
    assert repaired.cells[0].source == "def f(x): return x"  # the learner's answer is kept


def test_pasted_graded_cell_becomes_plain():
    """A pasted copy of a graded cell becomes a plain cell without empty metadata."""
    notebook = nbformat.v4.new_notebook(
        cells=[_graded("check", "first", grade=True, points=1), _graded("check", "second", grade=True, points=1)]
    )
    deduplicated, _ = DeduplicateIdsCleanly().preprocess(notebook, {})
    # The last copy is the graded one; stock DeduplicateIds leaves {} on the earlier ones.
    assert "nbgrader" not in deduplicated.cells[0].metadata
    assert deduplicated.cells[1].metadata["nbgrader"]["grade_id"] == "check"


def _source_cell(name: str, source: str) -> SimpleNamespace:
    return SimpleNamespace(name=name, source=source, cell_type="code", locked=True, checksum="c")


class FakeGradebook:
    """The one call RestoreMissingCells makes: the source notebook's cells, in order."""

    def __init__(self):
        cells = [("intro", "# intro"), ("answer-a", "a = 1"), ("test-a", "assert a"), ("test-b", "assert b")]
        self.notebook = SimpleNamespace(
            source_cells=[_source_cell(name, text) for name, text in cells],
            grade_cells=[SimpleNamespace(name="test-a", max_score=2.0), SimpleNamespace(name="test-b", max_score=3.0)],
            solution_cells=[SimpleNamespace(name="answer-a")],
        )

    def find_notebook(self, notebook_id, assignment_id):
        return self.notebook


def _restorer() -> RestoreMissingCells:
    restorer = RestoreMissingCells()
    restorer.gradebook, restorer.notebook_id, restorer.assignment_id = FakeGradebook(), "01", "ps1"
    return restorer


def test_deleted_test_cell_comes_back():
    """A deleted test cell comes back after the nearest earlier cell still there."""
    notebook = nbformat.v4.new_notebook(cells=[_graded("intro"), _graded("answer-a"), nbformat.v4.new_code_cell("x")])
    restored, _ = _restorer().add_missing_grade_cells(notebook, {})
    names = [c.metadata.get("nbgrader", {}).get("grade_id") for c in restored.cells]
    assert names == ["intro", "answer-a", "test-a", "test-b", None]
    assert restored.cells[2].metadata["nbgrader"]["points"] == 2.0 and "assert a" in restored.cells[2].source


def test_test_cell_without_answer_restored():
    """A test cell whose answer cell is gone too is restored, not lost."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("mine")])
    restored, _ = _restorer().add_missing_grade_cells(notebook, {})
    names = [c.metadata.get("nbgrader", {}).get("grade_id") for c in restored.cells]
    assert names == ["test-a", "test-b", None]  # first, in the source's order: nothing earlier is left


def test_the_note_of_notebooks_not_graded_shows_names_as_text():
    """The note on a student's pages names each notebook not graded; a name is the learner's to
    choose, so it is shown as text: no markup of its own, and none once the page is made."""
    import nbformat

    from autograder.course.outcomes import Trouble, TroubleKind
    from autograder.notebook.pages import sanitize_notebook
    from autograder.notebook.plugin import NOT_GRADED, NotGradedNote, not_graded_note

    hostile = '<img src=x onerror="alert(1)">[link](javascript:alert(2)) *x*.ipynb'
    troubles = [
        Trouble(TroubleKind.MISSING, "not handed in; graded 0", "05-evidence.ipynb"),
        Trouble(TroubleKind.RENAMED, "not a notebook of the assignment; not graded", hostile),
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    notebook, _ = NotGradedNote().preprocess(notebook, {NOT_GRADED: troubles})
    assert notebook.cells[0].source == not_graded_note(troubles)
    sanitize_notebook(notebook)  # as ForPages, after it, makes every page
    page = notebook.cells[0].source
    assert "05-evidence.ipynb" in page
    assert "<img" not in page and "href" not in page and "<em>" not in page  # no tag, link or emphasis made
    assert "&lt;img src=x onerror=" in page and "javascript:alert" in page  # the name, shown as text
    # A student with nothing missing gets no note.
    clean = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    assert len(NotGradedNote().preprocess(clean, {NOT_GRADED: []})[0].cells) == 1


def test_a_valid_notebook_goes_on_as_nbgrader_reads_it():
    """`nbgrader autograde` with the plugin reads a valid notebook as nbgrader does: what the intake's
    order drops or makes up (outputs for --no-execute, the kernel, attachments, cells without ids)
    stays as handed in, and reading the same file twice gives the same notebook. A file nbformat
    does not read as a valid notebook is left to the intake."""
    import json

    from autograder.course.intake import read_notebook
    from autograder.notebook.plugin import as_saved

    kernel = {"name": "blarg", "display_name": "kernel", "language": "blarg"}
    code = nbformat.v4.new_code_cell("x = 1", outputs=[nbformat.v4.new_output("stream", text="1\n")])
    image = {"image/png": "iVBORw0KGgo="}
    note = nbformat.v4.new_markdown_cell("![plot](attachment:plot.png)", attachments={"plot.png": image})
    notebook = nbformat.v4.new_notebook(cells=[code, note], metadata={"kernelspec": kernel})
    notebook.nbformat_minor = 4  # saved before cells had ids
    for cell in notebook.cells:
        del cell["id"]
    data = nbformat.writes(notebook).encode()

    saved = as_saved(data)
    assert saved is not None
    assert saved.cells[0].outputs == code.outputs and saved.cells[1].attachments == {"plot.png": image}
    assert saved.metadata.kernelspec == kernel and all("id" not in cell for cell in saved.cells)
    assert nbformat.writes(as_saved(data)) == nbformat.writes(saved)  # a regrade writes the same file
    taken_in = read_notebook(data)  # what the intake's order would have given instead
    assert taken_in.cells[0].outputs == [] and "kernelspec" not in taken_in.metadata

    invalid = json.loads(data)
    del invalid["cells"][0]["source"]  # not valid for nbformat; the intake still takes it in
    invalid = json.dumps(invalid).encode()
    assert read_notebook(invalid).cells[0].source == ""
    for unread in (invalid, b'{"cells": [', b"\xff\xfe", b"[" * 100_000):
        assert as_saved(unread) is None, unread[:20]


HIDDEN = "check()\n### BEGIN HIDDEN TESTS\nsecret()\n### END HIDDEN TESTS\nlast()"


@pytest.mark.parametrize(
    ("handed_in", "reported"),
    [("check()\nlast()", False), ("check()\nmine()", True)],
    ids=["as-released", "edited"],
)
def test_locked_test_cell_gets_its_hidden_tests_back(handed_in, reported, caplog):
    """A test cell handed in as released (hidden tests out) gets the source's text back without a
    warning; one changed otherwise gets it back too, reported."""
    from nbgrader import utils

    source = _graded("test-h", HIDDEN, grade=True, solution=False, points=1, locked=True)
    restorer = _restorer()
    found = SimpleNamespace(
        name="test-h", source=HIDDEN, cell_type="code", locked=True, checksum=utils.compute_checksum(source)
    )
    restorer.gradebook.find_source_cell = lambda *_: found
    restorer.gradebook.find_graded_cell = lambda *_: SimpleNamespace(max_score=1)
    cell = _graded("test-h", handed_in, grade=True, solution=False, points=1, locked=True)
    with caplog.at_level("WARNING"):
        restorer.preprocess_cell(cell, {}, 0)
    assert cell.source == HIDDEN
    assert ("checksum" in caplog.text) is reported
