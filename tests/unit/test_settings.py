"""Each setting of the grader is declared once, with its default: a trait of one Configurable.

A second declaration (a field, a trait, a keyword parameter with a default of its own) or its
default restated beside its name (in the code, the READMEs and docs, the Makefile) fails here;
the docs' tables of settings are made from the declarations (`python -m autograder.run.options`)
and checked to agree with them. `python -m tests.unit.test_settings [ROOT]` prints, for each setting,
the places that declare it or state its default (a checkout of an earlier version may be given).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from traitlets.config import Configurable

from autograder.course.paths import ROOT
from autograder.course.settings import Assignments
from autograder.kernel.sandbox import SandboxLimits
from autograder.notebook.execute import SandboxedExecute
from autograder.notebook.pages import ForPages
from autograder.run.options import CONFIGURABLES, TimePolicy, _shown, settings_table

#: Where a default could be restated for a reader.
DOCS = (
    "README.md",
    "autograder/README.md",
    "docs/instructors.md",
    "docs/grader.md",
    "docs/maintainers.md",
    "CONTRIBUTING.md",
    "Makefile",
)


def settings() -> dict[str, tuple[type[Configurable], object]]:
    """Every setting the grader declares (the traits its own Configurables add), with its default."""
    found = {}
    for owner in (*CONFIGURABLES, ForPages):
        for name, trait in owner.class_own_traits(config=True).items():
            found[name] = (owner, trait.default())
    return found


def _said(default) -> list[str]:
    """How a default may be written: as Python writes it, and as a reader does (4 GiB, 600 s)."""
    if default is None or isinstance(default, bool | dict | list) or default in (0, 1, ""):
        return []  # too common to tell apart from anything else
    forms = {repr(default), _shown(default)}
    if isinstance(default, float) and default == int(default):
        forms.add(str(int(default)))
    if isinstance(default, int) and default >= 1 << 20:
        for shift in (10, 20, 30):
            if default % (1 << shift) == 0:
                forms.add(f"{default >> shift} << {shift}")
    return sorted(forms)


def _stated(value: ast.AST | None) -> bool:
    """Whether a default is given there: anything but nothing or None (None: "as declared", or a
    record's "not known")."""
    return value is not None and not (isinstance(value, ast.Constant) and value.value is None)


def declarations(text: str, name: str) -> list[int]:
    """The lines of Python source that declare `name` with a default of its own: a class attribute
    or field given a value (a trait, a dataclass field), or a parameter with a default (None
    excepted: "as declared")."""
    lines = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                targets = item.targets if isinstance(item, ast.Assign) else [getattr(item, "target", None)]
                if _stated(getattr(item, "value", None)) and any(
                    isinstance(t, ast.Name) and t.id == name for t in targets
                ):
                    lines.append(item.lineno)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args
            positional = arguments.posonlyargs + arguments.args
            pairs = list(zip(positional[len(positional) - len(arguments.defaults) :], arguments.defaults))
            pairs += [(a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d is not None]
            lines += [argument.lineno for argument, default in pairs if argument.arg == name and _stated(default)]
    return lines


def restated(text: str, name: str, default) -> list[int]:
    """The lines that name the setting and state its default beside it."""
    forms = _said(default)
    word = re.compile(rf"(?<![\w.]){re.escape(name)}(?!\w)")
    return [
        number
        for number, line in enumerate(text.splitlines(), 1)
        if word.search(line) and any(re.search(rf"(?<![\w.]){re.escape(form)}(?![\w.])", line) for form in forms)
    ]


def places(root: Path) -> dict[str, list[str]]:
    """For each setting, every place in the tree at root that declares it or states its default
    (the README's tables made from the declarations left out: they are checked against them)."""
    tables = [settings_table(SandboxLimits), settings_table(TimePolicy)]
    found: dict[str, list[str]] = {}
    python = sorted((root / "autograder").rglob("*.py")) + [p for p in [root / "nbgrader_config.py"] if p.exists()]
    for name, (_, default) in settings().items():
        found[name] = []
        for path in python:
            text = path.read_text()
            where = sorted(set(declarations(text, name)) | set(restated(text, name, default)))
            found[name] += [f"{path.relative_to(root)}:{n}" for n in where]
        for doc in DOCS:
            if (root / doc).exists():
                text = (root / doc).read_text()
                for table in tables:
                    text = text.replace(table, "")
                found[name] += [f"{doc}:{n}" for n in restated(text, name, default)]
    return found


def test_each_setting_is_declared_once():
    """Each setting is declared in one place of the tree, and its default stated nowhere else."""
    found = places(ROOT)
    assert len(found) >= 25
    assert {name: where for name, where in found.items() if len(where) != 1} == {}


def test_a_second_declaration_is_found():
    """The scan finds each way a setting could be declared, or its default stated, again."""
    assert declarations("class Limits:\n    memory: int = 4 << 30\n", "memory") == [2]
    assert declarations("class X(Configurable):\n    unsafe = Bool(False)\n", "unsafe") == [2]
    assert declarations("def configure(c, *, unsafe: bool = False):\n    pass\n", "unsafe") == [1]
    assert declarations("def configure(c, *, unsafe: bool | None = None):\n    pass\n", "unsafe") == []
    assert declarations("class Outcome:\n    judge_seed: int | None = None\n", "judge_seed") == []
    assert restated("| `memory` | 4 GiB per process |", "memory", 4 << 30) == [1]
    assert restated("past `watchdog_grace` (30 s)", "watchdog_grace", 30.0) == [1]
    assert restated("memory_total is 6 GiB", "memory", 4 << 30) == []


def test_docs_tables_are_the_declarations():
    """The docs list the limits and the time policy as their declarations say (the tables are
    made by `python -m autograder.run.options`)."""
    text = (ROOT / "docs" / "instructors.md").read_text()
    for owner in (SandboxLimits, TimePolicy):
        assert settings_table(owner) in text, f"make the table of {owner.__name__} in docs/instructors.md again"


def test_assignments_settings_are_declared():
    """The per-assignment settings are one Dict keyed by assignment (and a default for all)."""
    assert set(Assignments.class_own_traits(config=True)) == {"checks_module", "settings"}
    assert {"unsafe", "judge_seed"} <= set(SandboxedExecute.class_own_traits(config=True))


if __name__ == "__main__":  # the places of each setting in a tree (this checkout, or one given)
    tree = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT
    for setting, where in sorted(places(tree).items()):
        print(f"{len(where):2d}  {setting}: {', '.join(where) or '-'}")
