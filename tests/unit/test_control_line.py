"""The grader's end of a private line (autograder/kernel/control_line.py) closed by another thread
while it waits: a run stopped by Ctrl-C ends its students' sandboxes from the main thread while a
kernel's start waits for its host in a worker thread."""

from __future__ import annotations

import os
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
    """A selector that tells the test when the line first waits on it for an answer (a look
    without waiting, `select(0)`, or a wait to write, which a pipe takes at once, is not one)."""

    waiting = threading.Event()

    def select(self, timeout=None):
        reading = any(key.events & selectors.EVENT_READ for key in self.get_map().values())
        if reading and timeout != 0:
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


def test_a_write_under_a_close_writes_nothing_into_the_file_that_took_its_number(monkeypatch):
    """close() in another thread while the line's write waits (the GIL is let go in select): the
    freed numbers go to the next files opened, and the request must not be written into them."""
    line = ControlLine(4096)
    taken: list[tuple[int, int]] = []

    class _ClosedWhileWaiting(selectors.DefaultSelector):
        def select(self, timeout=None):
            ready = super().select(timeout)
            writing = any(key.events & selectors.EVENT_WRITE for key in self.get_map().values())
            if writing and not taken:
                line.close()  # as the stop's cleanup does, from another thread
                taken.append(os.pipe())  # the lowest free numbers: the line's own, just freed
            return ready

    monkeypatch.setattr(control_line.selectors, "DefaultSelector", _ClosedWhileWaiting)
    try:
        with pytest.raises(LineClosed):
            line.request({"ask": 1}, time.monotonic() + DEADLINE_S)
        reader, writer = taken[0]
        os.set_blocking(reader, False)
        with pytest.raises(BlockingIOError):  # nothing of the request came into the new pipe
            os.read(reader, 4096)
    finally:
        for fd in taken[0] if taken else ():
            os.close(fd)


def test_started_after_a_close_closes_nothing_of_another_file():
    """close() from another thread while the process starts (a run stopped during a kernel host's
    launch), then started(): the numbers close() freed may be another file's by then."""
    line = ControlLine(4096)
    line.close()
    reader, writer = os.pipe()  # takes the numbers the line held
    try:
        with pytest.raises(LineClosed):
            line.started()
        os.fstat(reader), os.fstat(writer)  # both still open: OSError (EBADF) otherwise
    finally:
        os.close(reader)
        os.close(writer)
