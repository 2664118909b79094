"""How the tests grade: the run's options, with one reference run kept for the whole test session.

Every grading run of the tests with the same source, host and options that change the reference
run shares one clean reference run (`GradingOptions.reference_cache`), as an instructor's regrades
do: the instructor's notebooks run once per key, not once per test. A test about the reference run
itself, or one that records what a whole run sends, grades with `own_reference=True`.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from autograder.options import GradingOptions

#: This test session's kept reference runs (removed when the session ends: tests/conftest.py).
REFERENCE_CACHE = Path(tempfile.mkdtemp(prefix="autograder-tests-reference-"))


def options(own_reference: bool = False, **changes) -> GradingOptions:
    return GradingOptions(reference_cache=None if own_reference else REFERENCE_CACHE, **changes)


def remove_kept_references() -> None:
    shutil.rmtree(REFERENCE_CACHE, ignore_errors=True)
