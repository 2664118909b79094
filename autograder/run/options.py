"""One grading run's options: every choice, timeout and limit of a run, each declared once.

Each setting is a trait of a traitlets Configurable, declared once with its default and help:
`Grading` (how the run grades), `TimePolicy` (the time budgets), `SandboxLimits`
(autograder/kernel/sandbox.py: what a kernel may use) and the two of `SandboxedExecute` that both
routes read (`unsafe`, `judge_seed`: autograder/notebook/execute.py). A course's
nbgrader_config.py sets them (`c.TimePolicy.time_floor = 60`), `autograder grade`'s flags and its
`--Class.name=value` arguments too (`add_flags`, `overrides`), and `--help-all` prints them all
(`help_all`), from the one declaration. `GradingOptions` is a run's values, frozen: what
`grade()` takes and each student's task carries to its worker.
"""

from __future__ import annotations

import re
from pathlib import Path

from traitlets import Bool, Float, Integer, Unicode
from traitlets.config import Config, Configurable

from autograder.course.errors import UsageError
from autograder.course.settings import Assignments, Declared
from autograder.kernel.sandbox import Limits, SandboxLimits
from autograder.notebook.execute import SandboxedExecute


class Grading(Configurable):
    """How one `autograder grade` run grades."""

    jobs = Integer(1, help="students graded at once on a local Dask cluster (1: here, one after another)").tag(
        config=True, flag="--jobs"
    )
    scheduler = Unicode(
        None,
        allow_none=True,
        help="the address of a running Dask scheduler that speaks TLS, e.g. tls://10.0.0.5:8786 (None: no cluster)",
    ).tag(config=True, flag="--scheduler")
    cell_timeout = Integer(
        None,
        allow_none=True,
        help="seconds a learner's cell may run (None: Execute.timeout of the course's nbgrader_config.py)",
    ).tag(config=True, flag="--cell-timeout")
    compile_cache = Bool(True, help="kernels share the reference run's compiled programs (faster; same grades)").tag(
        config=True, flag="--no-compile-cache"
    )
    fork_kernels = Bool(
        True, help="each notebook's kernel is forked from one warm host per student (faster; same grades)"
    ).tag(config=True, flag="--no-fork")
    fresh_gradebook = Bool(
        False,
        help="start a new class gradebook (the old one is copied to OUT/gradebook-backups/): manual grades are then lost",
    ).tag(config=True, flag="--fresh-gradebook")
    reference_cache = Unicode(
        None,
        allow_none=True,
        help="a folder where a clean reference run is kept and reused by the next run with the same source, grader, "
        "host and options (None: reference-cache/ beside OUT)",
    ).tag(config=True, flag="--reference-cache")
    keep_reference = Bool(
        True,
        help="a clean reference run is kept (in --reference-cache, or reference-cache/ beside OUT) and reused by the "
        "next run with the same source, grader, host and options, instead of running the instructor's notebooks",
    ).tag(config=True, flag="--no-reference-cache")


class TimePolicy(Configurable):
    """How much time a run gives: a notebook's budget comes from its reference run's seconds, a
    student's is the sum of their notebooks'; past a notebook's budget its kernel is stopped (the
    checks that finished keep their points)."""

    time_factor = Float(10.0, help="a notebook's time budget: this many times its reference run's seconds ...").tag(
        config=True, flag="--time-factor"
    )
    time_floor = Float(120.0, help="... plus this many seconds").tag(config=True, flag="--time-floor")
    budget_without_reference = Float(
        600.0, help="a notebook's time budget in seconds where the reference run set none"
    ).tag(config=True)
    watchdog_grace = Float(
        30.0, help="seconds past a notebook's time budget before its whole sandbox is ended (the kernel was told first)"
    ).tag(config=True)
    reference_cell_timeout = Integer(
        300, help="seconds an instructor's cell may run in the reference run (it compiles every program for the cache)"
    ).tag(config=True)


#: Every Configurable whose settings a grading run reads, in the order `--help-all` prints them.
CONFIGURABLES: tuple[type[Configurable], ...] = (Grading, TimePolicy, SandboxLimits, SandboxedExecute, Assignments)


class GradingOptions(Declared):
    """How one grading run grades: the values of the run's settings (see each one's help:
    `GradingOptions.help(name)`), and three made from other flags: the sandbox's `limits`, the
    scheduler's TLS files (`scheduler_security`) and where the assignment comes from (`origin`:
    an instructor's course and assignment; None: the bundle the grader sits in)."""

    SETTINGS = {
        **{name: (Grading, name) for name in Grading.class_trait_names(config=True)},
        **{name: (TimePolicy, name) for name in TimePolicy.class_trait_names(config=True)},
        "unsafe": (SandboxedExecute, "unsafe"),
        "judge_seed": (SandboxedExecute, "judge_seed"),
    }
    EXTRA = {"limits": Limits(), "scheduler_security": None, "origin": None}

    @classmethod
    def from_config(cls, config: Config, **values):
        """The values a course's configuration (and the command line's --Class.name=value) sets,
        then `values`; the sandbox's limits from the config's SandboxLimits unless given."""
        values.setdefault("limits", Limits.from_config(config))
        return super().from_config(config, **values)

    @classmethod
    def add_flags(cls, parser) -> None:
        """Add a flag to an argparse parser for every setting that declares one, with its help. A
        flag of a bool that is on by default turns it off (--no-...)."""
        for name in cls.SETTINGS:
            trait = cls.trait(name)
            flag = trait.metadata.get("flag")
            if flag is None:
                continue
            if isinstance(trait, Bool):  # on by default: the flag turns it off, and says so first
                action = "store_false" if trait.default() else "store_true"
                about = f"on by default (this flag turns it off): {trait.help}" if trait.default() else trait.help
                parser.add_argument(flag, dest=name, action=action, default=None, help=about)
            else:
                metavar = "DIR" if name == "reference_cache" else None
                parser.add_argument(flag, dest=name, default=None, metavar=metavar, help=trait.help)

    @classmethod
    def from_flags(cls, args, config: Config | None = None, **others) -> GradingOptions:
        """The options of a course's configuration (`config`), then of parsed flags (add_flags): a
        flag not given keeps what the configuration or the default says. `others` are the values
        made from other flags (scheduler_security, limits, origin)."""
        given = {name: getattr(args, name) for name in cls.SETTINGS if getattr(args, name, None) is not None}
        try:
            return cls.from_config(config or Config(), **given, **others)
        except ValueError as error:
            raise UsageError(str(error)) from None

    def validated(self) -> GradingOptions:
        """These options, or UsageError naming the first that cannot be used."""
        if self.jobs < 1:
            raise UsageError(f"--jobs must be at least 1, not {self.jobs}")
        for name in ("cell_timeout", "reference_cell_timeout"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"{name.replace('_', '-')} must be at least 1 second, not {value}")
        if self.budget_without_reference <= 0 or self.watchdog_grace <= 0:
            raise UsageError("budget_without_reference and watchdog_grace must be positive")
        if not isinstance(self.limits, Limits):
            raise UsageError(f"limits must be a sandbox.Limits, not {type(self.limits).__name__}")
        if self.scheduler is not None:
            if not re.match(r"^tls://\S+$", self.scheduler):
                raise UsageError(
                    f"--scheduler wants a TLS address like tls://host:8786, not {self.scheduler!r}: an "
                    "unencrypted scheduler runs code for anyone who reaches it"
                )
            if self.scheduler_security is None:
                raise UsageError(
                    "--scheduler needs the instructor's TLS files: --tls-ca-file, --tls-cert and --tls-key"
                )
            if self.reference_cache is not None:
                raise UsageError("--reference-cache is for runs on this host: a scheduler's workers are other hosts")
        return self

    @property
    def reference_folder(self) -> Path | None:
        """The folder of kept reference runs (`reference_cache`) as a path."""
        return Path(self.reference_cache) if self.reference_cache else None


def limits_from(values: dict | None) -> Limits:
    """Limits with these overrides (names as `SandboxLimits`', values like "8G"); UsageError on an
    unknown name or a value that is not one."""
    try:
        return Limits(**(values or {}))
    except ValueError as error:
        raise UsageError(str(error)) from None


#: A setting on the command line as a Configurable takes it: --Class.name=value.
_OVERRIDE = re.compile(r"^--([A-Za-z]\w*)\.([a-z_]\w*)=(.*)$", re.S)


def overrides(arguments: list[str]) -> Config:
    """The --Class.name=value arguments as a traitlets Config (values as their traits read text);
    UsageError for one that names no setting of the run's Configurables."""
    known = {cls.__name__: cls for cls in CONFIGURABLES}
    config = Config()
    for argument in arguments:
        match = _OVERRIDE.match(argument)
        if not match or match.group(1) not in known:
            raise UsageError(f"unrecognized argument {argument!r} (the settings: autograder grade --help-all)")
        owner, name, value = known[match.group(1)], match.group(2), match.group(3)
        trait = owner.class_traits(config=True).get(name)
        if trait is None:
            raise UsageError(f"{owner.__name__} has no setting {name!r} (autograder grade --help-all)")
        try:
            config[owner.__name__][name] = trait.from_string(value)
        except (ValueError, TypeError):
            raise UsageError(f"{argument}: {name} must be {trait.info()}") from None
    return config


def help_all() -> str:
    """Every setting a grading run reads, each Configurable's as traitlets writes it (its name, type,
    default and help): what `autograder grade --help-all` prints."""
    return "\n".join(cls.class_get_help().rstrip() + "\n" for cls in CONFIGURABLES)


def settings_table(owner: type[Configurable]) -> str:
    """A Markdown table of a Configurable's settings (name, default, help), from its declaration:
    the one the README shows (tests/unit/test_settings.py checks that they agree)."""
    rows = ["| setting | default | what it is, and what happens past it |", "|---|---|---|"]
    for name, trait in owner.class_traits(config=True).items():
        rows.append(f"| `{name}` | {_shown(trait.default())} | {trait.help} |")
    return "\n".join(rows)


def _shown(value) -> str:
    """A default as a reader writes it: sizes in MiB or GiB, numbers plainly."""
    if isinstance(value, int) and value >= 1 << 20 and value % (1 << 20) == 0:
        return f"{value >> 30} GiB" if value % (1 << 30) == 0 else f"{value >> 20} MiB"
    return f"{value:g}" if isinstance(value, float) else str(value)


if __name__ == "__main__":  # the README's tables of the limits and the time policy, from their declaration
    print(f"{settings_table(SandboxLimits)}\n\n{settings_table(TimePolicy)}")
