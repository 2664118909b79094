# %% [markdown]
# # Stage 2 of 5 · Build
#
# Both policies: what each saves, gradients against your oracle, estimates, timings.

# %% [markdown]
# ## Your map
#
# - **This stage:** about 35 minutes; break after the oracle.
# - **Needs:** stage 1's rule for one layer backward.
# - **Points:** 15, checked automatically (five graded cells).
# - **Compare with:** `reference-execution.txt` from "Stage 2 of 5 · Build" (timings differ).

# %% [markdown]
# ## The network and what each policy saves
#
# In `remat_lesson.py`: `W` is `0.1 · normal(16×16)`, `x` 16 points on `[−0.5, 0.5]`; `plain`
# applies `v ← tanh(W @ v)` four times, then `sum(v²)`; `remat` checkpoints each layer.
# `saved_residual_lines` returns what `print_saved_residuals` prints.

# %%
import jax
import numpy as np

from remat_lesson import DEPTH, W, plain, remat, saved_residual_lines, x

print(f"Stage 2 of 5 · Build · JAX {jax.__version__} on {jax.default_backend()}")
print(f"W {W.shape} {W.dtype}; x {x.shape}; depth {DEPTH}")
print("plain objective:", float(plain(x)), "| remat objective:", float(remat(x)))
for name, fn in (("plain", plain), ("remat", remat)):
    lines = saved_residual_lines(fn, x)
    print(f"{name}: {len(lines)} entries")
    print("\n".join("  " + line for line in lines))

# %% [markdown]
# A line gives a shape, what the value is, and where it was made (file, line), which moves with
# the code: **never compare the text**. `from a constant` is `W`.
# Plain keeps each layer's `h` and `1 − h` (a `sub`: JAX computes `1 − h²` as `(1 + h)(1 − h)`);
# remat keeps what it recomputes layers from, and the last output for the loss's derivative `2v`.

# %% [markdown]
# ## Your turn: count residual entries by kind
#
# Write `residual_kinds(fn, *args)`: a `collections.Counter` of the kinds of `fn`'s saved values
# (`saved_residual_lines`): a line without shape and location, such as `"output of tanh"` or
# `"from a constant"`. Cut at the ` from ` that starts the location (paths may hold spaces).

# %% nbgrader={"solution": true, "grade_id": "residual-kinds"}
import collections


def residual_kinds(fn, *args):
    """Counter of saved-residual kinds (shape and source location stripped)."""
    ### BEGIN SOLUTION
    kinds = collections.Counter()
    for line in saved_residual_lines(fn, *args):
        _shape, description = line.split(" ", 1)
        kind = description if description.startswith("from ") else description.split(" from ", 1)[0]
        kinds[kind] += 1
    return kinds
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test-residual-kinds", "points": 3}
import re

import jax.numpy as jnp
import numpy as np

from remat_lesson import Checks, make_objective, objective_defined_at, plain, remat, saved_residual_lines, x

checks = Checks(3, where="'Your turn: count residual entries by kind': residual_kinds")


def kinds_hint(found) -> str | None:
    """What a wrong set of kinds most likely got wrong."""
    kinds = [str(kind) for kind in dict(found)]
    if len(kinds) == 1:
        return "every entry is in one kind: the kind is what each line says the value is, such as 'output of tanh'"
    if any(":" in kind or "(" in kind for kind in kinds):
        return "some kinds still carry where the value was made: cut the line at the ' from ' that starts it"
    return None


def check_kinds(fn, *args, expected, what):
    found = dict(residual_kinds(fn, *args))
    checks.equal(found, expected, what=what, hint=kinds_hint(found))


with checks.item(1, "the lesson network: what plain and remat save, by kind"):
    # The kinds of the two lists printed above (JAX 0.9.2).
    check_kinds(
        plain,
        x,
        expected={"from a constant": 1, "output of tanh": 4, "output of sub": 4},
        what="plain's kinds",
    )
    check_kinds(
        remat,
        x,
        expected={"from a constant": 1, "from the argument v": 1, "output of tanh": 4},
        what="remat's kinds",
    )
### BEGIN HIDDEN TESTS
LOCATED = re.compile(r"^(output of jitted function '[^']*'|named '[^']*'|output of \S+) from ")


def reference_kinds(fn, *args):
    """The kinds of fn's saved residuals: a location starts after the kind's own words."""
    kinds = {}
    for line in saved_residual_lines(fn, *args):
        description = line.split(" ", 1)[1]
        match = LOCATED.match(description)
        kind = match.group(1) if match else description
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


with checks.item(1, "a fresh network of another depth and width: its kinds, for both policies"):
    rng = checks.rng()
    depth, width = int(rng.integers(2, 7)), int(rng.integers(3, 10))
    w_fresh = jnp.asarray((0.4 * rng.normal(size=(width, width))).astype(np.float32))
    x_fresh = jnp.asarray(rng.normal(size=width).astype(np.float32))
    for rematerialize in (False, True):
        fresh = make_objective(w_fresh, depth, rematerialize)
        check_kinds(
            fresh,
            x_fresh,
            expected=reference_kinds(fresh, x_fresh),
            what=f"the kinds of a depth-{depth} network, {'remat' if rematerialize else 'plain'}",
        )
with checks.item(1, "kinds read from any location: code in a file whose path holds spaces, a line with no column"):
    elsewhere = objective_defined_at(f"a lesson copy/my notebook {checks.rng().integers(100)}.py")
    check_kinds(
        elsewhere,
        jnp.linspace(0.0, 1.0, 3),
        expected=reference_kinds(elsewhere, jnp.linspace(0.0, 1.0, 3)),
        what="kinds",
    )
### END HIDDEN TESTS
checks.score()


# %% [markdown]
# ## An oracle that knows nothing about JAX
#
# A gradient not from JAX: stage 1's rule from the top, a **reverse sweep**. With
# `vk = tanh(W v(k−1))`, `v0 = x`: keep `v0 … vL`; `v̄L = 2 vL`; for `k = L … 1`,
# `v̄(k−1) = Wᵀ(v̄k ⊙ (1 − vk²))`. It meets every layer's cotangent on the way down; a forward
# method (differences, tangents) gives only the input's, one direction at a time.

# %% [markdown]
# ## Your turn: the NumPy reverse recurrence
#
# Write `reverse_oracle(weights, x, depth)`, returning the list `[v̄0, v̄1, …, v̄L]` by layer
# (`v̄0` is the gradient with respect to `x`). NumPy only: one check runs this cell alone.

# %% nbgrader={"solution": true, "grade_id": "reverse-oracle"}
import numpy as np


def reverse_oracle(weights, x, depth):
    """[v̄_0, ..., v̄_L]: the cotangent of each layer's value, v_{k+1} = tanh(weights @ v_k), v_0 = x,
    loss sum(v_L**2), by an explicit reverse sweep."""
    ### BEGIN SOLUTION
    weights = np.asarray(weights, dtype=np.float64)
    values = [np.asarray(x, dtype=np.float64)]
    for _ in range(depth):
        values.append(np.tanh(weights @ values[-1]))
    cotangents = [2.0 * values[-1]]
    for h in reversed(values[1:]):
        cotangents.append(weights.T @ (cotangents[-1] * (1.0 - h**2)))
    return cotangents[::-1]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test-reverse-oracle", "points": 3}
import jax
import jax.numpy as jnp
import numpy as np

from remat_lesson import DEPTH, Checks, W, fresh_network, make_objective, numpy_only, x

checks = Checks(3, where="'Your turn: the NumPy reverse recurrence': reverse_oracle")


def jax_cotangents(weights, x0, depth):
    """The gradient of the loss with respect to each layer's value v_k: jax.grad of the layers
    after it, at v_k."""
    values = [jnp.asarray(x0)]
    for _ in range(depth):
        values.append(jnp.tanh(jnp.asarray(weights) @ values[-1]))
    return np.stack([np.asarray(jax.grad(make_objective(weights, depth - k))(values[k])) for k in range(depth + 1)])


def check_cotangents(found, expected, what):
    """Every layer's cotangent, v̄_0 first; a list in the reverse order, or one vector, is told so."""
    expected = np.asarray(expected, np.float64)
    hint = "one cotangent per layer value, v_0 to v_L: a list of depth + 1 vectors, the gradient first"
    try:
        if np.allclose(np.asarray(found, np.float64)[::-1], expected, rtol=1e-4, atol=1e-7):
            hint = "the cotangents are there in reverse order: index them by layer, v̄_0 (the gradient) first"
    except (TypeError, ValueError):
        pass
    checks.equal(len(found), len(expected), what=f"the number of cotangents ({what})", hint=hint)
    checks.close(found, expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()), what=what, hint=hint)


with checks.item(1, "the lesson network: the cotangent of every layer's value agrees with JAX's"):
    # The visible reference is jax.grad of the layers after each value: a NumPy sweep here would
    # show the answer. The hidden items check against NumPy.
    check_cotangents(reverse_oracle(np.asarray(W), np.asarray(x), DEPTH), jax_cotangents(W, x, DEPTH), "cotangents")


### BEGIN HIDDEN TESTS
def reference_cotangents(weights, x0, depth):
    weights, values = np.asarray(weights, np.float64), [np.asarray(x0, np.float64)]
    for _ in range(depth):
        values.append(np.tanh(weights @ values[-1]))
    bars = [2.0 * values[-1]]
    for h in values[:0:-1]:
        bars.append(weights.T @ ((1.0 - h * h) * bars[-1]))
    return np.stack(bars[::-1])


def saturated_network(rng):
    """A float64 network whose every pre-activation lies between about 4 and 6 in size: the loss is
    about its width while the gradient's entries are 1e-10 or smaller. A reverse sweep resolves
    them to float64's rounding; a finite difference with an ordinary step cannot (its rounding
    error, about 1e-16 of the loss over the step, is larger than the gradient itself)."""
    width, depth = int(rng.integers(5, 13)), int(rng.integers(4, 6))
    signs = rng.choice([-1.0, 1.0], size=(2, width))
    weights = np.diag(rng.uniform(4.5, 5.5, width) * signs[0]) + rng.normal(size=(width, width)) * (0.3 / width**0.5)
    return weights, rng.uniform(0.8, 1.2, width) * signs[1], depth


with checks.item(1, "a fresh network: the cotangent of every layer's value agrees with an independent reference"):
    w_fresh, x_fresh, depth = fresh_network(checks.rng(), depths=(3, 8), widths=(5, 12), scale=0.4)
    w_fresh, x_fresh = w_fresh.astype(np.float64), x_fresh.astype(np.float64)
    check_cotangents(
        reverse_oracle(w_fresh, x_fresh, depth),
        reference_cotangents(w_fresh, x_fresh, depth),
        f"cotangents (depth {depth}, width {len(x_fresh)})",
    )
with checks.item(
    1,
    "the oracle, run from its answer cell alone where JAX cannot be imported, gives the gradient, "
    "on the lesson network and on a saturated one",
):
    oracle = numpy_only(reverse_oracle)
    checks.close(
        oracle(np.asarray(W), np.asarray(x), DEPTH)[0],
        reference_cotangents(W, x, DEPTH)[0],
        rtol=3e-5,
        atol=1e-7,
        what="gradient (v̄_0)",
        hint="the oracle must be NumPy only: its answer cell runs in a process without JAX",
    )
    w_saturated, x_saturated, depth = saturated_network(checks.rng())
    expected = reference_cotangents(w_saturated, x_saturated, depth)[0]
    checks.close(
        oracle(w_saturated, x_saturated, depth)[0],
        expected,
        rtol=1e-4,
        atol=1e-5 * float(np.abs(expected).max()),
        what=f"gradient of a saturated network, entries of 1e-10 or less (depth {depth}, width {len(x_saturated)})",
        hint="a reverse sweep resolves them to rounding; a finite difference of the loss cannot",
    )
### END HIDDEN TESTS
checks.score()


# %% [markdown]
# ## Your turn: both gradients
#
# `compile_gradient(fn, x)` compiles `jax.grad(fn)` for `x`'s shape. Write:
#
# - `policy_objectives(weights, depth)`: `{"plain": ..., "remat": ...}`, built with
#   `make_objective`;
# - `policy_gradients(objectives, x)`: for each name, the gradient of *that* objective at `x`,
#   via `compile_gradient`, under the same name.
#
# The checks also hand it other objectives.

# %% nbgrader={"solution": true, "grade_id": "policy-gradients"}
from remat_lesson import compile_gradient, make_objective


def policy_objectives(weights, depth):
    """The plain objective and the per-layer-checkpointed one, for these weights and depth."""
    ### BEGIN SOLUTION
    return {
        "plain": make_objective(weights, depth, rematerialize=False),
        "remat": make_objective(weights, depth, rematerialize=True),
    }
    ### END SOLUTION


def policy_gradients(objectives, x):
    """{name: the gradient at x of objectives[name]}, each compiled with compile_gradient."""
    ### BEGIN SOLUTION
    return {name: compile_gradient(objective, x)(x) for name, objective in objectives.items()}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test-policy-gradients", "points": 3}
import jax
import jax.numpy as jnp
import numpy as np

from remat_lesson import DEPTH, Checks, W, fresh_network, gradient, make_objective, plain, vjp_residuals, x


def jax_gradient(weights, x0, depth):
    """jax.grad of the shipped plain objective."""
    return jax.grad(make_objective(weights, depth, rematerialize=False))(x0)


def check_close(found, expected, what, hint=None):
    expected = np.asarray(expected, np.float64)
    checks.close(found, expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()), what=what, hint=hint)


def check_gradients(weights, x0, depth, reference):
    found = policy_gradients(policy_objectives(weights, depth), x0)
    checks.equal(sorted(found), ["plain", "remat"], what="the keys")
    for name in ("plain", "remat"):
        check_close(found[name], reference(weights, x0, depth), f"{name} gradient")


checks = Checks(3, where="'Your turn: both gradients': policy_objectives and policy_gradients")
# The visible reference is jax.grad of the shipped objective: a NumPy one here would give away
# the reverse-oracle task above. The hidden item checks against NumPy.
with checks.item(1, "each name gets its own objective's gradient; the lesson's two policies agree with jax.grad"):
    check_gradients(W, x, DEPTH, jax_gradient)
    # Two objectives with different gradients: each name's gradient must come from its own.
    other = make_objective(0.5 * W, DEPTH - 1, rematerialize=True)
    handed = policy_gradients({"plain": plain, "remat": other}, x)
    for name, objective in (("plain", plain), ("remat", other)):
        check_close(
            handed[name],
            jax.grad(objective)(x),
            f"the gradient under {name!r} when handed two different objectives",
            hint="compile and evaluate the gradient of each objective you are handed, under its own name",
        )


def not_saved_by(found, expected) -> int:
    """How many of the values found are none of the expected ones (same shape, equal to float32
    rounding; each expected value matched once): entries a count alone would not tell apart."""
    left = [np.asarray(value, np.float64) for value in expected]
    strangers = 0
    for value in (np.asarray(v, np.float64) for v in found):
        match = next(
            (i for i, e in enumerate(left) if e.shape == value.shape and np.allclose(value, e, rtol=1e-5, atol=1e-6)),
            None,
        )
        if match is None:
            strangers += 1
        else:
            left.pop(match)
    return strangers


with checks.item(1, "the lesson network: plain saves 9 residual entries, the per-layer checkpoint 6"):
    objectives = policy_objectives(W, DEPTH)
    saved = {name: vjp_residuals(objectives[name], x) for name in ("plain", "remat")}
    checks.equal(
        [len(saved[name]) for name in ("plain", "remat")],
        [9, 6],
        what="entries saved by [plain, remat]",
        hint="remat is make_objective(..., rematerialize=True): one checkpoint per layer",
    )
    # The entries themselves, by value: those the shipped objectives save (computed here).
    shipped = {name: vjp_residuals(make_objective(W, DEPTH, rematerialize=name == "remat"), x) for name in saved}
    checks.equal(
        [not_saved_by(saved[name], shipped[name]) for name in ("plain", "remat")],
        [0, 0],
        what="entries saved by [plain, remat] that the shipped objectives do not save",
        hint="build both with make_objective and its rematerialize flag, adding nothing to the loss",
    )
    # The programs counted must be the objectives: each one's gradient, from the same program.
    for name in ("plain", "remat"):
        check_close(
            gradient(objectives[name], x),
            jax_gradient(W, x, DEPTH),
            f"the gradient of the {name} objective whose entries were counted",
        )


### BEGIN HIDDEN TESTS
def reference_sweep(weights, x0, depth):
    """An independent float64 gradient of sum(v_depth**2), to check both policies against."""
    weights, values = np.asarray(weights, np.float64), [np.asarray(x0, np.float64)]
    for _ in range(depth):
        values.append(np.tanh(weights @ values[-1]))
    bar = 2.0 * values[-1]
    for h in values[:0:-1]:
        bar = weights.T @ ((1.0 - h * h) * bar)
    return bar


with checks.item(1, "a fresh network: both gradients agree with an independent reference"):
    w_fresh, x_fresh, depth = fresh_network(checks.rng(), depths=(3, 7), widths=(5, 10), scale=0.5)
    check_gradients(jnp.asarray(w_fresh), jnp.asarray(x_fresh), depth, reference_sweep)
### END HIDDEN TESTS
checks.score()


# %% [markdown]
# ## Compiled memory estimates
#
# `compiled.memory_analysis()` gives the compiler's plan in bytes. Where a backend lacks it, JAX
# 0.9.2 returns `None` (others raise `NotImplementedError`): **unavailable**, not 0 bytes. All
# zeros deserve suspicion too (jax-ml/jax issue 18954, on GPU).
#
# ## Your turn: a memory report that keeps "unavailable" apart
#
# Write `memory_report(compiled)`: `{field: int}` for the four `MEMORY_FIELDS`, or `None` where
# the analysis is unavailable.

# %% nbgrader={"solution": true, "grade_id": "memory-report"}
from remat_lesson import MEMORY_FIELDS


def memory_report(compiled):
    """The compiler's four byte counts for an executable, or None when it cannot say."""
    ### BEGIN SOLUTION
    try:
        analysis = compiled.memory_analysis()
    except NotImplementedError:
        return None
    if analysis is None:
        return None
    return {name: int(getattr(analysis, name)) for name in MEMORY_FIELDS}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test-memory-report", "points": 3}
import jax.numpy as jnp
import numpy as np

from remat_lesson import (
    Checks,
    WithoutMemoryAnalysis,
    compile_gradient_with_analysis,
    make_objective,
    memory_fields,
    plain,
    x,
)

checks = Checks(3, where="'Your turn: a memory report that keeps \"unavailable\" apart': memory_report")
UNAVAILABLE = "an analysis that is unavailable is None, not 0 bytes: return None"
with checks.item(1, "an analysis that returns None is reported as None; the lesson's plain gradient in full"):
    compiled = compile_gradient_with_analysis(plain, x)
    # As a backend without memory analysis presents the same executable.
    checks.equal(
        memory_report(WithoutMemoryAnalysis(compiled)),
        None,
        what="the report of an unavailable analysis",
        hint=UNAVAILABLE,
    )
    checks.equal(
        memory_report(compiled), memory_fields(compiled.memory_analysis()), what="the report of plain's gradient"
    )
### BEGIN HIDDEN TESTS
rng = checks.rng()
width, depth = int(rng.integers(8, 48)), int(rng.integers(2, 6))
fresh = make_objective(jnp.asarray((0.2 * rng.normal(size=(width, width))).astype(np.float32)), depth, True)
available = compile_gradient_with_analysis(fresh, jnp.ones(width, jnp.float32))
with checks.item(1, "an analysis that raises NotImplementedError is reported as None, and a working one in full"):
    checks.equal(
        memory_report(WithoutMemoryAnalysis(available, raises=True)), None, what="the report of an analysis that raises"
    )
    checks.equal(
        memory_report(available),
        memory_fields(available.memory_analysis()),
        what=f"the report of a fresh program (width {width}) with its analysis",
    )
with checks.item(1, "a fresh program of another depth: the four fields, as the compiler reports them"):
    longer = make_objective(jnp.asarray((0.2 * rng.normal(size=(width, width))).astype(np.float32)), depth + 2, False)
    other = compile_gradient_with_analysis(longer, jnp.ones(width, jnp.float32))
    checks.equal(memory_report(other), memory_fields(other.memory_analysis()), what="the report")
### END HIDDEN TESTS
checks.score()


# %% [markdown]
# ## Timing, honestly
#
# A JAX call returns before its result exists: end each timed call with `block_until_ready()`.
# First calls pay one-off costs, not only the very first: make a few untimed **warm-up** calls.
# Keep every sample; summarize with the **median** and quartiles (25th, 75th percentiles), which
# one disturbed sample cannot drag as it drags the minimum or maximum.
#
# ## Your turn: synchronized timing samples
#
# Write `timing_samples(compiled, x, repeats=7, warmups=3)`: `warmups` untimed calls, then
# `repeats` timed, synchronized calls; return every duration in seconds, in order.

# %% nbgrader={"solution": true, "grade_id": "timing-samples"}
import time


def timing_samples(compiled, x, repeats=7, warmups=3):
    """Seconds per synchronized call, after `warmups` untimed calls; all samples, in order."""
    ### BEGIN SOLUTION
    for _ in range(warmups):
        compiled(x).block_until_ready()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        compiled(x).block_until_ready()
        samples.append(time.perf_counter() - start)
    return samples
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test-timing-samples", "points": 3}
import numpy as np

from remat_lesson import Checks, TimedExecutable, compile_gradient, plain, x

checks = Checks(3, where="'Your turn: synchronized timing samples': timing_samples")
IN_ORDER = "return the durations in the order you took them: they are measured samples, not a ranking"
WAIT = "wait for each result before stopping the clock, e.g. with block_until_ready()"
with checks.item(1, "the lesson gradient: all 7 samples kept, each a positive number of seconds"):
    executable = TimedExecutable(compile_gradient(plain, x))
    samples = timing_samples(executable, x, repeats=7, warmups=3)
    checks.equal(len(samples), 7, what="the number of samples (every one, not only the fastest)")
    checks.at_least(samples, 1e-9, what="each sample (seconds)")
    # Each sample lies within what its call allowed; compared smallest to smallest, so that this
    # item reads the durations and not their order (the next item reads the order).
    found = np.sort(np.asarray(samples, dtype=np.float64).ravel()) if np.size(samples) == 7 else samples
    checks.below(
        found,
        np.sort(executable.longest_samples(7)),
        what="each sample (seconds), smallest first, against what the calls allowed, smallest first",
        hint="no timed call lasted that long: return the durations you measured",
    )
# A timed executable chooses how long its calls and results take, unknown to your code, and
# notes when each call and wait happened.
with checks.item(1, "every timed call waits for its result, and the samples keep their order"):
    rng = checks.rng()
    # Each result takes far longer than the next: samples reordered by size no longer fit their calls.
    delays = np.sort(rng.uniform(0.008, 0.012, 4))[::-1] + np.array([0.06, 0.04, 0.02, 0.0])
    executable = TimedExecutable(result_delays=delays)
    samples = timing_samples(executable, None, repeats=4, warmups=1)
    checks.equal(len(samples), 4, what="the number of samples")
    # The order of the events decides, not their durations: on a loaded grader a call that is
    # not waited for can last as long as a result takes.
    checks.equal(
        executable.unwaited_calls(4),
        [],
        what="the calls (numbered from 1, warm-ups included) whose result was not waited for before the next call",
        hint=WAIT,
    )
    reordered = executable.fit_in_another_order(samples, 4)
    checks.at_least(
        samples,
        executable.shortest_samples(4),
        what="each sample (seconds), at least the time its result took to be ready",
        hint=IN_ORDER if reordered else WAIT,
    )
    checks.below(samples, executable.longest_samples(4), what="each sample (seconds)", hint=IN_ORDER)
### BEGIN HIDDEN TESTS
with checks.item(1, "fresh costs: exactly the warm-up calls asked for are made, and none is timed"):
    rng = checks.rng()
    # The first calls are slow, each less than the one before: a sample that holds one lasts at
    # least that call's cost; an honest one is far shorter, however loaded the grading machine.
    warmups = int(rng.integers(2, 5))
    costs = np.sort(rng.uniform(0.25, 0.5, warmups))[::-1]
    executable = TimedExecutable(first_calls=costs, result_delays=np.sort(rng.uniform(0.001, 0.003, 4)))
    samples = timing_samples(executable, None, repeats=4, warmups=warmups)
    checks.equal(executable.calls, warmups + 4, what=f"calls for warmups={warmups}, repeats=4")
    checks.equal(len(samples), 4, what="the number of samples")
    checks.below(
        samples,
        float(costs[-1]),
        what="each sample (seconds)",
        hint=f"the first {warmups} calls took {costs[-1]:.2f} s or more: make them the untimed warm-ups",
    )
### END HIDDEN TESTS
checks.score()


# %%
# Both policies side by side: entries, planned bytes, gradients, timings; then stage 5's record.
from remat_lesson import save_record

compiled_gradients = {"plain": compile_gradient(plain, x), "remat": compile_gradient(remat, x)}
memory = {name: memory_report(compiled) for name, compiled in compiled_gradients.items()}
for name, fn in (("plain", plain), ("remat", remat)):
    planned = "unavailable" if memory[name] is None else memory[name]
    print(f"{name:6s} {sum(residual_kinds(fn, x).values())} entries; planned bytes: {planned}")
gradient_plain, gradient_remat = (np.asarray(compiled(x)) for compiled in compiled_gradients.values())
np.testing.assert_allclose(gradient_remat, gradient_plain, rtol=1e-6, atol=0)
print(f"gradients agree within rtol 1e-6; largest difference {float(np.max(np.abs(gradient_remat - gradient_plain)))}")
timings = {name: timing_samples(compiled, x, repeats=7, warmups=3) for name, compiled in compiled_gradients.items()}
for name, samples in timings.items():
    q25, q50, q75 = np.percentile(np.asarray(samples) * 1e6, [25, 50, 75])
    print(
        f"{name:6s} median {q50:7.1f} µs, quartiles {q25:.1f} to {q75:.1f} µs; samples (µs):",
        [round(s * 1e6, 1) for s in samples],
    )
oracle = reverse_oracle(np.asarray(W), np.asarray(x), DEPTH)
record = {
    "residual_entries": {
        name: sum(residual_kinds(fn, x).values()) for name, fn in (("plain", plain), ("remat", remat))
    },
    "residual_kinds": {name: dict(residual_kinds(fn, x)) for name, fn in (("plain", plain), ("remat", remat))},
    "memory": memory,
    "max_abs_error": {
        f"{name}_vs_oracle": float(np.max(np.abs(np.asarray(g, np.float64) - oracle[0])))
        for name, g in (("plain", gradient_plain), ("remat", gradient_remat))
    },
    "timings_s": timings,
}
print("recorded", save_record("02-build", record))

# %% [markdown]
# Same gradient, fewer entries, the same 256 temporary bytes: **fewer entries need not mean
# fewer bytes**. Each compiled program keeps one 16-float vector per layer (4 × 64 bytes), and `W`
# is a constant (*Going deeper:* `deeper/02-what-autodiff-keeps.ipynb` reads this in the
# programs). Call a policy faster only when its quartile range
# lies wholly below the other's, run after run.
