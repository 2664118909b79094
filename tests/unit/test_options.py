"""A grading run's settings, each declared once (a trait of a Configurable): `autograder grade`'s
flags, its --Class.name=value arguments, its --help-all and a course's nbgrader_config.py all
come from the declaration, and both routes read the same one."""

from __future__ import annotations

import pytest
from traitlets.config import Config

from autograder.course.errors import UsageError
from autograder.kernel.sandbox import Limits, SandboxLimits
from autograder.notebook.execute import SandboxedExecute
from autograder.run.grade import command_line
from autograder.run.options import CONFIGURABLES, GradingOptions, TimePolicy, help_all, overrides


def _parse(*argv: str, config: Config | None = None) -> GradingOptions:
    args, rest = command_line().parse_known_args(["subs", "--out", "out", *argv])
    assert rest == []
    return GradingOptions.from_flags(args, config)


def test_flags_offer_each_setting_with_help():
    """Each setting that declares a flag is an option of `autograder grade`, with its help."""
    text = " ".join(command_line().format_help().split())
    flagged = [name for name in GradingOptions.SETTINGS if GradingOptions.trait(name).metadata.get("flag")]
    assert len(flagged) >= 11
    missing = [
        name
        for name in flagged
        if GradingOptions.trait(name).metadata["flag"] not in text
        or " ".join(GradingOptions.help(name).split()[:6]) not in text
    ]
    assert missing == []


def test_flags_default_to_declared_values():
    """With no flag given, the options are the declarations' defaults."""
    options = _parse()
    assert options == GradingOptions()
    assert (options.jobs, options.time_factor, options.limits.memory) == (1, 10.0, 4 << 30)


def test_flags_given_set_their_settings():
    """Each flag sets its setting: numbers, paths, and the bools that a flag turns off or on."""
    options = _parse(
        *("--jobs", "3", "--no-fork", "--no-compile-cache", "--fresh-gradebook", "--judge-seed", "7"),
        *("--cell-timeout", "40", "--reference-cache", "cache", "--unsafe-no-sandbox", "--time-floor", "60"),
    )
    assert (options.jobs, options.fork_kernels, options.compile_cache, options.fresh_gradebook) == (
        3,
        False,
        False,
        True,
    )
    assert (options.judge_seed, options.cell_timeout, options.reference_cache, options.unsafe) == (7, 40, "cache", True)
    assert options.time_floor == 60.0


def test_flags_refuse_a_wrong_number():
    """A flag's type comes from its declaration: a word where a number goes is a usage error."""
    with pytest.raises(UsageError, match="jobs must be an int"):
        _parse("--jobs", "many")


def test_course_config_then_command_line():
    """A course's configuration sets a run's settings; the command line comes first."""
    config = Config()
    config.TimePolicy.time_factor = 4
    config.Grading.jobs = 2
    config.SandboxedExecute.judge_seed = 11
    assert (_parse(config=config).time_factor, _parse(config=config).jobs, _parse(config=config).judge_seed) == (
        4.0,
        2,
        11,
    )
    assert _parse("--jobs", "5", config=config).jobs == 5


def test_settings_on_the_command_line_as_configurables_take_them():
    """--Class.name=value names any setting; one that is none is a usage error, naming it."""
    config = overrides(["--TimePolicy.watchdog_grace=5", "--SandboxLimits.memory=2G"])
    assert config.TimePolicy.watchdog_grace == 5.0 and Limits.from_config(config).memory == 2 << 30
    with pytest.raises(UsageError, match="TimePolicy has no setting 'grace'"):
        overrides(["--TimePolicy.grace=5"])
    with pytest.raises(UsageError, match="unrecognized argument"):
        overrides(["--Nobody.x=1"])


def test_help_all_prints_every_setting_from_its_declaration():
    """--help-all names every setting of every Configurable a run reads, with its help."""
    text = help_all()
    for owner in CONFIGURABLES:
        for name, trait in owner.class_traits(config=True).items():
            assert f"--{owner.__name__}.{name}" in text, name
            assert " ".join(str(trait.help).split()[:4]) in " ".join(text.split()), name


def test_both_routes_read_one_declaration():
    """unsafe and judge_seed are SandboxedExecute's, which `nbgrader autograde` reads; the limits are
    SandboxLimits', which both read: a course's config sets each once for both routes."""
    assert GradingOptions.trait("unsafe") is SandboxedExecute.class_traits()["unsafe"]
    assert GradingOptions.trait("judge_seed") is SandboxedExecute.class_traits()["judge_seed"]
    assert set(Limits.names()) == set(SandboxLimits.class_trait_names(config=True))
    assert "limits" not in SandboxedExecute.class_traits() and "time_factor" not in Limits.names()
    assert set(TimePolicy.class_trait_names(config=True)) <= set(GradingOptions.SETTINGS)


def test_options_are_frozen_values():
    """A run's options are frozen, hashable values: what a task carries to its worker."""
    import pickle

    options = GradingOptions(jobs=2, limits=Limits(memory="1G"))
    assert pickle.loads(pickle.dumps(options)) == options and hash(options) == hash(options.replace())
    with pytest.raises(AttributeError):
        options.jobs = 3  # type: ignore[misc]
    assert options.replace(jobs=3).jobs == 3 and options.jobs == 2
    with pytest.raises(ValueError, match="no setting"):
        GradingOptions(job=2)
