"""How every graded cell of performance-05 checks an answer, item by item.

A graded test cell opens `checks = Checks(points, where=...)`, runs each check inside
`with checks.item(points, what):` and ends with `checks.score()`. Inside an item, each line
of checking is a *judgment*: one value the learner's code produced, set beside what it
should be.

    checks.close(found, expected, rtol=..., atol=...)   numbers, elementwise, within a tolerance
    checks.equal(found, expected)                       the same plain value (numbers, text, None, lists, dicts)
    checks.at_least(found, bound) / checks.below(found, bound)    every number (bound: a number, or one per number)
    checks.raises(ValueError, fn, *args)                calling fn raises that exception

One mistake costs only the points of the item it breaks, and a failed item says what was
expected, what was found and where to look.

The same cell runs three ways:

- **A learner** (JupyterLab, `make validate`, `solutions/main.py`): every judgment is decided
  here; the report says how many of the cell's points were checked here (hidden checks run
  only when graded). A cell that passes prints it; a failure raises it as a `CheckFailed`,
  whose report IPython shows in place of a traceback, so the cell turns red and says it once.
- **Stock `nbgrader autograde`** (an instructor's own course, without the bundle's grader):
  the whole cell, hidden checks included, runs and is judged here; the cell's value is the
  points earned, nbgrader's partial credit.
- **The bundle's grader**: no check runs in the learner's kernel. The grader's *judge* runs
  the whole cell in its own process, and reaches the learner's work only through data: it asks
  the kernel to call a learner's function on inputs it sends, and has the learner's JAX
  programs rebuilt from the answer cells and handed over as data, which it transforms and runs
  on its own inputs (see remat_lesson.gradient and friends). Names the learner defined are, there, handles on the kernel; `numpy_only` runs an
  answer cell in a process where JAX cannot be imported; a `TimedExecutable` lets the judge
  choose, and see, how long each call and each result take.

`judge()` and `report_lines()` are the one definition of a verdict and of the report. This
module needs NumPy only (the NumPy-only tasks are checked in a process without JAX).
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import math
import os
import pickle
import subprocess
import sys
import textwrap
import time
import zlib
from collections.abc import Mapping

import numpy as np

# This module speaks the grader's judge protocol (autograder/judge/protocol.py): the names below,
# Checks, report_lines, points_line, TimedExecutable and PendingResult.
#: Objects the grader's judge handles for a learner's kernel answer to this (see the docstring).
REMOTE = "__judge_remote__"
#: Set by the grader's judge on its own copy of this module: the run's seed; None elsewhere.
JUDGE = None
#: The modules an answer cell finds star-imported before it, as the notebooks import them.
ANSWER_PRELUDE = ("remat_lesson",)
#: What grading this lesson needs beyond the grader's core (JAX, its programs judged as data):
#: the grader's adapter of this name (a name only: nothing here imports the grader).
ADAPTER = "autograder.adapters.lesson"


class _Input:
    """ARG: where bind() leaves a program's inputs open."""

    def __repr__(self):
        return "ARG"


#: The placeholder for the judge's own inputs in a bound program (remat_lesson.bind).
ARG = _Input()

# Trusted copies, taken at import time, for the learner's own runs.
_asarray = np.asarray
_isfinite = np.isfinite
_float64 = np.float64


def _mode() -> str:
    """'judge' (the bundle's grader), 'autograde' (stock nbgrader) or 'learner'."""
    if JUDGE is not None:
        return "judge"
    return "autograde" if os.environ.get("NBGRADER_EXECUTION") == "autograde" else "learner"


# ---------------------------------------------------------------------------------------
# Values as data: what a judgment records.
# ---------------------------------------------------------------------------------------
#: Arrays of more elements than this are recorded by `plain` as their shape, dtype and digest:
#: as Python values they would take one object per element (a learner chooses the size).
PLAIN_ITEMS = 10_000
#: The most numbers of each side a judgment keeps once it is decided (the rest is not needed
#: again, and a cell's judgments are kept until the next cell).
KEPT_VALUES = 64


def _number(value: float):
    value = float(value)
    return value if math.isfinite(value) else repr(value)  # JSON has no NaN or infinity


def numbers(value) -> dict:
    """An array-like as {"shape": [...], "values": the numbers, flat, as a NumPy array}, or
    {"not_numbers": type}. An array of real numbers is kept in its own dtype, without a copy
    where it can be: a value the learner's code returned costs what it holds, never one Python
    object (nor one float64) per element."""
    try:
        array = _asarray(value)
        if array.dtype.kind not in "biuf":
            array = _asarray(value, dtype=_float64)
    except (TypeError, ValueError, OverflowError):
        return {"not_numbers": type(value).__name__}
    return {"shape": [int(n) for n in array.shape], "values": array.reshape(-1)}


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
        array = _asarray(value)
        if array.size > PLAIN_ITEMS:
            digest = hashlib.sha256(np.ascontiguousarray(array).data).hexdigest() if array.dtype.kind != "O" else None
            return {"array": {"shape": [int(n) for n in array.shape], "dtype": str(array.dtype), "sha256": digest}}
        return plain(array.tolist())
    return {"object": type(value).__name__}


def _values(encoded: dict) -> np.ndarray:
    """A judgment's numbers in their shape, as they were recorded (no copy)."""
    return _asarray(encoded["values"]).reshape(encoded["shape"])


def _array(encoded: dict) -> np.ndarray:
    return _asarray(encoded["values"], dtype=_float64).reshape(encoded["shape"])


def _kept(value):
    """A judgment's side as kept with its item once decided: at most KEPT_VALUES numbers (a copy,
    so that what the learner's code returned is not held) and no list longer than that."""
    if isinstance(value, dict) and "values" in value and np.size(value["values"]) > KEPT_VALUES:
        first = np.array(_asarray(value["values"]).reshape(-1)[:KEPT_VALUES])
        return {"shape": value["shape"], "values": first, "kept": KEPT_VALUES}
    if isinstance(value, list) and len(value) > KEPT_VALUES:
        return {"list of": len(value), "first": value[:KEPT_VALUES]}
    return value


def _show(value) -> str:
    return repr(value) if not isinstance(value, dict) or "object" not in value else f"a {value['object']}"


# ---------------------------------------------------------------------------------------
# Verdicts: one definition, wherever the cell runs.
# ---------------------------------------------------------------------------------------
def judge(judgment: dict) -> str | None:
    """None when the judgment holds, else what was expected and what was found."""
    kind, what, hint = judgment["kind"], judgment["what"], judgment.get("hint")
    found, expected = judgment.get("found"), judgment.get("expected")
    message = _VERDICTS[kind](found, expected, what, judgment)
    return None if message is None else message + (f" ({hint})" if hint else "")


def _tolerance(rtol: float, atol: float) -> str:
    if atol == 0.0:
        return f"rtol={rtol:g}"
    return f"atol={atol:.3g}" if rtol == 0.0 else f"rtol={rtol:g} + atol={atol:.3g}"


def _entry(index: int, shape) -> str:
    if len(shape) == 0:
        return ""
    place = np.unravel_index(index, shape)
    return f"entry {place[0] if len(shape) == 1 else tuple(int(i) for i in place)} of {math.prod(shape)}: "


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
    allowed = atol + rtol * np.abs(want)
    off = np.abs(got - want)
    outside = (off > allowed).ravel()
    if not got.size or not bool(outside.any()):
        return None
    # The entry furthest past its own tolerance: two vectors printed to a few digits can look
    # the same, so show that entry in full, its difference, and what was allowed there.
    with np.errstate(divide="ignore", invalid="ignore"):
        excess = np.where(allowed > 0, off / np.where(allowed > 0, allowed, 1.0), np.inf).ravel()
    worst = int(np.argmax(np.where(outside, excess, -1.0)))
    diff, room = float(off.ravel()[worst]), float(allowed.ravel()[worst])
    times = f", {diff / room:.3g} times that" if room > 0 else ""
    count = f" ({int(outside.sum())} of {got.size} entries are outside)" if got.size > 1 else ""
    return (
        f"expected {what} within {_tolerance(rtol, atol)} of the reference{count}; "
        f"{_entry(worst, got.shape)}found {float(got.ravel()[worst]):.9g}, expected {float(want.ravel()[worst]):.9g}, "
        f"off by {diff:.3g} where {room:.3g} is allowed{times}"
    )


def _equal(found, expected, what, judgment) -> str | None:
    return None if found == expected else f"expected {what}: {_show(expected)}, found {_show(found)}"


def _bounded(found, bound, what, judgment, *, below: bool) -> str | None:
    if not isinstance(found, dict) or "values" not in found or not np.size(found["values"]):
        return f"expected {what} as numbers, found {found.get('not_numbers', 'nothing') if isinstance(found, dict) else found!r}"
    got = _values(found)  # compared in its own dtype: no float64 copy of a learner-sized array
    limit = _array(bound) if isinstance(bound, dict) else np.float64(float(bound))
    if limit.ndim and limit.shape != got.shape:
        return f"expected {len(limit.ravel())} of {what}, found {got.size}"
    if not bool(np.isfinite(got).all()):
        return f"expected finite {what}, found NaN or infinity"
    failing = ~(got < limit) if below else ~(got >= limit)
    if not bool(failing.any()):
        return None
    index = int(np.argmax(failing.reshape(-1)))
    value, edge = float(got.ravel()[index]), float(np.broadcast_to(limit, got.shape).ravel()[index])
    where = f" (number {index + 1} of {got.size})" if got.size > 1 else ""
    return f"expected {what} {'below' if below else 'at least'} {edge:g}, found {value:g}{where}"


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


#: nbgrader's validator cuts every line of a cell's error past 87 characters (its width, 90, less
#: "..."), its own indent of 4 included: the report a learner sees is wrapped below that.
REPORT_WIDTH = 80


def _wrapped(lines: list[str]) -> list[str]:
    wrapped = []
    for line in lines:
        indent = " " * (len(line) - len(line.lstrip(" ")))
        wrapped += textwrap.wrap(
            line, REPORT_WIDTH, subsequent_indent=indent + "    ", break_long_words=False, break_on_hyphens=False
        ) or [line]
    return wrapped


def points_line(earned: float, checked: float, declared: float) -> str:
    """The last line of a report: what was checked, and what is left for grading."""
    if math.isclose(checked, declared):
        return f"{earned:g} of {declared:g} points"
    return (
        f"{earned:g} of {checked:g} points checked here; the cell is worth {declared:g}: "
        f"{declared - checked:g} more {'is' if declared - checked == 1 else 'are'} checked when graded"
    )


def raised_names(error: BaseException) -> list[str]:
    """The class names of an exception, most specific first: for an exception the learner's
    code raised in another process, the names that process reported."""
    names = getattr(error, "learner_mro", None)
    return list(names) if names else [cls.__name__ for cls in type(error).__mro__]


def is_unanswered(error: BaseException) -> bool:
    """Whether an error says the answer was never given: the release's stub (a bare
    NotImplementedError(); one with a message is the learner's code passing on an error it should
    have handled), or a name the test uses that the learner's notebook never defined (its answer
    cell still stops at the stub). The class report counts such items as not attempted."""
    stub = raised_names(error)[0] == "NotImplementedError" and not str(error)
    return stub or type(error) is NameError


# ---------------------------------------------------------------------------------------
# The checks a graded cell runs.
# ---------------------------------------------------------------------------------------
class CheckFailed(Exception):
    """A judgment did not hold; the message is written for the learner."""

    def _render_traceback_(self):
        # IPython shows these lines in place of a traceback: the cell's report, once, without
        # frames of this module (nbgrader's validator shows the same lines as the cell's error).
        return str(self).splitlines()


class Checks:
    """Scores one graded cell, item by item (see the module docstring)."""

    #: The Checks of the cell being judged, for the grader's judge (its own copy of this module).
    latest: Checks | None = None

    def __init__(self, points: float, where: str):
        self.points = points
        self.where = where
        self.items: list[dict] = []
        self._judgments: list[dict] | None = None
        self._unanswered = False  # whether the item being checked met an answer never given
        self._mode = _mode()
        self._draws = 0
        Checks.latest = self

    def rng(self) -> np.random.Generator:
        """Fresh inputs for a check. While graded they are drawn from a seed only the grader
        holds, new for every grading run; elsewhere from a fixed seed, so a run repeats."""
        self._draws += 1
        key = zlib.crc32(f"{self.where}|{self._draws}".encode())
        seed = [int(JUDGE), key] if JUDGE is not None else [2016, key]
        return np.random.default_rng(seed)

    # -- items ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def item(self, points: float, what: str):
        judgments: list[dict] = []
        self._judgments, self._unanswered = judgments, False
        failure = None
        try:
            yield self
        except CheckFailed as stop:
            failure = str(stop)
        except Exception as raised:  # the learner's code broke: report it, go on with the next item
            name = raised_names(raised)[0]
            self._unanswered = is_unanswered(raised)
            if self._unanswered and name == "NotImplementedError":
                failure = "not answered yet: the answer cell still raises NotImplementedError"
            elif getattr(raised, "judge_finding", False):  # the grader's judge says why, not the learner's code
                failure = str(raised)
            else:
                failure = f"your code raised {name}: {raised}"
        finally:
            self._judgments = None
        item = {"points": points, "what": what, "judgments": judgments, "failure": failure}
        self.items.append({**item, "unanswered": failure is not None and self._unanswered})

    def _judge(self, judgment: dict) -> None:
        if self._judgments is None:
            raise RuntimeError("a check must run inside `with checks.item(points, what):`")
        failure = judge(judgment)
        self._judgments.append({key: _kept(value) for key, value in judgment.items()})
        if failure is not None:
            raise CheckFailed(failure)

    @staticmethod
    def _bound(bound):
        return numbers(bound) if np.ndim(bound) else plain(bound)

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
        """Every number in found is at least bound (a number, or one bound per number)."""
        self._judge(
            {"kind": "at_least", "what": what, "hint": hint, "found": numbers(found), "expected": self._bound(bound)}
        )

    def below(self, found, bound, *, what: str, hint: str | None = None):
        """Every number in found is below bound (a number, or one bound per number)."""
        self._judge(
            {"kind": "below", "what": what, "hint": hint, "found": numbers(found), "expected": self._bound(bound)}
        )

    def raises(self, exception: type, fn, *args, what: str, hint: str | None = None, **kwargs):
        """Calling fn(*args, **kwargs) raises `exception` (or a subclass of it)."""
        try:
            fn(*args, **kwargs)
        except Exception as raised:  # which exception is what is checked
            found = raised_names(raised)
            self._unanswered = self._unanswered or is_unanswered(raised)
        else:
            found = None
        self._judge({"kind": "raises", "what": what, "hint": hint, "found": found, "expected": exception.__name__})

    # -- the end of the cell --------------------------------------------------------------------
    def score(self):
        """The report. Learner: raises on a failure. Stock nbgrader: returns the points earned.
        The bundle's judge: returns the points earned; the judge writes the report."""
        lines, earned, checked = report_lines(self.items, self.where)
        if self._mode in ("autograde", "judge") and not math.isclose(checked, self.points):
            raise RuntimeError(f"this graded cell declares {self.points} points but its checks add up to {checked}")
        if self._mode == "judge":
            return earned
        report = "\n".join(_wrapped([*lines, points_line(earned, checked, self.points)]))
        if self._mode == "learner" and any(item["failure"] is not None for item in self.items):
            # The report is the error: printed once, and what `make validate` shows of the cell.
            raise CheckFailed(report)
        print(report)
        return earned if self._mode == "autograde" else None


# ---------------------------------------------------------------------------------------
# Timing a learner's timing: an executable that knows how long its calls and results took.
# ---------------------------------------------------------------------------------------
def _every_row_matched(fits: np.ndarray) -> bool:
    """Whether each row can be given a column of its own where `fits` holds (a perfect matching,
    by augmenting paths)."""
    owner = [-1] * fits.shape[1]  # column -> row

    def claim(row: int, seen: set[int]) -> bool:
        for column in map(int, np.flatnonzero(fits[row])):
            if column not in seen:
                seen.add(column)
                if owner[column] < 0 or claim(owner[column], seen):
                    owner[column] = row
                    return True
        return False

    return all(claim(row, set()) for row in range(fits.shape[0]))


class TimedExecutable:
    """An executable for a learner's timing code, timed from outside that code.

    Each call, and the first wait for each call's result, is noted as it happens: so a sample
    the learner reports can be held between what the executable saw (`shortest_samples`,
    `longest_samples`), and made-up numbers do not fit. `executable` is a real one (its calls go
    through), or None: then a call returns a result that takes `result_delays[k]` seconds to
    finish once waited for, and the first calls themselves take `first_calls` seconds (one-off
    costs, as a warm-up pays; `first_call`: the first call's alone). Waiting works every way:
    block_until_ready, jax.block_until_ready, np.asarray, jax.device_get, float.

    While graded, the grader's judge plays this part from outside the learner's process: it
    chooses when each call and each wait returns, and notes when it was asked.
    """

    def __init__(self, executable=None, *, first_call: float = 0.0, first_calls=(), result_delays=(0.0,)):
        self.executable = executable
        self.first_calls = [float(d) for d in first_calls] or [float(first_call)]
        self.result_delays = [float(d) for d in result_delays]
        self.calls = 0
        self.events: list[tuple[str, int, float]] = []  # (kind, call, seconds): "call", "waited", "end"
        self.started = time.perf_counter()

    # -- what the judge and the local executable both use --------------------------------------
    def delay(self, event: str, call: int) -> float:
        """How long the executable takes at an event: the first calls, each call's result."""
        if event == "call":
            return self.first_calls[call - 1] if call <= len(self.first_calls) else 0.0
        return self.result_delays[(call - 1) % len(self.result_delays)]

    def note(self, kind: str, call: int, seconds: float) -> None:
        if kind == "call":
            self.calls = max(self.calls, call)
        self.events.append((kind, call, seconds))

    def _timed_calls(self, repeats: int) -> list[int]:
        return list(range(max(self.calls - repeats + 1, 1), self.calls + 1))

    def longest_samples(self, repeats: int) -> np.ndarray:
        """For the last `repeats` calls, the most a sample can honestly be: from the end of the
        wait before the call to the start of the next call (or the end of the timing)."""
        end = next((t for kind, _, t in reversed(self.events) if kind == "end"), time.perf_counter())
        bounds = []
        for call in self._timed_calls(repeats):
            before = [t for kind, c, t in self.events if kind == "waited" and c < call] or [self.started]
            after = [t for kind, c, t in self.events if kind == "call" and c == call + 1] or [end]
            bounds.append(after[0] - before[-1] + 1e-6)
        return np.asarray(bounds, dtype=np.float64)

    def unwaited_calls(self, repeats: int) -> list[int]:
        """Of the last `repeats` calls, those whose result was not waited for before the next call
        (or, for the last, before the timing ended): read from the order of the events, not from
        their durations, so a slow or loaded machine changes nothing."""
        unwaited = []
        for call in self._timed_calls(repeats):
            started = next((t for kind, c, t in self.events if kind == "call" and c == call), self.started)
            after = [t for kind, c, t in self.events if kind == "call" and c == call + 1]
            after += [t for kind, _, t in self.events if kind == "end" and t >= started]
            waited = [t for kind, c, t in self.events if kind == "waited" and c == call]
            if not waited or (after and waited[0] > min(after)):
                unwaited.append(call)
        return unwaited

    def fit_in_another_order(self, samples, repeats: int) -> bool:
        """True when the samples do not lie between each timed call's bounds (shortest_samples,
        longest_samples) in the order given, but do once each is matched with another call: the
        durations were measured, then reordered (sorted, say)."""
        found = np.asarray(samples, dtype=np.float64).reshape(-1)
        low, high = self.shortest_samples(repeats), self.longest_samples(repeats)
        if found.shape != low.shape:
            return False
        if bool(np.all((found >= low) & (found < high))):
            return False
        # Any matching of samples to calls, not only smallest to smallest: on a loaded machine the
        # measured durations need not keep the order of the results' delays.
        fits = (found[:, None] >= low[None, :]) & (found[:, None] < high[None, :])  # sample x call
        return _every_row_matched(fits)

    def shortest_samples(self, repeats: int) -> np.ndarray:
        """For the last `repeats` calls, the least a sample that waits for its result can be."""
        return np.asarray([self.delay("wait", call) for call in self._timed_calls(repeats)], dtype=np.float64)

    # -- the executable in the learner's own process --------------------------------------------
    def __call__(self, *args, **kwargs):
        call = self.calls + 1
        self.note("call", call, time.perf_counter())
        time.sleep(self.delay("call", call))
        result = self.executable(*args, **kwargs) if self.executable is not None else None
        return PendingResult(self, call, result)


class PendingResult:
    """A timed call's result. Waiting for it (every way: block_until_ready, jax.block_until_ready,
    np.asarray, jax.device_get, float) runs `waited()` once: in the learner's own process, the
    executable's delay, noted; in a graded kernel, the grader's agent passes one that asks the judge."""

    def __init__(self, timed, call: int, result, waited=None):
        self._timed, self._call, self._result, self._waited = timed, call, result, False
        self._on_wait = waited if waited is not None else self._local_wait

    def _local_wait(self):
        time.sleep(self._timed.delay("wait", self._call))
        self._timed.note("waited", self._call, time.perf_counter())

    def _wait(self):
        if not self._waited:
            if self._result is not None and hasattr(self._result, "block_until_ready"):
                self._result.block_until_ready()
            self._on_wait()
            self._waited = True
        return self

    def block_until_ready(self):
        return self._wait()

    def copy_to_host_async(self):
        return None

    def __array__(self, dtype=None, copy=None):
        self._wait()
        value = np.zeros(3) if self._result is None else np.asarray(self._result)
        return value.astype(dtype) if dtype is not None else value

    def __float__(self):
        self._wait()
        return 0.0 if self._result is None else float(self._result)

    def item(self):
        return float(self)

    def tolist(self):
        return np.asarray(self).tolist()

    @property
    def shape(self):
        return np.shape(self._result) if self._result is not None else (3,)


# ---------------------------------------------------------------------------------------
# NumPy-only tasks: an answer cell run where JAX cannot be imported.
# ---------------------------------------------------------------------------------------
def _recipe(module: str, name: str, *args):
    """Mark a value a check hands to learner code with how to build it again elsewhere."""

    def mark(value):
        value.__recipe__ = (module, name, args, {})
        return value

    return mark


def tanh_network(weights, depth: int):
    """sum(v_depth**2), v <- tanh(weights @ v), in NumPy, in the dtype of what it is given."""
    weights = np.asarray(weights)

    def objective(v):
        v = np.asarray(v)
        for _ in range(depth):
            v = np.tanh(weights @ v)
        return np.sum(v * v)

    return _recipe("remat_checks", "tanh_network", weights, depth)(objective)


def scaled_square(scale: float):
    """scale * sum(v**2), in NumPy: a bowl whose curvature a forward difference gets wrong."""

    def bowl(v):
        v = np.asarray(v)
        return scale * np.sum(v * v)

    return _recipe("remat_checks", "scaled_square", scale)(bowl)


def sine_sum(frequency: float):
    """sum(sin(frequency * v)), in NumPy."""

    def wave(v):
        return np.sum(np.sin(frequency * np.asarray(v)))

    return _recipe("remat_checks", "sine_sum", frequency)(wave)


def difference_diagnosis(fn, point, direction, eps: float, found: float, exact: float, rtol: float) -> str:
    """What a difference quotient `found` (of fn at point along direction, step eps) most likely
    got wrong, against the exact slope: the step lost to rounding, a one-sided formula, a factor,
    a reversed sign, or a step so small that f's rounding swamps the slope. fn is a NumPy
    objective; it is evaluated here in the dtype of what it is given, as the learner's code was."""
    point, direction = np.asarray(point), np.asarray(direction)
    if not (math.isfinite(found) and math.isfinite(exact)) or exact == 0.0:
        return ""
    plus, minus = point + eps * direction, point - eps * direction
    f_plus, f_zero, f_minus = float(fn(plus)), float(fn(point)), float(fn(minus))
    off, dtype = found - exact, np.result_type(plus)
    unit_roundoff = float(np.finfo(dtype).eps) / 2 if np.issubdtype(dtype, np.floating) else 0.0
    moving = direction != 0
    lost = int((plus[moving] == point[moving]).sum())
    if lost and lost == int(moving.sum()):
        return (
            f"the step is lost: in {dtype}, x + {eps:g}·d rounds back to x in every entry, so f(x + εd) and "
            f"f(x − εd) are the same number; choose a larger EPSILON"
        )
    # Too small a step first: there, every formula gives noise, and a formula cannot be read off it.
    rounding = unit_roundoff * abs(f_zero) / eps / abs(exact)
    if rounding >= rtol / 3:
        return (
            f"ε = {eps:g} is too small for {dtype}: each value of f is rounded by about u·|f| (u = {unit_roundoff:.2g}), "
            f"and the quotient divides that by ε: about {rounding:.2g} {'times' if rounding >= 1 else 'of'} the slope "
            f"here, against a tolerance of "
            f"{rtol:g}"
            + (f"; x + εd even rounds back to x in {lost} of {int(moving.sum())} entries" if lost else "")
            + "; a larger EPSILON keeps rounding below the tolerance (too large a one truncates: find the step between)"
        )
    one_sided = {"(f(x + εd) − f(x))/ε": (f_plus - f_zero) / eps, "(f(x) − f(x − εd))/ε": (f_zero - f_minus) / eps}
    for formula, value in one_sided.items():
        if abs(found - value) <= 0.1 * abs(off):
            return (
                f"this is the one-sided difference {formula}, off by about ε·(dᵀHd)/2, an error that shrinks only "
                f"like ε; the central difference (f(x + εd) − f(x − εd))/(2ε) cancels it"
            )
    for factor, reading in ((2.0, "twice"), (0.5, "half"), (-1.0, "minus")):
        if abs(found - factor * exact) <= 0.01 * abs(exact):
            return f"{reading} the slope: the quotient is (f(x + εd) − f(x − εd)) divided by 2ε"
    if found == 0.0:
        return "exactly 0: f(x + εd) and f(x − εd) came out equal, or nothing was computed from them"
    # The right formula with too large a step: its truncation error shrinks like ε², a tenth of
    # the step takes off at least nine tenths of it.
    tenth = eps / 10
    finer = (float(fn(point + tenth * direction)) - float(fn(point - tenth * direction))) / (2 * tenth)
    if abs(found - (f_plus - f_minus) / (2 * eps)) <= 0.01 * abs(off) and abs(finer - exact) <= 0.1 * abs(off):
        return (
            f"ε = {eps:g} is too large: the formula is the central difference, but its truncation error, "
            f"which shrinks like ε², is {abs(off / exact):.2g} of the slope here against a tolerance of {rtol:g}; "
            f"a smaller EPSILON (not so small that rounding takes over) fixes it"
        )
    return f"off by {off:.3g}, {abs(off / exact):.2g} of the slope; a central difference with this step gives " + (
        f"{(f_plus - f_minus) / (2 * eps):.7g}"
    )


NOT_JAX = """
import sys

NOT_AVAILABLE = "JAX is not available here; use NumPy"

class _NoJax:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("jax", "jaxlib", "jax_plugins"):
            raise ModuleNotFoundError(f"No module named {name!r} (this process runs without JAX)", name=name)
        return None

sys.meta_path.insert(0, _NoJax())
"""

#: The program numpy_only runs in a fresh Python: the answer cell, then the call (pickle: this is
#: the learner's own machine talking to itself; the grader uses its own runner and data only).
_RUNNER = (
    NOT_JAX
    + """
import io, os, pickle, contextlib
request = pickle.load(sys.stdin.buffer)
sys.path.insert(0, request["folder"])
import numpy, numpy as np

def build(value):
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "__recipe__":
        module, name, args, kwargs = value[1]
        return getattr(__import__(module), name)(*[build(a) for a in args], **kwargs)
    return value

import ast
namespace = {"__name__": "__main__", "np": np, "numpy": numpy}
# Names that stand for JAX: the usual ones (bound in another cell, which never runs here), and
# those the cell's own imports of JAX would have bound.
jax_names = {"jax", "jnp", "lax", "jsp", "jrandom"}
is_jax = lambda module: isinstance(module, str) and module.partition(".")[0] in ("jax", "jaxlib")
out = sys.stdout.buffer
with contextlib.redirect_stdout(io.StringIO()):
    try:
        # One statement at a time: one that cannot run here (it needs JAX, say) is left out.
        for statement in ast.parse(request["cell"]).body:
            try:
                exec(compile(ast.Module([statement], []), "<answer cell>", "exec"), namespace)
            except ImportError as error:
                if is_jax(error.name) and isinstance(statement, (ast.Import, ast.ImportFrom)):
                    jax_names |= {a.asname or a.name.partition(".")[0] for a in statement.names}
            except Exception:
                pass
        if request["name"] not in namespace:
            raise NameError(f"the answer cell, run without JAX, does not define {request['name']!r}")
        try:
            result = ("value", namespace[request["name"]](*[build(a) for a in request["args"]]))
        except NameError as error:
            if getattr(error, "name", None) not in jax_names:
                raise
            raise NameError(f"{NOT_AVAILABLE} ({error}: this answer cell runs alone, where JAX cannot be imported)")
        except ImportError as error:
            if not is_jax(error.name):
                raise
            raise ModuleNotFoundError(
                f"{NOT_AVAILABLE} (this answer cell runs alone, where {error.name!r} cannot be imported)"
            )
    except BaseException as error:
        result = ("raised", [c.__name__ for c in type(error).__mro__], str(error))
try:
    pickle.dump(result, out)
except Exception as error:
    pickle.dump(("raised", ["TypeError"], f"the result cannot be handed back: {error}"), out)
"""
)


class LearnerRaised(Exception):
    """The learner's code raised in another process; its class names are in `learner_mro`."""

    def __init__(self, mro: list[str], message: str):
        super().__init__(message)
        self.learner_mro = list(mro)


def _defines(source: str, name: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
            isinstance(t, ast.Name) and t.id == name for t in targets
        ):
            return True
    return False


def _answer_cell(fn) -> str:
    """The source of the cell that defined fn: the newest cell of IPython's history that defines
    its name, or (run as a script) the function's own source."""
    import inspect

    name = fn.__name__
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    history = shell.user_ns.get("In", []) if shell is not None else []
    for source in reversed(history):
        if _defines(source, name):
            return source
    return inspect.getsource(fn)


class _NumpyOnly:
    """fn's answer cell, run alone in a fresh Python process that cannot import JAX, and fn
    called there."""

    def __init__(self, fn):
        self.name = fn.__name__
        self.cell = _answer_cell(fn)

    def __call__(self, *args):
        def portable(value):
            recipe = getattr(value, "__recipe__", None)
            if recipe is not None:
                return ("__recipe__", recipe)
            if type(value).__module__.startswith(("jax", "jaxlib")):  # the other process has no JAX
                return np.asarray(value)
            return value

        request = {
            "cell": self.cell,
            "name": self.name,
            "args": [portable(a) for a in args],
            "folder": os.path.dirname(os.path.abspath(__file__)),
        }
        run = subprocess.run(
            [sys.executable, "-I", "-c", _RUNNER], input=pickle.dumps(request), capture_output=True, timeout=300
        )
        if run.returncode != 0 or not run.stdout:
            raise RuntimeError(f"the NumPy-only process failed: {run.stderr.decode(errors='replace')[-500:]}")
        result = pickle.loads(run.stdout)
        if result[0] == "raised":
            raise LearnerRaised(result[1], result[2])
        return result[1]


def numpy_only(fn):
    """fn as it runs from its answer cell alone, in a process where JAX cannot be imported: the
    cell must need nothing but NumPy (`np` is there already) and the standard library."""
    remote = getattr(fn, REMOTE, None)
    if remote is not None:
        return remote("numpy_only", ())
    return _NumpyOnly(fn)
