"""The grader's two autograde preprocessors: a sandboxed, timed Execute and the score-report check.

nbgrader_config.py puts them in `Autograde.autograde_preprocessors`: SandboxedExecute instead
of Execute, RequireScoreReport just before SaveAutoGrades.
"""
from __future__ import annotations

import re
import time

from nbformat.notebooknode import NotebookNode
from nbgrader import utils
from nbgrader.preprocessors import Execute, NbGraderPreprocessor

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

    async def async_start_new_kernel_client(self):
        start = time.perf_counter()
        try:
            return await super().async_start_new_kernel_client()
        finally:
            TIMINGS["kernel_start"] += time.perf_counter() - start

    async def async_execute_cell(self, cell, cell_index, *args, **kwargs):
        start = time.perf_counter()
        try:
            return await super().async_execute_cell(cell, cell_index, *args, **kwargs)
        finally:
            test = cell.cell_type == "code" and utils.is_grade(cell) and not utils.is_solution(cell)
            TIMINGS["cells"].append({"index": cell_index, "seconds": time.perf_counter() - start, "test": test})


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
