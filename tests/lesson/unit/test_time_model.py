"""The time model (bundle/time_model.py) against the learner's trial it is calibrated on, the maps
against the model, and the core path against its goals; the *Going deeper* companions apart.

How the core's prose is counted: the markdown cells of the five stages' sources (solutions/NN-*.py)
that a learner reads, every whitespace-separated token (headings, table rules, code spans and
formulas included); a written answer's cell is the learner's own text and is left out. Code cells
are counted as cells. Read from the sources only: no notebook runs here.
"""

from __future__ import annotations

import re

import jupytext
import nbformat
import pytest

from autograder.adapters.lesson import NOTEBOOKS
from autograder.course.paths import SOLUTIONS
from bundle import companions, time_model

MAP_HEADING = "## Your map"
STAGE_MINUTES = re.compile(r"\*\*This stage:\*\* about (\d+) minutes")
COMPANION_MINUTES = re.compile(r"\*\*Time:\*\* about (\d+) minutes")
WHOLE = re.compile(r"\*\*The whole lesson:\*\* about (\d+) minutes over five stages: ([\d, and]+) minutes")


def _cells(source):
    return jupytext.read(source).cells


def _map(source) -> str:
    maps = [c.source for c in _cells(source) if c.cell_type == "markdown" and c.source.lstrip().startswith(MAP_HEADING)]
    assert len(maps) == 1, f"{source.name}: expected one '{MAP_HEADING}' cell, found {len(maps)}"
    return " ".join(maps[0].split())


def _stage_sources():
    return [SOLUTIONS / name.replace(".ipynb", ".py") for name in NOTEBOOKS]


def test_the_model_counts_what_it_says(tmp_path):
    """Words of the markdown a learner reads (a written answer's cell left out), code cells, points
    and predictions are counted as the module states, and the minutes follow its formula."""
    source = tmp_path / "01-understand.py"
    source.write_text(
        "# %% [markdown]\n# one two three four five six\n\n"
        "# %%\nx = 1\n\n"
        '# %% nbgrader={"solution": true, "grade_id": "guess"}\nGUESS = 1\n\n'
        '# %% nbgrader={"solution": true, "grade_id": "task"}\nANSWER = 1\n\n'
        '# %% nbgrader={"grade": true, "grade_id": "test-task", "points": 3}\nassert ANSWER\n\n'
        '# %% [markdown] nbgrader={"solution": true, "grade": true, "grade_id": "essay", "points": 2}\n'
        "# a model answer the learner never reads\n"
    )
    counted = time_model.notebook_time(source)
    assert (counted.words, counted.code_cells, counted.points, counted.predictions) == (6, 4, 5.0, 1)
    expected = 6 / time_model.READING_WORDS_PER_MINUTE + 4 * time_model.CODE_CELL_MINUTES
    expected += time_model.COMPUTE_SECONDS["01-understand"] / 60 + (5 + 1) * time_model.MINUTES_PER_POINT
    assert counted.exact_minutes == pytest.approx(expected)
    assert counted.minutes == time_model.rounded(expected)
    assert [time_model.rounded(m) for m in (1, 7.4, 7.5, 12.6)] == [5, 5, 10, 15]


def test_calibration_reproduces_the_trial():
    """The calibrated model gives each stage of the trial the minutes the learner took, within one
    rounding step (the trial's ranges are to the nearest 5 minutes), and the whole trial within
    its range; 150 words a minute, the model before calibration, falls short of the range."""
    step = time_model.ROUND_TO
    for trial in time_model.TRIAL:
        modelled = time_model.model_minutes(
            trial.words, trial.code_cells, trial.points, trial.predictions, trial.compute_s
        )
        low, high = trial.minutes
        assert low - step <= modelled <= high + step, f"{trial.stage}: model {modelled:.1f}, trial {low}-{high}"
    total = sum(
        time_model.model_minutes(t.words, t.code_cells, t.points, t.predictions, t.compute_s) for t in time_model.TRIAL
    )
    low, high = sum(t.minutes[0] for t in time_model.TRIAL), sum(t.minutes[1] for t in time_model.TRIAL)
    assert low <= total <= high
    words = sum(t.words for t in time_model.TRIAL)
    at_150 = total - words / time_model.READING_WORDS_PER_MINUTE + words / 150
    assert at_150 < low, f"read at 150 words a minute, the trial would take {at_150:.0f} minutes"


def test_the_core_meets_its_goals():
    """The core's prose, over the five stages, is at most WORD_GOAL words; its minutes by the model
    at most MINUTE_GOAL, both as the model computes them and as the maps state them."""
    times = time_model.lesson_times()
    words = sum(t.words for t in times)
    assert words <= time_model.WORD_GOAL, f"the core holds {words} words"
    exact = sum(t.exact_minutes for t in times)
    assert exact <= time_model.MINUTE_GOAL, f"the core takes {exact:.1f} minutes by the model"
    assert sum(t.minutes for t in times) <= time_model.MINUTE_GOAL


def test_maps_state_the_model():
    """Each stage's map states the model's minutes for it, and stage 1's the whole lesson's, stage
    by stage; each companion states its own, timed apart."""
    times = time_model.lesson_times()
    for source, modelled in zip(_stage_sources(), times, strict=True):
        stated = STAGE_MINUTES.search(_map(source))
        assert stated, f"{source.name}: the map states no time"
        assert int(stated.group(1)) == modelled.minutes, f"{source.name}: map {stated.group(1)}, model {modelled}"
    first = _map(_stage_sources()[0])
    whole = WHOLE.search(first)
    assert whole, first
    assert [int(m) for m in re.findall(r"\d+", whole.group(2))] == [t.minutes for t in times]
    assert int(whole.group(1)) == sum(t.minutes for t in times)
    assert "HLO" in first and "roofline" in first
    for source, modelled in zip(companions.sources(), time_model.companion_times(), strict=True):
        stated = COMPANION_MINUTES.search(" ".join(_cells(source)[0].source.split()))
        assert stated and int(stated.group(1)) == modelled.minutes, f"{source.name}: {modelled}"


@pytest.mark.parametrize("page", ["docs/learners.md", "README.md"])
def test_pages_state_the_lesson_time(page):
    """The learners' guide and the README state the whole lesson's minutes as the maps do, and
    no other whole-lesson time."""
    total = sum(t.minutes for t in time_model.lesson_times())
    text = (SOLUTIONS.parent / page).read_text()
    assert f"about {total} minutes" in text
    assert re.findall(r"(?:notebooks|stages)\*{0,2}, about (\d+) minutes", text) == [str(total)]


def test_companions_carry_no_points_and_are_linked_where_they_extend():
    """A companion holds no graded or answer cell, and the stage it extends names it (deeper/NN-...)
    in a cell after its map, at the point it extends; no stage needs one (nothing imports it)."""
    assert companions.sources(), "no Going deeper companion found"
    for source in companions.sources():
        cells = _cells(source)
        assert not any(cell.metadata.get("nbgrader") for cell in cells), f"{source.name} carries nbgrader cells"
        stage = SOLUTIONS / next(n for n in NOTEBOOKS if n.startswith(source.name[:3])).replace(".ipynb", ".py")
        linked = [
            i
            for i, cell in enumerate(_cells(stage))
            if cell.cell_type == "markdown"
            and f"deeper/{source.stem}.ipynb" in cell.source
            and not cell.source.lstrip().startswith(MAP_HEADING)
        ]
        assert linked, f"{stage.name} does not name deeper/{source.stem}.ipynb where it extends it"
    for source in _stage_sources():
        code = "\n".join(c.source for c in _cells(source) if c.cell_type == "code")
        assert f"{companions.FOLDER}/" not in code, f"{source.name}: a core cell refers to a companion"


def test_the_assignment_is_the_five_stages():
    """The grader's notebook list stays the five stages: no companion is graded or collected."""
    assert len(NOTEBOOKS) == 5
    assert not set(companions.names()) & set(NOTEBOOKS)
    for name in companions.names():
        notebook = nbformat.read(SOLUTIONS / name, as_version=4)
        assert all("nbgrader" not in cell.metadata for cell in notebook.cells)
