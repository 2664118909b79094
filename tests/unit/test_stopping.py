"""A stop of `autograder grade` is never lost and never cut short (autograder/run/stopping.py):
Python drops an exception raised inside a garbage collector's callback, as a signal handler's
KeyboardInterrupt can be, and the run finished with exit 0 however it was stopped; a library
that caught the stop logged it with a traceback; a second Ctrl-C cut the cleanup short."""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys

import pytest

from autograder.run import stopping


@pytest.fixture(autouse=True)
def no_stop_left_behind():
    """Each test's stops stay its own: a later test of this process (a runner's) finds none."""
    yield
    stopping._STOPPED_BY.clear()
    stopping._State.dropped = stopping._State.finished = stopping._State.holding = stopping._State.held = False


@pytest.fixture
def listening():
    """listening_for_stops() as `autograder grade` enters it, from a terminal's foreground job."""
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with stopping.listening_for_stops():
            yield
    finally:
        signal.signal(signal.SIGINT, saved)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_is_raised_and_named(listening, signum):
    assert stopping.stopped_by() is None
    stopping.raise_if_stopped()  # not stopped: nothing happens
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signum)
    assert stopping.stopped_by() is signum


def test_a_second_stop_does_not_cut_the_cleanup_short(listening):
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)
    signal.raise_signal(signal.SIGINT)  # the run cleans up: recorded, not raised
    signal.raise_signal(signal.SIGTERM)
    assert stopping.stopped_by() is signal.SIGINT and len(stopping._STOPPED_BY) == 3


def _raised_in_a_gc_callback() -> None:
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


def test_a_stop_python_dropped_is_raised_again(listening, capfd):
    _raised_in_a_gc_callback()
    assert stopping.stopped_by() is signal.SIGINT
    with pytest.raises(KeyboardInterrupt):
        stopping.raise_if_stopped()
    said = capfd.readouterr().err
    assert "KeyboardInterrupt" not in said and "Traceback" not in said
    # The next Ctrl-C is raised: the first never reached the run.
    _raised_in_a_gc_callback()
    with pytest.raises(KeyboardInterrupt):
        signal.raise_signal(signal.SIGINT)


def test_another_dropped_exception_is_still_printed(listening, capfd):
    class Dropping:
        def __del__(self):
            raise RuntimeError("dropped by Python")

    Dropping()
    assert "RuntimeError: dropped by Python" in capfd.readouterr().err


def test_a_stop_a_library_logged_is_left_out():
    import io

    printed = io.StringIO()
    shown = logging.StreamHandler(printed)  # where the root logger prints, as the instructor sees it
    logging.root.addHandler(shown)
    library = logging.getLogger("a.library.pool")

    def closing_a_connection() -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            library.error("Exception closing connection", exc_info=True)

    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with stopping.listening_for_stops():
            closing_a_connection()  # not stopped yet: said
            assert "Exception closing connection" in printed.getvalue()
            printed.truncate(0)
            with pytest.raises(KeyboardInterrupt):
                signal.raise_signal(signal.SIGINT)
            closing_a_connection()  # the stop it caught: left out
            library.error("a real error")  # anything else: said
        assert "Exception closing connection" not in printed.getvalue() and "a real error" in printed.getvalue()
    finally:
        signal.signal(signal.SIGINT, saved)
        logging.root.removeHandler(shown)


def test_a_finished_run_only_records_a_stop(listening):
    stopping.finished()
    signal.raise_signal(signal.SIGTERM)  # its results are written: it prints them, and exits as it would
    assert stopping.stopped_by() is signal.SIGTERM
    stopping.raise_if_stopped()


def test_after_the_run_the_process_is_as_it_was():
    saved = {signum: signal.getsignal(signum) for signum in stopping.STOPS}
    hook, filters = sys.unraisablehook, [list(h.filters) for h in stopping._handlers()]
    with stopping.listening_for_stops():
        pass
    assert {signum: signal.getsignal(signum) for signum in stopping.STOPS} == saved
    assert sys.unraisablehook is hook and [list(h.filters) for h in stopping._handlers()] == filters


@pytest.fixture
def process_command(monkeypatch):
    """This process runs its command as its own (as_the_process_command), for one test."""
    monkeypatch.setattr(stopping._State, "process_command", True)


@pytest.fixture
def handlers_put_back():
    saved = {signum: signal.getsignal(signum) for signum in stopping.STOPS}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for signum, before in saved.items():
            signal.signal(signum, before)


def test_a_command_that_was_stopped_ignores_a_later_stop_until_it_exits(process_command, handlers_put_back):
    """After a stop, a command's exit status is the run's (130): a later Ctrl-C, once the block has
    ended and before the process exits, is ignored (raised, it would make Python exit by the
    signal; handled by a Python function, Python's finalization would put it back to its default
    first). A run that was not stopped leaves the handlers as they were."""
    with stopping.listening_for_stops():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt), stopping.listening_for_stops():
        signal.raise_signal(signal.SIGINT)
    assert stopping.kept_until_exit()
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    signal.raise_signal(signal.SIGINT)  # as the process exits: nothing happens
    assert stopping.stopped_by() is signal.SIGINT


def _stopped_run(args, rest) -> int:
    """grade.main's run, stopped by SIGTERM as it grades (as a scheduler's kill would stop it)."""
    try:
        signal.raise_signal(signal.SIGTERM)
    except KeyboardInterrupt:
        return 143
    return 0


def test_a_command_inside_another_program_leaves_its_process_as_it_was_after_a_stop(
    handlers_put_back, monkeypatch, tmp_path
):
    """`grade.main([...])` called by another program (not the process's own command): after its
    run was stopped, the caller's handlers are back and nothing of the run's stays."""
    import faulthandler

    from autograder.course.paths import ROOT
    from autograder.run import grade

    monkeypatch.setattr(grade, "_graded", _stopped_run)
    saved = {signum: signal.getsignal(signum) for signum in stopping.STOPS}
    faulthandler.register(signal.SIGUSR1, all_threads=False)  # the caller's own
    assert grade.main([str(tmp_path), "--out", str(tmp_path / "out"), "--bundle", str(ROOT)]) == 143
    assert stopping.stopped_by() is signal.SIGTERM and not stopping.kept_until_exit()
    assert {signum: signal.getsignal(signum) for signum in stopping.STOPS} == saved
    assert faulthandler.unregister(signal.SIGUSR1) is True  # the caller's, still there


def test_a_program_whose_own_command_ran_calls_main_as_another_program_would(handlers_put_back, monkeypatch, tmp_path):
    """The process's own command, once returned, leaves no mark: a program that ran the console
    script's main() and then calls grade.main([...]) gets its handlers back after a stop."""
    from autograder.course.paths import ROOT
    from autograder.run import grade

    assert stopping.as_the_process_command(lambda: 0) == 0
    assert not stopping.is_the_process_command()
    monkeypatch.setattr(grade, "_graded", _stopped_run)
    saved = {signum: signal.getsignal(signum) for signum in stopping.STOPS}
    assert grade.main([str(tmp_path), "--out", str(tmp_path / "out"), "--bundle", str(ROOT)]) == 143
    assert {signum: signal.getsignal(signum) for signum in stopping.STOPS} == saved


def test_a_stopped_process_command_keeps_what_it_set_up_until_it_exits(
    process_command, handlers_put_back, monkeypatch, tmp_path
):
    import faulthandler

    from autograder.course.paths import ROOT
    from autograder.run import grade

    monkeypatch.setattr(grade, "_graded", _stopped_run)
    assert grade.main([str(tmp_path), "--out", str(tmp_path / "out"), "--bundle", str(ROOT)]) == 143
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    assert faulthandler.unregister(signal.SIGUSR1) is True


def test_an_ignored_ctrl_c_stays_ignored():
    saved = signal.signal(signal.SIGINT, signal.SIG_IGN)  # nohup's
    try:
        with stopping.listening_for_stops():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is stopping._stop
    finally:
        signal.signal(signal.SIGINT, saved)


def test_a_stop_held_back_comes_after_the_block(listening):
    reached = []
    with pytest.raises(KeyboardInterrupt), stopping.stops_held():
        os.kill(os.getpid(), signal.SIGINT)  # as a terminal's Ctrl-C comes: held back here
        reached.append("the block ran to its end")
    assert reached and stopping.stopped_by() is signal.SIGINT
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


#: A command's process: stopped by SIGTERM (or not), a thread that is no daemon left sleeping,
#: run as the process's own command (as_the_process_command), as grade's __main__ runs main.
HELD_EXIT = """
import signal, sys, threading, time
from autograder.run import stopping
stopping.EXIT_WITHIN_S = 1.0

def command():
    with stopping.listening_for_stops():
        if sys.argv[1] == "stopped":
            try:
                signal.raise_signal(signal.SIGTERM)
            except KeyboardInterrupt:
                pass
    if sys.argv[3] == "thread":
        threading.Thread(target=time.sleep, args=(float(sys.argv[2]),), name="left-running").start()
    elif sys.argv[3] == "atexit":  # a library's exit handler closing what it left open (Dask's clusters)
        import atexit
        atexit.register(time.sleep, float(sys.argv[2]))
    else:  # an executor's thread (an event loop's, nbclient's): Python joins these first, then the rest
        import concurrent.futures
        concurrent.futures.ThreadPoolExecutor(thread_name_prefix="left-running").submit(time.sleep, float(sys.argv[2]))
    return 143 if sys.argv[1] == "stopped" else 0

sys.exit(stopping.as_the_process_command(command))
"""


@pytest.mark.parametrize("left", ["thread", "executor", "atexit"])
@pytest.mark.parametrize(
    ("how", "sleeps", "code", "ends_within"),
    [("stopped", 120, 143, 30), ("finished", 2, 0, 30)],
    ids=["stopped", "not-stopped"],
)
def test_a_stopped_commands_exit_waits_for_no_thread_left_running(how, sleeps, code, ends_within, left):
    """Python's exit joins every thread that is no daemon: after a stop, one a library left
    running (up to its deadline of minutes) no longer holds the exit past EXIT_WITHIN_S; the
    process ends with the command's code and says what it left. Not stopped, the exit is Python's own."""
    import subprocess
    import time

    from autograder.course.paths import ROOT

    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", HELD_EXIT, how, str(sleeps), left],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=ends_within,
    )
    took = time.monotonic() - began
    assert done.returncode == code, done.stderr
    if how == "stopped":
        held = (
            "Python's exit handlers (no thread left running)"
            if left == "atexit"
            else "a thread left running (left-running"
        )
        assert f"the exit waited 1 s for {held}" in done.stderr
        assert took < sleeps
    else:
        assert done.stderr == "" and took >= sleeps  # the thread was joined, as Python does


def test_the_instructors_guide_states_the_exit_bound():
    from autograder.course.paths import ROOT

    guide = " ".join((ROOT / "docs" / "instructors.md").read_text().split())
    assert f'"the exit waited {stopping.EXIT_WITHIN_S:.0f} s for a thread left running (...)"' in guide
    assert f"ends within about {stopping.EXIT_WITHIN_S:.0f} s" in guide
