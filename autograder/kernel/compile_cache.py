"""One compile cache for a whole grading run, filled by the instructor's notebooks only.

Where an assignment's notebooks compile programs (a JAX course: its adapter declares the
compiler's cache, `Adapter.compile_cache`), every submission compiles the same ones: the
assignment's own, the hidden tests' seeded sizes. Compiling them again for each student is most
of a notebook's own time and none of its grading. So the reference run (autograder/run/reference.py:
the course's source notebooks, solutions and hidden tests, before the first student) keeps every
program it compiles in the compiler's persistent cache, and every student kernel then gets that
cache:

- read-only, and with writing switched off (the adapter's reading environment), so no
  submission can put an executable where another student's kernel would load it;
- only on a machine like the one that filled it (same CPU model and flags, same releases of the
  compiler's distributions): an executable is native code for the CPU it was compiled on;
- sealed (`seal`): an entry opens by its key, the hash of a program and its options, which the
  compiler computes from a program the kernel compiles, but the folder cannot be listed, so no
  kernel learns which programs the instructor's notebooks compiled (their names and the hidden
  tests' shapes are in the entries' metadata).

A program the source notebooks never compiled (a learner's own variant) misses the cache and
compiles as usual, so grades do not depend on it; only the seconds do. An assignment whose
adapter declares no cache (the core alone) has none.
"""

from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path

#: A cache written into a folder: its executables in ENTRIES, what kind of machine compiled them in HOST.
ENTRIES, HOST = "entries", "host"


def host_signature(distributions: tuple[str, ...] = ()) -> str:
    """What decides whether an executable compiled here may run there: the machine, its CPU model
    and flags, and the release of each of the compiler's distributions (an adapter's
    `compiler_distributions`, read from their metadata: nothing is imported)."""
    from importlib import metadata

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
    versions = []
    for name in distributions:
        try:
            versions.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name} absent")
    text = "\n".join((platform.machine(), model, flags, *versions))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def write_cache(entries: dict[str, bytes], host: str, folder: Path, distributions: tuple[str, ...]) -> Path | None:
    """A cache's entries (sealed) and host written into folder; the entries folder when a kernel
    here may use it (`usable_cache`)."""
    (folder / ENTRIES).mkdir(parents=True)
    for name, data in entries.items():
        (folder / ENTRIES / name).write_bytes(data)
    (folder / HOST).write_text(host)
    seal(folder / ENTRIES)
    return usable_cache(folder, distributions)


def usable_cache(folder: Path, distributions: tuple[str, ...]) -> Path | None:
    """The entries of the cache written in folder, when it was filled on a machine like this one
    (host_signature of the compiler's `distributions`)."""
    host, entries = folder / HOST, folder / ENTRIES
    if not host.is_file() or not entries.is_dir():
        return None
    return entries if host.read_text().strip() == host_signature(distributions) else None


#: A sealed folder: its owner may add entries (the reference run never writes here) and anyone
#: may open an entry by name, but nobody lists it. JAX reads an entry by its key only (without a
#: size limit it never lists the folder); an adapter's compiler must read its cache so too.
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
