"""Inside a sandbox, before any untrusted work: give up root, set the limits, keep a private line out.

Run first by every process the grader starts in a sandbox for untrusted work (the judge's
helper processes, autograder/helpers.py). It needs only the standard library and imports
nothing of the grader: its text is sent ahead of the program that calls it.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal


def confine(uid: int | None, limits: dict):
    """Drop to `uid` (when the grader is root), refuse new privileges, set the resource limits of
    `limits` (sandbox.Limits.as_dict()), make this process the first the out-of-memory killer
    takes; point standard input, output and error at /dev/null and return (reader, writer): the
    private line to the grader, on copies of the original standard input and output."""
    reader = os.fdopen(os.dup(0), "r")
    writer = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # what the untrusted code prints goes nowhere near the line
        os.dup2(null, fd)
    libc = ctypes.CDLL(None, use_errno=True)
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: nothing else of this uid can trace it
    for name, value in (
        ("RLIMIT_AS", limits["memory"]),
        ("RLIMIT_FSIZE", limits["file_size"]),
        ("RLIMIT_NOFILE", limits["open_files"]),
        ("RLIMIT_CORE", 0),
    ):
        resource.setrlimit(getattr(resource, name), (value, value))
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_seconds"], limits["cpu_seconds"] + 5))
    if uid is not None:  # counted per uid: only meaningful for a uid of this process's own
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["tasks"], limits["tasks"]))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("1000")
    except OSError:
        pass
    return reader, writer
