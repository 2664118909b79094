"""How long each stage takes a learner: the minutes each stage's map states, from a model
calibrated against a learner's measured minutes.

The model, per notebook (a stage, or a *Going deeper* companion, timed apart):

- reading: the words of the markdown a learner reads (every whitespace-separated token of a
  markdown cell: headings, tables, code spans and formulas included; a written answer's cell holds
  the learner's own words, counted as its points) at READING_WORDS_PER_MINUTE;
- running: CODE_CELL_MINUTES for each code cell (read it, run it, read what it prints), plus the
  notebook's compute time as measured on the reference machine (COMPUTE_SECONDS);
- doing: MINUTES_PER_POINT for each point of a graded task (checked automatically or read by a
  person) and for each ungraded answer (a prediction).

Calibration. A learner tried the lesson as it stood before its core and depth were separated
(TRIAL: its words, cells, points and compute per stage, and the minutes each stage took). The
field notes measured dense technical prose at about 1.5 times the minutes of a 150-words-a-minute
reading: READING_WORDS_PER_MINUTE is 150 / 1.5 = 100. With reading fixed there, the minutes per
code cell and per point are the least-squares fit of the model to the trial's mid-range minutes
(1.14 and 1.20, rounded to 1.1 and 1.2); a fit with reading free lands at 95 words a minute,
which agrees. tests/lesson/unit/test_time_model.py holds the model to the trial and the maps to
the model.

`python -m bundle.time_model` prints the table.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import jupytext

from autograder.adapters.lesson import NOTEBOOKS
from autograder.course.paths import SOLUTIONS
from bundle import companions

#: 150 words a minute, the usual model, took 1.5 times as long for this lesson's prose
#: (field notes: "dense technical prose took a learner about 1.5x the model's minutes").
READING_WORDS_PER_MINUTE = 150 / 1.5
#: Fitted to TRIAL with reading fixed at READING_WORDS_PER_MINUTE (see the module's docstring).
CODE_CELL_MINUTES = 1.1
MINUTES_PER_POINT = 1.2
#: Maps state minutes rounded to the nearest multiple of this ("about N minutes").
ROUND_TO = 5

#: The goals of the core path: its prose over the five stages, and its minutes by this model.
WORD_GOAL = 5000
MINUTE_GOAL = 110

#: Seconds each notebook took to execute headless (`python -m bundle.execute solutions`, hidden
#: tests included; 2-core machine shared with other work, JAX 0.9.2 on CPU, stage 3's full small
#: sweep): the least of two runs, rounded up to 5 s.
COMPUTE_SECONDS = {
    "01-understand": 10,
    "02-build": 25,
    "03-experiment": 150,
    "04-exercise": 25,
    "05-evidence": 25,
    "02-what-autodiff-keeps": 50,
    "03-boundaries-and-compiled-programs": 75,
    "04-differences-and-modes": 25,
}


@dataclass(frozen=True)
class Trial:
    """One stage as the learner tried it: what the model reads, and the minutes it took."""

    stage: str
    words: int
    code_cells: int
    points: float
    predictions: int
    compute_s: float
    minutes: tuple[float, float]


#: The trial (the lesson before this split, read from the release alone with every task answered):
#: words, code cells and points per stage as the release then held them, the compute the model
#: then counted, and the minutes the learner took, low to high.
TRIAL = (
    Trial("01-understand", 1341, 7, 3, 1, 10, (25, 30)),
    Trial("02-build", 2295, 28, 15, 0, 30, (70, 80)),
    Trial("03-experiment", 4652, 39, 7, 1, 120, (95, 110)),
    Trial("04-exercise", 1066, 11, 8, 0, 25, (30, 30)),
    Trial("05-evidence", 666, 9, 2, 0, 15, (15, 20)),
)

WORD = re.compile(r"\S+")


def model_minutes(words: float, code_cells: float, points: float, predictions: float, compute_s: float) -> float:
    """The model's minutes, unrounded."""
    reading = words / READING_WORDS_PER_MINUTE
    running = code_cells * CODE_CELL_MINUTES + compute_s / 60
    return reading + running + (points + predictions) * MINUTES_PER_POINT


def rounded(minutes: float) -> int:
    """What a map states: the nearest multiple of ROUND_TO, at least ROUND_TO."""
    return max(ROUND_TO, int(math.floor(minutes / ROUND_TO + 0.5)) * ROUND_TO)


@dataclass(frozen=True)
class NotebookTime:
    name: str
    words: int
    code_cells: int
    points: float
    predictions: int
    compute_s: float

    @property
    def exact_minutes(self) -> float:
        return model_minutes(self.words, self.code_cells, self.points, self.predictions, self.compute_s)

    @property
    def minutes(self) -> int:
        """What the map states."""
        return rounded(self.exact_minutes)


def notebook_time(source: Path) -> NotebookTime:
    """The model's inputs for one notebook's source (jupytext percent)."""
    notebook = jupytext.read(source)
    words = code_cells = predictions = 0
    points = 0.0
    for cell in notebook.cells:
        grading = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "markdown":
            words += 0 if grading.get("solution") else len(WORD.findall(cell.source))
        else:
            code_cells += 1
        if grading.get("grade"):
            points += float(grading["points"])
        elif grading.get("solution"):
            # An answer cell whose test cell carries the points, or an ungraded prediction.
            graded_by_test = any(
                other.metadata.get("nbgrader", {}).get("grade_id") == f"test-{grading['grade_id']}"
                for other in notebook.cells
            )
            predictions += 0 if graded_by_test else 1
    return NotebookTime(source.stem, words, code_cells, points, predictions, COMPUTE_SECONDS[source.stem])


def lesson_times(folder: Path = SOLUTIONS) -> list[NotebookTime]:
    """The five stages' core, in order."""
    return [notebook_time(folder / Path(name).with_suffix(".py")) for name in NOTEBOOKS]


def companion_times(folder: Path = SOLUTIONS) -> list[NotebookTime]:
    """The *Going deeper* companions, timed apart."""
    return [notebook_time(source) for source in companions.sources(folder)]


def main() -> int:
    print(
        f"model: {READING_WORDS_PER_MINUTE:g} words a minute, {CODE_CELL_MINUTES} min a code cell + measured compute, "
        f"{MINUTES_PER_POINT} min a point or prediction; maps round to the nearest {ROUND_TO} min"
    )
    header = f"{'notebook':>36} {'words':>6} {'cells':>5} {'points':>6} {'model':>6} {'map':>4}"
    for title, times in (("core", lesson_times()), ("going deeper (timed apart)", companion_times())):
        print(f"\n{title}\n{header}")
        for t in times:
            print(
                f"{t.name:>36} {t.words:>6} {t.code_cells:>5} {t.points + t.predictions:>6g} {t.exact_minutes:>6.1f} {t.minutes:>4}"
            )
        print(
            f"{'total':>36} {sum(t.words for t in times):>6} {sum(t.code_cells for t in times):>5} {'':>6} "
            f"{sum(t.exact_minutes for t in times):>6.1f} {sum(t.minutes for t in times):>4}"
        )
    print("\nthe trial, against the model:")
    for t in TRIAL:
        modelled = model_minutes(t.words, t.code_cells, t.points, t.predictions, t.compute_s)
        print(f"{t.stage:>36} model {modelled:5.1f}, measured {t.minutes[0]:g}-{t.minutes[1]:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
