"""Where a test cell's points are decided while a notebook runs: the glue between execution and the judge.

For each test cell of a notebook run with a judge source, the kernel runs the cell's imports
only (`kernel_part`); then the judge (autograder/judge/core.py) runs the whole cell in the grader,
and its report and score replace the cell's outputs (`write_verdict`). The judge of a notebook
is made at its first test cell, on that notebook's kernel.

The judge's ledger (`Ledger`) is the only source of a judged cell's points. nbgrader reads a
score from the cell's outputs, which a kernel can reach after the judge wrote them (nbclient
keeps a display_id pointing at an output's index for the cell's lifetime), and it reads a
negative, NaN, list or non-numeric value as full marks. So no display update reaches a verdict
once written (`Ledger.shield`, refused and flagged), and `LedgerGrades`, in place of nbgrader's
SaveAutoGrades, stores the ledger's points: where nbgrader's reading of the outputs differs,
the judge's value stands and the notebook is flagged for review.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import secrets
import time
from dataclasses import dataclass, field

from nbgrader import utils
from nbgrader.api import Gradebook
from nbgrader.preprocessors import SaveAutoGrades

from autograder.course.outcomes import CellVerdict, ItemVerdict
from autograder.judge.core import Judge, TrustedModules, is_test_cell, kernel_part, learner_text, write_verdict
from autograder.kernel.adapter import GENERIC, Adapter
from autograder.kernel.kernel_channel import KernelChannel

#: Where the notebook's ledger travels among nbgrader's preprocessors (the kernel never sees it).
LEDGER = "judge_ledger"
#: Findings noted per notebook at most (one submission cannot flood the review).
MAX_FINDINGS = 20


@dataclass
class Ledger:
    """The judge's points of each judged cell of one notebook, and what was found against them."""

    points: dict = field(default_factory=dict)  # grade_id -> the judge's points
    cells: dict = field(default_factory=dict)  # index of a cell holding a verdict -> its grade_id
    findings: list = field(default_factory=list)  # for review, one line each
    #: grade_id -> its verdict as the class report reads it
    items: dict[str, CellVerdict] = field(default_factory=dict)

    def note(self, finding: str) -> None:
        if len(self.findings) < MAX_FINDINGS:
            self.findings.append(finding)
        elif len(self.findings) == MAX_FINDINGS:
            self.findings.append("more findings of the same kind were not listed")

    def enter(self, cell, index: int, earned: float) -> None:
        grade_id = str(cell.metadata["nbgrader"].get("grade_id", f"cell {index + 1}"))
        self.points[grade_id], self.cells[index] = float(earned), grade_id

    def shield(self, display_id: str, targets: dict) -> None:
        """Take every cell holding a verdict out of nbclient's targets of a display update
        (`targets`: its map of that display_id, {cell index: [output index, ...]}), noting it."""
        for index in [i for i in targets if i in self.cells]:
            if targets.pop(index):
                self.note(
                    f"{self.cells[index]}: a display update (display_id {learner_text(display_id, 80)}) aimed at "
                    "the grader's report and score was refused"
                )

    def settle(self, cell, read) -> float | None:
        """The points to store for a judged cell: the ledger's. `read`: what nbgrader read from
        its outputs (a number, or the exception it raised); a disagreement is noted. None for a
        cell the judge did not judge."""
        if not is_test_cell(cell):
            return None
        grade_id = str(cell.metadata["nbgrader"].get("grade_id"))
        if grade_id not in self.points:  # a test cell the judge never wrote: no point is anyone else's to give
            self.note(f"{grade_id}: the grader's judge wrote no verdict for this cell; scored 0")
            return 0.0
        judged = self.points[grade_id]
        agrees = isinstance(read, (int, float)) and not isinstance(read, bool) and math.isclose(read, judged)
        if not agrees:
            said = f"{type(read).__name__}: {read}" if isinstance(read, BaseException) else repr(read)
            self.note(
                f"{grade_id}: the score read from the cell's outputs ({learner_text(said, 120)}) differs from "
                f"the judge's ({judged:g}); the judge's stands"
            )
        return judged


class LedgerGrades(SaveAutoGrades):
    """nbgrader's SaveAutoGrades, with a judged cell's points taken from the judge's ledger
    (what nbgrader reads from its outputs is checked against it), and the notebook flagged in
    the gradebook where anything was found."""

    def preprocess(self, nb, resources):
        nb, resources = super().preprocess(nb, resources)
        ledger = resources.get(LEDGER)
        if ledger is not None and ledger.findings:
            for finding in ledger.findings:
                self.log.warning("flagged for review: %s", finding)
            with Gradebook(self.db_url) as gb:
                gb.find_submission_notebook(self.notebook_id, self.assignment_id, self.student_id).flagged = True
                gb.db.commit()
        return nb, resources

    def preprocess_cell(self, cell, resources, cell_index):
        ledger = resources.get(LEDGER)
        if ledger is None or not is_test_cell(cell):
            return super().preprocess_cell(cell, resources, cell_index)
        # A test cell holds no answer: its score is all nbgrader stores of it.
        try:
            read, _ = utils.determine_grade(cell, self.log)
        except Exception as error:  # nbgrader cannot read it (a score over the cell's points, no text)
            read = error
        grade = self.gradebook.find_grade(
            cell.metadata["nbgrader"]["grade_id"], self.notebook_id, self.assignment_id, self.student_id
        )
        grade.auto_score = ledger.settle(cell, read)
        grade.needs_manual_grade = grade.manual_score is not None
        self.gradebook.db.commit()
        return cell, resources


@dataclass
class JudgeSettings:
    """What every judge of a run is made with."""

    source: str  # the course's source folder of the assignment ("" : nothing is judged)
    checks_module: str  # the assignment's checks module
    seed: int  # the seed of the judge's fresh inputs (0: a new one, drawn now)


class JudgedCells:
    """One notebook's test cells, judged in the grader (with what the assignment's adapter offers)."""

    def __init__(
        self,
        settings: JudgeSettings,
        answers: list[str],
        timeout: float,
        deadline: float,
        reserve: float = 0.0,
        adapter: Adapter = GENERIC,
        positions: list[int] | None = None,
    ):
        """positions: each answer cell's index in the notebook (core.answer_cell_positions): a
        test cell is judged on the answer cells above it, as its kernel has them (None: on all)."""
        self.settings, self.answers, self.adapter, self.positions = settings, answers, adapter, positions
        self.timeout, self.deadline, self.reserve = timeout, deadline, reserve
        self.judge: Judge | None = None
        self.ledger = Ledger()

    def judges(self, cell) -> bool:
        return bool(self.settings.source) and is_test_cell(cell)

    @staticmethod
    def kernel_source(cell) -> str:
        """What the kernel runs of a judged cell."""
        return kernel_part(cell.source)

    def _judge_on(self, executor, helpers) -> Judge:
        if self.judge is None:
            channel = KernelChannel(
                executor.kc,
                asyncio.get_running_loop(),
                executor.km.interrupt_kernel,
                executor.km.is_alive,
                native_arrays=self.adapter.native_arrays,
                operations=self.adapter.kernel_operations,
            )
            self.judge = Judge(
                channel,
                helpers,
                TrustedModules(self.settings.source, self.settings.checks_module),
                self.settings.seed or secrets.randbits(62),
                self.answers,
                timeout=self.timeout,
                deadline=self.deadline,
                reserve=self.reserve,
                evidence=self.adapter.evidence,
            )
        return self.judge

    async def verdict(self, cell, index: int, executor, helpers, stopped: str | None) -> tuple[float, str | None]:
        """Judge `cell`, at `index` (its outputs become the report and the score, its points go
        into the ledger); (seconds it took, why the kernel stopped answering, when it did)."""
        points = float(cell.metadata["nbgrader"].get("points", 0))
        if stopped is not None:
            write_verdict(cell, 0.0, f"this cell's checks did not run: {stopped}\n0 of {points:g} points")
            self.ledger.enter(cell, index, 0.0)
            self._keep_items(cell, 0.0, points, (), f"this cell's checks did not run: {stopped}")
            return 0.0, None
        start = time.perf_counter()
        if self.judge is None:  # a notebook's judge starts with helpers nothing of an earlier notebook changed
            await asyncio.to_thread(helpers.fresh)
        judge = self._judge_on(executor, helpers)
        judge.above = None if self.positions is None else bisect.bisect_left(self.positions, index)
        earned, report = await asyncio.to_thread(judge.run_cell, cell.source, points)
        write_verdict(cell, earned, report)
        self.ledger.enter(cell, index, earned)
        self._keep_items(cell, earned, points, judge.items, judge.cell_error, judge.cell_unanswered)
        dead = judge.kernel.dead
        return time.perf_counter() - start, (
            f"the kernel stopped answering while this cell was checked ({dead})" if dead else None
        )

    def take_troubles(self) -> list[str]:
        """What broke the grader's lines while this notebook's cells were judged (the notebook is
        then broken: execute.py puts each in its record)."""
        return self.judge.take_troubles() if self.judge is not None else []

    def _keep_items(
        self,
        cell,
        earned: float,
        points: float,
        items: tuple[ItemVerdict, ...],
        error: str | None,
        unanswered: bool = False,
    ) -> None:
        grade_id = str(cell.metadata["nbgrader"].get("grade_id"))
        self.ledger.items[grade_id] = CellVerdict(float(earned), points, items, error, unanswered)
