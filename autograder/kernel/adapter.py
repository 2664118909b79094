"""What an assignment's environment needs beyond the core: its adapter.

The core grades any nbgrader assignment with ipykernel, nbgrader's pipeline and NumPy (the judge's
own). Whatever else an assignment's kernels import, compile or are judged with comes from an
adapter its checks module declares: a top-level `ADAPTER = "package.module"` in the checks
module's source (read as text, never imported: `declared_adapter`), naming a module whose
`ADAPTER` is an `Adapter`. An assignment without one gets `GENERIC`: nothing beyond the core.
This bundle's lesson is the first adapter (autograder/adapters/).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autograder.course.errors import GraderError


@dataclass(frozen=True)
class CompileCacheEnv:
    """How an assignment's compiler keeps its executables in a folder (autograder/kernel/compile_cache.py
    seals it and hands it to kernels read-only): the environment of a trusted kernel that fills
    the folder, of a learner's kernel that only reads it, and the prefixes of the grader's own
    variables no kernel inherits (which cache a kernel reads is the grader's choice alone)."""

    writing: Callable[[str], dict[str, str]]
    reading: Callable[[str], dict[str, str]]
    withheld: tuple[str, ...] = ()


@dataclass(frozen=True)
class Adapter:
    """What an assignment's environment adds to the core (see the module docstring)."""

    name: str
    #: Modules every kernel of the assignment imports: a warm kernel host imports them once per student.
    kernel_preload: tuple[str, ...] = ()
    #: Modules some notebooks import: imported once, from a student's second notebook on.
    kernel_preload_later: tuple[str, ...] = ()
    #: Prefixes of the grader's environment variables a kernel and a helper inherit (they change
    #: numerics, not access).
    inherited_env: tuple[str, ...] = ()
    #: The compiler's cache the reference run fills for learners' kernels (None: nothing to keep).
    compiler_cache: CompileCacheEnv | None = None
    #: The distributions whose versions decide whether an executable compiled on one host runs on another.
    compiler_distributions: tuple[str, ...] = ()
    #: The judge's helper processes it adds, by name (kernel.helpers.HelperProcess classes).
    helpers: Mapping[str, type] = field(default_factory=dict)
    #: How the judge answers a check's request for evidence about a learner's program:
    #: evidence(judge) -> an object with `operations` and `request(function, operation, args, bind,
    #: argnums, wrap)` (None: the assignment asks for none).
    evidence: Callable[[Any], Any] | None = None
    #: What turns an array the judge sends back into the assignment's own array type, in the
    #: kernel ("module.function", e.g. its `asarray`); None: NumPy's arrays stay NumPy's.
    native_arrays: str | None = None
    #: Texts the kernel's agent runs after its own, each adding requests to its `OPERATIONS`
    #: (autograder/sandboxed/agent.py): what the adapter's evidence asks of a learner's kernel.
    kernel_operations: tuple[Path, ...] = ()


#: The core alone: ipykernel, nbgrader's pipeline, NumPy.
GENERIC = Adapter("generic")


class AdapterError(GraderError):
    """A checks module's ADAPTER names nothing that can be used; the message says what."""


def load_adapter(name: str) -> Adapter:
    """The adapter a module of that name offers as `ADAPTER`; GENERIC for no name; AdapterError
    when it cannot be imported or offers none."""
    if not name:
        return GENERIC
    try:
        module = importlib.import_module(name)
    except ImportError as error:
        raise AdapterError(
            f"the assignment's checks module names the adapter {name!r}, which cannot be imported here "
            f"({error}): install what the assignment needs (this bundle's lesson: the grader's [lesson] extra)"
        ) from None
    adapter = getattr(module, "ADAPTER", None)
    if not isinstance(adapter, Adapter):
        raise AdapterError(f"{name} offers no ADAPTER (an autograder.kernel.adapter.Adapter)")
    return adapter
