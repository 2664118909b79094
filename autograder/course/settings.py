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
from pathlib import Path

from traitlets import Dict, Unicode
from traitlets.config import Configurable

from autograder.course.errors import UsageError


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
