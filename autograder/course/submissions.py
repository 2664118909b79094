"""Reading a class's submissions folder: SUBMISSIONS/<student_id>/<notebook>.ipynb, or nbgrader's
own layout, SUBMISSIONS/<student_id>/<assignment>/<notebook>.ipynb (a course's submitted/ folder).

A folder laid out wrongly as a whole (missing, a file, notebooks at the top, no student at all) is the instructor's to fix: UsageError. A student whose
folder cannot be graded (an id that is not usable, no notebook of the assignment) is rejected
alone, with a line saying why, and the rest of the class is graded; a file a student should
not have handed in (another notebook, a stray file) is left out with a note.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from autograder.course.assignment import Assignment
from autograder.course.errors import UsageError

#: Files a collected submission may carry besides notebooks (nbgrader collect writes timestamp.txt).
EXTRA_FILES = ("timestamp.txt",)
#: Letters and digits of any script, then letters, digits, and _ . @ + -
_ID = re.compile(r"^[^\W_][\w.@+-]*$")
#: The longest student id: nbgrader's gradebook column for it (`Student.id`, String(128)).
MAX_ID = 128


@dataclass
class Submissions:
    students: dict[str, dict[str, Path]] = field(default_factory=dict)  # id -> file name -> path
    rejected: dict[str, str] = field(default_factory=dict)  # folder name -> why it was not graded
    notes: dict[str, list[str]] = field(default_factory=dict)  # id -> files left out, and why
    #: id -> notebook files left out because the assignment has no notebook of their name (named
    #: as a RENAMED trouble, intake.not_graded)
    other_notebooks: dict[str, list[str]] = field(default_factory=dict)


def student_id_problem(name: str) -> str | None:
    """Why a folder name cannot be a student id (None when it can)."""
    if name.startswith("."):
        return "its name starts with a dot (a hidden folder); rename it if it holds a student's work"
    if unicodedata.normalize("NFC", name) != name:
        return "its name is not in Unicode normal form C; rename it"
    if len(name) > MAX_ID:
        return (
            f"a student id is at most {MAX_ID} characters (nbgrader's gradebook keeps no more, and the "
            "grader's own files are named by it); rename the folder"
        )
    if not _ID.match(name):
        return (
            "a student id must start with a letter or digit and hold only letters, digits and _ . @ + - "
            "(no spaces); rename the folder"
        )
    return None


def find_submissions(folder: Path, assignment: Assignment) -> Submissions:
    """The students to grade, the folders rejected and why; UsageError when the layout is wrong."""
    folder = Path(folder)
    if not folder.exists():
        raise UsageError(
            f"the submissions folder {folder} does not exist: put each learner's notebooks in "
            f"{folder}/<student_id>/[{assignment.id}/]<notebook>.ipynb first (`nbgrader collect` does, in a course "
            "with nbgrader's exchange)"
        )
    if not folder.is_dir():
        raise UsageError(f"{folder} is a file: give the folder that holds <student_id>/<notebook>.ipynb")
    layout = f"expected {folder}/<student_id>/[{assignment.id}/]<notebook>.ipynb, notebooks among: {', '.join(assignment.notebooks)}"
    found = Submissions()
    for entry in sorted(folder.iterdir()):
        if entry.is_file():
            if entry.suffix == ".ipynb":
                raise UsageError(f"{entry} sits at the top of the submissions folder; {layout}")
            continue
        why = student_id_problem(entry.name)
        if why:
            found.rejected[entry.name] = why
            continue
        # nbgrader's submitted/<student_id>/<assignment>/: the notebooks are one folder down.
        held = entry / assignment.id if (entry / assignment.id).is_dir() else entry
        if entry.is_symlink() or held.is_symlink():
            # A link could hand in any file of this machine (the solutions, another student's work).
            found.rejected[entry.name] = f"{held} is a symbolic link: a submission's files must be its own"
            continue
        files, notes, others = {}, [], []
        for item in sorted(held.iterdir()):
            if item.is_symlink():
                notes.append(f"{item.name} left out: a symbolic link, not a file handed in")
                continue
            if (item.name in assignment.notebooks or item.name in EXTRA_FILES) and item.is_file():
                files[item.name] = item
                continue
            if item.name.startswith(".") or item.name == "__pycache__":
                continue
            others.append(item.name)  # (the release's own files, where nbgrader collect put them there too)
        strays = [name for name in others if not name.endswith(".ipynb")]
        if strays:
            notes.append(f"left out, not notebooks of {assignment.id}: {', '.join(strays)}")
        if not any(name.endswith(".ipynb") for name in files):
            found.rejected[entry.name] = f"it holds no notebook of {assignment.id} ({', '.join(assignment.notebooks)})"
            continue
        found.students[entry.name] = files
        if notes:
            found.notes[entry.name] = notes
        renamed = [name for name in others if name.endswith(".ipynb")]
        if renamed:
            found.other_notebooks[entry.name] = renamed
    if not found.students:
        reasons = "".join(f"\n  {name!r}: {why}" for name, why in found.rejected.items())
        raise UsageError(f"{folder} holds no student folder that can be graded; {layout}{reasons}")
    return found
