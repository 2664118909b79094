"""The one watcher loop (process_limits.LimitWatcher) the kernel's and the helpers' watchers run."""

from __future__ import annotations

import threading

import pytest

from autograder.kernel import helpers, kernels, process_limits
from autograder.kernel.process_limits import LimitWatcher, over_limits
from autograder.kernel.sandbox import Limits


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


@pytest.mark.parametrize(
    ("count", "threads_each", "mib_each", "named"),
    [
        (4, 1, 100, None),  # under every limit
        (33, 1, 1, "the process limit"),
        (33, 20, 1024, "the process limit"),  # past all three: the count is named first
        (20, 30, 1, "the task limit"),
        (20, 30, 1024, "the task limit"),
        (5, 1, 500, "the memory limit"),  # 2,500 MiB past 2,048
        (4, 1, 512, None),  # 2,048 MiB is the limit itself, not past it
    ],
)
def test_over_limits_names_the_first_limit_passed(monkeypatch, count, threads_each, mib_each, named):
    """One look names one limit, in a fixed order (processes, tasks, memory), and the size it says
    is the run's own: a fork bomb whose copies also pass the memory total is named for its count."""
    monkeypatch.setattr(process_limits, "threads", lambda pid: threads_each)
    monkeypatch.setattr(process_limits, "rss", lambda pid: mib_each << 20)
    limits = Limits(processes=32, tasks=512, memory_total=2 << 30)
    said = over_limits(list(range(count)), limits)
    if named is None:
        assert said is None
    else:
        assert said is not None and said.endswith(f"({named})"), said
    if named == "the memory limit":
        assert "more than 2048 MiB" in said
