"""The reference run stops grading when the instructor's notebooks are not clean.

The grader judges every learner against this run, and the compile cache comes from it: an
error or a warning in any of its cells (the `KeyError` a demonstration once raised in autograde
mode) must stop grading before anyone is graded, naming the notebook and the cell.
"""

from __future__ import annotations

import json

import nbformat
import pytest

from autograder.paths import NOTEBOOKS
from autograder.reference import REFERENCE, ReferenceRun, into_template, problems_of
from autograder.verdicts import ReferenceError


def _cell(*outputs) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell("pass")
    cell.outputs = list(outputs)
    return cell


def _runs() -> list[ReferenceRun]:
    return [ReferenceRun(notebook=name, host="host", reference={"cell": name}) for name in NOTEBOOKS]


def test_errors_and_warnings_are_found_with_their_cell():
    notebook = nbformat.v4.new_notebook(
        cells=[
            _cell(nbformat.v4.new_output("stream", name="stdout", text="fine\n")),
            _cell(nbformat.v4.new_output("stream", name="stderr", text="x.py:3: UserWarning: careful\n")),
            _cell(nbformat.v4.new_output("error", ename="KeyError", evalue="'checkpoint_dots'", traceback=[])),
            _cell(nbformat.v4.new_output("stream", name="stderr", text="\n")),
        ]
    )
    assert problems_of(notebook) == [
        "cell 2 wrote to stderr: x.py:3: UserWarning: careful",
        "cell 3: KeyError: 'checkpoint_dots'",
    ]


def test_an_unclean_reference_run_stops_grading_and_names_what_failed():
    runs = _runs()
    runs[2].problems = ["cell 40: KeyError: 'checkpoint_dots'"]
    with pytest.raises(ReferenceError, match=rf"{NOTEBOOKS[2]}: cell 40: KeyError: 'checkpoint_dots'"):
        into_template({}, runs)


def test_a_missing_notebook_stops_grading():
    with pytest.raises(ReferenceError, match=NOTEBOOKS[-1]):
        into_template({}, _runs()[:-1])


def test_a_clean_reference_run_travels_in_the_template():
    template = into_template({"kept": b"1"}, _runs())
    assert template["kept"] == b"1"
    reference = json.loads(template[REFERENCE])
    assert sorted(reference) == sorted(name.removesuffix(".ipynb") for name in NOTEBOOKS)
