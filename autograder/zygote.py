"""Kernels forked from one warm process per student: Python, IPython and `import jax` paid once.

A fresh kernel costs a new Python, IPython and then `import jax` in its first cell, about a
second here before any of the learner's code runs, and a student has five notebooks. So the
grader starts one *zygote* per student, inside that student's sandbox: a Python that has
imported ipykernel, NumPy, JAX and Matplotlib and then waits. Each notebook's kernel is a fork
of it. A fork is a copy: what one notebook does to its modules or globals never reaches the
next, as with fresh kernels, and every kernel of the student stays in the student's sandbox.

The zygote only imports: no JAX backend, no ZeroMQ context, no threads of its own (OpenBLAS
re-creates its pool after a fork), so forking it is safe. It reads one request per line on
stdin (arguments, working directory, environment of the kernel) and answers with the new
kernel's process id, as its PID namespace numbers it.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

#: What the zygote runs (python -c). It must not import the bundle: the sandbox hides it.
ZYGOTE_SOURCE = r'''
import json, os, signal, sys

control_in = os.fdopen(os.dup(0), "r")
control_out = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDONLY)
os.dup2(null, 0)
os.dup2(2, 1)  # kernels' own output goes where a kernel's normally goes, never into the protocol

from ipykernel import kernelapp
# What IPKernelApp.initialize would import in every kernel (the debugger's debugpy included).
import ipykernel.ipkernel, ipykernel.zmqshell, IPython.core.oinspect, IPython.core.completerlib
import IPython.extensions.storemagic, tornado.platform.asyncio
try:
    import ipykernel.debugger
except ImportError:
    pass
import numpy, jax, jax.numpy, matplotlib, matplotlib.pyplot

signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernels are not waited for
control_out.write("ready\n")
control_out.flush()
for line in control_in:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        try:
            control_in.close()
            control_out.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.setpgid(0, 0)  # its own process group, as a freshly launched kernel has
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            sys.argv = ["ipykernel_launcher", *request["args"]]
            if request.get("pid_in_names"):
                # Cell files are /tmp/ipykernel_<pid>/<hash>.py and show in tracebacks and feedback:
                # name them as a freshly started kernel would be numbered.
                import ipykernel.compiler, tempfile
                name = os.path.join(tempfile.gettempdir(), f"ipykernel_{request['pid_in_names']}")
                ipykernel.compiler.get_tmp_directory = lambda: name
            kernelapp.launch_new_instance()
        finally:
            os._exit(0)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass
    control_out.write(f"{pid}\n")
    control_out.flush()
'''

#: Seconds to wait for a zygote's imports.
START_TIMEOUT = 120


class ZygoteError(RuntimeError):
    """The zygote could not be started or did not answer."""


def _namespace_pids(pid: int) -> list[int]:
    """The ids of a process in each PID namespace it belongs to, outermost first."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return [int(x) for x in line.split()[1:]]
    except (OSError, ValueError):
        pass
    return [pid]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


class ForkedKernel:
    """The bits of subprocess.Popen that jupyter_client uses, for a kernel the zygote forked."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not _alive(self.pid):
            self.returncode = 0  # its exit status went to the zygote, which does not keep it
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.01)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class Zygote:
    """One warm process for one student's kernels. `wrap` turns a command into its sandboxed form."""

    def __init__(self, key: tuple, wrap=None):
        self.key = key
        self.wrap = wrap or (lambda command, folder: command)
        self.folder = tempfile.mkdtemp(prefix="zygote-")  # its kernels' connection files
        self.process: subprocess.Popen | None = None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, interpreter: list[str], env: dict[str, str]) -> None:
        command = self.wrap([*interpreter, "-c", ZYGOTE_SOURCE], self.folder)
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                        text=True, start_new_session=True)
        line = self._read_line(START_TIMEOUT)
        if line != "ready":
            self.stop()
            raise ZygoteError(f"the kernel zygote did not start (it said {line!r})")

    def _read_line(self, timeout: float) -> str:
        import selectors

        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout):
                return ""
        return self.process.stdout.readline().strip()

    def fork(self, interpreter: list[str], args: list[str], cwd: str, env: dict[str, str],
             pid_in_names: int | None = None) -> ForkedKernel:
        """A new kernel; the zygote is (re)started first when it is not running.

        pid_in_names: the process id the kernel puts in its cell files' names, instead of its own.
        """
        if not self.alive():
            self.start(interpreter, env)
        request = {"args": args, "cwd": cwd, "env": env, "pid_in_names": pid_in_names}
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError) as error:
            raise ZygoteError(f"the kernel zygote is gone ({error})") from error
        answer = self._read_line(30)
        if not answer.isdigit():
            raise ZygoteError(f"the kernel zygote did not fork a kernel (it said {answer!r})")
        return ForkedKernel(self._outside_pid(int(answer)))

    def _outside_pid(self, inner: int) -> int:
        """The kernel's pid as this process sees it (the zygote may live in its own PID namespace)."""
        from .sandbox import _descendants

        for _ in range(100):
            for pid in _descendants(self.process.pid):
                ids = _namespace_pids(pid)
                if ids[-1] == inner and (len(ids) > 1 or pid == inner):
                    return pid
            time.sleep(0.005)
        raise ZygoteError(f"the forked kernel {inner} could not be found")

    def stop(self) -> None:
        from .sandbox import _descendants

        if self.process is not None:
            for pid in [*_descendants(self.process.pid), self.process.pid]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            for stream in (self.process.stdin, self.process.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            self.process = None
        shutil.rmtree(self.folder, ignore_errors=True)


#: The zygotes of the student being graded, by sandbox (one, normally).
ZYGOTES: dict[tuple, Zygote] = {}


def zygote_for(key: tuple, wrap=None) -> Zygote:
    if key not in ZYGOTES:
        ZYGOTES[key] = Zygote(key, wrap)
    return ZYGOTES[key]


def stop_zygotes() -> None:
    """End every zygote and its kernels: the student's grading is over."""
    while ZYGOTES:
        _, zygote = ZYGOTES.popitem()
        zygote.stop()
