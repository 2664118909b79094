"""data/: the figure's data and provenance, reproducible; the unavailable-memory mode shows nulls."""

from __future__ import annotations

import json

import pytest

from autograder.paths import DATA
from bundle.figures import FIGURE_STEM, comparable, differences, regenerate

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
    return out, regenerate(out)


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


def test_regeneration_reproduces_the_deterministic_fields(regenerated):
    out, fresh = regenerated
    committed = json.loads((DATA / f"{FIGURE_STEM}.json").read_text())
    assert fresh["residual_entries"] == committed["residual_entries"]
    assert fresh["memory"] == committed["memory"]
    assert fresh["memory_analysis_available"] == committed["memory_analysis_available"]
    for name, error in fresh["max_abs_error"].items():
        assert error < 1e-6 and committed["max_abs_error"][name] < 1e-6
    assert fresh["directional_derivative"]["finite"] == pytest.approx(
        committed["directional_derivative"]["finite"], rel=1e-6
    )
    assert (out / "storage-views.png").is_file()


def test_the_recorded_execution_is_regenerated_and_reproduces_what_must(regenerated):
    """`make figures` writes reference-execution.txt again; counts, bytes and error bounds match the
    committed one (numbers within 1e-6), line by line; timings and measured peaks may differ."""
    out, _ = regenerated
    committed, fresh = (DATA / "reference-execution.txt").read_text(), (out / "reference-execution.txt").read_text()
    assert differences(committed, fresh) == [], "run `make figures`: data/reference-execution.txt is stale"
    deterministic = [template for template, _ in comparable(committed) if template != "<measured>"]
    assert len(deterministic) > 150 and any("temp_size_in_bytes" in t for t in deterministic)


def test_the_comparison_tells_a_changed_count_from_a_changed_timing():
    committed = "# utc: then\n\nplain: 9 entries, 256 bytes\nplain  median 15.2 µs\nerror 1e-09\n"
    assert differences(committed, committed.replace("15.2", "99.0").replace("1e-09", "3e-09")) == []
    assert differences(committed, committed.replace("9 entries", "8 entries")) != []
    assert differences(committed, committed.replace("256", "257")) != []
    assert differences(committed, committed + "one more line\n") != []


def test_unavailable_memory_analysis_gives_nulls_and_the_availability_panel(tmp_path):
    data = regenerate(tmp_path, {"REMAT_LESSON_NO_MEMORY_ANALYSIS": "1"})
    assert data["memory"] == {"plain": None, "remat": None, "whole": None}
    assert data["memory_analysis_available"] == {"plain": False, "remat": False, "whole": False}
    assert data["residual_entries"] == {"plain": 9, "remat": 6, "whole": 2}  # entries do not depend on it
    svg = (tmp_path / f"{FIGURE_STEM}.svg").read_text()
    assert "memory analysis unavailable on this backend" in svg
    assert "256 B" not in svg and ">0 B<" not in svg
    assert data["provenance"]["memory_analysis"] == "disabled"
