"""`autograder COMMAND ...`: the grader's commands, as an instructor installs them.

    autograder grade SUBMISSIONS [...]     grade a class (python -m autograder.run.grade)
    autograder install-assignment CHECKOUT COURSE   the bundle's assignment's source files into a course
    autograder export [...]                cells.csv, grades.csv, the LMS file again
    autograder feedback [...]              feedback pages again, manual grades included
    autograder configure COURSE [...]      make nbgrader's own `nbgrader autograde` grade safely there
    autograder tls FOLDER [...]            the TLS files of a Dask cluster of graders

`autograder COMMAND --help` says more of each.
"""

from __future__ import annotations

import importlib
import sys

from autograder.course.errors import ExitCode

COMMANDS = {
    "grade": "autograder.run.grade",
    "install-assignment": "autograder.course.assignment",
    "export": "autograder.commands.export",
    "feedback": "autograder.run.feedback",
    "configure": "autograder.notebook.plugin",
    "tls": "autograder.run.tls",
}


def main(argv=None) -> int:
    """The command named in argv (None: this process's command line, whose exit after a stop
    is bounded: stopping.as_the_process_command)."""
    if argv is None:
        from autograder.run.stopping import as_the_process_command

        return as_the_process_command(lambda: _command(sys.argv[1:]))
    return _command(list(argv))


def _command(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return ExitCode.DONE if argv else ExitCode.USAGE
    command = argv[0]
    if command not in COMMANDS:
        print(f"error: no command {command!r}; the commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return ExitCode.USAGE
    try:
        return importlib.import_module(COMMANDS[command]).main(argv[1:])
    except KeyboardInterrupt:  # before the command heard stops itself (its imports take a second or two)
        print(f"stopped by Ctrl-C before `autograder {command}` began: nothing was done", file=sys.stderr)
        return ExitCode.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
