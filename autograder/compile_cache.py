"""One XLA compile cache for a whole grading run, filled by the instructor's notebooks only.

Every submission compiles the same programs: the lesson's network, the hidden tests' seeded
sizes, the shipped sweep. Compiling them again for each student is most of a notebook's own
time and none of its grading. So, before the first student, the grader runs the course's
source notebooks (solutions and hidden tests, in autograde mode) with JAX's persistent
compilation cache switched on, and every student kernel then gets that cache:

- read-only, and with writing switched off (a minimum compile time no compile reaches), so
  no submission can put an executable where another student's kernel would load it;
- only on a machine like the one that filled it (same CPU model and flags, same jax and
  jaxlib): an XLA:CPU executable is native code for the CPU it was compiled on.

A program the source notebooks never compiled (a learner's own variant) misses the cache and
compiles as usual, so grades do not depend on it; only the seconds do.
"""
from __future__ import annotations

import hashlib
import platform
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .paths import ASSIGNMENT

#: Where the cache travels inside a grading task's template (relative paths).
TEMPLATE_FOLDER = "compile-cache"
ENTRIES = f"{TEMPLATE_FOLDER}/entries"
HOST = f"{TEMPLATE_FOLDER}/host"
#: A minimum compile time no compile reaches: the kernel reads the cache and never writes it.
NEVER = "1e9"


def host_signature() -> str:
    """What decides whether an executable compiled here may run there."""
    import jax
    import jaxlib

    model, flags = "", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            elif key.strip() in ("flags", "Features") and not flags:
                flags = " ".join(sorted(value.split()))
    except OSError:
        pass
    text = "\n".join((platform.machine(), model, flags, jax.__version__, jaxlib.__version__))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _common(folder: Path) -> dict[str, str]:
    return {
        "JAX_COMPILATION_CACHE_DIR": str(folder),
        # By default JAX also points XLA's autotuning cache into the folder, which puts the
        # folder's path in every key: the kernels that fill and read it see different paths.
        "JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES": "none",
        # XLA:CPU logs a feature-list "mismatch" for each executable it loads (it compares
        # tuning flags the host list never shows); host_signature() is the real check.
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }


def writing_env(folder: Path) -> dict[str, str]:
    """Environment of a trusted kernel that fills the cache: keep every compile."""
    return {
        **_common(folder),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }


def reading_env(folder: Path) -> dict[str, str]:
    """Environment of a student kernel: load from the cache, never write to it."""
    return {**_common(folder), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": NEVER}


@dataclass
class Filled:
    """What one source notebook left in the cache."""

    notebook: str
    host: str
    entries: dict[str, bytes] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None


def fill_from_source(notebook: str, template: dict[str, bytes], timeout: int = 300) -> Filled:
    """Run one source notebook of the template in autograde mode, caching every compile.

    A grading task like the others (it runs on a worker, so the executables suit the workers).
    """
    from .execute import execute_notebook

    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="performance-05-cache-"))
    try:
        work, cache = scratch / "source", scratch / "cache"
        prefix = f"source/{ASSIGNMENT}/"
        for relative, data in template.items():
            if relative.startswith(prefix):
                (work / relative[len(prefix):]).parent.mkdir(parents=True, exist_ok=True)
                (work / relative[len(prefix):]).write_bytes(data)
        env = {"NBGRADER_EXECUTION": "autograde", "REMAT_LESSON_RUNS_DIR": str(scratch / "runs"), **writing_env(cache)}
        try:
            run = execute_notebook(work / notebook, timeout=timeout, env=env)
        except Exception as error:  # no kernel, say: grading goes on without these entries
            return Filled(notebook, host_signature(), {}, time.perf_counter() - started, f"{type(error).__name__}: {error}")
        entries = {p.name: p.read_bytes() for p in sorted(cache.glob("*")) if p.is_file()} if cache.is_dir() else {}
        # A failing source cell still leaves good entries; say so, keep them.
        error = None if run.error is None else f"cell {run.failed_cell} failed: {str(run.error).strip().splitlines()[-1]}"
        return Filled(notebook, host_signature(), entries, time.perf_counter() - started, error)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def into_template(template: dict[str, bytes], filled: list[Filled], progress=None) -> dict[str, bytes]:
    """The template with the cache added (entries from one kind of host only)."""
    say = progress.note if progress is not None else (lambda line: None)
    for item in filled:
        if item.error:
            say(f"compile cache: {item.notebook} did not run cleanly ({item.error}); grading goes on")
    usable = [f for f in filled if f.entries]
    if not usable:
        say("compile cache: empty; every kernel compiles for itself")
        return template
    host = usable[0].host
    merged = dict(template)
    for item in usable:
        if item.host != host:
            continue  # filled on a different kind of machine: not mixed in
        for name, data in item.entries.items():
            merged[f"{ENTRIES}/{name}"] = data
    merged[HOST] = host.encode()
    count = sum(1 for key in merged if key.startswith(ENTRIES + "/"))
    size = sum(len(v) for k, v in merged.items() if k.startswith(ENTRIES + "/"))
    say(f"compile cache: {count} executables ({size / 1e6:.1f} MB) from the source notebooks, "
        f"{sum(f.seconds for f in filled):.1f} s of work")
    return merged


def usable_cache(course: Path) -> Path | None:
    """The cache folder a task unpacked into course, when it was filled on a machine like this one."""
    host, entries = course / HOST, course / ENTRIES
    if not host.is_file() or not entries.is_dir():
        return None
    return entries if host.read_text().strip() == host_signature() else None
