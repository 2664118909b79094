"""The progress of a grading run, on a clock the test sets: lines, bar, ETA and summary."""

from __future__ import annotations

import io

from autograder.course.outcomes import Trouble, TroubleKind
from autograder.run.progress import Progress, Summary
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


def test_plain_lines_name_student_and_eta():
    """Plain lines name each student and the ETA from the rate so far."""
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


def test_the_eta_counts_from_the_students_grading_not_the_reference_run():
    """The reference run before the first student is paid once: the rate, and so the ETA, counts
    from when the students' grading began."""
    clock, stream = Clock(), io.StringIO()
    progress = Progress(3, stream, clock=clock)
    clock.now += 60  # the reference run
    progress.begin()
    clock.now += 10
    progress.update(_result("ada", 9.5))
    assert stream.getvalue().splitlines() == ["graded ada (1/3) in 9.5 s on host:1; ETA 20 s"]


def test_grader_failure_counted_as_broken():
    """A student the grader failed is named failed and counted with the broken."""
    clock, stream = Clock(), io.StringIO()
    progress = Progress(1, stream, clock=clock)
    clock.now += 4
    progress.update(_result("cy", 2.0, failed=["its worker died twice"]))
    progress.finish(5.0, Summary(graded=0, failed=1))
    lines = stream.getvalue().splitlines()
    assert lines[0] == "FAILED cy (1/1) in 2.0 s on host:1; ETA 0 s"
    assert lines[1] == (
        "summary: 0 graded, 1 not graded for a reason of the grader's own (FAILED); "
        "5.0 s wall, 5.0 s per student (2.0 s of work each)"
    )


def test_a_notebook_not_read_is_broken_from_the_start():
    """A student whose notebook the grader could not read is shown broken, though every notebook it
    could read graded cleanly, and the summary counts each kind of problem it names below."""
    clock, stream = Clock(), io.StringIO()
    problems = {
        "erin": [
            Trouble(TroubleKind.UNREADABLE, "not a readable notebook (bad JSON); graded 0", "02-build.ipynb"),
            Trouble(TroubleKind.MISSING, "not handed in; graded 0", "05-evidence.ipynb"),
        ],
        "fay": [
            Trouble(TroubleKind.RENAMED, "not a notebook of the assignment; not graded", "01-understand (1).ipynb")
        ],
    }
    progress = Progress(2, stream, clock=clock, problems=problems)
    clock.now += 2
    progress.update(_result("erin", 1.0))
    progress.update(_result("fay", 1.0))
    progress.finish(3.0, Summary(graded=2, unreadable=1, missing=1, renamed=1, rechecks=2))
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("BROKEN erin (1/2)") and lines[1].startswith("graded fay (2/2)")
    assert lines[2].startswith(
        "summary: 2 graded, 1 with a notebook not read (BROKEN), 1 with notebooks missing (MISSING), "
        "1 with a notebook under another name (NOTE), 2 manual grade(s) to check again (RECHECK); "
    )


def test_terminal_bar_rewritten_in_place():
    """A terminal gets one bar rewritten in place and a newline at the end."""
    clock, stream = Clock(), Terminal()
    progress = Progress(2, stream, clock=clock)
    clock.now += 30
    progress.update(_result("ada", 1.0))
    assert stream.getvalue() == f"\r[{'#' * 15}{'.' * 15}] 1/2 students  2.0/min  ETA 30 s  (0 broken)"
    clock.now += 30
    progress.update(_result("bob", 1.0))
    assert stream.getvalue().endswith(f"\r[{'#' * 30}] 2/2 students  2.0/min  ETA 0 s  (0 broken)\n")


def test_note_own_line_empty_class_finishes():
    """A note is a line of its own and an empty class finishes cleanly."""
    stream = io.StringIO()
    progress = Progress(0, stream, clock=Clock())
    progress.note("reference run: every point earned\n")
    progress.finish(0.0, Summary(graded=0))
    assert stream.getvalue().splitlines() == [
        "reference run: every point earned",
        "summary: 0 graded; 0.0 s wall, 0.0 s per student (0.0 s of work each)",
    ]
