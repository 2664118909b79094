"""How a graded cell checks an answer, without a kernel.

solutions/remat_checks.py defines each judgment's verdict and the report, the timed executable a
learner's timing code is checked with, and `numpy_only`, which runs an answer cell where JAX
cannot be imported. The same code runs in a learner's JupyterLab and in the grader's judge
(autograder/judge.py, tested in tests/test_judge.py).
"""

from __future__ import annotations

import importlib.util
import sys
import time

import numpy as np
import pytest

from autograder.paths import SOLUTIONS


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
    cell = checks.Checks(2, where="here")
    with cell.item(1, "right"):
        cell.equal(1, 1, what="x")
    with cell.item(1, "raises"):
        raise ZeroDivisionError("boom")
    assert cell.score() == 1.0
    assert "your code raised ZeroDivisionError: boom" in capsys.readouterr().out


def test_in_the_judge_a_cell_neither_prints_nor_raises_and_returns_its_points(checks, monkeypatch, capsys):
    monkeypatch.setattr(checks, "JUDGE", 7)
    cell = checks.Checks(2, where="here")
    with cell.item(1, "right"):
        cell.equal(1, 1, what="x")
    with cell.item(1, "wrong"):
        cell.equal(1, 2, what="x")
    assert cell.score() == 1.0 and capsys.readouterr().out == ""
    assert checks.Checks.latest is cell


def test_bounds_may_be_one_per_number(checks):
    cell = checks.Checks(1, where="here")
    with cell.item(1, "each sample between its own bounds"):
        cell.at_least([0.02, 0.03], [0.01, 0.025], what="samples")
        cell.below([0.02, 0.03], np.array([0.021, 0.031]), what="samples")
    assert cell.items[-1]["failure"] is None
    with cell.item(1, "one sample past its own bound"):
        cell.at_least([0.02, 0.03], [0.01, 0.035], what="samples")
    assert "of at least 0.035, found 0.03 (number 2 of 2)" in cell.items[-1]["failure"]
    with cell.item(1, "as many bounds as numbers"):
        cell.below([0.02, 0.03, 0.04], [1.0, 1.0], what="samples")
    assert "expected 2 of samples, found 3" in cell.items[-1]["failure"]


def test_a_learner_exception_from_another_process_reads_as_the_learners(checks):
    raised = checks.LearnerRaised(["NotImplementedError", "RuntimeError", "Exception"], "")
    assert checks.raised_names(raised)[0] == "NotImplementedError"
    cell = checks.Checks(1, where="here")
    with cell.item(1, "unanswered"):
        raise raised
    assert "NotImplementedError" in cell.items[-1]["failure"]


def test_fresh_inputs_repeat_locally_and_follow_the_judges_seed(checks, monkeypatch):
    first = checks.Checks(1, where="w").rng().normal(size=3)
    assert np.array_equal(first, checks.Checks(1, where="w").rng().normal(size=3))
    monkeypatch.setattr(checks, "JUDGE", 11)
    judged = checks.Checks(1, where="w").rng().normal(size=3)
    monkeypatch.setattr(checks, "JUDGE", 12)
    assert not np.array_equal(judged, checks.Checks(1, where="w").rng().normal(size=3))
    assert not np.array_equal(first, judged)


# ---------------------------------------------------------------------------------------
# Timing a learner's timing.
# ---------------------------------------------------------------------------------------
def _time(executable, repeats, *, warm_up=True, wait=True):
    if warm_up:
        executable(None).block_until_ready()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = executable(None)
        if wait:
            np.asarray(result)
        samples.append(time.perf_counter() - start)
    return samples


def test_honest_samples_lie_between_what_the_executable_saw(checks):
    timed = checks.TimedExecutable(first_call=0.05, result_delays=(0.004, 0.006))
    samples = _time(timed, 4)
    assert timed.calls == 5
    assert np.all(np.asarray(samples) >= timed.shortest_samples(4))
    assert np.all(np.asarray(samples) < timed.longest_samples(4))
    assert np.all(np.asarray(samples) < 0.05)


def test_made_up_or_unwaited_samples_do_not_fit(checks):
    timed = checks.TimedExecutable(result_delays=(0.004, 0.011, 0.006, 0.009))
    _time(timed, 4)
    made_up = np.full(4, 0.0075)  # the mean of the delays, but not the delays
    assert not (np.all(made_up >= timed.shortest_samples(4)) and np.all(made_up < timed.longest_samples(4)))
    unwaited = checks.TimedExecutable(result_delays=(0.01,))
    samples = _time(unwaited, 4, wait=False)
    assert np.any(np.asarray(samples) < unwaited.shortest_samples(4))


# ---------------------------------------------------------------------------------------
# NumPy-only tasks.
# ---------------------------------------------------------------------------------------
def _defined(checks, source: str, name: str):
    namespace = {}
    exec(compile(source, "<answer cell>", "exec"), namespace)
    function = namespace[name]
    return checks._NumpyOnly.__new__(checks._NumpyOnly), function


def test_numpy_only_runs_the_answer_cell_where_jax_cannot_be_imported(checks, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(SOLUTIONS))
    cell = "import jax.numpy as jnp\n\n\ndef double(v):\n    return np.asarray(v) * 2\n\n\nSCALE = jnp.float32(2)\n"
    runner = checks._NumpyOnly.__new__(checks._NumpyOnly)
    runner.name, runner.cell = "double", cell
    assert np.array_equal(runner(np.arange(3)), [0, 2, 4])  # the jnp statements were left out
    needs_jax = checks._NumpyOnly.__new__(checks._NumpyOnly)
    needs_jax.name, needs_jax.cell = "grad", "def grad(v):\n    import jax\n    return jax.grad(lambda u: u)(v)\n"
    with pytest.raises(checks.LearnerRaised, match="runs without JAX") as raised:
        needs_jax(1.0)
    assert raised.value.learner_mro[0] == "ModuleNotFoundError"
    objective = checks.tanh_network(np.eye(2, dtype=np.float32), 2)
    central = checks._NumpyOnly.__new__(checks._NumpyOnly)
    central.name = "central"
    central.cell = (
        "def central(fn, x, d, eps):\n    return (float(fn(x + eps * d)) - float(fn(x - eps * d))) / (2 * eps)\n"
    )
    assert central(objective, np.ones(2), np.ones(2), 1e-3) == pytest.approx(
        2 * 2 * np.tanh(np.tanh(1.0)) * (1 - np.tanh(np.tanh(1.0)) ** 2) * (1 - np.tanh(1.0) ** 2), rel=1e-4
    )
    assert "jax" not in sys.modules.get("remat_checks_under_test", checks).__dict__
