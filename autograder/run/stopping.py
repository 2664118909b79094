"""Stopping a grading run: Ctrl-C (SIGINT) and SIGTERM (a scheduler's, a `kill`'s) both stop
`autograder grade` as a KeyboardInterrupt in its main thread, which no guard of one student's
catches (it is no Exception), so that one cleanup runs on the way out: temporary folders,
sandboxes, workers, an --out the run made.

A signal handler's exception is raised wherever the main thread happens to be. Inside a garbage
collector's callback (distributed's GC diagnosis runs one in a run with a local cluster), a
`__del__` or a weakref's callback, Python prints "Exception ignored in", drops it and goes on:
the run then finished and exited 0 however it was stopped. So a stop is recorded before it is
raised, and the run asks for the record where stopping is safe (`raise_if_stopped`: after each
student, between its steps, before it returns). What Python prints of the dropped one, and what a
library logs of one it caught (SQLAlchemy's pool, closing a connection), a traceback under a run
that then says it stopped, is left out.

Only the first stop is raised: a second Ctrl-C while the run cleans up (a second or two) would
cut its cleanup short. A stop Python dropped does not count: the next one is raised again.

A stopped command's process exits within EXIT_WITHIN_S of its return (`as_the_process_command`):
Python's exit waits for every thread that is no daemon, and a thread a library left running when
the stop came (an event loop's executor still starting a kernel, waiting on its line up to a
deadline of minutes) held the exit long after the run had cleaned up and said it stopped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

#: The signals that stopped this run, in the order they came (empty: not stopped).
_STOPPED_BY: list[signal.Signals] = []
#: The signals a stop comes by.
STOPS = (signal.SIGINT, signal.SIGTERM)
#: Seconds a stopped command's exit waits for threads left running before it ends without them.
EXIT_WITHIN_S = 10.0


class _State:
    #: The stop raised last was dropped by Python (raise the next one again).
    dropped = False
    #: The run is over and prints its results: a stop now is recorded, not raised.
    finished = False
    #: Inside stops_held: a stop is raised as the block ends.
    holding = False
    #: A stop came while they were held.
    held = False
    #: The process runs its own command (`as_the_process_command`), not one inside another program.
    process_command = False


def _stop(signum, frame) -> None:
    first = not _STOPPED_BY
    _STOPPED_BY.append(signal.Signals(signum))
    if (first or _State.dropped) and not _State.finished:
        _State.dropped = False
        if _State.holding:
            _State.held = True
            return
        raise KeyboardInterrupt


def _unraisable(info) -> None:
    """sys.unraisablehook: a stop Python dropped is recorded, and raised again by the run; any
    other exception Python drops is printed as Python prints it."""
    if isinstance(info.exc_value, KeyboardInterrupt) and _STOPPED_BY:
        _State.dropped = True
        return
    sys.__unraisablehook__(info)


class LoggedStopLeftOut(logging.Filter):
    """A record a library logged of the stop it caught (with the KeyboardInterrupt as its
    exception), once the run was stopped: the run says it stopped."""

    def filter(self, record: logging.LogRecord) -> bool:
        raised = record.exc_info[1] if record.exc_info else None
        return not (isinstance(raised, KeyboardInterrupt) and _STOPPED_BY)


def _handlers() -> list[logging.Handler]:
    """Where a library's records are printed: the root logger's handlers, else Python's last resort."""
    return [*logging.root.handlers, *([logging.lastResort] if logging.lastResort is not None else [])]


@contextlib.contextmanager
def listening_for_stops():
    """Stop this process's run on SIGTERM, and on Ctrl-C unless it is ignored here (a run started
    with `nohup`, or in the background of a shell without job control, keeps ignoring it); as it
    was again after the block, unless `kept_until_exit()`: then a later stop is ignored until the
    process ends, so that it cannot turn the exit status the run chose (130, 143) into a kill by
    the signal as Python exits. Ignored, not handled: Python's finalization puts a signal handled
    by a Python function back to its default, and a Ctrl-C then killed the process (exit -2, seen
    in CI); an ignored one stays ignored."""
    saved = {signum: signal.getsignal(signum) for signum in STOPS}
    hook, left_out = sys.unraisablehook, LoggedStopLeftOut()
    _STOPPED_BY.clear()
    _State.dropped = _State.finished = _State.holding = _State.held = False
    signal.signal(signal.SIGTERM, _stop)
    if saved[signal.SIGINT] is signal.default_int_handler:
        signal.signal(signal.SIGINT, _stop)
    sys.unraisablehook = _unraisable
    handlers = _handlers()
    for handler in handlers:
        handler.addFilter(left_out)
    try:
        yield
    finally:
        keep = kept_until_exit()
        for signum, before in saved.items():
            signal.signal(signum, signal.SIG_IGN if keep and signal.getsignal(signum) is _stop else before)
        if keep:
            _State.finished = True
        sys.unraisablehook = hook
        for handler in handlers:
            handler.removeFilter(left_out)


def finished() -> None:
    """The run is over (its results written): a stop from now on is recorded, not raised."""
    _State.finished = True


def stopped_by() -> signal.Signals | None:
    """The signal that stopped the run, or None."""
    return _STOPPED_BY[0] if _STOPPED_BY else None


def raise_if_stopped() -> None:
    """KeyboardInterrupt when the run was stopped and goes on regardless (its KeyboardInterrupt
    raised where Python dropped it, or taken by a library)."""
    if _STOPPED_BY and not _State.finished:
        raise KeyboardInterrupt


@contextlib.contextmanager
def stops_held():
    """Ctrl-C and SIGTERM held back from this (the main) thread while the block runs, and taken
    as it ends: a stop then comes after the block, not inside it. The threads and processes the
    block starts inherit the hold (a local cluster's event-loop thread, its workers: they take
    over, see tls.py's leave_stops_to_the_run)."""
    if threading.current_thread() is not threading.main_thread() or _State.holding:
        yield
        return
    # Blocked, for what the block starts to inherit; and not raised by the handler, for a signal
    # that another thread of this process took (Python runs its handler in this thread all the same).
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    _State.holding, _State.held = True, False
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)  # a stop that waited is handled here
        _State.holding = False
    if _State.held:
        _State.held = False
        raise KeyboardInterrupt


def as_the_process_command(command: Callable[[], int]) -> int:
    """Run `command`, this process's own (the `autograder` console script, `python -m
    autograder.run.grade`), and return its exit code. Once its run was stopped, what the run set
    up for a stop stays until the process ends (`kept_until_exit`), and the process ends within
    EXIT_WITHIN_S of the command's return even where Python's exit waits for threads that are no
    daemon (it joins an executor's threads first, then the rest); it then says which it left and
    ends with the code. A command called inside another program (a test's, `main([...])`) is not
    run through here: its process, and its exit, stay the caller's."""
    before, _State.process_command = _State.process_command, True
    try:
        code = command()
    finally:
        _State.process_command = before  # (a main([...]) the program calls afterwards is not its command)
    if stopped_by() is not None:
        threading.Thread(target=_end_a_held_exit, args=(code,), name="bounded exit", daemon=True).start()
    return code


def is_the_process_command() -> bool:
    """Whether the command running is this process's own (as_the_process_command)."""
    return _State.process_command


def kept_until_exit() -> bool:
    """Whether what a run set up for a stop (later stops ignored, `kill -USR1` heard) stays until
    the process ends: the run was stopped, and it is the process's own command."""
    return is_the_process_command() and bool(_STOPPED_BY)


def _end_a_held_exit(code: int) -> None:
    time.sleep(EXIT_WITHIN_S)  # a process that exits meanwhile ends this thread with it
    main = threading.main_thread()
    held = [t for t in threading.enumerate() if not t.daemon and t is not main]
    frames = sys._current_frames()
    where = ", ".join(f"{t.name}{_where(frames.get(t.ident or -1))}" for t in held)
    # No thread held: the exit's own handlers did (atexit's, a library's closing what it left open).
    what = f"a thread left running ({where})" if held else "Python's exit handlers (no thread left running)"
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(OSError):
        os.write(2, f"the exit waited {EXIT_WITHIN_S:.0f} s for {what}: ended without it\n".encode())
    os._exit(code)


def _where(frame) -> str:
    """at FILE:LINE of the grader's own innermost frame in a thread's stack ("" where none is)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    while frame is not None:
        if frame.f_code.co_filename.startswith(package + os.sep):
            name = os.path.relpath(frame.f_code.co_filename, os.path.dirname(package))
            return f" at {name}:{frame.f_lineno}"
        frame = frame.f_back
    return ""
