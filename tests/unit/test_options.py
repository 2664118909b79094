"""A grading run's settings, each declared once: `autograder grade`'s flags are made from
GradingOptions, and the settings both routes read (unsafe, limits) share one help text."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from autograder.kernel.sandbox import LIMITS_HELP, UNSAFE_FLAG, UNSAFE_HELP, Limits
from autograder.notebook.execute import SandboxedExecute
from autograder.run.grade import command_line
from autograder.run.options import GradingOptions


def _parse(*argv: str) -> GradingOptions:
    args = command_line().parse_args(["subs", "--out", "out", *argv])
    return GradingOptions.from_flags(args, limits=Limits())


def test_flags_offer_each_field_with_help():
    """Each field that declares a flag is an option of `autograder grade`, with the field's help."""
    text = " ".join(command_line().format_help().split())
    flagged = [f for f in dataclasses.fields(GradingOptions) if f.metadata.get("flag")]
    assert len(flagged) >= 9
    missing = [
        f.name
        for f in flagged
        if f.metadata["flag"] not in text or " ".join(f.metadata["help"].split()[:6]) not in text
    ]
    assert missing == []


def test_flags_default_to_declared_values():
    """With no flag given, the options are GradingOptions' own defaults."""
    assert _parse() == GradingOptions(limits=Limits())


def test_flags_given_set_their_fields():
    """Each flag sets its field: numbers, paths, and the bools that a flag turns off or on."""
    options = _parse(
        "--jobs",
        "3",
        "--no-fork",
        "--no-compile-cache",
        "--fresh-gradebook",
        "--judge-seed",
        "7",
        "--cell-timeout",
        "40",
        "--reference-cache",
        "cache",
        UNSAFE_FLAG,
    )
    assert (options.jobs, options.fork_kernels, options.compile_cache, options.fresh_gradebook) == (
        3,
        False,
        False,
        True,
    )
    assert (options.judge_seed, options.cell_timeout, options.reference_cache, options.unsafe) == (
        7,
        40,
        Path("cache"),
        True,
    )


def test_flags_refuse_a_wrong_number():
    """A flag's type comes from its declaration: a word where a number goes is a usage error."""
    with pytest.raises(SystemExit):
        _parse("--jobs", "many")


def test_unsafe_and_limits_share_help():
    """`autograder grade` and nbgrader's SandboxedExecute say the same of unsafe and limits."""
    traits = SandboxedExecute.class_traits()
    assert UNSAFE_HELP in traits["unsafe"].help and GradingOptions.help("unsafe") == UNSAFE_HELP
    names = ", ".join(Limits().as_dict())
    assert traits["limits"].help == LIMITS_HELP.format(names=names) == GradingOptions.help("limits")
