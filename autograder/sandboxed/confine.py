"""Inside a sandbox, before any untrusted work: keep a private line out, give up root, set the limits.

Run first by every process the grader starts in a sandbox (the kernel host,
autograder/sandboxed/kernel_host_program.py; the judge's helper processes, autograder/kernel/helpers.py). It
needs only the standard library and imports nothing of the grader: its text is sent ahead of the
program that calls it.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal

PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38


def private_line():
    """Point standard input, output and error at /dev/null; return (reader, writer): the private
    line to the grader, on copies of the original standard input and output."""
    reader = os.fdopen(os.dup(0), "r")
    writer = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # what the untrusted code prints goes nowhere near the line
        os.dup2(null, fd)
    return reader, writer


def drop_privileges(uid: int | None) -> None:
    """Become `uid` (when the grader is root) with no group, no capability and no way to gain
    one; not dumpable, so nothing else of this uid can trace this process or read its memory."""
    libc = ctypes.CDLL(None, use_errno=True)
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def set_limits(limits: dict, uid: int | None) -> None:
    """The resource limits of `limits` (sandbox.Limits.as_dict()) on this process and what it
    starts; and this process first in line for the out-of-memory killer."""
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
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, it does not kill
    try:
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("1000")  # short of memory, the host ends this process, not the grader
    except OSError:
        pass


def confine(uid: int | None, limits: dict):
    """All of the above, in order; the private line (reader, writer)."""
    line = private_line()
    drop_privileges(uid)
    set_limits(limits, uid)
    return line
