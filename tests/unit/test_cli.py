"""The `autograder` command itself (autograder/commands/cli.py): what it says before a command runs."""

from __future__ import annotations

import importlib

import pytest

from autograder.commands import cli
from autograder.course.errors import ExitCode


def test_ctrl_c_while_a_command_still_imports_is_one_line(monkeypatch, capsys):
    """A command's imports take a second or two; a Ctrl-C then is said, not a traceback."""

    def importing(name):
        raise KeyboardInterrupt  # as the terminal's Ctrl-C lands in an import

    monkeypatch.setattr(importlib, "import_module", importing)
    assert cli.main(["grade", "submissions"]) == ExitCode.INTERRUPTED
    said = capsys.readouterr().err
    assert said.strip() == "stopped by Ctrl-C before `autograder grade` began: nothing was done"


@pytest.mark.parametrize("argv", [["nonsense"], []])
def test_no_command_or_an_unknown_one_is_a_usage_error(argv, capsys):
    assert cli.main(argv) == ExitCode.USAGE
