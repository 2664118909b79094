"""Shared fixtures: each notebook set is executed once per test session, then read by many tests.

The tiers are folders, and a test's marker comes from its folder:
- `unit/` (and `lesson/unit/`): no kernel, no helper process, no grading run; `make test-fast`
  runs this tier alone, in under a minute;
- `integration/`: one piece against real processes (sandboxes, kernel hosts, the judge's helpers);
- `e2e/` (and `lesson/e2e/`): grading runs, installs, notebook runs, the browser.
`lesson/` holds the lesson's own tests (its checks, notebooks, prose); the rest test the grader.

`make test` runs all but the grader's e2e tier (`-m "not e2e or lesson"`), `make test-e2e` that
tier; CI runs both.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from pathlib import Path

import pytest

from autograder.adapters.lesson import NOTEBOOKS
from autograder.course.paths import RELEASE, SOLUTIONS
from bundle.execute import execute_notebook
from tests.grading import JUDGE_SEED_VARIABLE, REFERENCE_CACHE_VARIABLE, SHARED_VARIABLE
from tests.lesson_cache import lesson_run_env

#: The tiers, each a folder of tests/ (or of tests/lesson/).
TIERS = ("unit", "integration", "e2e")


def tier_of(path: Path) -> str:
    """The tier of a test file: the tier folder it lies in."""
    found = [part for part in path.parts if part in TIERS]
    if not found:
        raise pytest.UsageError(f"{path} lies in no tier folder ({', '.join(TIERS)}): put it in one")
    return found[-1]


#: Test modules that read solution_runs or release_runs, or run the lesson's script (besides
#: tests/e2e/browser): one process runs them all, so its lesson compile cache (tests/lesson_cache.py)
#: serves every run after the first.
NOTEBOOK_RUN_MODULES = {"test_lesson", "test_prose", "test_figures"}

#: The process groups that take longest, longest first (measured under `pytest -n 2 --durations`
#: on 2 cores, the whole suite: about 890, 620, 420, 260, 255, 185, 60, 50 and 30 s): handed out
#: in this order, the rest (under 20 s each) after them as collected, so that no long group is
#: left to one process at the end while the other waits. Of these, `make test` runs the lesson's
#: notebook runs, the judge and the sandbox; the rest are the e2e tier.
LONGEST_GROUPS = (
    "tests/e2e/test_autograder_scores.py",
    "notebook-runs-and-browser",
    "tests/e2e/test_grading_engine.py",
    "tests/e2e/test_nbgrader_suites.py",
    "tests/e2e/test_new_instructor.py",
    "tests/e2e/test_plugin.py",
    "tests/e2e/test_instructor_cycle.py",
    "tests/integration/test_judge.py",
    "tests/integration/test_sandbox.py",
)


def _runs_the_session(config) -> bool:
    return not hasattr(config, "workerinput")  # the run's own process, not a pytest-xdist worker


def pytest_configure(config):
    if _runs_the_session(config):
        os.environ[REFERENCE_CACHE_VARIABLE] = tempfile.mkdtemp(prefix="autograder-tests-reference-")
        os.environ[JUDGE_SEED_VARIABLE] = str(secrets.randbits(62) or 1)
        os.environ[SHARED_VARIABLE] = tempfile.mkdtemp(prefix="autograder-tests-shared-")


def pytest_sessionfinish(session, exitstatus):
    if _runs_the_session(session.config):
        shutil.rmtree(os.environ.pop(REFERENCE_CACHE_VARIABLE, ""), ignore_errors=True)
        shutil.rmtree(os.environ.pop(SHARED_VARIABLE, ""), ignore_errors=True)
        os.environ.pop(JUDGE_SEED_VARIABLE, None)


#: Modules of the notebook-runs-and-browser group that grade, run after the rest of the group: as
#: a run starts, the fixture grading is making the kept reference run, which a grading test here
#: would wait for, while the notebook runs need nothing and keep the second core busy meanwhile.
GRADING_LAST = ("test_hostile_pages", "test_formgrader")


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(str(item.path))
        item.add_marker(getattr(pytest.mark, tier_of(path)))
        if "lesson" in path.parts:
            item.add_marker(pytest.mark.lesson)
    # A stable sort: every other test keeps its place (and each module its order).
    items.sort(key=lambda item: item.module.__name__.rsplit(".", 1)[-1] in GRADING_LAST)


def process_group(test_file: str) -> str:
    """`make test` runs on two processes (pytest-xdist), a group at a time on each: a module's
    tests stay together so that its fixtures are built once, and the modules that share this
    file's notebook runs, the lesson's compile cache or the browser's session stay together too."""
    path = Path(test_file)
    if "browser" in path.parts or path.stem in NOTEBOOK_RUN_MODULES:
        return "notebook-runs-and-browser"
    return path.as_posix()


def pytest_xdist_make_scheduler(config, log):
    # Not xdist's own loadgroup: under pytest 9 the group it appends to a test's id is lost.
    from xdist.scheduler import LoadScopeScheduling

    class ByProcessGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return process_group(nodeid.split("::", 1)[0])

        def _assign_work_unit(self, node) -> None:
            def rank(group: str) -> int:
                return LONGEST_GROUPS.index(group) if group in LONGEST_GROUPS else len(LONGEST_GROUPS)

            self.workqueue.move_to_end(min(self.workqueue, key=rank), last=False)  # the first of the lowest rank
            super()._assign_work_unit(node)

    return ByProcessGroup(config, log)


class NotebookRuns:
    """The executions of one folder's notebooks (the five stages, and for solutions/ the Going
    deeper companions after them), and the runs folder they wrote to."""

    def __init__(self, runs_dir: Path, executions: dict):
        self.runs_dir = runs_dir
        self.executions = executions

    def record(self, name: str) -> dict:
        return json.loads((self.runs_dir / name).read_text())


def _execute_all(folder: Path, runs_dir: Path, names=NOTEBOOKS) -> NotebookRuns:
    # Records go to a scratch runs folder, never into the bundle's own runs/.
    env = {"REMAT_LESSON_RUNS_DIR": str(runs_dir), **lesson_run_env()}
    return NotebookRuns(runs_dir, {name: execute_notebook(folder / name, env=env) for name in names})


@pytest.fixture(scope="session")
def solution_runs(tmp_path_factory) -> NotebookRuns:
    """The five solution notebooks, then the Going deeper companions, executed in order in fresh kernels."""
    from bundle import companions

    names = (*NOTEBOOKS, *companions.names())
    return _execute_all(SOLUTIONS, tmp_path_factory.mktemp("solution-runs"), names)


@pytest.fixture(scope="session")
def release_runs(tmp_path_factory) -> NotebookRuns:
    """The five release notebooks as a learner first opens them, executed in order."""
    copy = tmp_path_factory.mktemp("release")
    for path in RELEASE.iterdir():
        if path.is_file():
            shutil.copy2(path, copy / path.name)
    return _execute_all(copy, tmp_path_factory.mktemp("release-runs"))
