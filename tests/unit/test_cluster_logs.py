"""What a grading cluster's servers leave out of their logs (autograder/run/tls.py's filters, put
on Dask's loggers by the preload every local and instructor-started server runs; the run's own
filter of what a stopped gather leaves, autograder/upstream/distributed.py), and which workers
leave Ctrl-C to the run."""

from __future__ import annotations

import logging

import dask
import pytest

from autograder.run.runners import LOCAL_CLUSTER_QUIET
from autograder.run.tls import (
    HEARTBEAT_LOST,
    LOCAL_WORKER_KEY,
    DashboardLineLeftOut,
    LostHeartbeatLeftOut,
    leave_stops_to_the_run,
)
from autograder.upstream.distributed import GatherExitLeftOut


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1, message, None, None)


@pytest.mark.parametrize(
    ("local", "kept"), [(True, False), (False, True)], ids=["grader's cluster", "instructor's worker"]
)
def test_a_lost_heartbeat_is_left_out_only_in_the_graders_own_workers(local, kept):
    with dask.config.set({LOCAL_WORKER_KEY: local}):
        assert LostHeartbeatLeftOut().filter(_record(HEARTBEAT_LOST + ".")) is kept
        # Anything else a worker logs is kept, an error included.
        assert LostHeartbeatLeftOut().filter(_record("Unexpected exception during heartbeat. Closing worker."))


def test_the_local_cluster_marks_its_workers():
    assert LOCAL_CLUSTER_QUIET[LOCAL_WORKER_KEY] is True


def test_the_dashboard_line_is_left_out():
    assert not DashboardLineLeftOut().filter(_record("      dashboard at:  http://127.0.0.1:8787/status"))
    assert DashboardLineLeftOut().filter(_record("Start worker at: tls://127.0.0.1:4000"))


def _unretrieved(error: BaseException) -> logging.LogRecord:
    """asyncio's record of a task whose exception nobody retrieved."""
    try:
        raise error
    except BaseException:
        import sys

        info = sys.exc_info()
    return logging.LogRecord("asyncio", logging.ERROR, __file__, 1, "Task exception was never retrieved", None, info)


def test_only_a_gathers_exit_signal_is_left_out():
    from distributed.client import AllExit

    assert not GatherExitLeftOut().filter(_unretrieved(AllExit()))
    # Any other task's lost exception is still said, and so is a record without one.
    assert GatherExitLeftOut().filter(_unretrieved(RuntimeError("a task failed")))
    assert GatherExitLeftOut().filter(_record("Task was destroyed but it is pending!"))


@pytest.mark.parametrize(
    ("local", "ignored"), [(True, True), (False, False)], ids=["grader's cluster", "instructor's worker"]
)
def test_only_the_graders_own_workers_leave_ctrl_c_to_the_run(local, ignored):
    import signal

    from distributed import Worker

    saved = signal.getsignal(signal.SIGINT)
    # As a worker process starts: Ctrl-C at Python's own handler (this process's may be ignored
    # already, as under a shell's background job or an xdist worker).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    before = signal.default_int_handler
    worker = Worker.__new__(Worker)  # not started: only what it is matters to the rule
    try:
        with dask.config.set({LOCAL_WORKER_KEY: local}):
            leave_stops_to_the_run(object())  # a server that is no worker (the scheduler) keeps Ctrl-C
            assert signal.getsignal(signal.SIGINT) is before
            leave_stops_to_the_run(worker)
            assert (signal.getsignal(signal.SIGINT) is signal.SIG_IGN) is ignored
    finally:
        signal.signal(signal.SIGINT, saved)
