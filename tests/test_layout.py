"""The packages follow the flow: `bundle` (author, release) may use the grader's paths and course
helpers; `autograder` (grade, feedback) never imports `bundle`; no module imports itself back
through another, even inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

from autograder.paths import ROOT

PACKAGES = ("autograder", "bundle")


def _imports(path: Path, package: str) -> set[str]:
    """The bundle modules one file imports, anywhere in it (lazy imports too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . import x, from .x import y
                names = [node.module] if node.module else [alias.name for alias in node.names]
                found.update(f"{package}.{name.split('.')[0]}" for name in names)
            elif node.module and node.module.split(".")[0] in PACKAGES:
                parts = node.module.split(".")
                found.add(".".join(parts[:2]) if len(parts) > 1 else f"{parts[0]}.{node.names[0].name}")
        elif isinstance(node, ast.Import):
            found.update(".".join(a.name.split(".")[:2]) for a in node.names if a.name.split(".")[0] in PACKAGES)
    return found


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).glob("*.py")):
            module = f"{package}.{path.stem}"
            graph[module] = _imports(path, package) - {module}
    return graph


def test_the_grader_imports_nothing_of_the_authoring_side():
    wrong = {m: sorted(d for d in deps if d.startswith("bundle.")) for m, deps in import_graph().items()}
    assert {m: d for m, d in wrong.items() if m.startswith("autograder.") and d} == {}


def test_no_import_cycle():
    graph = import_graph()
    cycles, state, path = [], {}, []

    def visit(module):
        state[module] = "open"
        path.append(module)
        for dep in sorted(graph.get(module, ())):
            if state.get(dep) == "open":
                cycles.append(path[path.index(dep) :] + [dep])
            elif dep in graph and dep not in state:
                visit(dep)
        state[module] = "done"
        path.pop()

    for module in graph:
        if module not in state:
            visit(module)
    assert cycles == []


def test_the_graph_is_read_from_the_code():
    graph = import_graph()
    assert "autograder.sandbox" in graph["autograder.kernels"]  # a plain relative import
    assert "autograder.paths" in graph["bundle.release"]  # an absolute one
    assert "autograder.execute" in graph["autograder.worker"]  # one inside a function
