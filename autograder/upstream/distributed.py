"""Dask's distributed past its public API: a client or local cluster whose event-loop thread did
not start in time is made again.

distributed starts the thread that runs a synchronous Client's or LocalCluster's event loop,
waits a fixed 10 s for it, then fails with a bare AssertionError (`LoopRunner._start_unlocked`'s
`assert loop is not None`). On a busy two-core machine that wait has run out with nothing wrong
but the load. No worker process was started yet (a cluster starts them on its loop), and making
it again works. What a failed attempt changed of Dask's configuration (a Client sets itself as
the default scheduler first) is put back; its loop thread, started late, stays, idle.
"""

from __future__ import annotations

import copy
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


def made_despite_slow_loop(make: Callable[[], T], attempts: int = 3, pause: float = 1.0) -> T:
    """`make()` (a Client, a LocalCluster), tried up to `attempts` times in all while its event-loop
    thread did not start in time; any other error is raised at once. Dask's configuration is as it
    was before each failed attempt."""
    import dask

    for attempt in range(1, attempts + 1):
        before = copy.deepcopy(dask.config.config)
        try:
            return make()
        except AssertionError as error:
            dask.config.config.clear()
            dask.config.config.update(before)
            if attempt == attempts or not loop_did_not_start(error):
                raise
        time.sleep(pause)
    raise AssertionError("unreachable")  # the loop returns or raises
