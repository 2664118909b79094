"""What the grader knows of each assignment of a course, declared once as a traitlets
Configurable: a course's nbgrader_config.py sets it (`c.Assignments.settings = {...}`, or
`autograder configure`), and both routes read it through `checks_module_for` and `judge_source`.
A checks module may name its adapter (`declared_adapter`: autograder/kernel/adapter.py says what
one offers).

An assignment names its checks module (the module of its source that speaks the judge's
protocol, autograder/judge/protocol.py); its test cells are then checked by the judge, in the
grader. An assignment that names none is graded as nbgrader grades it, each test cell in the
(sandboxed) kernel. One that names a module its source lacks is an error: it is never silently
judged in the kernel instead.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any, ClassVar

from traitlets import Dict, TraitError, Unicode
from traitlets.config import Config, Configurable
from traitlets.config.loader import LazyConfigValue

from autograder.course.errors import UsageError


class Declared:
    """Frozen values of settings that Configurables declare (`SETTINGS`: each setting's name and
    where it is declared, its Configurable and its trait's name there), and of a few `EXTRA`
    values made from others (their defaults given there). Made from keyword values (each checked
    by its trait, a size like "8G" read as its trait reads it) or from a traitlets Config
    (`from_config`); read as attributes."""

    SETTINGS: ClassVar[dict[str, tuple[type[Configurable], str]]] = {}
    EXTRA: ClassVar[dict[str, Any]] = {}

    __slots__ = ("_values",)

    def __init__(self, **values):
        unknown = sorted(set(values) - set(self.SETTINGS) - set(self.EXTRA))
        if unknown:
            raise ValueError(f"no setting {unknown} of {type(self).__name__}; known: {sorted(self.names())}")
        found = dict(self.EXTRA)
        for name in self.SETTINGS:
            found[name] = self._checked(name, values.pop(name)) if name in values else self.trait(name).default()
        found.update(values)  # the extra ones given
        object.__setattr__(self, "_values", found)

    @classmethod
    def _checked(cls, name: str, value):
        """value as its trait takes it (text read as the trait reads the command line's); ValueError if not."""
        trait = cls.trait(name)
        if isinstance(value, os.PathLike) and isinstance(trait, Unicode):  # a folder given as a path
            value = os.fspath(value)
        if value is None and trait.allow_none:
            return None
        try:
            if isinstance(value, str) and not isinstance(trait, Unicode):
                value = trait.from_string(value)
            return trait.validate(None, value)
        except (TraitError, ValueError):
            raise ValueError(f"{name} must be {trait.info()}, not {value!r}") from None

    @classmethod
    def names(cls) -> list[str]:
        return [*cls.SETTINGS, *cls.EXTRA]

    @classmethod
    def from_config(cls, config: Config, **values):
        """The values a traitlets Config sets (each from its Configurable's section), then `values`."""
        if not isinstance(config, Config):
            raise TypeError(f"a traitlets Config, not a {type(config).__name__}")
        found = {}
        for name, (owner, trait) in cls.SETTINGS.items():
            if configured(config, owner, trait):
                found[name] = config[owner.__name__][trait]
        return cls(**{**found, **values})

    @classmethod
    def help(cls, name: str) -> str:
        owner, trait = cls.SETTINGS[name]
        return str(owner.class_traits()[trait].help)

    @classmethod
    def trait(cls, name: str):
        owner, trait = cls.SETTINGS[name]
        return owner.class_traits()[trait]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # (unpickling asks before _values exists)
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no setting {name!r}") from None

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is frozen: replace() makes another")

    def __getstate__(self):
        return self._values

    def __setstate__(self, values):
        object.__setattr__(self, "_values", values)

    def replace(self, **changes):
        return type(self)(**{**self._values, **changes})

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def _key(self) -> tuple:
        return tuple(sorted(self._values.items(), key=lambda item: item[0]))

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((type(self), self._key()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"


def configured(config: Config, owner: type[Configurable], name: str) -> bool:
    """Whether a traitlets Config sets this setting (a section answers any name, unset ones too)."""
    section = config.get(owner.__name__, {})
    return name in section and not isinstance(section[name], LazyConfigValue)


def setting(config: Config, owner: type[Configurable], name: str):
    """A setting's value as a Config sets it, else its declared default: without making the
    Configurable (some take more than their settings to make)."""
    return config[owner.__name__][name] if configured(config, owner, name) else owner.class_traits()[name].default()


class Assignments(Configurable):
    """Each assignment's settings, by its id."""

    checks_module = Unicode(
        "",
        help="The checks module of every assignment that names none of its own in `settings` (empty: none).",
    ).tag(config=True)
    settings = Dict(
        value_trait=Dict(),
        help='Per assignment, by its id: {"checks_module": NAME}, the module of its source whose checks the '
        "grader's judge runs (autograder/judge/protocol.py).",
    ).tag(config=True)


#: The settings an assignment may have in `Assignments.settings`.
ASSIGNMENT_SETTINGS = ("checks_module",)


def checks_module_for(config, assignment: str) -> str:
    """The checks module the configuration names for the assignment ("" for none); UsageError for
    a setting that is not one."""
    settings = Assignments(config=config)
    own = settings.settings.get(assignment, {})
    unknown = sorted(set(own) - set(ASSIGNMENT_SETTINGS))
    if unknown:
        raise UsageError(f"Assignments.settings[{assignment!r}] has no setting {unknown}: {list(ASSIGNMENT_SETTINGS)}")
    name = str(own.get("checks_module", settings.checks_module) or "")
    if name and not name.isidentifier():
        raise UsageError(f"the checks module of {assignment!r} must be a module's name, not {name!r}")
    return name


def judge_source(config, assignment: str, source: Path) -> str:
    """The source folder the judge loads the assignment's checks from ("" when it names no checks
    module: its test cells run in the kernel); UsageError when the module is not in the folder."""
    checks = checks_module_for(config, assignment)
    if not checks:
        return ""
    if not (Path(source) / f"{checks}.py").is_file():
        raise UsageError(
            f"the assignment {assignment!r} names the checks module {checks!r}, but its source folder {source} "
            f"holds no {checks}.py: put it there, or name no checks module for it"
        )
    return str(source)


def declared_adapter(checks_source: str) -> str:
    """The module a checks module's source names as its adapter (`ADAPTER = "..."` at its top
    level, a string), or "" where it names none. Read from the text: the checks module itself
    may need the adapter's packages to import."""
    try:
        tree = ast.parse(checks_source)
    except (SyntaxError, ValueError):
        return ""
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "ADAPTER" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    return ""
