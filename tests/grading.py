"""How the tests grade: the run's options, with one reference run kept for the whole test session.

Every grading run of the tests with the same source, host and options that change the reference
run shares one clean reference run (`GradingOptions.reference_cache`), as an instructor's regrades
do: the instructor's notebooks run once per key, not once per test. A test about the reference run
itself, or one that records what a whole run sends, grades with `own_reference=True`.
"""

from __future__ import annotations

import os
from pathlib import Path

from autograder.options import GradingOptions

REFERENCE_CACHE_VARIABLE = "AUTOGRADER_TESTS_REFERENCE_CACHE"


def reference_cache() -> Path:
    """This run's kept reference runs: a folder tests/conftest.py makes as the run starts and
    removes as it ends, named in the environment so that every pytest-xdist worker shares it
    (a reference run kept by one worker serves the other)."""
    return Path(os.environ[REFERENCE_CACHE_VARIABLE])


def options(own_reference: bool = False, **changes) -> GradingOptions:
    return GradingOptions(reference_cache=None if own_reference else reference_cache(), **changes)
