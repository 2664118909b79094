"""One grading run's options: every choice, timeout and limit of a run, each once, each with its help.

`GradingOptions` is what `grade()` takes; each student's task carries it to the worker, and the
reference run reads it. `autograder grade`'s flags are made from here (`add_flags`, `from_flags`):
a field with a flag is declared once, its default, help and flag together. What one kernel
may use (memory, processes, output, time budgets) is `sandbox.Limits`, held here as `limits`.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from autograder.course.assignment import BundleOrigin, CourseOrigin
from autograder.course.errors import UsageError
from autograder.kernel.sandbox import LIMITS_HELP, UNSAFE_FLAG, UNSAFE_HELP, Limits
from autograder.run.tls import SchedulerSecurity


def option(default, help: str, flag: str | None = None, type=None):
    """A field of GradingOptions: its default, what it means, and its flag of `autograder grade`
    (None: made from other flags). A flag of a bool that is on by default turns it off (--no-...)."""
    return dataclasses.field(default=default, metadata={"help": help, "flag": flag, "type": type})


@dataclass(frozen=True)
class GradingOptions:
    """How one grading run grades (see each field's help: `GradingOptions.help(name)`)."""

    jobs: int = option(1, "students graded at once on a local Dask cluster (1: here, one after another)", "--jobs", int)
    scheduler: str | None = option(
        None,
        "the address of a running Dask scheduler that speaks TLS, e.g. tls://10.0.0.5:8786 (None: no cluster)",
        "--scheduler",
        str,
    )
    scheduler_security: SchedulerSecurity | None = option(
        None, "with a scheduler: this grader's TLS files, as `autograder tls` writes them"
    )
    cell_timeout: int | None = option(
        None,
        "seconds a learner's cell may run (None: Execute.timeout in the course's nbgrader_config.py)",
        "--cell-timeout",
        int,
    )
    reference_cell_timeout: int = option(
        300, "seconds an instructor's cell may run in the reference run (it compiles every program for the cache)"
    )
    budget_without_reference: float = option(
        600.0, "a notebook's time budget in seconds where the reference run set none"
    )
    watchdog_grace: float = option(
        30.0, "seconds past a notebook's time budget before its whole sandbox is ended (the kernel was told first)"
    )
    limits: Limits = option(Limits(), LIMITS_HELP.format(names=", ".join(Limits().as_dict())))
    compile_cache: bool = option(
        True, "kernels share the reference run's compiled programs (faster; same grades)", "--no-compile-cache"
    )
    fork_kernels: bool = option(
        True, "each notebook's kernel is forked from one warm host per student (faster; same grades)", "--no-fork"
    )
    unsafe: bool = option(False, UNSAFE_HELP, UNSAFE_FLAG)
    fresh_gradebook: bool = option(
        False,
        "start a new class gradebook (the old one is copied to OUT/gradebook-backups/): manual grades are then lost",
        "--fresh-gradebook",
    )
    judge_seed: int = option(
        0,
        "the seed of the fresh inputs the judge draws (0: a new one for the run, which only the grader holds); "
        "give the one a run printed to grade again with the same inputs",
        "--judge-seed",
        int,
    )
    reference_cache: Path | None = option(
        None,
        "a folder where a clean reference run is kept and reused by the next run with the same source, grader, "
        "host and options (None: reference-cache/ beside OUT)",
        "--reference-cache",
        Path,
    )
    keep_reference: bool = option(
        True,
        "a clean reference run is kept (in --reference-cache, or reference-cache/ beside OUT) and reused by the "
        "next run with the same source, grader, host and options, instead of running the instructor's notebooks",
        "--no-reference-cache",
    )
    origin: CourseOrigin | BundleOrigin | None = option(
        None, "an instructor's course folder and assignment to grade (None: this bundle's own assignment)"
    )

    @classmethod
    def help(cls, name: str) -> str:
        return next(f.metadata["help"] for f in dataclasses.fields(cls) if f.name == name)

    @classmethod
    def add_flags(cls, parser) -> None:
        """Add a flag to an argparse parser for every field that has one, from its declaration."""
        for f in dataclasses.fields(cls):
            flag, help = f.metadata.get("flag"), f.metadata["help"]
            if flag is None:
                continue
            if isinstance(f.default, bool):  # on by default: the flag turns it off, and says so first
                action = "store_false" if f.default else "store_true"
                parser.add_argument(
                    flag,
                    dest=f.name,
                    action=action,
                    help=(f"on by default (this flag turns it off): {help}" if f.default else help),
                )
            else:
                metavar = "DIR" if f.metadata["type"] is Path else None
                parser.add_argument(
                    flag, dest=f.name, type=f.metadata["type"], default=None, metavar=metavar, help=help
                )

    @classmethod
    def from_flags(cls, args, **others) -> GradingOptions:
        """The options of parsed flags (add_flags), a flag not given keeping its default; `others`
        are the fields made from other flags (scheduler_security, limits, origin)."""
        given = {}
        for f in dataclasses.fields(cls):
            if f.metadata.get("flag") is not None and getattr(args, f.name, None) is not None:
                given[f.name] = getattr(args, f.name)
        return cls(**given, **others)

    def replace(self, **changes) -> GradingOptions:
        return dataclasses.replace(self, **changes)

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


def limits_from(values: dict | None) -> Limits:
    """Limits with these overrides (names as `Limits`, values like "8G"); UsageError on an unknown name."""
    try:
        return Limits.from_config(values)
    except ValueError as error:
        raise UsageError(str(error)) from None
