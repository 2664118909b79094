"""Stage 2: call the step under changed conditions and record what the program itself reports.

Three independent witnesses per call: the learner's trace log (appended only while tracing),
the jitted function's cache size (one entry per compiled program), and JAX's own cache-miss
explanation (jax_explain_cache_misses, captured from logging). A fourth, JAX's compile event,
counts backend compilations.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import jax

from . import evidence, inputs, spec
from .learner import call, learner_code, require

STAGE = 2
CONDITIONS_FILE, MISSES_FILE = spec.STAGE_FILES[STAGE]
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
MISS_MARKER = "TRACING CACHE MISS"


class CacheMissRecorder(logging.Handler):
    """Collects JAX's cache-miss explanations instead of letting them reach the terminal."""

    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.explanations: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if MISS_MARKER in message:
            self.explanations.append(message)


class CompileCounter:
    """Counts backend compilations through jax.monitoring, with their durations."""

    def __init__(self):
        self.durations: list[float] = []

    def __call__(self, event: str, duration_secs: float, **_: object) -> None:
        if event == COMPILE_EVENT:
            self.durations.append(duration_secs)


@contextlib.contextmanager
def watching_jax():
    """Explain cache misses and count compiles for the duration of the block only."""
    recorder, counter = CacheMissRecorder(), CompileCounter()
    jax_logger = logging.getLogger("jax")
    previous_propagate = jax_logger.propagate
    previous_explain = jax.config.jax_explain_cache_misses
    jax_logger.addHandler(recorder)
    jax_logger.propagate = False  # keep the terminal readable; the log file keeps the text
    jax.config.update("jax_explain_cache_misses", True)
    jax.monitoring.register_event_duration_secs_listener(counter)
    try:
        yield recorder, counter
    finally:
        jax.monitoring.unregister_event_duration_listener(counter)
        jax.config.update("jax_explain_cache_misses", previous_explain)
        jax_logger.propagate = previous_propagate
        jax_logger.removeHandler(recorder)


def cache_size(jitted_step):
    """Entries in the jitted function's compiled-program cache; None if this JAX hides it.

    _cache_size is private API: it exists in jax 0.9.2 and may change without notice.
    """
    counter = getattr(jitted_step, "_cache_size", None)
    return counter() if callable(counter) else None


def observe_call(jitted_step, trace_log, recorder, counter, condition) -> dict:
    args, static_kwargs = inputs.condition_arguments(condition.name)
    traces_before, cache_before = len(trace_log), cache_size(jitted_step)
    misses_before, compiles_before = len(recorder.explanations), len(counter.durations)
    with learner_code(STAGE):
        jax.block_until_ready(jitted_step(*args, **static_kwargs))
    return {
        "traces_before": traces_before,
        "traces_after": len(trace_log),
        "cache_size_before": cache_before,
        "cache_size_after": cache_size(jitted_step),
        "compile_events": len(counter.durations) - compiles_before,
        "compile_seconds": counter.durations[compiles_before:],
        "explanation": "\n".join(recorder.explanations[misses_before:]),
        "trace_log_entries": [
            dict(entry) if isinstance(entry, dict) else str(entry) for entry in trace_log[traces_before:]
        ],
    }


def check_diagnosis(diagnosis) -> dict:
    require(
        isinstance(diagnosis, dict) and {"retraced", "recompiled", "reason"} <= set(diagnosis),
        STAGE,
        "diagnose_call",
        'must return {"retraced": ..., "recompiled": ..., "reason": ...}',
    )
    require(
        diagnosis["reason"] in spec.REASONS,
        STAGE,
        "name_reason",
        f"returned {diagnosis['reason']!r}; name one of {', '.join(spec.REASONS)}",
    )
    recompiled = diagnosis["recompiled"]
    return {
        "retraced": bool(diagnosis["retraced"]),
        "recompiled": None if recompiled is None else bool(recompiled),
        "reason": diagnosis["reason"],
    }


def run(model, evidence_dir: Path) -> dict[str, str]:
    trace_log: list = []
    jitted_step = call(model, STAGE, "make_counted_step", trace_log)
    require(hasattr(jitted_step, "lower"), STAGE, "make_counted_step", "must return the jax.jit-wrapped step")
    rows = []
    with watching_jax() as (recorder, counter):
        for condition in spec.CONDITIONS:
            observed = observe_call(jitted_step, trace_log, recorder, counter, condition)
            diagnosis = call(
                model,
                STAGE,
                "diagnose_call",
                observed["traces_before"],
                observed["traces_after"],
                observed["cache_size_before"],
                observed["cache_size_after"],
                observed["explanation"],
            )
            rows.append(
                {
                    "name": condition.name,
                    "what_changed": condition.what_changed,
                    "observed": observed,
                    "diagnosis": check_diagnosis(diagnosis),
                }
            )
    record = {"conditions": rows, "final_cache_size": cache_size(jitted_step), "total_traces": len(trace_log)}
    evidence.write_json(evidence_dir / CONDITIONS_FILE, record)
    evidence.write_text(evidence_dir / MISSES_FILE, format_explanations(rows))
    print_table(rows)
    return {
        CONDITIONS_FILE: "stage 2: per condition, the trace/cache/compile counters and "
        "your diagnosis (retraced, recompiled, reason)",
        MISSES_FILE: "stage 2: JAX's cache-miss explanation captured for each call",
    }


def format_explanations(rows) -> str:
    blocks = []
    for row in rows:
        text = row["observed"]["explanation"] or "(no cache miss: the compiled program was reused)"
        blocks.append(f"== {row['name']}: {row['what_changed']}\n{text}\n")
    return "\n".join(blocks)


def print_table(rows) -> None:
    print("Stage 2: changed-condition diagnosis")
    print(
        f"  {'condition':<26}{'traces':>7}{'cache':>7}{'compiles':>9}{'compile ms':>11}  "
        f"{'retraced':<9}{'recompiled':<11}reason"
    )
    for row in rows:
        observed, diagnosis = row["observed"], row["diagnosis"]
        cache_change = (
            "?"
            if observed["cache_size_before"] is None
            else f"+{observed['cache_size_after'] - observed['cache_size_before']}"
        )
        compile_ms = f"{sum(observed['compile_seconds']) * 1e3:.0f}" if observed["compile_events"] else "-"
        print(
            f"  {row['name']:<26}{observed['traces_after'] - observed['traces_before']:>+7}"
            f"{cache_change:>7}{observed['compile_events']:>9}{compile_ms:>11}  "
            f"{str(diagnosis['retraced']):<9}{str(diagnosis['recompiled']):<11}{diagnosis['reason']}"
        )
