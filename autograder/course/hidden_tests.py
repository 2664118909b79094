"""Take the hidden tests out of graded notebooks before learners see them.

nbgrader puts the hidden tests back into the autograded notebook and the feedback HTML
(jupyter/nbgrader#917, #1363). The grader strips them from the autograded copies before it
generates feedback; the cells' outputs (the checks' report) stay, so a learner still reads
what each hidden check expected and found.
"""

from __future__ import annotations

import re

import nbformat

BEGIN, END = "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"
_BLOCK = re.compile(
    r"^[ \t]*#+[ \t]*" + BEGIN + r".*?(?:^[ \t]*#+[ \t]*" + END + r"[^\n]*(?:\n|\Z)|\Z)",
    re.MULTILINE | re.DOTALL,
)
PLACEHOLDER = "# (more checks run here when grading: their results are in the report below)\n"


def strip_source(source: str) -> str:
    return _BLOCK.sub(PLACEHOLDER, source)


def strip_hidden_tests(notebook: nbformat.NotebookNode) -> int:
    """Remove every hidden-test block from the notebook's cells, in place; return how many cells changed."""
    changed = 0
    for cell in notebook.cells:
        if BEGIN in cell.source:
            cell.source = strip_source(cell.source)
            changed += 1
    return changed
