"""How the tests grade: the run's options, with one reference run kept for the whole test session.

Every grading run of the tests with the same source, host and options that change the reference
run shares one clean reference run (`GradingOptions.reference_cache`), as an instructor's regrades
do: the instructor's notebooks run once per key, not once per test. A test about the reference run
itself calls `reference.run_reference`, or grades with its own options and no cache. The sandbox's
limits are part of the key: the fixture class, graded with a lower memory total, has a reference
run of its own.

Every run of a test session also draws the judge's fresh inputs from one seed, drawn as the
session starts: the programs of those inputs are then in the kept reference's compile cache, as
they are in a real run's (its reference and its students share its seed). A new session draws a
new one, so the inputs still change from run to run.

The bundled samples are graded once per session (`graded_samples`): the instructor's cycle and
formgrader's browser test each work on a copy of that OUT.
"""

from __future__ import annotations

import fcntl
import io
import os
import shutil
from pathlib import Path

from autograder.run.options import GradingOptions

REFERENCE_CACHE_VARIABLE = "AUTOGRADER_TESTS_REFERENCE_CACHE"
JUDGE_SEED_VARIABLE = "AUTOGRADER_TESTS_JUDGE_SEED"
SHARED_VARIABLE = "AUTOGRADER_TESTS_SHARED"


def reference_cache() -> Path:
    """This run's kept reference runs: a folder tests/conftest.py makes as the run starts and
    removes as it ends, named in the environment so that every pytest-xdist worker shares it
    (a reference run kept by one worker serves the other)."""
    return Path(os.environ[REFERENCE_CACHE_VARIABLE])


def session_seed() -> int:
    """The judge's seed of this test session (tests/conftest.py draws it; 0, a new one per run, outside a session)."""
    return int(os.environ.get(JUDGE_SEED_VARIABLE, "0"))


def options(**changes) -> GradingOptions:
    changes.setdefault("judge_seed", session_seed())
    changes.setdefault("reference_cache", reference_cache())
    return GradingOptions(**changes)


def graded_samples(into: Path) -> Path:
    """A copy, at `into`, of OUT after autograding autograder/samples/ with `options()`.

    The samples are graded once per session, in whichever process (pytest-xdist worker) asks
    first, under a lock in the session's shared folder; a process that asks meanwhile waits
    for that grading instead of doing it again. A grading that failed leaves nothing behind,
    so the next one to ask grades them itself (and meets the same failure).
    """
    from autograder.course.paths import AUTOGRADER
    from autograder.run.grade import grade

    shared = Path(os.environ[SHARED_VARIABLE]) / "samples-graded"
    shared.parent.mkdir(parents=True, exist_ok=True)
    with open(shared.parent / "samples-graded.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not shared.is_dir():
            scratch = shared.with_name("samples-grading")
            shutil.rmtree(scratch, ignore_errors=True)
            grade(AUTOGRADER / "samples", scratch, options(), io.StringIO())
            scratch.rename(shared)
    shutil.copytree(shared, into)
    return into
