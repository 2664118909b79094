"""A static scan of learners' code for attempts to interfere with grading, for an instructor to review.

The scan flags; it never changes a score (plenty of honest code imports `os`). Grading does not
depend on it: the sandbox keeps learner code away from everything else, and the grader decides
every score in its own process (autograder/judge/core.py). What it names, reading the code's
syntax tree (so comments and strings about these things do not count, and aliases do):

- rebinding an attribute of an imported module or class (NumPy, JAX, sys.stdout, the checks...);
- changing how IPython runs or reports code (its traceback display, display formatters, input
  transformers, event hooks);
- reaching into `sys.modules` or Python's builtins, or up the call stack into its callers' frames;
- processes, signals, sockets, ctypes and exits; code built from text (`exec`, `eval`);
- paths outside the submission folder, and the grader's files;
- the grader's agent in the kernel (its name, sys's namespace where it lives, the garbage
  collector's list of every object);
- the insides of a function it was handed (its closure, code, or the recipe the grader made it
  from): a check's function hides nothing from code in the same process, so a learner's function
  could rebuild it otherwise (a check's network, recomputed in float64) and pass as correct.
"""

from __future__ import annotations

import ast

import nbformat

from autograder.course.cell_source import python_tree

#: IPython's machinery a learner has no reason to touch.
IPYTHON_INTERNALS = frozenset(
    {
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
    }
)
#: Modules whose use deserves a look in an assignment that needs none of them.
RISKY_MODULES = {
    "subprocess": "starts processes",
    "multiprocessing": "starts processes",
    "socket": "opens network connections",
    "ctypes": "calls C code directly (ctypes)",
    "signal": "sends or handles signals",
    "sqlite3": "opens databases",
    "distributed": "connects to Dask",
    "dask": "connects to Dask",
    "builtins": "touches Python's builtins",
    "importlib": "imports modules by hand",
    "shutil": "copies or deletes files",
}
RISKY_CALLS = {
    ("os", "fork"): "forks processes",
    ("os", "kill"): "sends signals",
    ("os", "killpg"): "sends signals",
    ("os", "_exit"): "ends the kernel",
    ("os", "system"): "runs shell commands",
    ("os", "popen"): "runs shell commands",
    ("os", "execv"): "replaces the kernel",
    ("os", "walk"): "walks the file system",
    ("sys", "exit"): "ends the kernel",
    ("gc", "get_objects"): "walks every object of the kernel (the grader's agent among them)",
    ("gc", "get_referrers"): "walks every object of the kernel (the grader's agent among them)",
    # The same insides of a function as FUNCTION_INSIDES, through another handle.
    ("gc", "get_referents"): "reads the insides of a function (its closure, code or recipe)",
    ("inspect", "getclosurevars"): "reads the insides of a function (its closure, code or recipe)",
    ("inspect", "unwrap"): "reads the insides of a function (its closure, code or recipe)",
}
#: What the grader's own names in a kernel start with (kernel_channel.AGENT_SLOT, the agent's
#: globals): no learner's code has a reason to spell it.
GRADER_NAMES = "_autograder"
AGENT_MEANING = "reaches for the grader's agent in the kernel"
#: Attributes that reach the call stack's frames: the variables of whoever called the code (in
#: the grader's helpers, their lines out). Honest learners' code reads none of them.
FRAME_ATTRIBUTES = frozenset(
    {"_getframe", "currentframe", "f_back", "f_locals", "f_globals", "tb_frame", "gi_frame", "cr_frame", "ag_frame"}
)
#: Attributes that open up a function: what it closes over, its code, its defaults, what it wraps,
#: and the grader's recipe and handle on it. Honest answers call the functions they are handed.
FUNCTION_INSIDES = frozenset(
    {"__closure__", "cell_contents", "__code__", "__globals__", "__wrapped__", "__defaults__", "__kwdefaults__"}
    # autograder/judge/protocol.py's RECIPE and REMOTE, spelled out: the scan comes before the judge
    # in the flow and imports nothing of it (tests/unit/test_tampering.py holds them equal).
    | {"__recipe__", "__judge_remote__"}
)
FUNCTION_INSIDES_MEANING = RISKY_CALLS[("inspect", "unwrap")]
#: Files of the grader's a submission's code has no business naming: the gradebook, nbgrader's
#: configuration (and the assignment's shipped files, which the scan is given: `scan_notebook`).
GRADER_FILES = ("gradebook.db", "nbgrader_config")


def _root(node) -> ast.AST:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node


def _dotted(node) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif isinstance(node, ast.Call):
        parts.append(_dotted(node.func) + "()")
    return ".".join(reversed(parts))


class _Scanner(ast.NodeVisitor):
    def __init__(self, shipped: tuple[str, ...] = ()):
        self.imported: dict[str, str] = {}  # local name -> module it came from
        self.found: list[tuple[int, str, str]] = []  # (line, meaning, code)
        self.files = (*GRADER_FILES, *shipped)

    def flag(self, node, meaning: str, code: str) -> None:
        self.found.append((getattr(node, "lineno", 1), meaning, code))

    def visit_Import(self, node):
        for alias in node.names:
            self.imported[(alias.asname or alias.name).split(".")[0]] = alias.name
            top = alias.name.split(".")[0]
            if top in RISKY_MODULES:
                self.flag(node, RISKY_MODULES[top], f"import {alias.name}")

    def visit_ImportFrom(self, node):
        module = node.module or ""
        for alias in node.names:
            self.imported[alias.asname or alias.name] = f"{module}.{alias.name}"
            if GRADER_NAMES in alias.name:
                self.flag(node, AGENT_MEANING, f"from {module} import {alias.name}")
        top = module.split(".")[0]
        if top in RISKY_MODULES:
            self.flag(node, RISKY_MODULES[top], f"from {module} import ...")

    def _is_outside_object(self, target) -> bool:
        root = _root(target)
        if isinstance(root, ast.Name):
            return root.id in self.imported or root.id in ("__builtins__",)
        return isinstance(root, ast.Call) and _dotted(root.func) in ("get_ipython", "IPython.get_ipython")

    def _check_target(self, target, node) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for item in target.elts:
                self._check_target(item, node)
        elif isinstance(target, ast.Attribute) and self._is_outside_object(target):
            self.flag(node, "rebinds an attribute of an imported module or object", _dotted(target))

    def visit_Assign(self, node):
        for target in node.targets:
            self._check_target(target, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._check_target(node.target, node)
        self.generic_visit(node)

    def visit_Delete(self, node):
        for target in node.targets:
            self._check_target(target, node)
        self.generic_visit(node)

    def visit_Attribute(self, node):
        dotted = _dotted(node)
        if node.attr in IPYTHON_INTERNALS and (
            "get_ipython" in dotted or _dotted(node.value) in ("ip", "shell", "ipython")
        ):
            self.flag(node, "changes how IPython runs or reports code", dotted)
        elif node.attr == "modules" and isinstance(node.value, ast.Name) and self.imported.get(node.value.id) == "sys":
            self.flag(node, "edits the module table (sys.modules)", dotted)
        elif node.attr in FRAME_ATTRIBUTES:
            self.flag(node, "reads the call stack's frames (its callers' variables)", dotted)
        elif node.attr in FUNCTION_INSIDES:
            self.flag(node, FUNCTION_INSIDES_MEANING, dotted)
        elif node.attr == "__dict__" and isinstance(node.value, ast.Name) and self.imported.get(node.value.id) == "sys":
            self.flag(node, AGENT_MEANING + " (sys's namespace)", dotted)
        elif GRADER_NAMES in node.attr:
            self.flag(node, AGENT_MEANING, dotted)
        self.generic_visit(node)

    def visit_Name(self, node):
        if node.id == "__builtins__":
            self.flag(node, "touches Python's builtins", node.id)
        elif GRADER_NAMES in node.id:
            self.flag(node, AGENT_MEANING, node.id)

    def visit_Call(self, node):
        name = _dotted(node.func)
        if name in ("exec", "eval", "compile", "__import__"):
            self.flag(node, "runs code built from text", f"{name}(...)")
        elif (
            name in ("setattr", "delattr")
            and node.args
            and self._is_outside_object(ast.Attribute(value=node.args[0], attr="x"))
        ):
            self.flag(
                node, "rebinds an attribute of an imported module or object", f"{name}({_dotted(node.args[0])}, ...)"
            )
        elif name in ("exit", "quit"):
            self.flag(node, "ends the kernel", f"{name}()")
        elif (
            name in ("vars", "getattr")
            and node.args
            and isinstance(node.args[0], ast.Name)
            and self.imported.get(node.args[0].id) == "sys"
        ):
            self.flag(node, AGENT_MEANING + " (sys's namespace)", f"{name}({node.args[0].id}, ...)")
        # the full name, through imports: `q.system` after `import os as q`, `system` after
        # `from os import system` are both os.system
        head, _, rest = name.partition(".")
        module, _, function = ".".join(filter(None, [self.imported.get(head, head), rest])).rpartition(".")
        if (module, function) in RISKY_CALLS and head in self.imported:
            self.flag(node, RISKY_CALLS[(module, function)], name)
        self.generic_visit(node)

    def visit_Constant(self, node):
        if isinstance(node.value, str):
            text = node.value.strip()
            if GRADER_NAMES in text:
                self.flag(node, AGENT_MEANING, repr(text[:60]))
            elif text in FUNCTION_INSIDES:  # getattr(fn, "__closure__")
                self.flag(node, FUNCTION_INSIDES_MEANING, repr(text))
            elif any(name in text for name in self.files):
                self.flag(node, "names the grader's or the assignment's own files", repr(text[:60]))
            elif text.startswith(("/", "~", "../")) and len(text) > 1 and "\n" not in text:
                self.flag(node, "opens a path outside the submission folder", repr(text[:60]))


def _tree(source: str) -> ast.AST | None:
    found = python_tree(source)
    return None if found is None else found[1]


def _graded_by_source(cell) -> bool:
    """Locked and test cells are put back from the source before grading: nothing to scan."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return isinstance(meta, dict) and bool(meta.get("locked") or (meta.get("grade") and not meta.get("solution")))


def scan_source(source: str, shipped: tuple[str, ...] = ()) -> list[tuple[int, str, str]]:
    """(line, what it means, the code) for each suspicious construct of one cell's code (`shipped`:
    the names of the assignment's shipped files, which it has no business naming). Code too deeply
    nested to read (a sum of a thousand terms) is named as not scanned, never raises."""
    try:
        tree = _tree(source)
        if tree is None:
            first = source.strip().splitlines()[0][:60] if source.strip() else ""
            return [(1, "code that does not parse (not scanned)", first)]
        scanner = _Scanner(shipped)
        scanner.visit(tree)
    except (RecursionError, MemoryError, ValueError):
        return [(1, "code nested too deeply to read (not scanned)", "")]
    return scanner.found


def scan_notebook(notebook: nbformat.NotebookNode, shipped: tuple[str, ...] = ()) -> list[str]:
    """One line per suspicious construct found in the learner's code cells (`shipped`: the names of
    the assignment's shipped files)."""
    findings = []
    for index, cell in enumerate(notebook.cells):
        if cell.get("cell_type") != "code" or _graded_by_source(cell) or not isinstance(cell.get("source"), str):
            continue
        for line, meaning, code in scan_source(cell.source, shipped):
            findings.append(f"cell {index + 1}, line {line}: {meaning} ({code})")
    return findings
