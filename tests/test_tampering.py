"""The static scan for code that interferes with grading: what it names, and what it leaves alone."""

from __future__ import annotations

import nbformat
import pytest

from autograder.paths import NOTEBOOKS, RELEASE, SOLUTIONS
from autograder.tampering import scan_notebook, scan_source

FLAGGED = {
    "rebinding numpy": ("import numpy as np\nnp.allclose = lambda *a, **k: True", "rebinds an attribute"),
    "rebinding through an alias": ("import numpy._core.numeric as n\nn.isclose = print", "rebinds an attribute"),
    "rebinding a checks class": ("from remat_lesson import Checks\nChecks.close = print", "rebinds an attribute"),
    "setattr on a module": ("import jax\nsetattr(jax, 'grad', print)", "rebinds an attribute"),
    "replacing stdout": ("import sys\nsys.stdout = open('x', 'w')", "rebinds an attribute"),
    "IPython's traceback": ("get_ipython().showtraceback = print", "changes how IPython"),
    "IPython's formatter": ("ip = get_ipython()\nip.display_formatter.formatters", "changes how IPython"),
    "IPython's events": ("get_ipython().events.register('post_run_cell', print)", "changes how IPython"),
    "the module table": ("import sys\nsys.modules['remat_lesson'] = None", "module table"),
    "builtins": ("import builtins\nbuiltins.print = len", "builtins"),
    "dunder builtins": ("__builtins__.len = print", "builtins"),
    "exec of text": ("exec('x = 1')", "code built from text"),
    "fork": ("import os as o\no.fork()", "forks processes"),
    "exit": ("import os\nos._exit(1)", "ends the kernel"),
    "sockets": ("import socket", "network"),
    "subprocess": ("from subprocess import run", "starts processes"),
    "a path outside": ("open('/etc/passwd')", "outside the submission folder"),
    "the home folder": ("open('~/.ipython/x')", "outside the submission folder"),
    "the gradebook": ("db = 'gradebook.db'", "grader's or the lesson's own files"),
    "the shipped module": ("open('remat_lesson.py', 'a')", "grader's or the lesson's own files"),
    "magics still parse": ("%matplotlib inline\nimport socket", "network"),
}


@pytest.mark.parametrize("case", sorted(FLAGGED))
def test_each_kind_of_interference_is_named(case):
    source, meaning = FLAGGED[case]
    findings = scan_source(source)
    assert any(meaning in found[1] for found in findings), findings


@pytest.mark.parametrize(
    "source",
    [
        "# np.allclose = lambda *a: True, sys.modules, showtraceback, os.fork()\nx = 1",
        "text = 'sys.modules and builtins are mentioned here'",
        "import numpy as np\nvalues = np.zeros(3)\nvalues[0] = 1",
        "class Thing:\n    pass\nthing = Thing()\nthing.value = 3",
        "import matplotlib.pyplot as plt\nplt.rcParams['figure.dpi'] = 100",
        "ratio = 1 / 2",
    ],
)
def test_comments_strings_and_ordinary_code_are_not_named(source):
    assert scan_source(source) == []


def test_the_lessons_own_answers_and_the_release_are_not_flagged():
    for folder in (SOLUTIONS, RELEASE):
        for name in NOTEBOOKS:
            notebook = nbformat.read(folder / name, as_version=4)
            for cell in notebook.cells:  # scan answers as a learner would have them: unlocked
                cell.metadata.pop("nbgrader", None)
            assert scan_notebook(notebook) == [], f"{folder.name}/{name}"


def test_locked_and_test_cells_are_not_scanned():
    notebook = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "import os\nos._exit(0)", metadata={"nbgrader": {"locked": True, "grade_id": "a"}}
            ),
            nbformat.v4.new_code_cell(
                "exec('1')", metadata={"nbgrader": {"grade": True, "solution": False, "grade_id": "t"}}
            ),
            nbformat.v4.new_code_cell(
                "exec('1')", metadata={"nbgrader": {"grade": False, "solution": True, "grade_id": "s"}}
            ),
        ]
    )
    assert scan_notebook(notebook) == ["cell 3, line 1: runs code built from text (exec(...))"]
