"""An nbgrader course folder for performance-05, built from the bundle on demand.

nbgrader wants <root>/source/<assignment>/; the bundle keeps the source in solutions/ next to
its authoring files. A course folder is therefore assembled under runs/ from exactly the files
that belong to the assignment, and every nbgrader command runs inside it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .paths import ASSIGNMENT, AUTOGRADER, DATA, NOTEBOOKS, SHIPPED_FILES, SHIPPED_MODULES, SOLUTIONS


def build_course(root: Path) -> Path:
    """(Re)create a course folder at root with the assignment's source; return root."""
    if root.exists():
        shutil.rmtree(root)
    source = root / "source" / ASSIGNMENT
    source.mkdir(parents=True)
    for name in (*NOTEBOOKS, *SHIPPED_MODULES):
        if not (SOLUTIONS / name).is_file():
            raise FileNotFoundError(f"{SOLUTIONS / name} is missing: run `make sync` first")
        shutil.copy2(SOLUTIONS / name, source / name)
    for name in SHIPPED_FILES:
        shutil.copy2(DATA / name, source / name)
    shutil.copy2(AUTOGRADER / "nbgrader_config.py", root / "nbgrader_config.py")
    return root


def use_the_venvs_tools() -> None:
    """nbgrader shells out to alembic, from the venv's bin: put it first on this process's PATH
    (once, whoever calls first: grading, validation, the benchmark), and draw without a screen."""
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    os.environ.setdefault("MPLBACKEND", "Agg")


def nbgrader_env() -> dict:
    """The environment for nbgrader: the venv's bin first on PATH (it shells out to alembic)."""
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env.setdefault("MPLBACKEND", "Agg")
    return env


def nbgrader(course: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run one nbgrader command in the course folder; its output is returned, not printed."""
    command = [sys.executable, "-m", "nbgrader", *args]
    result = subprocess.run(command, cwd=course, env=nbgrader_env(), capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return result
