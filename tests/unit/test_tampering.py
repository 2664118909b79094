"""The static scan for code that interferes with grading: what it names, and what it leaves alone."""

from __future__ import annotations

import nbformat
import pytest

from autograder.adapters.lesson import NOTEBOOKS, SHIPPED_MODULES
from autograder.course.paths import RELEASE, SOLUTIONS
from autograder.course.tampering import scan_notebook, scan_source

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
    "the gradebook": ("db = 'gradebook.db'", "grader's or the assignment's own files"),
    "the shipped module": ("open('remat_lesson.py', 'a')", "grader's or the assignment's own files"),
    "magics still parse": ("%matplotlib inline\nimport socket", "network"),
    "the agent by its slot": ("import sys\nops = sys.__dict__['_autograder_agent']", "grader's agent"),
    "the agent's slot spelled": ("slot = '_autograder_agent'", "grader's agent"),
    "sys's namespace": ("import sys as s\nvars(s).get('x')", "grader's agent"),
    "every object": ("import gc\nagents = [o for o in gc.get_objects() if isinstance(o, dict)]", "every object"),
    "the agent's globals": ("_autograder_g = None", "grader's agent"),
    "the agent by a built name": ("import sys\nagent = getattr(sys, '_auto' + 'grader_agent', None)", "grader's agent"),
    "the agent imported": ("from sys import _autograder_agent as agent", "grader's agent"),
    "a function's closure": (
        "def hvp(fn, x, d):\n    inner = fn.__closure__[0].cell_contents",
        "insides of a function",
    ),
    "a function's closure by name": (
        "def hvp(fn, x, d):\n    cells = getattr(fn, '__closure__')",
        "insides of a function",
    ),
    "a function's recipe": ("def hvp(fn, x, d):\n    weights = fn.__recipe__[2][0]", "insides of a function"),
    "what a function wraps": ("def hvp(fn, x, d):\n    return fn.__wrapped__", "insides of a function"),
    "a closure through inspect": (
        "from inspect import getclosurevars\ndef hvp(fn, x, d):\n    return getclosurevars(fn).nonlocals",
        "insides of a function",
    ),
    "a function's referents": (
        "import gc\ndef hvp(fn, x, d):\n    return gc.get_referents(fn)",
        "insides of a function",
    ),
    "unwrapped by inspect": (
        "import inspect\ndef hvp(fn, x, d):\n    return inspect.unwrap(fn)",
        "insides of a function",
    ),
}


@pytest.mark.parametrize("case", sorted(FLAGGED))
def test_each_kind_of_interference_is_named(case):
    source, meaning = FLAGGED[case]
    findings = scan_source(source, SHIPPED_MODULES)
    assert any(meaning in found[1] for found in findings), findings


def test_shipped_files_are_the_assignments():
    """The scan knows the shipped files it is given, and no assignment's by heart."""
    assert scan_source("open('remat_lesson.py', 'a')") == []
    assert scan_source("open('ps1_checks.py')", ("ps1_checks.py",))[0][1].endswith("assignment's own files")


# Every name the scan knows, written out here, so that dropping one from the scanner fails a test.
MODULES = [
    "subprocess",
    "multiprocessing",
    "socket",
    "ctypes",
    "signal",
    "sqlite3",
    "distributed",
    "dask",
    "builtins",
    "importlib",
    "shutil",
]
CALLS = [
    "os.fork",
    "os.kill",
    "os.killpg",
    "os._exit",
    "os.system",
    "os.popen",
    "os.execv",
    "os.walk",
    "sys.exit",
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "inspect.getclosurevars",
    "inspect.unwrap",
]
IPYTHON = [
    "showtraceback",
    "showsyntaxerror",
    "set_custom_exc",
    "_showtraceback",
    "events",
    "display_formatter",
    "displayhook",
    "display_pub",
    "input_transformers_post",
    "input_transformers_cleanup",
    "ast_transformers",
    "register_magic_function",
    "user_global_ns",
]
FILES = ["gradebook.db", "nbgrader_config"]


@pytest.mark.parametrize("module", MODULES)
def test_risky_module_named_however_imported(module):
    """Every risky module is named, however it is imported."""
    for source in (f"import {module}", f"import {module} as m", f"from {module} import something"):
        assert scan_source(source), source


@pytest.mark.parametrize("call", CALLS)
def test_risky_call_named_through_alias(call):
    """Every risky call is named also through an alias."""
    module, name = call.split(".")
    for source in (
        f"import {module}\n{call}()",
        f"import {module} as q\nq.{name}()",
        f"from {module} import {name}\n{name}()",
    ):
        assert scan_source(source), source


@pytest.mark.parametrize("name", IPYTHON)
def test_every_ipython_internal_is_named(name):
    assert any("changes how IPython" in f[1] for f in scan_source(f"ip = get_ipython()\nip.{name}")), name


@pytest.mark.parametrize("name", [*FILES, *SHIPPED_MODULES])
def test_every_grader_file_is_named(name):
    """The grader's files, and the shipped files of the assignment scanned, are named."""
    assert any("own files" in f[1] for f in scan_source(f"path = {name!r}", SHIPPED_MODULES)), name


FRAMES = [
    "_getframe",
    "currentframe",
    "f_back",
    "f_locals",
    "f_globals",
    "tb_frame",
    "gi_frame",
    "cr_frame",
    "ag_frame",
]


INSIDES = [
    "__closure__",
    "cell_contents",
    "__code__",
    "__globals__",
    "__wrapped__",
    "__defaults__",
    "__kwdefaults__",
    "__recipe__",
    "__judge_remote__",
]


@pytest.mark.parametrize("name", INSIDES)
def test_every_way_into_a_function_is_named(name):
    """A function a check hands over hides nothing from code in the same process: its network can be
    rebuilt from its closure or recipe and recomputed otherwise (in float64, say)."""
    for source in (f"def f(fn):\n    return fn.{name}", f"def f(fn):\n    return getattr(fn, {name!r})"):
        assert any("insides of a function" in f[1] for f in scan_source(source)), source


@pytest.mark.parametrize("name", FRAMES)
def test_every_way_up_the_call_stack_is_named(name):
    """Code that walks up to its callers' frames reaches what they hold (a helper's line out)."""
    for source in (f"import sys\nframe = sys._getframe().{name}", f"import inspect as i\ni.{name}()"):
        assert any("call stack" in f[1] for f in scan_source(source)), source


def test_scanner_knows_exactly_listed_names():
    """The scanner knows exactly the names listed here."""
    from autograder.course import tampering

    assert set(tampering.RISKY_MODULES) == set(MODULES)
    assert {".".join(pair) for pair in tampering.RISKY_CALLS} == set(CALLS)
    assert set(tampering.IPYTHON_INTERNALS) == set(IPYTHON)
    assert set(tampering.GRADER_FILES) == set(FILES)
    assert set(tampering.FRAME_ATTRIBUTES) == set(FRAMES)
    assert set(tampering.FUNCTION_INSIDES) == set(INSIDES)
    from autograder.judge.protocol import RECIPE, REMOTE

    assert {RECIPE, REMOTE} <= tampering.FUNCTION_INSIDES  # the grader's own attributes, as the judge names them


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
def test_ordinary_code_is_not_named(source):
    """Comments, strings and ordinary code are not named."""
    assert scan_source(source) == []


def test_lesson_answers_and_release_unflagged():
    """The lesson's own answers and the release are not flagged."""
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


def test_many_magic_lines_named_unscanned():
    """IPython's transformer reads a cell again for every magic line it rewrites: a cell with more
    such lines than it may read is named as not scanned (for review), and a few are still read."""
    found = scan_source("!a\n" * 2000)
    assert found == [(1, "code that does not parse (not scanned)", "!a")]
    assert any(what == "runs shell commands" for _, what, _ in scan_source("!ls\nimport os\nos.system('x')\n"))


def test_the_agents_names_are_the_ones_the_scan_knows():
    """The kernel's slot for the grader's agent starts with what the scan looks for."""
    from autograder.course.tampering import GRADER_NAMES
    from autograder.kernel.kernel_channel import AGENT_SLOT

    assert AGENT_SLOT.startswith(GRADER_NAMES)
