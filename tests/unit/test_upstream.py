"""The grader's seams with the Jupyter packages it is built on (autograder/upstream/).

Every override of a private method of jupyter_client, nbclient, nbconvert or nbgrader, every read
of one of their private attributes and every function of theirs replaced lives in
autograder/upstream/, one module per package: a new release is checked there. The scan reads the
packages' own source for their private names, and the grader's for where it uses them.
`python -m tests.unit.test_upstream [ROOT]` prints what it finds in a checkout.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from functools import cache
from pathlib import Path

import pytest

from autograder.course.paths import ROOT
from tests.unit.test_layout import sent_as_text

#: The packages whose private members only autograder/upstream/ may use.
UPSTREAM = ("jupyter_client", "nbclient", "nbconvert", "nbgrader")
#: Packages with a seam module there too, not scanned: their private names are common words the
#: grader uses for its own (distributed has a `_deadline`, as SandboxedExecute has).
UNSCANNED = ("distributed",)


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _private(name: str) -> bool:
    return name.startswith("_") and not _dunder(name)


@cache
def upstream_private_names() -> frozenset[str]:
    """The private names the upstream packages define: their classes' methods and attributes, and
    their modules' functions."""
    names: set[str] = set()
    for package in UPSTREAM:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations, package
        for folder in spec.submodule_search_locations:
            for path in Path(folder).rglob("*.py"):
                if "tests" in path.relative_to(folder).parts:
                    continue
                for node in ast.walk(ast.parse(path.read_bytes())):
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _private(node.name):
                        names.add(node.name)
                    elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr):
                        names.add(node.attr)
                    elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                        names.update(t.id for t in targets if isinstance(t, ast.Name) and _private(t.id))
    return frozenset(names)


def _module(path: Path, root: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts)


def _grader_files(root: Path) -> list[Path]:
    """The grader's modules the rule covers: all but autograder/upstream/ and what runs in a
    sandbox, sent as text (it can import nothing of the grader: its ipykernel seams stay there)."""
    return [
        p
        for p in sorted((root / "autograder").rglob("*.py"))
        if "upstream" not in p.relative_to(root / "autograder").parts[:1] and not sent_as_text(_module(p, root))
    ]


def _upstream_aliases(tree: ast.AST) -> set[str]:
    """The names a module binds to an upstream package, module or class (`import nbgrader.api`,
    `from nbgrader.preprocessors import SaveAutoGrades`, `from nbclient import util`)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update((a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] in UPSTREAM)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in UPSTREAM:
            found.update(a.asname or a.name for a in node.names)
    return found


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _own_private_names(files: list[Path]) -> set[str]:
    """The private names the grader itself defines (outside autograder/upstream/)."""
    names = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_bytes())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _private(node.name):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr):
                names.add(node.attr)
    return names


def seams_outside_upstream(root: Path = ROOT) -> list[str]:
    """Each use of an upstream package's private member (or replacement of one of its functions)
    outside autograder/upstream/, as `file:line: what`."""
    private = upstream_private_names()
    files = _grader_files(root)
    own = _own_private_names(files)
    trees = {path: ast.parse(path.read_bytes()) for path in files}
    # Classes built on an upstream class, to a fixed point across the grader (a base that is not
    # a plain name, or a name of nothing known, such as a function's argument, counts as one).
    known = {n.name for tree in trees.values() for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    derived: set[str] = set()
    changed = True
    while changed:
        changed = False
        for tree in trees.values():
            aliases = _upstream_aliases(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name not in derived:
                    roots = [_root_name(base) for base in node.bases]
                    if any(r in aliases or r in derived or (r not in known and r not in _NOT_UPSTREAM) for r in roots):
                        derived.add(node.name)
                        changed = True
    found = []
    for path, tree in trees.items():
        where = path.relative_to(root)
        aliases = _upstream_aliases(tree)
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name in derived):
            for item in cls.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Assign)):
                    names = (
                        [t.id for t in item.targets if isinstance(t, ast.Name)]
                        if isinstance(item, ast.Assign)
                        else [item.name]
                    )
                    for name in names:
                        if name in private:
                            found.append(f"{where}:{item.lineno}: {cls.name}.{name} overrides a private member")
            for node in ast.walk(cls):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                    and node.attr in private
                ):
                    found.append(f"{where}:{node.lineno}: {cls.name} uses self.{node.attr}")
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in private
                and node.attr not in own
                # self's own, or the standard library's (os._exit, sys._current_frames)
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", *sys.stdlib_module_names))
            ):
                found.append(f"{where}:{node.lineno}: reads .{node.attr}")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in private
            ):
                found.append(f"{where}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
            elif isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Attribute) and _root_name(target) in aliases:
                        found.append(f"{where}:{node.lineno}: replaces {ast.unparse(target)}")
    return sorted(set(found))


#: Bases that are not upstream classes, known by name (the standard library's, typing's).
_NOT_UPSTREAM = frozenset({"object", "Exception", "ValueError", "RuntimeError", "Enum", "IntEnum", "Protocol"})


def test_every_seam_is_in_upstream():
    """No module of the grader outside autograder/upstream/ overrides, reads or replaces a private
    member of jupyter_client, nbclient, nbconvert or nbgrader."""
    assert seams_outside_upstream() == []


def test_each_upstream_module_is_a_package_it_opens():
    """autograder/upstream/ holds one module per package of UPSTREAM (or UNSCANNED), named for it, and
    each says why."""
    folder = ROOT / "autograder" / "upstream"
    modules = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    assert modules and set(modules) <= set(UPSTREAM + UNSCANNED)
    for name in modules:
        assert ast.get_docstring(ast.parse((folder / f"{name}.py").read_text())), name


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (
            "from nbgrader.preprocessors import SaveAutoGrades\nclass S(SaveAutoGrades):\n    def _add_score(self, c, r): ...\n",
            "S._add_score overrides",
        ),
        (
            "from nbclient import NotebookClient\nclass C(NotebookClient):\n    def f(self):\n        return self._display_id_map\n",
            "uses self._display_id_map",
        ),
        ("def f(converter):\n    return converter.exporter._preprocessors\n", "reads ._preprocessors"),
        ("def f(app):\n    return getattr(app, '_sanitizing', True)\n", "getattr(..., '_sanitizing')"),
        ("import nbgrader.api\nnbgrader.api.get_alembic_version = str\n", "replaces nbgrader.api.get_alembic_version"),
    ],
)
def test_scan_finds_each_kind_of_seam(tmp_path, code, said):
    """The scan finds each kind of seam in a module of a checkout's grader."""
    (tmp_path / "autograder" / "notebook").mkdir(parents=True)
    (tmp_path / "autograder" / "notebook" / "seam.py").write_text(code)
    (found,) = seams_outside_upstream(tmp_path)
    assert found.startswith("autograder/notebook/seam.py:") and said in found


def test_kernel_client_takes_no_huge_message():
    """Every socket of a graded kernel's client refuses a message over MAX_KERNEL_MESSAGE: a kernel
    cannot make the grader hold a huge one."""
    import zmq

    from autograder.kernel.kernels import MAX_KERNEL_MESSAGE, SandboxedKernelManager

    client = SandboxedKernelManager().client()
    try:
        for kind in (zmq.DEALER, zmq.SUB, zmq.REQ):
            with client.context.socket(kind) as socket:
                assert socket.getsockopt(zmq.MAXMSGSIZE) == MAX_KERNEL_MESSAGE
    finally:
        client.context.destroy(linger=0)


if __name__ == "__main__":
    for line in seams_outside_upstream(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT):
        print(line)
