"""How a graded cell checks an answer, without a kernel.

solutions/remat_checks.py defines each judgment's verdict and the report, the timed executable a
learner's timing code is checked with, and `numpy_only`, which runs an answer cell where JAX
cannot be imported. The same code runs in a learner's JupyterLab and in the grader's judge
(autograder/judge/core.py, tested in tests/integration/test_judge.py).
"""

from __future__ import annotations

import importlib.util
import sys
import time

import numpy as np
import pytest

from autograder.course.paths import SOLUTIONS


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
def test_close_passes_within_tolerance(checks):
    """`close` passes within the tolerance and says what it found outside."""
    assert checks.judge(_judgment(checks, "close", [1.0, 2.0], [1.0, 2.0 + 1e-7], rtol=1e-6)) is None
    message = checks.judge(_judgment(checks, "close", [1.0, 2.1], [1.0, 2.0], rtol=1e-6))
    assert "within rtol=1e-06" in message and "entry 1 of 2: found 2.1, expected 2, off by 0.1" in message
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
    assert "x at least 0.009, found 0.001 (number 2 of 2)" in checks.judge(
        _judgment(checks, "at_least", [0.01, 0.001], 0.009)
    )
    assert checks.judge(_judgment(checks, "below", [0.01], 0.1)) is None
    assert "below" in checks.judge(_judgment(checks, "below", [0.2], 0.1))
    raised = {"kind": "raises", "what": "f()", "expected": "ValueError"}
    assert checks.judge({**raised, "found": ["ValueError", "Exception"]}) is None
    assert "returned normally" in checks.judge({**raised, "found": None})
    assert "raised TypeError" in checks.judge({**raised, "found": ["TypeError", "Exception"]})


def test_report_names_points_checked_here(checks):
    """The report says which points were checked here."""
    items = [{"points": 1, "what": "a", "failure": None}, {"points": 1, "what": "b", "failure": "expected 1, found 2"}]
    lines, earned, checked = checks.report_lines(items, "'Your turn'")
    assert lines[0] == "[PASS] 1/1  a" and lines[1] == "[FAIL] 0/1  b" and "where to look: 'Your turn'" in lines[3]
    assert (earned, checked) == (1.0, 2.0)
    assert (
        checks.points_line(1, 1, 3) == "1 of 1 points checked here; the cell is worth 3: 2 more are checked when graded"
    )
    assert checks.points_line(2, 3, 3) == "2 of 3 points"


def test_failure_shown_once_and_cell_raises(checks, monkeypatch, capsys):
    """A learner sees the failure once and the cell raises."""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    cell = checks.Checks(3, where="'Your turn'")
    with cell.item(1, "right"):
        cell.close([1.0], [1.0], rtol=1e-6)
    with cell.item(1, "wrong"):
        cell.equal(2, 1, what="the count")
    with pytest.raises(checks.CheckFailed) as raised:
        cell.score()
    # The report is the error, and nothing else says it: not printed before, and IPython shows
    # the report's lines in place of a traceback (what nbgrader's validator shows of the cell).
    assert capsys.readouterr().out == ""
    shown = raised.value._render_traceback_()
    assert shown == str(raised.value).splitlines()
    assert shown[:2] == ["[PASS] 1/1  right", "[FAIL] 0/1  wrong"]
    assert "\n".join(shown).count("expected the count: 1, found 2") == 1
    assert shown[-1] == "1 of 2 points checked here; the cell is worth 3: 1 more is checked when graded"
    # nbgrader's validator cuts each line of a cell's error at 87 characters, its indent included.
    long = checks.Checks(1, where="'a section with a long name': a function with a long name")
    with long.item(1, "an item whose description alone is long enough to need a second line of its own"):
        long.close(np.linspace(0, 1, 16), np.linspace(0, 1, 16) + 1e-3, rtol=1e-6, what="a vector with a long name")
    with pytest.raises(checks.CheckFailed) as raised:
        long.score()
    shown = raised.value._render_traceback_()
    assert max(len(line) for line in shown) <= 83 and len(shown) > 5
    assert "entry 0 of 16: found 0, expected 0.001, off by 0.001" in " ".join(line.strip() for line in shown)
    passing = checks.Checks(1, where="here")
    with passing.item(1, "right"):
        passing.equal(1, 1, what="x")
    assert passing.score() is None and capsys.readouterr().out == "[PASS] 1/1  right\n1 of 1 points\n"


def test_close_shows_worst_entry_vs_tolerance(checks):
    """Two float32 vectors printed to six digits can look the same: the message names the entry,
    shows both values in full, the difference and the room it had, and never a tolerance of 0."""
    expected = np.linspace(-1.0, 1.0, 16) * 1e-3
    found = expected.copy()
    found[5] += 3e-8
    found[9] += 2e-8
    message = checks.judge(_judgment(checks, "close", found, expected, rtol=0.0, atol=1e-8))
    assert "rtol" not in message and "within atol=1e-08" in message
    assert "(2 of 16 entries are outside)" in message and "entry 5 of 16" in message
    assert f"found {found[5]:.9g}, expected {expected[5]:.9g}, off by 3e-08 where 1e-08 is allowed, 3 times that" in (
        message
    )
    matrix = checks.judge(_judgment(checks, "close", [[1.0, 2.0], [3.0, 4.5]], [[1.0, 2.0], [3.0, 4.0]], rtol=1e-3))
    assert "entry (1, 1) of 4: found 4.5, expected 4" in matrix and "within rtol=0.001 of" in matrix
    scalar = checks.judge(_judgment(checks, "close", 1.1, 1.0, rtol=1e-3, atol=1e-6))
    assert "within rtol=0.001 + atol=1e-06 of the reference; found 1.1, expected 1" in scalar


def test_bad_difference_quotient_names_mistake(checks):
    """The lesson's float32 network along (1, ..., 1): a one-sided formula, a factor, a reversed
    sign, a step lost to rounding and a step merely too small each get their own reading."""
    rng = np.random.default_rng(0)
    weights = (0.1 * rng.normal(size=(16, 16))).astype(np.float32)
    fn = checks.tanh_network(weights, 4)
    point, direction = np.linspace(-0.5, 0.5, 16, dtype=np.float32), np.ones(16, np.float32)
    exact = _float64_slope(weights, point, direction, 4)

    def read(found, eps):
        return checks.difference_diagnosis(fn, point, direction, eps, found, exact, 3e-3)

    def value(formula, eps):
        up, zero, down = (float(fn(point + s * eps * direction)) for s in (1, 0, -1))
        return {"forward": (up - zero) / eps, "backward": (zero - down) / eps, "central": (up - down) / (2 * eps)}[
            formula
        ]

    assert "one-sided difference (f(x + εd) − f(x))/ε" in read(value("forward", 1e-2), 1e-2)
    assert "one-sided difference (f(x) − f(x − εd))/ε" in read(value("backward", 1e-2), 1e-2)
    assert read(2 * exact, 1e-3).startswith("twice the slope")
    assert read(0.5 * exact, 1e-3).startswith("half the slope")
    assert read(-exact, 1e-3).startswith("minus the slope")
    small = read(value("central", 1e-7), 1e-7)
    assert small.startswith("ε = 1e-07 is too small for float32") and "one-sided" not in small
    assert read(value("central", 1e-12), 1e-12).startswith("the step is lost: in float32")
    assert read(0.0, 1e-3).startswith("exactly 0")
    assert "off by" in read(exact * 1.3, 1e-3)
    large = read(value("central", 0.5), 0.5)
    assert large.startswith("ε = 0.5 is too large") and "truncation" in large, large
    assert "too large" not in read(exact * 1.3, 0.5)  # not the central difference: no reading of its step
    # A quadratic: the central difference is exact, a forward one off by eps * scale * |d|**2.
    bowl, at, along = checks.scaled_square(40.0), np.array([0.3, -0.2]), np.array([0.6, 0.8])
    slope = 2.0 * 40.0 * float(at @ along)
    forward = (float(bowl(at + 1e-2 * along)) - float(bowl(at))) / 1e-2
    assert forward - slope == pytest.approx(1e-2 * 40.0)
    assert "one-sided" in checks.difference_diagnosis(bowl, at, along, 1e-2, forward, slope, 1e-3)


def _float64_slope(weights, point, direction, depth):
    """grad(sum(v_depth**2)) . direction, in float64, by the chain rule."""
    weights, values = np.asarray(weights, np.float64), [np.asarray(point, np.float64)]
    for _ in range(depth):
        values.append(np.tanh(weights @ values[-1]))
    bar = 2.0 * values[-1]
    for h in values[:0:-1]:
        bar = weights.T @ ((1.0 - h * h) * bar)
    return float(bar @ np.asarray(direction, np.float64))


def test_stock_nbgrader_gets_points_as_value(checks, monkeypatch, capsys):
    """Stock nbgrader gets the points as the cell's value."""
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    cell = checks.Checks(2, where="here")
    with cell.item(1, "right"):
        cell.equal(1, 1, what="x")
    with cell.item(1, "raises"):
        raise ZeroDivisionError("boom")
    assert cell.score() == 1.0
    assert "your code raised ZeroDivisionError: boom" in capsys.readouterr().out


def test_judged_cell_returns_points_silently(checks, monkeypatch, capsys):
    """In the judge, a cell neither prints nor raises and returns its points."""
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
    assert "samples at least 0.035, found 0.03 (number 2 of 2)" in cell.items[-1]["failure"]
    with cell.item(1, "as many bounds as numbers"):
        cell.below([0.02, 0.03, 0.04], [1.0, 1.0], what="samples")
    assert "expected 2 of samples, found 3" in cell.items[-1]["failure"]


def test_remote_learner_exception_reads_as_theirs(checks):
    """A learner exception from another process reads as the learner's."""
    raised = checks.LearnerRaised(["NotImplementedError", "RuntimeError", "Exception"], "")
    assert checks.raised_names(raised)[0] == "NotImplementedError"
    cell = checks.Checks(1, where="here")
    with cell.item(1, "unanswered"):
        raise raised
    assert "NotImplementedError" in cell.items[-1]["failure"]


def test_fresh_inputs_follow_judge_seed(checks, monkeypatch):
    """Fresh inputs repeat locally and follow the judge's seed."""
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


def test_honest_samples_within_executable_times(checks):
    """Honest samples lie between what the executable saw. (The upper bounds run from the end of
    each wait before a timed call, so the warm-up's 0.05 s lies in none of them; a bound of 0.05 s
    on the samples themselves was a clock's, which a loaded machine passed.)"""
    timed = checks.TimedExecutable(first_call=0.05, result_delays=(0.004, 0.006))
    samples = _time(timed, 4)
    assert timed.calls == 5
    assert np.all(np.asarray(samples) >= timed.shortest_samples(4))
    assert np.all(np.asarray(samples) < timed.longest_samples(4))


def test_made_up_or_unwaited_samples_do_not_fit(checks):
    timed = checks.TimedExecutable(result_delays=(0.004, 0.011, 0.006, 0.009))
    _time(timed, 4)
    made_up = np.full(4, 0.0075)  # the mean of the delays, but not the delays
    assert not (np.all(made_up >= timed.shortest_samples(4)) and np.all(made_up < timed.longest_samples(4)))
    unwaited = checks.TimedExecutable(result_delays=(0.01,))
    samples = _time(unwaited, 4, wait=False)
    assert np.any(np.asarray(samples) < unwaited.shortest_samples(4))


def test_first_calls_cost_what_they_are_given(checks):
    """The first calls of a timed executable take their own costs (warm-ups pay them), the calls after
    none; `first_call` is the first one's alone."""
    timed = checks.TimedExecutable(first_calls=(0.03, 0.02), result_delays=(0.001,))
    assert [timed.delay("call", call) for call in (1, 2, 3)] == [0.03, 0.02, 0.0]
    assert [checks.TimedExecutable(first_call=0.05).delay("call", call) for call in (1, 2)] == [0.05, 0.0]
    started = time.perf_counter()
    timed(None)
    timed(None)
    assert time.perf_counter() - started >= 0.05


def test_reordered_samples_are_told_apart(checks):
    """Samples that fit their calls only in another order (sorted) are told apart from honest ones
    and from made-up ones."""
    timed = checks.TimedExecutable(result_delays=(0.6, 0.3, 0.1))
    honest = _time(timed, 3, warm_up=False)
    assert not timed.fit_in_another_order(honest, 3)
    assert timed.fit_in_another_order(sorted(honest), 3)
    assert not timed.fit_in_another_order([0.5, 0.5, 0.5], 3)
    assert not timed.fit_in_another_order(honest[:2], 3)


def test_reordered_samples_are_told_apart_when_load_reorders_the_durations(checks):
    """On a loaded machine the measured durations need not keep the order of the results' delays
    (here the last call, the quickest to be ready, was measured longer than the one before it):
    sorted samples still fit their calls in some order, and are told apart by that alone."""
    timed = checks.TimedExecutable(result_delays=(0.07, 0.05, 0.03, 0.01))
    timed.started = 0.0
    for call, (called, waited) in enumerate(((0.0, 0.071), (0.072, 0.124), (0.125, 0.170), (0.171, 0.221)), 1):
        timed.note("call", call, called)
        timed.note("waited", call, waited)
    timed.note("end", 4, 0.222)
    honest = [0.0705, 0.0515, 0.0445, 0.0495]
    assert not timed.fit_in_another_order(honest, 4)
    assert timed.fit_in_another_order(sorted(honest), 4)
    assert not timed.fit_in_another_order([0.06, 0.06, 0.06, 0.06], 4)  # none fits the first call


# ---------------------------------------------------------------------------------------
# NumPy-only tasks.
# ---------------------------------------------------------------------------------------
def _defined(checks, source: str, name: str):
    namespace = {}
    exec(compile(source, "<answer cell>", "exec"), namespace)
    function = namespace[name]
    return checks._NumpyOnly.__new__(checks._NumpyOnly), function


def test_numpy_only_runs_cell_without_jax(checks, tmp_path, monkeypatch):
    """NumPy-only runs the answer cell where JAX cannot be imported."""
    monkeypatch.syspath_prepend(str(SOLUTIONS))
    cell = "import jax.numpy as jnp\n\n\ndef double(v):\n    return np.asarray(v) * 2\n\n\nSCALE = jnp.float32(2)\n"
    runner = checks._NumpyOnly.__new__(checks._NumpyOnly)
    runner.name, runner.cell = "double", cell
    assert np.array_equal(runner(np.arange(3)), [0, 2, 4])  # the jnp statements were left out
    needs_jax = checks._NumpyOnly.__new__(checks._NumpyOnly)
    needs_jax.name, needs_jax.cell = "grad", "def grad(v):\n    import jax\n    return jax.grad(lambda u: u)(v)\n"
    with pytest.raises(checks.LearnerRaised, match="JAX is not available here; use NumPy") as raised:
        needs_jax(1.0)
    assert raised.value.learner_mro[0] == "ModuleNotFoundError"
    # jnp imported in another cell of the notebook, or by this cell's own import that cannot run
    # here: the learner is told what to change, not only that a name is missing.
    for cell in (
        "def triple(v):\n    return jnp.asarray(v) * 3\n",
        "import jax.numpy as xp\n\n\ndef triple(v):\n    return xp.asarray(v) * 3\n",
    ):
        uses_jnp = checks._NumpyOnly.__new__(checks._NumpyOnly)
        uses_jnp.name, uses_jnp.cell = "triple", cell
        with pytest.raises(checks.LearnerRaised, match="JAX is not available here; use NumPy") as raised:
            uses_jnp(1.0)
        assert raised.value.learner_mro[0] == "NameError"
    # Another missing name is the learner's own slip, said as Python says it.
    typo = checks._NumpyOnly.__new__(checks._NumpyOnly)
    typo.name, typo.cell = "triple", "def triple(v):\n    return nmp.asarray(v) * 3\n"
    with pytest.raises(checks.LearnerRaised, match="name 'nmp' is not defined") as raised:
        typo(1.0)
    assert "JAX" not in str(raised.value)
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
