"""Kernels for grading: each one in a student's sandbox, over Unix sockets, watched for its limits.

`SandboxedKernelManager` is the kernel manager nbgrader's Execute uses while grading (see
execute.SandboxedExecute). It asks the student's `SandboxSession`, handed to it as its
`sandbox_session`, for a kernel instead of starting a process itself:

- the kernel runs in the session's sandbox (autograder/kernel/sandbox.py), in a fresh workspace, with
  its limits set (autograder/kernel/kernel_host.py);
- it talks to the grader over Unix sockets (jupyter's `ipc` transport) in a folder bound into
  the sandbox: the kernel has no network, and nothing else reaches it;
- a watcher thread ends it when its processes, their memory or the socket folder pass their
  limits, and says which (`limit_hit`); the cell then reports that limit.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import zmq
from traitlets import default

from autograder.kernel.adapter import GENERIC, Adapter
from autograder.kernel.control_line import BOOTSTRAP, PROGRAM_PLACEHOLDER
from autograder.kernel.kernel_host import KernelHost, KernelProcess, alive
from autograder.kernel.process_limits import LimitWatcher, descendants, over_limits
from autograder.kernel.sandbox import (
    ASSIGNMENT_MOUNT,
    CACHE,
    CONNECTION,
    SCRATCH,
    WORKDIR,
    Sandbox,
    kernel_env,
    kernel_uid,
    mounts_in_scratch,
)
from autograder.sandboxed.kernel_host_program import SCRATCH_MARK
from autograder.upstream.jupyter_client import KernelManagerSteps, PromptKernelClient

#: The largest message, in bytes, the grader accepts from a kernel (a bigger one drops the connection).
MAX_KERNEL_MESSAGE = 64 << 20
#: The mode every graded kernel runs in: nbgrader's (a notebook may do less ungraded work in it).
GRADING_ENV = {"NBGRADER_EXECUTION": "autograde"}
#: The longest path a Unix socket may have: sun_path holds 108 bytes, the last one a NUL.
SOCKET_PATH_MAX = 107
#: jupyter names a kernel's sockets <prefix>-<port> with ports counted from 1: room for "/kernel-99999".
SOCKET_NAME_ROOM = len("/kernel-99999")


#: A run's tag for the socket folders its processes make in /tmp (set by a local cluster for its
#: workers, runners.py): the run removes those of workers it ended mid-task.
SOCKETS_TAG_VARIABLE = "AUTOGRADER_SOCKETS_TAG"


def socket_folders_prefix(tag: str = "") -> str:
    """The name /tmp's socket folders begin with (those of a run's, with its tag)."""
    return f"autograder-sockets-{tag}-" if tag else "autograder-sockets-"


def connection_folder(folder: Path) -> Path:
    """A new folder for a session's kernel sockets: `folder`/connection, or, where that path is too
    long for a Unix socket (an instructor's deep TMPDIR), a private folder of /tmp's."""
    near = Path(folder) / "connection"
    if len(os.fsencode(near)) + SOCKET_NAME_ROOM <= SOCKET_PATH_MAX:
        near.mkdir(parents=True, exist_ok=True)
        return near
    tag = os.environ.get(SOCKETS_TAG_VARIABLE, "")
    short = Path(tempfile.mkdtemp(prefix=socket_folders_prefix(tag if tag.isalnum() else ""), dir="/tmp"))
    if len(os.fsencode(short)) + SOCKET_NAME_ROOM > SOCKET_PATH_MAX:  # (only a strange /tmp gets here)
        shutil.rmtree(short, ignore_errors=True)
        raise OSError(f"no folder short enough for a kernel's Unix sockets: {near}")
    return short


class SandboxSession:
    """One student's sandbox: every notebook's kernel of that student runs here, one at a time.

    folder: a private folder of the grader's for this session (the socket folder goes there).
    assignment: the shipped files each notebook's workspace starts from (never a notebook).
    cache: a compile cache the kernels read (written only when cache_writable: the reference run).
    fork: one warm kernel host per session, a fork per notebook (else a fresh sandbox per notebook).
    env: variables added to every kernel's environment (NBGRADER_EXECUTION, the compile cache's).
    adapter: what the assignment's environment adds to the core (its preloads, variables, helpers).
    """

    def __init__(
        self,
        sandbox: Sandbox,
        folder: Path,
        assignment: Path,
        *,
        cache: Path | None = None,
        cache_writable: bool = False,
        fork: bool = True,
        env: dict[str, str] | None = None,
        adapter: Adapter = GENERIC,
    ):
        if sandbox.kernel_uid is not None:
            sandbox = dataclasses.replace(sandbox, kernel_uid=kernel_uid())  # a uid of this session's own
        self.sandbox, self.folder, self.assignment = sandbox, Path(folder), Path(assignment)
        self.cache, self.cache_writable, self.fork = cache, cache_writable, fork
        self.extra_env, self.adapter = dict(env or {}), adapter
        self.folder.mkdir(parents=True, exist_ok=True)
        self.connection = connection_folder(self.folder)
        if sandbox.kernel_uid is not None:
            # The kernel's own uid writes its sockets (and the cache, in the reference run).
            for folder in [self.connection, *([cache] if cache is not None and cache_writable else [])]:
                os.chown(folder, sandbox.kernel_uid, sandbox.kernel_uid)
        # Unsandboxed, the "/tmp" of a kernel is a folder of ours; outputs are rewritten to /tmp.
        self.scratch = str(self.folder / "scratch") if sandbox.unsafe else SCRATCH
        self.host: KernelHost | None = None
        self.infrastructure: set[int] = set()
        self._judge_helpers = None
        self._host_for: list[str] | None = None  # the interpreter a host started ahead of its kernel runs

    # Paths as the kernel sees them.
    def _inside(self, path: str) -> str:
        return path if not self.sandbox.unsafe else path.replace(SCRATCH, self.scratch, 1)

    @property
    def socket_prefix_inside(self) -> str:
        return f"{CONNECTION if not self.sandbox.unsafe else self.connection}/kernel"

    @property
    def socket_prefix_outside(self) -> str:
        return f"{self.connection}/kernel"

    def cache_inside(self) -> str | None:
        """The compile cache's folder as the kernel sees it (None: it has none)."""
        if self.cache is None:
            return None
        return CACHE if not self.sandbox.unsafe else str(self.cache)

    def kernel_environment(self, inherited: Mapping[str, str]) -> dict[str, str]:
        return kernel_env(
            inherited,
            scratch=self.scratch,
            extra=self.extra_env,
            inherit=self.adapter.inherited_env,
            withhold=self._withheld,
        )

    @property
    def _withheld(self) -> tuple[str, ...]:
        cache = self.adapter.compiler_cache
        return cache.withheld if cache is not None else ()

    def _host(self, interpreter: list[str], env: dict[str, str], warm: bool) -> KernelHost:
        config = {
            "uid": self.sandbox.kernel_uid,
            "own_pid_namespace": not self.sandbox.unsafe,
            "warm": warm,
            "scratch": self.scratch,
            "keep": [] if self.sandbox.unsafe else mounts_in_scratch(),
            "workdir": self._inside(WORKDIR),
            "assignment": ASSIGNMENT_MOUNT if not self.sandbox.unsafe else str(self.assignment),
            "connection": CONNECTION if not self.sandbox.unsafe else str(self.connection),
            "limits": self.sandbox.limits.as_dict(),
            "preload": list(self.adapter.kernel_preload),
            "preload_later": list(self.adapter.kernel_preload_later),
        }
        if self.sandbox.unsafe:  # a folder of ours, marked as one the host may empty
            Path(self.scratch).mkdir(parents=True, exist_ok=True)
            (Path(self.scratch) / SCRATCH_MARK).touch()

        def command() -> list[str]:
            return self.sandbox.argv(
                [*interpreter, "-c", BOOTSTRAP, PROGRAM_PLACEHOLDER],
                assignment=self.assignment,
                connection=self.connection,
                cache=self.cache,
                cache_writable=self.cache_writable,
                env=env,
            )

        return KernelHost(command, config, env)

    def start_host(self, interpreter: list[str], env: dict[str, str]) -> None:
        """Start the student's warm kernel host now, before the first notebook asks for a kernel:
        its imports (about a second) run while the grader prepares that notebook."""
        if self.fork and self.host is None:
            self.host = self._host(interpreter, env, warm=True)
            self._host_for = list(interpreter)
            self.host.spawn()

    def launch(self, interpreter: list[str], args: list[str], connection: dict, env: dict[str, str]) -> KernelProcess:
        """A kernel with these ipykernel arguments and connection info (as the kernel sees it)."""
        if self.fork:
            if self.host is not None and self._host_for not in (None, list(interpreter)):
                self.close()  # started ahead for another interpreter than the kernel's
            self._host_for = None
            if self.host is None or not self.host.alive():
                if self.host is not None:
                    self.host.stop()
                self.host = self._host(interpreter, env, warm=True)
                self.host.spawn()
            if self.host.starting:  # its imports: waited for here, then its own processes are noted
                self.host.await_ready()
                assert self.host.process is not None  # ready: await_ready stops a host that is not
                self.infrastructure = set(self.host.sandbox_pids()) | {self.host.process.pid}
            return self.host.launch(connection, args, env)
        self.close()
        self.host = self._host(interpreter, env, warm=False)
        self.host.start()
        kernel = self.host.launch(connection, args, env)
        assert self.host.process is not None  # it started a kernel
        self.infrastructure = {p for p in [*self.host.sandbox_pids(), self.host.process.pid] if p != kernel.pid}
        return kernel

    def kernel_processes(self) -> list[int]:
        """The current kernel's processes and whatever they started (the host itself left out)."""
        if self.host is None or self.host.process is None:
            return []
        return [p for p in self.host.sandbox_pids() if p not in self.infrastructure]

    def close(self) -> None:
        if self.host is not None:
            self.host.stop()
            self.host = None

    def halt(self, why: str) -> None:
        """End everything of this student's now, from any thread (a watchdog's): the kernel's sandbox
        and the judge's helpers (a request to one in progress fails, saying why)."""
        self.close()
        if self._judge_helpers is not None:
            self._judge_helpers.end(why)

    def judge_helpers(self):
        """The judge's helper processes for this student (autograder/kernel/helpers.py), made once."""
        from autograder.kernel.helpers import JudgeHelpers

        if self._judge_helpers is None:
            self._judge_helpers = JudgeHelpers(
                self.sandbox,
                self.folder,
                self.assignment,
                self.adapter.helpers,
                self.cache,
                cache_writable=self.cache_writable,
                inherit=self.adapter.inherited_env,
                withhold=self._withheld,
                kernel_environment=self.kernel_environment(os.environ),
            )
        return self._judge_helpers

    def remove(self) -> None:
        self.close()
        if self._judge_helpers is not None:
            self._judge_helpers.close()
            self._judge_helpers = None
        shutil.rmtree(self.folder, ignore_errors=True)
        shutil.rmtree(self.connection, ignore_errors=True)  # where it is not in the folder (connection_folder)


def _folder_bytes(folder: Path) -> tuple[int, int]:
    entries, size = 0, 0
    try:
        with os.scandir(folder) as listing:
            for entry in listing:
                entries += 1
                if entry.is_file(follow_symlinks=False):
                    size += entry.stat(follow_symlinks=False).st_size
                elif entry.is_dir(follow_symlinks=False):
                    size += 1 << 20  # a folder has no business here
    except OSError:
        pass
    return entries, size


class Watcher(LimitWatcher):
    """Ends a kernel that goes past its limits; `hit` says which limit (None while none was)."""

    def __init__(self, session: SandboxSession, kernel: KernelProcess):
        super().__init__(name=f"watch-{kernel.pid}")
        self.session, self.kernel = session, kernel
        self.hit: str | None = None

    def _violation(self) -> str | None:
        limits = self.session.sandbox.limits
        hit = over_limits(self.session.kernel_processes(), limits)
        if hit:
            return hit
        entries, size = _folder_bytes(self.session.connection)
        if entries > 64 or size > limits.connection_dir:
            return "it wrote files into the kernel's socket folder (/run/kernel), which is not for files"
        return None

    def look(self) -> bool:
        if not alive(self.kernel.pid):
            return True
        hit = self._violation()
        if hit:
            # The whole sandbox goes at once (its PID namespace with it): a fork bomb cannot
            # outrun a kill of its processes one by one. The next notebook starts a new one.
            self.hit = hit
            self.session.close()
            return True
        return False


def split_kernel_command(kernel_cmd: list[str]) -> tuple[list[str], list[str]]:
    """(the interpreter, ipykernel's arguments) of a kernel spec's command, around `-m ipykernel_launcher`.

    The sandbox binds the interpreter's folders by their real paths: the interpreter is reached that
    way (a venv through a symlink keeps being a venv: only its folder is resolved, not the file).
    """
    split = kernel_cmd.index("-m")
    interpreter, args = kernel_cmd[:split], kernel_cmd[split + 2 :]
    program = interpreter[0]
    interpreter = [
        os.path.join(os.path.realpath(os.path.dirname(program)), os.path.basename(program)),
        *interpreter[1:],
    ]
    return interpreter, args


def kernel_interpreter(kernel_name: str) -> list[str]:
    """The interpreter a kernel of this kernel spec runs, as its kernel manager will launch it."""
    from jupyter_client.kernelspec import KernelSpecManager

    command = list(KernelSpecManager().get_kernel_spec(kernel_name).argv)
    major, minor = sys.version_info[:2]
    if command and command[0] in {"python", f"python{major}", f"python{major}.{minor}"}:
        command[0] = sys.executable  # as jupyter_client's format_kernel_cmd does
    return split_kernel_command(command)[0]


class SandboxedKernelManager(KernelManagerSteps):
    """A kernel manager whose kernels come from a SandboxSession (see the module docstring)."""

    #: The student's open session its kernels run in: handed over by whoever makes this manager
    #: (SandboxedExecute.create_kernel_manager), never through config (it is a handle on live processes).
    sandbox_session: SandboxSession | None = None
    _watcher: Watcher | None = None

    @property
    def limit_hit(self) -> str | None:
        """The limit the watcher stopped this kernel at (None while none was), read from the watcher
        itself: a cell whose last output the stop cut off asks before anything checked the kernel."""
        return self._watcher.hit if self._watcher is not None else None

    @default("client_factory")
    def _prompt_client(self):
        return PromptKernelClient

    @default("transport")
    def _ipc(self):
        return "ipc"

    def client(self, **kwargs):
        """A client whose sockets take no message over MAX_KERNEL_MESSAGE: a kernel cannot make the
        grader hold a huge one (a bigger one drops the connection)."""
        client = super().client(**kwargs)
        client.context.setsockopt(zmq.MAXMSGSIZE, MAX_KERNEL_MESSAGE)  # the default of every socket it makes
        return client

    async def before_start(self) -> None:
        session = self.sandbox_session
        if session is None:
            raise RuntimeError("SandboxedKernelManager needs an open SandboxSession (its sandbox_session)")
        self.transport = "ipc"
        self.ip = session.socket_prefix_outside
        if not self.connection_file:
            private = tempfile.mkdtemp(prefix="connection-", dir=session.folder)
            self.connection_file = os.path.join(private, "connection.json")
        self._watcher = None  # the last kernel's limit is not this one's

    async def launch(self, kernel_cmd: list[str], env: Mapping[str, str] | None) -> KernelProcess:
        session = self.sandbox_session
        assert session is not None  # before_start refused to start without one
        interpreter, args = split_kernel_command(kernel_cmd)
        # The kernel reads its own connection file, written by the host: drop `-f <file>`.
        if "-f" in args:
            at = args.index("-f")
            args = args[:at] + args[at + 2 :]
        info = {**self.get_connection_info(session=False), "ip": session.socket_prefix_inside}
        info["key"] = info["key"].decode() if isinstance(info["key"], bytes) else info["key"]
        environment = session.kernel_environment(env or os.environ)
        # The first kernel of a student waits for the host's imports: off the event loop.
        kernel = await asyncio.to_thread(session.launch, interpreter, args, info, environment)
        self._watcher = Watcher(session, kernel)
        self._watcher.start()
        return kernel

    async def interrupt(self) -> bool:
        # SIGINT to the kernel and what it started (its process group may not hold them all).
        process = getattr(self.provisioner, "process", None)
        if process is None:
            return False
        for pid in [process.pid, *descendants(process.pid)]:
            try:
                os.kill(pid, signal.SIGINT)
            except (ProcessLookupError, PermissionError):
                pass
        return True

    async def before_cleanup(self, restart: bool) -> None:
        if self._watcher is not None:
            self._watcher.stop()

    async def after_cleanup(self, restart: bool) -> None:
        session = self.sandbox_session
        if session is not None and not session.fork:
            session.close()  # one sandbox per notebook: it ends with its kernel
        folder = os.path.dirname(self.connection_file) if self.connection_file else None
        if not restart and folder and os.path.basename(folder).startswith("connection-"):
            shutil.rmtree(folder, ignore_errors=True)
