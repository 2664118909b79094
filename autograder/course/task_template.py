"""What every grading task of a run carries, as typed values.

- `CourseSource`: the course's nbgrader_config.py and its assignment's source folder, as the
  instructor wrote them: what the reference run runs and what its key is made of.
- `CompileCache`: the executables the reference run compiled, and the kind of machine that
  compiled them (autograder/kernel/compile_cache.py says how kernels use them).
- `TaskTemplate`: the source, a gradebook that holds the assignment and no student, and what the
  reference run found: each notebook's time budget, the judge's helpers its checks asked for,
  and the compile cache. A worker writes it into a scratch course of its own.

All are plain data (bytes, numbers, names): a Dask client sends them to its workers as they are.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from autograder.course.assignment import Assignment, assignment_in
from autograder.course.errors import UsageError
from autograder.course.settings import checks_module_for, declared_adapter

#: The files of a course, by path relative to the course folder.
Files = dict[str, bytes]


def _write(files: Files, folder: Path, prefix: str = "") -> None:
    """The files whose path starts with prefix, written under folder without it."""
    for relative, data in files.items():
        if relative.startswith(prefix):
            target = folder / relative[len(prefix) :]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)


@dataclass(frozen=True)
class CourseSource:
    """A course's nbgrader_config.py and the files of source/ (paths like "source/<id>/a.ipynb")."""

    config: bytes
    files: Files

    @classmethod
    def read(cls, course: Path) -> CourseSource:
        """The source of the course folder (checkpoints left out)."""
        course = Path(course)
        files = {
            str(p.relative_to(course)): p.read_bytes()
            for p in sorted((course / "source").rglob("*"))
            if p.is_file() and ".ipynb_checkpoints" not in p.parts
        }
        return cls((course / "nbgrader_config.py").read_bytes(), files)

    @cached_property
    def assignment(self) -> Assignment:
        return assignment_in(self.files)

    @property
    def folder(self) -> str:
        """The assignment's source folder, relative to the course ("source/<id>/")."""
        return f"source/{self.assignment.id}/"

    def notebook(self, name: str) -> bytes:
        return self.files[self.folder + name]

    def hashed_items(self) -> list[tuple[str, bytes]]:
        """Every file with its relative path, in a fixed order: what a key of the source hashes."""
        return [("nbgrader_config.py", self.config), *sorted(self.files.items())]

    @cached_property
    def loaded_config(self):
        """The course's nbgrader_config.py as traitlets reads it (an empty one where it cannot be read)."""
        from traitlets.config import Config
        from traitlets.config.loader import PyFileConfigLoader

        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "nbgrader_config.py").write_bytes(self.config)
            try:
                return PyFileConfigLoader("nbgrader_config.py", path=folder).load_config()
            except Exception:  # an unreadable config names nothing
                return Config()

    @cached_property
    def checks_module(self) -> str:
        """The checks module the course's configuration names for the assignment ("" for none);
        UsageError when its source lacks it (never judged in the kernel instead)."""
        checks = checks_module_for(self.loaded_config, self.assignment.id)
        if checks and self.folder + f"{checks}.py" not in self.files:
            raise UsageError(
                f"the assignment {self.assignment.id!r} names the checks module {checks!r}, but its source "
                f"holds no {checks}.py: put it there, or name no checks module for it"
            )
        return checks

    @cached_property
    def adapter(self) -> str:
        """The module its checks module names as its adapter ("" for none: the core alone)."""
        if not self.checks_module:
            return ""
        return declared_adapter(self.files[self.folder + f"{self.checks_module}.py"].decode("utf-8", "replace"))

    def shipped_names(self) -> list[str]:
        """The names of the assignment's files a kernel may see (`shipped_files`)."""
        names = [relative[len(self.folder) :] for relative in self.files if relative.startswith(self.folder)]
        return sorted(name for name in names if not name.endswith(".ipynb") and "/" not in name)

    def write_course(self, course: Path) -> None:
        """nbgrader_config.py and source/ into the course folder."""
        Path(course).mkdir(parents=True, exist_ok=True)
        (Path(course) / "nbgrader_config.py").write_bytes(self.config)
        _write(self.files, Path(course))

    def write_assignment(self, folder: Path) -> None:
        """The assignment's source folder (notebooks, checks, shipped files) into folder."""
        _write(self.files, Path(folder), self.folder)

    def shipped_files(self, folder: Path) -> Path:
        """The assignment's files a kernel may see (never a notebook, nothing in a subfolder), in folder."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for name in self.shipped_names():
            (folder / name).write_bytes(self.files[self.folder + name])
        return folder


@dataclass(frozen=True)
class CompileCache:
    """The executables one kind of machine compiled (host: compile_cache.host_signature there)."""

    host: str
    entries: Files

    @classmethod
    def merged(cls, filled: list[tuple[str, Files]]) -> CompileCache | None:
        """One cache from (host, entries) pairs: those of the first host that filled any, the
        others (another kind of machine) left out; None when none filled any."""
        usable = [(host, entries) for host, entries in filled if entries]
        if not usable:
            return None
        first = usable[0][0]
        entries = {name: data for host, found in usable if host == first for name, data in found.items()}
        return cls(first, entries)

    @property
    def size(self) -> int:
        return sum(len(data) for data in self.entries.values())


@dataclass(frozen=True)
class TaskTemplate:
    """What every grading task of a run carries (see the module's docstring)."""

    source: CourseSource
    gradebook: bytes  # gradebook.db with the assignment and no student
    budgets: dict[str, float] = field(default_factory=dict)  # notebook -> seconds
    helpers: dict[str, list[str]] = field(default_factory=dict)  # notebook -> judge helpers its checks asked
    cache: CompileCache | None = None

    @property
    def assignment(self) -> Assignment:
        return self.source.assignment

    def replace(self, **changes) -> TaskTemplate:
        return dataclasses.replace(self, **changes)

    def write_course(self, course: Path) -> None:
        """The scratch course a task grades in: config, source, the gradebook."""
        self.source.write_course(course)
        (Path(course) / "gradebook.db").write_bytes(self.gradebook)
