"""A stop of `autograder grade` is never lost (autograder/run/stopping.py): Python drops an
exception raised inside a garbage collector's callback, as a signal handler's KeyboardInterrupt
can be, and the run finished with exit 0 however it was stopped."""

from __future__ import annotations

import gc
import signal
import sys

import pytest

from autograder.run import stopping


@pytest.fixture
def listening():
    """listen_for_stops() as `autograder grade` calls it, this process's handlers put back after."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    hook = sys.unraisablehook
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal's foreground job has it
    stopping.listen_for_stops()
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)
    sys.unraisablehook = hook
    stopping._STOPPED_BY.clear()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_is_raised_and_named(listening, signum):
    assert stopping.stopped_by() is None
    stopping.raise_if_stopped()  # not stopped: nothing happens
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signum)
    assert stopping.stopped_by() is signum


def test_a_stop_python_dropped_is_raised_again(listening, capfd):
    def collecting(phase, info):
        if phase == "start":
            gc.callbacks.remove(collecting)
            signal.raise_signal(signal.SIGINT)  # its KeyboardInterrupt raised in here, and dropped

    gc.callbacks.append(collecting)
    try:
        gc.collect()  # goes on: Python dropped the stop
    finally:
        if collecting in gc.callbacks:
            gc.callbacks.remove(collecting)
    assert stopping.stopped_by() is signal.SIGINT
    with pytest.raises(KeyboardInterrupt):
        stopping.raise_if_stopped()
    said = capfd.readouterr().err
    assert "KeyboardInterrupt" not in said and "Traceback" not in said


def test_another_dropped_exception_is_still_printed(listening, capfd):
    class Dropping:
        def __del__(self):
            raise RuntimeError("dropped by Python")

    Dropping()
    assert "RuntimeError: dropped by Python" in capfd.readouterr().err


def test_an_ignored_ctrl_c_stays_ignored():
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    hook = sys.unraisablehook
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # nohup's
        stopping.listen_for_stops()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is stopping._stop
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
        sys.unraisablehook = hook
