"""The kernel host's program: what runs inside a student's sandbox and starts each notebook's kernel.

The grader's side is autograder/kernel/kernel_host.py. This text is sent after confine.py's and run
by the grader's bootstrap (autograder/kernel/control_line.py: it imports nothing of the grader, which
the sandbox does not show). It is the sandbox's first process: it takes its private line to the
grader, drops to the kernel's unprivileged uid, and then, warm, imports what every kernel imports
(ipykernel's modules, and what the assignment's adapter names: NumPy and JAX for a JAX course,
about a second, paid once per student instead of once per notebook) and serves one request per
line, each answered with the nonce it came with. For each request:

1. it ends every other process in the sandbox (what the previous notebook left running);
2. it empties /tmp, /run/kernel and /dev/shm, and makes a fresh working copy of the
   assignment's shipped files in /tmp/submission, with an empty $HOME and IPYTHONDIR: nothing
   a notebook wrote (an IPython startup file, a package that would shadow a shipped module)
   reaches the next;
3. from the second request on, it imports what only some notebooks import (the adapter's later
   preload: Matplotlib for the lesson, whose notebooks plot), once: a student who hands in one
   notebook mostly needs none of it, one who hands in several pays for it once; in that fresh
   workspace, so that nothing a kernel left can reach its configuration;
4. it forks the kernel, which closes the line, sets its limits (confine.set_limits) and starts
   ipykernel, listening on no TCP port.

Forking is safe because the host starts no thread, backend (JAX's) or ZeroMQ context. It is not
dumpable, so a kernel can neither trace it nor open its memory, descriptors or environment; its
command line is zeros; as the first process of its PID namespace it takes no signal a kernel
sends it. Cold (`warm` false), the host imports nothing ahead and serves one kernel.

The configuration (kernel_host.KernelHost's): uid, own_pid_namespace, warm, scratch, keep,
workdir, assignment, connection, limits, preload and preload_later (the adapter's modules), and
the line (control_line.ControlLine.config).
"""

from __future__ import annotations

import errno
import gc
import json
import os
import shutil
import signal
import sys
import time

try:  # imported as part of the grader (its tests); sent as text, confine.py comes first
    from .confine import drop_privileges, hide_command_line, private_line, reply, requests, set_limits
except ImportError:  # pragma: no cover - the sandbox's copy
    pass

#: A file the grader puts in an unsandboxed scratch folder: the only kind of folder a host empties
#: outside a sandbox of its own.
SCRATCH_MARK = ".grading-scratch"
#: The name every kernel's cell files are kept under (they show in tracebacks, so in feedback).
CELL_FILES = "ipykernel_2"


def empty(folder: str, keep=frozenset()) -> None:
    """Remove everything in `folder` but the mounts in `keep` (and the folders above them)."""

    def retry(function, path, _):
        try:
            os.chmod(os.path.dirname(path), 0o700)
            if not os.path.islink(path):
                os.chmod(path, 0o700)
            function(path)
        except OSError as error:
            if error.errno not in (errno.EROFS, errno.EBUSY):  # a kept mount, moved by the kernel
                raise

    for entry in os.scandir(folder):
        if entry.path in keep:
            continue
        if entry.is_dir(follow_symlinks=False) and any(kept.startswith(entry.path + os.sep) for kept in keep):
            try:
                os.chmod(entry.path, 0o755)
            except OSError:  # made by bwrap as root: the kernel could not write there either
                pass
            empty(entry.path, keep)
        elif entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, onerror=retry)
        else:
            os.unlink(entry.path)


class Host:
    """One sandbox's kernel host."""

    def __init__(self, config: dict):
        self.config = config
        self.scratch, self.workdir = config["scratch"], config["workdir"]
        self.assignment, self.connection = config["assignment"], config["connection"]
        self.keep = frozenset(config["keep"])  # read-only folders mounted under the scratch space (a venv in /tmp)
        self.kernel_groups: list[int] = []
        if not config["own_pid_namespace"] and not os.path.exists(os.path.join(self.scratch, SCRATCH_MARK)):
            raise SystemExit(f"refusing to empty {self.scratch}: not a grading scratch folder")

    def end_the_others(self) -> None:
        """SIGKILL every process of the sandbox but this one (and bwrap's init, which reaps them)."""
        if not self.config["own_pid_namespace"]:
            for group in self.kernel_groups:
                try:
                    os.killpg(group, signal.SIGKILL)
                except OSError:
                    pass
            self.kernel_groups.clear()
            return
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:  # nobody else was left
            return
        import psutil

        for _ in range(500):
            if not [pid for pid in psutil.pids() if pid not in (1, os.getpid())]:
                return
            time.sleep(0.01)

    def fresh_workspace(self) -> None:
        keep = self.keep | {os.path.join(self.scratch, SCRATCH_MARK)}
        empty(self.scratch, keep)
        empty(self.connection)
        if self.config["own_pid_namespace"]:  # in the sandbox: its own sized /dev/shm (unsandboxed: the host's)
            empty("/dev/shm")
        for name in ("home", "ipython", "matplotlib", "cache"):
            os.mkdir(os.path.join(self.scratch, name))
        shutil.copytree(self.assignment, self.workdir, symlinks=False)

    def become_kernel(self, request: dict) -> None:
        """This process becomes the notebook's kernel, within its limits; does not return."""
        self.prepare_kernel(request)
        start_ipykernel(os.path.join(self.scratch, CELL_FILES))

    def prepare_kernel(self, request: dict) -> None:
        """The kernel's limits, connection file, working directory, environment and arguments."""
        set_limits(self.config["limits"], self.config["uid"])
        connection_file = os.path.join(self.scratch, ".kernel.json")
        with open(connection_file, "w") as handle:
            json.dump(request["connection"], handle)
        os.chdir(self.workdir)
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["ipykernel_launcher", "-f", connection_file, *request["args"]]

    def serve(self, reader, writer, start: str) -> None:
        """A forked kernel per request, its pid answered; warm, with the kernels' imports made ahead."""
        if self.config["warm"]:
            import_the_kernels_stack(self.config.get("preload", []))
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # kernels are not waited for; orphans are reaped
        reply(writer, start, {"ready": True})
        for served, (nonce, request) in enumerate(requests(reader)):
            self.end_the_others()
            self.fresh_workspace()
            if served == 1 and self.config["warm"]:
                import_where_possible(self.config.get("preload_later", []))
            # What the host imported is never garbage: frozen, a kernel's full collections skip
            # it (about 0.1 s of a notebook's CPU time) and leave its shared pages unwritten.
            gc.freeze()
            pid = os.fork()
            if pid == 0:
                try:
                    reader.close()
                    writer.close()
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    os.setpgid(0, 0)
                    self.become_kernel(request)
                finally:
                    os._exit(0)
            try:
                os.setpgid(pid, pid)
            except OSError:
                pass
            self.kernel_groups.append(pid)
            reply(writer, nonce, {"kernel": pid})


def start_ipykernel(cells: str) -> None:
    """ipykernel, as `python -m ipykernel_launcher` would start it, with its cell files in `cells`."""
    quiet_forked_children()
    print_in_pieces()
    import ipykernel.compiler

    # Cell files are <tmp>/ipykernel_<pid>/<hash>.py and show in tracebacks, so in feedback: one
    # name for every kernel keeps feedback the same from run to run.
    ipykernel.compiler.get_tmp_directory = lambda: cells
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()


def quiet_forked_children() -> None:
    """ipykernel listens on a loopback TCP port for what forked children print. A graded kernel
    listens on no port at all: nothing in its sandbox answers a scan, and no code of the
    learner's can feed its kernel's output from a socket. What a forked child prints is dropped
    (it would otherwise write to its parent's sockets, which a fork does not carry over)."""
    from ipykernel import iostream

    really_send = iostream.IOPubThread._really_send

    def no_subprocess_pipe(thread):
        thread._pipe_flag = False

    def send_from_the_kernel_only(thread, msg, *args, **kwargs):
        if thread._is_master_process():
            return really_send(thread, msg, *args, **kwargs)

    # Monkeypatched on purpose: ipykernel's own methods replaced for every IOPubThread.
    iostream.IOPubThread._setup_pipe_in = no_subprocess_pipe  # type: ignore[method-assign]
    iostream.IOPubThread._really_send = send_from_the_kernel_only  # type: ignore[method-assign, assignment]


#: The most characters one stream message carries. The grader's output cap cuts what a cell
#: prints; this only keeps a long print from arriving as one message larger than the grader
#: takes (kernels.MAX_KERNEL_MESSAGE), which would cost the whole notebook, not just its output.
PRINT_PIECE = 1 << 20


def print_in_pieces() -> None:
    """ipykernel sends what a cell printed since its last flush as one message, however long.
    Send it in pieces of PRINT_PIECE characters instead."""
    from ipykernel import iostream

    whole = iostream.OutStream._flush_buffers

    def in_pieces(stream):
        for parent, data in whole(stream):
            for start in range(0, len(data), PRINT_PIECE):
                yield parent, data[start : start + PRINT_PIECE]

    iostream.OutStream._flush_buffers = in_pieces  # type: ignore[method-assign]  # monkeypatched on purpose


#: What IPKernelApp.initialize imports, whatever the assignment.
KERNELS_STACK = (
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "ipykernel.zmqshell",
    "IPython.core.oinspect",
    "IPython.core.completerlib",
    "IPython.extensions.storemagic",
    "tornado.platform.asyncio",
)


def import_the_kernels_stack(preload) -> None:
    """KERNELS_STACK, then what every notebook of the assignment imports (`preload`, its adapter's),
    and the debugger's modules (IPythonKernel imports them as it starts)."""
    import importlib

    for name in (*KERNELS_STACK, *preload):
        importlib.import_module(name)
    import_where_possible(["ipykernel.debugger"])


def import_where_possible(names) -> None:
    """These modules, in order, as far as they can be imported (an assignment's environment may
    lack one: its notebooks then fail on it themselves)."""
    import importlib

    try:
        for name in names:
            importlib.import_module(name)
    except ImportError:
        pass


def main(config: dict) -> None:
    hide_command_line()
    reader, writer = private_line(config)  # a kernel's own output travels over its sockets; raw writes go nowhere
    drop_privileges(config["uid"])  # from here on no capability is left
    if config["own_pid_namespace"]:  # its first process: a kernel's SIGINT then reaches it not at all
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    Host(config).serve(reader, writer, config["start"])
