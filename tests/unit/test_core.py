"""The grader's core knows no lesson: it grades any nbgrader assignment with the environment that
assignment needs. Whatever knows JAX, Matplotlib or this bundle's lesson lives in an adapter
(autograder/adapters/), which the core reaches only by the name a checks module declares."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import pytest

from autograder.adapters import lesson
from autograder.course.paths import AUTOGRADER, ROOT

#: What only an assignment's environment has: the core never imports it.
ADAPTERS_PACKAGES = ("jax", "jaxlib", "matplotlib")


def core_modules() -> list[Path]:
    """Every module of the grader outside its adapters."""
    return [p for p in sorted(AUTOGRADER.rglob("*.py")) if "adapters" not in p.relative_to(AUTOGRADER).parts]


def lesson_names() -> set[str]:
    """Every name of the lesson: its assignment, notebooks, shipped files (and their modules'
    names), checks module, and the adapter's own module."""
    files = (*lesson.NOTEBOOKS, *lesson.SHIPPED_MODULES, *lesson.SHIPPED_FILES)
    stems = {Path(name).stem for name in files}
    return {lesson.ASSIGNMENT, lesson.CHECKS_MODULE, lesson.__name__, "remat", *files, *stems}


def test_the_core_is_the_grader_less_its_adapters():
    assert len(core_modules()) > 50
    assert not [p for p in core_modules() if "jax" in p.name or "lesson" in p.name]


def test_no_core_module_imports_an_assignments_packages():
    """No module of the core imports JAX or Matplotlib, at its top or inside a function."""
    found = []
    for path in core_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in ADAPTERS_PACKAGES]
    assert found == []


def test_no_core_module_names_the_lesson():
    """No module of the core names the lesson: not its assignment, notebooks, files, checks module
    or adapter (a grep of every line, docstrings included)."""
    names = lesson_names()
    found = [
        f"{path.relative_to(ROOT)}:{number}: {name}"
        for path in core_modules()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for name in names
        if name in line
    ]
    assert found == []


def test_the_grep_would_find_the_lesson():
    """The check above finds what it looks for: the lesson's adapter names the lesson."""
    text = Path(lesson.__file__).read_text()
    assert {lesson.ASSIGNMENT, lesson.CHECKS_MODULE, *lesson.NOTEBOOKS} <= {n for n in lesson_names() if n in text}


def test_core_dependencies_hold_no_assignments_packages():
    """An instructor's `pip install` of the grader brings neither JAX nor Matplotlib: they are the
    lesson's extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = [requirement.split(">")[0].split("=")[0].split(";")[0].strip() for requirement in project["dependencies"]]
    lesson_extra = " ".join(project["optional-dependencies"]["lesson"])
    assert not set(core) & set(ADAPTERS_PACKAGES) and all(name in lesson_extra for name in ADAPTERS_PACKAGES)


def test_class_report_draws_without_matplotlib(tmp_path, monkeypatch):
    """The class report draws its figures with Matplotlib not importable."""
    from autograder.gradebook.class_report import build_report, write_report
    from autograder.gradebook.totals import CellScore, ClassTotals

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of it now fails
    totals = ClassTotals("ps1", ["a"], {"a": 2.0}, [CellScore("ann", "a", "t", 1.0, 2.0, False)])
    page = write_report(build_report("ps1", totals, {}), tmp_path)
    assert "<svg" in page.read_text()


@pytest.mark.parametrize("name", ["autograder.adapters.lesson", "autograder.adapters.jax_programs"])
def test_adapters_offer_an_adapter(name):
    from autograder.kernel.adapter import Adapter, load_adapter

    assert isinstance(load_adapter(name), Adapter)


@pytest.mark.parametrize(
    ("answers", "name", "above", "expected"),
    [
        # every cell that binds it, in order (the last one's binding is the one left, as in the kernel)
        (["def f(): return 1", "x = 2", "def f(): return 3"], "f", None, [0, 2]),
        # a setting rebound from itself: both cells
        (["X = {'a': 1}", "X = {**X, 'b': 2}", "def f(): return X"], "f", None, [0, 1, 2]),
        # a global of another cell that is also a local name somewhere in the reading cell
        (["W2 = 3", "def f(W2=None):\n    return W2\ndef g():\n    return W2"], "g", None, [0, 1]),
        # global inside a function; a star import; a match capture
        (["def setup():\n    global K2\n    K2 = 1", "def f(): return K2"], "f", None, [0, 1]),
        (["from math import *", "def f(): return floor(1.5)"], "f", None, [0, 1]),
        (["match 1:\n    case Q:\n        pass", "def f(): return Q"], "f", None, [0, 1]),
        # IPython's syntax: a line magic, a cell magic over the definition
        (["%timeit 1\ndef f(): return 1"], "f", None, [0]),
        (["%%time\ndef f(): return 1"], "f", None, [0]),
        # a helper in a later cell, and its own helper in an earlier one; an unrelated cell left out
        (["def g(): return h()", "def f(): return g()", "y = 5", "def h(): return 1"], "f", None, [0, 1, 3]),
        # a cell that does not parse is never chosen; a name bound in the cell itself needs nothing
        (["def g(:", "def f(g=1): return g"], "f", None, [1]),
        # helpers that call each other: each chosen once
        (["def f(): return g()", "def g(): return f()"], "f", None, [0, 1]),
        ([], "f", None, []),
        # every way a cell binds a name at top level: imports, tuples, stars, walrus, for, with, except
        (["from functools import partial", "def f(): return partial(g)", "G, *H = 1, 2"], "f", None, [0, 1]),
        (["A, (B, C) = 1, (2, 3)", "def f(): return C"], "f", None, [0, 1]),
        (["if (D := 4):\n    pass", "def f(): return D"], "f", None, [0, 1]),
        (["for E in range(3):\n    pass", "def f(): return E"], "f", None, [0, 1]),
        (["with open('x') as F:\n    pass", "def f(): return F"], "f", None, [0, 1]),
        (
            ["try:\n    import numpy as K\nexcept ImportError as Z:\n    K = None", "def f(): return K"],
            "f",
            None,
            [0, 1],
        ),
        # a name bound only inside a function is not the module's; a comprehension's may be (walrus)
        (["def g():\n    M = 1", "[(N := n) for n in range(2)]", "def f(): return M + N"], "f", None, [1, 2]),
        # above the test cell only: a later rebinding, or a helper defined below it, is not the kernel's then
        (["def h(): return 1", "def f(): return h()", "def h(): return 2"], "f", 2, [0, 1]),
        (["def f(): return h()", "def h(): return 2"], "f", 1, [0]),
        (["def f(): return 1"], "f", 0, []),
    ],
)
def test_cells_for_a_name_are_those_it_needs(answers, name, above, expected):
    """The answer cells a helper process runs for a name: the one binding it and those binding
    what it uses, among the cells above the test cell, in the notebook's order, and no other."""
    from autograder.course.cell_source import as_python
    from autograder.judge.core import AnswerCells

    assert AnswerCells(answers).cells_for(name, above) == [as_python(answers[i]) for i in expected]


def test_answer_cells_parsed_once_whatever_they_name(monkeypatch):
    """Each answer cell is parsed once, however many names it uses and however often a name is
    asked for: a cell of thousands of names costs one parse, not one per name."""
    import ast as ast_module

    from autograder.judge import core

    parsed = []
    real_parse = ast_module.parse
    monkeypatch.setattr(core.ast, "parse", lambda source, *a, **k: parsed.append(source) or real_parse(source, *a, **k))
    many = "def f():\n    return [" + ", ".join(f"v{i}" for i in range(3000)) + "]\n"
    answers = [many, *(f"v{i} = {i}" for i in range(0, 3000, 7)), "def g(): return f()"]
    cells = core.AnswerCells(answers)
    for above in (None, len(answers), len(answers) - 1):
        for _ in range(3):
            cells.cells_for("g", above)
            cells.cells_for("f", above)
    assert len(parsed) == len(answers)
    assert len(cells.cells_for("g")) == 2 + len(range(0, 3000, 7))
