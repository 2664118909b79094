"""A student's files taken in by the grader's own process: whatever they hold, nothing raises.

The parent-side steps of grading (reading, normalizing, the tampering scan, the console lines,
the pages' sanitizer, the hidden-test stripping, the judge's reading of answer cells) are thrown
thousands of generated notebooks by Hypothesis: `null`, numbers, lists, huge and deeply nested
values in every field, deep expressions, duplicate and missing ids, unknown cell types, binary
junk in strings. None may raise out of the per-student guard, and what comes out is a notebook
every later step can rely on.
"""

from __future__ import annotations

import json
import os

import nbformat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autograder.course.hidden_tests import strip_hidden_tests
from autograder.course.intake import NotANotebook, read_notebook, take_in
from autograder.course.tampering import scan_notebook, scan_source
from autograder.course.text_safety import console_line
from autograder.judge.core import answer_cells
from autograder.notebook.pages import sanitize_notebook

#: Examples per property: 200 in the edit-test loop, 1500 under `make test` (INTAKE_EXAMPLES).
EXAMPLES = int(os.environ.get("INTAKE_EXAMPLES", "200"))

junk_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
scalars = st.none() | st.booleans() | st.integers(-(10**30), 10**30) | st.floats(allow_nan=True) | junk_text
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(junk_text, inner, max_size=4), max_leaves=12
)
sources = (
    values
    | st.lists(junk_text, max_size=5)
    | st.sampled_from(
        [
            "x = " + "+".join(["1"] * 900),
            "f(" * 150 + ")" * 150,
            "[" * 120 + "]" * 120,
            "import os\nos.system('ls')",
            "%%bash\nls",
            "\x1b]0;owned\x07\x1b[2J",
            "### BEGIN HIDDEN TESTS\nsecret = 1\n### END HIDDEN TESTS",
            "<img src=x onerror=alert(1)>",
        ]
    )
)
nbgrader_metadata = values | st.fixed_dictionaries(
    {},
    optional={
        "grade": values,
        "solution": values,
        "locked": values,
        "grade_id": values,
        "points": values,
        "schema_version": values,
    },
)
cells = st.fixed_dictionaries(
    {},
    optional={
        "cell_type": st.sampled_from(["code", "markdown", "raw", "heading", "widget", ""]) | values,
        "source": sources,
        "metadata": values | st.fixed_dictionaries({}, optional={"nbgrader": nbgrader_metadata, "tags": values}),
        "outputs": values,
        "id": st.sampled_from(["a", "a", "same", "", "x" * 100, "bad id!"]) | values,
        "execution_count": values,
        "attachments": values,
    },
)
notebooks = (
    st.fixed_dictionaries(
        {"cells": st.lists(cells | values, max_size=8)},
        optional={"metadata": values, "nbformat": values, "nbformat_minor": values},
    )
    | values
)


def _every_step(notebook) -> None:
    """The steps that meet a normalized notebook in the grader's own process."""
    scan_notebook(notebook)
    answer_cells(notebook)
    copy = nbformat.reads(nbformat.writes(notebook), as_version=4)
    strip_hidden_tests(copy)
    sanitize_notebook(copy)
    nbformat.validate(copy)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=notebooks)
def test_intake_never_raises(data, tmp_path_factory):
    """A generated notebook is taken in or named and never raises."""
    folder = tmp_path_factory.mktemp("student")
    path = folder / "02-build.ipynb"
    path.write_text(json.dumps(data, allow_nan=True))
    taken = take_in({"02-build.ipynb": path})
    assert bool(taken.notebooks) != bool(taken.broken), (taken.notebooks, taken.broken)
    for text in taken.notebooks.values():
        notebook = nbformat.reads(text.decode(), as_version=4)
        nbformat.validate(notebook)
        assert all(isinstance(cell.source, str) for cell in notebook.cells)
        assert len({cell.id for cell in notebook.cells}) == len(notebook.cells)
        _every_step(notebook)
    for line in [trouble.line() for trouble in taken.broken + taken.findings]:
        assert not any(ord(ch) < 32 and ch != "\t" for ch in line), line


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_bytes_that_are_not_a_notebook_are_named(data):
    try:
        notebook = read_notebook(data)
    except NotANotebook as why:
        assert str(why)
    else:
        _every_step(notebook)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(junk_text | st.text(max_size=200))
def test_any_code_scanned_or_said_unscanned(source):
    """Any code is scanned or said to be unscanned."""
    for line, meaning, code in scan_source(source):
        assert isinstance(line, int) and meaning and isinstance(code, str)


@pytest.mark.parametrize(
    "odd",
    [
        {"cells": [{"cell_type": "code", "source": "x = 1", "metadata": {"nbgrader": None}}]},
        {"cells": [{"cell_type": "code", "source": None, "metadata": {}}]},
        {"cells": [{"cell_type": "code", "source": "x = " + "+".join(["1"] * 900), "metadata": {}}]},
    ],
    ids=["nbgrader-null", "source-null", "deep-expression"],
)
def test_odd_issue_notebooks_are_taken_in(odd, tmp_path):
    """The three odd notebooks of the issue are taken in."""
    path = tmp_path / "02-build.ipynb"
    path.write_text(json.dumps({**odd, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    taken = take_in({"02-build.ipynb": path})
    assert list(taken.notebooks) == ["02-build.ipynb"] and taken.broken == []


def test_console_lines_show_no_control_character():
    assert console_line("a\x1b[2Jb\rc\u202ed") == "a\\x1b[2Jb\\rc\\u202ed"
    assert len(console_line("x" * 1000)) == 303


def test_notebook_past_source_bound_is_named():
    """The scan and the pages read every character of a notebook's sources in the grader's own
    process: past 1 MiB together (the lesson's largest notebook holds under 100 KB), it is named."""
    from autograder.course.intake import MAX_NOTEBOOK_SOURCE

    cells = [{"cell_type": "markdown", "metadata": {}, "source": "a" * (MAX_NOTEBOOK_SOURCE // 4 + 1)}] * 4
    with pytest.raises(NotANotebook, match=r"MiB of source \(at most 1 MiB are graded\)"):
        read_notebook(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode())
    read_notebook(json.dumps({"cells": cells[:3], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode())


def test_notebooks_not_graded_named_by_kind():
    """What is not graded of a student's hand-in, by kind, in the assignment's order, with a renamed
    notebook matched to the missing one its name starts with; and their lines, names escaped."""
    from autograder.course.intake import not_graded, not_graded_lines
    from autograder.course.outcomes import Trouble, TroubleKind

    notebooks = ("01-understand.ipynb", "02-build.ipynb", "03-experiment.ipynb")
    handed_in = ["01-understand (1).ipynb", "02-build.ipynb", "notes\x1b[2J.ipynb"]
    unreadable = Trouble(TroubleKind.UNREADABLE, "not a readable notebook (bad JSON); graded 0", "02-build.ipynb")
    found = not_graded(notebooks, handed_in, [unreadable])
    assert found == [
        Trouble(TroubleKind.MISSING, "not handed in; graded 0", "01-understand.ipynb"),
        unreadable,
        Trouble(TroubleKind.MISSING, "not handed in; graded 0", "03-experiment.ipynb"),
        Trouble(
            TroubleKind.RENAMED,
            "not a notebook of the assignment (perhaps 01-understand.ipynb, renamed); not graded",
            "01-understand (1).ipynb",
        ),
        Trouble(TroubleKind.RENAMED, "not a notebook of the assignment; not graded", "notes\\x1b[2J.ipynb"),
    ]
    assert not_graded_lines("ann", found) == [
        "BROKEN  ann: 02-build.ipynb: not a readable notebook (bad JSON); graded 0",
        "NOTE    ann: 01-understand (1).ipynb: not a notebook of the assignment (perhaps 01-understand.ipynb, "
        "renamed); not graded",
        "NOTE    ann: notes\\x1b[2J.ipynb: not a notebook of the assignment; not graded",
        "MISSING ann: 01-understand.ipynb, 03-experiment.ipynb: not handed in; graded 0",
    ]
    assert not_graded(notebooks, list(notebooks), []) == []


def test_an_unreadable_notebook_is_not_scanned_as_another(tmp_path):
    """A notebook that cannot be read is named once, and no finding of the notebook read before it
    is counted again under its name."""
    flagged = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import ctypes\n")])
    folder = tmp_path
    (folder / "01-understand.ipynb").write_text(nbformat.writes(flagged))
    (folder / "02-build.ipynb").write_text('{"cells": [')
    taken = take_in({name: folder / name for name in ("01-understand.ipynb", "02-build.ipynb")})
    assert [finding.notebook for finding in taken.findings] == ["01-understand.ipynb"]
    assert [trouble.notebook for trouble in taken.broken] == ["02-build.ipynb"]
