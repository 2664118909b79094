"""The one process a student's sandbox starts: it prepares each notebook's kernel and runs it.

Inside the sandbox (autograder/sandbox.py) the grader starts one *kernel host* per student. It
drops to the kernel's unprivileged uid, imports what every kernel imports (ipykernel, NumPy,
JAX, Matplotlib: about a second, paid once per student instead of once per notebook), then
serves one request per notebook. For each request it:

1. ends every other process in the sandbox (what the previous notebook left running);
2. empties /tmp and /run/kernel, and makes a fresh working copy of the assignment's shipped
   files in /tmp/submission, with an empty $HOME and IPYTHONDIR: nothing a notebook wrote
   (an IPython startup file, a package that would shadow a shipped module) reaches the next;
3. forks the kernel, which sets its limits (memory, file size, CPU time, tasks), makes itself
   the first process the host's out-of-memory killer picks, and starts ipykernel.

Forking is safe because the host itself starts no thread, JAX backend or ZeroMQ context; it
is not dumpable, so a kernel can neither trace it nor write its memory. `--no-fork` runs the
same code once per notebook in a fresh sandbox and `exec`s nothing: the host becomes the kernel.

SOURCE runs as `python -c SOURCE CONFIG` and imports nothing of the bundle (the sandbox does
not show it). KernelHost is the grader's side.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import time
from pathlib import Path

from .sandbox import launch

SOURCE = r'''
import ctypes, errno, json, os, shutil, signal, sys

CONFIG = json.loads(sys.argv[1])
control_in = os.fdopen(os.dup(0), "r")
control_out = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):  # a kernel's own output travels over its sockets; raw writes go nowhere
    os.dup2(null, fd)

LIBC = ctypes.CDLL(None, use_errno=True)
if CONFIG["uid"] is not None:
    os.setgroups([])
    os.setgid(CONFIG["uid"])
    os.setuid(CONFIG["uid"])  # from here on no capability is left
LIBC.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: kernels cannot trace or read this process

SCRATCH, WORKDIR, ASSIGNMENT, CONNECTION = CONFIG["scratch"], CONFIG["workdir"], CONFIG["assignment"], CONFIG["connection"]
if not CONFIG["own_pid_namespace"] and "performance-05-" not in SCRATCH:
    raise SystemExit(f"refusing to empty {SCRATCH}: not a grading scratch folder")
os.makedirs(os.path.join(SCRATCH, "matplotlib"), exist_ok=True)  # the imports below may write there


def say(text):
    control_out.write(text + "\n")
    control_out.flush()


KEEP = set(CONFIG["keep"])  # read-only folders mounted under the scratch space (a venv in /tmp)


def empty(folder):
    def retry(function, path, _):
        try:
            os.chmod(os.path.dirname(path), 0o700)
            os.chmod(path, 0o700) if not os.path.islink(path) else None
            function(path)
        except OSError as error:
            if error.errno not in (errno.EROFS, errno.EBUSY):  # a kept mount, moved by the kernel
                raise
    for entry in os.scandir(folder):
        if entry.path in KEEP:
            continue
        if entry.is_dir(follow_symlinks=False) and any(kept.startswith(entry.path + os.sep) for kept in KEEP):
            try:
                os.chmod(entry.path, 0o755)
            except OSError:  # made by bwrap as root: the kernel could not write there either
                pass
            empty(entry.path)
        elif entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, onerror=retry)
        else:
            os.unlink(entry.path)


def end_the_others():
    """SIGKILL every process of the sandbox but this one (and bwrap's init, which reaps them)."""
    if not CONFIG["own_pid_namespace"]:
        for group in KERNEL_GROUPS:
            try:
                os.killpg(group, signal.SIGKILL)
            except OSError:
                pass
        KERNEL_GROUPS.clear()
        return
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:  # nobody else was left
        return
    import time

    import psutil

    for _ in range(500):
        if not [pid for pid in psutil.pids() if pid not in (1, os.getpid())]:
            return
        time.sleep(0.01)


def fresh_workspace():
    empty(SCRATCH)
    empty(CONNECTION)
    if CONFIG["own_pid_namespace"]:  # in the sandbox: its own sized /dev/shm (unsandboxed: the host's, left alone)
        empty("/dev/shm")
    for name in ("home", "ipython", "matplotlib", "cache"):
        os.mkdir(os.path.join(SCRATCH, name))
    shutil.copytree(ASSIGNMENT, WORKDIR, symlinks=False)


def become_kernel(request):
    import resource
    limits = CONFIG["limits"]
    for name, value in (("RLIMIT_AS", limits["memory"]), ("RLIMIT_FSIZE", limits["file_size"]),
                        ("RLIMIT_NOFILE", limits["open_files"]), ("RLIMIT_CORE", 0)):
        resource.setrlimit(getattr(resource, name), (value, value))
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_seconds"], limits["cpu_seconds"] + 5))
    if CONFIG["uid"] is not None:  # counted per uid: only meaningful for a uid of the kernel's own
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["tasks"], limits["tasks"]))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails, it does not kill
    try:
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("1000")  # short of memory, the host ends a kernel, not the grader
    except OSError:
        pass
    connection_file = os.path.join(SCRATCH, ".kernel.json")
    with open(connection_file, "w") as handle:
        json.dump(request["connection"], handle)
    os.chdir(WORKDIR)
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["ipykernel_launcher", "-f", connection_file, *request["args"]]
    from ipykernel import iostream
    cap, write = limits["output"], iostream.OutStream.write

    def capped_write(stream, text):
        # The output limit, per cell: what is printed past it is dropped here, in the kernel,
        # so the grader never has to take it in (the grader cuts too, for kernels that change this).
        cell = (stream.parent_header or {}).get("header", {}).get("msg_id")
        if getattr(stream, "_grading_cell", ()) != cell:
            stream._grading_cell, stream._grading_used = cell, 0
        room = cap - stream._grading_used
        stream._grading_used += len(text)
        if len(text) <= room:
            return write(stream, text)
        if room > -len(text):  # the first write past the limit: what fits, and the note
            write(stream, text[:max(room, 0)] + f"\n[output cut: this cell printed more than {cap / 2**20:g} MiB, "
                  "the output limit of grading]\n")
        return len(text)

    iostream.OutStream.write = capped_write

    # ipykernel listens on a loopback TCP port for what forked children print. A graded kernel
    # listens on no port at all: nothing in its sandbox answers a scan, and no code of the
    # learner's can feed its kernel's output from a socket. What a forked child prints is dropped
    # (it would otherwise write to its parent's sockets, which a fork does not carry over).
    def no_subprocess_pipe(thread):
        thread._pipe_flag = False

    really_send = iostream.IOPubThread._really_send

    def send_from_the_kernel_only(thread, msg, *args, **kwargs):
        if thread._is_master_process():
            return really_send(thread, msg, *args, **kwargs)

    iostream.IOPubThread._setup_pipe_in = no_subprocess_pipe
    iostream.IOPubThread._really_send = send_from_the_kernel_only
    import ipykernel.compiler
    # Cell files are <tmp>/ipykernel_<pid>/<hash>.py and show in tracebacks, so in feedback:
    # one name for every kernel keeps feedback the same from run to run.
    cells = os.path.join(SCRATCH, "ipykernel_2")
    ipykernel.compiler.get_tmp_directory = lambda: cells
    from ipykernel import kernelapp
    kernelapp.launch_new_instance()


KERNEL_GROUPS = []
if CONFIG["warm"]:
    # What IPKernelApp.initialize imports (the debugger's modules too), and the lesson's stack.
    from ipykernel import kernelapp
    import ipykernel.ipkernel, ipykernel.zmqshell, IPython.core.oinspect, IPython.core.completerlib
    import IPython.extensions.storemagic, tornado.platform.asyncio
    try:
        import ipykernel.debugger
    except ImportError:
        pass
    import numpy, jax, jax.numpy, matplotlib, matplotlib.pyplot
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # kernels are not waited for
    say("ready")
    for line in control_in:
        request = json.loads(line)
        end_the_others()
        fresh_workspace()
        pid = os.fork()
        if pid == 0:
            try:
                control_in.close()
                control_out.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.setpgid(0, 0)
                become_kernel(request)
            finally:
                os._exit(0)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass
        KERNEL_GROUPS.append(pid)
        say(str(pid))
else:
    say("ready")
    request = json.loads(control_in.readline())
    fresh_workspace()
    say(str(os.getpid()))
    control_in.close()
    control_out.close()
    become_kernel(request)
'''

#: Seconds to wait for a host's imports.
START_TIMEOUT = 120


class KernelHostError(RuntimeError):
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


def descendants(pid: int) -> list[int]:
    """Every process below pid (children first), as this process sees them."""
    import psutil

    try:
        return [child.pid for child in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


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
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.01)
        return self.returncode

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

    command(config_json) -> argv: the host's command, already wrapped in the sandbox.
    """

    def __init__(self, command, config: dict, env: dict[str, str]):
        self.command, self.config, self.env = command, config, env
        self.process: subprocess.Popen | None = None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        self.process = launch(
            self.command(json.dumps(self.config)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self.env,
            text=True,
            start_new_session=True,
        )
        line = self._read_line(START_TIMEOUT)
        if line != "ready":
            self.stop()
            raise KernelHostError(f"the kernel host did not start (it said {line!r})")

    def _read_line(self, timeout: float) -> str:
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout):
                return ""
        return self.process.stdout.readline().strip()

    def launch(self, connection: dict, args: list[str], env: dict[str, str]) -> KernelProcess:
        """A kernel in a fresh workspace; the host is (re)started first when it is not running."""
        if not self.alive():
            self.start()
        request = {"connection": connection, "args": args, "env": env}
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError) as error:
            raise KernelHostError(f"the kernel host is gone ({error})") from error
        answer = self._read_line(60)
        if not answer.isdigit():
            raise KernelHostError(f"the kernel host did not start a kernel (it said {answer!r})")
        return KernelProcess(self._outside_pid(int(answer)))

    def _outside_pid(self, inner: int) -> int:
        """The kernel's pid as the grader sees it (the host may live in its own PID namespace)."""
        for _ in range(200):
            for pid in [self.process.pid, *descendants(self.process.pid)]:
                ids = namespace_pids(pid)
                if ids[-1] == inner and (len(ids) > 1 or pid == inner):
                    return pid
            time.sleep(0.005)
        raise KernelHostError(f"the kernel {inner} could not be found")

    def sandbox_pids(self) -> list[int]:
        """Every process in the sandbox, as the grader sees them (bwrap's own included)."""
        return descendants(self.process.pid) if self.process is not None else []

    def stop(self) -> None:
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
            for stream in (self.process.stdin, self.process.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            self.process = None
