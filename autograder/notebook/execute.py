"""Where a notebook runs while it is graded: nbgrader's Execute, with the kernel in the student's sandbox.

`SandboxedExecute` takes the place of nbgrader's Execute in `Autograde.autograde_preprocessors`
(autograder/notebook/plugin.py puts it there):

- the kernel comes from the student's `SandboxSession` (autograder/kernel/kernels.py), handed
  over by the grader in a `NotebookContext` (with the notebook's record and time budget) as an
  argument; under a plain `nbgrader autograde` nobody hands one, and each notebook gets a
  session of its own, made from the course folder;
- a kernel that dies, is stopped at a limit, or runs past the notebook's time budget ends the
  notebook there: the cells before keep their outputs and points, that cell says why it
  stopped, later cells say they did not run;
- output is capped as it arrives (autograder/kernel/output_caps.py);
- test cells are judged in the grader (autograder/judge/judged_cells.py) when a judge source is set;
- what each step took, why cells stopped, and what failed (the cell and the cause, as data)
  go to the notebook's `NotebookRecord`, which the worker reads.

`RequireSandbox` runs first under `nbgrader autograde`: no sandbox here, nobody graded (exit 3).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import secrets
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_sync
from nbformat.notebooknode import NotebookNode
from nbgrader import utils
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Bool, Float, Integer, Unicode

from autograder.course.errors import ExitCode, GraderError
from autograder.course.outcomes import NotebookOutcome, Trouble, TroubleKind
from autograder.course.settings import checks_module_for, declared_adapter, judge_source, setting
from autograder.course.text_safety import console_line
from autograder.judge.core import answer_cell_positions, answer_cells
from autograder.judge.judged_cells import LEDGER, JudgedCells, JudgeSettings, Ledger
from autograder.kernel.adapter import load_adapter
from autograder.kernel.kernels import MAX_KERNEL_MESSAGE, SandboxedKernelManager, SandboxSession
from autograder.kernel.output_caps import OutputCaps
from autograder.kernel.sandbox import Limits
from autograder.upstream.nbclient import DisplayUpdateSteps
from autograder.upstream.nbgrader import begun_student_folder

log = logging.getLogger(__name__)

#: What a learner's error says when it came from a limit of the sandbox (ename -> note).
LIMIT_NOTES = {
    "MemoryError": "the kernel ran into its memory limit",
    "BlockingIOError": "the kernel may have run into its process limit",
}
ERRNO_NOTES = {
    27: "the kernel ran into its file-size limit",
    28: "the kernel filled its scratch space (/tmp)",
    30: "the sandbox's file system is read-only outside /tmp",
}
#: Where a notebook's outcome (outcomes.NotebookOutcome) travels among nbgrader's preprocessors,
#: for the class report under `nbgrader autograde` (the grader's own runs read the worker's instead).
OUTCOME = "notebook_outcome"


@dataclasses.dataclass
class Failure:
    """Why a notebook could not be graded at all: where it was (a cell index, or None before the
    first cell), what was raised, and the cause in words."""

    cell: int | None
    error: str
    cause: str


#: Causes in words, by the exception class that ended the notebook.
FAILURE_CAUSES = {
    "DeadKernelError": "the kernel died while running it (a crash, os._exit, or running out of memory)",
    "UnresponsiveKernelError": "the kernel stopped responding and could not be interrupted",
    "NoSuchKernel": "the notebook's kernel could not be started",
    "KernelHostError": "the notebook's kernel could not be started",
}


def failure_of(error: BaseException, cell: int | None) -> Failure:
    name = type(error).__name__
    cause = FAILURE_CAUSES.get(name) or f"nbgrader could not grade it: {name}: {str(error).strip()[:300]}"
    if name == "KernelHostError":  # what the host did (a line the grader did not ask for, say)
        cause = f"{cause}: {str(error).strip()[:300]}"
    return Failure(cell, name, cause)


@dataclasses.dataclass
class NotebookRecord:
    """What grading one notebook took, filled in while it runs."""

    kernel_start: float = 0.0
    cells: list = dataclasses.field(default_factory=list)  # {"index", "seconds", "test"} per code cell
    troubles: list[Trouble] = dataclasses.field(default_factory=list)  # why cells stopped or did not run
    current_cell: int | None = None  # the cell running now
    failure: Failure | None = None  # set when the notebook could not be graded at all
    ledger: Ledger | None = None  # the judge's points of its test cells, and what was found against them


@dataclasses.dataclass
class NotebookContext:
    """What the grader hands the preprocessors for one notebook of a student's, as an argument
    (run/worker.py, run/reference.py): the sandbox its kernel runs in, the record it fills, and
    its time budget in seconds (0: none)."""

    session: SandboxSession
    record: NotebookRecord = dataclasses.field(default_factory=NotebookRecord)
    budget: float = 0.0
    #: Seconds of the budget no single request of the judge's may take: what the notebook's cells
    #: need at the budget's pace (the budget but its floor), so an answer that never returns costs
    #: its own item, never the cells after it (0: no reserve).
    reserve: float = 0.0


#: Where the grader's own runs put a notebook's context (run/worker.py): on nbgrader's converter,
#: which each preprocessor reaches through its parents (its exporter's parent is the converter).
CONTEXT_ON_CONVERTER = "notebook_context"


def context_of(preprocessor) -> NotebookContext | None:
    """The context on the converter running `preprocessor`; None under `nbgrader autograde`."""
    node = preprocessor.parent
    while node is not None:
        context = getattr(node, CONTEXT_ON_CONVERTER, None)
        if isinstance(context, NotebookContext):
            return context
        node = getattr(node, "parent", None)
    return None


def _error(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def refuse_to_grade(error) -> None:
    """No sandbox works here: never a silent fallback, nobody is graded."""
    print(f"error: nobody can be graded safely on this machine: {error}", file=sys.stderr, flush=True)
    raise SystemExit(ExitCode.UNSAFE) from None


class SandboxedExecute(DisplayUpdateSteps, Execute):
    """nbgrader's Execute with the kernel in the student's sandbox (see the module docstring)."""

    judge_source = Unicode(
        "",
        help="The course's source folder of the assignment: with it, every test cell is checked by the grader's "
        "judge (autograder/judge/core.py) with the shipped modules found there; without it, in the kernel. The "
        "grader fills it in (settings.judge_source) where the assignment names its checks module (Assignments).",
    ).tag(config=True)
    #: The assignment's checks module, where the caller knows it (the reference run); else the
    #: course's configuration names it (Assignments), for the assignment nbgrader is grading.
    judge_checks_module = Unicode("")
    unsafe = Bool(False, help="grade WITHOUT any sandbox: only for submissions you trust").tag(
        config=True, flag="--unsafe-no-sandbox"
    )
    judge_seed = Integer(
        0,
        help="the seed of the fresh inputs the judge draws (0: a new one for the run, which only the grader holds); "
        "give the one a run printed to grade again with the same inputs",
    ).tag(config=True, flag="--judge-seed")
    autograde_budget = Float(
        0.0,
        help="Under `nbgrader autograde`: seconds each notebook may take in all, its checks included (0: no "
        "budget); past it the kernel is stopped, the checks that finished keep their points. (`autograder grade` "
        "gives each notebook the budget its reference run set.)",
    ).tag(config=True)
    # A cell's output may still be arriving when its reply comes: wait for it a while. Past that
    # the kernel's output channel is broken (a message over the size cap): the notebook stops there.
    iopub_timeout = 10

    def __init__(self, *args, context: NotebookContext | None = None, **kwargs):
        # Execute passes its own kernel manager class as a keyword, which beats config.
        kwargs.setdefault("kernel_manager_class", SandboxedKernelManager)
        super().__init__(*args, **kwargs)
        self._stopped: str | None = None
        self._given = context
        self._own: NotebookContext | None = None  # under `nbgrader autograde`, while a notebook runs
        self._last = NotebookRecord()  # the record of the last notebook run in a session of its own

    # -- the session, the record, the budget ---------------------------------------------------
    @property
    def context(self) -> NotebookContext | None:
        """The notebook's context, when the grader's own run hands it one: given, or on the converter."""
        return self._given or context_of(self)

    @property
    def _current(self) -> NotebookContext | None:
        return self.context or self._own

    @property
    def session(self) -> SandboxSession | None:
        return self._current.session if self._current is not None else None

    @property
    def record(self) -> NotebookRecord:
        return self._current.record if self._current is not None else self._last

    @property
    def notebook_budget(self) -> float:
        return self.context.budget if self.context is not None else self.autograde_budget

    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        km.sandbox_session = self.session  # the kernel starts in it
        return km

    def preprocess(self, nb, resources=None, km=None):
        # The grader's own runs hand the student's session, whose sandbox has the run's limits.
        limits = self.context.session.sandbox.limits if self.context is not None else Limits.from_config(self.config)
        self._stopped = None
        self._caps = OutputCaps(limits.output, limits.notebook_output)
        self._configured_timeout = self.timeout
        budget = self.notebook_budget
        self._deadline = time.monotonic() + budget if budget else float("inf")
        if self.context is not None:
            return self._preprocess_in(self.context.session, nb, resources, km)
        # Under `nbgrader autograde`: a sandbox of its own for this notebook, in a scratch folder
        # that goes with it (the shipped files' copy too).
        scratch = Path(tempfile.mkdtemp(prefix="autograder-notebook-"))
        try:
            self._own = NotebookContext(self._session_of_our_own(resources or {}, scratch), budget=budget)
            try:
                return self._preprocess_in(self._own.session, nb, resources, km)
            finally:
                self._own.session.remove()
                self._last, self._own = self._own.record, None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _preprocess_in(self, session: SandboxSession, nb, resources, km):
        # A seed drawn here (none was configured: `nbgrader autograde`) is logged and kept with
        # the notebook's record, so that a failure can be graded again with the same inputs.
        seed = self.judge_seed or secrets.randbits(62)
        where = (resources or {}).get("nbgrader", {})
        assignment = where.get("assignment", "")
        checks = self.judge_checks_module or (checks_module_for(self.config, assignment) if assignment else "")
        if self.judge_source and not self.judge_seed:
            line = seed_line(seed, assignment, where.get("student", "?"), where.get("notebook", "?"))
            self.log.info("%s", console_line(line, 1000))
        settings = JudgeSettings(self.judge_source, checks, seed)
        # What the notebook's cells need at the budget's pace (the budget but its floor): no single
        # request of the judge's may take it (judge.Judge._deadline).
        reserve = self.context.reserve if self.context is not None else 0.0
        self._judged = JudgedCells(
            settings,
            answer_cells(nb),
            self._configured_timeout or 120,
            self._deadline,
            reserve,
            session.adapter,
            answer_cell_positions(nb),
        )
        self.record.ledger = self._judged.ledger
        started, troubles_before = time.perf_counter(), len(self.record.troubles)
        try:
            nb, resources = super().preprocess(nb, resources, km)
        except Exception as error:
            self.record.failure = failure_of(error, self.record.current_cell)
            raise
        if settings.source:  # nbgrader's grades are then checked against it (judged_cells.LedgerGrades)
            resources[LEDGER] = self._judged.ledger
        if resources is not None:
            resources[OUTCOME] = NotebookOutcome(
                time.perf_counter() - started,
                self.notebook_budget or None,
                dict(self._judged.ledger.items),
                tuple(self.record.troubles[troubles_before:]),
                seed if settings.source else None,
            )
        if session.sandbox.unsafe:
            _rewrite_paths(nb, session.scratch, "/tmp")  # what a sandboxed kernel would have printed
        return nb, resources

    def _session_of_our_own(self, resources, scratch: Path) -> SandboxSession:
        """Under nbgrader's own `nbgrader autograde` (autograder/notebook/plugin.py), nobody hands this
        preprocessor a student's sandbox: it makes one for this notebook, from the course folder,
        with the shipped files of the assignment's source; and finds the judge's source there."""
        from autograder.course.assignment import assignment_source
        from autograder.kernel.kernels import GRADING_ENV
        from autograder.kernel.sandbox import SandboxUnavailable, sandbox_for_grading

        source = assignment_source(self.config, resources)
        try:
            sandbox = sandbox_for_grading(Limits.from_config(self.config), self.unsafe)
        except SandboxUnavailable as error:
            refuse_to_grade(error)
        shipped = scratch / "assignment"
        shipped.mkdir()
        for path in sorted(source.iterdir()) if source.is_dir() else []:
            if path.is_file() and path.suffix != ".ipynb":
                shutil.copy2(path, shipped / path.name)
        assignment = resources.get("nbgrader", {}).get("assignment", "")
        self.judge_source = self.judge_source or judge_source(self.config, assignment, source)
        checks = checks_module_for(self.config, assignment)
        adapter = load_adapter(declared_adapter((source / f"{checks}.py").read_text()) if checks else "")
        return SandboxSession(sandbox, scratch / "session", shipped, fork=False, env=dict(GRADING_ENV), adapter=adapter)

    def _stop_the_session(self) -> None:
        if self.session is not None:
            self.session.close()

    def _stop(
        self, kind: TroubleKind, why: str, cell: int, finished: str = "the checks that finished keep their points"
    ) -> None:
        self._stopped = why
        self.record.troubles.append(Trouble(kind, f"{why}; {finished}, the rest scored 0", cell=cell))

    # -- kernels -------------------------------------------------------------------------------
    async def async_start_new_kernel(self, **kwargs):
        start = time.perf_counter()
        try:
            return await super().async_start_new_kernel(**kwargs)
        finally:
            self.record.kernel_start += time.perf_counter() - start

    async def async_start_new_kernel_client(self):
        start = time.perf_counter()
        try:
            return await super().async_start_new_kernel_client()
        finally:
            self.record.kernel_start += time.perf_counter() - start

    # -- cells ---------------------------------------------------------------------------------
    async def async_execute_cell(self, cell, cell_index, *args, **kwargs):
        if cell.cell_type != "code":
            return await super().async_execute_cell(cell, cell_index, *args, **kwargs)
        self.record.current_cell = cell_index
        judged = self._judged.judges(cell)
        if judged:  # the kernel runs the cell's imports only; the judge runs its checks
            full, cell.source = cell.source, self._judged.kernel_source(cell)
        try:
            return await self._execute_code_cell(cell, cell_index, *args, **kwargs)
        finally:
            if judged:
                cell.source = full
                helpers = self.session.judge_helpers() if self._stopped is None else None
                seconds, dead = await self._judged.verdict(cell, cell_index, self, helpers, self._stopped)
                self.record.troubles += [
                    Trouble(TroubleKind.UNASKED_LINE, trouble, cell=cell_index)
                    for trouble in self._judged.take_troubles()
                ]
                if self._stopped is None:
                    self.record.cells.append({"index": -1, "seconds": seconds, "test": True})
                if dead and self._stopped is None:
                    self._stop(TroubleKind.KERNEL_DIED, dead, cell_index)

    async def _execute_code_cell(self, cell, cell_index, *args, **kwargs):
        left = self._deadline - time.monotonic()
        if self._stopped is None and left <= 0:
            self._stop(
                TroubleKind.TIME_BUDGET,
                f"the notebook ran past its time budget of {self.notebook_budget:.0f} s, before cell {cell_index + 1}",
                cell_index,
            )
            self._stop_the_session()
        if self._stopped is not None:
            cell.outputs = [_error("NotRun", f"this cell did not run: {self._stopped}")]
            return cell
        # A cell may take its timeout, or what is left of the notebook's budget if that is less.
        # No timeout and no budget (`Execute.timeout = None` under `nbgrader autograde`): no limit.
        limit = min(self._configured_timeout or left, left)
        self.timeout = None if limit == float("inf") else max(1, int(limit))
        start = time.perf_counter()
        try:
            cell = await super().async_execute_cell(cell, cell_index, *args, **kwargs)
        except CellTimeoutError:  # no output came after the reply (the IOPub channel broke)
            if getattr(self.km, "limit_hit", None):  # a limit's stop cut the channel: the limit is the cause
                self._stopped_at_a_limit(cell, cell_index)
            else:
                why = (
                    "the kernel's output channel broke (the cell finished, but its output never came: a "
                    f"message larger than the grader takes, {MAX_KERNEL_MESSAGE >> 20} MiB, or a stalled output "
                    "thread), and the kernel was stopped"
                )
                self._stop(
                    TroubleKind.KERNEL_DIED,
                    f"{why}, in cell {cell_index + 1}",
                    cell_index,
                    "the checks that finished before keep their points",
                )
                cell.outputs.append(_error("KernelStopped", f"{why}. Later cells did not run."))
                self._stop_the_session()
        except DeadKernelError:
            self._stopped_at_a_limit(cell, cell_index)
        finally:
            test = utils.is_grade(cell) and not utils.is_solution(cell)
            self.record.cells.append({"index": cell_index, "seconds": time.perf_counter() - start, "test": test})
        if any(out.get("ename") == "CellTimeoutError" for out in cell.get("outputs", [])):
            if self._deadline - time.monotonic() <= 1:  # it was the notebook's budget that ran out
                self._stop(
                    TroubleKind.TIME_BUDGET,
                    f"the notebook ran past its time budget of {self.notebook_budget:.0f} s, in cell {cell_index + 1}",
                    cell_index,
                )
            else:
                self.record.troubles.append(
                    Trouble(
                        TroubleKind.CELL_TIMEOUT,
                        f"cell {cell_index + 1} ran longer than the {self.timeout} s limit and was stopped; "
                        "what it did not finish scored 0",
                        cell=cell_index,
                    )
                )
        _note_limits(cell)
        return cell

    def _stopped_at_a_limit(self, cell, cell_index: int) -> None:
        """The kernel is gone: stopped at the limit the watcher names, or dead of its own doing."""
        hit = getattr(self.km, "limit_hit", None)
        why = (
            f"the kernel was stopped because {hit}"
            if hit
            else "the kernel died (a crash, exit(), os._exit, or past a limit of the sandbox)"
        )
        kind = TroubleKind.LIMIT if hit else TroubleKind.KERNEL_DIED
        self._stop(
            kind, f"{why}, in cell {cell_index + 1}", cell_index, "the checks that finished before keep their points"
        )
        cell.outputs.append(
            _error(
                "KernelDied",
                f"{why}. Later cells did not run; checks that finished before this cell keep their points.",
            )
        )

    # -- outputs: every way into the notebook is capped ---------------------------------------
    def output(self, outs, msg, display_id, cell_index):
        past = self._caps.admit(cell_index, msg.get("content", {}))
        if past is not None:
            note = self._caps.cut_note(cell_index, past)
            if note is not None:
                outs.append(note)
            return None
        return super().output(outs, msg, display_id, cell_index)

    def on_display_update(self, display_id: str, msg: dict, targets: dict[int, list[int]]) -> None:
        """A display update replaces every output that shares its display_id, in any cell but
        those holding the judge's verdict (refused, and noted for review)."""
        if targets:
            self._judged.ledger.shield(display_id, targets)
        self._caps.admit_update(msg.setdefault("content", {}), sum(len(indices) for indices in targets.values()))

    def handle_comm_msg(self, outs, msg, cell_index):
        """Widgets' messages (an output widget would route outputs around the limits): ignored."""
        return None

    # nbclient binds the blocking names to its own coroutines: rebind them to ours.
    start_new_kernel = run_sync(async_start_new_kernel)
    start_new_kernel_client = run_sync(async_start_new_kernel_client)
    execute_cell = run_sync(async_execute_cell)


def seed_line(seed: int, assignment: str, student: str, notebook: str) -> str:
    """Route A's line for a notebook's judge seed: the command that grades that notebook alone
    again with the same inputs (nbgrader's --student and --notebook, as NAME=VALUE so that an id
    starting with a dash stays a value; --force regrades it)."""
    again = " ".join(
        shlex.quote(part)
        for part in ("nbgrader", "autograde", assignment, f"--student={student}", f"--notebook={notebook}", "--force")
    )
    return (
        f"judge seed {seed} for {student}'s {notebook} (this notebook alone again, with the same inputs: "
        f"{again} --SandboxedExecute.judge_seed={seed})"
    )


def _note_limits(cell) -> None:
    """Name the sandbox limit behind a learner's error, where there is one."""
    for out in cell.get("outputs", []):
        if out.get("output_type") != "error":
            continue
        note = LIMIT_NOTES.get(out.get("ename"))
        for errno, errno_note in ERRNO_NOTES.items():
            if out.get("ename") in ("OSError", "PermissionError") and f"[Errno {errno}]" in str(out.get("evalue", "")):
                note = errno_note
        if note and note not in out.get("evalue", ""):
            out["evalue"] = f"{out.get('evalue', '')} ({note}: see the limits of grading in the feedback's notes)"
            out["traceback"] = [*out.get("traceback", []), f"({note})"]


def _rewrite_paths(notebook, old: str, new: str) -> None:
    for cell in notebook.cells:
        for out in cell.get("outputs", []):
            if "text" in out:
                out["text"] = out["text"].replace(old, new)
            if "evalue" in out:
                out["evalue"] = out["evalue"].replace(old, new)
            if "traceback" in out:
                out["traceback"] = [line.replace(old, new) for line in out["traceback"]]
            for mime, value in out.get("data", {}).items():
                if isinstance(value, str):
                    out["data"][mime] = value.replace(old, new)


#: A student's or assignment's id that names one folder (no separator, nothing empty).
_ONE_PATH_PART = re.compile(r"[^/\\\x00]+")


class RequireSandbox(NbGraderPreprocessor):
    """First of all, under `nbgrader autograde`: a sandbox that works here, and the checks module the
    assignment names in its source, or nobody is graded.

    Probed once per process, before nbgrader writes anything of the first notebook: where it
    cannot start, the command stops with exit status 3 and the fix; a checks module that is
    missing stops it with exit status 2. (The grader's own runs probe
    before any student and hand every notebook its sandbox in a `context`; this one then does nothing.)"""

    def preprocess(self, nb, resources):
        from autograder.course.assignment import assignment_source
        from autograder.kernel.sandbox import SandboxUnavailable, sandbox_for_grading

        if context_of(self) is not None:
            return nb, resources
        try:
            sandbox_for_grading(Limits.from_config(self.config), setting(self.config, SandboxedExecute, "unsafe"))
        except SandboxUnavailable as error:
            self._forget_this_student(resources)
            refuse_to_grade(error)
        # An assignment that names a checks module its source lacks is graded by nobody.
        assignment = resources.get("nbgrader", {}).get("assignment", "")
        try:
            judge_source(self.config, assignment, assignment_source(self.config, resources))
        except GraderError as error:
            self._forget_this_student(resources)
            print(f"error: nobody is graded: {error}", file=sys.stderr, flush=True)
            raise SystemExit(error.exit_code) from None
        return nb, resources

    def _forget_this_student(self, resources) -> None:
        """Remove the student's autograded folder this run began: nbgrader skips a student whose
        folder exists, so the next run, once the course is mended, would leave them ungraded (0)
        unless given --force. nbgrader made it in this run when it converts every notebook (it
        skips a student whose folder exists, and --force removed the last one); a run of some
        notebooks (--notebook) keeps the folder, and nothing is removed."""
        about = resources.get("nbgrader", {})
        student, assignment = str(about.get("student") or ""), str(about.get("assignment") or "")
        if not all(_ONE_PATH_PART.fullmatch(part) and part not in (".", "..") for part in (student, assignment)):
            return
        begun = begun_student_folder(self, student, assignment)
        if begun is not None:
            shutil.rmtree(begun, ignore_errors=True)
