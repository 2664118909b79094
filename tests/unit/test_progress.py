"""The progress of a grading run, on a clock the test sets: lines, bar, ETA and summary."""

from __future__ import annotations

import io

from autograder.run.progress import Progress
from autograder.run.worker import StudentResult


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _result(student: str, seconds: float, **kw) -> StudentResult:
    return StudentResult(student, seconds=seconds, worker="host:1", **kw)


def test_plain_lines_name_each_student_and_the_eta_from_the_rate_so_far():
    clock, stream = Clock(), io.StringIO()
    progress = Progress(4, stream, clock=clock)
    clock.now += 10
    progress.update(_result("ada", 9.5))
    clock.now += 10
    progress.update(_result("bob", 8.0, broken=["01-understand.ipynb: the kernel died"]))
    lines = stream.getvalue().splitlines()
    # 1 student in 10 s: 3 left take 30 s; then 2 in 20 s: 2 left take 20 s.
    assert lines == [
        "graded ada (1/4) in 9.5 s on host:1; ETA 30 s",
        "BROKEN bob (2/4) in 8.0 s on host:1; ETA 20 s",
    ]


def test_a_student_the_grader_failed_is_named_failed_and_counted_with_the_broken():
    clock, stream = Clock(), io.StringIO()
    progress = Progress(1, stream, clock=clock)
    clock.now += 4
    progress.update(_result("cy", 2.0, failed=["its worker died twice"]))
    progress.finish(5.0)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "FAILED cy (1/1) in 2.0 s on host:1; ETA 0 s"
    assert lines[1] == "summary: 0 graded, 1 with broken parts, 5.0 s wall, 5.0 s per student (2.0 s of work each)"


def test_a_terminal_gets_one_bar_rewritten_in_place_and_a_newline_at_the_end():
    clock, stream = Clock(), Terminal()
    progress = Progress(2, stream, clock=clock)
    clock.now += 30
    progress.update(_result("ada", 1.0))
    assert stream.getvalue() == f"\r[{'#' * 15}{'.' * 15}] 1/2 students  2.0/min  ETA 30 s  (0 broken)"
    clock.now += 30
    progress.update(_result("bob", 1.0))
    assert stream.getvalue().endswith(f"\r[{'#' * 30}] 2/2 students  2.0/min  ETA 0 s  (0 broken)\n")


def test_a_note_is_a_line_of_its_own_and_an_empty_class_finishes_cleanly():
    stream = io.StringIO()
    progress = Progress(0, stream, clock=Clock())
    progress.note("reference run: every point earned\n")
    progress.finish(0.0)
    assert stream.getvalue().splitlines() == [
        "reference run: every point earned",
        "summary: 0 graded, 0 with broken parts, 0.0 s wall, 0.0 s per student (0.0 s of work each)",
    ]
