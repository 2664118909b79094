"""How long each stage takes a learner, from a stated model: the time each stage's map states.

The model, per stage, counting only what a learner must do (cells tagged `going-deeper` are
optional and counted apart):

- reading: the markdown's words at READING_WORDS_PER_MINUTE, a pace for technical prose read to
  be understood, code spans and tables included;
- running: CODE_CELL_MINUTES for each code cell (read it, run it, read what it prints), plus the
  stage's compute time as measured on the reference machine (COMPUTE_SECONDS);
- doing: MINUTES_PER_POINT for each point of a graded task (automatic or read by a person), and
  PREDICTION_MINUTES for each ungraded answer (a prediction).

`python -m bundle.time_model` prints the table; `tests/lesson/e2e/test_prose.py` holds the maps to it.
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

READING_WORDS_PER_MINUTE = 150
CODE_CELL_MINUTES = 0.5
MINUTES_PER_POINT = 2.0
PREDICTION_MINUTES = 2.0
#: Maps state minutes rounded up to a multiple of this.
ROUND_TO = 5
#: Cells a learner may skip: nothing graded needs them.
OPTIONAL_TAG = "going-deeper"

#: Seconds each solution notebook took to execute headless (`python -m bundle.execute solutions`,
#: 2-core machine with other work running, JAX 0.9.2 on CPU, stage 3's full small sweep), rounded
#: up from the 5.4, 30.4, 118.2, 24.1 and 15.1 s measured.
COMPUTE_SECONDS = {
    "01-understand": 10,
    "02-build": 30,
    "03-experiment": 120,
    "04-exercise": 25,
    "05-evidence": 15,
}

WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class StageTime:
    stage: str
    words: int
    code_cells: int
    points: float
    predictions: int
    compute_s: float
    optional_words: int
    optional_code_cells: int

    @property
    def reading_min(self) -> float:
        return self.words / READING_WORDS_PER_MINUTE

    @property
    def running_min(self) -> float:
        return self.code_cells * CODE_CELL_MINUTES + self.compute_s / 60

    @property
    def doing_min(self) -> float:
        return self.points * MINUTES_PER_POINT + self.predictions * PREDICTION_MINUTES

    @property
    def minutes(self) -> int:
        """What the map states: the model's total, rounded up to ROUND_TO minutes."""
        total = self.reading_min + self.running_min + self.doing_min
        return int(math.ceil(total / ROUND_TO) * ROUND_TO)

    @property
    def optional_minutes(self) -> int:
        total = self.optional_words / READING_WORDS_PER_MINUTE + self.optional_code_cells * CODE_CELL_MINUTES
        return int(math.ceil(total / ROUND_TO) * ROUND_TO) if total else 0


def stage_time(source: Path) -> StageTime:
    """The model's inputs for one stage's source (solutions/NN-*.py, jupytext percent)."""
    notebook = jupytext.read(source)
    words = code_cells = optional_words = optional_code_cells = predictions = 0
    points = 0.0
    for cell in notebook.cells:
        optional = OPTIONAL_TAG in cell.metadata.get("tags", [])
        grading = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "markdown":
            count = len(WORD.findall(cell.source))
            if optional:
                optional_words += count
            else:
                words += count
        elif optional:
            optional_code_cells += 1
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
    return StageTime(
        source.stem,
        words,
        code_cells,
        points,
        predictions,
        COMPUTE_SECONDS[source.stem],
        optional_words,
        optional_code_cells,
    )


def lesson_times(folder: Path = SOLUTIONS) -> list[StageTime]:
    return [stage_time(folder / Path(name).with_suffix(".py")) for name in NOTEBOOKS]


def main() -> int:
    print(
        f"model: {READING_WORDS_PER_MINUTE} words a minute, {CODE_CELL_MINUTES} min a code cell + measured "
        f"compute, {MINUTES_PER_POINT} min a point, {PREDICTION_MINUTES} min a prediction; rounded up to "
        f"{ROUND_TO} min"
    )
    print(
        f"{'stage':>14} {'words':>6} {'cells':>5} {'points':>6} {'read':>5} {'run':>5} {'do':>5} {'map':>4} {'optional':>8}"
    )
    times = lesson_times()
    for t in times:
        print(
            f"{t.stage:>14} {t.words:>6} {t.code_cells:>5} {t.points:>6g} {t.reading_min:>5.1f} {t.running_min:>5.1f} "
            f"{t.doing_min:>5.1f} {t.minutes:>4} {t.optional_minutes:>8}"
        )
    print(f"{'lesson':>14} {sum(t.minutes for t in times):>45}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
