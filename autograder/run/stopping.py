"""Stopping a grading run: Ctrl-C (SIGINT) and SIGTERM (a scheduler's, a `kill`'s) both stop
`autograder grade` as a KeyboardInterrupt in its main thread, which no guard of one student's
catches (it is no Exception), so that one cleanup runs on the way out: temporary folders,
sandboxes, workers, an --out the run made.

A signal handler's exception is raised wherever the main thread happens to be. Inside a garbage
collector's callback (distributed's GC diagnosis runs one in a run with a local cluster), a
`__del__` or a weakref's callback, Python prints "Exception ignored in", drops it and goes on:
the run then finished and exited 0 however it was stopped. So a stop is recorded before it is
raised, and the run asks for the record where stopping is safe (`raise_if_stopped`: after each
student, between its steps, before it returns). What Python prints of the dropped one, a traceback
under a run that then says it stopped, is left out.
"""

from __future__ import annotations

import signal
import sys

#: The signals that stopped this run, in the order they came (empty: not stopped).
_STOPPED_BY: list[signal.Signals] = []


def _stop(signum, frame) -> None:
    _STOPPED_BY.append(signal.Signals(signum))
    raise KeyboardInterrupt


def _unraisable(info) -> None:
    """sys.unraisablehook: a stop Python dropped is recorded, and raised again by the run; any
    other exception Python drops is printed as Python prints it."""
    if isinstance(info.exc_value, KeyboardInterrupt) and _STOPPED_BY:
        return
    sys.__unraisablehook__(info)


def listen_for_stops() -> None:
    """Stop this process's run on SIGTERM, and on Ctrl-C unless it is ignored here (a run started
    with `nohup`, or in the background of a shell without job control, keeps ignoring it)."""
    _STOPPED_BY.clear()
    signal.signal(signal.SIGTERM, _stop)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _stop)
    sys.unraisablehook = _unraisable


def stopped_by() -> signal.Signals | None:
    """The signal that stopped the run, or None."""
    return _STOPPED_BY[0] if _STOPPED_BY else None


def raise_if_stopped() -> None:
    """KeyboardInterrupt when the run was stopped and goes on regardless (its KeyboardInterrupt
    raised where Python dropped it)."""
    if _STOPPED_BY:
        raise KeyboardInterrupt
