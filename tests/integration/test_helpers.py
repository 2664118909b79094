"""The judge's helper processes cannot hold the judge: every line has a deadline both ways, a helper
past the kernel's limits is ended, and a student's helpers end with the student's time.

Fake helpers (small Python programs in place of the runners) stall on purpose; each request runs in
a thread that the test waits for far longer than its deadline, so a request that hangs fails the
test instead of hanging it. No assertion rests on how fast this machine is: a request that should
fail at its deadline is given one far shorter than the wait, and one that only the watcher or a
halt can end is given a deadline far longer than the wait.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from autograder.judge.core import Judge, LearnerRaised
from autograder.kernel.helpers import HelperError, HelperProcess, HelperWatcher, NumpyOnlyRunner
from autograder.kernel.kernels import SandboxSession
from autograder.kernel.sandbox import Limits, Sandbox
from autograder.sandboxed.wire import dumps, encode
from tests.fixtures.build import NUMPY_HELPER_STALL

UNSAFE = Sandbox(None, Limits())
#: How long a test waits for a request that must end (its deadline is far shorter, or a halt ends it).
WAIT = 120
#: A deadline no request here may reach: only the watcher, a halt or an answer ends it.
NEVER = 3600

READY = "import json, os, sys, time\nout = os.fdopen(os.dup(1), 'w')\nout.write(json.dumps({'ready': True}) + '\\n')\nout.flush()\n"
FAKES = {
    # Takes one request, answers it, and never reads again.
    "stops-reading": READY + "sys.stdin.readline()\nout.write('{\"ok\": true}\\n')\nout.flush()\ntime.sleep(3600)\n",
    # Reads every request, answers none.
    "never-answers": READY + "for line in sys.stdin:\n    pass\n",
    # Answers every request.
    "answers": READY + "for line in sys.stdin:\n    out.write('{\"ok\": true}\\n')\n    out.flush()\n",
    # At its first request: 12 processes that wait, and no answer.
    "forks": READY
    + "sys.stdin.readline()\nfor _ in range(12):\n    if os.fork() == 0:\n        time.sleep(3600)\n        os._exit(0)\n"
    + "time.sleep(3600)\n",
    # At its first request: three processes that each touch 128 MiB, and no answer.
    "allocates": READY
    + "sys.stdin.readline()\nfor _ in range(3):\n    if os.fork() == 0:\n        block = bytearray(128 << 20)\n"
    + "        for i in range(0, len(block), 4096):\n            block[i] = 1\n        time.sleep(3600)\n"
    + "time.sleep(3600)\n",
}


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


def test_numpy_only_stall_ends_at_deadline(tmp_path):
    """The NumPy-only stall of issue 38 ends at the deadline.

    The answer cell answers the judge's "load" itself through the helper's own writer and parks
    the only reading thread; the next request is larger than a pipe holds."""
    helper = NumpyOnlyRunner(UNSAFE, tmp_path / "numpy-only", assignment=tmp_path)
    loaded, _ = finished(lambda: helper.request({"op": "load", "cell": 1, "source": NUMPY_HELPER_STALL}, 60))
    assert loaded == {"loaded": True}
    epsilon = "\u3000" * 19000 + "0.001"
    assert len(dumps(encode(epsilon))) > 1 << 16  # as the judge writes it: more than a pipe holds
    call = {"op": "call", "cell": 1, "name": "central_difference", "args": [encode(epsilon)]}
    _, raised = finished(lambda: helper.request(call, 2.0))
    assert isinstance(raised, HelperError) and "stopped taking the judge's requests" in str(raised)
    assert helper.process is None


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
