"""The sandbox every graded kernel runs in: what it sees, what it reaches, what it keeps, its limits.

Each test starts kernels the way grading does (a SandboxSession, SandboxedKernelManager over
Unix sockets) and runs small notebooks in them; canaries outside the sandbox are checked
afterwards. That grades do not change with the speed-ups (forked kernels, the compile cache)
is checked on a whole class in test_grading_engine.py; each hostile route is also a fixture
of test_autograder_scores.py.
"""

from __future__ import annotations

import ast
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError

from autograder.adapters.jax_programs.compile_cache import JAX_CACHE
from autograder.adapters.lesson import ADAPTER as LESSON
from autograder.adapters.lesson import SHIPPED_MODULES
from autograder.course.paths import RELEASE, ROOT, SOLUTIONS
from autograder.kernel import compile_cache
from autograder.kernel.kernels import SandboxedKernelManager, SandboxSession
from autograder.kernel.sandbox import Limits, SandboxUnavailable, find_sandbox, interpreter_folders
from autograder.run.grade import CannotGradeSafely, grade
from autograder.sandboxed.wire import decode, encode
from bundle.execute import execute_notebook

DOUBLE = "import jax, jax.numpy as jnp\nprint(float(jax.jit(lambda a: (a * 2.5).sum())(jnp.arange(7.0))))"


def test_kernel_env_keeps_numerics_not_cache():
    """A kernel inherits what changes numerics and none of the grader's compile cache.

    An instructor's own JAX cache settings would point a kernel at a folder it cannot see (or,
    unsandboxed, one that outlives the run): the grader alone decides the cache."""
    from autograder.kernel.sandbox import kernel_env

    instructor = {
        "JAX_ENABLE_X64": "1",
        "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false",
        "JAX_COMPILATION_CACHE_DIR": "/home/instructor/.cache/jax",
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_ENABLE_COMPILATION_CACHE": "true",
        "HOME": "/home/instructor",
        "AWS_SECRET_ACCESS_KEY": "canary",
    }
    lesson = {"inherit": LESSON.inherited_env, "withhold": JAX_CACHE.withheld}
    env = kernel_env(instructor, **lesson)
    assert env["JAX_ENABLE_X64"] == "1" and env["XLA_FLAGS"] == instructor["XLA_FLAGS"]
    assert [name for name in env if name.startswith("JAX_") and "CACHE" in name] == []
    assert "AWS_SECRET_ACCESS_KEY" not in env and env["HOME"] == "/tmp/home"
    extra = JAX_CACHE.reading("/cache")
    assert kernel_env(instructor, extra=extra, **lesson)["JAX_COMPILATION_CACHE_DIR"] == "/cache"
    # An assignment without the JAX adapter inherits nothing of JAX's.
    assert not [name for name in kernel_env(instructor) if name.startswith(("JAX_", "XLA_"))]


def _notebook(*sources: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])


@pytest.fixture
def assignment(tmp_path) -> Path:
    """The shipped modules, as a student's workspace starts from them."""
    folder = tmp_path / "assignment"
    folder.mkdir()
    for name in SHIPPED_MODULES:
        (folder / name).write_bytes((RELEASE / name).read_bytes())
    return folder


@pytest.fixture
def session_factory(tmp_path, assignment):
    made = []

    def make(fork: bool = True, limits: dict | None = None, **options) -> SandboxSession:
        folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"performance-05-test-{uuid.uuid4().hex[:8]}"
        options.setdefault("adapter", LESSON)  # the lesson's kernels: JAX preloaded, its variables inherited
        session = SandboxSession(find_sandbox(Limits(**(limits or {}))), folder, assignment, fork=fork, **options)
        made.append(session)
        return session

    yield make
    for session in made:
        session.remove()


QUIET = ["--IPKernelApp.log_level=ERROR"]


def run(session: SandboxSession, *sources: str, timeout: int = 60) -> nbformat.NotebookNode:
    """The sources as one notebook, in a kernel of the session; errors are kept as outputs."""
    notebook = _notebook(*sources)
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        allow_errors=True,
        kernel_manager_class=SandboxedKernelManager,
        interrupt_on_timeout=True,
        extra_arguments=QUIET,
    )
    client.km = client.create_kernel_manager()
    client.km.sandbox_session = session
    client.execute()
    return notebook


def stdout(notebook, index: int) -> str:
    return "".join(o.get("text", "") for o in notebook.cells[index].outputs if o.get("name") == "stdout")


def error(notebook, index: int) -> str:
    return "".join(f"{o.ename}: {o.evalue}" for o in notebook.cells[index].outputs if o.output_type == "error")


# ---------------------------------------------------------------------------------------
# What a kernel can read and write.
# ---------------------------------------------------------------------------------------
def test_a_kernel_sees_only_the_allow_list(session_factory, tmp_path):
    canary = Path("/var/tmp") / f"performance05-canary-{uuid.uuid4().hex[:8]}.txt"
    canary.write_text("secret")
    home = Path.home() / f"performance05-canary-{uuid.uuid4().hex[:8]}.txt"
    home.write_text("secret")
    try:
        notebook = run(
            session_factory(),
            (
                "import os\n"
                "print(sorted(os.listdir('/')))\n"
                f"print([os.path.exists(p) for p in ({str(canary)!r}, {str(home)!r}, {str(SOLUTIONS)!r}, "
                f"{str(ROOT / 'autograder')!r}, '/srv', '/opt', '/home', '/mnt', '/var')])\n"
                "print(sorted(os.listdir('/tmp/submission')), os.getcwd(), os.environ['HOME'])\n"
                "print(sorted(k for k in os.environ if k.startswith(('CI', 'PYTHONPATH', 'VIRTUAL_ENV', 'SSH'))))"
            ),
        )
    finally:
        canary.unlink()
        home.unlink()
    listing, exists, workspace, leaked_env = stdout(notebook, 0).splitlines()
    visible = set(ast.literal_eval(listing))
    assert visible <= {
        "usr",
        "bin",
        "sbin",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "etc",
        "tmp",
        "proc",
        "dev",
        "run",
        "assignment",
        *{Path(p).parts[1] for p in (sys.prefix, sys.base_prefix, os.path.realpath(sys.prefix))},
    }, visible
    # A folder such as /home is there only as the way to the venv bound at its own path (a checkout
    # in a home folder), never with anything else in it: the canary in $HOME is not there.
    holds_the_venv = [
        any(folder.startswith(p + os.sep) for folder in interpreter_folders())
        for p in ("/srv", "/opt", "/home", "/mnt", "/var")
    ]
    assert exists == str([False] * 4 + holds_the_venv)
    assert ast.literal_eval(workspace.split("]")[0] + "]") == sorted(SHIPPED_MODULES)
    assert workspace.endswith("/tmp/submission /tmp/home")
    assert leaked_env == "[]"


def test_kernel_writes_only_to_scratch(session_factory):
    """A kernel cannot write outside its scratch space."""
    targets = ["/usr/x", "/etc/x", f"{sys.prefix}/x", "/assignment/x", "/x"]
    notebook = run(
        session_factory(),
        (
            "results = []\n"
            f"for target in {targets!r}:\n"
            "    try:\n"
            "        open(target, 'w').write('x'); results.append('wrote')\n"
            "    except OSError as e:\n"
            "        results.append(type(e).__name__)\n"
            "open('/tmp/submission/mine.txt', 'w').write('ok')\n"
            "print(results)"
        ),
    )
    assert "wrote" not in stdout(notebook, 0)
    assert not any(Path(t).exists() for t in targets[:3])


@pytest.mark.skipif(os.geteuid() != 0, reason="the kernel runs as the grader's own user when the grader is not root")
def test_root_graders_kernel_is_unprivileged(session_factory):
    """A kernel of a root grader runs unprivileged."""
    notebook = run(
        session_factory(),
        (
            "import os\n"
            "status = open('/proc/self/status').read()\n"
            "print(os.getuid(), status.split('CapEff:')[1].split()[0], status.split('NoNewPrivs:')[1].split()[0])\n"
            "try:\n    os.setuid(0)\nexcept OSError as e:\n    print(type(e).__name__)"
        ),
    )
    uid, capabilities, no_new_privs = stdout(notebook, 0).splitlines()[0].split()
    assert int(uid) != 0 and int(capabilities, 16) == 0 and no_new_privs == "1"
    assert "PermissionError" in stdout(notebook, 0)


# ---------------------------------------------------------------------------------------
# What a kernel can reach.
# ---------------------------------------------------------------------------------------
def test_no_loopback_port_of_the_host_answers(session_factory):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    port, knocks, stop = server.getsockname()[1], [], threading.Event()

    def serve():
        while not stop.is_set():
            try:
                connection, _ = server.accept()
                knocks.append(connection.recv(64))
                connection.close()
            except OSError:
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        # The server answers here, on the host...
        with socket.create_connection(("127.0.0.1", port), timeout=5) as probe:
            probe.sendall(b"host")
        notebook = run(
            session_factory(),
            (f"import socket\ns = socket.socket(); s.settimeout(2)\nprint(s.connect_ex(('127.0.0.1', {port})))"),
        )
        time.sleep(0.5)
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()
    # ... and not from the kernel.
    assert stdout(notebook, 0).strip() != "0"
    assert knocks == [b"host"]


LISTENING = """
import os, sys, time
listening = []
for table in ('/proc/net/tcp', '/proc/net/tcp6', '/proc/net/udp', '/proc/net/udp6'):
    for line in open(table).read().splitlines()[1:]:
        fields = line.split()
        if fields[3] in ('0A', '07'):  # TCP LISTEN, an unconnected UDP socket
            listening.append((table, int(fields[1].split(':')[1], 16)))
print(listening)
child = os.fork()
if child == 0:
    print('from a forked child')
    sys.stdout.flush()
    os._exit(0)
os.waitpid(child, 0)  # a child blocked on its output never ends: the cell runs into its timeout
print('child done')
"""


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "fresh"])
def test_kernel_opens_no_port_fork_cannot_hang(session_factory, fork):
    """ipykernel's loopback port for forked children's output is not opened: a port scan inside
    the sandbox finds nothing, and a child that prints does not block."""
    notebook = run(session_factory(fork=fork), LISTENING)
    listening, done = stdout(notebook, 0).strip().splitlines()[-2:]
    assert listening == "[]", listening
    assert done == "child done"
    assert "from a forked child" not in stdout(notebook, 0)


# ---------------------------------------------------------------------------------------
# Nothing carries from one notebook's kernel to the next.
# ---------------------------------------------------------------------------------------
LEAVE_BEHIND = """
import os, subprocess, sys, numpy
numpy.planted = 1
os.makedirs(os.path.join(os.environ['IPYTHONDIR'], 'profile_default', 'startup'), exist_ok=True)
open(os.path.join(os.environ['IPYTHONDIR'], 'profile_default', 'startup', '00-x.py'), 'w').write('PLANTED = 1')
os.makedirs('remat_lesson', exist_ok=True)
open('remat_lesson/__init__.py', 'w').write('PLANTED = 1')
open('remat_checks.py', 'a').write('\\nPLANTED = 1\\n')
open('/tmp/left-behind', 'w').write('x')
child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)
print(os.getpid(), child.pid)
"""
LOOK_FOR_IT = """
import os, numpy
import remat_lesson, remat_checks
print(hasattr(numpy, 'planted'), 'PLANTED' in globals(), hasattr(remat_lesson, 'PLANTED'), hasattr(remat_checks, 'PLANTED'),
      os.path.exists('/tmp/left-behind'), os.path.isdir('remat_lesson'))
print(os.getpid(), sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))
"""


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "fresh"])
def test_each_notebook_starts_afresh(session_factory, fork):
    session = session_factory(fork=fork)
    first = run(session, LEAVE_BEHIND)
    second = run(session, LOOK_FOR_IT)
    assert stdout(second, 0).splitlines()[0] == "False False False False False False", stdout(second, 0)
    kernel, processes = stdout(second, 0).splitlines()[1].split(" ", 1)
    left = set(ast.literal_eval(processes)) - {int(kernel), 1, 2}  # bwrap's init, the kernel host
    assert left == set(), f"processes of the first notebook still run: {left}"
    if fork:
        assert stdout(first, 0).split()[0] != kernel, "each notebook is a fork of its own"


def test_deep_tmpdir_keeps_sockets_short(tmp_path, assignment):
    """An instructor's TMPDIR may be deep (a cluster's job folder, macOS's /var/folders/...): a
    socket's path holds 107 bytes, so the sockets go to a private folder of /tmp's, removed with
    the session."""
    deep = tmp_path / ("a-deep-temporary-folder-" * 4) / "session"
    assert len(str(deep / "connection" / "kernel-1")) > 107
    session = SandboxSession(find_sandbox(Limits()), deep, assignment)
    try:
        sockets = session.connection
        assert sockets.parent == Path("/tmp") and sockets.stat().st_mode & 0o077 == 0
        assert stdout(run(session, "print(6 * 7)"), 0) == "42\n"
    finally:
        session.remove()
    assert not sockets.exists() and not deep.exists()
    short = Path(tempfile.mkdtemp(dir="/tmp")) / "session"
    near = SandboxSession(find_sandbox(Limits()), short, assignment)
    near.remove()
    assert near.connection == short / "connection"
    short.parent.rmdir()


def test_scratch_mounted_before_what_it_hides(monkeypatch):
    """The scratch space is mounted before the folders it would hide.

    A venv under the host's /tmp (a checkout in /tmp) is bound on top of the kernel's /tmp."""
    from autograder.kernel import sandbox as sandbox_module

    venv = "/tmp/a-checkout/.venv"
    monkeypatch.setattr(sandbox_module, "interpreter_folders", lambda: ["/usr", venv])
    argv = sandbox_module.Sandbox("bwrap", Limits()).argv(
        ["python"], assignment=Path("/x/assignment"), connection=Path("/x/connection"), env={}
    )
    tmpfs = argv.index("--tmpfs")
    assert argv[tmpfs + 1] == "/tmp"
    bind = next(i for i in range(len(argv) - 2) if argv[i] == "--ro-bind" and argv[i + 1 : i + 3] == [venv, venv])
    assert tmpfs < bind, "the tmpfs would hide the venv"
    assert argv[bind - 2 : bind] == ["--dir", "/tmp/a-checkout"], "its parent is made in the tmpfs"
    assert "/tmp" not in [argv[i + 1] for i, a in enumerate(argv) if a == "--dir"]
    assert sandbox_module.mounts_in_scratch() == [venv]


PLANT_BESIDE = """
import os
print(open({marker!r}).read())
try:
    open({marker!r}, 'w').write('changed')
except OSError as error:
    print(type(error).__name__)
try:  # a root grader's kernel has another uid: bwrap's folders are not its to write
    open(os.path.join(os.path.dirname({folder!r}), 'planted.py'), 'w').write('x')
    os.makedirs(os.path.join(os.path.dirname({folder!r}), 'more', 'deeper'))
    print(sorted(os.listdir(os.path.dirname({folder!r}))))
except PermissionError:
    print('not writable')
"""
LOOK_BESIDE = """
import os
print(open({marker!r}).read(), sorted(os.listdir(os.path.dirname({folder!r}))))
"""


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "fresh"])
def test_venv_under_tmp_read_only_plants_gone(session_factory, monkeypatch, fork):
    """A venv under /tmp is seen read-only and kept while what was planted beside it goes."""
    from autograder.kernel import sandbox as sandbox_module

    checkout = Path("/tmp") / f"performance05-checkout-{uuid.uuid4().hex[:8]}"
    folder = checkout / ".venv"
    folder.mkdir(parents=True)
    (folder / "marker.txt").write_text("shipped")
    real = sandbox_module.interpreter_folders
    monkeypatch.setattr(sandbox_module, "interpreter_folders", lambda: [*real(), str(folder)])
    names = {"marker": str(folder / "marker.txt"), "folder": str(folder)}
    try:
        session = session_factory(fork=fork)
        first = run(session, PLANT_BESIDE.format(**names))
        second = run(session, LOOK_BESIDE.format(**names))
        planted = "not writable" if os.geteuid() == 0 else "['.venv', 'more', 'planted.py']"
        assert stdout(first, 0).splitlines() == ["shipped", "OSError", planted], error(first, 0)
        assert stdout(second, 0).strip() == "shipped ['.venv']", error(second, 0)
        assert (folder / "marker.txt").read_text() == "shipped"
        assert sorted(p.name for p in checkout.iterdir()) == [".venv"], "nothing reached the host's folder"
    finally:
        shutil.rmtree(checkout)


NAMESPACES = """
import ctypes, errno, os, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
tried = {}
for name, call in [
    ("unshare user", lambda: libc.unshare(0x10000000)),
    ("unshare mount", lambda: libc.unshare(0x00020000)),
    ("setns", lambda: libc.setns(os.open("/proc/self/ns/net", os.O_RDONLY), 0)),
    ("shmget", lambda: libc.shmget(0, 4096, 0o1600)),
]:
    ctypes.set_errno(0)
    result = call()
    tried[name] = errno.errorcode.get(ctypes.get_errno(), "ok") if result == -1 else "ok"
# What stays allowed: threads (clone3 refused, so clone), fork, and a subprocess.
done = []
worker = threading.Thread(target=lambda: done.append(1)); worker.start(); worker.join()
pid = os.fork()
if pid == 0:
    os._exit(7)
tried["thread"] = "ok" if done else "failed"
tried["fork"] = "ok" if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 7 else "failed"
tried["subprocess"] = subprocess.run(["true"]).returncode
print(sorted(tried.items()))
"""


def test_kernel_no_namespace_still_runs_threads(session_factory):
    """A kernel makes no namespace and still runs threads and processes.

    No user, mount or other namespace, no setns, no System V memory: in a user namespace of its
    own a kernel could mount an unsized tmpfs past every limit, or list the sealed compile cache."""
    notebook = run(session_factory(), NAMESPACES)
    assert stdout(notebook, 0).strip() == str(
        sorted(
            {
                "unshare user": "EPERM",
                "unshare mount": "EPERM",
                "setns": "EPERM",
                "shmget": "EPERM",
                "thread": "ok",
                "fork": "ok",
                "subprocess": 0,
            }.items()
        )
    )


def test_kernel_cannot_end_its_host(session_factory):
    """A kernel's signals do not reach its host: the sandbox's first process takes none it does not
    handle (SIGKILL, SIGINT, SIGTERM), so the next notebook's kernel comes from the same host."""
    session = session_factory()
    run(session, "print(1)")
    first = session.host.process.pid
    sent = run(
        session,
        "import os, signal\nfor number in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):\n    os.kill(1, number)\n"
        "print(os.getppid())",
    )
    assert stdout(sent, 0).strip() == "1", sent.cells[0].outputs  # its parent, the host, is the sandbox's first
    later = run(session, "print(6 * 7)")
    assert stdout(later, 0).strip() == "42"
    assert session.host.process.pid == first


def test_an_endless_kernel_is_interrupted(session_factory):
    notebook = run(
        session_factory(), "import time\nwhile True:\n    time.sleep(0.01)", "print('next cell runs')", timeout=3
    )
    assert "KeyboardInterrupt" in error(notebook, 0) or "Timeout" in error(notebook, 0)
    assert stdout(notebook, 1).strip() == "next cell runs"


# ---------------------------------------------------------------------------------------
# Limits: each one named, each one costing only its own kernel.
# ---------------------------------------------------------------------------------------
def test_memory_past_the_limit_is_a_memory_error(session_factory):
    notebook = run(session_factory(limits={"memory": "2G"}), "x = bytearray(3 * 2**30)", "print('still here')")
    assert error(notebook, 0).startswith("MemoryError")
    assert stdout(notebook, 1).strip() == "still here"


def test_fork_bomb_stops_own_kernel(session_factory):
    """A fork bomb stops its own kernel and says so."""
    session = session_factory(limits={"processes": 16})
    with pytest.raises(DeadKernelError):
        run(session, "import os\nwhile True:\n    os.fork()", timeout=60)
    assert session.host is None, "the sandbox of the bomb is gone, with every process in it"
    # The next kernel of the same student starts and runs.
    assert stdout(run(session, "print('after')"), 0).strip() == "after"


def test_file_and_scratch_limits_raise_os_errors(session_factory):
    """Files and scratch space past their limits fail with OS errors."""
    notebook = run(
        session_factory(limits={"file_size": "8M", "scratch": "32M"}),
        (
            "import errno\nresults = []\n"
            "for name, size in (('big', 16 * 2**20), ('a', 7 * 2**20), ('b', 7 * 2**20), ('c', 7 * 2**20), ('d', 7 * 2**20), ('e', 7 * 2**20)):\n"
            "    try:\n"
            "        open('/tmp/' + name, 'wb').write(b'x' * size); results.append('ok')\n"
            "    except OSError as e:\n"
            "        results.append(errno.errorcode[e.errno])\n"
            "print(results)"
        ),
    )
    results = ast.literal_eval(stdout(notebook, 0))
    assert results[0] == "EFBIG" and "ENOSPC" in results[1:], results


def test_grader_cuts_output_past_limit(session_factory):
    """Printed output past the limit is cut by the grader.

    The one output cap is the grader's (a kernel's code could undo one set inside it)."""
    from autograder.notebook.execute import NotebookContext, SandboxedExecute

    session = session_factory(limits={"output": "1M"})
    notebook = _notebook("for _ in range(8):\n    print('x' * 2**20)", "print('after')")
    executor = SandboxedExecute(
        context=NotebookContext(session),
        timeout=60,
        kernel_name="python3",
        extra_arguments=QUIET,
    )
    executor.preprocess(notebook, {})
    text = stdout(notebook, 0)
    assert len(text) < 2 << 20 and "output cut" in text
    assert stdout(notebook, 1) == "after\n"  # the next cell has its own room


# ---------------------------------------------------------------------------------------
# The compile cache: read, never written, by a learner's kernel.
# ---------------------------------------------------------------------------------------
COUNT_HITS = """
from jax._src import monitoring
HITS = []
monitoring.register_event_listener(lambda event, **kw: HITS.append(event) if event == '/jax/compilation_cache/cache_hits' else None)
"""


def test_kernel_reads_cache_read_only(session_factory, tmp_path):
    """A kernel loads from the cache and cannot write to it."""
    cache, work = tmp_path / "cache", tmp_path / "instructor"
    work.mkdir()
    nbformat.write(_notebook(DOUBLE), work / "fill.ipynb")
    filled = execute_notebook(work / "fill.ipynb", timeout=120, env=JAX_CACHE.writing(str(cache)))
    assert filled.error is None and any(cache.iterdir()), "the trusted kernel wrote no cache entry"
    before = sorted(p.name for p in cache.iterdir())
    session = session_factory(cache=cache, env=JAX_CACHE.reading("/cache"))
    write = (
        "import os\ntry:\n    open(os.path.join(os.environ['JAX_COMPILATION_CACHE_DIR'], 'planted-cache'), 'wb').write(b'x')\n"
        "    print('written')\nexcept OSError as error:\n    print('refused', type(error).__name__)"
    )
    compile_cache.seal(cache)
    listing = (
        "import os\ntry:\n    print(sorted(os.listdir('/cache')))\nexcept OSError as error:\n"
        "    print('refused', type(error).__name__)"
    )
    notebook = run(session, COUNT_HITS, DOUBLE, "print(len(HITS))", write, listing)
    assert stdout(notebook, 1).strip() == "52.5"
    assert int(stdout(notebook, 2)) >= 1, "the program the instructor's kernel compiled was compiled again"
    assert stdout(notebook, 3).startswith("refused"), stdout(notebook, 3)
    # Sealed: an entry opens by its key (the hit above), but which programs it holds stays unknown.
    assert stdout(notebook, 4).startswith("refused PermissionError"), stdout(notebook, 4)
    os.chmod(cache, 0o700)  # listable again, for the check below and the removal of tmp_path
    assert sorted(p.name for p in cache.iterdir()) == before


def test_foreign_machine_cache_not_used(tmp_path):
    """A cache filled on another kind of machine is not used."""
    jax = LESSON.compiler_distributions
    assert compile_cache.write_cache({"jit_f-abc-cache": b"native code"}, "another-cpu", tmp_path / "a", jax) is None
    here = compile_cache.write_cache(
        {"jit_f-abc-cache": b"native code"}, compile_cache.host_signature(jax), tmp_path / "b", jax
    )
    assert here == tmp_path / "b" / compile_cache.ENTRIES
    assert (here / "jit_f-abc-cache").read_bytes() == b"native code"
    os.chmod(here, 0o700)  # sealed: listable again for the removal of tmp_path


# ---------------------------------------------------------------------------------------
# Where no sandbox works: stop before grading anyone, and say how to fix it.
# ---------------------------------------------------------------------------------------
def test_forbidden_sandbox_stops_with_fix(tmp_path, monkeypatch):
    """A host that forbids the sandbox stops grading with the fix."""
    broken = tmp_path / "bwrap"
    broken.write_text(
        "#!/bin/sh\n[ \"$1\" = --help ] && exit 0\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"
    )
    broken.chmod(broken.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr("autograder.kernel.sandbox.bwrap_candidates", lambda: [str(broken)])
    with pytest.raises(SandboxUnavailable) as raised:
        find_sandbox()
    message = str(raised.value)
    assert "setting up uid map: Permission denied" in message
    assert "unprivileged_userns" in message and "--unsafe-no-sandbox" in message
    subs = tmp_path / "subs" / "ann"
    subs.mkdir(parents=True)
    (subs / "01-understand.ipynb").write_bytes((RELEASE / "01-understand.ipynb").read_bytes())
    with pytest.raises(CannotGradeSafely):
        grade(tmp_path / "subs", tmp_path / "out")
    assert not (tmp_path / "out" / "course").exists(), "nothing is graded before the sandbox is proven"


def test_cli_exits_3_without_sandbox(tmp_path):
    """The command line exits 3 when no sandbox works."""
    subs = tmp_path / "subs" / "ann"
    subs.mkdir(parents=True)
    (subs / "01-understand.ipynb").write_bytes((RELEASE / "01-understand.ipynb").read_bytes())
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    code = (
        "import autograder.kernel.sandbox as s, sys\ns.bwrap_candidates = lambda: []\n"
        "from autograder.run.grade import main\nsys.exit(main(sys.argv[1:]))"
    )
    run_ = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "subs"), "--bundle", str(ROOT), "--out", str(tmp_path / "out")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run_.returncode == 3, run_.stdout + run_.stderr
    assert "nobody was graded" in run_.stderr and "bubblewrap" in run_.stderr


# ---------------------------------------------------------------------------------------
# The judge's NumPy-only process: NumPy and the standard library, and nothing else.
# ---------------------------------------------------------------------------------------
ESCAPES = """
import glob, importlib, importlib.util, os, subprocess, sys

ALLOWED = set(sys.stdlib_module_names) | {"numpy", "remat_checks", "__main__"}


def routes(site_folders, extension):
    tried = {}

    def attempt(label, action):
        try:
            action()
            tried[label] = "imported"
        except BaseException as error:
            tried[label] = type(error).__name__

    attempt("import statement", lambda: exec("import scipy.differentiate"))
    attempt("importlib", lambda: importlib.import_module("sympy"))
    attempt("__import__", lambda: __import__("scipy"))
    attempt("jax", lambda: __import__("jax"))
    sys.meta_path[:] = [finder for finder in sys.meta_path if type(finder).__name__ != "OnlyAllowed"]
    sys.modules.pop("scipy", None)
    attempt("import hook removed", lambda: importlib.import_module("scipy"))
    sys.path[:0] = site_folders + ["/usr/lib/python3/dist-packages"]
    importlib.invalidate_caches()
    attempt("site folders on the path", lambda: importlib.import_module("sympy"))
    spec = importlib.util.spec_from_file_location("_loaded_by_file", extension)
    attempt("a .so by its file", lambda: spec.loader.exec_module(importlib.util.module_from_spec(spec)))
    attempt("another python", lambda: subprocess.run(
        [sys.executable, "-S", "-c", "import sys; sys.path[:0] = %r; import scipy" % (site_folders,)], check=True
    ))
    found = sorted({name for folder in site_folders for name in os.listdir(folder) if not name.startswith("_")})
    tried["seen in the folders of packages"] = found
    tried["modules loaded"] = sorted({name.partition(".")[0] for name in sys.modules} - ALLOWED)
    return tried
"""


def test_numpy_only_offers_numpy_and_stdlib(tmp_path, assignment):
    """By every route an answer cell has: an import, importlib, __import__, the process's own
    import hook taken out, the host's package folders put on sys.path, an extension module loaded
    by its file, another Python: nothing but NumPy and the standard library loads."""
    import scipy

    from autograder.kernel.helpers import NumpyOnlyRunner, package_folders

    extension = next(Path(scipy.__file__).parent.rglob("*.so"))
    runner = NumpyOnlyRunner(find_sandbox(), tmp_path / "numpy-only", assignment=assignment)
    try:
        assert runner.request({"op": "load", "cell": 1, "source": ESCAPES}, 60) == {"loaded": True}
        answer = runner.request(
            {"op": "call", "cell": 1, "name": "routes", "args": [encode(package_folders()), str(extension)]}, 120
        )
    finally:
        runner.stop()
    assert "result" in answer, answer
    tried = decode(answer["result"])
    assert tried.pop("seen in the folders of packages") == ["numpy", "numpy.libs"], tried
    assert tried.pop("modules loaded") == [], tried
    assert all(outcome != "imported" for outcome in tried.values()), tried
    assert tried["another python"] == "CalledProcessError" and tried["a .so by its file"] in (
        "FileNotFoundError",
        "ImportError",
    ), tried


def test_unsandboxed_numpy_only_hook_refuses(tmp_path):
    """--unsafe-no-sandbox: only the hook stands, and it is an allow-list (SciPy, SymPy, JAX, and
    a module planted on the path, refused; the standard library and NumPy load)."""
    import subprocess
    import sys

    from autograder.kernel.helpers import sent_text

    (tmp_path / "planted.py").write_text("VALUE = 1\n")
    probe = (
        sent_text("wire.py", "confine.py", "numpy_runner.py")
        + f"\nimport sys\nonly_allowed()\nsys.path.insert(0, {str(tmp_path)!r})\nimport json, numpy, ctypes\n"
        "for name in ('scipy', 'sympy', 'jax', 'planted', 'IPython'):\n"
        "    try:\n        __import__(name)\n        print('imported', name)\n"
        "    except ModuleNotFoundError:\n        print('refused', name)\n"
    )
    run = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True, timeout=120)
    assert run.stdout.split("\n")[:-1] == [f"refused {n}" for n in ("scipy", "sympy", "jax", "planted", "IPython")], (
        run.stdout + run.stderr
    )


# ---------------------------------------------------------------------------------------
# The judge's program builder: each program built in a fork of its own, from the cells sent.
# ---------------------------------------------------------------------------------------
def _program_request(name: str, source: str) -> dict:
    return {
        "op": "program",
        "cells": {name: source},
        "target": {"$learner": name},
        "bind": None,
        "avals": [[[3], "float32"]],
    }


TAMPERING_CELL = """
import os
import jax

jax.vjp = None  # JAX's own function, rebound
for fd in range(3, 256):  # and a forged answer on every descriptor this process has
    try:
        os.write(fd, b'{"program": "forged"}\\n')
    except OSError:
        pass


def tampered(x):
    return x.sum()
"""


LINGERING_CELL = """
import os
import time

if os.fork() == 0:  # a process left behind, holding whatever the cell's process holds
    time.sleep(600)
    os._exit(0)


def lingering(x):
    return (x * x).sum()
"""


def test_builder_fork_cannot_reach_its_line(tmp_path, assignment):
    """A cell that rebinds JAX and writes a forged answer on every descriptor it has: that request
    is refused, nothing forged reaches the judge's line, and the next program, from a clean cell,
    is built by a fork that never saw the tampering: it is the program of its own cell. A cell that
    leaves a process behind holding the fork's answer line still gets its answer (well within the
    request's time), and that process is ended with its fork."""
    import numpy as np

    from autograder.adapters.jax_programs.helpers import ProgramBuilder
    from autograder.adapters.jax_programs.sandboxed import artifact_runner
    from autograder.sandboxed.wire import decode, encode

    builder = ProgramBuilder(find_sandbox(), tmp_path / "builder", assignment=assignment)
    try:
        tampered = builder.request(_program_request("tampered", TAMPERING_CELL), 120)
        clean = builder.request(_program_request("square", "def square(x):\n    return (x * x).sum()\n"), 120)
        lingering = builder.request(_program_request("lingering", LINGERING_CELL), 120)
    finally:
        builder.stop()
    assert "program" not in tampered, tampered
    assert "program" in clean and "program" in lingering, (clean, lingering)
    x = encode(np.array([1.0, 2.0, 3.0], np.float32))
    for answer in (clean, lingering):
        request = {"op": "grad", "program": answer["program"], "avals": [[[3], "float32"]], "inputs": [x]}
        assert np.allclose(decode(artifact_runner.answer(request)["result"]), [2.0, 4.0, 6.0])


def test_linked_folder_named_by_real_path(tmp_path):
    """A checkout whose .venv links to another's: the sandbox binds the real folders, so the
    program is named through them; its own name, a link itself in a venv, is kept."""
    from autograder.kernel.sandbox import _unlinked_program

    real = tmp_path / "real-venv" / "bin"
    real.mkdir(parents=True)
    (real / "python").symlink_to(sys.executable)
    (tmp_path / "checkout").mkdir()
    (tmp_path / "checkout" / ".venv").symlink_to(tmp_path / "real-venv")
    linked = str(tmp_path / "checkout" / ".venv" / "bin" / "python")
    assert _unlinked_program([linked, "-c", "pass"]) == [str(real / "python"), "-c", "pass"]
    assert _unlinked_program(["python3", "-c"]) == ["python3", "-c"]
