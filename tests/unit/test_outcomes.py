"""The typed outcomes (autograder/course/outcomes.py) and the one base of the grader's errors
(autograder/course/errors.py): records that survive their JSON, decisions made by kind, and no
exit status written as a bare number."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

from autograder.course.errors import ExitCode, GraderError, UsageError
from autograder.course.outcomes import (
    CellVerdict,
    ItemVerdict,
    NotebookOutcome,
    Trouble,
    TroubleKind,
    past_budget,
)
from autograder.course.paths import AUTOGRADER
from tests.unit.test_layout import import_graph, subpackage


def _outcome() -> NotebookOutcome:
    item = ItemVerdict("the slope", 2.0, False, "found 3, expected 1.5", "twice the slope")
    return NotebookOutcome(
        12.5,
        None,
        {"test-slope": CellVerdict(1.0, 3.0, (ItemVerdict("EPSILON", 1.0, True), item), None)},
        (Trouble(TroubleKind.CELL_TIMEOUT, "cell 4 ran longer than the 10 s limit", "04-exercise.ipynb", 3),),
    )


def test_records_survive_their_json():
    """A notebook's outcome and its troubles read back from their JSON as they were."""
    import json

    outcome = _outcome()
    assert NotebookOutcome.from_json(json.loads(json.dumps(outcome.to_json()))) == outcome
    for trouble in (*outcome.troubles, Trouble(TroubleKind.NO_FEEDBACK, "feedback could not be generated")):
        assert Trouble.from_json(json.loads(json.dumps(trouble.to_json()))) == trouble


def test_a_kind_that_is_not_one_is_refused():
    with pytest.raises(ValueError):
        Trouble.from_json({"kind": "time limit", "message": "x"})


def test_past_budget_reads_the_kind_not_the_words():
    """Words that name a budget do not make a notebook past its budget; the kind does."""
    worded = Trouble(TroubleKind.CELL_TIMEOUT, "ran past its time budget, in cell 3")
    silent = Trouble(TroubleKind.TIME_BUDGET, "stopped")
    assert not past_budget([worded]) and past_budget([worded, silent])
    assert NotebookOutcome(troubles=(silent,)).past_budget and not _outcome().past_budget


def test_a_trouble_becomes_a_line_at_the_edge():
    assert Trouble(TroubleKind.LIMIT, "stopped at the process limit", "01.ipynb", 2).line() == (
        "01.ipynb: stopped at the process limit"
    )
    assert Trouble(TroubleKind.GRADER_FAILED, "its worker failed twice").line() == "its worker failed twice"


def _grader_modules() -> list[str]:
    """Every module of the grader that runs in the grader's own process (what runs in a sandbox is
    sent alone, as text: its WireError cannot derive from anything of the grader's)."""
    return sorted(m for m in import_graph() if m.startswith("autograder.") and subpackage(m) not in ("", "sandboxed"))


def test_every_error_of_the_grader_carries_an_exit_code():
    """Each exception class the grader defines derives from GraderError, so a command that stops on
    one ends with its named exit code."""
    classes = []
    for name in _grader_modules():
        module = importlib.import_module(name)
        classes += [
            c
            for _, c in inspect.getmembers(module, inspect.isclass)
            if c.__module__ == name and issubclass(c, BaseException)
        ]
    assert len(classes) >= 10
    assert [c.__qualname__ for c in classes if not issubclass(c, GraderError)] == []
    assert {c.exit_code for c in classes} <= set(ExitCode)
    assert UsageError.exit_code is ExitCode.USAGE


def test_no_command_returns_a_bare_exit_number():
    """Commands end with a named ExitCode: no `return 2` or `SystemExit(3)` in the grader. (The
    programs sent as text into a sandbox, in a `sandboxed/` folder, import nothing of the grader and
    end processes no instructor runs: they are not commands.)"""
    bare = []
    for path in sorted(AUTOGRADER.rglob("*.py")):
        if "sandboxed" in path.relative_to(AUTOGRADER).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "main":
                returns = [n for n in ast.walk(node) if isinstance(n, ast.Return)]
                values = [
                    v
                    for n in returns
                    for v in ([n.value.body, n.value.orelse] if isinstance(n.value, ast.IfExp) else [n.value])
                ]
                bare += [f"{path.name}:{v.lineno}" for v in values if isinstance(v, ast.Constant)]
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "SystemExit":
                bare += [f"{path.name}:{node.lineno}" for arg in node.args if isinstance(arg, ast.Constant)]
    assert bare == []
