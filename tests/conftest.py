"""Shared fixtures: each notebook set is executed once per test session, then read by many tests.

The tiers: `make test-fast` runs what starts no kernel and no notebook (the pure parts: the
checks and verdicts, the tampering scan, submission discovery, hidden-test stripping, sync and
release rendering, the evidence files, the audit checker, the dependency lock), in well under a
minute; `make test` runs everything. A module in SLOW_MODULES is marked `slow` as a whole.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from autograder.paths import NOTEBOOKS, RELEASE, SOLUTIONS
from bundle.execute import execute_notebook

#: Test modules that run kernels, notebooks or a grading run.
SLOW_MODULES = {
    "test_autograder_scores",
    "test_grading_engine",
    "test_instructor_cycle",
    "test_sandbox",
    "test_lesson",
    "test_figures",
    "test_prose",
    "test_remat_sweep",
    "test_plugin",
}


def pytest_sessionfinish(session, exitstatus):
    from tests.grading import remove_kept_references

    remove_kept_references()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__.rsplit(".", 1)[-1] in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


class NotebookRuns:
    """The executions of one folder's five notebooks, and the runs folder they wrote to."""

    def __init__(self, runs_dir: Path, executions: dict):
        self.runs_dir = runs_dir
        self.executions = executions

    def record(self, name: str) -> dict:
        return json.loads((self.runs_dir / name).read_text())


def _execute_all(folder: Path, runs_dir: Path) -> NotebookRuns:
    # Records go to a scratch runs folder, never into the bundle's own runs/.
    env = {"REMAT_LESSON_RUNS_DIR": str(runs_dir)}
    return NotebookRuns(runs_dir, {name: execute_notebook(folder / name, env=env) for name in NOTEBOOKS})


@pytest.fixture(scope="session")
def solution_runs(tmp_path_factory) -> NotebookRuns:
    """The five solution notebooks, executed in order in fresh kernels."""
    return _execute_all(SOLUTIONS, tmp_path_factory.mktemp("solution-runs"))


@pytest.fixture(scope="session")
def release_runs(tmp_path_factory) -> NotebookRuns:
    """The five release notebooks as a learner first opens them, executed in order."""
    copy = tmp_path_factory.mktemp("release")
    for path in RELEASE.iterdir():
        if path.is_file():
            shutil.copy2(path, copy / path.name)
    return _execute_all(copy, tmp_path_factory.mktemp("release-runs"))
