"""How the grader's commands end: the exit codes, named, and the one base of the grader's errors,
which carries the code a command ends with when it stops on one."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """How the grader's commands end."""

    DONE = 0
    #: Something was left undone that the instructor can finish (a cell awaits a manual grade,
    #: a student's pages could not be made): named on the lines above.
    UNFINISHED = 1
    #: Bad arguments, a folder laid out wrongly as a whole, a class gradebook of another assignment.
    USAGE = 2
    #: This host or this course cannot grade anyone safely (no sandbox, a failing reference run).
    UNSAFE = 3
    #: Some student could not be graded for a reason of the grader's own.
    GRADER_FAILED = 4
    #: Stopped by Ctrl-C (SIGINT) or by SIGTERM before the run finished, as a shell reports a
    #: process a signal ended (128 + the signal's number); what the run made is removed.
    INTERRUPTED = 130
    TERMINATED = 143


class GraderError(Exception):
    """The base of the grader's own errors: `exit_code` says how a command that stops on it ends.
    (The sandboxed programs' WireError is not one: their text is sent alone into a sandbox.)"""

    exit_code: ExitCode = ExitCode.GRADER_FAILED


class UsageError(GraderError, ValueError):
    """Bad arguments: the command line or the submissions folder is not what grading needs."""

    exit_code = ExitCode.USAGE
