"""How every graded cell of performance-05 checks an answer, item by item.

A graded test cell opens `checks = Checks(points, where=...)`, runs each check inside
`with checks.item(points, what):` and ends with `checks.score()`. Inside an item, each line
of checking is a *judgment*: one value the learner's code produced, set beside what it
should be.

    checks.close(found, expected, rtol=..., atol=...)   numbers, elementwise, within a tolerance
    checks.equal(found, expected)                       the same plain value (numbers, text, None, lists, dicts)
    checks.at_least(found, bound) / checks.below(found, bound)
    checks.raises(ValueError, fn, *args)                calling fn raises that exception

One mistake costs only the points of the item it breaks, and a failed item says what was
expected, what was found and where to look.

The same cell runs three ways:

- **A learner** (JupyterLab, `make validate`, `solutions/main.py`): every judgment is decided
  here; the report says how many of the cell's points were checked here (hidden checks run
  only when graded), and a failure raises so the cell turns red.
- **Stock `nbgrader autograde`** (an instructor's own course, without the bundle's grader):
  judged here as well; the cell's value is the points earned, nbgrader's partial credit.
- **The bundle's grader** (`REMAT_LESSON_CHECKS=observe`): the cell only *observes*. Each item
  hands the values the learner's code produced to the grader as data (a display output of
  type `OBSERVATION_MIME`), and the grader decides, in its own process, against the same cell
  run on the instructor's solutions. In a learner's kernel the grader runs the cell with every
  judgment's expected value, tolerance and wording left out, and with the bodies of the
  cell's `reference_*` functions removed: what a value is compared with is never in the
  learner's process. Nothing the learner's code does to NumPy, builtins, stdout or IPython can
  do more than change the values it hands over, and only the right values earn points.

Writing a graded cell: compute everything a judgment compares with *inside* the judgment's
call (its arguments after the first), directly or through functions named `reference_*`; the
first argument is the learner's value. tests/test_checks.py holds every cell to that rule.

`judge()` and `report_lines()` are the one definition of a verdict and of the report, used
here and by the grader. This module needs NumPy only.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Mapping

import numpy as np

#: The display output that carries a check's observations to the grader.
OBSERVATION_MIME = "application/vnd.performance05.observation+json"
#: Set to "observe" by the bundle's grader: observe here, decide in the grader.
MODE_ENV = "REMAT_LESSON_CHECKS"

# Trusted copies, taken at import time, for the learner's own runs. (While grading, nothing
# decided in the learner's process counts, so these only keep a learner's report honest.)
_asarray = np.asarray
_isfinite = np.isfinite
_float64 = np.float64


def _mode() -> str:
    """'observe' (the bundle's grader), 'autograde' (stock nbgrader) or 'learner'."""
    if os.environ.get(MODE_ENV) == "observe":
        return "observe"
    return "autograde" if os.environ.get("NBGRADER_EXECUTION") == "autograde" else "learner"


# ---------------------------------------------------------------------------------------
# Values as data: what a judgment records, in plain JSON.
# ---------------------------------------------------------------------------------------
def _number(value: float):
    value = float(value)
    return value if math.isfinite(value) else repr(value)  # JSON has no NaN or infinity


def numbers(value) -> dict:
    """An array-like as {"shape": [...], "values": [...]} (float64), or {"not_numbers": type}."""
    try:
        array = _asarray(value, dtype=_float64)
    except (TypeError, ValueError, OverflowError):
        return {"not_numbers": type(value).__name__}
    return {"shape": [int(n) for n in array.shape], "values": [_number(v) for v in array.ravel().tolist()]}


def plain(value):
    """A value as plain JSON data: numbers, text, None, lists, dicts with text keys."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return _number(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if hasattr(value, "shape") and hasattr(value, "dtype"):  # an array
        return plain(_asarray(value).tolist())
    return {"object": type(value).__name__}


def _array(encoded: dict) -> np.ndarray:
    return np.array([float(v) for v in encoded["values"]], dtype=np.float64).reshape(encoded["shape"])


def _brief(encoded) -> str:
    if not isinstance(encoded, dict) or "values" not in encoded:
        return repr(encoded)
    flat = [float(v) for v in encoded["values"]]
    shown = ", ".join(f"{v:.6g}" for v in flat[:4])
    if not encoded["shape"]:
        return f"{flat[0]:.6g}"
    return f"[{shown}{', ...' if len(flat) > 4 else ''}]"


def _show(value) -> str:
    return repr(value) if not isinstance(value, dict) or "object" not in value else f"a {value['object']}"


# ---------------------------------------------------------------------------------------
# Verdicts: one definition, used in the learner's process and in the grader's.
# ---------------------------------------------------------------------------------------
def judge(judgment: dict) -> str | None:
    """None when the judgment holds, else what was expected and what was found."""
    kind, what, hint = judgment["kind"], judgment["what"], judgment.get("hint")
    found, expected = judgment.get("found"), judgment.get("expected")
    message = _VERDICTS[kind](found, expected, what, judgment)
    return None if message is None else message + (f" ({hint})" if hint else "")


def _close(found, expected, what, judgment) -> str | None:
    if not isinstance(found, dict) or "values" not in found:
        kind = found.get("not_numbers", type(found).__name__) if isinstance(found, dict) else type(found).__name__
        return f"expected {what} as numbers, found {kind}"
    if found["shape"] != expected["shape"]:
        return f"expected {what} of shape {tuple(expected['shape'])}, found shape {tuple(found['shape'])}"
    got, want = _array(found), _array(expected)
    if not bool(np.isfinite(got).all()):
        return f"expected finite {what}, found NaN or infinity"
    rtol, atol = float(judgment["rtol"]), float(judgment.get("atol", 0.0))
    if got.size and not bool((np.abs(got - want) <= atol + rtol * np.abs(want)).all()):
        error = float(np.max(np.abs(got - want)))
        return (
            f"expected {what} within rtol={rtol:g} of {_brief(expected)}, found {_brief(found)} "
            f"(largest difference {error:.3g})"
        )
    return None


def _equal(found, expected, what, judgment) -> str | None:
    return None if found == expected else f"expected {what}: {_show(expected)}, found {_show(found)}"


def _bounded(found, bound, what, judgment, *, below: bool) -> str | None:
    if not isinstance(found, dict) or "values" not in found or not found["values"]:
        return f"expected {what} as numbers, found {found.get('not_numbers', 'nothing') if isinstance(found, dict) else found!r}"
    got, limit = _array(found), float(bound)
    if not bool(np.isfinite(got).all()):
        return f"expected finite {what}, found NaN or infinity"
    if below and not bool((got < limit).all()):
        return f"expected {what} below {limit:g}, found {float(got.max()):g}"
    if not below and not bool((got >= limit).all()):
        return f"expected {what} of at least {limit:g}, found {float(got.min()):g}"
    return None


def _raises(found, expected, what, judgment) -> str | None:
    if isinstance(found, list) and expected in found:
        return None
    if found is None:
        return f"expected {what} to raise {expected}, it returned normally"
    raised = found[0] if isinstance(found, list) and found else found
    return f"expected {what} to raise {expected}, it raised {raised}"


_VERDICTS = {
    "close": _close,
    "equal": _equal,
    "at_least": lambda f, e, w, j: _bounded(f, e, w, j, below=False),
    "below": lambda f, e, w, j: _bounded(f, e, w, j, below=True),
    "raises": _raises,
}


def report_lines(items: list[dict], where: str) -> tuple[list[str], float, float]:
    """The report of a cell's items (each with points, what, failure or None): lines, earned, checked."""
    lines, earned, checked = [], 0.0, 0.0
    for item in items:
        points, failure = float(item["points"]), item.get("failure")
        got = points if failure is None else 0.0
        earned, checked = earned + got, checked + points
        lines.append(f"[{'PASS' if failure is None else 'FAIL'}] {got:g}/{points:g}  {item['what']}")
        if failure is not None:
            lines.append(f"        {failure}")
            lines.append(f"        where to look: {where}")
    return lines, earned, checked


def points_line(earned: float, checked: float, declared: float) -> str:
    """The last line of a report: what was checked, and what is left for grading."""
    if math.isclose(checked, declared):
        return f"{earned:g} of {declared:g} points"
    return (
        f"{earned:g} of {checked:g} points checked here; the cell is worth {declared:g}: "
        f"{declared - checked:g} more are checked when graded"
    )


# ---------------------------------------------------------------------------------------
# The checks a graded cell runs.
# ---------------------------------------------------------------------------------------
class CheckFailed(Exception):
    """A judgment did not hold; the message is written for the learner."""


class Checks:
    """Scores one graded cell, item by item (see the module docstring)."""

    def __init__(self, points: float, where: str):
        self.points = points
        self.where = where
        self.items: list[dict] = []
        self._judgments: list[dict] | None = None
        self._mode = _mode()
        self._publish({"record": "checks", "points": points, "where": where})

    # -- items ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def item(self, points: float, what: str):
        judgments: list[dict] = []
        self._judgments = judgments
        failure = error = None
        try:
            yield self
        except CheckFailed as stop:
            failure = str(stop)
        except NotImplementedError as raised:
            # The release's stub raises a bare NotImplementedError(); one with a message is the
            # learner's code passing on an error it should have handled.
            failure = error = (
                f"your code raised NotImplementedError: {raised}"
                if str(raised)
                else "not answered yet: the answer cell still raises NotImplementedError"
            )
        except Exception as raised:  # the learner's code broke: report it, go on with the next item
            failure = error = f"your code raised {type(raised).__name__}: {raised}"
        finally:
            self._judgments = None
        record = {
            "record": "item",
            "index": len(self.items),
            "points": points,
            "what": what,
            "judgments": judgments,
            "error": error,
            "failure": failure,
        }
        self.items.append(record)
        self._publish(record)

    def _judge(self, judgment: dict) -> None:
        if self._judgments is None:
            raise RuntimeError("a check must run inside `with checks.item(points, what):`")
        self._judgments.append(judgment)
        if self._mode == "observe":
            return  # the grader judges: here the found value is all that counts
        failure = judge(judgment)
        if failure is not None:
            raise CheckFailed(failure)

    # -- judgments ----------------------------------------------------------------------------
    def close(self, found, expected, *, rtol: float, atol: float = 0.0, what: str = "values", hint: str | None = None):
        """found matches expected elementwise: |found - expected| <= atol + rtol * |expected|."""
        self._judge(
            {
                "kind": "close",
                "what": what,
                "hint": hint,
                "rtol": rtol,
                "atol": atol,
                "found": numbers(found),
                "expected": numbers(expected),
            }
        )

    def equal(self, found, expected, *, what: str, hint: str | None = None):
        """found is the same plain value as expected (compared as JSON data)."""
        self._judge({"kind": "equal", "what": what, "hint": hint, "found": plain(found), "expected": plain(expected)})

    def at_least(self, found, bound, *, what: str, hint: str | None = None):
        """Every number in found is at least bound."""
        self._judge({"kind": "at_least", "what": what, "hint": hint, "found": numbers(found), "expected": plain(bound)})

    def below(self, found, bound, *, what: str, hint: str | None = None):
        """Every number in found is below bound."""
        self._judge({"kind": "below", "what": what, "hint": hint, "found": numbers(found), "expected": plain(bound)})

    def raises(self, exception: type, fn, *args, what: str, hint: str | None = None, **kwargs):
        """Calling fn(*args, **kwargs) raises `exception` (or a subclass of it)."""
        try:
            fn(*args, **kwargs)
        except Exception as raised:  # which exception is what is observed
            found = [cls.__name__ for cls in type(raised).__mro__]
        else:
            found = None
        self._judge({"kind": "raises", "what": what, "hint": hint, "found": found, "expected": exception.__name__})

    # -- the end of the cell --------------------------------------------------------------------
    def score(self):
        """The report. Learner: raises on a failure. Stock nbgrader: returns the points earned.
        The bundle's grader: nothing here; the grader writes the report and the score."""
        if self._mode == "observe":
            return None
        lines, earned, checked = report_lines(self.items, self.where)
        if self._mode == "autograde" and not math.isclose(checked, self.points):
            raise RuntimeError(f"this graded cell declares {self.points} points but its checks add up to {checked}")
        print("\n".join([*lines, points_line(earned, checked, self.points)]))
        if self._mode == "autograde":
            return earned
        failures = [f"{item['what']}: {item['failure']}" for item in self.items if item["failure"] is not None]
        if failures:
            raise CheckFailed(
                f"{checked - earned:g} of {checked:g} points lost. Where to look: {self.where}.\n- "
                + "\n- ".join(failures)
            )
        return None

    def _publish(self, record: dict) -> None:
        if self._mode != "observe":
            return
        try:
            from IPython.display import publish_display_data
        except ImportError:
            return
        publish_display_data(
            {OBSERVATION_MIME: record, "text/plain": f"(observation for the grader: {record['record']})"}
        )
