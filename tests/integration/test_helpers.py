"""The judge's helper processes cannot hold the judge: every line has a deadline both ways, a helper
past the kernel's limits is ended, and a student's helpers end with the student's time.

Fake helpers (small Python programs in place of the runners) stall on purpose; each request runs in
a thread that the test waits for far longer than its deadline, so a request that hangs fails the
test instead of hanging it. No assertion rests on how fast this machine is: a request that should
fail at its deadline is given one far shorter than the wait, and one that only the watcher or a
halt can end is given a deadline far longer than the wait.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from autograder.judge.core import Judge, LearnerRaised
from autograder.kernel.helpers import HelperError, HelperProcess, HelperWatcher, NumpyOnlyRunner
from autograder.kernel.kernels import SandboxSession
from autograder.kernel.sandbox import Limits, Sandbox
from tests.fixtures.build import NUMPY_HELPER_STALL

UNSAFE = Sandbox(None, Limits())
#: How long a test waits for a request that must end (its deadline is far shorter, or a halt ends it).
WAIT = 120
#: A deadline no request here may reach: only the watcher, a halt or an answer ends it.
NEVER = 3600

#: A fake helper's start: its private line (as confine.private_line takes it), and its "ready".
READY = (
    "import json, os, sys, time\n"
    "def main(config):\n"
    "    line = os.fdopen(config['line'][0])\n"
    "    out = os.fdopen(config['line'][1], 'w')\n"
    "    def say(nonce, **answer):\n"
    "        out.write(json.dumps({'nonce': nonce, **answer}) + '\\n')\n"
    "        out.flush()\n"
    "    say(config['start'], ready=True)\n"
)
#: What each fake does after its start (inside main: `line` its requests, `say` its answers).
BEHAVIOURS = {
    # Takes one request, answers it, and never reads again.
    "stops-reading": "say(json.loads(line.readline())['nonce'], ok=True)\ntime.sleep(3600)\n",
    # Reads every request, answers none.
    "never-answers": "for request in line:\n    pass\n",
    # Answers every request.
    "answers": "for request in line:\n    say(json.loads(request)['nonce'], ok=True)\n",
    # At its first request: 12 processes that wait, and no answer.
    "forks": "line.readline()\nfor _ in range(12):\n    if os.fork() == 0:\n        time.sleep(3600)\n"
    "        os._exit(0)\ntime.sleep(3600)\n",
    # At its first request: three processes that each touch 128 MiB, and no answer.
    "allocates": "line.readline()\nfor _ in range(3):\n    if os.fork() == 0:\n        block = bytearray(128 << 20)\n"
    "        for i in range(0, len(block), 4096):\n            block[i] = 1\n        time.sleep(3600)\n"
    "time.sleep(3600)\n",
    # Answers its first request with another request's nonce.
    "wrong-nonce": "line.readline()\nsay('0' * 32, ok=True)\ntime.sleep(3600)\n",
    # Answers its first request twice, in one write.
    "answers-twice": "answer = json.dumps({'nonce': json.loads(line.readline())['nonce'], 'ok': True})\n"
    "out.write(answer + '\\n' + answer + '\\n')\nout.flush()\ntime.sleep(3600)\n",
    # Answers its first request, then says something nobody asked for.
    "speaks-unasked": "say(json.loads(line.readline())['nonce'], ok=True)\ntime.sleep(0.2)\nsay('', ok=True)\n"
    "time.sleep(3600)\n",
    # Answers its first request after 3 s.
    "answers-late": "nonce = json.loads(line.readline())['nonce']\ntime.sleep(3)\nsay(nonce, ok=True)\n"
    "time.sleep(3600)\n",
}
FAKES = {name: READY + "".join("    " + row + "\n" for row in body.splitlines()) for name, body in BEHAVIOURS.items()}


class FakeHelper(HelperProcess):
    runner = "fake"

    def __init__(self, tmp_path: Path, behaviour: str, sandbox: Sandbox = UNSAFE):
        super().__init__(sandbox, tmp_path / behaviour)
        self.behaviour = behaviour

    def program(self) -> str:
        return FAKES[self.behaviour]


def finished(call, wait: float = WAIT):
    """call() in a thread: (what it returned, what it raised); fails the test if it is still running."""
    outcome: dict = {}

    def run():
        try:
            outcome["returned"] = call()
        except BaseException as error:  # noqa: BLE001 - the test inspects it
            outcome["raised"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(wait)
    assert not thread.is_alive(), f"the request was still running after {wait} s"
    return outcome.get("returned"), outcome.get("raised")


def gone(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


@pytest.mark.parametrize("size", [1 << 20, 16 << 20])
def test_helper_not_reading_fails_at_deadline(tmp_path, size):
    """A helper that stops reading fails the request at its deadline and is ended."""
    helper = FakeHelper(tmp_path, "stops-reading")
    assert finished(lambda: helper.request({"op": "first"}, 30))[0] == {"ok": True}
    pid = helper.process.pid
    # More than a pipe holds: the write itself would block for ever.
    _, raised = finished(lambda: helper.request({"op": "second", "data": "x" * size}, 1.0))
    assert isinstance(raised, HelperError) and "stopped taking the judge's requests" in str(raised)
    assert helper.process is None and gone(pid)


def test_silent_helper_fails_then_restarts(tmp_path):
    """A helper that never answers fails the request at its deadline and the next starts anew."""
    helper = FakeHelper(tmp_path, "never-answers")
    _, raised = finished(lambda: helper.request({"op": "first"}, 1.0))
    assert isinstance(raised, HelperError) and "ran past its time limit" in str(raised)
    assert helper.process is None
    helper.behaviour = "answers"  # the next request starts a new process
    assert finished(lambda: helper.request({"op": "again"}, 30))[0] == {"ok": True}
    helper.stop()


@pytest.mark.parametrize(
    ("behaviour", "limits", "named"),
    [
        ("forks", Limits(processes=8), "the process limit"),
        ("allocates", Limits(memory_total=256 << 20), "the memory limit"),
    ],
)
def test_helper_past_limits_ended_by_watcher(tmp_path, behaviour, limits, named):
    """A helper past the kernel's limits is ended by the watcher and says which."""
    helper = FakeHelper(tmp_path, behaviour, Sandbox(None, limits))
    watcher = HelperWatcher([helper], limits)
    watcher.start()
    try:
        _, raised = finished(lambda: helper.request({"op": "go"}, NEVER))
    finally:
        watcher.stop()
    assert isinstance(raised, HelperError) and named in str(raised)
    assert helper.process is None


def test_limit_between_requests_told_next(tmp_path):
    """A limit hit between requests is said by the next one."""
    helper = FakeHelper(tmp_path, "answers")
    assert finished(lambda: helper.request({"op": "first"}, 30))[0] == {"ok": True}
    helper.kill("it started more than 32 processes at once (the process limit)")
    _, raised = finished(lambda: helper.request({"op": "second"}, 30))
    assert isinstance(raised, HelperError) and "the process limit" in str(raised)
    assert finished(lambda: helper.request({"op": "third"}, 30))[0] == {"ok": True}  # a new process
    helper.stop()


def test_halting_session_ends_stalled_helper(tmp_path):
    """Halting a student's session ends a stalled helper request at once.

    What the watchdog does past a notebook's budget: the kernel's sandbox and the helpers end."""
    session = SandboxSession(UNSAFE, tmp_path / "session", tmp_path)
    helpers = session.judge_helpers()
    stalled = helpers._helpers["numpy_only"] = helpers.watcher.helpers[0] = FakeHelper(tmp_path, "stops-reading")
    try:
        assert finished(lambda: stalled.request({"op": "first"}, 30))[0] == {"ok": True}
        threading.Timer(0.5, session.halt, ["the notebook ran past its time budget"]).start()
        _, raised = finished(lambda: stalled.request({"op": "big", "data": "x" * (4 << 20)}, NEVER))
        assert isinstance(raised, HelperError) and "ran past its time budget" in str(raised)
    finally:
        session.remove()


def test_numpy_only_stall_line_refused(tmp_path):
    """The NumPy-only stall of issue 38 is refused as an unrequested line.

    Its answer cell answers the judge's "load" itself on the one writer it finds up its stack (its
    worker's own, the only line it can reach) and parks: that line carries no sequence number,
    so it is refused, never taken for the answer; the helper is ended and the judge told."""
    helper = NumpyOnlyRunner(UNSAFE, tmp_path / "numpy-only", assignment=tmp_path)
    _, raised = finished(lambda: helper.request({"op": "load", "cell": 1, "source": NUMPY_HELPER_STALL}, 60))
    assert isinstance(raised, HelperError) and raised.unrequested and "did not ask for" in str(raised), raised
    assert helper.process is None


@pytest.mark.parametrize("behaviour", ["wrong-nonce", "answers-twice"])
def test_answer_not_to_its_request_refused(tmp_path, behaviour):
    """An answer with another request's nonce, or a second answer to one request, is refused as
    unrequested, and the helper is ended: nothing it said is taken as an answer."""
    helper = FakeHelper(tmp_path, behaviour)
    _, raised = finished(lambda: helper.request({"op": "first"}, 30))
    assert isinstance(raised, HelperError) and raised.unrequested, raised
    assert helper.process is None


def test_unasked_line_refused_at_next_request(tmp_path):
    """A line sent between requests is refused when the next request would be sent: it is never
    read as that request's answer."""
    helper = FakeHelper(tmp_path, "speaks-unasked")
    assert finished(lambda: helper.request({"op": "first"}, 30))[0] == {"ok": True}
    time.sleep(1)  # the unasked line is sent 0.2 s after the answer
    _, raised = finished(lambda: helper.request({"op": "second"}, 30))
    assert isinstance(raised, HelperError) and raised.unrequested and "did not ask for" in str(raised), raised


def test_late_answer_never_read_for_next_request(tmp_path):
    """An answer that comes after its request's deadline is never read as the next one's: the
    helper was ended at the deadline, and the next request goes to a new process."""
    helper = FakeHelper(tmp_path, "answers-late")
    _, raised = finished(lambda: helper.request({"op": "first"}, 1.0))
    assert isinstance(raised, HelperError) and "ran past its time limit" in str(raised)
    helper.behaviour = "answers-twice"  # a new process, whose first answer is its own
    _, raised = finished(lambda: helper.request({"op": "second"}, 30))
    assert isinstance(raised, HelperError) and raised.unrequested  # its second line, refused


class CountingHelpers:
    """The judge's helpers, where the NumPy-only one fails every request as a stalled one does."""

    def __init__(self):
        self.requests = []

    def __getitem__(self, name):
        assert name == "numpy_only"
        return self

    def request(self, message, timeout):
        self.requests.append(message["op"])
        raise HelperError("it stopped taking the judge's requests and was stopped")


def test_ended_process_costs_one_deadline():
    """An answer cell whose process was ended costs one deadline, not one per item."""
    helpers = CountingHelpers()
    judge = Judge(None, helpers, None, 1, ["def f(x):\n    return x\n", "def g(x):\n    return x\n"], timeout=5)
    for _ in range(3):
        with pytest.raises(LearnerRaised, match="stopped taking"):
            judge.numpy_only("f")
    assert helpers.requests == ["load"]  # the later items fail at once, with the same reason
    with pytest.raises(LearnerRaised):
        judge.numpy_only("g")  # another answer cell is still tried
    assert helpers.requests == ["load", "load"]


def test_no_helper_request_past_deadline():
    """No helper request starts past the notebook's deadline."""
    helpers = CountingHelpers()
    judge = Judge(None, helpers, None, 1, ["def f(x):\n    return x\n"], timeout=5, deadline=0.0)
    with pytest.raises(LearnerRaised, match="time budget ran out"):
        judge.numpy_only("f")
    assert helpers.requests == []


def test_earlier_notebooks_limit_not_told_to_next(tmp_path):
    """A limit hit after a notebook's last request is not the next notebook's: fresh() clears it."""
    helper = FakeHelper(tmp_path, "answers")
    assert finished(lambda: helper.request({"op": "first"}, 30))[0] == {"ok": True}
    helper.kill("it started more than 32 processes at once (the process limit)")
    helper.fresh()  # the next notebook's judge begins
    assert finished(lambda: helper.request({"op": "second"}, 30))[0] == {"ok": True}
    helper.stop()


LEAVES_A_PROCESS = """import os as _os
import time as _time

if _os.fork() == 0:  # a process of its own session, outside the cell's process group
    try:
        _os.setsid()
        if _os.path.isdir("/tmp/submission"):  # the builder's workspace
            with open("/tmp/submission/remat_lesson.py", "w") as _shadow:
                _shadow.write("SHADOWED = True\\n")
        _time.sleep(3600)
    finally:
        _os._exit(0)
_time.sleep(0.5)


def left(x):
    return x
"""
READS_THE_LESSON = "def probe(x):\n    raise RuntimeError(open('/tmp/submission/remat_lesson.py').read()[:40])\n"


def _builder_request(name: str, source: str) -> dict:
    return {
        "op": "program",
        "cells": {name: source},
        "target": {"$learner": name},
        "bind": None,
        "avals": [[[3], "float32"]],
    }


@pytest.mark.parametrize("which", ["numpy_only", "builder"])
def test_fresh_helper_keeps_nothing_of_earlier_notebook(tmp_path, which):
    """A cell that leaves a process of its own session (out of reach of its process group) and
    shadows a shipped module: at the next notebook the helper's sandbox holds its first process
    alone again, and the shipped files as shipped."""
    from autograder.adapters.jax_programs.helpers import ProgramBuilder
    from autograder.adapters.lesson import SHIPPED_MODULES
    from autograder.course.paths import RELEASE
    from autograder.kernel.sandbox import find_sandbox

    assignment = tmp_path / "assignment"
    assignment.mkdir()
    for name in SHIPPED_MODULES:
        (assignment / name).write_bytes((RELEASE / name).read_bytes())
    kind = NumpyOnlyRunner if which == "numpy_only" else ProgramBuilder
    helper = kind(find_sandbox(), tmp_path / which, assignment=assignment)
    try:
        if which == "numpy_only":
            assert helper.request({"op": "load", "cell": 1, "source": LEAVES_A_PROCESS}, 60) == {"loaded": True}
        else:
            assert "program" in helper.request(_builder_request("left", LEAVES_A_PROCESS), 120)
        assert len(helper.processes()) >= 2  # its first process, and what the cell left
        first = helper.processes()[0]
        helper.fresh()
        assert helper.processes() == [first]  # the same helper, alone in its sandbox
        if which == "builder":
            answer = helper.request(_builder_request("probe", READS_THE_LESSON), 120)
            assert "SHADOWED" not in answer["raised"]["message"], answer
    finally:
        helper.stop()


def test_helper_started_ahead_is_taken_when_first_asked(tmp_path):
    """A helper started ahead that said it was ready long before its first request (a notebook's
    cell ran past its start deadline meanwhile) is taken, not ended as one that did not start."""
    helper = FakeHelper(tmp_path, "answers")
    helper.launch()
    time.sleep(1)  # its "ready" is waiting by now
    helper._ready_by = time.monotonic() - 1  # ... and the deadline for it long gone
    assert finished(lambda: helper.request({"op": "first"}, 30))[0] == {"ok": True}
    helper.stop()


def test_builder_forks_find_the_shipped_modules_as_shipped(tmp_path):
    """A fork that writes over a shipped module in its working directory changes nothing for the
    next fork: the builder imported the notebook's prelude from the shipped files before forking."""
    from autograder.adapters.jax_programs.helpers import ProgramBuilder
    from autograder.adapters.lesson import SHIPPED_MODULES
    from autograder.course.paths import RELEASE
    from autograder.kernel.sandbox import find_sandbox

    assignment = tmp_path / "assignment"
    assignment.mkdir()
    for name in SHIPPED_MODULES:
        (assignment / name).write_bytes((RELEASE / name).read_bytes())
    helper = ProgramBuilder(find_sandbox(), tmp_path / "builder", assignment=assignment)
    probe = "def probe(x):\n    raise RuntimeError(f'shadowed: {hasattr(remat_lesson, \"SHADOWED\")}')\n"
    try:
        shadowing = {**_builder_request("left", LEAVES_A_PROCESS), "prelude": ["remat_lesson"]}
        assert "program" in helper.request(shadowing, 120)
        answer = helper.request(
            {**_builder_request("probe", "import remat_lesson\n\n" + probe), "prelude": ["remat_lesson"]}, 120
        )
        assert answer["raised"]["message"] == "shadowed: False", answer
    finally:
        helper.stop()


#: An answer cell that computes with JAX as it runs, beside its function (stage 4's hvp cell sets
#: HVP_DIRECTION so), with the lesson's prelude, which makes JAX arrays as it is imported.
COMPUTES_AS_IT_RUNS = (
    "import jax.numpy as jnp\n\nOFFSET = jnp.linspace(-1.0, 1.0, 3)\n\n\ndef shifted(v):\n    return v + OFFSET\n"
)


def test_builder_builds_from_a_cell_that_computes_as_it_runs(tmp_path):
    """The builder imported the prelude itself and then forked: a fork of a process whose JAX backend
    is up cannot compile, so the cell's first computation hung until the request's time ran out. The
    fork imports the prelude now, from the shipped files."""
    from autograder.adapters.jax_programs.helpers import ProgramBuilder
    from autograder.adapters.lesson import SHIPPED_MODULES
    from autograder.course.paths import RELEASE
    from autograder.kernel.sandbox import find_sandbox

    assignment = tmp_path / "assignment"
    assignment.mkdir()
    for name in SHIPPED_MODULES:
        (assignment / name).write_bytes((RELEASE / name).read_bytes())
    helper = ProgramBuilder(find_sandbox(), tmp_path / "builder", assignment=assignment)
    try:
        request = {**_builder_request("shifted", COMPUTES_AS_IT_RUNS), "prelude": ["remat_lesson"]}
        for _ in range(2):  # the second fork as the first
            assert "program" in helper.request(request, 60)
    finally:
        helper.stop()


@pytest.mark.parametrize("how", ["stopped", "killed"])
def test_nothing_of_a_helpers_sandbox_outlives_it(tmp_path, how):
    """A cell that left a process of its own session: once the helper is stopped (the judge's
    deadline) or killed (the watcher, at a limit), neither the sandbox's first process nor what
    the cell left is running. The first process is in a session of its own (`--new-session`) and,
    where the grader is root, has a uid of its own that bubblewrap's `--die-with-parent` cannot
    signal: it has to be found before bubblewrap is gone."""
    from autograder.kernel.sandbox import find_sandbox

    helper = NumpyOnlyRunner(find_sandbox(), tmp_path / "numpy_only")
    try:
        assert helper.request({"op": "load", "cell": 1, "source": LEAVES_A_PROCESS}, 60) == {"loaded": True}
        inside = helper.processes()
        assert len(inside) >= 2  # its first process, and what the cell left
        if how == "stopped":
            helper.stop()
        else:
            helper.kill("it passed the memory limit")
        deadline = time.monotonic() + 30
        while not all(gone(pid) for pid in inside) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in inside if not gone(pid)] == []
    finally:
        helper.stop()


def test_a_helper_is_ended_with_what_left_its_group_even_once_it_is_gone(tmp_path, monkeypatch):
    """Ending a helper finds every process below it before any is killed: a process that left the
    helper's group is still ended when the helper itself is gone (reaped) by the time anyone
    looks below it, as bubblewrap may be by then."""
    from autograder.kernel import helpers

    started = tmp_path / "left"
    leaves = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        f"    open({str(started)!r}, 'w').write(str(os.getpid()))\n"
        "    time.sleep(3600)\n"
        "    os._exit(0)\n"
        "time.sleep(3600)\n"
    )
    helper = subprocess.Popen([sys.executable, "-c", leaves], start_new_session=True)
    deadline = time.monotonic() + 30
    while not (started.is_file() and started.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = int(started.read_text())
    killpg = helpers.os.killpg

    def killpg_then_reap(group, signum):  # the helper's own process ends at once, as bubblewrap's may
        killpg(group, signum)
        helper.wait(timeout=30)

    monkeypatch.setattr(helpers.os, "killpg", killpg_then_reap)
    try:
        helpers._kill_all(helper.pid)
        deadline = time.monotonic() + 30
        while not gone(left) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gone(left), "the process that left the helper's group outlived it"
    finally:
        monkeypatch.undo()
        if not gone(left):
            os.kill(left, signal.SIGKILL)


BLOCKS_WITH_A_PROCESS = (
    LEAVES_A_PROCESS
    + """

def blocks(x):
    if _os.fork() == 0:  # one more process, of its own session: the call has begun
        _os.setsid()
        _time.sleep(3600)
        _os._exit(0)
    _time.sleep(3600)
"""
)


#: A grader in a process of its own: a helper (NumPy-only runner or program builder) asked for
#: something that never returns, the helper's processes printed, then the grader waits to be killed.
GRADER_THAT_DIES = """
import json, sys, threading, time
from pathlib import Path
from autograder.adapters.jax_programs.helpers import ProgramBuilder
from autograder.kernel.helpers import NumpyOnlyRunner
from autograder.kernel.sandbox import find_sandbox

which, folder, assignment, source = sys.argv[1:]
if which == "numpy_only":
    helper = NumpyOnlyRunner(find_sandbox(), Path(folder))
    assert helper.request({"op": "load", "cell": 1, "source": source}, 60) == {"loaded": True}
    request = {"op": "call", "cell": 1, "name": "blocks", "args": [1.0]}
else:
    helper = ProgramBuilder(find_sandbox(), Path(folder), assignment=Path(assignment))
    request = json.loads(source)
threading.Thread(target=helper.request, args=(request, 3600), daemon=True).start()
deadline = time.monotonic() + 120
need = 4 if which == "numpy_only" else 3  # first, the worker (and what its load left) or the fork, what it left
while len(helper.processes()) < need and time.monotonic() < deadline:
    time.sleep(0.05)
print(" ".join(map(str, helper.processes())), flush=True)
time.sleep(3600)
"""


@pytest.mark.parametrize("which", ["numpy_only", "builder"])
def test_a_helper_waiting_on_learner_code_ends_when_the_grader_goes(tmp_path, which):
    """The grader is killed while a helper waits for learner code that never returns (a NumPy-only
    cell's function, a cell the builder's fork runs) and that left a process outside its group:
    the helper sees its line close and ends, and its sandbox with it. (Where the grader is root,
    nothing else ends it: its first process has a uid of its own, which bubblewrap's
    --die-with-parent may not signal.)"""
    from autograder.adapters.lesson import SHIPPED_MODULES
    from autograder.course.paths import RELEASE, ROOT

    assignment = tmp_path / "assignment"
    assignment.mkdir()
    for name in SHIPPED_MODULES:
        (assignment / name).write_bytes((RELEASE / name).read_bytes())
    if which == "numpy_only":
        source = BLOCKS_WITH_A_PROCESS
    else:
        source = json.dumps(_builder_request("left", LEAVES_A_PROCESS + "\n_time.sleep(3600)\n"))
    grader = subprocess.Popen(
        [sys.executable, "-c", GRADER_THAT_DIES, which, str(tmp_path / which), str(assignment), source],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    inside = []
    try:
        inside = [int(pid) for pid in grader.stdout.readline().split()]
        assert len(inside) >= 3, inside
        os.kill(grader.pid, signal.SIGKILL)  # no stop, no close: the grader is gone
        grader.wait(timeout=30)
        deadline = time.monotonic() + 30
        while not all(gone(pid) for pid in inside) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in inside if not gone(pid)] == []
    finally:
        for pid in [grader.pid, *inside]:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
