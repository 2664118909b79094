"""The grader's end of a private line (autograder/kernel/control_line.py) closed by another thread
while it waits: a run stopped by Ctrl-C ends its students' sandboxes from the main thread while a
kernel's start waits for its host in a worker thread."""

from __future__ import annotations

import selectors
import threading
import time

import pytest

from autograder.kernel import control_line
from autograder.kernel.control_line import ControlLine, LineClosed

#: Far longer than the wait may last: a wait that sits out its deadline fails the join below.
DEADLINE_S = 600
JOIN_S = 60


class _SaysWhenWaiting(selectors.DefaultSelector):
    """A selector that tells the test when the line first waits on it."""

    waiting = threading.Event()

    def select(self, timeout=None):
        type(self).waiting.set()
        return super().select(timeout)


def _wait_in_a_thread(call) -> tuple[threading.Thread, list[BaseException]]:
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call(time.monotonic() + DEADLINE_S)
        except BaseException as error:  # noqa: BLE001 - handed to the test
            raised.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, raised


@pytest.mark.parametrize("wait", ["await_ready", "request"])
def test_a_line_closed_during_a_wait_ends_the_wait(monkeypatch, wait):
    _SaysWhenWaiting.waiting = threading.Event()
    monkeypatch.setattr(control_line.selectors, "DefaultSelector", _SaysWhenWaiting)
    line = ControlLine(4096)  # nothing answers: the process's ends are held here, never written
    call = line.await_ready if wait == "await_ready" else (lambda deadline: line.request({"ask": 1}, deadline))
    thread, raised = _wait_in_a_thread(call)
    assert _SaysWhenWaiting.waiting.wait(JOIN_S), "the line never waited"
    line.close()
    thread.join(JOIN_S)
    assert not thread.is_alive(), f"the wait went on after the line was closed (its deadline is {DEADLINE_S} s)"
    assert len(raised) == 1 and isinstance(raised[0], LineClosed), raised
    assert "closed the line" in str(raised[0])


def test_a_closed_line_refuses_at_once():
    line = ControlLine(4096)
    line.close()
    with pytest.raises(LineClosed, match="closed the line"):
        line.await_ready(time.monotonic() + DEADLINE_S)
    with pytest.raises(LineClosed, match="closed the line"):
        line.request({"ask": 1}, time.monotonic() + DEADLINE_S)
