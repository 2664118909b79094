"""The grader's preprocessors, in place of or beside nbgrader's own.

nbgrader_config.py puts them in `Autograde.autograde_preprocessors` (SandboxedExecute instead
of Execute, RequireScoreReport before SaveAutoGrades) and `Autograde.sanitize_preprocessors`
(DeduplicateIdsCleanly and RestoreMissingCells instead of DeduplicateIds and OverwriteCells,
whose failures on duplicated or deleted cells would lose a learner's whole notebook).
"""
from __future__ import annotations

import re
import time

from nbformat.notebooknode import NotebookNode
from nbclient.util import run_sync
from nbgrader import utils
from nbgrader.preprocessors import DeduplicateIds, Execute, NbGraderPreprocessor, OverwriteCells

from .sandbox import SandboxedKernelManager

#: Seconds spent per notebook, filled while it runs; the grader reads and resets it.
TIMINGS: dict = {"kernel_start": 0.0, "cells": []}

# The last line Checks.score() prints: "2.5 of 3 points".
SCORE_LINE = re.compile(r"^\s*(\d+(?:\.\d+)?) of (\d+(?:\.\d+)?) points\s*$")


def reset_timings() -> None:
    TIMINGS["kernel_start"] = 0.0
    TIMINGS["cells"] = []


class SandboxedExecute(Execute):
    """nbgrader's Execute, with the kernel under bwrap and the seconds of each step recorded."""

    def __init__(self, *args, **kwargs):
        # Execute passes its own kernel manager class as a keyword, which beats config.
        kwargs.setdefault("kernel_manager_class", SandboxedKernelManager)
        super().__init__(*args, **kwargs)

    async def async_start_new_kernel(self, **kwargs):
        start = time.perf_counter()
        try:
            return await super().async_start_new_kernel(**kwargs)
        finally:
            TIMINGS["kernel_start"] += time.perf_counter() - start

    async def async_start_new_kernel_client(self):
        start = time.perf_counter()
        try:
            return await super().async_start_new_kernel_client()
        finally:
            TIMINGS["kernel_start"] += time.perf_counter() - start

    async def async_execute_cell(self, cell, cell_index, *args, **kwargs):
        if cell.cell_type != "code":
            return await super().async_execute_cell(cell, cell_index, *args, **kwargs)
        start = time.perf_counter()
        try:
            return await super().async_execute_cell(cell, cell_index, *args, **kwargs)
        finally:
            test = utils.is_grade(cell) and not utils.is_solution(cell)
            TIMINGS["cells"].append({"index": cell_index, "seconds": time.perf_counter() - start, "test": test})

    # nbclient binds the blocking names to its own coroutines: rebind them to ours.
    start_new_kernel = run_sync(async_start_new_kernel)
    start_new_kernel_client = run_sync(async_start_new_kernel_client)
    execute_cell = run_sync(async_execute_cell)


def score_report(cell: NotebookNode) -> tuple[float, float] | None:
    """(earned, declared) when the cell printed Checks' report and returned the same number."""
    printed = "".join(
        out.get("text", "") for out in cell.get("outputs", []) if out.output_type == "stream" and out.name == "stdout"
    )
    lines = [line for line in printed.splitlines() if line.strip()]
    match = SCORE_LINE.match(lines[-1]) if lines else None
    if match is None:
        return None
    earned, declared = float(match.group(1)), float(match.group(2))
    for out in cell.get("outputs", []):
        if out.output_type == "execute_result":
            try:
                value = float(out.get("data", {}).get("text/plain", ""))
            except ValueError:
                return None
            return (earned, declared) if abs(value - earned) < 1e-9 else None
    return None


class RequireScoreReport(NbGraderPreprocessor):
    """Zero a test cell that did not end with Checks' score report.

    nbgrader gives full marks to a test cell without an error output. Learner code can hide
    errors (by replacing IPython's showtraceback, say), so a cell that stopped early would pass.
    Every test cell of the lesson ends with `checks.score()`, which prints "N of M points" and
    returns N: a test cell whose outputs lack that report gets an error output here, which
    SaveAutoGrades scores as 0 and the feedback shows.
    """

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code" and utils.is_grade(cell) and not utils.is_solution(cell):
            if not any(out.output_type == "error" for out in cell.get("outputs", [])):
                report = score_report(cell)
                points = float(cell.metadata["nbgrader"].get("points", 0))
                if report is None or abs(report[1] - points) > 1e-9:
                    message = (
                        "this test cell did not finish with its score report, so it gets 0 points. "
                        "Something stopped the checks early or hid an error: run the cell yourself "
                        "and read what it prints."
                    )
                    cell.outputs.append(
                        NotebookNode(output_type="error", ename="ScoreReportMissing", evalue=message, traceback=[f"ScoreReportMissing: {message}"])
                    )
        return cell, resources


class DeduplicateIdsCleanly(DeduplicateIds):
    """nbgrader's DeduplicateIds, leaving no empty nbgrader metadata behind.

    A learner who pastes a graded cell twice gets the earlier copies turned into plain cells.
    Stock DeduplicateIds leaves `"nbgrader": {}` on them, and OverwriteCells (with
    add_missing_cells) then fails with KeyError 'grade_id', losing the whole notebook.
    """

    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if cell.metadata.get("nbgrader") == {}:
            del cell.metadata["nbgrader"]
        return cell, resources


class RestoreMissingCells(OverwriteCells):
    """nbgrader's OverwriteCells, restoring a deleted test cell even when its answer cell is gone too.

    Stock add_missing_grade_cells inserts a missing cell after the source cell just before it,
    and fails with KeyError when that one was deleted as well. Here it goes after the nearest
    earlier source cell still present (or first, when none is).
    """

    def add_missing_grade_cells(self, nb, resources):
        source_nb = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
        order = [cell.name for cell in source_nb.source_cells]
        solution_ids = {cell.name for cell in source_nb.solution_cells}
        for grade_cell in sorted(source_nb.grade_cells, key=lambda c: order.index(c.name)):
            present = {
                cell.metadata["nbgrader"]["grade_id"]: index
                for index, cell in enumerate(nb.cells)
                if "grade_id" in cell.metadata.get("nbgrader", {})
            }
            if grade_cell.name in present:
                continue
            self.log.warning("Missing grade cell %s: restored from the source", grade_cell.name)
            source_cell = source_nb.source_cells[order.index(grade_cell.name)]
            restored = self.missing_cell_transform(source_cell, grade_cell.max_score, is_solution=grade_cell.name in solution_ids)
            earlier = [present[name] for name in order[: order.index(grade_cell.name)] if name in present]
            nb.cells.insert(max(earlier) + 1 if earlier else 0, restored)
        return nb, resources
