"""What the processes of one sandbox may use together, measured from outside: the check the
grader's watchers share (the kernel's, kernels.Watcher; the judge's helpers', helpers.HelperWatcher).

Without root there is no per-uid process cap (RLIMIT_NPROC counts a uid, and an ordinary grader's
sandboxes all run as its own uid): this count is the cap, with root and without.
"""

from __future__ import annotations

import psutil

#: Seconds between two looks at a sandbox's processes.
WATCH_INTERVAL = 0.1


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
