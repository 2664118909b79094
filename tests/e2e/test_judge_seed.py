"""A failure can be reproduced: every run prints and keeps its judge seed, and grading again with
`--judge-seed` gives the same inputs, so the same messages, word for word; another seed gives
other inputs (the hidden checks draw fresh ones: the messages quote the values they found)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

from autograder.course.paths import AUTOGRADER
from autograder.run.grade import grade
from tests.grading import options

#: Two seeds, as a run prints them.
SEED, OTHER = 424242, 777


def _messages(out: Path) -> list[str]:
    """Every failing item's message the judge kept for the student."""
    record = json.loads((out / "judged" / "ann.json").read_text())
    return [
        item["failure"]
        for notebook in record["notebooks"].values()
        for cell in notebook["cells"].values()
        for item in cell["items"]
        if item["failure"]
    ]


def test_a_seed_repeats_the_inputs_and_messages(tmp_path):
    """Two runs with one seed: identical messages; a third with another seed: other values."""
    submissions = tmp_path / "submissions"
    (submissions / "ann").mkdir(parents=True)
    # The dropped tanh factor fails every item of layer_backward, hidden ones on fresh inputs.
    shutil.copyfile(
        AUTOGRADER / "samples" / "sample-two-mistakes" / "01-understand.ipynb",
        submissions / "ann" / "01-understand.ipynb",
    )
    runs = {}
    for name, seed in (("first", SEED), ("again", SEED), ("other", OTHER)):
        printed = io.StringIO()
        result = grade(submissions, tmp_path / name, options(judge_seed=seed), printed)
        assert f"judge seed: {seed} (grading again with --judge-seed {seed}" in printed.getvalue()
        assert result.judge_seed == seed
        assert json.loads((tmp_path / name / "judged" / "ann.json").read_text())["judge_seed"] == seed
        assert f"Judge seed: {seed}" in (tmp_path / name / "report.html").read_text()
        runs[name] = _messages(tmp_path / name)
    assert len(runs["first"]) == 3, runs["first"]
    assert runs["again"] == runs["first"]
    assert runs["other"] != runs["first"]
