"""`make figures`: rerun the worked example and refresh data/ from what it measured.

Writes, into data/ (or --out):
- reference-execution.txt  the text solutions/main.py prints, under a provenance header (check
                           reports cut to their points line: hidden checks stay hidden; paths
                           relative to the bundle); ships with the release for learners;
- storage-views.json       the figure's data (entries, compiler bytes, errors) with provenance;
- storage-views.png/.svg   the figure drawn from that run (three panels with stage 3's sweep).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from autograder.course.assignment import nbgrader_env
from autograder.course.paths import DATA, ROOT, SOLUTIONS

FIGURE_STEM = "storage-views"


def regenerate(out: Path, env_overrides: dict | None = None) -> dict:
    """Run main.py in a scratch runs folder; copy its figure and data into out."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="performance-05-figures-") as scratch:
        env = {**nbgrader_env(), "REMAT_LESSON_RUNS_DIR": scratch, **(env_overrides or {})}
        command = [sys.executable, str(SOLUTIONS / "main.py")]
        run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(
                f"solutions/main.py failed ({run.returncode}):\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
            )
        evidence = json.loads((Path(scratch) / "evidence.json").read_text())
        for suffix in (".png", ".svg"):
            shutil.copy2(Path(scratch) / f"{FIGURE_STEM}{suffix}", out / f"{FIGURE_STEM}{suffix}")
    provenance = {**evidence["provenance"], "command": "make figures (python solutions/main.py)"}
    figure_data = {
        "description": "Data behind storage-views.png: saved residual entries (unit: entries) and the "
        "compiler's memory estimates (unit: bytes; null = analysis unavailable) per policy; the third "
        "panel's stage 3 sweep, planned temporary bytes by policy and depth.",
        "residual_entries": evidence["residual_entries"],
        "memory": evidence["memory"],
        "memory_analysis_available": {p: m is not None for p, m in evidence["memory"].items()},
        "max_abs_error": evidence["max_abs_error"],
        "directional_derivative": evidence["directional_derivative"],
        "timings_s": evidence["timings_s"],
        "sweep_temp_bytes": evidence["sweep_temp_bytes"],
        "provenance": provenance,
    }
    (out / f"{FIGURE_STEM}.json").write_text(json.dumps(figure_data, indent=2) + "\n")
    # One line per field; the full `jax.print_environment_info` listing stays in the JSON.
    header = [
        f"# {key}: {json.dumps(value) if isinstance(value, (dict, list)) else value}"
        for key, value in provenance.items()
        if key != "jax_environment"
    ]
    (out / "reference-execution.txt").write_text("\n".join(header) + "\n\n" + shipped_text(run.stdout, scratch))
    return figure_data


#: A check's item lines ("[PASS] 1/1  what was checked", and a failure's details): the hidden
#: checks' wording stays out of what learners receive; the "N of M points" line stays.
CHECK_ITEM = re.compile(r"^(\[(PASS|FAIL)\] |        (expected|where to look|your code))")


def shipped_text(stdout: str, scratch: str) -> str:
    """main.py's output as learners receive it: no check item lines, bundle-relative paths."""
    text = stdout.replace(str(Path(scratch)), "runs/performance-05").replace(str(ROOT) + os.sep, "")
    kept, in_item = [], False
    for line in text.splitlines(keepends=True):
        # An item line, and the indented lines a long one is wrapped onto (REPORT_WIDTH), stay out.
        in_item = bool(CHECK_ITEM.match(line)) or (in_item and line.startswith("    "))
        if not in_item:
            kept.append(line)
    return "".join(kept)


# ---------------------------------------------------------------------------------------
# Comparing two reference executions in what must reproduce.
# ---------------------------------------------------------------------------------------
#: Which lines of a reference execution are measured: they report a time, a measured peak, or a
#: verdict drawn from them, so they differ from run to run and only their place is compared.
#: They are recognised by a rule, never by a list of lines, so that a new timing line, or a
#: verdict that flips between runs, is measured from the start:
#:
#: 1. the line holds a number followed by a time unit (`43.0 µs`, `8.91 ms`, `in 1.4 s`); or
#: 2. one of its words, or one part of an identifier split at `_`, is a word of measurement
#:    (MEASURED_WORDS): `remat_is_faster` has `faster`, a verdict line has `samples`,
#:    `overlap`, `median` or `peak`, and a line the notebook means as a measurement says
#:    `measured` or `timed`.
#:
#: The lesson keeps to that vocabulary: a planned quantity is called "planned", never
#: "measured", and a deterministic count avoids the words of timing ("4x", not "4 time(s)").
TIME_UNIT = re.compile(r"\d\s*(?:ns|µs|us|ms|s|secs?|seconds?)(?![^\W\d_])")
MEASURED_WORDS = frozenset(
    {
        "time",
        "timed",
        "timing",
        "timings",
        "faster",
        "slower",
        "median",
        "medians",
        "sample",
        "samples",
        "overlap",
        "overlaps",
        "overlapping",
        "peak",
        "peaks",
        "measured",
    }
)
WORD_PART = re.compile(r"[^\W\d_]+")


def is_measured(line: str) -> bool:
    """True for a line that reports a measurement or a verdict drawn from one (the rule above)."""
    if TIME_UNIT.search(line):
        return True
    return any(part.lower() in MEASURED_WORDS for part in WORD_PART.findall(line))


NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
#: Numbers compare equal within this relative tolerance, or this absolute one (gradient
#: differences of 1e-9 and 0.0 are the same finding; counts and bytes must match exactly).
RTOL, ATOL = 1e-6, 1e-6


def _column_title(header: str, start: int, end: int) -> str:
    """The title above a right-aligned table cell spanning [start, end) of its row: the header's
    words that end after the last one ending before the cell starts, up to the first ending at or
    after the cell's end."""
    ends = [word.end() for word in re.finditer(r"\S+", header)]
    right = next((e for e in ends if e >= end), None)
    if right is None:
        return ""
    left = max((e for e in ends if e < start), default=0)
    return header[left:right]


def _table_row(header: str, line: str) -> tuple[str, list[str]]:
    """A row of a table whose header names a measured column: its numbers under such a column are
    measured (masked), the others compared."""
    template, numbers, at = [], [], 0
    for match in NUMBER.finditer(line):
        template.append(line[at : match.start()])
        if is_measured(_column_title(header, match.start(), match.end())):
            template.append("<measured>")
        else:
            template.append("<n>")
            numbers.append(match.group())
        at = match.end()
    template.append(line[at:])
    # A measured cell's width may differ from run to run: the row's spacing is not compared.
    return " ".join("".join(template).split()), numbers


def comparable(text: str) -> list[tuple[str, list[str]]]:
    """Each line of a reference execution (its provenance header left out) as (template, numbers);
    a measured line (`is_measured`) is ("<measured>", []). A table whose header (a line of column
    titles, no number) names a measured column (`peak MiB`, `time`) has that column's cells
    measured in each row below it, up to the first line without a number."""
    lines = [line for line in text.splitlines() if not line.startswith("# ")]
    while lines and not lines[0].strip():
        lines.pop(0)
    result = []
    header = None
    for line in lines:
        has_numbers = NUMBER.search(line) is not None
        if header is not None and not has_numbers:
            header = None
        if header is not None and not is_measured(line):
            result.append(_table_row(header, line))
        elif is_measured(line):
            if not has_numbers and len(line.split()) >= 3:
                header = line
            result.append(("<measured>", []))
        else:
            result.append((NUMBER.sub("<n>", line), NUMBER.findall(line)))
    return result


def _same_number(a: str, b: str) -> bool:
    if a == b:
        return True
    x, y = float(a), float(b)
    if re.fullmatch(r"[-+]?\d+", a) and re.fullmatch(r"[-+]?\d+", b):
        return x == y
    return math.isclose(x, y, rel_tol=RTOL, abs_tol=ATOL)


def differences(committed: str, fresh: str, limit: int = 20) -> list[str]:
    """Where a fresh reference execution departs from the committed one in what must reproduce:
    the text of every line, counts and bytes exactly, other numbers within RTOL/ATOL; a measured
    line (`is_measured`) only by its place."""
    old, new = comparable(committed), comparable(fresh)
    problems = []
    if len(old) != len(new):
        problems.append(f"{len(old)} lines committed, {len(new)} now")
    for number, ((old_template, old_numbers), (new_template, new_numbers)) in enumerate(zip(old, new), start=1):
        if (
            old_template != new_template
            or len(old_numbers) != len(new_numbers)
            or not all(_same_number(a, b) for a, b in zip(old_numbers, new_numbers))
        ):
            problems.append(
                f"line {number}: committed {old_template!r} {old_numbers}, now {new_template!r} {new_numbers}"
            )
        if len(problems) >= limit:
            break
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DATA, help="where to write (default: data/)")
    args = parser.parse_args(argv)
    data = regenerate(args.out)
    print(f"wrote {args.out}/{FIGURE_STEM}.png/.svg/.json and reference-execution.txt")
    print(
        "entries:",
        data["residual_entries"],
        "temp bytes:",
        {p: (m or {}).get("temp_size_in_bytes") for p, m in data["memory"].items()},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
