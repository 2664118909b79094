"""The lesson runs, and what it measured reproduces the recorded facts (JAX 0.9.2, CPU).

Every figure is read from what the notebooks recorded while they ran, never from a
constant that a notebook prints.
"""

from __future__ import annotations

import numpy as np
import pytest

from autograder.adapters.lesson import NOTEBOOKS
from bundle import companions


@pytest.mark.parametrize("name", [*NOTEBOOKS, *companions.names()])
def test_solution_notebook_runs_clean(solution_runs, name):
    """The solution notebook (a stage, or a Going deeper companion) runs clean in a fresh kernel."""
    run = solution_runs.executions[name]
    assert run.error is None, f"{name} failed at cell {run.failed_cell}:\n{run.error}"
    assert run.stderr == [], f"{name} wrote to stderr: {run.stderr}"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_release_stops_only_at_unanswered_stub(release_runs, name):
    """As a learner first opens it, every stage stops at its first unanswered cell, and nowhere
    before: a release that ran clean would have leaked its answers."""
    run = release_runs.executions[name]
    assert run.error is not None, f"{name} ran clean unanswered: does the release carry the answers?"
    failed = run.notebook.cells[run.failed_cell]
    error = next(o for o in failed.outputs if o.output_type == "error")
    unanswered_stub = error.ename == "NotImplementedError" and "raise NotImplementedError()" in failed.source
    # A failing check's report is its error: IPython shows its lines in place of a traceback.
    unanswered_check = error.ename == "CheckFailed" and "not answered yet" in "\n".join(error.traceback)
    assert unanswered_stub or unanswered_check, (
        f"{name}: unexpected {error.ename} at cell {run.failed_cell}: {error.evalue}"
    )
    earlier_errors = [
        i
        for i, cell in enumerate(run.notebook.cells[: run.failed_cell])
        if any(o.output_type == "error" for o in cell.get("outputs", []))
    ]
    assert earlier_errors == []


def test_residual_entries_match_recorded_counts(solution_runs):
    """Residual entries reproduce the recorded counts."""
    build, experiment = solution_runs.record("02-build.json"), solution_runs.record("03-experiment.json")
    assert build["residual_entries"] == {"plain": 9, "remat": 6}
    assert experiment["residual_entries"] == {"whole": 2}
    assert build["residual_kinds"]["plain"] == {"from a constant": 1, "output of tanh": 4, "output of sub": 4}
    assert build["residual_kinds"]["remat"] == {"from a constant": 1, "from the argument v": 1, "output of tanh": 4}


def test_compiled_memory_estimates_reproduce(solution_runs):
    build, experiment = solution_runs.record("02-build.json"), solution_runs.record("03-experiment.json")
    expected = {
        "argument_size_in_bytes": 64,
        "output_size_in_bytes": 64,
        "temp_size_in_bytes": 256,
        "alias_size_in_bytes": 0,
    }
    assert build["memory"] == {"plain": expected, "remat": expected}
    assert experiment["memory"]["whole"]["temp_size_in_bytes"] == 256


def test_gradients_match_oracle_and_each_other(solution_runs):
    """Gradients match the oracle and each other."""
    evidence = solution_runs.record("evidence.json")
    errors = evidence["max_abs_error"]
    # rtol 3e-5 of a gradient whose entries are O(1e-3); the absolute bound below is looser than that.
    assert errors["plain_vs_oracle"] < 3e-5 * 1e-2 + 1e-7
    assert errors["remat_vs_oracle"] < 3e-5 * 1e-2 + 1e-7
    assert errors["hvp_plain_vs_remat"] < 1e-6


def test_directional_derivative_reproduces(solution_runs):
    derivative = solution_runs.record("evidence.json")["directional_derivative"]
    assert derivative["epsilon"] == pytest.approx(1e-3)
    assert derivative["finite"] == pytest.approx(derivative["automatic"], rel=3e-3)


def test_timings_keep_every_sample(solution_runs):
    evidence = solution_runs.record("evidence.json")
    for policy in ("plain", "remat"):
        samples = evidence["timings_s"][policy]
        assert len(samples) == 7 and all(s > 0 for s in samples)
        summary = evidence["timing_summary_s"][policy]
        assert summary["median"] == pytest.approx(float(np.median(samples)))
        assert [summary["q25"], summary["q75"]] == pytest.approx(list(np.percentile(samples, [25, 75])))


def test_timing_order_measured_both_ways(solution_runs):
    """The order of timing is measured both ways (stage 2's companion)."""
    by_order = solution_runs.record("deeper-02.json")["timings_by_order_s"]
    assert (by_order["runs"], by_order["repeats"]) == (5, 7)
    assert by_order["medians"].keys() == {"plain first", "remat first"}
    for medians in by_order["medians"].values():
        assert medians.keys() == {"plain", "remat"}
        assert all(len(runs) == 5 and all(m > 0 for m in runs) for runs in medians.values())
    printed = "".join(
        output.get("text", "")
        for cell in solution_runs.executions["deeper/02-what-autodiff-keeps.ipynb"].notebook.cells
        for output in cell.get("outputs", [])
    )
    assert "timed first" in printed and "timed second" in printed


def test_evidence_file_has_the_promised_schema(solution_runs):
    evidence = solution_runs.record("evidence.json")
    assert set(evidence["residual_entries"]) == {"plain", "remat", "whole"}
    assert set(evidence["memory"]) == {"plain", "remat", "whole"}
    assert set(evidence["max_abs_error"]) == {"plain_vs_oracle", "remat_vs_oracle", "hvp_plain_vs_remat"}
    assert set(evidence["directional_derivative"]) == {"finite", "automatic", "epsilon"}
    assert set(evidence["timings_s"]) == {"plain", "remat"}
    assert {"utc", "python", "jax", "jaxlib", "numpy", "platform", "devices"} <= set(evidence["provenance"])
    assert evidence["provenance"]["jax"] == "0.9.2"
    assert evidence["missing_stages"] == []
    assert (solution_runs.runs_dir / "storage-views.png").stat().st_size > 10_000


def test_evidence_md_matches_evidence_json(solution_runs):
    """The file people read says the numbers the machine-readable one holds."""
    evidence = solution_runs.record("evidence.json")
    markdown = (solution_runs.runs_dir / "evidence.md").read_text()
    entries = ", ".join(f"{policy} {count}" for policy, count in evidence["residual_entries"].items())
    assert entries in markdown, f"the entries: {entries}"
    for policy in ("plain", "remat"):
        memory = evidence["memory"][policy]
        row = f"| {policy} | {memory['argument_size_in_bytes']} | {memory['output_size_in_bytes']} | {memory['temp_size_in_bytes']} |"
        assert row in markdown, f"the memory row of {policy}: {row}"
        summary = evidence["timing_summary_s"][policy]
        assert f"| {policy} | {summary['median'] * 1e6:.1f} |" in markdown, f"the median of {policy}"


def test_validate_prints_the_report_and_nothing_else(tmp_path):
    """`make validate` on an unanswered stage prints nbgrader's summary and, for each failing graded
    cell, its id and its checks' report: no test cell's source, nothing on stderr (the kernel's
    notice about unencrypted TCP included)."""
    import subprocess
    import sys

    from autograder.course.paths import RELEASE, ROOT
    from tests.lesson_cache import lesson_run_env

    env = {**__import__("os").environ, **lesson_run_env()}
    run = subprocess.run(
        [sys.executable, "-m", "bundle.validate", str(RELEASE / "01-understand.ipynb")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "test-layer-backward:" in run.stdout and "not answered yet" in run.stdout
    assert "def check_layer" not in run.stdout and "reference_cotangent" not in run.stdout
    assert run.stderr == "", run.stderr
