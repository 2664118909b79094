"""Dask's distributed past its public API: a client or local cluster whose event-loop thread did
not start in time is made again; the tasks a stopped `Client.gather` leaves behind are not logged.

distributed starts the thread that runs a synchronous Client's or LocalCluster's event loop,
waits a fixed 10 s for it, then fails with a bare AssertionError (`LoopRunner._start_unlocked`'s
`assert loop is not None`). On a busy two-core machine that wait has run out with nothing wrong
but the load. No worker process was started yet (a cluster starts them on its loop), and making
it again works. What a failed attempt changed of Dask's configuration (a Client sets itself as
the default scheduler first) is put back; its loop thread, started late, stays, idle.

Dask's configuration is one shared dict that a Client changes back as it closes, also when the
garbage collector closes a client that failed to connect: in the middle of copying that dict, in
the same thread. So the copy is taken with the collector paused, and again if another thread
changed the dict while it was copied.
"""

from __future__ import annotations

import copy
import gc
import logging
import time
import traceback
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Where distributed asserts that the loop thread started: the function, and its assert's text.
_LOOP_START, _LOOP_ASSERT = "_start_unlocked", "loop is not None"


def loop_did_not_start(error: BaseException) -> bool:
    """Whether `error` is distributed's failed wait for its event-loop thread, not another assert."""
    frames = traceback.extract_tb(error.__traceback__)
    return (
        isinstance(error, AssertionError)
        and bool(frames)
        and frames[-1].name == _LOOP_START
        and _LOOP_ASSERT in (frames[-1].line or "")
    )


def config_snapshot(config: dict, tries: int = 10) -> dict:
    """A deep copy of `config`, a dict that finalizers and other threads may change as it is copied."""
    collecting = gc.isenabled()
    gc.disable()  # a client's finalizer, run by a collection the copy triggers, changes the dict
    try:
        for attempt in range(1, tries + 1):
            try:
                return copy.deepcopy(config)
            except RuntimeError:  # "changed size during iteration": another thread wrote to it
                if attempt == tries:
                    raise
        raise AssertionError("unreachable")  # the loop returns or raises
    finally:
        if collecting:
            gc.enable()


def made_despite_slow_loop(make: Callable[[], T], attempts: int = 3, pause: float = 1.0) -> T:
    """`make()` (a Client, a LocalCluster), tried up to `attempts` times in all while its event-loop
    thread did not start in time; any other error is raised at once. Dask's configuration is as it
    was before each failed attempt."""
    import dask

    for attempt in range(1, attempts + 1):
        before = config_snapshot(dask.config.config)
        try:
            return make()
        except AssertionError as error:
            dask.config.config.clear()
            dask.config.config.update(before)
            if attempt == attempts or not loop_did_not_start(error):
                raise
        time.sleep(pause)
    raise AssertionError("unreachable")  # the loop returns or raises


class GatherExitLeftOut(logging.Filter):
    """A synchronous `Client.gather` (`_gather`) waits on its futures in tasks of its own and
    leaves the rest behind with AllExit, distributed's signal to stop waiting, once one of them
    fails or its client closes. A run stopped while it gathered (Ctrl-C during the reference
    run) then closes its client, and asyncio logs each task left behind as "Task exception was
    never retrieved", with a traceback, as the run says it stopped. AllExit is never an error of
    the run: these records are left out, every other one kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        from distributed.client import AllExit

        raised = record.exc_info[1] if record.exc_info else None
        return not isinstance(raised, AllExit)


def leave_out_gather_exits() -> None:
    logger = logging.getLogger("asyncio")
    if not any(isinstance(f, GatherExitLeftOut) for f in logger.filters):
        logger.addFilter(GatherExitLeftOut())
