"""The judge's helper processes, each in a sandbox of its own, away from the gradebook and the kernel.

The core's own is `numpy_only`: a Python where nothing but NumPy and the standard library can be
imported, that runs a learner's answer cell alone and calls its function
(autograder/sandboxed/numpy_runner.py). An assignment's adapter adds its own (`Adapter.helpers`;
the JAX adapter's program builder and artifact runner, autograder/adapters/jax_programs/).

All run learner-made work (code, or a program it made), so all are confined like a kernel: the
same allow-list sandbox (sandbox.py: no network, no other process, nothing of the machine but
the interpreter), an unprivileged uid of their own when the grader is root, the kernel's limits.
The NumPy-only one sees no installed package but NumPy: every folder of packages is replaced by
one that holds NumPy alone (`NumpyOnlyRunner.masks`). They speak JSON lines (wire.py) over pipes,
and an answer is never more than data.

Every line has a deadline both ways: a helper that does not take a request (it stopped reading)
or does not answer it in time is ended, and so is one whose processes pass the kernel's limits
(a `HelperWatcher` looks at them as kernels.Watcher looks at a kernel's, with root and without);
the request then fails with the reason (HelperError), and the next one starts a new process.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

from autograder.course.errors import GraderError
from autograder.kernel.control_line import (
    BOOTSTRAP,
    PROGRAM_PLACEHOLDER,
    ControlLine,
    LineError,
    LineTimeout,
    LineViolation,
    program_text,
    start,
)
from autograder.kernel.process_limits import LimitWatcher, descendants, over_limits
from autograder.kernel.sandbox import ASSIGNMENT_MOUNT, CACHE, SCRATCH, Sandbox, kernel_env

#: The modules sent as text to another process live together, in autograder/sandboxed/.
SANDBOXED = Path(__file__).resolve().parents[1] / "sandboxed"
#: Seconds a helper may take to start (an adapter's may import a large library).
START_TIMEOUT = 120
#: Seconds a running helper may take to make itself fresh for a new notebook (HelperProcess.fresh).
FRESH_TIMEOUT = 10
#: The longest answer line taken from a helper.
MAX_LINE = 256 << 20
#: What the NumPy-only process sees of a folder of installed packages: NumPy and its own libraries.
NUMPY_ONLY_FOLDERS = ("numpy", "numpy.libs")


class HelperError(GraderError, RuntimeError):
    """A helper process did not answer (it died, or ran past its time); the message says which.
    `unrequested`: it sent a line the judge did not ask for (the notebook is then broken)."""

    def __init__(self, message: str, unrequested: bool = False):
        super().__init__(message)
        self.unrequested = unrequested


def program(runner: str | Path, *sent: str | Path) -> str:
    """The text a helper runs: wire.py, confine.py, the modules it needs, then the runner's module
    (control_line.BOOTSTRAP then calls its main() on the configuration)."""
    return sent_text("wire.py", "confine.py", *sent, runner)


def sent_text(*modules: str | Path) -> str:
    """These modules' texts (a name: of autograder/sandboxed/; a path: an adapter's), one after the
    other, as one program for another process (their `from __future__` lines left out: in one
    file only a first line may have one)."""
    future = "from __future__ import annotations"
    texts = [(SANDBOXED / module if isinstance(module, str) else module).read_text() for module in modules]
    return "\n\n".join("\n".join(line for line in text.splitlines() if line.strip() != future) for text in texts) + "\n"


def package_folders() -> list[str]:
    """Every folder of installed Python packages a sandbox shows (real paths): the virtual
    environment's, the base Python's and the system's site-packages and dist-packages."""
    import glob
    import site

    from autograder.kernel.sandbox import interpreter_folders

    found = set(site.getsitepackages())
    for root in (*interpreter_folders(), "/usr", "/usr/local"):
        found.update(glob.glob(os.path.join(root, "lib*", "python*", "*-packages")))
        found.update(glob.glob(os.path.join(root, "local", "lib*", "python*", "*-packages")))
    return sorted({os.path.realpath(path) for path in found if os.path.isdir(path)})


class HelperProcess:
    """One helper: started on the first request, answered line by line, stopped with the session."""

    #: Its program: a module of autograder/sandboxed/ by name, or an adapter's by path.
    runner: str | Path = ""
    #: The modules the runner uses, sent before it (after wire.py and confine.py).
    sent: tuple[str | Path, ...] = ()
    #: Whether it reads the run's compile cache (an adapter's that compiles learners' programs).
    uses_compile_cache = False
    #: Python's isolated mode (-I): no environment variable of Python's, no working directory on sys.path.
    isolated = True

    def __init__(
        self,
        sandbox: Sandbox,
        folder: Path,
        *,
        assignment: Path | None = None,
        cache: Path | None = None,
        cache_writable: bool = False,
        inherit: tuple[str, ...] = (),
        withhold: tuple[str, ...] = (),
        kernel_environment: dict[str, str] | None = None,
    ):
        self.sandbox, self.folder = sandbox, Path(folder)
        # The environment of the student's kernels: a helper that runs answer cells as the kernel
        # does (an adapter's program builder) takes it whole.
        self.kernel_environment = kernel_environment
        self.assignment, self.cache, self.cache_writable = assignment, cache, cache_writable
        self.inherit, self.withhold = inherit, withhold  # the grader's variables it inherits (sandbox.kernel_env)
        self.process: subprocess.Popen | None = None
        self.line: ControlLine | None = None
        self._ready_by: float | None = None  # launched, its "ready" line not read yet: by when it must come
        self.asked = False  # whether any request came (the reference run notes which helpers a notebook needs)
        self.retired = False  # its student's helpers were closed (JudgeHelpers.close): never started again
        self.hit: str | None = None  # why it was ended from another thread (a limit), said by its next request

    # -- what differs between helpers -----------------------------------------------------------
    def extra_env(self) -> dict[str, str]:
        return {}

    def masks(self) -> dict[str, Path]:
        return {}

    def config(self) -> dict:
        return {}

    def program(self) -> str:
        return program(self.runner, *self.sent)

    def environment(self, scratch: str) -> dict[str, str]:
        """The helper's whole environment (sandbox.kernel_env and the helper's own)."""
        return kernel_env(
            os.environ, scratch=scratch, extra=self.extra_env(), inherit=self.inherit, withhold=self.withhold
        )

    def connection(self) -> Path | None:
        """A folder of the grader's bound at /run/kernel (None: no such folder)."""
        return None

    # -- where things are, as the process sees them ---------------------------------------------
    def assignment_inside(self) -> str | None:
        """The shipped files' folder, as the process sees it (None when it has none)."""
        if self.assignment is None:
            return None
        return str(self.assignment) if self.sandbox.unsafe else ASSIGNMENT_MOUNT

    def cache_inside(self) -> str | None:
        """The compile cache's folder, as the process sees it (None when it has none)."""
        if self.cache is None:
            return None
        return str(self.cache) if self.sandbox.unsafe else CACHE

    # -- the process ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the process and wait until it says it is ready (HelperError if it does not)."""
        self.launch()
        self._await_ready()

    def launch(self) -> None:
        """Start the process without waiting for it: its start (a Python, JAX imported) then runs
        while the student's kernel works, and the first request waits for what is left of it."""
        if self.retired:  # a judge's thread still checking a stopped run's cell: nothing is started for it
            raise HelperError(f"the judge's {self.runner} was closed with its student's sandbox")
        self.folder.mkdir(parents=True, exist_ok=True)
        unsafe = self.sandbox.unsafe
        scratch = str(self.folder / "scratch") if unsafe else SCRATCH
        if unsafe:
            Path(scratch).mkdir(parents=True, exist_ok=True)
        uid = None if unsafe else self.sandbox.kernel_uid  # the student's own (sandbox.kernel_uid)
        env = self.environment(scratch)
        self.line = ControlLine(MAX_LINE, asker="the judge")
        config = {
            "uid": uid,
            "limits": self.sandbox.limits.as_dict(),
            "scratch": scratch,
            "env": env,
            **self.config(),
            **self.line.config(),
        }
        isolated = ["-I"] if self.isolated else []
        argv = self.sandbox.argv(
            [sys.executable, *isolated, "-c", BOOTSTRAP, PROGRAM_PLACEHOLDER],
            assignment=self.assignment,
            connection=self.connection(),
            cache=self.cache,
            cache_writable=self.cache_writable,
            env=env,
            masks=self.masks(),
        )
        self.process = start(
            argv,
            program_text(self.program(), config),
            self.line,
            env=env,
            cwd=scratch if unsafe else None,
            start_new_session=True,
        )
        self.hit = None
        self._ready_by = time.monotonic() + START_TIMEOUT

    def _await_ready(self, deadline: float = float("inf")) -> None:
        assert self._ready_by is not None and self.line is not None  # launched, its "ready" line not read yet
        deadline, self._ready_by = min(self._ready_by, deadline), None
        try:
            first = self.line.await_ready(deadline)
        except LineError:
            first = {}
        if first != {"ready": True}:
            self.stop()
            raise HelperError(f"the judge's {self.runner} did not start")

    def request(self, message: dict, timeout: float) -> dict:
        """One request and its answer, both within timeout (its start too, where it has not started);
        HelperError when the helper dies, stops reading, runs past timeout, was ended at a limit, or
        sends a line it was not asked for."""
        self.asked = True
        deadline = time.monotonic() + timeout
        if self.hit is not None:  # ended at a limit since its last request
            self._fail("")
        if self.process is None or self.process.poll() is not None:
            self.stop()
            try:
                self.launch()
            except LineError as error:  # its line closed by another thread while it started (a stop)
                raise HelperError(f"the judge's {self.runner} did not start: {error}") from None
        if self._ready_by is not None:  # launched now, or ahead of its first request
            self._await_ready(deadline)
        assert self.line is not None  # started
        try:
            answer = self.line.request(message, deadline)
        except LineTimeout as error:
            self._fail(f"{error} and was stopped")
        except LineViolation as error:
            self._fail(str(error), unrequested=True)
        except LineError as error:  # it ended
            self._fail(str(error))
        if set(answer) & {"unrequested"}:  # its learner's process said what it was not asked (numpy_runner)
            self._fail(str(answer["unrequested"])[:400], unrequested=True)
        return answer

    def fresh(self) -> None:
        """A new notebook begins: what its helper left (a limit hit between requests, processes its
        learner code left, files, loaded cells) is not the new notebook's. A running helper ends
        every other process of its sandbox and restores its workspace; one that does not answer
        in FRESH_TIMEOUT is ended (the next request starts a new one)."""
        self.hit = None
        if self.process is None or self.process.poll() is not None or self._ready_by is not None:
            return  # not started, gone (started anew when asked), or still starting: fresh already
        assert self.line is not None  # started
        try:
            answer = self.line.request({"op": "fresh"}, time.monotonic() + FRESH_TIMEOUT)
        except LineError:
            answer = {}
        if answer != {"fresh": True}:
            self.stop()

    def _fail(self, why: str, unrequested: bool = False) -> NoReturn:
        """End the process; HelperError saying why (the limit it was ended at, where it was)."""
        hit, self.hit = self.hit, None
        self.stop()
        raise HelperError(f"it was stopped because {hit}" if hit else why, unrequested=unrequested and not hit)

    def processes(self) -> list[int]:
        """The helper's processes as the grader sees them: its Python and whatever that started
        (bubblewrap's own process left out, as the kernel's watcher leaves out the host's)."""
        process = self.process
        if process is None:
            return []
        below = descendants(process.pid)
        return [process.pid, *below] if self.sandbox.unsafe else below

    def kill(self, why: str) -> None:
        """End the process now, from any thread (the watcher's, a watchdog's): its next or current
        request fails, saying why. Only signals: the line stays the requesting thread's to close."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        self.hit = why
        _kill_all(process.pid)

    def stop(self) -> None:
        if self.process is not None:
            _kill_all(self.process.pid)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self.process = None
            self._ready_by = None
        if self.line is not None:
            self.line.close()
            self.line = None


def _kill_all(pid: int) -> None:
    """SIGKILL to a helper's process, its group and everything below it (a child that left the group
    too); in a sandbox, its PID namespace goes with its first process.

    What is below is listed before anything is killed: bubblewrap's `--new-session` puts the
    sandbox's first process in a group of its own, and once bubblewrap is gone that process is no
    longer below it; nor does `--die-with-parent` end it where the grader is root (that process
    changed its uid, and bubblewrap may not signal another uid)."""
    below_pid = descendants(pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for below in below_pid:
        try:
            os.kill(below, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class HelperWatcher(LimitWatcher):
    """Ends a helper whose processes pass the kernel's limits (process_limits.over_limits), while
    its student's helpers are open."""

    def __init__(self, helpers: list[HelperProcess], limits):
        super().__init__(name="watch-helpers")
        self.helpers, self.limits = helpers, limits

    def look(self) -> bool:
        for helper in self.helpers:
            pids = helper.processes()
            hit = over_limits(pids, self.limits) if pids else None
            if hit:
                helper.kill(hit)
        return False


class NumpyOnlyRunner(HelperProcess):
    """Runs an answer cell alone, where nothing but NumPy and the standard library can be imported, and
    calls its functions."""

    runner = "numpy_runner.py"

    def masks(self) -> dict[str, Path]:
        """An allow-list of the file system: each folder of packages shows NumPy's folders, where
        it holds them, and nothing else (masks are bound in the order of their paths: a folder
        before what is bound inside it)."""
        if self.sandbox.unsafe:
            return {}
        only_numpy, empty = self.folder / "only-numpy", self.folder / "no-packages"
        empty.mkdir(parents=True, exist_ok=True)
        for name in NUMPY_ONLY_FOLDERS:
            (only_numpy / name).mkdir(parents=True, exist_ok=True)  # where the real ones are bound
        masks: dict[str, Path] = {}
        for folder in package_folders():
            kept = [name for name in NUMPY_ONLY_FOLDERS if os.path.isdir(os.path.join(folder, name))]
            masks[folder] = only_numpy if kept else empty
            for name in kept:
                masks[os.path.join(folder, name)] = Path(folder) / name
        return masks

    def config(self) -> dict:
        return {"assignment": self.assignment_inside()}


#: The core's own helpers, by name (an assignment's adapter adds its own: `Adapter.helpers`).
CORE_HELPERS: dict[str, type[HelperProcess]] = {"numpy_only": NumpyOnlyRunner}


def helper_names(added: Mapping[str, type]) -> tuple[str, ...]:
    """The names of the helpers a student has: the core's and those an adapter adds."""
    return (*CORE_HELPERS, *added)


class JudgeHelpers:
    """The helpers of one student (started when first needed, stopped with the student's session):
    the core's and those `added` (an adapter's), by name (`helpers["numpy_only"]`)."""

    def __init__(
        self,
        sandbox: Sandbox,
        folder: Path,
        assignment: Path,
        added: Mapping[str, type[HelperProcess]] | None = None,
        cache: Path | None = None,
        cache_writable: bool = False,
        inherit: tuple[str, ...] = (),
        withhold: tuple[str, ...] = (),
        kernel_environment: dict[str, str] | None = None,
    ):
        self.folder = Path(tempfile.mkdtemp(prefix="judge-", dir=folder))
        self._helpers: dict[str, HelperProcess] = {}
        for name, kind in {**CORE_HELPERS, **(added or {})}.items():
            reads = kind.uses_compile_cache
            self._helpers[name] = kind(
                sandbox,
                self.folder / name.replace("_", "-"),
                assignment=assignment,
                cache=cache if reads else None,
                cache_writable=cache_writable and reads,
                inherit=inherit,
                withhold=withhold,
                kernel_environment=kernel_environment,
            )
        self.watcher = HelperWatcher(list(self._helpers.values()), sandbox.limits)
        self.watcher.start()

    def __getitem__(self, name: str) -> HelperProcess:
        return self._helpers[name]

    def by_name(self) -> dict[str, HelperProcess]:
        return dict(self._helpers)

    def launch(self, names=None) -> None:
        """Start these processes now (all, without names), without waiting for them (see
        HelperProcess.launch); the others still start on their first request."""
        for name, helper in self._helpers.items():
            if (names is None or name in names) and helper.process is None:
                helper.launch()

    def fresh(self) -> None:
        """A new notebook's judging begins: each helper as no earlier notebook left it."""
        for helper in self.by_name().values():
            helper.fresh()

    def used(self) -> list[str]:
        """The helpers that got a request (since `forget_asked`)."""
        return [name for name, helper in self.by_name().items() if helper.asked]

    def forget_asked(self) -> None:
        """Count requests anew: the reference run keeps one session's helpers for several
        notebooks, and notes which ones each notebook asks."""
        for helper in self.by_name().values():
            helper.asked = False

    def end(self, why: str) -> None:
        """End every helper now, from any thread (a request in progress fails, saying why)."""
        for helper in self.by_name().values():
            helper.kill(why)

    def close(self) -> None:
        self.watcher.stop()
        for helper in self._helpers.values():
            helper.retired = True  # a request still under way (a stopped run's judge) starts none anew
            helper.stop()
        shutil.rmtree(self.folder, ignore_errors=True)
