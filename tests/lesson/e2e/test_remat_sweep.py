"""The rematerialization sweep (solutions/remat_sweep.py and its instructor reference).

Small sizes only, and no thresholds on wall-clock time: the facts checked here are the
schema, the gradients, how unavailable analysis is reported, and relations between compiled
memory plans that hold on the CPU backend with a wide margin.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

SOLUTIONS = Path(__file__).resolve().parents[3] / "solutions"
sys.path.insert(0, str(SOLUTIONS))

import remat_sweep  # noqa: E402
import remat_sweep_reference  # noqa: E402
from remat_lesson import MEMORY_FIELDS, NO_MEMORY_ANALYSIS_ENV  # noqa: E402

ALL_POLICIES = {**remat_sweep.POLICIES, **remat_sweep_reference.REFERENCE_POLICIES}
on_cpu = pytest.mark.skipif(jax.default_backend() != "cpu", reason="relations measured on the CPU backend")


def temp_bytes(loss, depth, width, batch):
    weights, x = remat_sweep.make_inputs(depth, width, batch)
    compiled = jax.jit(jax.grad(loss)).lower(weights, x).compile()
    return remat_sweep.compiled_memory(compiled)["temp_size_in_bytes"]


@pytest.fixture(scope="module")
def small_sweep():
    return remat_sweep.run_sweep(
        depths=(2, 4),
        width=16,
        batch=32,
        extra_policies=remat_sweep_reference.REFERENCE_POLICIES,
        repeats=3,
        peak=False,
    )


def test_rows_complete_for_policies_and_depths(small_sweep):
    """Rows have every column for every policy and depth."""
    assert len(small_sweep) == 2 * len(ALL_POLICIES)
    assert {(row["policy"], row["depth"]) for row in small_sweep} == {
        (name, d) for name in ALL_POLICIES for d in (2, 4)
    }
    for row in small_sweep:
        assert set(remat_sweep.COLUMNS) <= set(row)
        assert (row["width"], row["batch"]) == (16, 32)
        assert row["residual_entries"] > 0 and row["residual_bytes"] > 0
        for key in ("argument_bytes", "output_bytes", "temp_bytes"):
            assert isinstance(row[key], int) and row[key] > 0, key
        assert len(row["time_samples_s"]) == 3 and all(s > 0 for s in row["time_samples_s"])
        assert row["time_median_s"] == sorted(row["time_samples_s"])[1]
        assert row["peak_bytes"] is None and row["peak_note"] == "not measured"


def test_dot_barrier_counts_around_compilation(small_sweep):
    """Dot and barrier counts are reported before and after compilation."""
    for row in small_sweep:
        for key in ("dots_lowered", "dots_compiled", "barriers_lowered", "barriers_compiled"):
            assert isinstance(row[key], int) and row[key] >= 0, key
        assert row["dots_lowered"] > 0 and row["dots_compiled"] > 0
    at_4 = {row["policy"]: row for row in small_sweep if row["depth"] == 4}
    # The unrolled per-layer checkpoint writes one extra forward dot per layer and a barrier
    # around each recomputation, before compilation.
    assert at_4["checkpoint_per_layer"]["dots_lowered"] == at_4["plain"]["dots_lowered"] + 4
    assert at_4["checkpoint_per_layer"]["barriers_lowered"] == 4
    assert at_4["plain"]["barriers_lowered"] == 0


@on_cpu
def test_cpu_compiler_removes_unrolled_recompute(small_sweep):
    """The CPU compiler removes the unrolled recomputation."""
    at_4 = {row["policy"]: row for row in small_sweep if row["depth"] == 4}
    assert at_4["checkpoint_per_layer"]["dots_compiled"] == at_4["plain"]["dots_compiled"]
    assert at_4["checkpoint_per_layer"]["barriers_compiled"] == 0
    # Inside a loop the recomputation survives: the checkpointed body has one more dot.
    assert at_4["scan_checkpointed_body"]["dots_compiled"] == at_4["scan"]["dots_compiled"] + 1


def test_sweep_gradients_equal_plain(small_sweep):
    """Sweep rows record gradients equal to plain."""
    # run_sweep also raises GradientMismatch when a policy's gradient is off; this reads the record.
    for row in small_sweep:
        assert row["max_abs_diff_vs_plain"] is not None and row["max_abs_diff_vs_plain"] <= 1e-6


def gradient(loss, weights, x):
    return np.asarray(jax.jit(jax.grad(loss))(weights, x))


def assert_same_gradient(found, expected):
    # Summation order may differ between programs: compare at the gradient's own scale.
    np.testing.assert_allclose(found, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


def test_sqrt_segments_loss_takes_any_divisor():
    weights, x = remat_sweep.make_inputs(12, 8, 16, seed=4)
    expected = gradient(remat_sweep.scan_loss, weights, x)
    for segment_length in (1, 3, 12):
        found = gradient(lambda w, v, k=segment_length: remat_sweep_reference.sqrt_segments_loss(w, v, k), weights, x)
        assert_same_gradient(found, expected)


def test_sqrt_segments_loss_rejects_non_divisor():
    """The sqrt_segments loss rejects a length that does not divide depth."""
    weights, x = remat_sweep.make_inputs(10, 4, 8)
    with pytest.raises(ValueError, match="divisible"):
        remat_sweep_reference.sqrt_segments_loss(weights, x, 4)


def test_segment_lengths_divide_the_depth():
    assert remat_sweep.sqrt_segment_length(256) == 16
    assert remat_sweep_reference.nested_segment_lengths(256) == (16, 4, 4)
    for depth in (1, 7, 12, 30, 64, 96, 128):
        assert depth % remat_sweep.sqrt_segment_length(depth) == 0
        assert math.prod(remat_sweep_reference.nested_segment_lengths(depth)) == depth


def test_a_mismatching_gradient_stops_the_sweep():
    def wrong_loss(weights, x):
        return 2.0 * remat_sweep.plain_loss(weights, x)

    with pytest.raises(remat_sweep.GradientMismatch, match="wrong"):
        remat_sweep.run_sweep(
            depths=(2,),
            width=4,
            batch=8,
            policies=["plain"],
            extra_policies={"wrong": wrong_loss},
            repeats=1,
            peak=False,
        )


def test_disabled_memory_analysis_stays_none(monkeypatch):
    monkeypatch.setenv(NO_MEMORY_ANALYSIS_ENV, "1")
    rows = remat_sweep.run_sweep(depths=(2,), width=4, batch=8, policies=["plain", "scan"], repeats=1, peak=False)
    for row in rows:
        for key in ("argument_bytes", "output_bytes", "temp_bytes", "alias_bytes"):
            assert row[key] is None, key
        assert row["residual_bytes"] > 0  # the other views are still there


class _FakeAnalysis:
    def __init__(self, value):
        for field in MEMORY_FIELDS:
            setattr(self, field, value)


class _FakeCompiled:
    def __init__(self, answer):
        self.answer = answer

    def memory_analysis(self):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    "answer", [None, NotImplementedError("no analysis"), _FakeAnalysis(0)], ids=["none", "raises", "all-zero"]
)
def test_unavailable_analysis_is_none_never_zero(answer):
    assert remat_sweep.compiled_memory(_FakeCompiled(answer)) == {field: None for field in MEMORY_FIELDS}


def test_residual_bytes_from_printed_shape():
    """Residual bytes come from the printed shape."""
    assert remat_sweep.residual_bytes("f32[1024,128] output of tanh from x.py:1:2 (layer)") == 1024 * 128 * 4
    assert remat_sweep.residual_bytes("bf16[3,5] from the argument w") == 30
    assert remat_sweep.residual_bytes("f32[] output of sum") == 4
    assert remat_sweep.residual_bytes("something else") is None


def test_csv_round_trip_keeps_none_and_numbers(small_sweep, tmp_path):
    path = remat_sweep.write_csv(small_sweep, tmp_path / "sweep.csv", command="test", settings={"depths": [4, 8]})
    assert path.with_suffix(".provenance.json").is_file()
    back = remat_sweep.read_csv(path)
    assert [row["policy"] for row in back] == [row["policy"] for row in small_sweep]
    assert back[0]["peak_bytes"] is None and back[0]["temp_bytes"] == small_sweep[0]["temp_bytes"]
    assert back[0]["time_samples_s"] == pytest.approx(small_sweep[0]["time_samples_s"], rel=1e-5)


def test_figures_are_drawn(small_sweep, tmp_path):
    remat_sweep.plot_memory(small_sweep, tmp_path / "memory.png")
    remat_sweep.plot_time(small_sweep, tmp_path / "time.png")
    for name in ("memory.png", "memory.svg", "time.png", "time.svg"):
        assert (tmp_path / name).stat().st_size > 0


@on_cpu
def test_checkpointed_scan_plans_less_temp():
    """Checkpointed scan body plans less temp than plain scan."""
    # At L=32 the plain scan stacks three activations per layer and the checkpointed body one.
    checkpointed = temp_bytes(remat_sweep.scan_checkpointed_body_loss, 32, 32, 256)
    plain_scan = temp_bytes(remat_sweep.scan_loss, 32, 32, 256)
    assert checkpointed < 0.6 * plain_scan


@on_cpu
def test_sqrt_segments_and_nesting_plan_less():
    """Sqrt segments plan less temp than plain scan and nesting less still."""
    plain_scan = temp_bytes(remat_sweep.scan_loss, 64, 32, 256)
    segments = temp_bytes(remat_sweep_reference.sqrt_segments, 64, 32, 256)
    nested = temp_bytes(remat_sweep_reference.nested_sqrt_segments, 64, 32, 256)
    assert segments < 0.5 * plain_scan
    assert nested < segments


@pytest.mark.skipif(
    not Path("/proc/self/status").is_file() or jax.default_backend() != "cpu",
    reason="needs Linux /proc and the CPU backend",
)
@pytest.mark.parametrize(
    "loss", [remat_sweep.scan_loss, remat_sweep_reference.sqrt_segments], ids=["shipped", "reference"]
)
def test_fresh_process_peak_is_a_positive_number(loss):
    measured = remat_sweep.measure_peak(loss, 16, 32, 256)
    assert measured["peak_note"] == "measured", measured
    assert isinstance(measured["peak_bytes"], int) and measured["peak_bytes"] > 0


def test_notebook_policy_has_no_fresh_peak():
    """A notebook policy has no fresh process peak."""
    measured = remat_sweep.measure_peak(lambda weights, x: remat_sweep.scan_loss(weights, x), 4, 4, 8)
    assert measured["peak_bytes"] is None and "not importable" in measured["peak_note"]


def test_peak_setting_is_checked():
    with pytest.raises(ValueError, match="peak"):
        remat_sweep.run_sweep(depths=(2,), width=4, batch=8, policies=["plain"], repeats=1, peak="sometimes")


@on_cpu
def test_pass_trace_names_barrier_and_dot_passes():
    """The pass trace names where the barriers and the recomputed dots go.

    On CPU the barriers go in the expander, before layout assignment; the extra dots in a later CSE."""
    trace = remat_sweep.pass_trace(remat_sweep.checkpoint_per_layer_loss, depth=4)
    assert trace, "no pass trace"
    passes = [row["after"] for row in trace]
    (barriers,) = remat_sweep.passes_that_changed(trace, "barriers")
    assert (barriers["after"], barriers["from"], barriers["barriers"]) == ("cse_barrier_expander", 4, 0)
    assert passes.index("cse_barrier_expander") < passes.index("layout-assignment")
    dots = remat_sweep.passes_that_changed(trace, "dots")
    assert [(row["after"], row["from"], row["dots"]) for row in dots] == [("cse", 15, 11)]
    assert [row["step"] for row in trace if row["after"] == "layout-assignment"][0] < dots[0]["step"]
    assert remat_sweep.pass_trace(lambda w, x: remat_sweep.plain_loss(w, x)) is None  # a lambda: no fresh process


@on_cpu
def test_pass_trace_bypasses_compile_cache(tmp_path, monkeypatch):
    """A learner's JAX_COMPILATION_CACHE_DIR must not empty the trace: a program loaded from the
    cache is not compiled, and XLA writes no pass of it. The first trace fills the cache (every
    compile kept), the second finds the program there and must still compile it."""
    from autograder.adapters.jax_programs.compile_cache import writing_env

    for name, value in writing_env(tmp_path / "cache").items():
        monkeypatch.setenv(name, value)
    first = remat_sweep.pass_trace(remat_sweep.checkpoint_per_layer_loss, depth=4)
    second = remat_sweep.pass_trace(remat_sweep.checkpoint_per_layer_loss, depth=4)
    assert first, "no pass trace"
    assert [row["after"] for row in second] == [row["after"] for row in first]
