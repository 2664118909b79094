"""The grader's side of a kernel host: the one process a student's sandbox starts, asked for each notebook's kernel.

Inside the sandbox (autograder/kernel/sandbox.py) the grader starts one *kernel host* per student
(its program: autograder/sandboxed/kernel_host_program.py, sent as text, run after confine.py), as
the sandbox's first process. Warm, it imports what every kernel imports once, then forks a kernel
in a fresh workspace for each notebook; cold (one sandbox per notebook), it forks the one kernel
without importing ahead. `KernelHost` starts it, asks it for kernels over its private line
(autograder/kernel/control_line.py: a nonce per request, nothing on its standard streams) and
stops it; `KernelProcess` is a kernel as the grader sees it (its pid outside the sandbox's PID
namespace, a child of the host's).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from autograder.course.errors import GraderError
from autograder.kernel.control_line import ControlLine, LineError, program_text, start
from autograder.kernel.helpers import sent_text
from autograder.kernel.process_limits import descendants

#: What the host runs: confine.py, then kernel_host_program.py (then its main() on the configuration).
PROGRAM = sent_text("confine.py", "kernel_host_program.py")

#: Seconds to wait for a host's imports.
START_TIMEOUT = 120
#: Seconds to wait for a kernel to be forked.
LAUNCH_TIMEOUT = 60
#: The longest line taken from a host.
MAX_LINE = 4096


class KernelHostError(GraderError, RuntimeError):
    """The kernel host could not be started or did not answer."""


def namespace_pids(pid: int) -> list[int]:
    """The ids of a process in each PID namespace it belongs to, outermost first.

    Read from /proc because psutil does not expose NSpid.
    """
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return [int(x) for x in line.split()[1:]]
    except (OSError, ValueError):
        pass
    return [pid]


def alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.Error:
        return False


class KernelProcess:
    """The bits of subprocess.Popen that jupyter_client uses, for a kernel the host started."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not alive(self.pid):
            self.returncode = 0  # its exit status went to the host, which does not keep it
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (returncode := self.poll()) is None:
            if timeout is not None and deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.01)
        return returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class KernelHost:
    """The grader's handle on one kernel host (one sandbox): start it, ask it for kernels, stop it.

    command() -> argv: the host's command, already wrapped in the sandbox, with
    control_line.PROGRAM_PLACEHOLDER where the descriptor of its program goes. program: the text
    the host runs (PROGRAM; tests send a stand-in), before its main() on config.
    """

    def __init__(self, command, config: dict, env: dict[str, str], program: str = PROGRAM):
        self.command, self.config, self.env, self.program = command, config, env, program
        self.process: subprocess.Popen | None = None
        self.line: ControlLine | None = None
        self._ready_by: float | None = None  # spawned, its first line not read yet: by when it must come
        self.stopped = False  # stop() was called (from any thread): never started again

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start the host and wait for its imports (KernelHostError if it does not say it is ready)."""
        self.spawn()
        self.await_ready()

    @property
    def starting(self) -> bool:
        """Spawned, and its imports not yet waited for."""
        return self._ready_by is not None

    def spawn(self) -> None:
        """Start the host without waiting for its imports: they run while the grader prepares the
        notebook, and the first kernel asked for waits for what is left of them."""
        self.line = ControlLine(MAX_LINE)
        self.process = start(
            self.command(),
            program_text(self.program, {**self.config, **self.line.config()}),
            self.line,
            env=self.env,
            start_new_session=True,
        )
        self._ready_by = time.monotonic() + START_TIMEOUT

    def await_ready(self) -> None:
        """Wait for a spawned host to say it is ready (KernelHostError if it does not in time)."""
        deadline, self._ready_by = self._ready_by, None
        assert deadline is not None and self.line is not None  # spawned, and its first line not read yet
        try:
            said = self.line.await_ready(deadline)
        except LineError as error:
            self.stop()
            raise KernelHostError(f"the kernel host did not start: {error}") from None
        if said != {"ready": True}:
            self.stop()
            raise KernelHostError(f"the kernel host did not start (it said {str(said)[:200]!r})")

    def launch(self, connection: dict, args: list[str], env: dict[str, str]) -> KernelProcess:
        """A kernel in a fresh workspace; the host is (re)started first when it is not running, but
        never once stopped (another thread's stop: a run stopped, a watchdog's halt)."""
        if self.stopped:
            raise KernelHostError("the kernel host was stopped")
        if not self.alive():
            self.start()
        elif self.starting:  # spawned ahead of its first kernel
            self.await_ready()
        assert self.line is not None  # started
        request = {"connection": connection, "args": args, "env": env}
        try:
            answer = self.line.request(request, time.monotonic() + LAUNCH_TIMEOUT)
        except LineError as error:
            self.stop()  # a host that broke its line is not asked again
            raise KernelHostError(f"the kernel host did not start a kernel: {error}") from None
        inner = answer.get("kernel")
        if set(answer) != {"kernel"} or type(inner) is not int or inner <= 0:
            self.stop()
            raise KernelHostError(f"the kernel host did not start a kernel (it said {str(answer)[:200]!r})")
        return KernelProcess(self._outside_pid(inner))

    def _outside_pid(self, inner: int) -> int:
        """The kernel's pid as the grader sees it: the child of the host (the sandbox's first
        process, or the host itself unsandboxed) with that pid in the sandbox's PID namespace."""
        assert self.process is not None  # it started this kernel
        for _ in range(200):
            for pid in _children(self._host_pid()):
                ids = namespace_pids(pid)
                if ids[-1] == inner and (len(ids) > 1 or pid == inner):
                    return pid
            time.sleep(0.005)
        raise KernelHostError(f"the kernel {inner} could not be found")

    def _host_pid(self) -> int:
        """The host's pid as the grader sees it: bubblewrap's child in the sandbox's PID namespace
        (the sandbox's first process), or, unsandboxed, the process the grader started."""
        assert self.process is not None
        for child in _children(self.process.pid):
            if len(namespace_pids(child)) > 1:
                return child
        return self.process.pid

    def sandbox_pids(self) -> list[int]:
        """Every process in the sandbox, as the grader sees them (bwrap's own included)."""
        return descendants(self.process.pid) if self.process is not None else []

    def stop(self) -> None:
        self.stopped = True
        if self.process is not None:
            for pid in [*self.sandbox_pids(), self.process.pid]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self.process = None
            self._ready_by = None
        if self.line is not None:
            self.line.close()
            self.line = None


def _children(pid: int) -> list[int]:
    """The processes whose parent is pid."""
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/children") as listing:
                    found += [int(child) for child in listing.read().split()]
            except (OSError, ValueError):
                pass
    except OSError:
        pass
    return found
