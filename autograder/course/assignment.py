"""The nbgrader course folder a grading run works in, and the assignment it holds.

nbgrader wants <root>/source/<assignment>/. The course is assembled from exactly the files that
belong to the assignment: an instructor's own course folder (`autograder grade --course COURSE
--assignment ID`), or a checkout of a course bundle whose assignment lies among its authoring
files (`--bundle CHECKOUT`): the checkout's nbgrader_config.py names the module of its layout
(`c.Bundle.layout`, a `BundleLayout`; this bundle's is among the adapters, autograder/adapters/).
Everything after that reads the assignment (its id, its notebooks in order) from the course
folder itself (`assignment_of`).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from traitlets import Unicode
from traitlets.config import Configurable

from autograder.course.errors import ExitCode, UsageError
from autograder.course.paths import ROOT


@dataclass(frozen=True)
class Assignment:
    """An assignment of a course: its id and its notebooks' file names, in order."""

    id: str
    notebooks: tuple[str, ...]

    @property
    def stems(self) -> list[str]:
        return [Path(name).stem for name in self.notebooks]


def assignment_of(course: Path) -> Assignment:
    """The one assignment in course/source/ (the grader's course folders hold one)."""
    folders = sorted(p for p in (Path(course) / "source").iterdir() if p.is_dir() and any(p.glob("*.ipynb")))
    if len(folders) != 1:
        raise ValueError(f"{course}/source holds {len(folders)} assignments; the grader's course holds one")
    return Assignment(folders[0].name, tuple(sorted(p.name for p in folders[0].glob("*.ipynb"))))


def assignment_in(files: dict[str, bytes]) -> Assignment:
    """The assignment of a course's files by relative path (a grading task's template)."""
    # source/<assignment>/<notebook>: a notebook right in source/ (quickstart's header) is no assignment.
    ids = {
        key.split("/")[1]
        for key in files
        if key.startswith("source/") and key.endswith(".ipynb") and key.count("/") > 1
    }
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

    @property
    def folders(self) -> tuple[Path, ...]:
        """nbgrader's folders of the course: what it hands out, takes in or returns to learners."""
        return tuple(self.folder / name for name in ("source", "release", "submitted", "autograded", "feedback"))

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
        from traitlets.config.loader import PyFileConfigLoader

        # The header and footer notebooks, where nbgrader looks for them: relative to the course.
        loaded = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
        for relative in course_relative_files(loaded):
            found = self.folder / relative
            if not found.is_file():
                raise FileNotFoundError(f"{found} (named in {config}) does not exist")
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(found, root / relative)


def assignment_of_origin(origin: CourseOrigin | BundleOrigin) -> Assignment:
    """The assignment an origin names, read from its course folder (or its bundle's layout)."""
    if isinstance(origin, BundleOrigin):
        origin.assignment_files()
        return origin.layout.as_assignment()
    source = origin.folder / "source" / origin.assignment
    if not (origin.folder / "source").is_dir():
        raise FileNotFoundError(
            f"{origin.folder} is not an nbgrader course folder (it holds no source/): --course names the "
            "folder nbgrader quickstart made, as seen from where you are"
        )
    notebooks = tuple(sorted(p.name for p in source.glob("*.ipynb"))) if source.is_dir() else ()
    if not notebooks:
        raise FileNotFoundError(f"{source} holds no notebook of an assignment {origin.assignment!r}")
    return Assignment(origin.assignment, notebooks)


@dataclass(frozen=True)
class BundleLayout:
    """An assignment kept in a checkout of a course bundle rather than in a course folder: its id,
    where each of its source files lies in the checkout (by its name in source/<id>/), the
    checkout's course configuration, and the checkout's folders that hand things out (learners
    read them: no --out may lie there)."""

    assignment: str
    files: Mapping[str, str]
    config: str = "nbgrader_config.py"
    handed_out: tuple[str, ...] = ()

    def as_assignment(self) -> Assignment:
        return Assignment(self.assignment, tuple(name for name in self.files if name.endswith(".ipynb")))


class Bundle(Configurable):
    """A checkout's course bundle, as its nbgrader_config.py declares it."""

    layout = Unicode(
        "", help="The module whose BUNDLE (an autograder.course.assignment.BundleLayout) says where the assignment lies"
    ).tag(config=True)


@dataclass(frozen=True)
class BundleOrigin:
    """An assignment from a checkout of its course bundle (`autograder grade --bundle CHECKOUT`,
    what `make autograde` passes): its files and configuration where the checkout's layout says."""

    checkout: Path

    @functools.cached_property
    def layout(self) -> BundleLayout:
        """The layout the checkout's nbgrader_config.py names (`c.Bundle.layout`); UsageError when it names none."""
        import importlib

        from traitlets.config.loader import PyFileConfigLoader

        config = self.checkout / "nbgrader_config.py"
        try:
            loaded = PyFileConfigLoader(config.name, path=str(self.checkout)).load_config()
            name = Bundle(config=loaded).layout
            layout = getattr(importlib.import_module(name), "BUNDLE", None) if name else None
        except Exception as error:  # no config, one that does not load, a layout that does not import
            raise UsageError(
                f"{self.checkout} is not a checkout of a course bundle ({type(error).__name__}: {error})"
            ) from None
        if not isinstance(layout, BundleLayout):
            raise UsageError(
                f"{config} names no bundle layout (c.Bundle.layout, a module with a BUNDLE): "
                "--bundle takes a checkout of a course bundle"
            )
        return layout

    @property
    def assignment(self) -> str:
        return self.layout.assignment

    @property
    def folders(self) -> tuple[Path, ...]:
        """Where the assignment's files come from, and what the checkout hands to learners."""
        return tuple(self.checkout / folder for folder in self.layout.handed_out)

    def assignment_files(self) -> dict[str, Path]:
        """The assignment's source files in the checkout, by name; FileNotFoundError naming the
        missing ones."""
        files = {name: self.checkout / relative for name, relative in self.layout.files.items()}
        missing = [str(path) for path in files.values() if not path.is_file()]
        if missing:
            raise FileNotFoundError(
                f"{self.checkout} is not a checkout of the bundle with its assignment built: missing {missing}"
            )
        return files

    def install_assignment(self, course: Path, *, force: bool = False) -> Path:
        """Put exactly the assignment's source files into COURSE/source/<assignment>/; return that
        folder. A folder already there is replaced only with force (whatever else it held goes,
        an answer file copied by hand included)."""
        files = self.assignment_files()
        target = Path(course) / "source" / self.assignment
        if target.exists():
            if not force:
                raise FileExistsError(f"{target} exists: --force replaces it with the assignment's files")
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for name, path in files.items():
            shutil.copy2(path, target / name)
        return target

    def copy_to(self, root: Path) -> None:
        self.install_assignment(root)
        shutil.copy2(self.checkout / self.layout.config, root / "nbgrader_config.py")


def new_course(root: Path, origin: CourseOrigin | BundleOrigin | None = None) -> Path:
    """A new course folder at root (whatever was there is deleted first) with the assignment's
    source: the origin's (default: the bundle this package sits in, for its own tools and tests);
    return root."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    (origin if origin is not None else BundleOrigin(ROOT)).copy_to(root)
    return root


def put_venv_on_path() -> None:
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
GRADER_LINES = "\ntry:\n    from autograder.notebook.plugin import configure\n"


def without_the_grader(config_text: str) -> str:
    """The bundle's nbgrader_config.py without the lines that hand nbgrader's pipeline to this
    grader: stock nbgrader, the checks deciding in the kernel."""
    if GRADER_LINES not in config_text:
        raise ValueError("the course's nbgrader_config.py no longer hands nbgrader to the grader as expected")
    return config_text.split(GRADER_LINES, 1)[0].rstrip() + "\n"


def stock_nbgrader_env(tmp: Path) -> dict:
    """nbgrader_env for stock nbgrader: the bundle's grader not on PYTHONPATH, and no config file
    read but the course folder's own: a Jupyter config elsewhere (an instructor's, an older
    checkout's venv-wide one) could hand the pipeline to the grader again, the package being
    installed. tmp (made here) is its processes' TMPDIR, for the caller to remove: jupyter_core
    makes an empty config folder there for each process that reads no config, and leaves it."""
    env = nbgrader_env()
    env.pop("PYTHONPATH", None)
    env["JUPYTER_NO_CONFIG"] = "1"
    Path(tmp).mkdir(parents=True, exist_ok=True)
    env["TMPDIR"] = str(tmp)
    return env


def nbgrader(course: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run one nbgrader command in the course folder; its output is returned, not printed."""
    command = [sys.executable, "-m", "nbgrader", *args]
    result = subprocess.run(command, cwd=course, env=nbgrader_env(), capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return result


def nbgrader_setting(config, section: str, name: str):
    """A setting of one of nbgrader's preprocessors as nbgrader reads it: the config's value, or
    nbgrader's own default where the config is silent (a traitlets Config answers a missing name
    with a LazyConfigValue, never a default)."""
    import nbgrader.preprocessors
    from traitlets.config import LazyConfigValue

    values = config.get(section, {})
    if name in values and not isinstance(values[name], LazyConfigValue):
        return values[name]
    return getattr(nbgrader.preprocessors, section).class_traits()[name].default()


def notebook_kernel(notebook_text: bytes | str, default: str = "python3") -> str:
    """The kernel a notebook names in its metadata (nbgrader's Execute runs that one when
    Execute.kernel_name is not set)."""
    import json

    try:
        name = json.loads(notebook_text).get("metadata", {}).get("kernelspec", {}).get("name")
    except (ValueError, AttributeError):
        name = None
    return name if isinstance(name, str) and name else default


#: nbgrader's settings that name a file relative to the course folder (IncludeHeaderFooter's help).
COURSE_RELATIVE_FILES = (("IncludeHeaderFooter", "header"), ("IncludeHeaderFooter", "footer"))


def course_relative_files(config) -> list[str]:
    """The relative paths of the header and footer notebooks the course's config names."""
    found = [nbgrader_setting(config, section, name) for section, name in COURSE_RELATIVE_FILES]
    return [path for path in found if path and not os.path.isabs(path)]


def resolve_in_course(config, course: Path) -> None:
    """Make the course-relative file settings absolute, under `course`, as nbgrader reads them
    when it runs in the course folder (this process runs elsewhere)."""
    for section, name in COURSE_RELATIVE_FILES:
        path = nbgrader_setting(config, section, name)
        if path and not os.path.isabs(path):
            config[section][name] = str(Path(course) / path)


def assignment_source(config, resources) -> Path:
    """The course's source folder of the notebook's assignment, as nbgrader's config names it."""
    from nbgrader.coursedir import CourseDirectory

    coursedir = CourseDirectory(config=config)
    assignment = resources.get("nbgrader", {}).get("assignment") or coursedir.assignment_id
    return Path(coursedir.format_path(coursedir.source_directory, ".", assignment))


def main(argv=None) -> int:
    """`autograder install-assignment CHECKOUT COURSE [--force]`: put exactly the assignment's
    source files from a checkout of its course bundle into COURSE/source/<assignment>/ (where the
    checkout's layout says they are: for this bundle, the five instructor notebooks, the modules
    they import, the data learners read; never an answer file)."""
    import argparse

    from traitlets.config.loader import PyFileConfigLoader

    from autograder.course.settings import checks_module_for

    assert main.__doc__ is not None  # its docstring is the command's description
    parser = argparse.ArgumentParser(prog="autograder install-assignment", description=main.__doc__.split(":", 1)[1])
    parser.add_argument(
        "checkout", type=Path, help="a checkout of the bundle (its nbgrader_config.py names its layout)"
    )
    parser.add_argument("course", type=Path, help="an nbgrader course folder (`nbgrader quickstart` makes one)")
    parser.add_argument("--force", action="store_true", help="replace the assignment's folder if the course has one")
    args = parser.parse_args(argv)
    if not args.course.is_dir():
        print(f"error: {args.course} is not a folder", file=sys.stderr)
        return ExitCode.USAGE
    origin = BundleOrigin(args.checkout.resolve())
    try:
        target = origin.install_assignment(args.course, force=args.force)
    except (FileNotFoundError, FileExistsError, UsageError) as error:
        print(f"error: {error}", file=sys.stderr)
        return ExitCode.USAGE
    print(f"installed into {target}: {', '.join(sorted(p.name for p in target.iterdir()))}")
    config = PyFileConfigLoader(origin.layout.config, path=str(origin.checkout)).load_config()
    checks = checks_module_for(config, origin.assignment)
    configure = f"autograder configure {args.course}" + (
        f" --checks-module {checks} --assignment {origin.assignment}" if checks else ""
    )
    print(f"next: `{configure}`, then in {args.course}: `nbgrader generate_assignment {origin.assignment}`")
    return ExitCode.DONE
