"""Run a learner's kernel inside bubblewrap, so their code sees only their own submission.

The kernel gets a read-only view of the machine with these folders replaced by empty ones:
the bundle (solutions, tests, samples; its virtual environment is put back read-only), the
grading output, the submissions of the whole class, every scratch course (source notebooks
and gradebooks) and /tmp. What comes back: the learner's autograded folder, writable, as the
kernel's working directory /tmp/submission; read-only, the kernel's own connection file and the
run's compile cache (autograder/compile_cache.py).

The network namespace stays shared because the kernel talks ZMQ over loopback; the kernel's
connection key (one per kernel, in a folder no other kernel can see) keeps other kernels out.
A private PID namespace stops learner code from signalling the grader; interrupts go to the
processes inside the sandbox only.

Without bwrap the kernel runs unsandboxed after one loud warning.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from queue import Empty

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from traitlets import Bool, List, Unicode, default

from .compile_cache import reading_env
from .paths import ROOT
from .zygote import ForkedKernel, zygote_for

_warned = False
SANDBOX_ENV = {
    # Caches that normally go to $HOME (read-only here) go to the private /tmp instead.
    "MPLCONFIGDIR": "/tmp/matplotlib",
    "IPYTHONDIR": "/tmp/ipython",
    # In its own PID namespace the kernel's parent is bwrap's init (pid 1) or the zygote, and
    # ipykernel's parent poller would read a change as "the grader exited": turn the poller off
    # (--die-with-parent does its job).
    "JPY_PARENT_PID": "1",
}
# A learner's records stay in their own folder, wherever the grader itself keeps runs.
SANDBOX_UNSET = ("REMAT_LESSON_RUNS_DIR",)
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
    for name, value in SANDBOX_ENV.items():
        argv += ["--setenv", name, value]
    for name in SANDBOX_UNSET:
        argv += ["--unsetenv", name]
    return argv + ["--", *command]


def sandbox_env(env: dict[str, str]) -> dict[str, str]:
    """env as a sandboxed process sees it (what bwrap_command's --setenv and --unsetenv do)."""
    return {**{k: v for k, v in env.items() if k not in SANDBOX_UNSET}, **SANDBOX_ENV}


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


class PromptKernelClient(AsyncKernelClient):
    """jupyter_client's client, ready as soon as the kernel answers.

    The stock wait_for_ready then waits for 0.2 s of silence on IOPub, and starts over (after up
    to a second) when IOPub was not yet connected: fixed waits paid by every notebook graded.
    Here IOPub is drained of what is already there once the kernel has answered on shell and
    published on IOPub, which is all that wait checks for.
    """

    async def _async_wait_for_ready(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
        asked, answered = float("-inf"), False
        while True:
            if not answered and time.monotonic() - asked > 1.0:
                self.kernel_info()  # again after a second without an answer, as stock does
                asked = time.monotonic()
            if not answered:
                try:
                    msg = await self.shell_channel.get_msg(timeout=0.05)
                except Empty:
                    msg = None
                if msg is not None and msg["msg_type"] == "kernel_info_reply":
                    answered = True
                    self._handle_kernel_info_reply(msg)
            if answered:
                try:
                    await self.iopub_channel.get_msg(timeout=0.2)
                except Empty:
                    answered, asked = False, float("-inf")  # IOPub was not connected yet: ask again
                else:
                    break
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:.0f} seconds")
        while True:  # drain what the kernel published at startup
            try:
                await self.iopub_channel.get_msg(timeout=0.01)
            except Empty:
                break

    wait_for_ready = _async_wait_for_ready


class SandboxedKernelManager(AsyncKernelManager):
    """A kernel manager whose kernel runs under bwrap (see the module docstring)."""

    _sandboxed = False
    _zygote = None

    @default("client_factory")
    def _prompt_client(self):
        return PromptKernelClient

    hide = List(Unicode(), help="Folders the kernel must not see (emptied in its view).").tag(config=True)
    readable = List(Unicode(), help="Extra folders the kernel may read.").tag(config=True)
    fork_kernels = Bool(False, help="Fork each kernel from a warm zygote per sandbox (autograder/zygote.py).").tag(config=True)
    compile_cache = Unicode("", help="A compile cache the kernel loads from, read-only (autograder/compile_cache.py).").tag(config=True)

    async def _async_pre_start_kernel(self, **kw):
        bwrap = bwrap_path()
        self._sandboxed = bwrap is not None
        workdir = kw.get("cwd") or os.getcwd()
        readable = [*self.readable, *([self.compile_cache] if self.compile_cache else [])]
        self._zygote = None
        if self.fork_kernels:
            def wrap(command, folder):
                return bwrap_command(command, workdir, [*readable, folder], list(self.hide), bwrap) if bwrap else command

            # One zygote per sandbox: the same student, folder and views.
            self._zygote = zygote_for((workdir, tuple(self.hide), tuple(readable), bwrap), wrap)
            if not self.connection_file:
                self.connection_file = os.path.join(self._zygote.folder, f"kernel-{uuid.uuid4().hex}.json")
        elif bwrap is not None and not self.connection_file:
            # Its own folder, so the kernel sees its own key and no other kernel's.
            private = tempfile.mkdtemp(prefix="kernel-")
            self.connection_file = os.path.join(private, "connection.json")
        command, kw = await super()._async_pre_start_kernel(**kw)
        if self.compile_cache:
            kw["env"].update(reading_env(Path(self.compile_cache)))
        if bwrap is None or self._zygote is not None:
            return command, kw
        readable.append(os.path.dirname(self.connection_file))
        return bwrap_command(command, workdir, readable, list(self.hide), bwrap), kw

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        if self._zygote is None:
            return await super()._async_launch_kernel(kernel_cmd, **kw)
        split = kernel_cmd.index("-m")
        interpreter, args = kernel_cmd[:split], kernel_cmd[split + 2:]  # around `-m ipykernel_launcher`
        env = sandbox_env(kw["env"]) if self._sandboxed else dict(kw["env"])
        cwd = INSIDE if self._sandboxed else (kw.get("cwd") or os.getcwd())
        # The first kernel of a student waits for the zygote's imports: off the event loop.
        # A fresh sandboxed kernel is pid 2 of its namespace (after bwrap's init), and that number
        # is in its cell files' names, so in tracebacks and feedback: forks take the same names.
        kernel = await asyncio.to_thread(self._zygote.fork, interpreter, args, cwd, env, 2 if self._sandboxed else None)
        provisioner = self.provisioner
        provisioner.process, provisioner.pid, provisioner.pgid = kernel, kernel.pid, kernel.pid
        provisioner.cwd = kw.get("cwd")
        self._reconcile_connection_info(provisioner.connection_info)

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
        if isinstance(process, ForkedKernel):
            # A forked kernel is not under bwrap: it and what it started, nothing else.
            for pid in [process.pid, *_descendants(process.pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGINT)
            return
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
