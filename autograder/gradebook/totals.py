"""Every score of a class, read once from the gradebook: the one truth every output is drawn from.

The terminal's table, cells.csv, the LMS file, the class report and the PENDING lines all take
their numbers from `class_totals`; nbgrader's own readers of the same gradebook (its CSV export,
grades.csv, and formgrader) count the same way, and a test holds them all to it. The rules are
nbgrader's:

- a cell's score is its manual score when a person gave one, else its automatic score, plus any
  extra credit (nbgrader's `Grade.score`);
- a cell is *pending* while it awaits a person (`needs_manual_grade`): a written answer not
  graded yet, or a manual grade kept on an answer that changed (a RECHECK). A pending cell counts
  at the score the gradebook holds for it, and is listed as pending wherever totals are shown;
- a notebook's total is the sum of its cells; a late penalty is taken off where a total is
  posted (the LMS file, nbgrader's `score`), never from the raw totals.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CellScore:
    """One graded cell of one student, as the gradebook counts it."""

    student: str
    notebook: str
    grade_id: str
    score: float
    max_score: float
    pending: bool


@dataclass
class ClassTotals:
    """The assignment's notebooks (in order), each of their graded cells (in the source's order),
    and every score of every student with a submission."""

    assignment: str
    notebooks: list[str]
    maxima: dict[str, float] = field(default_factory=dict)  # notebook -> its most points
    cells: list[CellScore] = field(default_factory=list)
    #: (student, notebook) -> the late penalty nbgrader assigned that notebook
    penalties: dict[tuple[str, str], float] = field(default_factory=dict)

    @property
    def students(self) -> list[str]:
        return sorted({cell.student for cell in self.cells})

    def of(self, student: str, notebook: str | None = None) -> list[CellScore]:
        return [c for c in self.cells if c.student == student and (notebook is None or c.notebook == notebook)]

    def score(self, student: str, notebook: str | None = None) -> float:
        """Raw points: every cell counted as the gradebook counts it, pending ones included."""
        return sum(cell.score for cell in self.of(student, notebook))

    def maximum(self, notebook: str | None = None) -> float:
        """The most points of a notebook (of the assignment, when None)."""
        return sum(most for nb, most in self.maxima.items() if notebook in (None, nb))

    def penalty(self, student: str, notebook: str | None = None) -> float:
        return sum(p for (s, nb), p in self.penalties.items() if s == student and notebook in (None, nb))

    def posted(self, student: str, notebook: str | None = None) -> float:
        """Points after the late penalty: what grades.csv's `score` and the LMS file post."""
        return self.score(student, notebook) - self.penalty(student, notebook)

    def pending(self, student: str | None = None) -> list[CellScore]:
        return [c for c in self.cells if c.pending and (student is None or c.student == student)]

    def pending_by_student(self) -> dict[str, list[str]]:
        """{student: ["notebook/grade_id", ...]}: the cells awaiting a person, as PENDING lines and
        the LMS export name them."""
        named: dict[str, list[str]] = {}
        for cell in self.pending():
            named.setdefault(cell.student, []).append(f"{cell.notebook}/{cell.grade_id}")
        return named

    def pending_points(self, student: str) -> float:
        """The most points still waiting for a person's grade."""
        return sum(cell.max_score for cell in self.pending(student))


def class_totals(
    db_url: str,
    assignment: str,
    students: Iterable[str] | None = None,
    cell_order: dict[str, list[str]] | None = None,
) -> ClassTotals:
    """Every graded cell of each student with a submission of `assignment` (only `students`, when
    given), from the gradebook at db_url; each notebook's cells in `cell_order` ({notebook:
    [grade_id, ...]}, the source's order), else by name. An assignment the gradebook does not
    have: no cell."""
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb:
        return totals_in(gb, assignment, students, cell_order)


def totals_in(
    gb,
    assignment: str,
    students: Iterable[str] | None = None,
    cell_order: dict[str, list[str]] | None = None,
) -> ClassTotals:
    """class_totals, read from a gradebook already open (nbgrader's `Gradebook`: an export plugin's)."""
    from nbgrader.api import MissingEntry

    wanted = None if students is None else set(students)
    try:
        stored = gb.find_assignment(assignment)
    except MissingEntry:
        return ClassTotals(assignment, [])
    notebooks = [nb.name for nb in sorted(stored.notebooks, key=lambda nb: nb.name)]
    order = {nb: {grade_id: index for index, grade_id in enumerate(ids)} for nb, ids in (cell_order or {}).items()}
    totals = ClassTotals(assignment, notebooks, {nb.name: float(nb.max_score) for nb in stored.notebooks})
    for submission in sorted(stored.submissions, key=lambda s: s.student.id):
        student = submission.student.id
        if wanted is not None and student not in wanted:
            continue
        for notebook in sorted(submission.notebooks, key=lambda n: n.name):
            places = order.get(notebook.name, {})
            for grade in sorted(notebook.grades, key=lambda g: (places.get(g.name, len(places)), g.name)):
                totals.cells.append(
                    CellScore(
                        student,
                        notebook.name,
                        grade.name,
                        float(grade.score),
                        float(grade.max_score),
                        bool(grade.needs_manual_grade),
                    )
                )
            totals.penalties[(student, notebook.name)] = float(notebook.late_submission_penalty or 0.0)
    return totals
