"""Stage 4: read an evidence directory and check that it is complete and self-consistent.

Standard library only: the checker needs the evidence, not JAX. Expectations come from
spec.py, so editing the evidence cannot move the goalposts. Every finding says what was
expected, what was found, and which stage and file to fix.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from . import evidence, spec


@dataclass
class Finding:
    stage: int
    title: str
    passed: bool
    expected: str = ""
    found: str = ""
    fix: str = ""


class EvidenceDir:
    """Cached, forgiving access to the files of one evidence directory."""

    def __init__(self, root: Path, implementation: str):
        self.root = root
        self.implementation = implementation
        self._json: dict[str, object] = {}

    def model_file(self) -> str:
        return spec.MODEL_FILE.format(implementation=self.implementation)

    def rerun(self, stage: int) -> str:
        return spec.RUN_COMMAND.format(stage=stage, implementation=self.implementation, evidence_dir=self.root)

    def json(self, relative: str):
        if relative not in self._json:
            self._json[relative] = evidence.read_json(self.root / relative)
        return self._json[relative]

    def text(self, relative: str) -> str:
        return (self.root / relative).read_text()


CHECKS: list[tuple[int, Callable[[EvidenceDir], Iterable[Finding]]]] = []


def check(stage: int):
    def register(function):
        CHECKS.append((stage, function))
        return function

    return register


def fix_in(ev: EvidenceDir, function_name: str, advice: str) -> str:
    return f"{function_name} in {ev.model_file()}: {advice}"


# ---------------------------------------------------------------------------------------
# The index, provenance and artifacts (one set of findings per stage)
# ---------------------------------------------------------------------------------------


def evidence_index_entry(ev: EvidenceDir, stage: int) -> Iterable[Finding]:
    index = evidence.read_index(ev.root)
    recorded = index.get("stages", {}).get(str(stage))
    if recorded is None:
        yield Finding(
            stage,
            f"stage {stage} is recorded in evidence.json",
            False,
            expected=f"a 'stages' entry for stage {stage}",
            found=f"stages recorded: {sorted(index.get('stages', {})) or 'none'}",
            fix=f"run stage {stage}: {ev.rerun(stage)}",
        )
        return
    stamp = recorded.get("provenance", {})
    if stamp.get("implementation") != ev.implementation:
        yield Finding(
            stage,
            f"stage {stage} evidence comes from --implementation {ev.implementation}",
            False,
            expected=ev.implementation,
            found=str(stamp.get("implementation")),
            fix=f"produce your own evidence: {ev.rerun(stage)}",
        )
        return
    missing = [field for field in spec.PROVENANCE_FIELDS if stamp.get(field) in (None, "", [])]
    yield Finding(
        stage,
        f"stage {stage} provenance is complete",
        not missing,
        expected=", ".join(spec.PROVENANCE_FIELDS),
        found=f"missing: {', '.join(missing)}" if missing else "all present",
        fix=f"do not edit evidence.json by hand; rerun {ev.rerun(stage)}",
    )
    absent = [
        relative
        for relative in spec.STAGE_FILES[stage]
        if relative not in index.get("artifacts", {})
        or not (ev.root / relative).is_file()
        or (ev.root / relative).stat().st_size == 0
    ]
    yield Finding(
        stage,
        f"stage {stage} artifacts are present and listed",
        not absent,
        expected=", ".join(spec.STAGE_FILES[stage]),
        found=f"missing or empty: {', '.join(absent)}" if absent else "all present",
        fix=f"rerun stage {stage}: {ev.rerun(stage)}",
    )


@check(4)
def same_environment_for_all_stages(ev: EvidenceDir) -> Iterable[Finding]:
    index = evidence.read_index(ev.root) or {}
    stamps = [entry.get("provenance", {}) for entry in index.get("stages", {}).values()]
    versions = {(stamp.get("jax"), stamp.get("jaxlib"), stamp.get("implementation")) for stamp in stamps}
    yield Finding(
        4,
        "all stages ran with the same JAX, jaxlib and implementation",
        len(versions) == 1,
        expected="one (jax, jaxlib, implementation)",
        found=", ".join(map(str, sorted(versions, key=str))) or "no stages",
        fix=f"rerun every stage together: {ev.rerun('all')}",
    )


# ---------------------------------------------------------------------------------------
# Stage 1: independent calculations
# ---------------------------------------------------------------------------------------

STAGE1 = spec.STAGE_FILES[1][0]


@check(1)
def numpy_reference_agrees(ev: EvidenceDir) -> Iterable[Finding]:
    record = ev.json(STAGE1)
    yield Finding(
        1,
        "the NumPy reference is independent of JAX",
        not record["numpy_reference_uses_jax"],
        expected="no jax, jnp or lax calls in numpy_loss_and_grad",
        found="it calls into JAX" if record["numpy_reference_uses_jax"] else "NumPy only",
        fix=fix_in(ev, "numpy_loss_and_grad", "write the reverse pass with NumPy"),
    )
    for result in record["numpy_checks"]:
        worst_leaf = max(result["leaves"], key=lambda name: result["leaves"][name]["worst_tolerance_ratio"])
        ratio = result["worst_tolerance_ratio"]
        yield Finding(
            1,
            f"jitted loss and gradient match NumPy ({result['activation']})",
            ratio <= 1.0,
            expected=f"|jax - numpy| <= {spec.ATOL} + {spec.RTOL} * |numpy| everywhere",
            found=f"worst error / tolerance {ratio:.3g} at {worst_leaf}",
            fix=fix_in(
                ev, "mlp_loss or numpy_loss_and_grad", f"recheck {worst_leaf} for activation {result['activation']}"
            ),
        )


@check(1)
def hand_counts_match_compiler(ev: EvidenceDir) -> Iterable[Finding]:
    record = ev.json(STAGE1)
    cost = record["compiler"]["cost_analysis"]
    memory = record["compiler"]["memory_analysis"]
    hand = record["hand_estimate"]
    yield from unavailable_is_none(1, "stage 1 compiler", cost, memory)
    if cost["available"] and cost["flops"]:
        low, high = spec.MATMUL_SHARE_OF_FLOPS
        share = hand["matmul_flops"] / cost["flops"]
        yield Finding(
            1,
            "hand matmul FLOPs are most of the compiler's FLOPs",
            low <= share <= high,
            expected=f"{low} <= hand / compiler <= {high}",
            found=f"{hand['matmul_flops']:,} / {cost['flops']:,.0f} = {share:.3f}",
            fix=fix_in(
                ev,
                "estimate_step_cost",
                "count every forward and backward matmul at 2*m*k*n, none for the inputs' gradient",
            ),
        )
    if cost["available"] and cost["transcendentals"] is not None:
        yield Finding(
            1,
            "hand tanh count equals the compiler's transcendentals",
            hand["transcendentals"] == cost["transcendentals"],
            expected=f"{cost['transcendentals']:,.0f}",
            found=f"{hand['transcendentals']:,}",
            fix=fix_in(ev, "estimate_step_cost", "one tanh per hidden unit per example"),
        )
    if memory["available"]:
        yield Finding(
            1,
            "hand argument bytes equal memory_analysis argument bytes",
            hand["argument_bytes"] == memory["argument_size_in_bytes"],
            expected=f"{memory['argument_size_in_bytes']:,}",
            found=f"{hand['argument_bytes']:,}",
            fix=fix_in(
                ev, "estimate_step_cost", "parameters + inputs + targets + the scalar weight decay, 4 bytes each"
            ),
        )
        table = spec.POINTER_BYTES * spec.OUTPUT_LEAVES
        extra = memory["output_size_in_bytes"] - hand["output_bytes"]
        yield Finding(
            1,
            "hand output bytes match memory_analysis output bytes",
            extra in (0, table),
            expected=f"{memory['output_size_in_bytes']:,} (or that minus a {table}-byte table of output pointers)",
            found=f"{hand['output_bytes']:,}",
            fix=fix_in(ev, "estimate_step_cost", "the loss plus one gradient per parameter"),
        )


def unavailable_is_none(stage: int, label: str, cost: dict, memory: dict) -> Iterable[Finding]:
    """An analysis either reports figures, or reports None with a reason: never a stand-in 0."""
    problems = []
    for name, analysis, headline in (
        ("cost_analysis", cost, "flops"),
        ("memory_analysis", memory, "argument_size_in_bytes"),
    ):
        figures = [value for key, value in analysis.items() if key not in ("available", "unavailable_reason")]
        if not analysis["available"]:
            if any(value is not None for value in figures) or not analysis["unavailable_reason"]:
                problems.append(f"{name} unavailable but has figures or no reason")
        elif analysis[headline] in (None, 0):
            problems.append(f"{name} available but {headline} is {analysis[headline]!r}")
    yield Finding(
        stage,
        f"{label}: unavailable analyses are None, never 0",
        not problems,
        expected="figures, or None with the reason it is unavailable",
        found="; ".join(problems) or "consistent",
        fix=f"record unavailable analyses as None (audit/compiled_info.py); rerun stage {stage}",
    )


# ---------------------------------------------------------------------------------------
# Stage 2: changed-condition diagnosis
# ---------------------------------------------------------------------------------------

STAGE2 = spec.STAGE_FILES[2][0]


def counter_change(observed: dict, before: str, after: str):
    if observed[before] is None or observed[after] is None:
        return None
    return observed[after] - observed[before]


@check(2)
def every_condition_observed(ev: EvidenceDir) -> Iterable[Finding]:
    names = [row["name"] for row in ev.json(STAGE2)["conditions"]]
    expected = [condition.name for condition in spec.CONDITIONS]
    yield Finding(
        2,
        "every condition was called, in order",
        names == expected,
        expected=", ".join(expected),
        found=", ".join(names),
        fix=f"rerun stage 2: {ev.rerun(2)}",
    )


@check(2)
def compiles_once_per_distinct_condition(ev: EvidenceDir) -> Iterable[Finding]:
    rows = {row["name"]: row for row in ev.json(STAGE2)["conditions"]}
    for condition in spec.CONDITIONS:
        observed = rows[condition.name]["observed"]
        want = 1 if condition.expect_recompile else 0
        traces = counter_change(observed, "traces_before", "traces_after")
        cache = counter_change(observed, "cache_size_before", "cache_size_after")
        found = (
            f"{traces} trace(s), cache +{cache if cache is not None else '?'}, "
            f"{observed['compile_events']} compile event(s)"
        )
        if condition.expect_recompile:
            title = f"{condition.name}: traced and compiled exactly once"
        else:
            title = f"{condition.name}: a repeated call reuses the program (no retrace, no recompile)"
        ok = (
            traces == (1 if condition.expect_retrace else 0)
            and cache in (want, None)
            and observed["compile_events"] == want
        )
        yield Finding(
            2,
            title,
            ok,
            expected=f"{want} trace, cache +{want}, {want} compile event",
            found=found,
            fix=fix_in(
                ev,
                "make_counted_step",
                "append to trace_log inside the step once per trace, keep activation static, build a new jit each call",
            ),
        )
    final = ev.json(STAGE2)["final_cache_size"]
    if final is not None:
        yield Finding(
            2,
            "one cached program per distinct condition",
            final == spec.DISTINCT_PROGRAMS,
            expected=str(spec.DISTINCT_PROGRAMS),
            found=str(final),
            fix=fix_in(ev, "make_counted_step", "one jax.jit with static_argnames"),
        )


@check(2)
def diagnosis_names_the_reason(ev: EvidenceDir) -> Iterable[Finding]:
    rows = {row["name"]: row for row in ev.json(STAGE2)["conditions"]}
    for condition in spec.CONDITIONS:
        row = rows[condition.name]
        diagnosis, observed = row["diagnosis"], row["observed"]
        expected = {
            "retraced": condition.expect_retrace,
            "recompiled": condition.expect_recompile,
            "reason": condition.expected_reason,
        }
        if observed["cache_size_before"] is None:
            expected["recompiled"] = None  # unavailable counter: unknown is the honest answer
        wrong = [
            f"{key}={diagnosis.get(key)!r} (expected {value!r})"
            for key, value in expected.items()
            if diagnosis.get(key) != value
        ]
        yield Finding(
            2,
            f"{condition.name}: diagnosis names '{condition.expected_reason}'",
            not wrong,
            expected=", ".join(f"{key}={value!r}" for key, value in expected.items()),
            found="; ".join(wrong) or "as expected",
            fix=fix_in(
                ev,
                "diagnose_call / name_reason",
                f"read the {condition.name} block of {ev.root / spec.STAGE_FILES[2][1]}",
            ),
        )
        has_text = bool(observed["explanation"].strip())
        title = (
            f"{condition.name}: JAX's cache-miss explanation was captured"
            if condition.expect_retrace
            else f"{condition.name}: JAX reported no cache miss"
        )
        yield Finding(
            2,
            title,
            has_text == condition.expect_retrace,
            expected="an explanation" if condition.expect_retrace else "no explanation",
            found="an explanation" if has_text else "none",
            fix=f"rerun stage 2 (it turns on jax_explain_cache_misses): {ev.rerun(2)}",
        )


# ---------------------------------------------------------------------------------------
# Stage 3: retained evidence
# ---------------------------------------------------------------------------------------

SUMMARY, HLO, TIMINGS = spec.STAGE_FILES[3][:3]
SIGNATURE_PREFIX = spec.JAXPR_SIGNATURE_PREFIX


def read_jaxpr(ev: EvidenceDir, name: str):
    """(signature dict, program text) of one retained JAXPR file, or None if missing."""
    path = ev.root / spec.JAXPR_FILE.format(condition=name)
    if not path.is_file():
        return None
    lines = path.read_text().splitlines()
    signature_lines = [line for line in lines if line.startswith(SIGNATURE_PREFIX)]
    if not signature_lines:
        return None
    program = "\n".join(line for line in lines if not line.startswith("#"))
    return json.loads(signature_lines[0][len(SIGNATURE_PREFIX) :]), program


@check(3)
def jaxprs_differ_only_where_the_condition_changed(ev: EvidenceDir) -> Iterable[Finding]:
    baseline = read_jaxpr(ev, spec.BASELINE)
    for condition in spec.CONDITIONS:
        retained = read_jaxpr(ev, condition.name)
        if retained is None or baseline is None:
            which = condition.name if retained is None else spec.BASELINE
            yield Finding(
                3,
                f"{condition.name}: JAXPR retained",
                False,
                expected=f"{spec.JAXPR_FILE.format(condition=which)} with a '{SIGNATURE_PREFIX.strip()}' line",
                found="missing or without signature",
                fix=f"rerun stage 3: {ev.rerun(3)}",
            )
            continue
        if condition.name == spec.BASELINE:
            continue
        changed = sorted(field for field in spec.SIGNATURE_FIELDS if retained[0].get(field) != baseline[0].get(field))
        program_differs = retained[1] != baseline[1]
        should_differ = bool(condition.changed_fields)
        ok = changed == sorted(condition.changed_fields) and program_differs == should_differ
        yield Finding(
            3,
            f"{condition.name}: JAXPR differs from baseline only where the condition changed",
            ok,
            expected=f"changed inputs {sorted(condition.changed_fields) or 'none'}, "
            f"program {'different' if should_differ else 'identical'}",
            found=f"changed inputs {changed or 'none'}, program {'different' if program_differs else 'identical'}",
            fix=f"rerun stage 3 so every JAXPR comes from one run: {ev.rerun(3)}",
        )


@check(3)
def compiled_program_summarized(ev: EvidenceDir) -> Iterable[Finding]:
    summary = ev.json(SUMMARY)
    counts = summary.get("hlo_op_counts") or {}
    yield Finding(
        3,
        "compiled program summary has HLO op counts",
        sum(counts.values()) > 0,
        expected="op counts parsed from the optimized HLO",
        found=f"{sum(counts.values())} instructions, {len(counts)} kinds",
        fix=f"rerun stage 3: {ev.rerun(3)}",
    )
    yield from unavailable_is_none(3, "compiled summary", summary["cost_analysis"], summary["memory_analysis"])


def valid_samples(values) -> bool:
    return (
        isinstance(values, list)
        and len(values) > 0
        and all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in values)
    )


@check(3)
def every_timing_kept(ev: EvidenceDir) -> Iterable[Finding]:
    timings = ev.json(TIMINGS)
    for key, repeats, function_name in (
        ("warm_synchronized_s", spec.WARM_REPEATS, "time_synchronized_calls"),
        ("dispatch_only_s", spec.DISPATCH_REPEATS, "time_dispatch_only"),
        ("host_to_device_s", spec.TRANSFER_REPEATS, "time_host_to_device"),
    ):
        samples = timings.get(key)
        ok = valid_samples(samples) and len(samples) == repeats
        yield Finding(
            3,
            f"all {key} samples kept",
            ok,
            expected=f"{repeats} positive samples",
            found=f"{len(samples) if isinstance(samples, list) else 'no'} samples",
            fix=fix_in(ev, function_name, "return one sample per call, all of them"),
        )
    singles = {key: timings.get(key) for key in ("trace_lower_s", "compile_s", "first_call_s")}
    bad = [key for key, value in singles.items() if not valid_samples([value])]
    yield Finding(
        3,
        "trace/lower, compile and first call were each timed",
        not bad,
        expected="positive seconds for each",
        found=f"invalid: {', '.join(bad)}" if bad else "all timed",
        fix=fix_in(ev, "time_lower_and_compile / time_first_call", "time each phase"),
    )


@check(3)
def warm_calls_are_faster_than_the_first(ev: EvidenceDir) -> Iterable[Finding]:
    timings = ev.json(TIMINGS)
    warm = statistics.median(timings["warm_synchronized_s"])
    first = timings["first_call_s"]
    yield Finding(
        3,
        "warm calls are faster than the first call (which includes compilation)",
        warm < first,
        expected="median warm synchronized call < first call",
        found=f"warm median {warm * 1e6:,.1f} us, first call {first * 1e6:,.1f} us",
        fix=fix_in(
            ev,
            "time_first_call / time_synchronized_calls",
            "time the first call of a fresh step, and block_until_ready in both",
        ),
    )
    compiles = timings.get("compile_events_during_warm_and_dispatch")
    growth = timings.get("cache_growth_during_warm_and_dispatch")
    yield Finding(
        3,
        "no compilation happened during the warm and dispatch timings",
        compiles == 0 and growth in (0, None),
        expected="0 compile events, cache +0",
        found=f"{compiles} compile events, cache +{growth}",
        fix=fix_in(
            ev,
            "time_synchronized_calls / time_dispatch_only",
            "call the step passed in with the same arguments every time",
        ),
    )


@check(3)
def dispatch_is_not_execution(ev: EvidenceDir) -> Iterable[Finding]:
    timings = ev.json(TIMINGS)
    dispatch = statistics.median(timings["dispatch_only_s"])
    synchronized = statistics.median(timings["warm_synchronized_s"])
    yield Finding(
        3,
        "dispatch time is not mistaken for execution time",
        dispatch <= synchronized,
        expected="median dispatch-only call <= median synchronized call",
        found=f"dispatch {dispatch * 1e6:,.1f} us, synchronized {synchronized * 1e6:,.1f} us",
        fix=fix_in(
            ev,
            "time_dispatch_only / time_synchronized_calls",
            "stop the dispatch clock when the call returns; keep block_until_ready inside the synchronized clock",
        ),
    )


@check(3)
def clocks_tell_dispatch_from_completion(ev: EvidenceDir) -> Iterable[Finding]:
    probe = ev.json(TIMINGS)["clock_probe"]
    dispatch = statistics.median(probe["dispatch_only_s"])
    synchronized = statistics.median(probe["synchronized_s"])
    share = dispatch / synchronized
    yield Finding(
        3,
        "on a long-running probe, the dispatch clock stops before the work ends",
        share <= spec.PROBE_MAX_DISPATCH_SHARE,
        expected=f"dispatch / synchronized <= {spec.PROBE_MAX_DISPATCH_SHARE} on {probe['what']}",
        found=f"dispatch {dispatch * 1e3:,.2f} ms / synchronized {synchronized * 1e3:,.2f} ms = {share:.2f}",
        fix=fix_in(
            ev,
            "time_dispatch_only / time_synchronized_calls",
            "block_until_ready belongs inside the synchronized clock and outside the dispatch clock",
        ),
    )


# ---------------------------------------------------------------------------------------
# Running and reporting
# ---------------------------------------------------------------------------------------


def run_checks(evidence_dir: Path, implementation: str, stages: Iterable[int]) -> list[Finding]:
    ev = EvidenceDir(evidence_dir, implementation)
    findings: list[Finding] = []
    stages = sorted(set(stages))
    if evidence.read_index(evidence_dir) is None:
        return [
            Finding(
                max(stages),
                "evidence.json exists and is readable",
                False,
                expected=f"{evidence_dir / spec.EVIDENCE_INDEX}",
                found="missing or not JSON",
                fix=f"run stages 1 to 3 first: {ev.rerun('all')}",
            )
        ]
    for stage in (s for s in stages if s in spec.STAGE_FILES):
        stage_index = safely(evidence_index_entry, ev, stage)
        findings.extend(stage_index)
        if not all(finding.passed for finding in stage_index):
            continue  # the stage's files are missing or foreign: its checks would only repeat that
        for check_stage, function in CHECKS:
            if check_stage == stage:
                findings.extend(safely(function, ev))
    if 4 in stages:
        for check_stage, function in CHECKS:
            if check_stage == 4:
                findings.extend(safely(function, ev))
    return findings


def safely(function, ev: EvidenceDir, stage: int | None = None) -> list[Finding]:
    """Run one check; a malformed file becomes a finding instead of a traceback."""
    if stage is None:
        stage = next(check_stage for check_stage, known in CHECKS if known is function)
        arguments = (ev,)
    else:
        arguments = (ev, stage)  # the index check takes the stage it reports on
    try:
        return list(function(*arguments))
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OSError, statistics.StatisticsError) as error:
        return [
            Finding(
                stage,
                f"{function.__name__.replace('_', ' ')}: evidence is readable",
                False,
                expected="the fields this stage writes",
                found=f"{type(error).__name__}: {error}",
                fix=f"rerun stage {stage} instead of editing its files: {ev.rerun(stage)}",
            )
        ]


def report(findings: list[Finding], evidence_dir: Path, implementation: str) -> str:
    lines = [f"Performance audit check of {evidence_dir} (--implementation {implementation})"]
    for stage in sorted({finding.stage for finding in findings}):
        lines.append(f"Stage {stage}")
        for finding in (f for f in findings if f.stage == stage):
            lines.append(f"  [{'PASS' if finding.passed else 'FAIL'}] {finding.title}")
            if not finding.passed:
                lines.append(f"         expected: {finding.expected}")
                lines.append(f"         found:    {finding.found}")
                lines.append(f"         fix:      {finding.fix}")
    failed = [finding for finding in findings if not finding.passed]
    lines.append(f"{len(findings) - len(failed)} passed, {len(failed)} failed.")
    if failed:
        lines.append(f"Start with stage {failed[0].stage}: {failed[0].fix}")
    return "\n".join(lines)
