"""What the tests hold a judge's report to, wherever it was written (the judge in this process,
or a grading run's autograded notebooks): every line is the judge's."""

from __future__ import annotations

import re

#: A cell's points line, as remat_checks.points_line writes it.
POINTS_LINE = re.compile(r"^\S+ of \S+ points")


def assert_judges_lines_only(report: str, last: str) -> None:
    """One points line, `last`, at the end; no [PASS] line (nothing was answered); no character
    that breaks or hides a line on a page or a terminal (U+2028, U+0085, \\r, ANSI escapes)."""
    lines = report.rstrip("\n").split("\n")
    assert report.rstrip("\n").splitlines() == lines, ascii(report)
    assert all(line.isprintable() for line in lines), ascii(report)
    assert [line for line in lines if line.lstrip().upper().startswith(("[PASS]", "[ PASS"))] == [], report
    assert [line for line in lines if POINTS_LINE.search(line)] == [last], report
    assert lines[-1] == last, report
