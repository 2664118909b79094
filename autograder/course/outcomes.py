"""What grading came to, as typed records: the troubles of a submission, each judged cell's
verdict, a notebook's outcome.

A trouble carries its kind, its notebook, its cell and its message; it becomes a line of text
only at an edge (the terminal, a page, the class report) through `Trouble.line`. Whoever decides
something from troubles (whether a notebook ran past its budget, how the class report groups
them) reads their kind, never their words. Records cross process boundaries as they are (Dask
pickles them) or as JSON (`to_json`, `from_json`), decoded into the records at once.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field


class TroubleKind(enum.Enum):
    """What went wrong, as the class report and the grader's decisions read it."""

    #: A submitted file that could not be taken in as a notebook: scored 0, the others graded.
    UNREADABLE = "unreadable"
    #: A notebook of the assignment not handed in: scored 0.
    MISSING = "missing"
    #: A notebook handed in under a name the assignment does not have: not graded.
    RENAMED = "renamed"
    #: The notebook, or the student, ran past the time budget; finished checks keep their points.
    TIME_BUDGET = "time budget"
    #: One cell ran past the cell time limit and was interrupted; later cells ran.
    CELL_TIMEOUT = "cell timeout"
    #: The kernel was stopped at a limit of the sandbox (processes, memory, tasks, files).
    LIMIT = "limit"
    #: The kernel died of its own doing (a crash, `exit()`), or stopped answering.
    KERNEL_DIED = "kernel died"
    #: nbgrader could not grade the notebook at all (its kernel would not start, say): graded 0.
    NOT_GRADED = "not graded"
    #: A process the judge uses sent a line it did not ask for (learner code reaching the grader's
    #: lines): refused, the process ended, the checks that needed it scored 0.
    UNASKED_LINE = "unasked line"
    #: The student's feedback page could not be made (their grades stand).
    NO_FEEDBACK = "no feedback"
    #: Something for a person to look at; scores are unchanged (a static-scan finding, a display
    #: update aimed at the judge's verdict).
    REVIEW = "review"
    #: The grader itself failed on this student (not the submission's doing): stored nowhere.
    GRADER_FAILED = "grader failed"


@dataclass(frozen=True)
class Trouble:
    """One thing that went wrong, where: `notebook` a file name ("arithmetic.ipynb"; None for the
    whole submission), `cell` a cell's index in it (None when no one cell), `message` the words
    (any learner text in them already escaped)."""

    kind: TroubleKind
    message: str
    notebook: str | None = None
    cell: int | None = None

    def line(self) -> str:
        """The trouble as one line of text: `<notebook>: <message>`."""
        return f"{self.notebook}: {self.message}" if self.notebook else self.message

    def to_json(self) -> dict:
        return {"kind": self.kind.value, "message": self.message, "notebook": self.notebook, "cell": self.cell}

    @classmethod
    def from_json(cls, data: dict) -> Trouble:
        """The record of to_json's data; KeyError or ValueError when it is not one."""
        cell = data.get("cell")
        return cls(
            TroubleKind(data["kind"]),
            str(data["message"]),
            None if data.get("notebook") is None else str(data["notebook"]),
            None if cell is None else int(cell),
        )


def past_budget(troubles: list[Trouble]) -> bool:
    """Whether these troubles include running past a time budget."""
    return any(trouble.kind is TroubleKind.TIME_BUDGET for trouble in troubles)


#: The troubles that say a notebook of the assignment was not graded for a student (it scores 0).
NOT_GRADED = (TroubleKind.UNREADABLE, TroubleKind.MISSING, TroubleKind.RENAMED)


@dataclass(frozen=True)
class ItemVerdict:
    """One item of a judged cell as the class report keeps it: its wording, points, whether it
    passed, the failure (one escaped report line), the hint of the judgment that failed, and
    whether it failed because the answer was never given (the checks module says so: the
    release's stub, a name never defined), which the report counts as not attempted."""

    what: str
    points: float
    passed: bool
    failure: str | None = None
    hint: str | None = None
    unanswered: bool = False


@dataclass(frozen=True)
class CellVerdict:
    """A judged cell: the points earned of `max`, its items, why it could not be checked at all
    (None when it could), and whether that was for a name of the learner's never defined (an
    answer cell still at the release's stub: not attempted)."""

    earned: float
    max: float
    items: tuple[ItemVerdict, ...] = ()
    error: str | None = None
    unanswered: bool = False


@dataclass(frozen=True)
class NotebookOutcome:
    """What grading one notebook came to: its seconds and time budget (None: none), each judged
    cell's verdict by grade_id, and its troubles."""

    seconds: float = 0.0
    budget: float | None = None
    cells: dict[str, CellVerdict] = field(default_factory=dict)
    troubles: tuple[Trouble, ...] = ()
    judge_seed: int | None = None  # the seed of the judge's inputs (None: nothing judged)

    @property
    def past_budget(self) -> bool:
        return past_budget(list(self.troubles))

    def to_json(self) -> dict:
        return {
            "seconds": self.seconds,
            "budget": self.budget,
            "cells": {grade_id: asdict(cell) for grade_id, cell in self.cells.items()},
            "troubles": [trouble.to_json() for trouble in self.troubles],
            "judge_seed": self.judge_seed,
        }

    @classmethod
    def from_json(cls, data: dict) -> NotebookOutcome:
        """The record of to_json's data; KeyError, TypeError or ValueError when it is not one."""
        cells = {
            str(grade_id): CellVerdict(
                float(cell["earned"]),
                float(cell["max"]),
                tuple(ItemVerdict(**item) for item in cell.get("items", [])),
                cell.get("error"),
                bool(cell.get("unanswered", False)),
            )
            for grade_id, cell in data.get("cells", {}).items()
        }
        budget, seed = data.get("budget"), data.get("judge_seed")
        return cls(
            float(data.get("seconds") or 0.0),
            None if budget is None else float(budget),
            cells,
            tuple(Trouble.from_json(t) for t in data.get("troubles", [])),
            None if seed is None else int(seed),
        )


@dataclass(frozen=True)
class CellGrade:
    """A graded cell's automatic score as nbgrader stored it, and whether it awaits a person."""

    auto_score: float | None
    needs_manual_grade: bool


@dataclass(frozen=True)
class NotebookGrades:
    """What nbgrader stored of one graded notebook: each cell's grade and comment by grade_id,
    and its late penalty."""

    grades: dict[str, CellGrade] = field(default_factory=dict)
    comments: dict[str, str | None] = field(default_factory=dict)
    late_penalty: float | None = None


@dataclass(frozen=True)
class NotebookTiming:
    """Where one notebook's wall seconds went (the grading benchmark's parts)."""

    notebook: str
    total: float
    kernel_start: float = 0.0
    first_cell_imports: float = 0.0
    notebook_work: float = 0.0
    hidden_and_public_tests: float = 0.0
    nbgrader_overhead: float = 0.0
