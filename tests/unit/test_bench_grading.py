"""The grading benchmark's figures are read from what was measured: the medians of repeated runs,
the cost per student and per core as the class grows, and the console's lines. Every input here is
made up; the benchmark's own run (make bench-grading) is where real seconds are measured."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from bundle.bench_grading import growth_of, main, median_of_runs, report_text, scaling_row, sizes


def _run(stock: float, parallel: float, differences=(), failures=()) -> dict:
    return {
        "stock_wall_s": stock,
        "parallel_wall_s": parallel,
        "speedup": round(stock / parallel, 2),
        "same_scores": not differences,
        "score_differences": list(differences),
        "stock_failures": list(failures),
        "parallel_phases_s": {},
    }


def test_repeated_runs_report_their_medians_and_range():
    runs = [_run(300.0, 100.0), _run(330.0, 150.0), _run(320.0, 80.0)]
    medians = median_of_runs(runs)
    assert medians["runs"] == 3
    assert medians["stock_serial_wall_s"] == 320.0
    assert medians["parallel_wall_s"] == 100.0
    assert medians["speedup"] == 3.0  # the median of 3.0, 2.2 and 4.0
    assert medians["ratio_of_median_walls"] == 3.2  # 320 / 100: the other reading, said beside it
    assert medians["speedup_range"] == [2.2, 4.0]
    assert medians["same_scores"] is True
    assert medians["score_differences"] == [] and medians["stock_failures"] == []


def test_what_went_wrong_in_any_run_is_reported_whatever_the_last_run_did():
    runs = [_run(300.0, 100.0, differences=["s/02/cell: stock 1.0, parallel 0.0"], failures=["a"]), _run(300.0, 100.0)]
    medians = median_of_runs(runs)
    assert medians["same_scores"] is False
    assert medians["score_differences"] == ["s/02/cell: stock 1.0, parallel 0.0"]
    assert medians["stock_failures"] == ["a"]


def _result(phases=None, failed=None, broken=None):
    """What a row reads of a GradingResult."""
    return SimpleNamespace(phases=phases or {}, failed=failed or {}, broken=broken or {})


def test_a_row_splits_what_a_run_pays_once_from_what_each_student_adds():
    phases = {"setup": 5.0, "reference": 21.0, "students": 100.0, "merge_and_export": 2.0}
    row = scaling_row(16, 2, 2, 128.0, _result(phases))
    assert row["s_per_student"] == 8.0
    assert row["core_s_per_student"] == 16.0  # two cores reserved for 8 s a student
    assert row["reference_s"] == 21.0
    assert row["students_s_per_student"] == 6.25
    assert row["failed_students"] == row["broken_students"] == 0


def test_a_row_counts_the_students_the_grader_failed_or_found_broken():
    result = _result(failed={"s1": ["its worker died twice"], "s2": ["..."]}, broken={"s3": ["..."]})
    row = scaling_row(4, 2, 2, 40.0, result)
    assert (row["failed_students"], row["broken_students"]) == (2, 1)


def test_a_row_counts_only_the_cores_a_run_could_use():
    # 4 jobs on 2 CPUs use 2 cores; 1 job on 2 CPUs uses one.
    assert scaling_row(8, 4, 2, 40.0, _result())["core_s_per_student"] == 10.0
    assert scaling_row(8, 1, 2, 40.0, _result())["core_s_per_student"] == 5.0


def test_growth_is_read_against_the_first_row():
    rows = [
        scaling_row(4, 2, 2, 48.0, _result()),
        scaling_row(16, 2, 2, 128.0, _result()),
        scaling_row(64, 2, 2, 448.0, _result()),
    ]
    grown = growth_of(rows)
    assert [row["per_student_vs_first"] for row in grown] == [1.0, 0.667, 0.583]
    assert growth_of([]) == []
    # More jobs on the same class and 2 cores: 2 -> 4 jobs, 100 s -> 80 s.
    swept = growth_of([scaling_row(16, 2, 2, 100.0, _result()), scaling_row(16, 4, 2, 80.0, _result())])
    assert [row["per_student_vs_first"] for row in swept] == [1.0, 0.8]
    assert [row["core_s_vs_first"] for row in swept] == [1.0, 0.8]  # still 2 cores: 0.8 of the core seconds


def test_class_sizes_are_read_as_a_list_of_whole_numbers():
    assert sizes("4,16,64") == [4, 16, 64]
    assert sizes("64,4,,16,4") == [4, 16, 64]  # smallest first (the tables read rows against the first), once each
    assert sizes("") == []
    for wrong in ("4,x", "0,16", "-2"):
        with pytest.raises(argparse.ArgumentTypeError):
            sizes(wrong)


def test_the_console_says_the_medians_and_the_growth_table():
    runs = [_run(300.0, 100.0), _run(330.0, 150.0), _run(320.0, 80.0)]
    medians = median_of_runs(runs)
    report: dict = {
        **medians,
        "jobs": 2,
        "cpus": 2,
        "stock_s_per_student": 20.0,
        "parallel_s_per_student": 6.25,
        "floor_per_student_s": 2.5,
        "parallel_over_floor": 2.5,
        "last_run_parallel_phases_s": {"setup": 1.0},
        "last_run_breakdown_per_notebook_s": {},
        "growth": growth_of([scaling_row(4, 2, 2, 48.0, _result()), scaling_row(16, 2, 2, 128.0, _result())]),
        "jobs_sweep": [],
    }
    text = report_text(report)
    assert "speedup 3.00x with 2 jobs on 2 CPUs (the median of 3 runs' speedups, 2.20 to 4.00; walls: medians)" in text
    assert "growth with the class" in text and "growth with the jobs" not in text
    assert "       16     2    128.0       8.00       16.00         0.0      0.67        0.67       0" in text
    report.update(runs=1, speedup_range=[3.0, 3.0])
    assert "speedup 3.00x with 2 jobs on 2 CPUs; same scores" in report_text(report)


@pytest.mark.parametrize("argv", [["--repeats", "0"], ["--repeats", ""], ["--growth", "4,x"], ["--jobs-sweep", "0"]])
def test_a_wrong_argument_stops_before_anything_is_graded(argv, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert "benchmark class" not in capsys.readouterr().out  # no class was made
