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
    ("answers", "name", "expected"),
    [
        # alone: the defining cell, the last of two
        (["def f(): return 1", "x = 2", "def f(): return 3"], "f", [2]),
        # a helper in a later cell, and its own helper in an earlier one; an unrelated cell left out
        (["def g(): return h()", "def f(): return g()", "y = 5", "def h(): return 1"], "f", [0, 1, 3]),
        # a cell that does not parse is never chosen; a name bound in the cell itself needs nothing
        (["def g(:", "def f(g=1): return g"], "f", [1]),
        # helpers that call each other: each chosen once
        (["def f(): return g()", "def g(): return f()"], "f", [0, 1]),
        ([], "f", []),
    ],
)
def test_cells_for_a_name_are_those_it_needs(answers, name, expected):
    """The answer cells a helper process runs for a name: the one defining it and those defining
    what it uses, in the notebook's order, and no other."""
    from autograder.judge.core import cells_for

    assert cells_for(answers, name) == [answers[i] for i in expected]
