"""The judge: every graded cell's checks run in the grader, and reach the learner's work only through data.

While grading, a test cell does not check anything in the learner's kernel. The kernel runs
only the cell's set-up (`kernel_part`: its imports and definitions; no item, no hidden test),
so that the learner's later cells find the names they expect. Then the judge runs the whole
cell, hidden checks included, from the course's source, in the grader's process:

- the shipped modules the cell imports are the grader's own copies, loaded from the course
  source (`TrustedModules`), never the kernel's;
- each name the cell uses that the learner defined is, here, a handle on the kernel
  (`Judge.bind`): calling it sends the kernel the function's name and the arguments as data
  (autograder/sandboxed/wire.py; fresh inputs are drawn from the run's seed, which only the grader holds);
  values the learner defined (EPSILON, HVP_DIRECTION) come over as data;
- what a check asks of a learner's program (its gradient, say) is answered by the assignment's
  adapter (`Adapter.evidence`; the JAX adapter's, autograder/adapters/jax_programs/evidence.py,
  from a program its builder rebuilds from the answer cells, never from the kernel), through
  how the judge came by the function (`rebuilt`: a name an answer cell defines, what calling it
  on the judge's values returned);
- `numpy_only(fn)` runs fn's answer cell alone in a helper where only NumPy and the standard
  library can be imported;
- a `TimedExecutable` handed to the learner's timing code asks the judge, over the kernel's
  stdin channel, at every call and every wait: the judge chooses the delays and notes the times.

Every answer is decoded into plain data and checked by the same judgments a learner's
JupyterLab runs (the course's checks module); nothing the kernel says is taken as a verdict, and no line
of a hidden test is ever sent to it (`kernel_part` and the agent's requests carry none).
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import hashlib
import importlib.util
import io
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nbformat.notebooknode import NotebookNode

from autograder.course.cell_source import python_tree
from autograder.course.errors import GraderError
from autograder.course.hidden_tests import strip_source
from autograder.course.outcomes import ItemVerdict
from autograder.course.text_safety import PLAIN_NAME, learner_name, learner_text, report_line
from autograder.judge.protocol import RECIPE, REMOTE, lacks
from autograder.kernel.helpers import HelperError, JudgeHelpers
from autograder.kernel.kernel_channel import JudgeUnavailable, KernelChannel
from autograder.sandboxed.wire import WireError, decode, encode


class LearnerRaised(GraderError):
    """The learner's code raised in their process; the class names it reported are `learner_mro`.

    `said`: what their process said (the exception's message, a refusal), escaped and marked
    (learner_text); `about`: the judge's own words before it."""

    def __init__(self, mro, said="", about: str = ""):
        super().__init__(about + learner_text(said))
        self.learner_mro = [learner_name(name) for name in list(mro)[:32]] or ["Exception"]


class ProgramDisagrees(LearnerRaised):
    """The program the judge rebuilt from the answer cells is not the one the notebook's kernel
    runs: the evidence about it is not the notebook's, and the item that needed it fails. Said by
    the judge, not raised by the learner's code (`judge_finding`: a checks module reports it as it is)."""

    judge_finding = True

    def __init__(self, why: str):
        super().__init__(
            ["ProgramDisagrees"],
            about=f"the program the grader judged is not the one your notebook runs: {why}. Its evidence earns "
            "nothing: write the answer cell so that it defines the function your notebook uses, the same "
            "wherever it runs",
        )


# ---------------------------------------------------------------------------------------
# What the kernel runs of a test cell, and which of its names are the learner's.
# ---------------------------------------------------------------------------------------
def kernel_part(source: str) -> str:
    """A test cell as the learner's kernel runs it while grading: its imports only (later cells
    may use them). No check, no hidden test, no definition of the cell's reaches the kernel."""
    tree = ast.parse(strip_source(source))
    kept: list[ast.stmt] = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    return ast.unparse(ast.Module(body=kept, type_ignores=[]))


def learner_names(source: str, tree: ast.AST | None = None) -> list[str]:
    """The names a cell uses that neither it nor Python defines: in a test cell, the learner's.
    tree: the source's, already parsed."""
    tree = ast.parse(source) if tree is None else tree
    bound: set[str] = set()
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return sorted(used - bound - set(dir(builtins)))


def _is_answer_cell(cell) -> bool:
    return (
        cell.get("cell_type") == "code"
        and isinstance(cell.get("metadata", {}).get("nbgrader"), dict)
        and bool(cell["metadata"]["nbgrader"].get("solution"))
        and isinstance(cell.get("source"), str)
    )


def answer_cells(notebook) -> list[str]:
    """The sources of a notebook's answer cells (nbgrader solution cells with code), in order."""
    return [cell.get("source", "") for cell in notebook.get("cells", []) if _is_answer_cell(cell)]


def answer_cell_positions(notebook) -> list[int]:
    """Where each of answer_cells' cells lies in the notebook (its index among all cells)."""
    return [index for index, cell in enumerate(notebook.get("cells", [])) if _is_answer_cell(cell)]


def bindings(tree: ast.AST) -> tuple[set[str], bool]:
    """(the names running a cell may bind in the notebook's namespace, whether it star-imports).
    Generous where Python's scopes are subtle: every name stored outside a function, class or
    lambda body (comprehension targets and walrus, match captures, for, with and except targets,
    tuples and stars), every name a `global` statement declares, definitions and imports; a name
    counted that a cell does not bind costs running a cell, a name missed costs a right answer."""
    found: set[str] = set()
    star = False
    pending: list[tuple[ast.AST, bool]] = [(child, False) for child in ast.iter_child_nodes(tree)]
    while pending:
        node, inside = pending.pop()  # inside: within a function, class or lambda body
        if isinstance(node, ast.Global):
            found.update(node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if not inside:
                found.add(node.name)
            pending.extend((child, True) for child in ast.iter_child_nodes(node))
            continue
        elif isinstance(node, ast.Lambda):
            pending.extend((child, True) for child in ast.iter_child_nodes(node))
            continue
        elif not inside:
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                found.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if alias.name == "*":
                        star = True
                    else:
                        found.add((alias.asname or alias.name).split(".")[0])
            elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
                found.add(node.name)
            elif isinstance(node, ast.MatchMapping) and node.rest:
                found.add(node.rest)
        pending.extend((child, inside) for child in ast.iter_child_nodes(node))
    return found, star


def names_read(tree: ast.AST) -> set[str]:
    """Every name a cell reads anywhere, whatever its scope (a local of the same name as another
    cell's global counts too: generous, as `bindings`), but Python's own."""
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)} - set(
        dir(builtins)
    )


class AnswerCells:
    """A notebook's answer cells, each made Python once (IPython's syntax as IPython runs it:
    cell_source.as_python) and read once: what it may bind and what it reads. `cells_for` then
    costs one pass over names, whatever the cells hold."""

    def __init__(self, sources: list[str]):
        self.sources = list(sources)
        self._python: list[str] = []
        self._binds: list[set[str]] = []
        self._reads: list[set[str]] = []
        self._stars: list[bool] = []
        for source in self.sources:
            found = python_tree(source)
            binds: set[str] = set()  # not Python: binds nothing, as in the kernel
            reads: set[str] = set()
            python, star = source, False
            if found is not None:
                try:
                    python, (binds, star), reads = found[0], bindings(found[1]), names_read(found[1])
                except RecursionError:
                    pass
            self._python.append(python)
            self._binds.append(binds)
            self._reads.append(reads)
            self._stars.append(star)
        self._binders: dict[int, dict[str, list[int]]] = {}  # by `above`: name -> the cells there binding it

    def cells_for(self, name: str, above: int | None = None) -> list[str]:
        """The answer cells a helper process runs for name, as Python, in the notebook's order:
        among the first `above` cells (all when None: those above the test cell being judged),
        every cell that may bind name, and every cell that may bind a name those read, in turn,
        and the cells that star-import; so a helper the learner wrote in another answer cell is
        found as the kernel has it when the test cell runs, and a cell nothing needs is never
        run. [] when no cell there binds name."""
        above = len(self.sources) if above is None else max(0, min(above, len(self.sources)))
        if above not in self._binders:
            binders: dict[str, list[int]] = {}
            for index in range(above):
                for bound in self._binds[index]:
                    binders.setdefault(bound, []).append(index)
            self._binders[above] = binders
        binders = self._binders[above]
        stars = [index for index in range(above) if self._stars[index]]
        if name not in binders and not stars:
            return []
        chosen: set[int] = set()
        seen: set[str] = set()
        wanted = [name]
        for index in [*binders.get(name, []), *stars]:
            chosen.add(index)
        pending = sorted(chosen)
        while pending or wanted:
            if pending:
                wanted.extend(self._reads[pending.pop()])
                continue
            needed = wanted.pop()
            if needed in seen:
                continue
            seen.add(needed)
            for index in binders.get(needed, []):
                if index not in chosen:
                    chosen.add(index)
                    pending.append(index)
        return [self._python[index] for index in sorted(chosen)]


# ---------------------------------------------------------------------------------------
# The shipped modules, as the course's source has them.
# ---------------------------------------------------------------------------------------
class TrustedModules:
    """The assignment's shipped modules (every module of the course's source folder of the
    assignment) loaded from there into this process, put in place of any other copy while the
    judge runs a cell. `checks`: the module that speaks the judge's protocol (judge/protocol.py)."""

    _loaded: dict[str, dict] = {}  # by the source files' digest: loaded once per process

    def __init__(self, folder: str | Path, checks: str):
        folder = Path(folder)
        notebooks = {path.stem for path in folder.glob("*.ipynb")}
        # A notebook's paired text file (jupytext) or a name no import can spell is a script,
        # not a module: importing it would run it.
        files = {
            path.stem: path
            for path in sorted(folder.glob("*.py"))
            if path.stem.isidentifier() and path.stem not in notebooks
        }
        if checks not in files:
            raise FileNotFoundError(f"{folder} holds no checks module {checks}.py")
        digest = hashlib.sha256(b"".join(path.read_bytes() for path in files.values())).hexdigest()
        if digest not in self._loaded:
            self._loaded[digest] = self._load(folder, [checks, *(name for name in files if name != checks)])
        self.modules, self.checks_name = self._loaded[digest], checks
        if checks not in self.modules:
            raise ImportError(f"the checks module {checks}.py of {folder} cannot be imported by the grader")
        missing = lacks(self.modules[checks])
        if missing:
            raise ImportError(f"{checks}.py does not speak the judge's protocol: it lacks {', '.join(missing)}")

    @staticmethod
    def _load(folder: Path, names: list[str]) -> dict:
        """Import each module from folder (each finds the others it imports there), then take them
        all out of sys.modules again: this process's own imports stay as they were."""
        saved = {name: sys.modules.pop(name, None) for name in names}
        sys.path.insert(0, str(folder))
        modules = {}
        try:
            for name in names:
                try:
                    modules[name] = importlib.import_module(name)
                except Exception:  # a module this process cannot import (matplotlib, say): not offered
                    sys.modules.pop(name, None)
        finally:
            sys.path.remove(str(folder))
            for name in names:
                sys.modules.pop(name, None)
                previous = saved[name]
                if previous is not None:
                    sys.modules[name] = previous
        return modules

    @property
    def checks(self):
        return self.modules[self.checks_name]

    def installed(self):
        """A context in which importing a shipped module (the checks module, the others) gives these copies."""
        modules = self.modules

        class Installed:
            def __enter__(self):
                self.saved = {name: sys.modules.get(name) for name in modules}
                sys.modules.update(modules)

            def __exit__(self, *exc):
                for name, module in self.saved.items():
                    if module is None:
                        sys.modules.pop(name, None)
                    else:
                        sys.modules[name] = module
                return False

        return Installed()


# ---------------------------------------------------------------------------------------
# The learner's work, as the judge sees it.
# ---------------------------------------------------------------------------------------
class _ThisThreadsPrints:
    """sys.stdout while a judge runs a test cell: what the judging thread prints goes to its cell's
    capture, any other thread's to the stream it stands in for. contextlib.redirect_stdout swaps
    the whole process's stdout: a judge still checking when its run was stopped took the prints of
    the program that had called the grader, until the check ended."""

    def __init__(self, replaced):
        self.replaced = replaced

    def _stream(self):
        return getattr(_CAPTURE, "into", None) or self.replaced

    def write(self, text):
        return self._stream().write(text)

    def flush(self):
        return self._stream().flush()

    def __getattr__(self, name):  # writelines, fileno, buffer, encoding: the thread's stream's own
        return getattr(self._stream(), name)


_CAPTURE = threading.local()
_CAPTURING = {"threads": 0}
_CAPTURING_LOCK = threading.Lock()


@contextlib.contextmanager
def _prints_captured(into: io.StringIO):
    """This thread's prints into `into` while the block runs; the process's stdout as it was once
    no thread captures any more."""
    with _CAPTURING_LOCK:
        if not isinstance(sys.stdout, _ThisThreadsPrints):
            sys.stdout = _ThisThreadsPrints(sys.stdout)
        _CAPTURING["threads"] += 1
    _CAPTURE.into = into
    try:
        yield
    finally:
        _CAPTURE.into = None
        with _CAPTURING_LOCK:
            _CAPTURING["threads"] -= 1
            if _CAPTURING["threads"] == 0 and isinstance(sys.stdout, _ThisThreadsPrints):
                sys.stdout = sys.stdout.replaced


#: The least time a request of the judge's is given once the notebook's slack is spent (Judge._deadline):
#: far more than any request of the instructor's reference run takes.
ITEM_FLOOR = 15.0


class LearnerObject:
    """A handle on an object that lives in the learner's kernel (it never comes over).

    `_origin`: how the judge came by it, so that the program builder can make it again from the
    answer cells: ("name", name), ("call", function, args, kwargs) or ("item", origin, key); None
    when it cannot be made again (its program then earns nothing)."""

    def __init__(self, judge: Judge, handle: int, name: str, kind: str):
        self._judge, self._handle, self._name, self._kind = judge, handle, name, kind
        self._origin = None

    def __repr__(self):
        return f"<the learner's {self._kind} {self._name}>"


class LearnerFunction(LearnerObject):
    """A handle on a function of the learner's: calling it asks the kernel to call it."""

    def __call__(self, *args, **kwargs):
        return self._judge.call(self, args, kwargs)

    def _remote(self, operation: str, args, bind=None, argnums=0, wrap=None):
        """The judge's answer to a check's request for evidence (judge/protocol.py, REMOTE)."""
        if operation == "numpy_only":
            return self._judge.numpy_only(self._name)
        return self._judge.evidence_about(self, operation, args, bind, argnums, wrap)


setattr(LearnerFunction, REMOTE, LearnerFunction._remote)


class NumpyOnlyFunction:
    """The learner's function as its answer cell defines it, run in the NumPy-only helper."""

    def __init__(self, judge: Judge, cell: int | None, name: str):
        self._judge, self._cell, self._name = judge, cell, name

    def __call__(self, *args):
        return self._judge.call_numpy_only(self._cell, self._name, args)


class Judge:
    """Runs one notebook's test cells for one submission (see the module docstring).

    kernel: the KernelChannel of the notebook's kernel; helpers: the student's JudgeHelpers;
    modules: the TrustedModules of the course; seed: the run's seed; answers: the submission's
    answer cells; timeout: seconds one request may take; deadline: when the notebook's time is up;
    reserve: seconds of the notebook's budget no single request may take (`_deadline`);
    evidence: the assignment's adapter's `Adapter.evidence` (None: it offers none).
    """

    def __init__(
        self,
        kernel: KernelChannel,
        helpers: JudgeHelpers,
        modules: TrustedModules,
        seed: int,
        answers: list[str],
        timeout: float,
        deadline: float = float("inf"),
        reserve: float = 0.0,
        evidence: Callable[[Judge], Any] | None = None,
    ):
        self.kernel, self.helpers, self.modules, self.seed = kernel, helpers, modules, int(seed)
        self.answers, self.timeout, self.deadline, self.reserve = answers, float(timeout), deadline, float(reserve)
        #: How many answer cells lie above the test cell being judged (None: all of them count).
        self.above: int | None = None
        self._numpy_cells: dict[tuple[str, int | None], int | None] = {}
        self._numpy_sources: dict[int, str] = {}  # a loaded cell's id -> its source
        # An answer cell whose process was ended (it stalled, or passed a limit) -> why: not loaded again,
        # so it costs one deadline, not one per item that needs it.
        self._ended_cells: dict[str | None, str] = {}
        self._timed_ids = 0
        #: What broke the grader's lines, for the notebook's record (it is then broken): a helper that
        #: sent a line the judge did not ask for. Taken by `take_troubles`.
        self.troubles: list[str] = []
        #: The adapter's answers to requests for evidence about a learner's program (None: it has none).
        self.evidence = evidence(self) if evidence is not None else None
        #: The last cell's items as the class report keeps them (`item_records`), and why the cell
        #: could not be checked at all (None when it could).
        self.items: tuple[ItemVerdict, ...] = ()
        self.cell_error: str | None = None
        #: Whether the cell could not be checked because a name of the learner's was never defined
        #: (the answer cell that defines it still stops at the release's stub): not attempted.
        self.cell_unanswered = False

    @property
    def answers(self) -> list[str]:
        """The submission's answer cells, in order."""
        return self._answers.sources

    @answers.setter
    def answers(self, sources: list[str]) -> None:
        self._answers = AnswerCells(sources)

    def cells_for(self, name: str) -> list[str]:
        """The answer cells above the test cell being judged that a helper runs for name (AnswerCells)."""
        return self._answers.cells_for(name, self.above)

    # -- one test cell ------------------------------------------------------------------------------
    def run_cell(self, source: str, declared: float) -> tuple[float, str]:
        """(points earned, the report) of one test cell, from its full source (hidden tests too)."""
        checks_module = self.modules.checks
        checks_module.JUDGE = self.seed
        checks_module.Checks.latest = None
        namespace = {"__name__": "__judge__", "__builtins__": builtins}
        error, printed = None, io.StringIO()
        self.cell_unanswered = False
        try:
            namespace.update(self.bind(learner_names(source)))
            with self.modules.installed(), _prints_captured(printed):
                exec(compile(source, "<test cell>", "exec"), namespace)
        except JudgeUnavailable as stopped:
            error = f"the checks could not reach your kernel: {stopped}"
        except Exception as raised:  # outside any item: the cell could not be checked at all
            name = raised.learner_mro[0] if isinstance(raised, LearnerRaised) else type(raised).__name__
            self.cell_unanswered = type(raised) is NameError
            error = f"the checks could not run: {name}: {raised}"
        checks = checks_module.Checks.latest
        # A failure quotes the learner's values and words: each stays on its own line, escaped.
        items = [
            {**item, "failure": None if item.get("failure") is None else report_line(item["failure"][:4000])[:4000]}
            for item in (checks.items if checks is not None else [])
        ]
        where = checks.where if checks is not None else "this cell"
        self.items = item_records(items)
        self.cell_error = None if error is None else report_line(error[:2000])
        lines, earned, _ = checks_module.report_lines(items, where)
        lines += [report_line(line[:2000]) for line in printed.getvalue().rstrip("\n").split("\n")[:20] if line]
        if error is not None:
            lines.append(report_line(error[:2000]))
        earned = min(earned, declared)
        return earned, "\n".join([*lines, checks_module.points_line(earned, declared, declared)])

    def _shipped(self) -> list[str]:
        """The course's checks module, whose functions a check may hand to a NumPy-only function."""
        return [self.modules.checks_name] if self.modules is not None else []

    # -- the learner's names -----------------------------------------------------------------------------
    def bind(self, names: list[str]) -> dict:
        """Each of the learner's names the cell uses, as the kernel has it now: a value (as data),
        a handle on a function or object, or left out (the cell then meets a NameError)."""
        if not names:
            return {}
        response = self.kernel_request({"op": "describe", "names": names})
        values = response.get("values")
        if not isinstance(values, dict):
            raise JudgeUnavailable(f"the kernel did not describe the learner's names ({response})")
        bound = {}
        for name in names:
            if name not in values or (isinstance(values[name], dict) and "$missing" in values[name]):
                continue
            data = values[name]
            try:
                bound[name] = self.inbound(data, name)
            except WireError:
                continue
            _mark(bound[name], ("name", name))
        return bound

    def inbound(self, data, name: str = "a value"):
        """The kernel's wire data as a value: handles become LearnerFunction / LearnerObject."""

        def resolve(form, body, nested):
            if form != "$handle" or not isinstance(body.get("$handle"), int):
                raise WireError(f"{form} is not accepted from a kernel")
            kind = learner_name(str(body.get("type", "object"))[:100])
            cls = LearnerFunction if body.get("callable") is True else LearnerObject
            return cls(self, body["$handle"], name, kind)

        return decode(data, resolve=resolve)

    def outbound(self, value, *, to_kernel: bool = True, arguments: list | None = None, names: set | None = None):
        """A value as wire data for the kernel (or a helper): handles (for a helper, how to make the
        object again; names collects the learner's names that needs), recipes of the shipped
        modules' objects, timed executables, ARG placeholders, and plain data."""
        recurse = lambda item: self.outbound(item, to_kernel=to_kernel, arguments=arguments, names=names)  # noqa: E731
        if value is self.modules.checks.ARG and arguments is not None:
            arguments.append(len(arguments))
            return {"$arg": arguments[-1]}
        if isinstance(value, LearnerObject):
            if not to_kernel:
                return self.rebuilt(value._origin, names)
            return {"$handle": value._handle}
        if isinstance(value, self.modules.checks.TimedExecutable):
            self._timed_ids += 1
            self.kernel.timed[self._timed_ids] = value
            executable = None if value.executable is None else recurse(value.executable)
            return {"$timed": self._timed_ids, "executable": executable, "checks": self.modules.checks_name}
        recipe = getattr(value, RECIPE, None)
        if isinstance(recipe, tuple) and len(recipe) == 4:
            module, name, args, kwargs = recipe
            if args is None:
                return {"$shipped": [module, name]}
            return {
                "$shipped": [module, name],
                "args": [recurse(a) for a in args],
                "kwargs": [[k, recurse(v)] for k, v in (kwargs or {}).items()],
            }
        if isinstance(value, tuple):
            return {"$tuple": [recurse(item) for item in value]}
        if isinstance(value, list):
            return {"$list": [recurse(item) for item in value]}
        if isinstance(value, dict):
            return {"$dict": [[recurse(k), recurse(v)] for k, v in value.items()]}
        return encode(value)

    # -- requests ------------------------------------------------------------------------------------
    def _deadline(self) -> float:
        """When the next request must be answered: within its timeout, within the notebook's
        budget, and leaving the notebook its reserve (what its cells need, at the budget's pace):
        an answer that never comes costs the slack of the budget, never the time of the notebook's
        later cells. Once the slack is spent, a request still gets ITEM_FLOOR."""
        now = time.monotonic()
        return min(now + self.timeout, self.deadline, max(now + ITEM_FLOOR, self.deadline - self.reserve))

    def helper_timeout(self) -> float:
        left = self._deadline() - time.monotonic()
        if left <= 0:
            raise LearnerRaised(["TimeoutError"], "the notebook's time budget ran out before this check")
        return left

    def kernel_request(self, message: dict) -> dict:
        return self.kernel.request(message, self._deadline())

    def result(self, response: dict, inbound):
        if "result" in response:
            try:
                return inbound(response["result"])
            except WireError as error:
                raise LearnerRaised(["ValueError"], error, "what came back is not a value the checks take: ") from None
        if isinstance(response.get("raised"), dict):
            raised = response["raised"]
            mro = raised.get("mro") if isinstance(raised.get("mro"), list) else ["Exception"]
            raise LearnerRaised(mro, raised.get("message", ""))
        if "failed" in response:
            raise LearnerRaised(["RuntimeError"], response["failed"], "the program could not be run: ")
        raise LearnerRaised(["RuntimeError"], response.get("refused", response), "the answer was refused: ")

    def call(self, function: LearnerFunction, args, kwargs):
        message = {
            "op": "call",
            "target": {"$handle": function._handle},
            "args": [self.outbound(a) for a in args],
            "kwargs": [[k, self.outbound(v)] for k, v in kwargs.items()],
        }
        result = self.result(self.kernel_request(message), self.inbound)
        if function._origin is not None:
            _mark(result, ("call", function, tuple(args), dict(kwargs)))
        return result

    def rebuilt(self, origin, names: set | None = None):
        """How the program builder makes a learner's object again (wire data), from its origin;
        WireError when it cannot. names collects the learner's names it needs."""
        if origin is None:
            raise WireError("this object of the kernel's cannot be made again from the answer cells")
        if origin[0] == "name":
            if names is not None:
                names.add(origin[1])
            return {"$learner": origin[1]}
        if origin[0] == "item":
            return {"$item": self.rebuilt(origin[1], names), "key": encode(origin[2])}
        _, function, args, kwargs = origin
        outbound = lambda value: self.outbound(value, to_kernel=False, names=names)  # noqa: E731
        return {
            "$call": self.rebuilt(function._origin, names),
            "args": [outbound(a) for a in args],
            "kwargs": [[k, outbound(v)] for k, v in kwargs.items()],
        }

    def evidence_about(self, function: LearnerFunction, operation: str, args, bind, argnums, wrap=None):
        """What a check asks about the learner's program, answered by the assignment's adapter."""
        if self.evidence is None or operation not in self.evidence.operations:
            offered = ", ".join(self.evidence.operations) if self.evidence is not None else "none"
            raise ValueError(f"no such evidence: {operation} (this assignment's adapter offers {offered})")
        return self.evidence.request(function, operation, args, bind, argnums, wrap)

    def numpy_only(self, name: str) -> NumpyOnlyFunction:
        at = (name, self.above)
        if at not in self._numpy_cells:
            cells = self.cells_for(name)
            if not cells:
                self._numpy_cells[at] = None
            else:
                key = "\n".join(cells)  # the cells as one process runs them: ended together
                self._refuse_ended(key)
                ident = len(self._numpy_sources) + 1  # never reused: a handle made before a restart stays its own
                self._numpy_cells[at], self._numpy_sources[ident] = ident, key
                answer = self._numpy_request({"op": "load", "cell": ident, "source": cells, "shipped": self._shipped()})
                if "loaded" not in answer:
                    self._numpy_cells[at] = None
                    self.result(answer, decode)  # raises what the cell raised
        return NumpyOnlyFunction(self, self._numpy_cells[at], name)

    def call_numpy_only(self, cell: int | None, name: str, args):
        if cell is None:
            raise LearnerRaised(["NameError"], about=f"no answer cell above this test cell defines {name!r}")
        message = {"op": "call", "cell": cell, "name": name, "args": [self.outbound(a, to_kernel=False) for a in args]}
        return self.result(self._numpy_request(message), decode)

    def _refuse_ended(self, source: str | None) -> None:
        if source in self._ended_cells:
            raise LearnerRaised(["RuntimeError"], self._ended_cells[source], "the answer cell's process: ")

    def _numpy_request(self, message: dict) -> dict:
        source = self._numpy_sources.get(message["cell"])
        self._refuse_ended(source)
        try:
            answer = self.helpers["numpy_only"].request(message, self.helper_timeout())
        except HelperError as error:
            self.note_unrequested(error, "NumPy-only process")
            self._numpy_cells.clear()  # a new process: cells are loaded again ...
            self._ended_cells[source] = str(error)  # ... but not this one
            raise LearnerRaised(["RuntimeError"], error, "the answer cell's process: ") from None
        if "ended" in answer:  # the cell's own process ended: the cell is not loaded again
            self._ended_cells[source] = str(answer["ended"])[:400]
            self._refuse_ended(source)
        return answer

    def note_unrequested(self, error: HelperError, helper: str) -> None:
        """A helper that sent a line the judge did not ask for breaks the notebook (said once)."""
        if error.unrequested:
            trouble = (
                f"the judge's {helper}: {error}: it was refused and the process ended; the checks that needed "
                "it scored 0"
            )
            if trouble not in self.troubles:
                self.troubles.append(report_line(trouble[:600]))

    def take_troubles(self) -> list[str]:
        """What broke the grader's lines since the last call (see `troubles`)."""
        taken, self.troubles = self.troubles, []
        return taken


def named(learner: LearnerObject) -> str:
    """How the notebook came by a learner's object, for a report: a name, a call of one, an item of
    that (a key the learner's code chose is shown only when it is a plain name or a number)."""

    def spelled(origin) -> str:
        if origin is None:
            return "an object"
        if origin[0] == "name":
            return learner_name(origin[1])
        if origin[0] == "item":
            key = origin[2]
            plain = type(key) is int or (isinstance(key, str) and PLAIN_NAME.fullmatch(key))
            return f"{spelled(origin[1])}[{key!r}]" if plain else f"{spelled(origin[1])}[...]"
        return f"{spelled(origin[1]._origin)}(...)"

    return spelled(learner._origin)


#: The most characters of an item's wording and of its failure the class report keeps.
KEPT_WORDING, KEPT_FAILURE = 300, 1000


def item_records(items: list[dict]) -> tuple[ItemVerdict, ...]:
    """A cell's items as the class report keeps them: wording, points, pass or fail, the
    failure's text (already one escaped report line), the hint of the judgment that failed,
    when the failure ends with it (the judge's own diagnosis, which the report groups by), and
    whether it failed because the answer was never given (the checks module says so)."""
    records = []
    for item in items:
        failure = item.get("failure")
        judgments = item.get("judgments") or []
        hint = judgments[-1].get("hint") if failure is not None and judgments else None
        hint = report_line(hint[:KEPT_WORDING])[:KEPT_WORDING] if isinstance(hint, str) and hint else None
        if hint is not None and failure is not None and not failure.endswith(f" ({hint})"):
            hint = None  # the failure is not that judgment's (the learner's code raised after it)
        records.append(
            ItemVerdict(
                what=report_line(str(item.get("what", ""))[:KEPT_WORDING])[:KEPT_WORDING],
                points=float(item.get("points", 0)),
                passed=failure is None,
                failure=None if failure is None else failure[:KEPT_FAILURE],
                hint=hint,
                unanswered=failure is not None and item.get("unanswered") is True,
            )
        )
    return tuple(records)


def _mark(value, origin) -> None:
    """Note on each learner object in value (a handle, or one inside lists, tuples and dicts) how
    the judge came by it."""
    if isinstance(value, LearnerObject):
        value._origin = origin
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _mark(item, ("item", origin, index))
    elif isinstance(value, dict):
        for key, item in value.items():
            _mark(item, ("item", origin, key))


def write_verdict(cell, earned: float, report: str) -> None:
    """Replace the cell's outputs by the judge's report and score (nbgrader reads the score)."""
    cell.outputs = [
        NotebookNode(output_type="stream", name="stdout", text=report + "\n"),
        NotebookNode(
            output_type="execute_result",
            execution_count=cell.get("execution_count"),
            data={"text/plain": repr(float(earned))},
            metadata={},
        ),
    ]


def is_test_cell(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return (
        cell.get("cell_type") == "code"
        and isinstance(meta, dict)
        and bool(meta.get("grade"))
        and not meta.get("solution")
    )
