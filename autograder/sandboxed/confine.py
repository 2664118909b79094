"""Inside a sandbox, before any untrusted work: take the private line, give up root, set the limits.

Run first by every process the grader starts in a sandbox (the kernel host,
autograder/sandboxed/kernel_host_program.py; the judge's helper processes, autograder/kernel/helpers.py). It
needs only the standard library and imports nothing of the grader: its text is sent ahead of the
program that calls it.

Such a process is the first of its sandbox (its PID 1: no process of bubblewrap's stays inside)
and is started with /dev/null on its standard streams. Its program came on a descriptor that is
closed by now (autograder/kernel/control_line.py), and the grader's line is two more descriptors
(`config["line"]`) that only this process holds: whatever it starts never inherits them, and its
memory, descriptors and environment are closed to every other process (not dumpable).

Every message on the line is one JSON object per line, tied to its request: the grader's request
carries a nonce, the answer carries the same nonce (`reply`), and the process answers nothing it
was not asked.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal

PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38


def private_line(config: dict):
    """(reader, writer): the private line to the grader, on the two descriptors it passed (closed
    on exec: nothing this process runs inherits them); standard input, output and error point at
    /dev/null (what untrusted code prints goes nowhere near the line)."""
    requests, answers = config["line"]
    for fd in (requests, answers):
        os.set_inheritable(fd, False)
    _GRADER_LINE[:] = [requests]
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    return os.fdopen(requests, "r"), os.fdopen(answers, "w")


#: The descriptor the grader's requests come on, once private_line has taken it.
_GRADER_LINE: list[int] = []


def grader_gone() -> bool:
    """Whether the grader's end of the private line is closed: the grader ended, or was stopped or
    killed. A process that waits for learner code (a cell's worker, a fork) asks this as it waits,
    and ends when it is so: where the grader is root, nothing else ends the sandbox (its first
    process has a uid of its own, which bubblewrap's --die-with-parent may not signal)."""
    import select

    if not _GRADER_LINE:
        return False
    poller = select.poll()
    poller.register(_GRADER_LINE[0], 0)  # hang-up and errors are reported whatever is asked for
    return any(events & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, events in poller.poll(0))


def hide_command_line() -> None:
    """Write zeros over this process's command line: another process reading its
    /proc/PID/cmdline (readable by anyone) finds nothing there. Python keeps its own copy."""
    try:
        with open("/proc/self/stat") as handle:
            fields = handle.read().rpartition(")")[2].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start and arg_end (fields 48 and 49)
    except (OSError, ValueError, IndexError):
        return
    if 0 < start < end:
        ctypes.memset(start, 0, end - start)


def drop_privileges(uid: int | None) -> None:
    """Become `uid` (when the grader is root) with no group, no capability and no way to gain
    one; not dumpable, so nothing else of this uid can trace this process, read its memory,
    descriptors or environment, or open its /proc files (a fork keeps that)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def reap_orphans() -> None:
    """As the first process of its sandbox, this one inherits every process whose parent ended:
    they are reaped as they end (a process of this one's own that it waits for is then found
    ended by `child_ended`). Signals a process of the sandbox sends the first one are ignored
    unless it handles them: SIGINT goes back to that default, so no process of the sandbox can
    end this one by interrupting it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)

    def reap(signum, frame):
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    signal.signal(signal.SIGCHLD, reap)


def child_ended(pid: int) -> bool:
    """Whether a child of this process has ended (and is reaped)."""
    try:
        return os.waitpid(pid, os.WNOHANG)[0] != 0
    except ChildProcessError:  # reaped already (reap_orphans)
        return True


def end_the_others() -> None:
    """As the first process of its sandbox: end every other process in it (what learner code left
    running) and wait until they are gone. Outside a sandbox of its own (no first process), nothing."""
    import time

    if os.getpid() != 1:
        return
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:  # nobody else
        return
    for _ in range(500):
        if [entry for entry in os.listdir("/proc") if entry.isdigit() and entry != "1"] == []:
            return
        time.sleep(0.01)


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


def confine(config: dict):
    """All of the above, in order, for a helper process; the private line (reader, writer)."""
    hide_command_line()
    line = private_line(config)
    drop_privileges(config["uid"])
    set_limits(config["limits"], config["uid"])
    reap_orphans()
    return line


def requests(reader):
    """Each of the grader's requests: (its nonce, the request). A line that is not a request of
    the grader's form ends the conversation (the grader wrote it, so it is never a learner's)."""
    for line in reader:
        request = json.loads(line)
        if not isinstance(request, dict) or not isinstance(request.get("nonce"), str):
            raise SystemExit("a request without its nonce")
        yield request.pop("nonce"), request


def reply(writer, nonce: str, response: dict) -> None:
    """One answer line, tied to its request by the request's nonce."""
    writer.write(json.dumps({"nonce": nonce, **response}, allow_nan=True, separators=(",", ":")) + "\n")
    writer.flush()
