"""Execution while grading, without a kernel: output caps, why a notebook stops, failures as data,
and the glue that hands test cells to the judge (autograder/notebook/execute.py, output_caps.py,
judged_cells.py). The same code with real kernels is in test_sandbox.py and the grading tests."""

from __future__ import annotations

import asyncio
import concurrent.futures
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbgrader.preprocessors import Execute
from traitlets.config import Configurable

from autograder.course.outcomes import Trouble, TroubleKind
from autograder.judge.judged_cells import JudgedCells, JudgeSettings
from autograder.kernel.kernels import SandboxSession
from autograder.kernel.output_caps import MAX_OUTPUTS, SLACK, OutputCaps, size_of
from autograder.kernel.sandbox import Limits, Sandbox
from autograder.notebook.execute import (
    FAILURE_CAUSES,
    Failure,
    NotebookContext,
    NotebookRecord,
    SandboxedExecute,
    _note_limits,
    _rewrite_paths,
    failure_of,
)


def _stream(text: str, msg_id: str = "m") -> dict:
    return {
        "msg_type": "stream",
        "parent_header": {"msg_id": msg_id},
        "content": {"name": "stdout", "text": text},
        "header": {"msg_type": "stream"},
    }


# ---------------------------------------------------------------------------------------
# Output caps.
# ---------------------------------------------------------------------------------------
def test_cell_output_cut_at_limit_with_note():
    """A cell keeps output up to its limit and gets one note."""
    caps = OutputCaps(cell_bytes=1000, notebook_bytes=10**9)
    content = {"name": "stdout", "text": "x" * 400}
    size = size_of(content)
    kept = 0
    while caps.admit(0, content) is None:
        kept += 1
    assert kept == (1000 + SLACK) // size
    assert "output limit of a cell" in caps.admit(0, content)
    assert caps.cut_note(0, "why") is not None and caps.cut_note(0, "why") is None  # one note per cell
    assert caps.admit(1, content) is None  # the next cell has its own room
    assert caps.notebook == (kept + 1) * size  # what was cut does not count against the notebook


def test_the_notebook_limit_spans_cells():
    caps = OutputCaps(cell_bytes=10**9, notebook_bytes=1000)
    content = {"text": "y" * 300}
    reasons = [caps.admit(index, content) for index in range(5)]
    assert reasons[:3] == [None, None, None]
    assert all("output limit of a notebook" in why for why in reasons[3:])


def test_a_cell_keeps_at_most_max_outputs_outputs():
    caps = OutputCaps(cell_bytes=10**9, notebook_bytes=10**9)
    reasons = [caps.admit(0, {"text": "."}) for _ in range(MAX_OUTPUTS + 2)]
    assert reasons[:MAX_OUTPUTS] == [None] * MAX_OUTPUTS
    assert "outputs, the limit of a cell" in reasons[MAX_OUTPUTS]


def test_display_update_counts_once_per_output():
    """A display update counts once per output it replaces."""
    caps = OutputCaps(cell_bytes=10**9, notebook_bytes=10_000)
    small = {"data": {"text/plain": "z" * 100}, "metadata": {}}
    caps.admit_update(small, targets=3)
    assert caps.notebook == 3 * size_of({"data": {"text/plain": "z" * 100}, "metadata": {}})
    big = {"data": {"text/plain": "z" * 5000}, "metadata": {}}
    caps.admit_update(big, targets=3)  # 15 000 bytes in all: replaced by a line that says so
    assert "past the output limit of grading" in big["data"]["text/plain"]


def test_unmeasurable_output_exceeds_limits():
    """An unmeasurable output counts as past every limit."""

    class Odd:
        def __repr__(self):
            raise RecursionError

    assert size_of({"data": Odd()}) == 1 << 30


def test_executor_cuts_one_cell_keeps_next():
    """The executor cuts a cell's output and keeps the next cell's."""
    executor = SandboxedExecute()
    executor.reset_execution_trackers()
    executor.clear_before_next_output = False  # as nbclient sets it when a cell starts
    executor._caps = OutputCaps(1024, 8 << 20)
    outs, next_outs = [], []
    for _ in range(200):
        executor.output(outs, _stream("w" * 1000), None, 0)
    executor.output(next_outs, _stream("fine\n"), None, 1)
    assert sum(len(o.get("text", "")) for o in outs) < 1024 + SLACK + 1000
    assert outs[-1]["text"].startswith("\n[output cut: this cell printed more than")
    assert [o["text"] for o in next_outs] == ["fine\n"]


# ---------------------------------------------------------------------------------------
# Why a notebook stops, and what the record says.
# ---------------------------------------------------------------------------------------
@pytest.fixture
def executor():
    executor = SandboxedExecute(timeout=30)
    executor._stopped = None
    executor._caps = OutputCaps(Limits().output, Limits().notebook_output)
    executor._configured_timeout = 30
    executor._deadline = float("inf")
    executor._judged = JudgedCells(JudgeSettings("", "", 0), [], 30, float("inf"))
    return executor


def _cell(source: str = "x = 1", **nbgrader) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    if nbgrader:
        cell.metadata["nbgrader"] = nbgrader
    return cell


def _run(coroutine):
    # In a thread of its own: a notebook run earlier in this process may have left its event
    # loop marked as running in the main thread, where asyncio.run refuses to start another.
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, coroutine).result()


def _run_cell(executor, cell, index: int):
    return _run(executor.async_execute_cell(cell, index))


def test_kernel_stopped_at_limit_ends_notebook(executor, monkeypatch):
    """A kernel stopped at a limit ends the notebook there."""

    async def dies(self, cell, index, *args, **kwargs):
        raise DeadKernelError("gone")

    monkeypatch.setattr(Execute, "async_execute_cell", dies)
    executor.km = type("Manager", (), {"limit_hit": "its processes used more than 6 GiB of memory"})()
    first = _run_cell(executor, _cell(), 2)
    assert first.outputs[-1]["ename"] == "KernelDied"
    assert "stopped because its processes used more than 6 GiB" in first.outputs[-1]["evalue"]
    later = _run_cell(executor, _cell(), 3)
    assert later.outputs[0]["ename"] == "NotRun" and "in cell 3" in later.outputs[0]["evalue"]
    assert executor.record.troubles == [
        Trouble(
            TroubleKind.LIMIT,
            "the kernel was stopped because its processes used more than 6 GiB of memory, in cell 3; "
            "the checks that finished before keep their points, the rest scored 0",
            cell=2,
        )
    ]


def test_broken_output_channel_stops_kernel(executor, monkeypatch):
    """A broken output channel stops the kernel and says so."""

    async def never_outputs(self, cell, index, *args, **kwargs):
        raise CellTimeoutError("no output")

    monkeypatch.setattr(Execute, "async_execute_cell", never_outputs)
    cell = _run_cell(executor, _cell(), 0)
    assert cell.outputs[-1]["ename"] == "KernelStopped" and "64 MiB" in cell.outputs[-1]["evalue"]
    assert executor._stopped.endswith("in cell 1")


def test_channel_cut_by_limit_names_limit(executor, monkeypatch):
    """The watcher stops the sandbox between a cell's reply and its last output (hostile-memory-hog
    on a loaded machine): the output never comes, and the cause is the limit, not the channel."""

    async def stopped_before_its_output(self, cell, index, *args, **kwargs):
        raise CellTimeoutError("no output")

    monkeypatch.setattr(Execute, "async_execute_cell", stopped_before_its_output)
    executor.km = type("Manager", (), {"limit_hit": "its processes used more than 6144 MiB of memory together"})()
    cell = _run_cell(executor, _cell(), 39)
    assert cell.outputs[-1]["ename"] == "KernelDied"
    assert "stopped because its processes used more than 6144 MiB" in cell.outputs[-1]["evalue"]
    assert "output channel" not in cell.outputs[-1]["evalue"]
    assert executor._stopped.endswith("in cell 40")


def test_manager_limit_is_watchers_word_first():
    """The cell above asks the manager at once: nothing has yet found the kernel dead (which is
    where nbclient would ask is_alive), so the manager reads the limit from its watcher."""
    from autograder.kernel.kernels import SandboxedKernelManager

    manager = SandboxedKernelManager()
    assert manager.limit_hit is None
    hit = "its processes used more than 6144 MiB of memory together (the memory limit)"
    manager._watcher = type("Watcher", (), {"hit": hit})()
    assert manager.limit_hit == hit


def test_notebook_past_budget_runs_no_cell(executor, monkeypatch):
    """A notebook past its budget runs no further cell."""
    ran = []

    async def runs(self, cell, index, *args, **kwargs):
        ran.append(index)
        return cell

    monkeypatch.setattr(Execute, "async_execute_cell", runs)
    executor.autograde_budget, executor._deadline = 5.0, 0.0  # long past
    cell = _run_cell(executor, _cell(), 4)
    assert ran == [] and cell.outputs[0]["ename"] == "NotRun"
    (trouble,) = executor.record.troubles
    assert trouble.kind is TroubleKind.TIME_BUDGET and trouble.cell == 4
    assert "time budget of 5 s, before cell 5" in trouble.message


def test_cell_timeout_is_budget_left(executor, monkeypatch):
    """A cell gets what is left of the budget as its timeout."""
    import time

    seen = []

    async def runs(self, cell, index, *args, **kwargs):
        seen.append(self.timeout)
        return cell

    monkeypatch.setattr(Execute, "async_execute_cell", runs)
    executor._deadline = time.monotonic() + 7.5
    _run_cell(executor, _cell(), 0)
    executor._deadline = float("inf")
    _run_cell(executor, _cell(), 1)
    assert seen[0] in (6, 7) and seen[1] == 30


def test_notebook_end_kept_as_data(tmp_path, monkeypatch):
    """What ended a notebook is kept as data with its cell."""
    session = SandboxSession(Sandbox(bwrap=None), tmp_path / "session", tmp_path)
    context = NotebookContext(session, NotebookRecord())
    try:
        executor = SandboxedExecute(context=context)

        def fails(self, nb, resources=None, km=None):
            self.record.current_cell = 6
            raise DeadKernelError("Kernel died")

        monkeypatch.setattr(Execute, "preprocess", fails)
        with pytest.raises(DeadKernelError):
            executor.preprocess(nbformat.v4.new_notebook(), {})
        assert context.record.failure == Failure(6, "DeadKernelError", FAILURE_CAUSES["DeadKernelError"])
        assert executor.record is context.record
    finally:
        session.remove()


def test_unknown_failure_names_exception():
    """A failure without a known cause names what was raised."""
    failure = failure_of(KeyError("grade_id"), None)
    assert failure == Failure(None, "KeyError", "nbgrader could not grade it: KeyError: 'grade_id'")


@pytest.mark.parametrize(
    ("ename", "evalue", "note"),
    [
        ("MemoryError", "", "memory limit"),
        ("OSError", "[Errno 27] File too large", "file-size limit"),
        ("OSError", "[Errno 28] No space left on device", "scratch space"),
        ("PermissionError", "[Errno 30] Read-only file system", "read-only"),
    ],
)
def test_learner_limit_error_names_limit_once(ename, evalue, note):
    """A learner's error from a limit names the limit once."""
    cell = _cell()
    cell.outputs = [nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[])]
    _note_limits(cell)
    _note_limits(cell)
    assert cell.outputs[0]["evalue"].count(note) == 1


def test_unsandboxed_scratch_reads_as_tmp():
    """An unsandboxed kernel's scratch path reads as /tmp."""
    notebook = nbformat.v4.new_notebook(cells=[_cell()])
    notebook.cells[0].outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="/scratch/9/x.npy\n"),
        nbformat.v4.new_output("error", ename="E", evalue="/scratch/9/y", traceback=["at /scratch/9/z"]),
        nbformat.v4.new_output("display_data", data={"text/plain": "/scratch/9"}),
    ]
    _rewrite_paths(notebook, "/scratch/9", "/tmp")
    outputs = notebook.cells[0].outputs
    assert outputs[0]["text"] == "/tmp/x.npy\n" and outputs[1]["evalue"] == "/tmp/y"
    assert outputs[1]["traceback"] == ["at /tmp/z"] and outputs[2]["data"]["text/plain"] == "/tmp"


# ---------------------------------------------------------------------------------------
# The glue to the judge.
# ---------------------------------------------------------------------------------------
def test_only_test_cells_judged_with_source():
    """Only test cells are judged and only with a judge source."""
    judged = JudgedCells(JudgeSettings("/course/source/ps1", "remat_checks", 1), [], 30, float("inf"))
    test = _cell("from remat_checks import Checks\nassert f(2) == 4", grade=True, solution=False, points=2)
    answer = _cell("def f(x):\n    return x * x", grade=True, solution=True, points=1)
    assert judged.judges(test) and not judged.judges(answer) and not judged.judges(_cell())
    assert judged.kernel_source(test) == "from remat_checks import Checks"  # imports only
    unjudged = JudgedCells(JudgeSettings("", "remat_checks", 1), [], 30, float("inf"))
    assert not unjudged.judges(test)


def test_cell_after_kernel_stop_scores_zero():
    """A test cell after the kernel stopped scores zero and says why."""
    judged = JudgedCells(JudgeSettings("/x", "remat_checks", 1), [], 30, float("inf"))
    cell = _cell("assert True", grade=True, solution=False, points=3)
    seconds, dead = _run(judged.verdict(cell, 4, None, None, "the kernel died, in cell 2"))
    assert (seconds, dead, judged.judge) == (0.0, None, None)  # no judge was made
    assert judged.ledger.points == {"cell 5": 0.0} and judged.ledger.cells == {4: "cell 5"}
    assert cell.outputs[0]["text"].startswith("this cell's checks did not run: the kernel died, in cell 2")
    assert cell.outputs[1]["data"]["text/plain"] == "0.0"


class _Converter(Configurable):
    """nbgrader's Autograde as RequireSandbox reaches it: its exporter's parent, with its course
    directory (which notebooks it converts) and where it writes a student's assignment."""

    def __init__(self, root, notebook_id="*"):
        super().__init__()
        self.coursedir = SimpleNamespace(notebook_id=notebook_id)
        self.root = root

    def _format_dest(self, assignment, student, escape=False):
        return str(self.root / "autograded" / student / assignment)


@pytest.mark.parametrize(
    ("notebook_id", "student", "assignment", "removed"),
    [
        ("*", "bob", "ps1", True),
        ("nb2", "bob", "ps1", False),
        ("*", "..", "ps1", False),
        ("*", "a/b", "ps1", False),
        ("*", "", "ps1", False),
        ("*", "bob", "..", False),
        ("*", "bob", ".", False),
    ],
    ids=["every-notebook", "some-notebooks", "dot-dot", "separator", "empty", "assignment-dot-dot", "assignment-dot"],
)
def test_a_refused_run_removes_only_the_folder_it_began(tmp_path, notebook_id, student, assignment, removed):
    """A refusal removes the student's autograded folder nbgrader began in this run (every notebook
    converted), and nothing when only some notebooks are (`--notebook`: the folder holds notebooks
    already graded) or when an id is not one plain folder name. Each case also makes the folder
    the ids would name, so that removing it is seen: an id like `..` names another folder."""
    import os

    from autograder.notebook.execute import RequireSandbox

    folder = tmp_path / "autograded" / "bob" / "ps1"
    folder.mkdir(parents=True)
    (folder / "nb1.ipynb").write_text("{}")
    named = Path(os.path.normpath(tmp_path / "autograded" / student / assignment))
    named.mkdir(parents=True, exist_ok=True)
    (named / "kept").write_text("")
    exporter = Configurable(parent=_Converter(tmp_path, notebook_id))
    RequireSandbox(parent=exporter)._forget_this_student({"nbgrader": {"student": student, "assignment": assignment}})
    assert folder.exists() is not removed
    if not removed:
        assert (named / "kept").exists(), f"{named} was removed"
    assert (tmp_path / "autograded").is_dir()


def test_a_refused_run_of_some_notebooks_removes_a_folder_that_holds_none(tmp_path):
    """`--notebook` for a student not graded before: the refused run's folder holds no notebook, and
    left there, the next full run would skip the student ("Skipping existing assignment")."""
    from autograder.notebook.execute import RequireSandbox

    folder = tmp_path / "autograded" / "bob" / "ps1"
    folder.mkdir(parents=True)
    (folder / "remat_checks.py").write_text("")  # what nbgrader copies before any notebook is graded
    exporter = Configurable(parent=_Converter(tmp_path, "nb2"))
    RequireSandbox(parent=exporter)._forget_this_student({"nbgrader": {"student": "bob", "assignment": "ps1"}})
    assert not folder.exists()


@pytest.mark.parametrize("student", ["ann", "o'brien two", "-x"])
def test_route_as_seed_line_names_the_command_that_grades_that_notebook_again(student):
    """Route A logs each notebook's judge seed with the command that grades that notebook alone
    again with the same inputs: nbgrader's own, its words quoted for the shell."""
    import shlex

    from autograder.notebook.execute import seed_line

    line = seed_line(123, "performance-05", student, "02-build")
    assert line.startswith(f"judge seed 123 for {student}'s 02-build (")
    command = shlex.split(line.split("with the same inputs: ", 1)[1].removesuffix(")"))
    assert command == [
        "nbgrader", "autograde", "performance-05", f"--student={student}", "--notebook=02-build", "--force",
        "--SandboxedExecute.judge_seed=123",
    ]  # fmt: skip
