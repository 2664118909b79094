"""Where a test cell's points are decided while a notebook runs: the glue between execution and the judge.

For each test cell of a notebook run with a judge source, the kernel runs the cell's imports
only (`kernel_part`); then the judge (autograder/judge.py) runs the whole cell in the grader,
and its report and score replace the cell's outputs (`write_verdict`: nbgrader reads the score
from there). The judge of a notebook is made at its first test cell, on that notebook's kernel.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass

from .judge import Judge, TrustedModules, is_test_cell, kernel_part, write_verdict
from .kernel_channel import KernelChannel


@dataclass
class JudgeSettings:
    """What every judge of a run is made with."""

    source: str  # the course's source folder of the assignment ("" : nothing is judged)
    checks_module: str  # the assignment's checks module
    seed: int  # the seed of the judge's fresh inputs (0: a new one, drawn now)


class JudgedCells:
    """One notebook's test cells, judged in the grader."""

    def __init__(self, settings: JudgeSettings, answers: list[str], timeout: float, deadline: float):
        self.settings, self.answers = settings, answers
        self.timeout, self.deadline = timeout, deadline
        self.judge: Judge | None = None

    def judges(self, cell) -> bool:
        return bool(self.settings.source) and is_test_cell(cell)

    @staticmethod
    def kernel_source(cell) -> str:
        """What the kernel runs of a judged cell."""
        return kernel_part(cell.source)

    def _judge_on(self, executor, helpers) -> Judge:
        if self.judge is None:
            channel = KernelChannel(
                executor.kc, asyncio.get_running_loop(), executor.km.interrupt_kernel, executor.km.is_alive
            )
            self.judge = Judge(
                channel,
                helpers,
                TrustedModules(self.settings.source, self.settings.checks_module or "remat_checks"),
                self.settings.seed or secrets.randbits(62),
                self.answers,
                timeout=self.timeout,
                deadline=self.deadline,
            )
        return self.judge

    async def verdict(self, cell, executor, helpers, stopped: str | None) -> tuple[float, str | None]:
        """Judge `cell` (its outputs become the report and the score); (seconds it took, why the
        kernel stopped answering, when it did)."""
        points = float(cell.metadata["nbgrader"].get("points", 0))
        if stopped is not None:
            write_verdict(cell, 0.0, f"this cell's checks did not run: {stopped}\n0 of {points:g} points")
            return 0.0, None
        start = time.perf_counter()
        judge = self._judge_on(executor, helpers)
        earned, report = await asyncio.to_thread(judge.run_cell, cell.source, points)
        write_verdict(cell, earned, report)
        dead = judge.kernel.dead
        return time.perf_counter() - start, (
            f"the kernel stopped answering while this cell was checked ({dead})" if dead else None
        )
