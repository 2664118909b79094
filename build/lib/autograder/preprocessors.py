"""The grader's preprocessors, in place of or beside nbgrader's own.

nbgrader_config.py puts them in nbgrader's pipeline:

- `Autograde.sanitize_preprocessors`: MetadataFromSource first (a submission's cell metadata is
  the source's, whatever the submission claims), DeduplicateIdsCleanly and RestoreMissingCells
  in place of DeduplicateIds and OverwriteCells (whose failures on duplicated or deleted cells
  would lose a learner's whole notebook);
- `Autograde.autograde_preprocessors`: SandboxedExecute in place of Execute (the kernel in the
  student's sandbox; a dead kernel or a limit costs only the cells it did not finish; each test
  cell's checks run by the grader's judge, autograder/judge.py, the kernel running the cell's
  imports only).
"""

from __future__ import annotations

import asyncio
import copy
import json
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import run_sync
from nbformat.notebooknode import NotebookNode
from nbgrader import utils
from nbgrader.preprocessors import DeduplicateIds, Execute, NbGraderPreprocessor, OverwriteCells
from traitlets import Bool, Dict, Float, Integer, Unicode

from .hidden_tests import strip_hidden_tests
from .judge import Judge, KernelChannel, TrustedModules, answer_cells, is_test_cell, kernel_part, write_verdict
from .kernels import MAX_MESSAGE, NotebookRecord, SandboxedKernelManager
from .pages import assignment_markdown, bound_size, sanitize_notebook

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


def _error(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


class SandboxedExecute(Execute):
    """nbgrader's Execute with the kernel in the student's sandbox (autograder/kernels.py).

    - A kernel that dies (or is stopped at a limit) ends the notebook there: the cells before
      keep their outputs, that cell says why it stopped, later cells say they did not run.
    - A cell's output is kept up to the output limit; the rest is cut, with a note.
    - The seconds of each step, and why cells stopped, go to the session's NotebookRecord.
    """

    limits = Dict({}, help="Limits of the sandbox as Limits.as_dict(); only `output` is used here.").tag(config=True)
    judge_source = Unicode(
        "",
        help="The course's source folder of the assignment: with it, every test cell is checked by the grader's "
        "judge (autograder/judge.py) with the shipped modules found there; without it, in the kernel. Under "
        "`nbgrader autograde` (the plugin) it is found from the course folder when `judge_checks_module` is set.",
    ).tag(config=True)
    judge_checks_module = Unicode(
        "",
        help="The assignment's checks module (speaking the judge's protocol, e.g. remat_checks): under `nbgrader "
        "autograde`, its test cells are then judged in the grader; empty: they run in the (sandboxed) kernel.",
    ).tag(config=True)
    unsafe = Bool(False, help="Under `nbgrader autograde`: run kernels without the sandbox (trusted work only)").tag(
        config=True
    )
    judge_seed = Integer(0, help="The seed of the judge's fresh inputs (0: a new one, drawn now)").tag(config=True)
    budget = Float(
        0.0,
        help="Seconds this notebook may take in all, its checks included (0: no budget); past it the kernel is "
        "stopped, the checks that finished keep their points. The grader sets it from the reference run.",
    ).tag(config=True)
    # A cell's output may still be arriving when its reply comes: wait for it a while. Past that
    # the kernel's output channel is broken (a message over the size cap): the notebook stops there.
    iopub_timeout = 10

    def __init__(self, *args, **kwargs):
        # Execute passes its own kernel manager class as a keyword, which beats config.
        kwargs.setdefault("kernel_manager_class", SandboxedKernelManager)
        super().__init__(*args, **kwargs)
        self._stopped: str | None = None
        self._output_bytes: dict[int, int] = {}

    @property
    def record(self) -> NotebookRecord:
        session = self.config.SandboxedKernelManager.get("session_for_kernels")
        if session is None:  # run on its own (not by the grader): keep the record here
            self._own_record = getattr(self, "_own_record", None) or NotebookRecord()
            return self._own_record
        return session.record

    def preprocess(self, nb, resources=None, km=None):
        self._stopped, self._output_bytes = None, {}
        self._configured_timeout = self.timeout
        self._deadline = time.monotonic() + self.budget if self.budget else float("inf")
        self._answers, self._judge = answer_cells(nb), None
        own = None
        if self.config.SandboxedKernelManager.get("session_for_kernels") is None:
            own = self._session_of_our_own(resources or {})  # under `nbgrader autograde`: one per notebook
        try:
            nb, resources = super().preprocess(nb, resources, km)
        finally:
            if own is not None:
                own.remove()
                self.config.SandboxedKernelManager.session_for_kernels = None
        session = own or self.config.SandboxedKernelManager.get("session_for_kernels")
        if session is not None and session.sandbox.unsafe:
            _rewrite_paths(nb, session.scratch, "/tmp")  # what a sandboxed kernel would have printed
        return nb, resources

    def _session_of_our_own(self, resources):
        """Under nbgrader's own `nbgrader autograde` (autograder/plugin.py), nobody hands this
        preprocessor a student's sandbox: it makes one for this notebook, from the course folder,
        with the shipped files of the assignment's source; and finds the judge's source there."""
        from .course import assignment_source
        from .kernels import GRADING_ENV, SandboxSession
        from .sandbox import Limits, SandboxUnavailable, sandbox_for_grading

        source = assignment_source(self.config, resources)
        try:
            sandbox = sandbox_for_grading(Limits.from_config(self.limits), self.unsafe)
        except SandboxUnavailable as error:  # never a silent fallback: nobody is graded here
            print(f"error: nobody can be graded safely on this machine: {error}", file=sys.stderr, flush=True)
            raise SystemExit(3) from None
        scratch = Path(tempfile.mkdtemp(prefix="autograder-notebook-"))
        shipped = scratch / "assignment"
        shipped.mkdir()
        for path in sorted(source.iterdir()) if source.is_dir() else []:
            if path.is_file() and path.suffix != ".ipynb":
                shutil.copy2(path, shipped / path.name)
        session = SandboxSession(sandbox, scratch / "session", shipped, fork=False, env=dict(GRADING_ENV))
        self.config.SandboxedKernelManager.session_for_kernels = session
        if not self.judge_source and self.judge_checks_module and (source / f"{self.judge_checks_module}.py").is_file():
            self.judge_source = str(source)
        return session

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

    def _judge_for(self) -> Judge:
        """The judge of this notebook, on this kernel (made at the first test cell)."""
        if self._judge is None:
            session = self.config.SandboxedKernelManager.get("session_for_kernels")
            channel = KernelChannel(self.kc, asyncio.get_running_loop(), self.km.interrupt_kernel, self.km.is_alive)
            self._judge = Judge(
                channel,
                session.judge_helpers(),
                TrustedModules(self.judge_source, self.judge_checks_module or "remat_checks"),
                self.judge_seed or secrets.randbits(62),
                self._answers,
                timeout=self._configured_timeout or 120,
                deadline=self._deadline,
            )
        return self._judge

    async def async_execute_cell(self, cell, cell_index, *args, **kwargs):
        if cell.cell_type != "code":
            return await super().async_execute_cell(cell, cell_index, *args, **kwargs)
        judged = bool(self.judge_source) and is_test_cell(cell)
        if judged:  # the kernel runs the cell's imports only; the judge runs its checks
            full, cell.source = cell.source, kernel_part(cell.source)
        try:
            return await self._execute_code_cell(cell, cell_index, *args, **kwargs)
        finally:
            if judged:
                cell.source = full
                await self._run_judge(cell)

    async def _run_judge(self, cell) -> None:
        points = float(cell.metadata["nbgrader"].get("points", 0))
        if self._stopped is not None:
            write_verdict(cell, 0.0, f"this cell's checks did not run: {self._stopped}\n0 of {points:g} points")
            return
        start = time.perf_counter()
        earned, report = await asyncio.to_thread(self._judge_for().run_cell, cell.source, points)
        self.record.cells.append({"index": -1, "seconds": time.perf_counter() - start, "test": True})
        if self._judge.kernel.dead and self._stopped is None:
            self._stopped = f"the kernel stopped answering while this cell was checked ({self._judge.kernel.dead})"
            self.record.trouble.append(
                f"{self._stopped}; the checks that finished keep their points, the rest scored 0"
            )
        write_verdict(cell, earned, report)

    async def _execute_code_cell(self, cell, cell_index, *args, **kwargs):
        left = self._deadline - time.monotonic()
        if self._stopped is None and left <= 0:
            self._stopped = (
                f"the notebook ran past its time budget of {self.budget:.0f} s, before cell {cell_index + 1}"
            )
            self.record.trouble.append(
                f"{self._stopped}; the checks that finished keep their points, the rest scored 0"
            )
            session = self.config.SandboxedKernelManager.get("session_for_kernels")
            if session is not None:
                session.close()
        if self._stopped is not None:
            cell.outputs = [_error("NotRun", f"this cell did not run: {self._stopped}")]
            return cell
        # A cell may take its timeout, or what is left of the notebook's budget if that is less.
        self.timeout = max(1, int(min(self._configured_timeout or left, left)))
        start = time.perf_counter()
        try:
            cell = await super().async_execute_cell(cell, cell_index, *args, **kwargs)
        except CellTimeoutError:  # no output came after the reply (the IOPub channel broke)
            why = (
                "the kernel's output channel broke (the cell finished, but its output never came: a "
                f"message larger than the grader takes, {MAX_MESSAGE >> 20} MiB, or a stalled output "
                "thread), and the kernel was stopped"
            )
            self._stopped = f"{why}, in cell {cell_index + 1}"
            self.record.trouble.append(
                f"{self._stopped}; the checks that finished before keep their points, the rest scored 0"
            )
            cell.outputs.append(_error("KernelStopped", f"{why}. Later cells did not run."))
            session = self.config.SandboxedKernelManager.get("session_for_kernels")
            if session is not None:
                session.close()
        except DeadKernelError:
            hit = getattr(self.km, "limit_hit", None)
            why = (
                f"the kernel was stopped because {hit}"
                if hit
                else "the kernel died (a crash, exit(), os._exit, or past a limit of the sandbox)"
            )
            self._stopped = f"{why}, in cell {cell_index + 1}"
            self.record.trouble.append(
                f"{self._stopped}; the checks that finished before keep their points, the rest scored 0"
            )
            cell.outputs.append(
                _error(
                    "KernelDied",
                    f"{why}. Later cells did not run; checks that finished before this cell keep their points.",
                )
            )
        finally:
            test = utils.is_grade(cell) and not utils.is_solution(cell)
            self.record.cells.append({"index": cell_index, "seconds": time.perf_counter() - start, "test": test})
        if any(out.get("ename") == "CellTimeoutError" for out in cell.get("outputs", [])):
            if self._deadline - time.monotonic() <= 1:  # it was the notebook's budget that ran out
                self._stopped = (
                    f"the notebook ran past its time budget of {self.budget:.0f} s, in cell {cell_index + 1}"
                )
                self.record.trouble.append(
                    f"{self._stopped}; the checks that finished keep their points, the rest scored 0"
                )
            else:
                self.record.trouble.append(
                    f"cell {cell_index + 1} ran longer than the {self.timeout} s limit and was stopped; "
                    "what it did not finish scored 0"
                )
        _note_limits(cell)
        return cell

    # -- outputs: every way into the notebook is capped ---------------------------------------------
    def _cell_limit(self) -> int:
        return int(self.limits.get("output", 2 << 20)) + (64 << 10)

    def _notebook_limit(self) -> int:
        return int(self.limits.get("notebook_output", 8 << 20))

    def output(self, outs, msg, display_id, cell_index):
        """A new output (stream, result, display, error): kept while its cell is under the output
        limit, the notebook under its own, and the cell under MAX_OUTPUTS outputs."""
        size = _size(msg.get("content", {}))
        key, limit = (cell_index, "output"), self._cell_limit()
        used = self._output_bytes.get(key, 0)
        total = self._output_bytes.get("notebook", 0)
        count = self._output_bytes.get((cell_index, "count"), 0)
        self._output_bytes[key] = used + size
        self._output_bytes[(cell_index, "count")] = count + 1
        past = (
            f"more than {limit / (1 << 20):g} MiB, the output limit of a cell"
            if used + size > limit
            else f"past the {self._notebook_limit() / (1 << 20):g} MiB output limit of a notebook"
            if total + size > self._notebook_limit()
            else f"more than {MAX_OUTPUTS} outputs, the limit of a cell"
            if count >= MAX_OUTPUTS
            else None
        )
        if past is not None:
            if (cell_index, "cut") not in self._output_bytes:
                self._output_bytes[(cell_index, "cut")] = 1
                outs.append(_note(f"\n[output cut: this cell printed {past} in grading]\n"))
            return None
        self._output_bytes["notebook"] = total + size
        return super().output(outs, msg, display_id, cell_index)

    def _update_display_id(self, display_id, msg):
        """A display update replaces every output that shares its display_id, in any cell: its
        size counts once per output it replaces, against the notebook's limit."""
        targets = sum(len(indices) for indices in self._display_id_map.get(display_id, {}).values())
        size = _size(msg.get("content", {})) * max(targets, 1)
        total = self._output_bytes.get("notebook", 0)
        if size > self._cell_limit() or total + size > self._notebook_limit():
            content = msg.setdefault("content", {})
            content["data"] = {"text/plain": f"[a display update of {size} bytes: past the output limit of grading]"}
            content["metadata"] = {}
            size = 100 * max(targets, 1)
        self._output_bytes["notebook"] = total + size
        return super()._update_display_id(display_id, msg)

    def handle_comm_msg(self, outs, msg, cell_index):
        """Widgets' messages (an output widget would route outputs around the limits): ignored."""
        return None

    # nbclient binds the blocking names to its own coroutines: rebind them to ours.
    start_new_kernel = run_sync(async_start_new_kernel)
    start_new_kernel_client = run_sync(async_start_new_kernel_client)
    execute_cell = run_sync(async_execute_cell)


#: The most outputs one cell keeps (a loop of a million tiny prints is cut there).
MAX_OUTPUTS = 1000


def _size(content) -> int:
    """How many characters an output message would add to the notebook."""
    try:
        return len(json.dumps(content, default=str))
    except (TypeError, ValueError, RecursionError):
        return 1 << 30


def _note(text: str) -> NotebookNode:
    return NotebookNode(output_type="stream", name="stdout", text=text)


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


class MetadataFromSource(NbGraderPreprocessor):
    """Every cell's nbgrader metadata as the source has it, whatever the submission claims.

    A cell whose grade_id the source knows gets the source's metadata back (points, graded,
    locked: a learner cannot raise points or make a cell graded); any other cell loses its
    nbgrader metadata and is an ordinary cell (a made-up graded cell, or a test cell whose id was
    changed: the real one is then restored from the source by RestoreMissingCells).
    """

    source_folder = Unicode("", help="The course's source folder of the assignment").tag(config=True)

    def preprocess(self, nb, resources):
        from .course import assignment_source

        folder = Path(self.source_folder) if self.source_folder else assignment_source(self.config, resources)
        path = folder / f"{resources['nbgrader']['notebook']}.ipynb"
        source = nbformat.read(path, as_version=4)
        by_id = {
            c.metadata["nbgrader"]["grade_id"]: c for c in source.cells if "grade_id" in c.metadata.get("nbgrader", {})
        }
        for cell in nb.cells:
            meta = cell.get("metadata", {}).get("nbgrader")
            if meta is None:
                continue
            grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
            if isinstance(grade_id, str) and grade_id in by_id:
                cell.metadata["nbgrader"] = copy.deepcopy(by_id[grade_id].metadata["nbgrader"])
            else:
                del cell.metadata["nbgrader"]
        return nb, resources


class DeduplicateIdsCleanly(DeduplicateIds):
    """nbgrader's DeduplicateIds, leaving no empty nbgrader metadata behind.

    A learner who pastes a graded cell twice gets the earlier copies turned into plain cells.
    Stock DeduplicateIds leaves `"nbgrader": {}` on them, and OverwriteCells (with
    add_missing_cells) then fails with KeyError 'grade_id', losing the whole notebook.
    """

    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if cell.metadata.get("nbgrader") == {}:
            del cell.metadata["nbgrader"]
        return cell, resources


class RestoreMissingCells(OverwriteCells):
    """nbgrader's OverwriteCells, restoring a deleted test cell even when its answer cell is gone too.

    Stock add_missing_grade_cells inserts a missing cell after the source cell just before it,
    and fails with KeyError when that one was deleted as well. Here it goes after the nearest
    earlier source cell still present (or first, when none is).
    """

    def add_missing_grade_cells(self, nb, resources):
        source_nb = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
        order = [cell.name for cell in source_nb.source_cells]
        solution_ids = {cell.name for cell in source_nb.solution_cells}
        for grade_cell in sorted(source_nb.grade_cells, key=lambda c: order.index(c.name)):
            present = {
                cell.metadata["nbgrader"]["grade_id"]: index
                for index, cell in enumerate(nb.cells)
                if "grade_id" in cell.metadata.get("nbgrader", {})
            }
            if grade_cell.name in present:
                continue
            self.log.warning("Missing grade cell %s: restored from the source", grade_cell.name)
            source_cell = source_nb.source_cells[order.index(grade_cell.name)]
            restored = self.missing_cell_transform(
                source_cell, grade_cell.max_score, is_solution=grade_cell.name in solution_ids
            )
            earlier = [present[name] for name in order[: order.index(grade_cell.name)] if name in present]
            nb.cells.insert(max(earlier) + 1 if earlier else 0, restored)
        return nb, resources


class ForPages(NbGraderPreprocessor):
    """The autograded notebook as every page will show it, written so by nbgrader itself: no
    hidden test in any cell's source, each cell's stream outputs joined (how the kernel flushed
    them varies from run to run), nothing a browser would run (autograder/pages.py), and its size
    bounded (`max_bytes`, counted as a page would escape it)."""

    source_folder = Unicode("", help="The course's source folder of the assignment (its own markdown)").tag(config=True)
    max_bytes = Integer(8 << 20, help="The most bytes an autograded notebook may hold, as a page escapes it").tag(
        config=True
    )

    def preprocess(self, nb, resources):
        strip_hidden_tests(nb)
        coalesce_streams(nb)
        from .course import assignment_source

        own = frozenset()
        folder = Path(self.source_folder) if self.source_folder else assignment_source(self.config, resources)
        source = folder / f"{resources.get('nbgrader', {}).get('notebook', '')}.ipynb"
        if source.is_file():
            own = assignment_markdown(nbformat.read(source, as_version=4))
        sanitize_notebook(nb, own)
        bound_size(nb, self.max_bytes)
        return nb, resources


def coalesce_streams(notebook) -> None:
    """Join consecutive stdout (or stderr) outputs of each code cell."""
    for cell in notebook.cells:
        if cell.get("cell_type") != "code":
            continue
        merged = []
        for out in cell.get("outputs", []):
            if (
                merged
                and out.get("output_type") == "stream"
                and merged[-1].get("output_type") == "stream"
                and merged[-1].get("name") == out.get("name")
            ):
                merged[-1]["text"] = merged[-1].get("text", "") + out.get("text", "")
            else:
                merged.append(out)
        cell.outputs = merged


class RequireSandbox(NbGraderPreprocessor):
    """First of all, under `nbgrader autograde`: a sandbox that works here, or nobody is graded.

    Probed once per process, before nbgrader writes anything of the first notebook: where it
    cannot start, the command stops with exit status 3 and the fix. (The grader's own runs probe
    before any student and hand every notebook its sandbox; this one then does nothing.)"""

    def preprocess(self, nb, resources):
        from .sandbox import Limits, SandboxUnavailable, sandbox_for_grading

        if self.config.SandboxedKernelManager.get("session_for_kernels") is not None:
            return nb, resources
        execute = self.config.SandboxedExecute
        try:
            sandbox_for_grading(Limits.from_config(execute.get("limits", {})), bool(execute.get("unsafe", False)))
        except SandboxUnavailable as error:  # never a silent fallback
            print(f"error: nobody can be graded safely on this machine: {error}", file=sys.stderr, flush=True)
            raise SystemExit(3) from None
        return nb, resources
