"""What a grading cluster's servers leave out of their logs (autograder/run/tls.py's filters, put
on Dask's loggers by the preload every local and instructor-started server runs)."""

from __future__ import annotations

import logging

import dask
import pytest

from autograder.run.runners import LOCAL_CLUSTER_QUIET
from autograder.run.tls import HEARTBEAT_LOST, LOCAL_WORKER_KEY, DashboardLineLeftOut, LostHeartbeatLeftOut


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
