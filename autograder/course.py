"""The nbgrader course folder a grading run works in, and the assignment it holds.

nbgrader wants <root>/source/<assignment>/. The course is assembled from exactly the files that
belong to the assignment: by default the bundle's performance-05 (its source lives in
solutions/ beside its authoring files), or an instructor's own course folder
(`autograder grade --course COURSE --assignment ID`). Everything after that reads the assignment
(its id, its notebooks in order) from the course folder itself (`assignment_of`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .paths import ASSIGNMENT, AUTOGRADER, DATA, NOTEBOOKS, SHIPPED_FILES, SHIPPED_MODULES, SOLUTIONS


@dataclass(frozen=True)
class Assignment:
    """An assignment of a course: its id and its notebooks' file names, in order."""

    id: str
    notebooks: tuple[str, ...]

    @property
    def stems(self) -> list[str]:
        return [Path(name).stem for name in self.notebooks]


#: The bundle's own assignment (performance-05, its five stages).
BUNDLE = Assignment(ASSIGNMENT, NOTEBOOKS)


def assignment_of(course: Path) -> Assignment:
    """The one assignment in course/source/ (the grader's course folders hold one)."""
    folders = sorted(p for p in (Path(course) / "source").iterdir() if p.is_dir() and any(p.glob("*.ipynb")))
    if len(folders) != 1:
        raise ValueError(f"{course}/source holds {len(folders)} assignments; the grader's course holds one")
    return Assignment(folders[0].name, tuple(sorted(p.name for p in folders[0].glob("*.ipynb"))))


def assignment_in(files: dict[str, bytes]) -> Assignment:
    """The assignment of a course's files by relative path (a grading task's template)."""
    ids = {key.split("/")[1] for key in files if key.startswith("source/") and key.endswith(".ipynb")}
    if len(ids) != 1:
        raise ValueError(f"the course's files hold {len(ids)} assignments")
    (found,) = ids
    prefix = f"source/{found}/"
    names = sorted(
        k[len(prefix) :] for k in files if k.startswith(prefix) and k.endswith(".ipynb") and "/" not in k[len(prefix) :]
    )
    return Assignment(found, tuple(names))


@dataclass(frozen=True)
class CourseOrigin:
    """Where a grading run takes its assignment from: an instructor's nbgrader course folder and
    the id of one of its assignments."""

    folder: Path
    assignment: str

    def copy_to(self, root: Path) -> None:
        source = self.folder / "source" / self.assignment
        if not source.is_dir() or not any(source.glob("*.ipynb")):
            raise FileNotFoundError(f"{source} holds no notebook of an assignment {self.assignment!r}")
        shutil.copytree(source, root / "source" / self.assignment, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        config = self.folder / "nbgrader_config.py"
        if config.is_file():
            shutil.copy2(config, root / "nbgrader_config.py")
        else:
            (root / "nbgrader_config.py").write_text("c = get_config()  # noqa: F821\n")


def assignment_of_origin(origin: CourseOrigin) -> Assignment:
    """The assignment an origin names, read from its course folder."""
    source = origin.folder / "source" / origin.assignment
    notebooks = tuple(sorted(p.name for p in source.glob("*.ipynb"))) if source.is_dir() else ()
    if not notebooks:
        raise FileNotFoundError(f"{source} holds no notebook of an assignment {origin.assignment!r}")
    return Assignment(origin.assignment, notebooks)


def new_course(root: Path, origin: CourseOrigin | None = None) -> Path:
    """A new course folder at root (whatever was there is deleted first) with the assignment's source (the bundle's, or the
    origin's); return root."""
    if root.exists():
        shutil.rmtree(root)
    if origin is not None:
        root.mkdir(parents=True)
        origin.copy_to(root)
        return root
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


#: Where the bundle's nbgrader_config.py hands nbgrader's pipeline to this grader.
GRADER_LINES = "\ntry:\n    from autograder.plugin import configure\n"


def without_the_grader(config_text: str) -> str:
    """The bundle's nbgrader_config.py without the lines that hand nbgrader's pipeline to this
    grader: stock nbgrader, the checks deciding in the kernel."""
    if GRADER_LINES not in config_text:
        raise ValueError("the course's nbgrader_config.py no longer hands nbgrader to the grader as expected")
    return config_text.split(GRADER_LINES, 1)[0].rstrip() + "\n"


def stock_nbgrader_env() -> dict:
    """nbgrader_env for stock nbgrader: the bundle's grader not on PYTHONPATH, and no config file
    read but the course folder's own. The venv's etc/jupyter/nbgrader_config.py (`make venv` puts
    the bundle's there, grader's lines included, for JupyterLab's Validate button) would hand the
    pipeline to the grader again, the package being installed."""
    env = nbgrader_env()
    env.pop("PYTHONPATH", None)
    env["JUPYTER_NO_CONFIG"] = "1"
    return env


def nbgrader(course: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run one nbgrader command in the course folder; its output is returned, not printed."""
    command = [sys.executable, "-m", "nbgrader", *args]
    result = subprocess.run(command, cwd=course, env=nbgrader_env(), capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return result


def assignment_source(config, resources) -> Path:
    """The course's source folder of the notebook's assignment, as nbgrader's config names it."""
    from nbgrader.coursedir import CourseDirectory

    coursedir = CourseDirectory(config=config)
    assignment = resources.get("nbgrader", {}).get("assignment") or coursedir.assignment_id
    return Path(coursedir.format_path(coursedir.source_directory, ".", assignment))
