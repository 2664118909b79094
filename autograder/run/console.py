"""What the grader's commands print besides their own results: the package's log lines, escaped.

Library code logs (`logging.getLogger(__name__)`); each command shows the lines of the
`autograder` logger on standard output, one per line, with control characters escaped (a line
may quote a submission), and nothing of other packages' logs.
"""

from __future__ import annotations

import logging
import sys

from autograder.course.text_safety import console_line


class _Escaped(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return console_line(record.getMessage(), 1000)


class _Shown(logging.StreamHandler):
    """The one handler a command puts on the package's logger."""


def show_log(stream=None, level: int = logging.INFO) -> None:
    """Show the package's log lines of `level` and above on `stream` (default: standard output now)."""
    logger = logging.getLogger("autograder")
    for handler in [h for h in logger.handlers if isinstance(h, _Shown)]:
        logger.removeHandler(handler)
    handler = _Shown(stream if stream is not None else sys.stdout)
    handler.setFormatter(_Escaped())
    logger.addHandler(handler)
    logger.setLevel(min(level, logger.level) if logger.level else level)
