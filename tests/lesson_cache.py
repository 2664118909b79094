"""One JAX compile cache per test process for the lesson's own runs.

The tests run the lesson many times: the solutions and the release executed headless, `make
figures`' script twice, the notebooks a learner validates in JupyterLab, stock nbgrader's
kernels. Those runs compile the same programs again and again, and compiling is most of their
time. With JAX's persistent compile cache a run loads the executable it would have compiled:
its seconds change, not what it prints (the one program that must be compiled to be seen, the
pass trace's, turns the cache off: remat_sweep.pass_trace).

Never for the grader's own kernels: a grading run gives them the reference run's cache or none,
as its options say, and the tests compare exactly those.

Each process (a pytest-xdist worker) has a folder of its own: JAX writes an entry in place, and
a reader in another process could find it half-written.
"""

from __future__ import annotations

import os
from pathlib import Path

from autograder.adapters.jax_programs.compile_cache import writing_env
from tests.grading import SHARED_VARIABLE


def lesson_run_env() -> dict[str, str]:
    """The environment variables that give a trusted lesson run this process's compile cache, in
    the session's shared folder (none outside a test session: tests/conftest.py makes the folder
    as the session starts)."""
    shared = os.environ.get(SHARED_VARIABLE)
    if not shared:
        return {}
    return writing_env(Path(shared) / "compile-cache" / os.environ.get("PYTEST_XDIST_WORKER", "main"))
