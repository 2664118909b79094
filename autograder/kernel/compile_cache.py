"""One XLA compile cache for a whole grading run, filled by the instructor's notebooks only.

Every submission compiles the same programs: the lesson's network, the hidden tests' seeded
sizes, the shipped sweep. Compiling them again for each student is most of a notebook's own
time and none of its grading. So the reference run (autograder/run/reference.py: the course's
source notebooks, solutions and hidden tests, before the first student) keeps every program
it compiles in JAX's persistent compilation cache, and every student kernel then gets that
cache:

- read-only, and with writing switched off (a minimum compile time no compile reaches), so
  no submission can put an executable where another student's kernel would load it;
- only on a machine like the one that filled it (same CPU model and flags, same jax and
  jaxlib): an XLA:CPU executable is native code for the CPU it was compiled on;
- sealed (`seal`): an entry opens by its key, the hash of a program and its options, which JAX
  computes from a program the kernel compiles, but the folder cannot be listed, so no kernel
  learns which programs the instructor's notebooks compiled (their names and the hidden
  tests' shapes are in the entries' metadata).

A program the source notebooks never compiled (a learner's own variant) misses the cache and
compiles as usual, so grades do not depend on it; only the seconds do.
"""

from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path

#: A cache written into a folder: its executables in ENTRIES, what kind of machine compiled them in HOST.
ENTRIES, HOST = "entries", "host"
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


def _common(folder: str | Path) -> dict[str, str]:
    return {
        "JAX_COMPILATION_CACHE_DIR": str(folder),
        # By default JAX also points XLA's autotuning cache into the folder, which puts the
        # folder's path in every key: the kernels that fill and read it see different paths.
        "JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES": "none",
        # XLA:CPU logs a feature-list "mismatch" for each executable it loads (it compares
        # tuning flags the host list never shows); host_signature() is the real check.
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }


def writing_env(folder: str | Path) -> dict[str, str]:
    """Environment of a trusted kernel that fills the cache: keep every compile."""
    return {
        **_common(folder),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }


def reading_env(folder: str | Path) -> dict[str, str]:
    """Environment of a student kernel: load from the cache, never write to it."""
    return {**_common(folder), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": NEVER}


def write_cache(entries: dict[str, bytes], host: str, folder: Path) -> Path | None:
    """A cache's entries (sealed) and host written into folder; the entries folder when a kernel
    here may use it (`usable_cache`)."""
    (folder / ENTRIES).mkdir(parents=True)
    for name, data in entries.items():
        (folder / ENTRIES / name).write_bytes(data)
    (folder / HOST).write_text(host)
    seal(folder / ENTRIES)
    return usable_cache(folder)


def usable_cache(folder: Path) -> Path | None:
    """The entries of the cache written in folder, when it was filled on a machine like this one."""
    host, entries = folder / HOST, folder / ENTRIES
    if not host.is_file() or not entries.is_dir():
        return None
    return entries if host.read_text().strip() == host_signature() else None


#: A sealed folder: its owner may add entries (the reference run never writes here) and anyone
#: may open an entry by name, but nobody lists it. JAX reads an entry by its key only (without a
#: size limit it never lists the folder).
SEALED = 0o311


def seal(entries: Path) -> None:
    """Make the cache's entries readable by name only: each file read-only, the folder unlistable."""
    for entry in entries.iterdir():
        os.chmod(entry, 0o444)
    os.chmod(entries, SEALED)


def unseal(folder: Path) -> None:
    """Make the sealed caches under folder listable again, so that they can be removed."""
    for entries in folder.glob(f"cache-*/{ENTRIES}"):
        os.chmod(entries, 0o700)
