"""Run a learner's kernel inside bubblewrap, so their code sees only their own submission.

The kernel gets a read-only view of the machine with these folders replaced by empty ones:
the bundle (solutions, tests, samples; its virtual environment is put back read-only), the
grading output, the submissions of the whole class, every scratch course (source notebooks
and gradebooks) and /tmp. Two folders come back: the learner's autograded folder, writable,
as the kernel's working directory /tmp/submission, and the kernel's own connection file,
read-only.

The network namespace stays shared because the kernel talks ZMQ over loopback; the kernel's
connection key (one per kernel, in a folder no other kernel can see) keeps other kernels out.
A private PID namespace stops learner code from signalling the grader; interrupts go to the
processes inside the sandbox only.

Without bwrap the kernel runs unsandboxed after one loud warning.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import warnings
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from traitlets import List, Unicode

from .paths import ROOT

_warned = False
#: Where the kernel sees its working directory (inside its private /tmp).
INSIDE = "/tmp/submission"
#: Process groups of the kernels running now, so a watchdog can end a submission that hangs.
LIVE_KERNELS: set[int] = set()


def kill_live_kernels() -> int:
    """SIGKILL every kernel this process started and has not shut down; return how many."""
    killed = 0
    for group in list(LIVE_KERNELS):
        try:
            os.killpg(group, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
        LIVE_KERNELS.discard(group)
    return killed


def bwrap_path() -> str | None:
    """The bubblewrap binary, or None (with one warning per process) when it is not installed."""
    global _warned
    found = shutil.which("bwrap")
    if found is None and not _warned:
        _warned = True
        message = (
            "bubblewrap (bwrap) is not installed: learner code runs UNSANDBOXED and can read the "
            "source notebooks, the gradebook and other submissions. Install it with "
            "`apt-get install -y bubblewrap`."
        )
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        print(f"WARNING: {message}", file=sys.stderr, flush=True)
    return found


def _existing(paths) -> list[str]:
    seen, kept = set(), []
    for path in paths:
        if not path:
            continue
        resolved = str(Path(path).resolve())
        if resolved not in seen and os.path.isdir(resolved):
            seen.add(resolved)
            kept.append(resolved)
    return kept


def bwrap_command(command: list[str], workdir: str, readable: list[str], hide: list[str], bwrap: str) -> list[str]:
    """command wrapped in bwrap: / read-only, `hide` emptied, workdir writable, `readable` read-only."""
    hidden = _existing([*hide, ROOT, tempfile.gettempdir()])
    # The interpreter may live inside a hidden folder (the bundle's .venv): put it back read-only.
    restore = [p for p in _existing([sys.prefix]) if any(p == h or p.startswith(h + os.sep) for h in hidden)]
    argv = [bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--ro-bind", "/", "/"]
    for folder in hidden:
        argv += ["--tmpfs", folder]
    for folder in restore:
        argv += ["--ro-bind", folder, folder]
    for folder in _existing(readable):
        argv += ["--ro-bind", folder, folder]
    # The learner's folder appears at one fixed path, whatever scratch folder holds it, so paths
    # in outputs (and in feedback) are the same on every run and say nothing about the grader.
    argv += ["--bind", str(Path(workdir).resolve()), INSIDE, "--dev", "/dev", "--proc", "/proc", "--chdir", INSIDE]
    # Caches that normally go to $HOME (read-only here) go to the private /tmp instead.
    argv += ["--setenv", "MPLCONFIGDIR", "/tmp/matplotlib", "--setenv", "IPYTHONDIR", "/tmp/ipython"]
    # In its own PID namespace the kernel's parent is bwrap's init (pid 1), which ipykernel's
    # parent poller reads as "the grader exited": turn the poller off (--die-with-parent does its job).
    argv += ["--setenv", "JPY_PARENT_PID", "1"]
    # A learner's records stay in their own folder, wherever the grader itself keeps runs.
    argv += ["--unsetenv", "REMAT_LESSON_RUNS_DIR"]
    return argv + ["--", *command]


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(parent, []).append(int(entry))
    return tree


def _descendants(pid: int) -> list[int]:
    tree, found, todo = _children(), [], [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _command_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as handle:
            return handle.read().strip()
    except OSError:
        return ""


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel runs under bwrap (see the module docstring)."""

    _sandboxed = False

    hide = List(Unicode(), help="Folders the kernel must not see (emptied in its view).").tag(config=True)
    readable = List(Unicode(), help="Extra folders the kernel may read.").tag(config=True)

    async def _async_pre_start_kernel(self, **kw):
        bwrap = bwrap_path()
        private = None
        if bwrap is not None and not self.connection_file:
            # Its own folder, so the kernel sees its own key and no other kernel's.
            private = tempfile.mkdtemp(prefix="kernel-")
            self.connection_file = os.path.join(private, "connection.json")
        command, kw = await super()._async_pre_start_kernel(**kw)
        self._sandboxed = bwrap is not None
        if bwrap is None:
            return command, kw
        workdir = kw.get("cwd") or os.getcwd()
        readable = [*self.readable, os.path.dirname(self.connection_file)]
        return bwrap_command(command, workdir, readable, list(self.hide), bwrap), kw

    async def _async_post_start_kernel(self, **kw) -> None:
        await super()._async_post_start_kernel(**kw)
        process = getattr(self.provisioner, "process", None)
        if process is not None:
            self._group = os.getpgid(process.pid)
            LIVE_KERNELS.add(self._group)

    async def _async_interrupt_kernel(self) -> None:
        # jupyter_client interrupts by signalling the whole process group, bwrap included, and
        # bwrap dies of SIGINT (taking the kernel with it). Signal the processes inside only.
        process = getattr(self.provisioner, "process", None)
        if process is None or not self._sandboxed:
            return await super()._async_interrupt_kernel()
        for pid in _descendants(process.pid):
            if _command_name(pid) != "bwrap":
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGINT)

    interrupt_kernel = _async_interrupt_kernel  # AsyncKernelManager binds the name to its own

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        folder = os.path.dirname(self.connection_file) if self.connection_file else None
        await super()._async_cleanup_resources(restart=restart)
        LIVE_KERNELS.discard(getattr(self, "_group", None))
        if not restart and folder and os.path.basename(folder).startswith("kernel-"):
            shutil.rmtree(folder, ignore_errors=True)
