"""What the processes of one sandbox may use together, measured from outside, and the one watcher
loop that looks (`LimitWatcher`): the kernel's (kernels.Watcher) and the judge's helpers'
(helpers.HelperWatcher) say only what one look does.

Without root there is no per-uid process cap (RLIMIT_NPROC counts a uid, and an ordinary grader's
sandboxes all run as its own uid): this count is the cap, with root and without.
"""

from __future__ import annotations

import os
import threading

import psutil

#: Seconds between two looks at a sandbox's processes.
WATCH_INTERVAL = 0.1


class LimitWatcher(threading.Thread):
    """A daemon thread that looks every WATCH_INTERVAL (`look`) until it is stopped or a look says
    the watch is over."""

    def __init__(self, name: str):
        super().__init__(daemon=True, name=name)
        self._halt = threading.Event()  # (not `_stop`: Thread has a method of that name, join calls it)

    def stop(self) -> None:
        self._halt.set()

    def look(self) -> bool:
        """One look at what is watched, acting on what it finds; True when the watch is over."""
        raise NotImplementedError

    def run(self) -> None:
        while not self._halt.wait(WATCH_INTERVAL):
            if self.look():
                return


def rss(pid: int) -> int:
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return 0


def threads(pid: int) -> int:
    try:
        return psutil.Process(pid).num_threads()
    except psutil.Error:
        return 0


def over_limits(pids: list[int], limits) -> str | None:
    """Which of `limits` (sandbox.Limits) these processes pass together, said as the feedback says
    it; None while they pass none."""
    if len(pids) > limits.processes:
        return f"it started more than {limits.processes} processes at once (the process limit)"
    # Threads count too (without root there is no per-uid limit on them: this is their cap).
    if sum(threads(p) for p in pids) > limits.tasks:
        return f"it ran more than {limits.tasks} threads and processes at once (the task limit)"
    if sum(rss(p) for p in pids) > limits.memory_total:
        return f"its processes used more than {limits.memory_total / (1 << 20):g} MiB of memory together (the memory limit)"
    return None


#: Whether this kernel lists each task's children in /proc/<pid>/task/<tid>/children.
PROC_CHILDREN = os.path.exists(f"/proc/self/task/{os.getpid()}/children")


def descendants(pid: int) -> list[int]:
    """Every process below pid (its children, then theirs), as this process sees them.

    Read from the children file of each of their tasks, which names that task's children only:
    psutil's children() reads every process of the machine, and a kernel's watcher asks ten times
    a second. psutil where the kernel keeps no such file."""
    if not PROC_CHILDREN:
        return _descendants_by_psutil(pid)
    found, parents = [], [pid]
    while parents:
        children = []
        for parent in parents:
            try:
                tasks = os.listdir(f"/proc/{parent}/task")
            except OSError:  # gone
                continue
            for task in tasks:
                try:
                    with open(f"/proc/{parent}/task/{task}/children") as listing:
                        children += [int(child) for child in listing.read().split()]
                except (OSError, ValueError):  # the task ended meanwhile
                    pass
        found += children
        parents = children
    return found


def _descendants_by_psutil(pid: int) -> list[int]:
    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []
