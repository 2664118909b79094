"""The packages follow the flow: `bundle` (author, release) may use the grader's paths and course
helpers; `autograder` (grade, feedback) never imports `bundle`; no module imports itself back
through another, even inside a function."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from autograder.course.paths import ROOT

PACKAGES = ("autograder", "bundle")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The bundle's modules one file imports, anywhere in it (lazy imports too), by full name."""
    here = _module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            stem = ".".join([*base, *(node.module.split(".") if node.module else [])])
            for alias in node.names:  # `from a.b import c`: c is a module of a.b, or a name in it
                found.add(f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in modules else stem)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {name for name in found if name in modules}


def import_graph() -> dict[str, set[str]]:
    paths = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    modules = {_module_name(p) for p in paths}
    return {_module_name(p): _imports(p, modules) - {_module_name(p)} for p in paths}


def test_grader_imports_no_authoring_code():
    """The grader imports nothing of the authoring side."""
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
    assert "autograder.kernel.sandbox" in graph["autograder.kernel.kernels"]  # a plain relative import
    assert "autograder.course.paths" in graph["bundle.release"]  # an absolute one
    assert "autograder.notebook.execute" in graph["autograder.run.worker"]  # one inside a function


# ---------------------------------------------------------------------------------------
# Subpackages: one part of the flow each, earliest first.
# ---------------------------------------------------------------------------------------
#: The grader's subpackages, earliest first. A module imports only from its own subpackage or an
#: earlier one; what runs inside a sandbox imports nothing but what is sent with it. The package's
#: own top-level files (`__init__`, `__main__`, the course configuration) come last.
ORDER = ("sandboxed", "upstream", "course", "gradebook", "kernel", "judge", "adapters", "notebook", "run", "commands")
TOP_LEVEL = {"__init__", "__main__"}


def subpackage(module: str) -> str:
    """`autograder.kernel.sandbox` -> `kernel`; a top-level module -> `` (after every subpackage)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else ""


def _rank(module: str) -> int:
    name = subpackage(module)
    return ORDER.index(name) if name else len(ORDER)


def test_every_grader_module_in_a_subpackage():
    """Every module of the grader is in a subpackage of the flow."""
    folder = ROOT / "autograder"
    loose = sorted(p.stem for p in folder.glob("*.py"))
    packages = sorted(p.name for p in folder.iterdir() if (p / "__init__.py").exists())
    assert (loose, packages) == (sorted(TOP_LEVEL), sorted(ORDER))


def test_imports_go_to_same_or_earlier():
    """Imports go to the same subpackage or an earlier one."""
    wrong = [
        f"{module} imports {dep}"
        for module, deps in import_graph().items()
        if module.startswith("autograder.")
        for dep in deps
        if dep.startswith("autograder.") and _rank(dep) > _rank(module)
    ]
    assert wrong == []


def sent_as_text(module: str) -> bool:
    """Whether a module runs in a sandbox, sent as text: the core's (autograder/sandboxed/) and an
    adapter's (a `sandboxed` folder of its own)."""
    return subpackage(module) == "sandboxed" or ".sandboxed." in module


def test_sandboxed_code_imports_only_sent():
    """What runs in a sandbox imports only what is sent with it."""
    graph = import_graph()
    sandboxed = {m for m in graph if m.startswith("autograder.") and sent_as_text(m)}
    wrong = {m: sorted(d for d in graph[m] if d.startswith("autograder.") and d not in sandboxed) for m in sandboxed}
    assert {m: deps for m, deps in wrong.items() if deps} == {}


def test_core_reaches_adapters_only_by_name():
    """No module of the core imports an adapter: it loads the one an assignment names (by its
    name, kernel/adapter.py); adapters may import the core."""
    core = {m: d for m, d in import_graph().items() if m.startswith("autograder.") and subpackage(m) != "adapters"}
    assert {
        m: sorted(d for d in deps if d.startswith("autograder.adapters"))
        for m, deps in core.items()
        if any(d.startswith("autograder.adapters") for d in deps)
    } == {}


def test_docs_list_each_module_once():
    """docs/grader.md lists every module once under its subpackage."""
    text = (ROOT / "docs" / "grader.md").read_text().split("## The code, by job")[1].split("\n## ")[0]
    rows = re.findall(r"^\| (`[a-z_/]+/`|top level) \| (`[^|]*`) \| [^|]+ \|$", text, re.M)
    folders = [(folder.strip("`") if folder != "top level" else "", names) for folder, names in rows]
    listed = sorted(f"{folder}{name}" for folder, names in folders for name in re.findall(r"`([^`]+)`", names))
    modules = sorted(str(p.relative_to(ROOT / "autograder")) for p in (ROOT / "autograder").rglob("*.py"))
    modules = [m for m in modules if not m.endswith("/__init__.py")]
    assert listed == modules


def test_builder_fixture_families_exist():
    """The fixture families the builder names are the fixtures there are."""
    from tests.fixtures import build

    families = build.__doc__.split("families:")[1]
    prefixes = set(re.findall(r"^- ([a-z]+)-\*:", families, re.M))
    references = set(re.findall(r"`([a-z-]+)`", families.split("\n- ")[1]))
    fixtures = sorted(p.name for p in build.SUBMISSIONS.iterdir() if p.is_dir())
    unnamed = [f for f in fixtures if f not in references and f.split("-")[0] not in prefixes]
    empty = [family for family in prefixes if not any(f.startswith(f"{family}-") for f in fixtures)]
    assert (unnamed, empty, references - set(fixtures)) == ([], [], set())


def test_no_file_of_the_bundle_is_ignored_by_git():
    """A rule in .gitignore must not hide a fixture or a notebook: the clean checkout CI grades
    would lack it (`submissions/` once hid two new fixture folders)."""
    import shutil
    import subprocess

    import pytest

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    folders = ["tests", "notebooks", "solutions", "data", "projects", "autograder", "bundle"]
    listed = subprocess.run(
        ["git", "ls-files", "--others", "--ignored", "--exclude-standard", *folders],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    hidden = [p for p in listed if "__pycache__" not in p and not p.endswith(".pyc")]
    assert hidden == []


def print_graph() -> None:
    """The grader's import graph by subpackage, then module (python -m tests.unit.test_layout)."""
    graph = {m: d for m, d in import_graph().items() if m.startswith("autograder.")}
    for name in (*ORDER, ""):
        inside = sorted(m for m in graph if subpackage(m) == name and m.removeprefix("autograder.") not in ORDER)
        into = sorted({subpackage(d) or "autograder" for m in inside for d in graph[m]} - {name})
        print(f"[{name or 'top level'}] uses: {', '.join(into) or '-'}")
        for module in inside:
            deps = sorted(d.removeprefix("autograder.") for d in graph[module] if d.startswith("autograder."))
            print(f"  {module.removeprefix('autograder.'):<28} -> {', '.join(deps) or '-'}")


if __name__ == "__main__":
    print_graph()
