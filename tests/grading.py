"""How the tests grade: the run's options, with one reference run kept for the whole test session.

Every grading run of the tests with the same source, host and options that change the reference
run shares one clean reference run (`GradingOptions.reference_cache`), as an instructor's regrades
do: the instructor's notebooks run once per key, not once per test. A test about the reference run
itself, or one that records what a whole run sends, grades with `own_reference=True`.

Every run of a test session also draws the judge's fresh inputs from one seed, drawn as the
session starts: the programs of those inputs are then in the kept reference's compile cache, as
they are in a real run's (its reference and its students share its seed). A new session draws a
new one, so the inputs still change from run to run.
"""

from __future__ import annotations

import os
from pathlib import Path

from autograder.options import GradingOptions

REFERENCE_CACHE_VARIABLE = "AUTOGRADER_TESTS_REFERENCE_CACHE"
JUDGE_SEED_VARIABLE = "AUTOGRADER_TESTS_JUDGE_SEED"


def reference_cache() -> Path:
    """This run's kept reference runs: a folder tests/conftest.py makes as the run starts and
    removes as it ends, named in the environment so that every pytest-xdist worker shares it
    (a reference run kept by one worker serves the other)."""
    return Path(os.environ[REFERENCE_CACHE_VARIABLE])


def session_seed() -> int:
    """The judge's seed of this test session (tests/conftest.py draws it; 0, a new one per run, outside a session)."""
    return int(os.environ.get(JUDGE_SEED_VARIABLE, "0"))


def options(own_reference: bool = False, **changes) -> GradingOptions:
    changes.setdefault("judge_seed", session_seed())
    return GradingOptions(reference_cache=None if own_reference else reference_cache(), **changes)
