"""data/: the figure's data and provenance, reproducible; the unavailable-memory mode shows nulls."""

from __future__ import annotations

import json

import pytest

from autograder.course.paths import DATA
from bundle.figures import FIGURE_STEM, NUMBER, comparable, differences, is_measured, regenerate
from tests.lesson_cache import lesson_run_env

PROVENANCE_KEYS = {
    "utc",
    "python",
    "jax",
    "jaxlib",
    "numpy",
    "matplotlib",
    "platform",
    "devices",
    "environment",
    "command",
}


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    out = tmp_path_factory.mktemp("figures")
    return out, regenerate(out, lesson_run_env())


def test_committed_data_has_schema_and_provenance():
    data = json.loads((DATA / f"{FIGURE_STEM}.json").read_text())
    assert set(data["provenance"]) >= PROVENANCE_KEYS | {"jax_environment"}
    assert set(data["provenance"]["devices"]) == {"backend", "kind", "count"}
    assert set(data["residual_entries"]) == {"plain", "remat", "whole"}
    for report in data["memory"].values():
        assert report is None or set(report) == {
            "argument_size_in_bytes",
            "output_size_in_bytes",
            "temp_size_in_bytes",
            "alias_size_in_bytes",
        }
    header = (DATA / "reference-execution.txt").read_text().split("\n\n", 1)[0].splitlines()
    assert all(line.startswith("# ") for line in header), header
    assert {line[2:].split(":")[0] for line in header} >= PROVENANCE_KEYS
    for suffix in (".png", ".svg"):
        assert (DATA / f"{FIGURE_STEM}{suffix}").stat().st_size > 5_000


def test_regeneration_keeps_deterministic_fields(regenerated):
    """Regeneration reproduces the deterministic fields."""
    out, fresh = regenerated
    committed = json.loads((DATA / f"{FIGURE_STEM}.json").read_text())
    assert fresh["residual_entries"] == committed["residual_entries"]
    assert fresh["memory"] == committed["memory"]
    assert fresh["memory_analysis_available"] == committed["memory_analysis_available"]
    # The sweep's planned bytes are the compiler's, as deterministic as the small network's.
    assert fresh["sweep_temp_bytes"] == committed["sweep_temp_bytes"]
    assert {"plain", "checkpoint_per_layer", "scan_checkpointed_body"} <= set(fresh["sweep_temp_bytes"])
    for name, error in fresh["max_abs_error"].items():
        assert error < 1e-6 and committed["max_abs_error"][name] < 1e-6
    assert fresh["directional_derivative"]["finite"] == pytest.approx(
        committed["directional_derivative"]["finite"], rel=1e-6
    )
    assert (out / "storage-views.png").is_file()


def test_recorded_execution_regenerates(regenerated):
    """`make figures` writes reference-execution.txt again; counts, bytes and error bounds match the
    committed one (numbers within 1e-6), line by line; timings, measured peaks and the verdicts
    drawn from them (the lines `is_measured` recognises) may differ."""
    out, _ = regenerated
    committed, fresh = (DATA / "reference-execution.txt").read_text(), (out / "reference-execution.txt").read_text()
    assert differences(committed, fresh) == [], "run `make figures`: data/reference-execution.txt is stale"
    deterministic = [template for template, _ in comparable(committed) if template != "<measured>"]
    assert len(deterministic) > 60 and any("temp_size_in_bytes" in t for t in deterministic)


def test_measured_lines_are_recognised_by_rule():
    """A time unit after a number, or a word of measurement in any part of the line (an identifier
    split at `_` included), makes a line measured; counts, plans and source code are not."""
    measured = [
        "remat_is_faster                        predicted False  happened True",
        "L=32 D=64 B=512: 5 policies in 10.8 s",
        "prevent_cse=True : median 7.91 ms, samples from 7.80 to 11.59 ms",
        "plain  median     43.0 µs  samples (µs): [76.8, 45.9]",
        "the two settings' timing samples overlap: they rank neither setting",
        "The two ranges do not overlap in this run.",
        "    checkpoint_per_layer: peak 9.46 MiB, time 1.09x plain's",
        "a duration of 12us",
    ]
    deterministic = [
        "per-layer checkpoint: the layer's Python code ran 1x during jax.grad; the gradient's programs are written with 8 tanh",
        "chain of  8 sin: plain saves  8 entries and runs  16 sin/cos; recursive checkpoint saves  4 and runs  21",
        "t = 1 forward run(s) per step: 31 snapshots reverse L=32 layers",
        "checkpoint_per_layer_lowers_temp: planned False, not what you predicted",
        "        for _ in range(depth):",
        "plain  {'argument_size_in_bytes': 64, 'output_size_in_bytes': 64, 'temp_size_in_bytes': 256}",
    ]
    assert [line for line in measured if not is_measured(line)] == []
    assert [line for line in deterministic if is_measured(line)] == []


def _another_run(text: str) -> str:
    """The same execution as another run would print it: every number of every measured line
    changed, and the verdicts drawn from timings flipped."""
    flips = {
        "overlapping": "not overlapping",
        "happened not decided: the samples overlap": "happened True",
        "overlap: these samples rank neither policy.": "do not overlap in this run.",
        "flips with the order": "holds in both orders",
    }
    lines = []
    for line in text.splitlines():
        if is_measured(line):
            line = NUMBER.sub(lambda match: f"{float(match.group()) * 1.37 + 0.5:.3g}", line)
            for old, new in flips.items():
                line = line.replace(old, new)
        lines.append(line)
    return "\n".join(lines) + "\n"


def test_runs_differing_in_timing_compare_equal():
    """Every timing-dependent line of the committed recorded execution changed at once, verdicts
    included (`remat_is_faster ... happened True` where the committed run could not decide): the
    comparison reports nothing, and it still holds the deterministic lines to the committed ones."""
    committed = (DATA / "reference-execution.txt").read_text()
    other = _another_run(committed)
    assert other != committed
    assert differences(committed, other) == []
    flaky = "remat_is_faster                        predicted False  happened not decided: the samples overlap\n"
    assert (
        differences(
            "# utc: then\n\n" + flaky, "# utc: now\n\n" + flaky.replace("not decided: the samples overlap", "True")
        )
        == []
    )
    assert "plain: 9 entries\n" in committed
    assert differences(committed, committed.replace("plain: 9 entries\n", "plain: 8 entries\n")) != []


def test_comparison_tells_count_from_timing():
    """The comparison tells a changed count from a changed timing."""
    committed = "# utc: then\n\nplain: 9 entries, 256 bytes\nplain  median 15.2 µs\nerror 1e-09\n"
    assert differences(committed, committed.replace("15.2", "99.0").replace("1e-09", "3e-09")) == []
    assert differences(committed, committed.replace("9 entries", "8 entries")) != []
    assert differences(committed, committed.replace("256", "257")) != []
    assert differences(committed, committed + "one more line\n") != []


def test_table_cells_under_a_measured_column_are_measured():
    """In a table whose header names a measured column (`peak MiB`, `time`), those cells may differ
    (their widths too); a count in the same row may not, and the rule ends with the table."""
    header = "      policy entries  temp MiB   dots  peak MiB   time\n"
    row = "       plain      98      4.50  95→95      5.91  1.00x\n"
    committed = "# utc: then\n\n" + header + row + "(a note)\nplain: 9 entries\n"
    assert differences(committed, committed.replace("5.91", "12.05").replace("1.00x", "0.87x")) == []
    assert differences(committed, committed.replace("98", "97")) != []
    assert differences(committed, committed.replace("4.50", "4.51")) != []
    assert differences(committed, committed.replace("plain: 9 entries", "plain: 8 entries")) != []


def test_no_memory_analysis_gives_nulls_panel(tmp_path):
    """Unavailable memory analysis gives nulls and the availability panel."""
    data = regenerate(tmp_path, {"REMAT_LESSON_NO_MEMORY_ANALYSIS": "1", **lesson_run_env()})
    assert data["memory"] == {"plain": None, "remat": None, "whole": None}
    assert data["memory_analysis_available"] == {"plain": False, "remat": False, "whole": False}
    assert data["residual_entries"] == {"plain": 9, "remat": 6, "whole": 2}  # entries do not depend on it
    svg = (tmp_path / f"{FIGURE_STEM}.svg").read_text()
    assert "memory analysis unavailable on this backend" in svg
    assert "256 B" not in svg and ">0 B<" not in svg
    assert data["provenance"]["memory_analysis"] == "disabled"


def test_shipped_text_hides_wrapped_check_items():
    """A check's item lines, and the lines a long one is wrapped onto, stay out of what learners
    receive (hidden checks' wording among them); the points line and the lesson's own indented
    output stay."""
    from bundle.figures import shipped_text

    stdout = (
        "Stage 4 of 5 · Exercise\n"
        "[PASS] 1/1  a fresh function, point and direction: the central difference agrees with\n"
        "    its exact slope, hidden wording\n"
        "[FAIL] 0/1  another item\n"
        "        expected something, found something else that is long enough to wrap\n"
        "            onto a second line of hidden detail\n"
        "        where to look: somewhere\n"
        "2 of 3 points\n"
        "  f32[16] output of tanh from the lesson\n"
    )
    shipped = shipped_text(stdout, "/nowhere")
    assert shipped == "Stage 4 of 5 · Exercise\n2 of 3 points\n  f32[16] output of tanh from the lesson\n"
