"""Stage 3: retain the evidence. JAXPR per condition, the compiled program, split timings."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from . import compiled_info, evidence, inputs, spec
from .learner import call, learner_code, require
from .stage2 import cache_size, watching_jax

STAGE = 3
SUMMARY_FILE, HLO_FILE, TIMINGS_FILE = spec.STAGE_FILES[STAGE][:3]


def jaxpr_file(condition_name: str) -> str:
    return spec.JAXPR_FILE.format(condition=condition_name)


def signature(traced, static_kwargs) -> dict:
    """The input types exactly as JAX traced them; "~" marks a weakly typed value."""
    (params, *arrays), _ = traced.in_avals
    named = dict(zip(spec.SIGNATURE_FIELDS[1:4], (str(aval) for aval in arrays)))
    return {
        "params": {name: str(aval) for name, aval in params.items()},
        **named,
        "activation": f"{static_kwargs['activation']!r} (static)",
    }


def write_jaxprs(model, evidence_dir: Path) -> dict[str, str]:
    jitted_step = call(model, STAGE, "make_counted_step", [])
    artifacts = {}
    for condition in spec.CONDITIONS:
        args, static_kwargs = inputs.condition_arguments(condition.name)
        with learner_code(STAGE):
            traced = jitted_step.trace(*args, **static_kwargs)
        header = (
            f"# JAXPR of the audited step, condition {condition.name}: "
            f"{condition.what_changed}\n"
            f"{spec.JAXPR_SIGNATURE_PREFIX}{json.dumps(signature(traced, static_kwargs))}\n"
        )
        evidence.write_text(evidence_dir / jaxpr_file(condition.name), header + str(traced.jaxpr))
        artifacts[jaxpr_file(condition.name)] = f"stage 3: JAXPR for condition {condition.name}"
    return artifacts


def device_arguments(condition_name: str):
    """The condition's arguments already on the device, so no warm call pays for a copy."""
    args, static_kwargs = inputs.condition_arguments(condition_name)
    return jax.block_until_ready(jax.device_put(args)), static_kwargs


def require_samples(samples, function_name: str, repeats: int) -> list[float]:
    require(
        isinstance(samples, (list, tuple)) and len(samples) == repeats,
        STAGE,
        function_name,
        f"must return a list of {repeats} samples (one per call), got "
        f"{type(samples).__name__} of length {len(samples) if hasattr(samples, '__len__') else '?'}",
    )
    require(
        all(isinstance(value, (int, float)) and math.isfinite(value) and value > 0 for value in samples),
        STAGE,
        function_name,
        "must return positive seconds",
    )
    return [float(value) for value in samples]


def require_seconds(value, function_name: str) -> float:
    require(
        isinstance(value, (int, float)) and math.isfinite(value) and value > 0,
        STAGE,
        function_name,
        f"must return positive seconds, got {value!r}",
    )
    return float(value)


def summarize_compiled(compiled, evidence_dir: Path) -> dict:
    hlo_text = compiled_info.compiled_text(compiled)
    if hlo_text is not None:
        evidence.write_text(evidence_dir / HLO_FILE, hlo_text)
    summary = {
        "condition": spec.BASELINE,
        "cost_analysis": compiled_info.cost_summary(compiled),
        "memory_analysis": compiled_info.memory_summary(compiled),
        "hlo_file": HLO_FILE if hlo_text is not None else None,
        "hlo_op_counts": compiled_info.hlo_op_counts(hlo_text) if hlo_text else None,
    }
    evidence.write_json(evidence_dir / SUMMARY_FILE, summary)
    return summary


def measure_compilation(model, args, static_kwargs):
    """Trace/lower and compile a step that has never run."""
    fresh_step = call(model, STAGE, "make_counted_step", [])
    result = call(model, STAGE, "time_lower_and_compile", fresh_step, args, static_kwargs)
    require(
        isinstance(result, tuple) and len(result) == 3,
        STAGE,
        "time_lower_and_compile",
        "must return (compiled, trace_and_lower_seconds, compile_seconds)",
    )
    compiled, lower_seconds, compile_seconds = result
    require(
        hasattr(compiled, "cost_analysis"),
        STAGE,
        "time_lower_and_compile",
        "must return the compiled program first (the result of .compile())",
    )
    return (
        compiled,
        require_seconds(lower_seconds, "time_lower_and_compile"),
        require_seconds(compile_seconds, "time_lower_and_compile"),
    )


def measure_execution(model, args, static_kwargs) -> dict:
    """First call of a fresh step, then warm synchronized calls and dispatch-only calls."""
    step = call(model, STAGE, "make_counted_step", [])
    first_call = require_seconds(call(model, STAGE, "time_first_call", step, args, static_kwargs), "time_first_call")
    cache_after_first = cache_size(step)
    with watching_jax() as (_, compile_counter):
        warm = require_samples(
            call(model, STAGE, "time_synchronized_calls", step, args, static_kwargs, spec.WARM_REPEATS),
            "time_synchronized_calls",
            spec.WARM_REPEATS,
        )
        dispatch = require_samples(
            call(model, STAGE, "time_dispatch_only", step, args, static_kwargs, spec.DISPATCH_REPEATS),
            "time_dispatch_only",
            spec.DISPATCH_REPEATS,
        )
    cache_growth = None if cache_after_first is None else cache_size(step) - cache_after_first
    return {
        "first_call_s": first_call,
        "warm_synchronized_s": warm,
        "dispatch_only_s": dispatch,
        "compile_events_during_warm_and_dispatch": len(compile_counter.durations),
        "cache_growth_during_warm_and_dispatch": cache_growth,
    }


def measure_clock_probe(model) -> dict:
    """Your two clocks on a program that runs for milliseconds, so their gap is unmistakable."""
    probe = jax.jit(lambda matrix: jnp.tanh(matrix @ matrix) @ matrix)
    matrix = jax.block_until_ready(jnp.full((spec.PROBE_SIZE,) * 2, 1e-3, jnp.float32))
    jax.block_until_ready(probe(matrix))  # compile outside both clocks
    synchronized = require_samples(
        call(model, STAGE, "time_synchronized_calls", probe, (matrix,), {}, spec.PROBE_REPEATS),
        "time_synchronized_calls",
        spec.PROBE_REPEATS,
    )
    dispatch = require_samples(
        call(model, STAGE, "time_dispatch_only", probe, (matrix,), {}, spec.PROBE_REPEATS),
        "time_dispatch_only",
        spec.PROBE_REPEATS,
    )
    return {
        "what": f"tanh(A @ A) @ A, A float32[{spec.PROBE_SIZE},{spec.PROBE_SIZE}]",
        "synchronized_s": synchronized,
        "dispatch_only_s": dispatch,
    }


def measure_transfer(model) -> dict:
    host_args, _ = inputs.condition_arguments(spec.BASELINE)
    host_arrays = [host_args[1], host_args[2]]  # the per-step data: inputs and targets
    samples = require_samples(
        call(model, STAGE, "time_host_to_device", host_arrays, spec.TRANSFER_REPEATS),
        "time_host_to_device",
        spec.TRANSFER_REPEATS,
    )
    return {
        "host_to_device_s": samples,
        "host_to_device_bytes": int(sum(np.asarray(array).nbytes for array in host_arrays)),
    }


def timing_summary(timings: dict) -> dict:
    warm = statistics.median(timings["warm_synchronized_s"])
    dispatch = statistics.median(timings["dispatch_only_s"])
    return {
        "warm_synchronized_median_s": warm,
        "dispatch_only_median_s": dispatch,
        "host_to_device_median_s": statistics.median(timings["host_to_device_s"]),
        "compile_over_warm_median": timings["compile_s"] / warm,
        "first_call_over_warm_median": timings["first_call_s"] / warm,
        "dispatch_share_of_synchronized": dispatch / warm,
    }


def run(model, evidence_dir: Path) -> dict[str, str]:
    transfer = measure_transfer(model)  # first: the one timer that needs no earlier stage
    artifacts = write_jaxprs(model, evidence_dir)
    args, static_kwargs = device_arguments(spec.BASELINE)
    compiled, lower_seconds, compile_seconds = measure_compilation(model, args, static_kwargs)
    summary = summarize_compiled(compiled, evidence_dir)
    timings = {
        "unit": "seconds",
        "condition": spec.BASELINE,
        "repeats": {"warm": spec.WARM_REPEATS, "dispatch": spec.DISPATCH_REPEATS, "transfer": spec.TRANSFER_REPEATS},
        "trace_lower_s": lower_seconds,
        "compile_s": compile_seconds,
    }
    timings.update(measure_execution(model, args, static_kwargs))
    timings.update(transfer)
    timings["clock_probe"] = measure_clock_probe(model)
    timings["summary"] = timing_summary(timings)
    evidence.write_json(evidence_dir / TIMINGS_FILE, timings)
    print_summary(timings, summary)
    artifacts[SUMMARY_FILE] = (
        "stage 3: the compiled baseline program: cost_analysis, memory_analysis (None where unavailable), HLO op counts"
    )
    if summary["hlo_file"]:
        artifacts[HLO_FILE] = "stage 3: optimized HLO text of the compiled baseline program"
    artifacts[TIMINGS_FILE] = (
        "stage 3: trace/lower, compile, first call, every warm "
        "synchronized and dispatch-only sample, host-to-device copies"
    )
    return artifacts


def microseconds(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:,.1f} ms"
    return f"{seconds * 1e6:,.1f} us"


def print_summary(timings: dict, summary: dict) -> None:
    derived = timings["summary"]
    print("Stage 3: retained evidence (baseline condition)")
    print(f"  trace + lower       {microseconds(timings['trace_lower_s'])}")
    print(f"  compile             {microseconds(timings['compile_s'])}")
    print(f"  first call          {microseconds(timings['first_call_s'])}  (trace + compile + run)")
    print(
        f"  warm, synchronized  {microseconds(derived['warm_synchronized_median_s'])} median "
        f"of {len(timings['warm_synchronized_s'])}"
    )
    print(
        f"  dispatch only       {microseconds(derived['dispatch_only_median_s'])} median "
        f"of {len(timings['dispatch_only_s'])}"
    )
    print(
        f"  host -> device      {microseconds(derived['host_to_device_median_s'])} median "
        f"for {timings['host_to_device_bytes']:,} bytes"
    )
    probe = timings["clock_probe"]
    print(
        f"  clock probe         dispatch {microseconds(statistics.median(probe['dispatch_only_s']))}"
        f", synchronized {microseconds(statistics.median(probe['synchronized_s']))} "
        f"({probe['what']})"
    )
    print(f"  compile / warm execution: {derived['compile_over_warm_median']:,.0f}x")
    if summary["hlo_op_counts"]:
        top = sorted(summary["hlo_op_counts"].items(), key=lambda item: -item[1])[:6]
        print("  HLO ops: " + ", ".join(f"{name} {count}" for name, count in top))
