"""The packages follow the flow: `bundle` (author, release) may use the grader's paths and course
helpers; `autograder` (grade, feedback) never imports `bundle`; no module imports itself back
through another, even inside a function."""

from __future__ import annotations

import ast
import re
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


# ---------------------------------------------------------------------------------------
# Rooms: one job per module, grouped along the flow.
# ---------------------------------------------------------------------------------------
#: The grader's rooms, earliest first. A module imports only from its own room or an earlier
#: one; what runs inside a sandbox imports nothing but what is sent with it.
ROOMS = {
    "in a sandbox": {
        "confine",
        "wire",
        "agent",
        "kernel_host_program",
        "artifact_runner",
        "numpy_runner",
        "program_builder",
        "program_data",
    },
    "foundations": {
        "__init__",
        "paths",
        "course",
        "task_template",
        "submissions",
        "intake",
        "tampering",
        "hidden_tests",
        "sandbox",
        "compile_cache",
        "output_caps",
        "tls",
        "options",
        "console",
    },
    "the class gradebook": {"class_gradebook", "class_course", "merge", "reports", "student_files", "class_report"},
    "the kernel": {"process_limits", "helpers", "kernel_host", "kernels", "kernel_channel"},
    "the judge": {"judge", "judged_cells"},
    "one notebook": {"execute", "repair", "pages", "plugin"},
    "one student": {"worker", "reference"},
    "the run": {"runners", "progress", "grade", "feedback"},
    "commands": {"export", "cli", "__main__", "bench_grading", "nbgrader_config"},
}


def _room_of() -> dict[str, int]:
    return {module: rank for rank, modules in enumerate(ROOMS.values()) for module in modules}


def test_every_module_of_the_grader_is_in_exactly_one_room():
    modules = sorted(p.stem for p in (ROOT / "autograder").glob("*.py"))
    placed = [m for modules_ in ROOMS.values() for m in modules_]
    assert sorted(placed) == modules  # a new module is placed here, and a removed one taken out


def test_imports_go_to_the_same_room_or_an_earlier_one():
    rank = _room_of()
    rooms = list(ROOMS)
    wrong = [
        f"{module} ({rooms[rank[module]]}) imports {dep} ({rooms[rank[dep]]})"
        for module, deps in import_graph().items()
        if module.startswith("autograder.")
        for dep in (d.split(".", 1)[1] for d in deps if d.startswith("autograder."))
        if rank[dep] > rank[module.split(".", 1)[1]]
    ]
    assert wrong == []


def test_what_runs_in_a_sandbox_imports_only_what_is_sent_with_it():
    sent = ROOMS["in a sandbox"]
    graph = import_graph()
    wrong = {m: sorted(graph[f"autograder.{m}"] - {f"autograder.{s}" for s in sent}) for m in sent}
    assert {m: deps for m, deps in wrong.items() if deps} == {}


def test_the_readme_lists_every_module_once_with_its_room():
    text = (ROOT / "autograder" / "README.md").read_text().split("## The code, by job")[1].split("\n## ")[0]
    rows = re.findall(r"^\| ([^|]*) \| (`[^|]*`) \| [^|]+ \|$", text, re.M)
    listed = {
        name.removesuffix(".py"): room.strip() for room, names in rows for name in re.findall(r"`([^`]+)`", names)
    }
    modules = {p.stem for p in (ROOT / "autograder").glob("*.py")}
    assert sorted(listed) == sorted(modules)
    room_names = {module: room for room, modules_ in ROOMS.items() for module in modules_}
    assert {m: r for m, r in listed.items() if r and r != room_names[m]} == {}


def test_the_fixture_families_the_builder_names_are_the_fixtures_there_are():
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
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()
    hidden = [p for p in listed if "__pycache__" not in p and not p.endswith(".pyc")]
    assert hidden == []


def print_graph() -> None:
    """The grader's import graph, room by room (python -m tests.test_layout)."""
    graph = import_graph()
    for room, modules in ROOMS.items():
        print(f"[{room}]")
        for module in sorted(modules):
            deps = sorted(d.split(".", 1)[1] for d in graph[f"autograder.{module}"] if d.startswith("autograder."))
            print(f"  {module:<20} -> {', '.join(deps) or '-'}")


if __name__ == "__main__":
    print_graph()
