"""How a graded cell checks an answer, and how the grader decides it, without a kernel.

solutions/remat_checks.py defines each judgment's verdict and the report; autograder/verdicts.py
runs test cells in a learner's kernel without what they compare with, and decides from what
they observed. Here both are exercised directly on values, and every graded cell of the lesson
is held to the rule that makes the second possible.
"""

from __future__ import annotations

import ast
import importlib.util
import json

import nbformat
import pytest
from nbformat.notebooknode import NotebookNode

from autograder.paths import NOTEBOOKS, SOLUTIONS
from autograder.verdicts import (
    JUDGMENTS,
    OBSERVATION_MIME,
    REFERENCE_PREFIX,
    ReferenceError,
    decide,
    is_test_cell,
    observe_only,
    reference_of,
)


@pytest.fixture(scope="module")
def checks():
    spec = importlib.util.spec_from_file_location("remat_checks_under_test", SOLUTIONS / "remat_checks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _judgment(checks, kind, found, expected, **params):
    encode = checks.numbers if kind in ("close", "at_least", "below") else checks.plain
    expected = checks.numbers(expected) if kind == "close" else (checks.plain(expected))
    return {"kind": kind, "what": "x", "hint": None, "found": encode(found), "expected": expected, **params}


# ---------------------------------------------------------------------------------------
# Verdicts.
# ---------------------------------------------------------------------------------------
def test_close_passes_within_the_tolerance_and_says_what_it_found_outside(checks):
    assert checks.judge(_judgment(checks, "close", [1.0, 2.0], [1.0, 2.0 + 1e-7], rtol=1e-6)) is None
    message = checks.judge(_judgment(checks, "close", [1.0, 2.1], [1.0, 2.0], rtol=1e-6))
    assert "within rtol=1e-06" in message and "largest difference 0.1" in message
    assert "shape (3,)" in checks.judge(_judgment(checks, "close", [1.0, 2.0], [1.0, 2.0, 3.0], rtol=1e-6))
    assert "NaN" in checks.judge(_judgment(checks, "close", [float("nan")], [1.0], rtol=1e-6))
    assert "as numbers" in checks.judge(_judgment(checks, "close", "text", [1.0], rtol=1e-6))
    # A tenfold tolerance is not the tolerance asked for.
    assert checks.judge(_judgment(checks, "close", [1.0 + 5e-6], [1.0], rtol=1e-6)) is not None
    assert checks.judge(_judgment(checks, "close", [1e-9], [0.0], rtol=0.0, atol=1e-8)) is None


def test_equal_bounds_and_raises(checks):
    assert checks.judge(_judgment(checks, "equal", (9, 6), [9, 6])) is None
    assert "found [9, 9]" in checks.judge(_judgment(checks, "equal", [9, 9], [9, 6]))
    assert checks.judge(_judgment(checks, "equal", None, None)) is None
    assert checks.judge(_judgment(checks, "equal", {"a": 1}, None)) is not None
    assert checks.judge(_judgment(checks, "at_least", [0.01, 0.02], 0.009)) is None
    assert "of at least" in checks.judge(_judgment(checks, "at_least", [0.01, 0.001], 0.009))
    assert checks.judge(_judgment(checks, "below", [0.01], 0.1)) is None
    assert "below" in checks.judge(_judgment(checks, "below", [0.2], 0.1))
    raised = {"kind": "raises", "what": "f()", "expected": "ValueError"}
    assert checks.judge({**raised, "found": ["ValueError", "Exception"]}) is None
    assert "returned normally" in checks.judge({**raised, "found": None})
    assert "raised TypeError" in checks.judge({**raised, "found": ["TypeError", "Exception"]})


def test_the_report_says_which_points_were_checked_here(checks):
    items = [{"points": 1, "what": "a", "failure": None}, {"points": 1, "what": "b", "failure": "expected 1, found 2"}]
    lines, earned, checked = checks.report_lines(items, "'Your turn'")
    assert lines[0] == "[PASS] 1/1  a" and lines[1] == "[FAIL] 0/1  b" and "where to look: 'Your turn'" in lines[3]
    assert (earned, checked) == (1.0, 2.0)
    assert (
        checks.points_line(1, 1, 3) == "1 of 1 points checked here; the cell is worth 3: 2 more are checked when graded"
    )
    assert checks.points_line(2, 3, 3) == "2 of 3 points"


def test_a_learner_sees_the_failure_and_the_cell_raises(checks, monkeypatch, capsys):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv(checks.MODE_ENV, raising=False)
    cell = checks.Checks(3, where="'Your turn'")
    with cell.item(1, "right"):
        cell.close([1.0], [1.0], rtol=1e-6)
    with cell.item(1, "wrong"):
        cell.equal(2, 1, what="the count")
    with pytest.raises(checks.CheckFailed, match="Where to look: 'Your turn'"):
        cell.score()
    assert "1 of 2 points checked here; the cell is worth 3: 1 more are checked when graded" in capsys.readouterr().out


def test_stock_nbgrader_gets_the_points_as_the_cells_value(checks, monkeypatch, capsys):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.delenv(checks.MODE_ENV, raising=False)
    cell = checks.Checks(2, where="here")
    with cell.item(1, "right"):
        cell.equal(1, 1, what="x")
    with cell.item(1, "raises"):
        raise ZeroDivisionError("boom")
    assert cell.score() == 1.0
    assert "your code raised ZeroDivisionError: boom" in capsys.readouterr().out


def test_observing_never_judges_in_the_kernel(checks, monkeypatch):
    monkeypatch.setenv(checks.MODE_ENV, "observe")
    published = []
    monkeypatch.setattr(checks.Checks, "_publish", lambda self, record: published.append(record))
    cell = checks.Checks(1, where="here")
    with cell.item(1, "a wrong value is handed over, not judged"):
        cell.close([5.0], None, rtol=None, atol=None, what=None)
        cell.equal("anything", None, what=None)
    assert cell.score() is None
    item = published[-1]
    assert item["failure"] is None and [j["found"] for j in item["judgments"]] == [
        {"shape": [1], "values": [5.0]},
        "anything",
    ]
    json.dumps(published)  # plain data all the way (it travels as JSON)


# ---------------------------------------------------------------------------------------
# The grader's side.
# ---------------------------------------------------------------------------------------
def _observed(*records) -> NotebookNode:
    outputs = [NotebookNode(output_type="display_data", data={OBSERVATION_MIME: r}, metadata={}) for r in records]
    return NotebookNode(cell_type="code", source="", metadata={}, outputs=outputs)


REFERENCE = {
    "points": 2,
    "where": "'Your turn'",
    "items": [
        {
            "points": 1,
            "what": "lesson",
            "judgments": [
                {
                    "kind": "close",
                    "what": "gradient",
                    "hint": None,
                    "rtol": 1e-6,
                    "atol": 0.0,
                    "found": {"shape": [1], "values": [2.0]},
                    "expected": {"shape": [1], "values": [2.0]},
                }
            ],
        },
        {
            "points": 1,
            "what": "count",
            "judgments": [{"kind": "equal", "what": "entries", "hint": None, "found": 9, "expected": 9}],
        },
    ],
}


def _item(index, judgments, error=None):
    return {"record": "item", "index": index, "judgments": judgments, "error": error}


def test_the_grader_judges_the_found_values_against_the_reference(checks):
    right = _observed(_item(0, [{"found": {"shape": [1], "values": [2.0]}}]), _item(1, [{"found": 9}]))
    assert decide(REFERENCE, right, checks)[0] == 2.0
    wrong = _observed(_item(0, [{"found": {"shape": [1], "values": [-2.0]}}]), _item(1, [{"found": 9}]))
    earned, report = decide(REFERENCE, wrong, checks)
    assert earned == 1.0 and "[FAIL] 0/1  lesson" in report and "1 of 2 points" in report


def test_what_the_kernel_claims_beside_its_values_counts_for_nothing(checks):
    # A kernel that claims a huge tolerance, its own expected value and "no failure":
    forged = _observed(
        _item(
            0,
            [
                {
                    "found": {"shape": [1], "values": [-2.0]},
                    "rtol": 1e9,
                    "expected": {"shape": [1], "values": [-2.0]},
                    "kind": "equal",
                    "failure": None,
                }
            ],
        ),
        _item(1, [{"found": 9}]),
    )
    assert decide(REFERENCE, forged, checks)[0] == 1.0
    # Missing, repeated, cut short or padded observations earn nothing.
    assert decide(REFERENCE, _observed(_item(1, [{"found": 9}])), checks)[0] == 1.0
    twice = _observed(
        _item(0, [{"found": {"shape": [1], "values": [2.0]}}]), _item(0, [{"found": {"shape": [1], "values": [2.0]}}])
    )
    assert decide(REFERENCE, twice, checks)[0] == 0.0
    assert decide(REFERENCE, _observed(_item(0, []), _item(1, [])), checks)[0] == 0.0
    padded = _observed(
        _item(0, [{"found": {"shape": [1], "values": [2.0]}}] * 2), _item(1, [{"found": 9}, {"found": 9}])
    )
    assert decide(REFERENCE, padded, checks)[0] == 0.0
    assert decide(REFERENCE, _observed("junk", {"record": "item", "index": "0"}), checks)[0] == 0.0


def test_a_check_that_did_not_run_says_why(checks):
    stopped = _observed(_item(0, [{"found": {"shape": [1], "values": [2.0]}}]))
    stopped.outputs.append(
        NotebookNode(output_type="error", ename="KernelDied", evalue="the kernel died in cell 7", traceback=[])
    )
    earned, report = decide(REFERENCE, stopped, checks)
    assert earned == 1.0 and "did not run: the cell stopped before it (KernelDied: the kernel died in cell 7)" in report


def test_a_solution_that_fails_its_own_check_stops_grading(checks):
    cell = _observed(
        {"record": "checks", "points": 1, "where": "w"},
        {
            "record": "item",
            "index": 0,
            "points": 1,
            "what": "a",
            "error": None,
            "failure": None,
            "judgments": [{"kind": "equal", "what": "x", "hint": None, "found": 1, "expected": 2}],
        },
    )
    cell.cell_type, cell.metadata = (
        "code",
        {"nbgrader": {"grade": True, "solution": False, "grade_id": "t", "points": 1}},
    )
    with pytest.raises(ReferenceError, match="expected x: 2, found 1"):
        reference_of(NotebookNode(cells=[cell]), checks)


# ---------------------------------------------------------------------------------------
# Every graded cell of the lesson: what it compares with is never in a learner's kernel.
# ---------------------------------------------------------------------------------------
def _test_cells():
    for name in NOTEBOOKS:
        for cell in nbformat.read(SOLUTIONS / name, as_version=4).cells:
            if is_test_cell(cell):
                yield f"{name}:{cell.metadata['nbgrader']['grade_id']}", cell.source


TEST_CELLS = dict(_test_cells())


def _bound_names(tree: ast.AST) -> set[str]:
    """Names the cell binds by assignment or loop (not imports, not function parameters)."""
    bound = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.comprehension)):
            targets = [node.target]
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets = [node.optional_vars]
        for target in targets:
            bound |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return bound


def _names(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


@pytest.mark.parametrize("cell", sorted(TEST_CELLS))
def test_what_a_check_compares_with_is_computed_inside_its_judgment(cell):
    """The rule of remat_checks: a judgment's arguments after the first are computed in the call,
    from the inputs (names the found value uses too) or from reference_* functions, and reference_*
    functions are called nowhere else, so leaving them out leaves nothing behind in the kernel."""
    tree = ast.parse(TEST_CELLS[cell])
    bound, problems = _bound_names(tree), []
    inside = set()
    judgments = []  # (call, the parameters of the function it is in)

    def collect(node, parameters=frozenset()):
        if isinstance(node, ast.FunctionDef):
            parameters = parameters | {a.arg for a in node.args.args + node.args.kwonlyargs}
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in JUDGMENTS
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "checks"
        ):
            judgments.append((node, parameters))
        for child in ast.iter_child_nodes(node):
            collect(child, parameters)

    collect(tree)
    for node, parameters in judgments:
        found = _names(node.args[0]) if node.args else set()
        compared = [*node.args[1:], *[k.value for k in node.keywords if k.arg not in ("what", "hint")]]
        for argument in compared:
            inside |= {id(n) for n in ast.walk(argument)}
            leaked = (_names(argument) & bound) - found - parameters
            if leaked:
                problems.append(f"line {node.lineno}: compared with {sorted(leaked)}, computed outside the judgment")
    references = {n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith(REFERENCE_PREFIX)}
    inside |= {id(n) for ref in references for n in ast.walk(ref)}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id.startswith(REFERENCE_PREFIX)
            and id(node) not in inside
        ):
            problems.append(f"line {node.lineno}: {node.func.id}() called outside a judgment")
    assert problems == [], f"{cell}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("cell", sorted(TEST_CELLS))
def test_a_learners_kernel_runs_the_cell_without_its_expected_values(cell):
    source = observe_only(TEST_CELLS[cell])
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in JUDGMENTS:
            assert all(isinstance(a, ast.Constant) and a.value is None for a in node.args[1:])
            assert all(isinstance(k.value, ast.Constant) and k.value.value is None for k in node.keywords)
        if isinstance(node, ast.FunctionDef) and node.name.startswith(REFERENCE_PREFIX):
            assert len(node.body) == 1 and isinstance(node.body[0], ast.Raise)
    assert "_performance05_fresh_checks().Checks(" in source
    compile(source, cell, "exec")
