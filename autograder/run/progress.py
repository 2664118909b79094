"""Progress of a grading run: a bar with count, rate and ETA on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
import time


class Progress:
    """`total` students to grade; each result as it comes (`update`), then the summary (`finish`).

    The ETA assumes the students left take as long, on average, as those graded so far.
    """

    def __init__(self, total: int, stream=None, clock=time.perf_counter):
        self.total, self.done, self.broken = total, 0, 0
        self.stream = stream or sys.stdout
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.clock = clock
        self.started = clock()
        self.task_seconds = 0.0

    def update(self, result) -> None:
        self.done += 1
        self.broken += bool(result.broken or getattr(result, "failed", None))
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
            state = "FAILED" if getattr(result, "failed", None) else ("BROKEN" if result.broken else "graded")
            self.stream.write(
                f"{state} {result.student_id} ({self.done}/{self.total}) in {result.seconds:.1f} s"
                f"{f' on {result.worker}' if result.worker else ''}; ETA {eta:.0f} s\n"
            )
        self.stream.flush()

    def note(self, line: str) -> None:
        """A line of its own (before the first student, so the bar is not cut)."""
        self.stream.write(line.rstrip("\n") + "\n")
        self.stream.flush()

    def finish(self, seconds: float) -> None:
        graded = self.done - self.broken
        per = seconds / self.done if self.done else 0.0
        self.stream.write(
            f"summary: {graded} graded, {self.broken} with broken parts, {seconds:.1f} s wall, "
            f"{per:.1f} s per student ({self.task_seconds / max(self.done, 1):.1f} s of work each)\n"
        )
        self.stream.flush()
