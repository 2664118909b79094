"""Stage 5's plumbing: gather the stages' records into one evidence file, draw the figure.

Ships with the assignment. The evidence keeps the lesson's three views apart: saved-residual
*entries*, compiler-estimated *bytes* and measured *time*; a missing memory estimate stays
None (JSON null) and is drawn as "unavailable", never as a zero bar.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from statistics import median

import numpy as np
from remat_lesson import MEMORY_FIELDS, load_record, provenance, runs_dir

STAGES = ("01-understand", "02-build", "03-experiment", "04-exercise")
POLICIES = ("plain", "remat", "whole")
#: The two orders in which stage 2 times the policies.
ORDERS = {"plain first": ("plain", "remat"), "remat first": ("remat", "plain")}
TEMPLATE_NAME = "evidence-template.md"
FIGURE_STEM = "storage-views"


def collect(command: str | None = None) -> dict:
    """One evidence dict from the stages' records; what a stage did not record is None."""
    records = {stage: load_record(stage) or {} for stage in STAGES}
    build, experiment, exercise = records["02-build"], records["03-experiment"], records["04-exercise"]
    entries = {**build.get("residual_entries", {}), **experiment.get("residual_entries", {})}
    memory = {**build.get("memory", {}), **experiment.get("memory", {})}
    errors = {**build.get("max_abs_error", {}), **exercise.get("max_abs_error", {})}
    timings = build.get("timings_s", {})
    return {
        "residual_entries": {policy: entries.get(policy) for policy in POLICIES},
        "memory": {policy: _memory_fields(memory.get(policy)) for policy in POLICIES},
        "max_abs_error": {
            name: errors.get(name) for name in ("plain_vs_oracle", "remat_vs_oracle", "hvp_plain_vs_remat")
        },
        "directional_derivative": exercise.get("directional_derivative")
        or {"finite": None, "automatic": None, "epsilon": None},
        "timings_s": {policy: timings.get(policy) for policy in ("plain", "remat")},
        "timing_summary_s": {policy: _spread(timings.get(policy)) for policy in ("plain", "remat")},
        "predictions": records["01-understand"].get("predictions"),
        # Stage 3's sweep, {policy: {depth: planned temporary bytes}}: where the tie of the small
        # network gives way (None where stage 3 did not run its sweep).
        "sweep_temp_bytes": experiment.get("sweep_temp_bytes"),
        "missing_stages": [stage for stage in STAGES if not records[stage]],
        "provenance": provenance(command),
    }


def _memory_fields(report):
    return None if report is None else {name: report[name] for name in MEMORY_FIELDS}


def _spread(samples):
    """Median and quartiles (NumPy's default, linear interpolation), and the extremes: the
    quartiles, unlike the extremes, are not decided by one disturbed sample."""
    if not samples:
        return None
    q25, q75 = (float(q) for q in np.percentile(samples, [25, 75]))
    return {
        "median": median(samples),
        "q25": q25,
        "q75": q75,
        "min": min(samples),
        "max": max(samples),
        "count": len(samples),
    }


def order_effect(medians_by_order: dict) -> list[str]:
    """What runs in both orders show (the companion notebook of stage 2): one line per policy,
    one on the ranking.

    medians_by_order: {"plain first": {"plain": [run medians], "remat": [...]}, "remat first": {...}}
    in seconds, run i of one order taken beside run i of the other. For each policy: its median
    when timed first and when timed second, in how many runs it was slower when first, and
    whether the run medians of the two orders overlap. Then whether the ranking of the two
    policies survives swapping the order. Nothing is inferred beyond these samples.
    """
    runs = min(len(values) for medians in medians_by_order.values() for values in medians.values())
    if runs < 2:
        return [
            f"{runs} run per order: too few to tell an order's effect from run-to-run spread; nothing is said about the order."
        ]
    lines = []
    for policy in ("plain", "remat"):
        first = medians_by_order[f"{policy} first"][policy]
        second = next(medians[policy] for order, medians in medians_by_order.items() if ORDERS[order][1] == policy)
        slower_first = sum(a > b for a, b in zip(first, second))
        overlap = min(first) <= max(second) and min(second) <= max(first)
        lines.append(
            f"{policy}: timed first {median(first) * 1e6:.1f} µs, timed second {median(second) * 1e6:.1f} µs "
            f"(medians of {runs} run medians); slower when timed first in {slower_first} of {runs} runs; run medians "
            f"{min(first) * 1e6:.1f}-{max(first) * 1e6:.1f} µs first, {min(second) * 1e6:.1f}-{max(second) * 1e6:.1f} µs "
            f"second ({'overlapping' if overlap else 'not overlapping'})."
        )
    ratios = {order: median(medians["remat"]) / median(medians["plain"]) for order, medians in medians_by_order.items()}
    plain_first, remat_first = ratios["plain first"], ratios["remat first"]
    if (plain_first > 1) == (remat_first > 1):
        verdict = f"remat's median is {'higher' if plain_first > 1 else 'lower'} in both orders"
    elif plain_first < 1 < remat_first:
        verdict = "the ranking of the medians flips with the order: in each order, the policy timed first has the higher median"
    else:
        verdict = "the ranking of the medians flips with the order: in each order, the policy timed second has the higher median"
    lines.append(
        f"remat's median over plain's: {plain_first:.2f} with plain timed first, {remat_first:.2f} with remat "
        f"timed first: {verdict}."
    )
    return lines


def outcomes(evidence: dict) -> dict:
    """What actually happened, phrased as the four predictions of stage 1 (None: not measured)."""
    entries, memory, errors = evidence["residual_entries"], evidence["memory"], evidence["max_abs_error"]
    timing = evidence["timing_summary_s"]
    gradient_errors = [errors.get("plain_vs_oracle"), errors.get("remat_vs_oracle"), errors.get("hvp_plain_vs_remat")]
    return {
        "remat_changes_the_gradient": None
        if None in gradient_errors
        else not all(error <= 1e-5 for error in gradient_errors),
        "remat_saves_fewer_residual_entries": None
        if None in (entries["plain"], entries["remat"])
        else entries["remat"] < entries["plain"],
        "remat_lowers_compiled_temp_bytes": None
        if None in (memory["plain"], memory["remat"])
        else memory["remat"]["temp_size_in_bytes"] < memory["plain"]["temp_size_in_bytes"],
        "remat_is_faster": None if None in (timing["plain"], timing["remat"]) else _faster(timing),
    }


def _faster(summaries: dict):
    """True or False only where one policy's quartile range lies wholly below the other's."""
    if summaries["remat"]["q75"] < summaries["plain"]["q25"]:
        return True
    if summaries["plain"]["q75"] < summaries["remat"]["q25"]:
        return False
    return "not decided: the quartile ranges overlap"


def draw_storage_figure(evidence: dict, directory: Path, stem: str = FIGURE_STEM) -> list[Path]:
    """Panels with their own units: entries, estimated temp bytes of the lesson's network, and,
    when stage 3 recorded its sweep, temp bytes against depth. PNG + SVG."""
    import matplotlib.pyplot as plt

    policies = [p for p in POLICIES if evidence["residual_entries"].get(p) is not None]
    labels = {"plain": "plain", "remat": "per-layer\ncheckpoint", "whole": "whole-objective\ncheckpoint"}
    colors = {"plain": "#4c72b0", "remat": "#dd8452", "whole": "#55a868"}
    sweep = {
        policy: {int(depth): temp for depth, temp in by_depth.items() if temp is not None}
        for policy, by_depth in (evidence.get("sweep_temp_bytes") or {}).items()
    }
    sweep = {policy: by_depth for policy, by_depth in sweep.items() if by_depth}
    if sweep:
        figure, (top, bottom, deep) = plt.subplots(3, 1, figsize=(6.4, 9.0), constrained_layout=True)
        _draw_sweep(deep, sweep)
    else:
        figure, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 6.0), constrained_layout=True)
    figure.suptitle("The same gradients in entries and in bytes: different units, different stories", fontsize=11)

    if not policies:
        for axis in (top, bottom):
            axis.set_axis_off()
            axis.text(
                0.5, 0.5, "not recorded yet: run stages 2 and 3", ha="center", va="center", transform=axis.transAxes
            )
    counts = [evidence["residual_entries"][p] for p in policies]
    bars = top.bar([labels[p] for p in policies], counts, color=[colors[p] for p in policies])
    top.bar_label(bars, labels=[str(c) for c in counts], padding=2)
    top.set_ylabel("saved residuals (entries)")
    top.set_title("What autodiff keeps: entries, not bytes", fontsize=10)
    top.set_ylim(0, max(counts, default=1) * 1.25)

    temps = {p: (evidence["memory"].get(p) or {}).get("temp_size_in_bytes") for p in policies}
    if not policies:
        pass
    elif all(temps[p] is not None for p in policies):
        bars = bottom.bar(
            [labels[p] for p in policies], [temps[p] for p in policies], color=[colors[p] for p in policies]
        )
        bottom.bar_label(bars, labels=[f"{temps[p]} B" for p in policies], padding=2)
        bottom.set_ylabel("compiled temp (bytes)")
        bottom.set_ylim(0, max(temps.values()) * 1.25)
        bottom.set_title("What the compiler plans: temporary bytes (an estimate, not a measured peak)", fontsize=10)
    else:
        bottom.set_axis_off()
        bottom.add_patch(
            plt.Rectangle((0.02, 0.08), 0.96, 0.84, transform=bottom.transAxes, fill=False, hatch="//", ec="0.6")
        )
        bottom.text(
            0.5,
            0.5,
            "memory analysis unavailable on this backend\n(no estimate: not zero bytes)",
            ha="center",
            va="center",
            fontsize=11,
            transform=bottom.transAxes,
            bbox={"facecolor": "white", "edgecolor": "0.4"},
        )
        bottom.set_title("What the compiler plans: temporary bytes", fontsize=10)
    figure.text(
        0.5,
        -0.01,
        "Top panel in entries (values autodiff saves); middle panel in bytes (compiler estimate)"
        + ("; bottom panel in MiB against depth (stage 3's sweep)" if sweep else "")
        + ". Different units: read each on its own.",
        ha="center",
        va="top",
        fontsize=8,
        wrap=True,
    )
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"{stem}.png", directory / f"{stem}.svg"]
    figure.savefig(paths[0], dpi=150, bbox_inches="tight")
    figure.savefig(paths[1], bbox_inches="tight", metadata={"Date": None})  # no timestamp: regenerations compare equal
    plt.close(figure)
    return paths


def _draw_sweep(axis, sweep: dict) -> None:
    """Stage 3's planned temporary bytes against depth, one line per policy (log-log)."""
    styles = {
        "plain": ("#4c72b0", "o"),
        "checkpoint_per_layer": ("#dd8452", "s"),
        "checkpoint_dots": ("#8172b3", "^"),
        "scan": ("#937860", "v"),
        "scan_checkpointed_body": ("#55a868", "D"),
    }
    for policy, by_depth in sweep.items():
        depths = sorted(by_depth)
        color, marker = styles.get(policy, ("0.3", "x"))
        axis.plot(
            depths, [by_depth[d] / 2**20 for d in depths], marker=marker, color=color, label=policy.replace("_", " ")
        )
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xlabel("depth L (layers)")
    axis.set_ylabel("compiled temp (MiB)")
    axis.set_title("Stage 3's sweep: planned temporary bytes as the network deepens", fontsize=10)
    axis.legend(fontsize=7)


FIGURE_ALT_TEXT = (
    "Stacked charts. Upper panel, unit entries: saved residual entries per policy. "
    "Middle panel, unit bytes: the compiler's temporary-byte estimate per policy, or a hatched "
    "box reading 'memory analysis unavailable on this backend' when there is no estimate. "
    "Third panel, when stage 3 ran its sweep, unit MiB: the compiler's temporary bytes against "
    "depth for each policy of the sweep, on log-log axes."
)


def template_path() -> Path:
    """The evidence template: beside this module in a release, in data/ inside the bundle."""
    here = Path(__file__).resolve().parent
    for candidate in (here / TEMPLATE_NAME, here.parent / "data" / TEMPLATE_NAME):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{TEMPLATE_NAME} is missing: it ships beside the notebooks (or in the bundle's data/)")


def write_evidence(evidence: dict, explanation: str, directory: Path | None = None) -> list[Path]:
    """evidence.json and evidence.md (the template filled in) in runs/performance-05/."""
    directory = directory or runs_dir()
    template = template_path()
    directory.mkdir(parents=True, exist_ok=True)
    json_path, md_path = directory / "evidence.json", directory / "evidence.md"
    json_path.write_text(json.dumps({**evidence, "explanation": explanation}, indent=2) + "\n")
    md_path.write_text(fill_template(template.read_text(), evidence, explanation))
    return [json_path, md_path]


def fill_template(template: str, evidence: dict, explanation: str) -> str:
    """Replace each {{placeholder}} of the evidence template with what was measured."""
    values = _template_values(evidence, explanation)
    for key, text in values.items():
        template = template.replace("{{" + key + "}}", text)
    unfilled = re.findall(r"\{\{(\w+)\}\}", template)
    if unfilled:
        raise ValueError(f"the evidence template has placeholders nothing fills: {unfilled}")
    return template


def _template_values(evidence: dict, explanation: str) -> dict:
    def show(value, unit=""):
        return "not recorded (run the stage that measures it)" if value is None else f"{value}{unit}"

    errors, dd = evidence["max_abs_error"], evidence["directional_derivative"]
    memory_rows = "\n".join(
        f"| {p} | "
        + (
            " | ".join(str(m[f]) for f in MEMORY_FIELDS)
            if (m := evidence["memory"][p])
            else "unavailable | unavailable | unavailable | unavailable"
        )
        + " |"
        for p in POLICIES
    )
    timing_rows = []
    for policy in ("plain", "remat"):
        samples, summary = evidence["timings_s"][policy], evidence["timing_summary_s"][policy]
        if samples:
            timing_rows.append(
                f"| {policy} | {summary['median'] * 1e6:.1f} | {summary['q25'] * 1e6:.1f} – {summary['q75'] * 1e6:.1f} | "
                + ", ".join(f"{s * 1e6:.1f}" for s in samples)
                + " |"
            )
        else:
            timing_rows.append(f"| {policy} | not recorded | | |")
    predictions, happened = evidence["predictions"] or {}, outcomes(evidence)
    prediction_rows = "\n".join(
        f"| {key.replace('_', ' ')} | {show(predictions.get(key))} | {show(happened[key])} |" for key in happened
    )
    provenance = evidence["provenance"]
    return {
        "gradient_errors": f"plain vs oracle {show(errors['plain_vs_oracle'])}; remat vs oracle {show(errors['remat_vs_oracle'])}",
        "hvp_error": show(errors["hvp_plain_vs_remat"]),
        "directional_derivative": f"finite {show(dd['finite'])}, automatic {show(dd['automatic'])}, epsilon {show(dd['epsilon'])}",
        "residual_entries": ", ".join(f"{p} {show(evidence['residual_entries'][p])}" for p in POLICIES),
        "memory_rows": memory_rows,
        "timing_rows": "\n".join(timing_rows),
        "prediction_rows": prediction_rows,
        "explanation": explanation.strip() or "(not written yet)",
        "provenance": f"{provenance['utc']} · Python {provenance['python']} · jax {provenance['jax']} · "
        f"{provenance['devices']['count']} {provenance['devices']['kind']} device(s) · {provenance['platform']}",
        "missing": ", ".join(evidence["missing_stages"]) or "none",
    }
