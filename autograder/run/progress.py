"""Progress of a grading run: a bar with count, rate and ETA on a terminal, plain lines otherwise,
then one summary line that counts what the lines after it name."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from autograder.course.outcomes import TroubleKind


@dataclass(frozen=True)
class Summary:
    """What a run did, counted by student: those stored in the gradebook, and of them those with
    a notebook that broke while graded, one that could not be read, one missing, one under another
    name, flagged code, and the manual grades to check again; then those the grader failed and the
    folders it rejected (neither is in the gradebook)."""

    graded: int
    broken: int = 0
    unreadable: int = 0
    missing: int = 0
    renamed: int = 0
    flagged: int = 0
    rechecks: int = 0
    failed: int = 0
    rejected: int = 0

    def words(self) -> str:
        named = [
            (self.broken, "with a notebook that broke (BROKEN)"),
            (self.unreadable, "with a notebook not read (BROKEN)"),
            (self.missing, "with notebooks missing (MISSING)"),
            (self.renamed, "with a notebook under another name (NOTE)"),
            (self.flagged, "flagged for review (REVIEW)"),
        ]
        parts = [f"{self.graded} graded"] + [f"{count} {what}" for count, what in named if count]
        if self.rechecks:
            parts.append(f"{self.rechecks} manual grade(s) to check again (RECHECK)")
        if self.failed:
            parts.append(f"{self.failed} not graded for a reason of the grader's own (FAILED)")
        if self.rejected:
            parts.append(f"{self.rejected} folder(s) rejected (REJECTED)")
        return ", ".join(parts)


class Progress:
    """`total` students to grade; each result as it comes (`update`), then the summary (`finish`).

    `problems`: what the grader already knows is wrong with a student's files before grading
    them ({student: [a Trouble of intake.not_graded, ...]}): a student with a notebook it could not read is
    shown as broken from the start. The ETA assumes the students left take as long, on average,
    as those graded so far, since the students' grading began (`begin`).
    """

    def __init__(self, total: int, stream=None, clock=time.perf_counter, problems: dict | None = None):
        self.total, self.done, self.broken = total, 0, 0
        self.stream = stream or sys.stdout
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.clock = clock
        self.started = clock()
        self.task_seconds = 0.0
        self.problems = problems or {}

    def _unreadable(self, student: str) -> bool:
        return any(trouble.kind is TroubleKind.UNREADABLE for trouble in self.problems.get(student, []))

    def update(self, result) -> None:
        self.done += 1
        failed = getattr(result, "failed", None)
        broken = bool(result.broken) or self._unreadable(result.student_id)
        self.broken += bool(broken or failed)
        self.task_seconds += result.seconds
        elapsed = self.clock() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else 0.0
        if self.tty:
            filled = int(30 * self.done / max(self.total, 1))
            bar = "#" * filled + "." * (30 - filled)
            self.stream.write(
                f"\r[{bar}] {self.done}/{self.total} students  {rate * 60:.1f}/min  ETA {eta:.0f} s  "
                f"({self.broken} broken)"
            )
            if self.done == self.total:
                self.stream.write("\n")
        else:
            state = "FAILED" if failed else ("BROKEN" if broken else "graded")
            self.stream.write(
                f"{state} {result.student_id} ({self.done}/{self.total}) in {result.seconds:.1f} s"
                f"{f' on {result.worker}' if result.worker else ''}; ETA {eta:.0f} s\n"
            )
        self.stream.flush()

    def begin(self) -> None:
        """The students' grading starts now: the ETA's rate counts from here, not from before the
        reference run (which every run pays once, whatever the class)."""
        self.started = self.clock()

    def note(self, line: str) -> None:
        """A line of its own (before the first student, so the bar is not cut)."""
        self.stream.write(line.rstrip("\n") + "\n")
        self.stream.flush()

    def finish(self, seconds: float, summary: Summary | None = None) -> None:
        """The summary line: what the run counts (`summary`, from its result), and its time."""
        counted = summary.words() if summary is not None else f"{self.done - self.broken} graded"
        per = seconds / self.done if self.done else 0.0
        self.stream.write(
            f"summary: {counted}; {seconds:.1f} s wall, {per:.1f} s per student "
            f"({self.task_seconds / max(self.done, 1):.1f} s of work each)\n"
        )
        self.stream.flush()
