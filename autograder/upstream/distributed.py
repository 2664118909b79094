"""Dask's distributed past its public API: a client or local cluster whose event-loop thread did
not start in time is made again.

distributed starts the thread that runs a synchronous Client's or LocalCluster's event loop,
waits a fixed 10 s for it, then fails with a bare AssertionError (`LoopRunner._start_unlocked`).
On a busy two-core machine that wait has run out with nothing wrong but the load; what was being
made was not made (nothing to clean up), and making it again works.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: The function of distributed whose assert says "the loop thread did not start in time".
_LOOP_START = "_start_unlocked"


def loop_did_not_start(error: BaseException) -> bool:
    """Whether `error` is distributed's failed wait for its event-loop thread, not another assert."""
    frames = traceback.extract_tb(error.__traceback__)
    return isinstance(error, AssertionError) and bool(frames) and frames[-1].name == _LOOP_START


def made_despite_slow_loop(make: Callable[[], T], attempts: int = 3, pause: float = 1.0) -> T:
    """`make()` (a Client, a LocalCluster), made again up to `attempts` times in all when its
    event-loop thread did not start in time; any other error is raised at once."""
    for attempt in range(1, attempts + 1):
        try:
            return make()
        except AssertionError as error:
            if attempt == attempts or not loop_did_not_start(error):
                raise
        time.sleep(pause)
    raise AssertionError("unreachable")  # the loop returns or raises
