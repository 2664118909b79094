"""The lesson's *Going deeper* companion notebooks, one folder beside the stages.

solutions/deeper/NN-*.py (jupytext percent, the one source) -> solutions/deeper/NN-*.ipynb
(`make sync`) -> notebooks/deeper/ (`make release`, copied as they are: they hold no answers).
NN is the stage a companion extends. They carry no points and are no part of the graded
assignment (autograder/adapters/lesson.py names the five stages alone), so nothing grades,
collects or runs them while autograding; `make run` and the tests execute them after the stages.
"""

from __future__ import annotations

from pathlib import Path

from autograder.course.paths import SOLUTIONS

#: The companions' folder, under solutions/ and under the release alike.
FOLDER = "deeper"


def sources(solutions: Path = SOLUTIONS) -> list[Path]:
    """The companions' jupytext sources, in stage order."""
    return sorted((solutions / FOLDER).glob("[0-9][0-9]-*.py"))


def names(solutions: Path = SOLUTIONS) -> tuple[str, ...]:
    """The companions' notebooks, relative to the folder of the stages ('deeper/02-....ipynb')."""
    return tuple(f"{FOLDER}/{path.stem}.ipynb" for path in sources(solutions))
