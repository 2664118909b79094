"""The judge's helper processes, each in a sandbox of its own, away from the gradebook and the kernel.

- `artifacts`: a Python with JAX that runs the programs a learner's kernel handed over, on the
  judge's inputs, and reads their compiled memory plans (autograder/artifact_runner.py);
- `numpy_only`: a Python where JAX cannot be imported, that runs a learner's answer cell alone
  and calls its function (autograder/numpy_runner.py);
- `builder`: a Python with JAX that rebuilds a learner's function from its answer cells alone and
  exports its program for the artifact runner (autograder/program_builder.py): the kernel is never
  asked for a program.

Both run learner-made work, so both are confined like a kernel: the same allow-list sandbox
(sandbox.py: no network, no other process, nothing of the machine but the interpreter), an
unprivileged uid of their own when the grader is root, the kernel's limits. The NumPy-only one
sees no installed package but NumPy: every folder of packages is replaced by one that holds
NumPy alone (`NumpyOnlyRunner.masks`). They speak JSON lines
(wire.py) over pipes; a request that does not answer in time ends the process (the next
request starts a new one), and an answer is never more than data.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .sandbox import CACHE, SCRATCH, Sandbox, kernel_env, launch
from .wire import WireError, dumps, loads

HERE = Path(__file__).resolve().parent
#: Seconds a helper may take to start (the artifact runner imports JAX).
START_TIMEOUT = 120
#: The longest answer line taken from a helper.
MAX_LINE = 256 << 20
#: What the NumPy-only process sees of a folder of installed packages: NumPy and its own libraries.
NUMPY_ONLY_FOLDERS = ("numpy", "numpy.libs")


#: The helpers by name, as the reference run notes which ones each notebook's checks asked.
HELPER_NAMES = ("artifacts", "numpy_only", "builder")


class HelperError(RuntimeError):
    """A helper process did not answer (it died, or ran past its time); the message says which."""


def program(runner: str) -> str:
    """The text a helper runs: wire.py, confine.py, then the runner's module, then its main()."""
    return (
        sent_text("wire.py", "confine.py", runner)
        + "\nimport json as _json, sys as _sys\nmain(_json.loads(_sys.argv[1]))\n"
    )


def sent_text(*names: str) -> str:
    """These modules' texts, one after the other, as one program for another process (their
    `from __future__` lines left out: in one file only a first line may have one)."""
    future = "from __future__ import annotations"
    texts = [(HERE / name).read_text() for name in names]
    return "\n\n".join("\n".join(line for line in text.splitlines() if line.strip() != future) for text in texts) + "\n"


def package_folders() -> list[str]:
    """Every folder of installed Python packages a sandbox shows (real paths): the virtual
    environment's, the base Python's and the system's site-packages and dist-packages."""
    import glob
    import site

    from .sandbox import interpreter_folders

    found = set(site.getsitepackages())
    for root in (*interpreter_folders(), "/usr", "/usr/local"):
        found.update(glob.glob(os.path.join(root, "lib*", "python*", "*-packages")))
        found.update(glob.glob(os.path.join(root, "local", "lib*", "python*", "*-packages")))
    return sorted({os.path.realpath(path) for path in found if os.path.isdir(path)})


class HelperProcess:
    """One helper: started on the first request, answered line by line, stopped with the session."""

    runner = ""

    def __init__(
        self,
        sandbox: Sandbox,
        folder: Path,
        *,
        assignment: Path | None = None,
        cache: Path | None = None,
        cache_writable: bool = False,
    ):
        self.sandbox, self.folder = sandbox, Path(folder)
        self.assignment, self.cache, self.cache_writable = assignment, cache, cache_writable
        self.process: subprocess.Popen | None = None
        self._buffer = b""
        self._ready_by: float | None = None  # launched, its "ready" line not read yet: by when it must come
        self.asked = False  # whether any request came (the reference run notes which helpers a notebook needs)

    # -- what differs between helpers -----------------------------------------------------------
    def extra_env(self) -> dict[str, str]:
        return {}

    def masks(self) -> dict[str, Path]:
        return {}

    def config(self) -> dict:
        return {}

    # -- the process ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the process and wait until it says it is ready (HelperError if it does not)."""
        self.launch()
        self._await_ready()

    def launch(self) -> None:
        """Start the process without waiting for it: its start (a Python, JAX imported) then runs
        while the student's kernel works, and the first request waits for what is left of it."""
        self.folder.mkdir(parents=True, exist_ok=True)
        unsafe = self.sandbox.unsafe
        scratch = str(self.folder / "scratch") if unsafe else SCRATCH
        if unsafe:
            Path(scratch).mkdir(parents=True, exist_ok=True)
        uid = None if unsafe else self.sandbox.kernel_uid  # the student's own (sandbox.kernel_uid)
        cache = None if self.cache is None else (str(self.cache) if unsafe else CACHE)
        env = kernel_env(os.environ, scratch=scratch, cache=cache, extra=self.extra_env())
        config = {"uid": uid, "limits": self.sandbox.limits.as_dict(), **self.config()}
        command = [sys.executable, "-I", "-c", program(self.runner), json.dumps(config)]
        argv = self.sandbox.argv(
            command,
            assignment=self.assignment,
            connection=None,
            cache=self.cache,
            cache_writable=self.cache_writable,
            env=env,
            masks=self.masks(),
        )
        self.process = launch(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=scratch if unsafe else None,
            start_new_session=True,
        )
        self._buffer = b""
        self._ready_by = time.monotonic() + START_TIMEOUT

    def _await_ready(self) -> None:
        deadline, self._ready_by = self._ready_by, None
        first = self._read(deadline)
        if first.get("ready") is not True:
            self.stop()
            raise HelperError(f"the judge's {self.runner} did not start")

    def request(self, message: dict, timeout: float) -> dict:
        """One request and its answer; HelperError when the helper dies or runs past timeout."""
        self.asked = True
        if self.process is None or self.process.poll() is not None:
            self.start()
        elif self._ready_by is not None:  # launched ahead of its first request
            self._await_ready()
        try:
            self.process.stdin.write((dumps(message) + "\n").encode())
            self.process.stdin.flush()
        except (BrokenPipeError, OSError) as error:
            self.stop()
            raise HelperError(f"the judge's helper process is gone ({error})") from None
        return self._read(time.monotonic() + timeout)

    def _read(self, deadline: float) -> dict:
        fd = self.process.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.stop()
                    raise HelperError("it ran past its time limit and was stopped")
                if not selector.select(min(left, 1.0)):
                    continue
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    self.stop()
                    raise HelperError("the process ended (it crashed, or ran into a limit)")
                self._buffer += chunk
                if len(self._buffer) > MAX_LINE:
                    self.stop()
                    raise HelperError("its answer was larger than the judge takes")
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            answer = loads(line)
        except WireError as error:
            self.stop()
            raise HelperError(f"its answer was not readable ({error})") from None
        if not isinstance(answer, dict):
            raise HelperError("its answer was not a message")
        return answer

    def stop(self) -> None:
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
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
            self._ready_by = None


class ArtifactRunner(HelperProcess):
    """Runs exported programs on the judge's inputs; compiles them for their memory plans."""

    runner = "artifact_runner.py"

    def extra_env(self) -> dict[str, str]:
        from .compile_cache import reading_env, writing_env

        if self.cache is None:
            return {}
        inside = str(self.cache) if self.sandbox.unsafe else CACHE
        return writing_env(inside) if self.cache_writable else reading_env(inside)


class NumpyOnlyRunner(HelperProcess):
    """Runs an answer cell alone, where JAX cannot be imported, and calls its functions."""

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
        return {"assignment": "/assignment" if not self.sandbox.unsafe else str(self.assignment)}


class ProgramBuilder(HelperProcess):
    """Rebuilds a learner's function from its answer cells and exports its program (never runs it)."""

    runner = "program_builder.py"

    def config(self) -> dict:
        return {"assignment": "/assignment" if not self.sandbox.unsafe else str(self.assignment)}


class JudgeHelpers:
    """The helpers of one student (started when first needed, stopped with the student's session)."""

    def __init__(
        self, sandbox: Sandbox, folder: Path, assignment: Path, cache: Path | None = None, cache_writable: bool = False
    ):
        self.folder = Path(tempfile.mkdtemp(prefix="judge-", dir=folder))
        self.artifacts = ArtifactRunner(sandbox, self.folder / "artifacts", cache=cache, cache_writable=cache_writable)
        self.numpy_only = NumpyOnlyRunner(sandbox, self.folder / "numpy-only", assignment=assignment)
        self.builder = ProgramBuilder(sandbox, self.folder / "builder", assignment=assignment)

    def by_name(self) -> dict[str, HelperProcess]:
        return {name: getattr(self, name) for name in HELPER_NAMES}  # the attributes bear the names

    def launch(self, names=HELPER_NAMES) -> None:
        """Start these processes now, without waiting for them (see HelperProcess.launch); the
        others still start on their first request."""
        for name, helper in self.by_name().items():
            if name in names and helper.process is None:
                helper.launch()

    def used(self) -> list[str]:
        """The helpers that got a request."""
        return [name for name, helper in self.by_name().items() if helper.asked]

    def close(self) -> None:
        self.artifacts.stop()
        self.numpy_only.stop()
        self.builder.stop()
        shutil.rmtree(self.folder, ignore_errors=True)
