"""Stage 5's evidence assembly on hand-made stage records: no notebook runs, no kernel starts.

`remat_evidence.collect` merges what stages 1-4 recorded, `outcomes` phrases it as the four
predictions, `order_effect` reads runs in both orders (stage 2's companion), and `fill_template`
writes evidence.md. Each test feeds records whose answer is known by construction.
"""

from __future__ import annotations

import json
import sys

import pytest

from autograder.course.paths import SOLUTIONS

sys.path.insert(0, str(SOLUTIONS))
import remat_evidence  # noqa: E402
from remat_lesson import MEMORY_FIELDS  # noqa: E402


def memory(temp: int) -> dict:
    return {name: (temp if name == "temp_size_in_bytes" else 8) for name in MEMORY_FIELDS}


RECORDS = {
    "01-understand": {
        "predictions": {
            "remat_changes_the_gradient": False,
            "remat_saves_fewer_residual_entries": True,
            "remat_lowers_compiled_temp_bytes": True,
            "remat_is_faster": True,
        }
    },
    "02-build": {
        "residual_entries": {"plain": 9, "remat": 6},
        "memory": {"plain": memory(256), "remat": memory(256)},
        "max_abs_error": {"plain_vs_oracle": 3e-8, "remat_vs_oracle": 4e-8},
        "timings_s": {"plain": [1.0e-5, 1.2e-5, 1.1e-5], "remat": [1.1e-5, 1.3e-5, 0.9e-5]},
    },
    "03-experiment": {"residual_entries": {"whole": 2}, "memory": {"whole": memory(512)}},
    "04-exercise": {
        "directional_derivative": {"finite": 0.5, "automatic": 0.5000001, "epsilon": 1e-3},
        "max_abs_error": {"hvp_plain_vs_remat": 0.0},
    },
}


@pytest.fixture
def runs(tmp_path, monkeypatch):
    monkeypatch.setenv("REMAT_LESSON_RUNS_DIR", str(tmp_path))

    def write(stages=RECORDS):
        for stage, record in stages.items():
            (tmp_path / f"{stage}.json").write_text(json.dumps(record))
        return tmp_path

    return write


def test_collect_merges_stages_keeps_views(runs):
    """`collect` merges the stages and keeps the three views apart."""
    runs()
    evidence = remat_evidence.collect("pytest")
    assert evidence["residual_entries"] == {"plain": 9, "remat": 6, "whole": 2}
    assert evidence["memory"]["whole"]["temp_size_in_bytes"] == 512
    assert evidence["max_abs_error"] == {"plain_vs_oracle": 3e-8, "remat_vs_oracle": 4e-8, "hvp_plain_vs_remat": 0.0}
    assert evidence["timing_summary_s"]["remat"] == pytest.approx(
        {"median": 1.1e-5, "q25": 1.0e-5, "q75": 1.2e-5, "min": 0.9e-5, "max": 1.3e-5, "count": 3}
    )
    assert evidence["missing_stages"] == []
    assert evidence["provenance"]["command"] == "pytest"


def test_stage_not_run_is_none_not_zero(runs):
    """A stage not run is missing and None, never zero."""
    runs({stage: record for stage, record in RECORDS.items() if stage != "03-experiment"})
    evidence = remat_evidence.collect()
    assert evidence["missing_stages"] == ["03-experiment"]
    assert evidence["residual_entries"]["whole"] is None and evidence["memory"]["whole"] is None


def test_outcomes_answer_predictions(runs):
    """Outcomes answer the predictions from the measurements."""
    runs()
    happened = remat_evidence.outcomes(remat_evidence.collect())
    assert happened == {
        "remat_changes_the_gradient": False,
        "remat_saves_fewer_residual_entries": True,
        "remat_lowers_compiled_temp_bytes": False,  # 256 and 256: equal is not lower
        "remat_is_faster": "not decided: the quartile ranges overlap",
    }


PLAIN = [1.0e-5, 1.2e-5, 1.1e-5, 0.2e-5, 1.05e-5, 1.15e-5, 1.1e-5]  # seven samples, one disturbed


@pytest.mark.parametrize(
    "remat, verdict",
    [
        ([0.5e-5, 0.6e-5, 0.55e-5, 0.5e-5, 0.52e-5, 0.58e-5, 0.54e-5], True),
        ([2e-5, 3e-5, 2.5e-5, 2.2e-5, 2.4e-5, 2.1e-5, 2.6e-5], False),
        ([1.1e-5, 0.95e-5, 1.0e-5, 1.05e-5, 1.08e-5, 0.98e-5, 1.02e-5], "not decided: the quartile ranges overlap"),
        # One disturbed sample, far above every other: the quartiles still decide.
        ([0.5e-5, 0.6e-5, 0.55e-5, 40e-5, 0.52e-5, 0.58e-5, 0.54e-5], True),
    ],
)
def test_faster_only_when_quartile_ranges_part(remat, verdict):
    """A policy is faster only when its quartile range lies wholly below the other's: one disturbed
    sample, which would decide a rule of minima and maxima, does not."""
    summaries = {name: remat_evidence._spread(samples) for name, samples in (("plain", PLAIN), ("remat", remat))}
    assert remat_evidence._faster(summaries) == verdict


def test_unavailable_estimate_is_no_outcome(runs):
    """An unavailable estimate is not an outcome."""
    records = json.loads(json.dumps(RECORDS))
    records["02-build"]["memory"] = {"plain": None, "remat": None}
    runs(records)
    assert remat_evidence.outcomes(remat_evidence.collect())["remat_lowers_compiled_temp_bytes"] is None


def test_order_effect_first_slower_both_ways():
    """`order_effect` sees the first timed policy slower in both orders."""
    medians = {
        "plain first": {"plain": [2e-5, 2e-5, 2e-5], "remat": [1e-5, 1e-5, 1e-5]},
        "remat first": {"remat": [2e-5, 2e-5, 2e-5], "plain": [1e-5, 1e-5, 1e-5]},
    }
    lines = remat_evidence.order_effect(medians)
    assert len(lines) == 3
    assert lines[0].startswith("plain: timed first 20.0 µs, timed second 10.0 µs")
    assert "slower when timed first in 3 of 3 runs" in lines[0] and "(not overlapping)" in lines[0]
    assert "the ranking of the medians flips with the order" in lines[2]
    assert "the policy timed first has the higher median" in lines[2]


def test_order_effect_one_run_says_nothing():
    """`order_effect` with one run says nothing about the order."""
    one = {"plain first": {"plain": [2e-5], "remat": [1e-5]}, "remat first": {"remat": [2e-5], "plain": [1e-5]}}
    (line,) = remat_evidence.order_effect(one)
    assert "too few" in line


def test_order_effect_keeps_stable_ranking():
    """`order_effect` keeps a ranking that survives the swap."""
    medians = {
        "plain first": {"plain": [1e-5, 1e-5], "remat": [2e-5, 2e-5]},
        "remat first": {"remat": [2e-5, 2e-5], "plain": [1e-5, 1e-5]},
    }
    assert "remat's median is higher in both orders" in remat_evidence.order_effect(medians)[-1]


def test_evidence_md_fills_every_placeholder(runs):
    """evidence.md fills every placeholder with what was measured."""
    runs()
    evidence = remat_evidence.collect()
    text = remat_evidence.fill_template(remat_evidence.template_path().read_text(), evidence, "  Because.  ")
    assert "{{" not in text
    assert "plain 9, remat 6, whole 2" in text
    assert "| remat | 8 | 8 | 256 | 8 |" in text
    assert "| remat | 11.0 | 10.0 – 12.0 | 11.0, 13.0, 9.0 |" in text
    assert "| remat is faster | True | not decided: the quartile ranges overlap |" in text
    assert text.rstrip().endswith("Because.")


def test_evidence_md_says_unavailable(runs):
    """evidence.md says unavailable and not recorded."""
    records = json.loads(json.dumps(RECORDS))
    records["02-build"]["memory"]["remat"] = None
    del records["04-exercise"]
    runs(records)
    text = remat_evidence.fill_template(remat_evidence.template_path().read_text(), remat_evidence.collect(), "")
    assert "| remat | unavailable | unavailable | unavailable | unavailable |" in text
    assert "finite not recorded (run the stage that measures it)" in text
    assert "Stages not recorded: 04-exercise" in text and "(not written yet)" in text


def test_a_placeholder_nothing_fills_is_an_error(runs):
    runs()
    with pytest.raises(ValueError, match="nothing fills"):
        remat_evidence.fill_template("{{no_such_value}}", remat_evidence.collect(), "")
