"""The one watcher loop (process_limits.LimitWatcher) the kernel's and the helpers' watchers run."""

from __future__ import annotations

import threading

from autograder.kernel import helpers, kernels
from autograder.kernel.process_limits import LimitWatcher


class CountingWatcher(LimitWatcher):
    def __init__(self, over_after: int | None):
        super().__init__(name="counting")
        self.looks, self.over_after, self.looked = 0, over_after, threading.Event()

    def look(self) -> bool:
        self.looks += 1
        self.looked.set()
        return self.over_after is not None and self.looks >= self.over_after


def test_watch_ends_when_a_look_says_so():
    watcher = CountingWatcher(over_after=3)
    watcher.start()
    watcher.join(timeout=30)  # join works: the stop event does not shadow Thread's own method
    assert not watcher.is_alive() and watcher.looks == 3


def test_watch_ends_when_stopped():
    watcher = CountingWatcher(over_after=None)
    watcher.start()
    assert watcher.looked.wait(30)
    watcher.stop()
    watcher.join(timeout=30)
    assert not watcher.is_alive() and watcher.daemon


def test_both_watchers_are_the_one_loop():
    """The kernel's and the helpers' watchers say only what a look does; the loop is LimitWatcher's."""
    for watcher in (kernels.Watcher, helpers.HelperWatcher):
        assert issubclass(watcher, LimitWatcher)
        assert "run" not in vars(watcher) and "look" in vars(watcher)
