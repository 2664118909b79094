"""Decide each graded cell's score in the grader's own process, from values the kernel observed.

While the bundle's grader runs a notebook, its graded test cells only *observe*
(`REMAT_LESSON_CHECKS=observe`, see solutions/remat_checks.py): every check item hands over the
values its judgments compared, as display outputs of type OBSERVATION_MIME. Here, outside the
learner's process, each item is judged again:

- *what* is judged (the kind of judgment, the expected value, the tolerance, the wording) comes
  from the reference: the same cell run on the instructor's solutions, before any student;
- only *what was found* comes from the learner's kernel;
- the verdict is `remat_checks.judge`, loaded from the course's source, not from the submission.

So code in a submission that patches NumPy, the checks, stdout or IPython can at most change
the values it hands over; a check passes only when those values are the right ones. The score
and the report the learner reads are written here, over whatever the cell printed.
"""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path
from types import ModuleType

from nbformat.notebooknode import NotebookNode

OBSERVATION_MIME = "application/vnd.performance05.observation+json"
#: Checks' methods whose arguments after the first say what the found value is compared with.
JUDGMENTS = frozenset({"close", "equal", "at_least", "below"})
REFERENCE_PREFIX = "reference_"
NOT_HERE = 'raise RuntimeError("reference code runs only in the instructor\'s reference run")'
#: The longest message from a learner's exception kept in a report.
MAX_MESSAGE = 600


class ReferenceError(RuntimeError):
    """The instructor's solutions do not pass their own checks: no student can be graded fairly."""


def load_checks(path: Path) -> ModuleType:
    """remat_checks.py of the course's source, as a module of the grader's (never the submission's)."""
    spec = importlib.util.spec_from_file_location("performance05_trusted_checks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if getattr(module, "OBSERVATION_MIME", None) != OBSERVATION_MIME:
        raise RuntimeError(f"{path} does not speak the grader's observation format ({OBSERVATION_MIME})")
    return module


def is_test_cell(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


def observations(cell) -> list:
    """The observation records a cell's outputs carry, in order (anything may be in there)."""
    records = []
    for output in cell.get("outputs", []):
        if output.get("output_type") in ("display_data", "execute_result"):
            record = output.get("data", {}).get(OBSERVATION_MIME)
            if record is not None:
                records.append(record)
    return records


def stop_reason(cell) -> str | None:
    """Why a cell stopped before its end, from its error outputs (None when it did not)."""
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    if not errors:
        return None
    last = errors[-1]
    text = f"{last.get('ename', 'Error')}: {str(last.get('evalue', '')).strip()}".strip(": ")
    return text[:MAX_MESSAGE]


# ---------------------------------------------------------------------------------------
# What runs in a learner's kernel: the test cell without what it compares with.
# ---------------------------------------------------------------------------------------
#: Each test cell's checks come from a fresh copy of the shipped remat_checks.py (read-only in the
#: sandbox), so a class patched by the learner's code earlier does not observe for it.
FRESH_CHECKS = """
def _performance05_fresh_checks():
    import importlib.util, os
    spec = importlib.util.spec_from_file_location(
        "performance05_fresh_checks", os.path.join(os.environ["PERFORMANCE05_ASSIGNMENT"], "remat_checks.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
"""


class _LeaveOutExpected(ast.NodeTransformer):
    def visit_FunctionDef(self, node):
        if node.name.startswith(REFERENCE_PREFIX):
            node.body = ast.parse(NOT_HERE).body
            return node
        self.generic_visit(node)
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "Checks":
            node.func = ast.Attribute(
                value=ast.Call(func=ast.Name("_performance05_fresh_checks", ast.Load()), args=[], keywords=[]),
                attr="Checks",
                ctx=ast.Load(),
            )
            return node
        method = node.func
        if isinstance(method, ast.Attribute) and isinstance(method.value, ast.Name) and method.value.id == "checks":
            if method.attr in JUDGMENTS:
                node.args = node.args[:1] + [ast.Constant(None) for _ in node.args[1:]]
                node.keywords = [ast.keyword(arg=k.arg, value=ast.Constant(None)) for k in node.keywords]
            elif method.attr == "raises":
                node.keywords = [
                    ast.keyword(arg=k.arg, value=ast.Constant(None)) if k.arg in ("what", "hint") else k
                    for k in node.keywords
                ]
        return node


def observe_only(source: str) -> str:
    """A test cell's source as a learner's kernel runs it: every judgment keeps only its first
    argument (the learner's value) and every `reference_*` function loses its body, so nothing
    a value is compared with is ever computed in the learner's process; and its Checks come from
    a fresh copy of the shipped module."""
    tree = _LeaveOutExpected().visit(ast.parse(source))
    tree.body = ast.parse(FRESH_CHECKS).body + tree.body
    return ast.unparse(ast.fix_missing_locations(tree))


# ---------------------------------------------------------------------------------------
# The reference: the instructor's solutions, observed.
# ---------------------------------------------------------------------------------------
def reference_of(notebook: NotebookNode, checks: ModuleType) -> dict[str, dict]:
    """{grade_id: {"points", "where", "items": [...]}} of an executed source notebook; ReferenceError
    when a cell's observations are missing or its solution fails its own check."""
    reference, problems = {}, []
    for cell in notebook.cells:
        if not is_test_cell(cell):
            continue
        grade_id = cell.metadata["nbgrader"]["grade_id"]
        records = observations(cell)
        heads = [r for r in records if r.get("record") == "checks"]
        items = [r for r in records if r.get("record") == "item"]
        if len(heads) != 1 or [r["index"] for r in items] != list(range(len(items))) or not items:
            problems.append(f"{grade_id}: no observations (did the cell run in observe mode? {stop_reason(cell)})")
            continue
        for item in items:
            failure = item.get("failure") or next((f for f in map(checks.judge, item["judgments"]) if f), None)
            if failure:
                problems.append(f"{grade_id}, check {item['index'] + 1} ({item['what']}): {failure}")
        declared = float(cell.metadata["nbgrader"]["points"])
        if abs(sum(float(i["points"]) for i in items) - declared) > 1e-9:
            problems.append(
                f"{grade_id}: the checks add up to {sum(i['points'] for i in items)}, the cell declares {declared}"
            )
        reference[grade_id] = {
            "points": declared,
            "where": heads[0]["where"],
            "items": [{"points": i["points"], "what": i["what"], "judgments": i["judgments"]} for i in items],
        }
    if problems:
        raise ReferenceError("the instructor's solutions fail their own checks:\n  " + "\n  ".join(problems))
    return reference


# ---------------------------------------------------------------------------------------
# A learner's cell, decided.
# ---------------------------------------------------------------------------------------
def _item_failure(reference_item: dict, records: list, stopped: str | None, checks: ModuleType) -> str | None:
    if not records:
        return (
            f"this check did not run: the cell stopped before it ({stopped})"
            if stopped
            else "this check did not run: the cell stopped before it"
        )
    if len(records) > 1:
        return "this check reported more than once: something interfered with the checks"
    record = records[0]
    if not isinstance(record, dict):
        return "this check's report was damaged: something interfered with the checks"
    if record.get("error"):
        return str(record["error"])[:MAX_MESSAGE]
    found = record.get("judgments")
    expected = reference_item["judgments"]
    if not isinstance(found, list):
        return "this check's report was damaged: something interfered with the checks"
    for reference_judgment, judgment in zip(expected, found):
        if not isinstance(judgment, dict):
            return "this check's report was damaged: something interfered with the checks"
        # Everything but the found value is the reference's: the kind, the expected value, tolerances.
        failure = checks.judge({**reference_judgment, "found": judgment.get("found")})
        if failure:
            return failure
    if len(found) != len(expected):
        return (
            "this check did not finish: the cell stopped inside it"
            if len(found) < len(expected)
            else "this check reported more than it checks: something interfered with the checks"
        )
    return None


def decide(reference_cell: dict, cell, checks: ModuleType) -> tuple[float, str]:
    """(points earned, the report) for one learner's test cell, from its observations."""
    by_index: dict[int, list] = {}
    for record in observations(cell):
        if isinstance(record, dict) and record.get("record") == "item" and isinstance(record.get("index"), int):
            by_index.setdefault(record["index"], []).append(record)
    stopped = stop_reason(cell)
    items = [
        {
            "points": item["points"],
            "what": item["what"],
            "failure": _item_failure(item, by_index.get(index, []), stopped, checks),
        }
        for index, item in enumerate(reference_cell["items"])
    ]
    lines, earned, checked = checks.report_lines(items, reference_cell["where"])
    return earned, "\n".join([*lines, checks.points_line(earned, checked, reference_cell["points"])])


def write_verdict(cell, earned: float, report: str) -> None:
    """Replace the cell's outputs by the grader's report and score (nbgrader reads the score)."""
    cell.outputs = [
        NotebookNode(output_type="stream", name="stdout", text=report + "\n"),
        NotebookNode(
            output_type="execute_result",
            execution_count=cell.get("execution_count"),
            data={"text/plain": repr(float(earned))},
            metadata={},
        ),
    ]


def load_reference(path: Path) -> dict:
    return json.loads(Path(path).read_text())
