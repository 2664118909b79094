# %% [markdown]
# # Stage 2 of 5 · Build
#
# We build the two differentiation policies for the lesson's network, list what each one
# saves, check both gradients against a reverse recurrence you write in NumPy, read the
# compiler's memory estimates and time the compiled gradients.

# %% [markdown]
# ## Your map
#
# - **This stage:** about 60 minutes, a natural break after the oracle task.
# - **Needs:** stage 1's rule for one layer backward (you write it again here, for the whole
#   network); no record of stage 1 is read.
# - **Points:** 15, checked automatically (five graded cells).
# - **Compare with:** `reference-execution.txt` beside this notebook, from the line
#   "Stage 2 of 5 · Build" on: with the pinned JAX 0.9.2 (and its XLA), counts and bytes should
#   match yours; timings will not.

# %% [markdown]
# ## The fixed network
#
# The network lives once, in `remat_lesson.py` beside this notebook, so every stage uses the
# same one: `W` is `0.1 · normal(16×16)` in float32 from seed 18, `x` is 16 evenly spaced
# points on `[−0.5, 0.5]`, and the objective applies `v ← tanh(W @ v)` four times, then
# returns `sum(v²)`. Here is the code that builds both policies:

# %%
import inspect

import jax

import remat_lesson
from remat_lesson import DEPTH, WIDTH, W, make_objective, plain, remat, x

print(f"Stage 2 of 5 · Build · JAX {jax.__version__} on {jax.default_backend()}\n")
print(
    f"W: shape {W.shape}, {W.dtype}, drawn from seed {remat_lesson.SEED}; "
    f"x: {x.shape[0]} points from {float(x[0])} to {float(x[-1])}; depth {DEPTH}\n"
)
print(inspect.getsource(make_objective))

# %% [markdown]
# `plain` keeps whatever autodiff wants; `remat` wraps each layer in `jax.checkpoint`. Both
# compute the same number:

# %%
print("plain objective:", float(plain(x)))
print("remat objective:", float(remat(x)))

# %% [markdown]
# ## A boundary goes around pure work
#
# When JAX recomputes a checkpointed layer, it replays the program it traced from your Python
# function; it does not call the Python function again. Count both: how often the layer's
# Python code runs while one gradient is taken (it appends to a list, a mutation JAX does not
# track), and how many `tanh` the gradient's two programs are written with.

# %%
import jax
import jax.numpy as jnp

from remat_lesson import forward_and_backward, primitive_counts


def python_calls_during_a_gradient(rematerialize):
    """How often the layer's Python code runs while one gradient is taken, and how many tanh
    the gradient's forward and backward programs are written with."""
    calls = []

    def layer(v):
        calls.append("called")  # state JAX cannot see
        return jnp.tanh(W @ v)

    step = jax.checkpoint(layer) if rematerialize else layer

    def objective(v):
        for _ in range(DEPTH):
            v = step(v)
        return jnp.sum(v * v)

    jax.grad(objective)(x)
    python_calls = len(calls)
    forward, backward = forward_and_backward(objective, x)
    return python_calls, primitive_counts(forward)["tanh"] + primitive_counts(backward)["tanh"]


for rematerialize in (False, True):
    calls, written = python_calls_during_a_gradient(rematerialize)
    print(
        f"{'per-layer checkpoint' if rematerialize else 'plain':>20}: the layer's Python code ran {calls}x "
        f"during jax.grad; the gradient's programs are written with {written} tanh"
    )

# %% [markdown]
# With the checkpoint the Python code ran once for four layers: `jax.checkpoint` traced it
# once and keeps that trace for every later call with the same shapes (it caches the trace of
# each function it wraps: `_trace_to_jaxpr` in `jax/_src/ad_checkpoint.py`). The programs
# are *written* with a `tanh` for every layer and another for every recomputation; whether
# the compiler runs both is another matter (stage 3 reads the compiled program: on CPU the
# recomputed `tanh` survives and only the duplicate products are merged). Four consequences
# follow, each shown below.
#
# **Python runs at trace time only, and a kept trace can go stale.** A layer that reads a
# Python value bakes it into the trace. Change the value, and the checkpointed layer goes on
# replaying the old one until JAX's caches are cleared:

# %%
layer_settings = {"scale": 1.0}


def scaled_layer(v):
    return jnp.tanh(layer_settings["scale"] * (W @ v))


def checkpointed_scaled(v):
    return jnp.sum(jax.checkpoint(scaled_layer)(v))


def plain_scaled(v):
    return jnp.sum(scaled_layer(v))


before = {"checkpointed": jax.grad(checkpointed_scaled)(x), "plain": jax.grad(plain_scaled)(x)}
layer_settings["scale"] = 2.0
for name, fn in (("checkpointed", checkpointed_scaled), ("plain", plain_scaled)):
    print(
        f"after the Python scale changed, the {name} gradient changed: {not jnp.array_equal(jax.grad(fn)(x), before[name])}"
    )
jax.clear_caches()
refreshed = jax.grad(checkpointed_scaled)(x)
print(
    "after jax.clear_caches(), the checkpointed gradient equals the plain one:",
    bool(jnp.allclose(refreshed, jax.grad(plain_scaled)(x))),
)

# %% [markdown]
# A Python flag that chooses what the layer does cannot be a traced argument at all: `if` needs
# a Python `bool`. `static_argnums` tells `jax.checkpoint` to pass that argument through as a
# Python value (and to trace again for each new value, the docstring's stated cost):


# %%
def layer_with_flag(v, training):
    h = jnp.tanh(W @ v)
    if training:  # a Python decision, made while tracing
        h = 0.5 * h
    return h


for options in ({}, {"static_argnums": (1,)}):
    flagged = jax.checkpoint(layer_with_flag, **options)
    try:
        jax.grad(lambda v, flagged=flagged: jnp.sum(flagged(v, True)))(x)
        print(f"jax.checkpoint(layer_with_flag, {options}): the gradient is taken")
    except jax.errors.TracerBoolConversionError as error:
        print(f"jax.checkpoint(layer_with_flag, {options}): {type(error).__name__}")

# %% [markdown]
# **Effects: JAX replays the ones it allows and refuses the rest.** A debug callback is
# allowed inside a checkpoint, so it runs again when the layer is recomputed. A host callback
# with side effects (`io_callback`, here given a derivative rule the way a logging library
# would) is another matter. Forward mode (`jax.jvp`) differentiates it like any function; the
# transforms that split a computation into a forward part and a later backward part
# (`jax.grad`, `jax.vjp`, `jax.linearize`, all through JAX's partial evaluation) refuse it
# inside a checkpoint, with the message printed below:

# %%
from jax.experimental import io_callback

seen_by_debug = []


def layer_with_debug_callback(v):
    jax.debug.callback(lambda value: seen_by_debug.append(value.shape), v)
    return jnp.tanh(W @ v)


jax.block_until_ready(jax.grad(lambda v: jnp.sum(jax.checkpoint(layer_with_debug_callback)(v)))(x))
jax.effects_barrier()
print(f"a jax.debug.callback inside one checkpointed layer ran {len(seen_by_debug)}x for one gradient")


@jax.custom_jvp
def logged(v):
    io_callback(lambda value: None, None, v, ordered=True)
    return v


logged.defjvp(lambda primals, tangents: (logged(primals[0]), tangents[0]))


def logged_objective(v):
    return jnp.sum(jax.checkpoint(lambda u: jnp.tanh(W @ logged(u)))(v))


for transform, attempt in (
    ("jax.jvp", lambda: jax.jvp(logged_objective, (x,), (x,))),
    ("jax.linearize", lambda: jax.linearize(logged_objective, x)),
    ("jax.vjp", lambda: jax.vjp(logged_objective, x)),
    ("jax.grad", lambda: jax.grad(logged_objective)(x)),
):
    try:
        jax.block_until_ready(attempt())
        print(f"io_callback inside a checkpoint, under {transform}: differentiated")
    except NotImplementedError as error:
        print(f"io_callback inside a checkpoint, under {transform}:", str(error).split(":")[0])

# %% [markdown]
# **Randomness: pass the key in.** Dropout draws a random mask. With the key as an argument,
# the checkpoint keeps the key (a few bytes) instead of the mask, and the backward program
# draws the same mask again from it: the gradient is the un-checkpointed one.

# %%
import collections

import numpy as np

from remat_lesson import saved_residual_lines

KEEP = 0.75


def dropout_layer(v, layer_key):
    mask = jax.random.bernoulli(layer_key, KEEP, v.shape)
    return jnp.where(mask, jnp.tanh(W @ v) / KEEP, 0.0)


def dropout_objective(rematerialize):
    step = jax.checkpoint(dropout_layer) if rematerialize else dropout_layer

    def objective(v, key):
        for layer_key in jax.random.split(key, DEPTH):
            v = step(v, layer_key)
        return jnp.sum(v * v)

    return objective


dropout_key = jax.random.key(0)
dropout_gradients = {}
for rematerialize in (False, True):
    dropout_fn = dropout_objective(rematerialize)
    dropout_gradients[rematerialize] = np.asarray(jax.grad(dropout_fn)(x, dropout_key))
    kinds = collections.Counter(line.split(" ")[0] for line in saved_residual_lines(dropout_fn, x, dropout_key))
    _, backward = forward_and_backward(dropout_fn, x, dropout_key)
    print(
        f"{'per-layer checkpoint' if rematerialize else 'plain':>20}: saved shapes {dict(kinds)}; "
        f"the backward program draws random bits {primitive_counts(backward)['random_bits']}x"
    )
np.testing.assert_allclose(dropout_gradients[True], dropout_gradients[False], rtol=1e-6, atol=0)
print(
    "with dropout, the checkpointed gradient agrees with the plain one within rtol 1e-6; largest difference:",
    float(np.max(np.abs(dropout_gradients[True] - dropout_gradients[False]))),
)

# %% [markdown]
# **Rounding: compare with a tolerance.** The recomputed value comes from the same operations,
# but a compiler may evaluate two copies of a computation differently at rounding level (for
# instance with extra precision in one of them). JAX guards the values it saves against this
# with an explicit `reduce_precision` (the comment in `remat_partial_eval`,
# `jax/_src/ad_checkpoint.py`, points to jax-ml/jax pull request 22244); stage 3 shows it.
# Compare a rematerialized gradient with the plain one within a tolerance, as every comparison
# in this lesson does, never bit for bit.
#
# So a boundary belongs around **pure** work: state passed in and returned, random keys passed
# in as arguments, Python flags made static, no effects but debugging ones.

# %% [markdown]
# ## What each policy saves
#
# `saved_residual_lines` captures what `print_saved_residuals` prints: one line per value
# that differentiation keeps for the backward pass.

# %%
from remat_lesson import saved_residual_lines

for name, fn in (("plain", plain), ("remat", remat)):
    print(name)
    print("\n".join("  " + line for line in saved_residual_lines(fn, x)))

# %% [markdown]
# Each line has a shape (`f32[16]`), what the value is (`output of tanh`, `from a constant`,
# `from the argument v`) and, for outputs, where it was made: ` from file:line:column`
# followed by the Python function in parentheses, as in
# `f32[16] output of tanh from /path/to/remat_lesson.py:60:15 (make_objective.<locals>.layer)`. That suffix moves
# whenever the code moves, so **never compare the text**: parse each line and count.
#
# Read the kinds too. `from a constant` is the weight matrix `W` itself and `from the argument
# v` is the input: buffers that exist whether or not anything is saved. Only the
# `output of ...` entries are new arrays. The list is a plan for autodiff, not a trace of
# device allocations; after the compiler's estimates below, we count which entries cost
# memory.

# %% [markdown]
# ## Your turn: count residual entries by kind
#
# Write `residual_kinds(fn, *args)`. It returns a `collections.Counter` that maps each kind of
# saved value to how many entries of that kind `fn` saves at `args`. The kind is the
# description without the shape and without everything from ` from file:line:column` on,
# the function name in parentheses included: for example `"output of tanh"`,
# `"from a constant"`, `"from the argument v"`. Use `saved_residual_lines`; the total number
# of entries is then `sum(counter.values())`.

# %% nbgrader={"solution": true, "grade_id": "residual-kinds"}
import collections
import re


def residual_kinds(fn, *args):
    """Counter of saved-residual kinds (shape and source location stripped)."""
    ### BEGIN SOLUTION
    kinds = collections.Counter()
    for line in saved_residual_lines(fn, *args):
        _shape, description = line.split(" ", 1)
        kind = re.sub(r" from \S+:\d+:\d+( \(.*\))?$", "", description)
        kinds[kind] += 1
    return kinds
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test-residual-kinds", "points": 3}
import collections
import re

import jax.numpy as jnp
import numpy as np

from remat_lesson import Checks, make_objective, plain, remat, saved_residual_lines, x

checks = Checks(3, where="'Your turn: count residual entries by kind': residual_kinds")
with checks.item(1, "the lesson network saves 9 entries (plain) and 6 (remat)"):
    kinds = residual_kinds(plain, x)
    totals = [sum(kinds.values()), sum(residual_kinds(remat, x).values())]
    checks.equal(totals, [9, 6], what="entries saved by [plain, remat]")
    if any(" from /" in kind or ":" in kind or "(" in kind for kind in kinds):
        print(
            "note: some of your kinds still carry a source location or a function name, for example "
            f"{next(k for k in kinds if ' from /' in k or ':' in k or '(' in k)!r}: a check run when graded "
            "compares the kinds themselves"
        )
### BEGIN HIDDEN TESTS
with checks.item(1, "a fresh network saves as many entries as it has lines, whatever its depth and width"):
    rng = checks.rng()
    depth, width = int(rng.integers(2, 7)), int(rng.integers(3, 10))
    w_fresh = jnp.asarray((0.4 * rng.normal(size=(width, width))).astype(np.float32))
    x_fresh = jnp.asarray(rng.normal(size=width).astype(np.float32))
    totals = [
        sum(residual_kinds(make_objective(w_fresh, depth, False), x_fresh).values()),
        sum(residual_kinds(make_objective(w_fresh, depth, True), x_fresh).values()),
    ]
    checks.equal(
        totals,
        [
            len(saved_residual_lines(make_objective(w_fresh, depth, False), x_fresh)),
            len(saved_residual_lines(make_objective(w_fresh, depth, True), x_fresh)),
        ],
        what=f"entries saved by [plain, remat] at depth {depth}",
        hint="1 constant + a tanh and a sub per layer for plain, constant + argument + a tanh per layer for remat: "
        "count the lines, whatever the depth",
    )


def reference_kinds(fn, *args):
    kinds = collections.Counter()
    for line in saved_residual_lines(fn, *args):
        kinds[re.sub(r" from \S+:\d+:\d+( \(.*\))?$", "", line.split(" ", 1)[1])] += 1
    return dict(kinds)


with checks.item(1, "kinds carry no shape and no source location"):
    checks.equal(dict(residual_kinds(plain, x)), reference_kinds(plain, x), what="plain's kinds")
    checks.equal(dict(residual_kinds(remat, x)), reference_kinds(remat, x), what="remat's kinds")
### END HIDDEN TESTS
checks.score()


# %% [markdown]
# ## What exactly is kept?
#
# Plain keeps, per layer, an `output of tanh` and an `output of sub`. Stage 1's factor is
# `1 − h²`, but the `sub` is not that. Read how JAX differentiates one `tanh`:

# %%
print(jax.make_jaxpr(jax.grad(lambda v: jnp.sum(jnp.tanh(v))))(x).pretty_print(use_color=False))

# %% [markdown]
# With `b = h = tanh(a)` and the incoming cotangent `d`, the program forms `c = 1 − h` (the
# `sub`), then `e = d·(1 − h)` and `e + e·h`, which is `d·(1 − h)·(1 + h) = d·(1 − h²)`. The
# factor is never formed; `h` and `1 − h` are what the backward pass needs. Check it on the
# values themselves: `vjp_residuals` returns what `jax.vjp` keeps for plain's backward pass,
# and a NumPy forward pass gives every `h`.

# %%
import numpy as np

from remat_lesson import vjp_residuals

outputs = [np.asarray(x, np.float64)]
for _ in range(DEPTH):
    outputs.append(np.tanh(np.asarray(W, np.float64) @ outputs[-1]))
candidates = {}
for k, h in enumerate(outputs[1:], start=1):
    candidates.update({f"h{k}": h, f"1 - h{k}": 1.0 - h, f"1 - h{k}**2": 1.0 - h * h})
kept = [np.asarray(value, np.float64) for value in vjp_residuals(plain, x)]
print("kept by plain's VJP:", [tuple(value.shape) for value in kept])
to_one_minus_h, to_square = [], []
for value in (v for v in kept if v.shape == (WIDTH,)):
    name, gap = min(
        ((name, float(np.max(np.abs(value - c)))) for name, c in candidates.items()), key=lambda pair: pair[1]
    )
    square_gap = min(float(np.max(np.abs(value - c))) for n, c in candidates.items() if n.endswith("**2"))
    print(
        f"  a kept vector equals {name:10s} (largest difference {gap:.1e}); the nearest 1 - h**2 is {square_gap:.3f} away"
    )
    if name.startswith("1 - "):
        to_one_minus_h.append(gap)
        to_square.append(square_gap)
print(
    f"The {len(to_one_minus_h)} sub entries: at most {max(to_one_minus_h):.1e} from 1 - h, at least {min(to_square):.3f} from any 1 - h**2."
)

# %% [markdown]
# So plain keeps `h` and `1 − h` for every layer, plus the weights. Remat keeps the weights,
# the argument `v` and four `tanh` outputs. Three of those are the inputs from which layers 2,
# 3 and 4 are recomputed. The fourth, the last layer's output, is kept for the loss: the
# derivative of `sum(v²)` is `2v`, and `v` there is the last layer's output. Give the same
# network the loss `sum(v)`, whose derivative needs no `v`, and that entry goes:


# %%
def remat_with_linear_loss(v):
    step = jax.checkpoint(lambda u: jnp.tanh(W @ u))
    for _ in range(DEPTH):
        v = step(v)
    return jnp.sum(v)


for name, fn in (("sum(v**2)", remat), ("sum(v)", remat_with_linear_loss)):
    lines = saved_residual_lines(fn, x)
    print(
        f"per-layer checkpoint, loss {name:9s}: {len(lines)} entries, {sum('output of tanh' in line for line in lines)} of them tanh outputs"
    )

# %% [markdown]
# ## An oracle that knows nothing about JAX
#
# Before comparing policies we need a gradient we trust that does not come from the thing we
# are testing. Stage 1's rule, applied layer after layer from the top, is that oracle:
#
# 1. forward: keep `v0 = x`, `v1 = tanh(W v0)`, …, `vL`;
# 2. the loss `sum(vL²)` gives `v̄L = 2 vL`;
# 3. backward, for `k = L … 1`: `v̄(k−1) = Wᵀ(v̄k ⊙ (1 − vk²))`.

# %% [markdown]
# ## Your turn: the NumPy reverse recurrence
#
# Write `reverse_oracle(weights, x, depth)`: the gradient of `sum(v_depth²)` with respect to
# `x`, in NumPy only. It must not use JAX at all (`jax.grad`, `jax.vjp`, `jax.numpy`, …): one
# check runs this answer cell on its own, in a process where JAX cannot be imported.

# %% nbgrader={"solution": true, "grade_id": "reverse-oracle"}
import numpy as np


def reverse_oracle(weights, x, depth):
    """Gradient of sum(v_L**2), v_{k+1} = tanh(weights @ v_k), v_0 = x, by explicit reverse sweep."""
    ### BEGIN SOLUTION
    weights = np.asarray(weights, dtype=np.float64)
    values = [np.asarray(x, dtype=np.float64)]
    for _ in range(depth):
        values.append(np.tanh(weights @ values[-1]))
    cotangent = 2.0 * values[-1]
    for h in reversed(values[1:]):
        cotangent = weights.T @ (cotangent * (1.0 - h**2))
    return cotangent
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test-reverse-oracle", "points": 3}
import jax
import numpy as np

from remat_lesson import DEPTH, Checks, W, fresh_network, numpy_only, plain, x

checks = Checks(3, where="'Your turn: the NumPy reverse recurrence': reverse_oracle")
with checks.item(1, "the lesson network: the oracle agrees with jax.grad(plain)"):
    checks.close(
        reverse_oracle(np.asarray(W), np.asarray(x), DEPTH), jax.grad(plain)(x), rtol=3e-5, atol=1e-7, what="gradient"
    )


### BEGIN HIDDEN TESTS
def reference_gradient(weights, x0, depth):
    weights, values = np.asarray(weights, np.float64), [np.asarray(x0, np.float64)]
    for _ in range(depth):
        values.append(np.tanh(weights @ values[-1]))
    bar = 2.0 * values[-1]
    for h in values[:0:-1]:
        bar = weights.T @ ((1.0 - h * h) * bar)
    return bar


def saturated_network(rng):
    """A float64 network whose every pre-activation lies between about 4 and 6 in size: the loss is
    about its width while the gradient's entries are 1e-10 or smaller. The reverse recurrence
    resolves them to float64's rounding; a finite difference with an ordinary step cannot (its
    rounding error, about 1e-16 of the loss over the step, is larger than the gradient itself)."""
    width, depth = int(rng.integers(5, 13)), int(rng.integers(4, 6))
    signs = rng.choice([-1.0, 1.0], size=(2, width))
    weights = np.diag(rng.uniform(4.5, 5.5, width) * signs[0]) + rng.normal(size=(width, width)) * (0.3 / width**0.5)
    return weights, rng.uniform(0.8, 1.2, width) * signs[1], depth


with checks.item(1, "a fresh network agrees with an independent reference"):
    w_fresh, x_fresh, depth = fresh_network(checks.rng(), depths=(3, 8), widths=(5, 12), scale=0.4)
    w_fresh, x_fresh, width = w_fresh.astype(np.float64), x_fresh.astype(np.float64), len(x_fresh)
    checks.close(
        reverse_oracle(w_fresh, x_fresh, depth),
        reference_gradient(w_fresh, x_fresh, depth),
        rtol=1e-4,
        atol=1e-5 * float(np.abs(reference_gradient(w_fresh, x_fresh, depth)).max()),
        what=f"gradient (depth {depth}, width {width})",
    )
with checks.item(
    1,
    "the oracle, run from its answer cell alone where JAX cannot be imported, gives the same gradient, "
    "on the lesson network and on a saturated one",
):
    oracle = numpy_only(reverse_oracle)
    checks.close(
        oracle(np.asarray(W), np.asarray(x), DEPTH),
        reference_gradient(W, x, DEPTH),
        rtol=3e-5,
        atol=1e-7,
        what="gradient",
        hint="the oracle must be NumPy only: its answer cell runs in a process without JAX",
    )
    w_saturated, x_saturated, depth = saturated_network(checks.rng())
    expected = reference_gradient(w_saturated, x_saturated, depth)
    checks.close(
        oracle(w_saturated, x_saturated, depth),
        expected,
        rtol=1e-4,
        atol=1e-5 * float(np.abs(expected).max()),
        what=f"gradient of a saturated network, entries of 1e-10 or less (depth {depth}, width {len(x_saturated)})",
        hint="the reverse recurrence resolves them to rounding; a finite difference of the loss cannot",
    )
### END HIDDEN TESTS
checks.score()


# %% [markdown]
# ## Compiled gradients of both policies
#
# `compile_gradient(fn, x)` (from the lesson module) lowers and compiles `jax.grad(fn)` ahead
# of time for `x`'s shape, so the same executable serves the checks, the memory estimate and
# the timings.
#
# ## Your turn: both gradients
#
# Two functions, in one cell:
#
# - `policy_objectives(weights, depth)` builds the plain and the rematerialized objective with
#   `make_objective` and returns them as `{"plain": ..., "remat": ...}`;
# - `policy_gradients(weights, x, depth)` compiles the gradient of each of those objectives with
#   `compile_gradient`, evaluates it at `x` and returns `{"plain": ..., "remat": ...}`.
#
# A gradient alone cannot say which policy produced it (that is the point: they agree), so the
# checks also look at what each of your objectives saves.

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


def policy_gradients(weights, x, depth):
    """Gradients at x of both objectives of policy_objectives, compiled with compile_gradient."""
    ### BEGIN SOLUTION
    return {name: compile_gradient(objective, x)(x) for name, objective in policy_objectives(weights, depth).items()}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test-policy-gradients", "points": 3}
import jax
import jax.numpy as jnp
import numpy as np

from remat_lesson import DEPTH, Checks, W, fresh_network, gradient, make_objective, vjp_residuals, x


def jax_gradient(weights, x0, depth):
    """jax.grad of the shipped plain objective."""
    return jax.grad(make_objective(weights, depth, rematerialize=False))(x0)


def check_gradients(weights, x0, depth, reference):
    found = policy_gradients(weights, x0, depth)
    checks.equal(sorted(found), ["plain", "remat"], what="the keys")
    expected = np.asarray(reference(weights, x0, depth), np.float64)
    for name in ("plain", "remat"):
        checks.close(
            found[name], expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()), what=f"{name} gradient"
        )


checks = Checks(3, where="'Your turn: both gradients': policy_objectives and policy_gradients")
# The visible reference is jax.grad of the shipped objective: a NumPy one here would hand every
# learner the answer to the reverse-oracle task above. The hidden item checks against NumPy.
with checks.item(1, "the lesson network: both gradients agree with jax.grad of the shipped plain objective"):
    check_gradients(W, x, DEPTH, jax_gradient)


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
    expected = np.asarray(jax_gradient(W, x, DEPTH), np.float64)
    for name in ("plain", "remat"):
        checks.close(
            gradient(objectives[name], x),
            expected,
            rtol=1e-4,
            atol=1e-5 * float(np.abs(expected).max()),
            what=f"the gradient of the {name} objective whose entries were counted",
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
# The checks held each policy against an independent reference. Hold the two policies against
# each other as well, directly, at a relative tolerance of 1e-6:

# %%
gradient_plain, gradient_remat = np.asarray(jax.grad(plain)(x)), np.asarray(jax.grad(remat)(x))
np.testing.assert_allclose(gradient_remat, gradient_plain, rtol=1e-6, atol=0)
print(
    "plain and remat gradients agree within rtol 1e-6; largest difference:",
    float(np.max(np.abs(gradient_remat - gradient_plain))),
)

# %% [markdown]
# ## Compiled memory estimates
#
# `compiled.memory_analysis()` returns the compiler's plan in bytes: arguments, outputs,
# temporaries and aliased buffers. Not every backend implements it. In JAX 0.9.2 a compiled
# function returns `None` then: it catches the backend's `NotImplementedError` itself
# (`Compiled.memory_analysis` in `jax/_src/stages.py`); other versions and lower-level
# executables may raise it instead. A missing estimate is **unavailable**, not zero bytes;
# writing 0 would claim the program needs no memory.
#
# The failure reported in practice is a third one: an analysis that returns all zeros (on
# GPU, jax-ml/jax issue 18954). Your report below passes such numbers on as they are, so when
# every field reads 0, treat the estimate as unavailable; the sweep in stage 3
# (`remat_sweep.compiled_memory`) does exactly that.
#
# ## Your turn: a memory report that keeps "unavailable" apart
#
# Write `memory_report(compiled)`: a dict with the four fields `argument_size_in_bytes`,
# `output_size_in_bytes`, `temp_size_in_bytes`, `alias_size_in_bytes` (ints), or `None` when the
# analysis is unavailable (it returns `None`, or raises `NotImplementedError` as other versions
# may).

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
    compile_gradient,
    compile_gradient_with_analysis,
    make_objective,
    memory_analysis_disabled,
    memory_fields,
    plain,
    x,
)

checks = Checks(3, where="'Your turn: a memory report that keeps \"unavailable\" apart': memory_report")
with checks.item(1, "the lesson's plain gradient: the four fields, as the compiler reports them"):
    compiled = compile_gradient(plain, x)
    checks.equal(
        memory_report(compiled),
        memory_fields(compiled.memory_analysis()),
        what="the report",
        hint="None while memory analysis is switched off" if memory_analysis_disabled() else None,
    )
### BEGIN HIDDEN TESTS
# A fresh program that does have an analysis, whatever REMAT_LESSON_NO_MEMORY_ANALYSIS says.
rng = checks.rng()
width, depth = int(rng.integers(8, 48)), int(rng.integers(2, 6))
fresh = make_objective(jnp.asarray((0.2 * rng.normal(size=(width, width))).astype(np.float32)), depth, True)
available = compile_gradient_with_analysis(fresh, jnp.ones(width, jnp.float32))
with checks.item(1, "an analysis that returns None is reported as None, and a working one in full"):
    checks.equal(memory_report(WithoutMemoryAnalysis(available)), None, what="the report of an unavailable analysis")
    checks.equal(
        memory_report(available),
        memory_fields(available.memory_analysis()),
        what=f"the report of a fresh program (width {width}) with its analysis",
    )
with checks.item(1, "an analysis that raises NotImplementedError is reported as None, and a working one in full"):
    checks.equal(
        memory_report(WithoutMemoryAnalysis(available, raises=True)), None, what="the report of an analysis that raises"
    )
    checks.equal(
        memory_report(available),
        memory_fields(available.memory_analysis()),
        what=f"the report of a fresh program (width {width}) with its analysis",
    )
### END HIDDEN TESTS
checks.score()


# %% [markdown]
# Now read both policies' estimates side by side:

# %%
compiled_gradients = {"plain": compile_gradient(plain, x), "remat": compile_gradient(remat, x)}
memory = {name: memory_report(compiled) for name, compiled in compiled_gradients.items()}
for name, report in memory.items():
    print(f"{name:6s}", report if report is not None else "unavailable on this backend")

# %% [markdown]
# ## Residuals that cost nothing
#
# An entry `from a constant` or `from the argument v` names a buffer that exists anyway: the
# weights and the input are there whether or not autodiff saves them. Only the `output of ...`
# entries are new arrays. Split both lists, and find `W` in the compiled program:

# %%
import re

from remat_sweep import residual_bytes

for name, fn in (("plain", plain), ("remat", remat)):
    lines = saved_residual_lines(fn, x)
    existing = [line for line in lines if line.split(" ", 1)[1].startswith("from ")]
    new = [line for line in lines if line not in existing]
    print(
        f"{name}: {len(lines)} entries: {len(new)} new arrays ({sum(map(residual_bytes, new))} bytes); "
        f"W or x, which exist anyway: {len(existing)} ({sum(map(residual_bytes, existing))} bytes)"
    )
program = compiled_gradients["plain"].as_text()
weight_constants = len(re.findall(r"f32\[16,16\]\{[0-9,]+\} constant\(", program))
print(f"W is {W.nbytes} bytes, x {x.nbytes}; the plain gradient's program holds {weight_constants} f32[16,16] constant")
if memory["plain"] is not None:
    print(
        f"its estimate: arguments {memory['plain']['argument_size_in_bytes']} bytes, "
        f"temporaries {memory['plain']['temp_size_in_bytes']} bytes"
    )

# %% [markdown]
# Of plain's 9 entries, 8 are new arrays; of remat's 6, only 4. And `W` is nowhere in the
# estimate: it is closed over, so it enters the compiled program as a constant, not as an
# argument (the 64 argument bytes are `x` alone) or a temporary (the 256 temporary bytes are
# fewer than `W`'s 1024). When you weigh a residual list, weigh only its new arrays.

# %% [markdown]
# ## What the compiled programs keep
#
# Plain's new arrays outnumber remat's two to one, and both programs plan the same temporary
# bytes. The compiled programs say why. `executable.as_text()` is the program XLA runs, in
# HLO, and XLA keeps JAX's names in it: the instructions of the backward part carry
# `transpose(` in theirs. Which values computed by the forward part does the backward part
# read?

# %%
from remat_lesson import compiled_op_counts, forward_values_read_by_backward

for name, executable in compiled_gradients.items():
    read = forward_values_read_by_backward(executable)
    ops = compiled_op_counts(executable)
    print(
        f"{name}: the backward part reads {sum(read.values())} values of the forward part, by what made them: "
        f"{dict(sorted(read.items()))}; {sum(read.values()) * x.nbytes} bytes. The program runs {ops['tanh']} tanh "
        f"and {ops['subtract']} subtract, {ops['fusion']} fused kernels."
    )

# %% [markdown]
# Each program keeps one 16-float vector per layer for its backward part. Plain keeps the
# `tanh` outputs of three layers and the last layer's product; remat keeps the products of
# three layers and one `tanh` output, the input of the last layer, from which it recomputes
# that layer. Neither keeps a `1 − h` (a `sub`): the compiler computes it again inside the
# fused kernels of the backward part, a small recomputation of its own that no policy asked
# for. Remat also runs the `tanh` of three layers again (its `tanh` count above). Both keep
# as many bytes as the 256 temporary bytes each plans: the residual lists differ, the compiled
# programs keep the same amount. Stage 3 reads larger compiled programs the same way.

# %% [markdown]
# ## Timing, honestly
#
# JAX dispatches work asynchronously: a call returns before the result is computed. A timer
# around a bare call measures the dispatch, not the work, so each timed call must end with
# `block_until_ready()`. The first call of a function can include one-off costs, so one
# warm-up call comes first and is not timed. And every sample is kept, not just the fastest:
# the spread is part of the result.
#
# ## Your turn: synchronized timing samples
#
# Write `timing_samples(compiled, x, repeats=5)`: one untimed warm-up call, then `repeats`
# timed calls, each one synchronized; return the list of all `repeats` durations in seconds,
# in the order they were taken. Use `time.perf_counter()`. The visible checks time the lesson's
# gradient and a stand-in whose results take milliseconds to arrive: each timed call must wait
# for its result. When graded, a slow first call checks the warm-up too.

# %% nbgrader={"solution": true, "grade_id": "timing-samples"}
import time


def timing_samples(compiled, x, repeats=5):
    """Seconds per synchronized call, after one untimed warm-up call; all samples, in order."""
    ### BEGIN SOLUTION
    compiled(x).block_until_ready()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        compiled(x).block_until_ready()
        samples.append(time.perf_counter() - start)
    return samples
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test-timing-samples", "points": 3}
from remat_lesson import Checks, TimedExecutable, compile_gradient, plain, x

checks = Checks(3, where="'Your turn: synchronized timing samples': timing_samples")
IN_ORDER = (
    "no sample can last longer than from the end of the wait before its call to the start of the next call: "
    "return the durations you measured, in the order you took them (not sorted)"
)
WAIT = "wait for each result before stopping the clock, e.g. with block_until_ready()"
with checks.item(1, "the lesson gradient: all 7 samples kept, each a positive number of seconds"):
    executable = TimedExecutable(compile_gradient(plain, x))
    samples = timing_samples(executable, x, repeats=7)
    checks.equal(len(samples), 7, what="the number of samples (every one, not only the fastest)")
    checks.at_least(samples, 1e-9, what="each sample (seconds)")
    checks.below(samples, executable.longest_samples(7), what="each sample (seconds)", hint=IN_ORDER)
# A timed executable chooses how long its calls and results take (unknown to the code it is
# handed to) and notes when each call and each wait happened.
with checks.item(1, "every timed call waits for its result"):
    rng = checks.rng()
    executable = TimedExecutable(result_delays=rng.uniform(0.008, 0.025, 4))
    samples = timing_samples(executable, None, repeats=4)
    checks.equal(len(samples), 4, what="the number of samples")
    # The order of the events decides, not their durations: on a loaded grader a call that is
    # not waited for can last as long as a result takes.
    checks.equal(
        executable.unwaited_calls(4),
        [],
        what="the timed calls whose result was not waited for before the next call (the warm-up is call 1)",
        hint=WAIT,
    )
    checks.at_least(
        samples,
        executable.shortest_samples(4),
        what="each sample (seconds), at least the time its result took to be ready",
        hint=WAIT,
    )
    checks.below(samples, executable.longest_samples(4), what="each sample (seconds)", hint=IN_ORDER)
### BEGIN HIDDEN TESTS
with checks.item(1, "fresh delays: the warm-up call is made and not timed"):
    rng = checks.rng()
    # A sample that holds the first call lasts at least first_call; an honest one is far shorter,
    # however loaded the machine that grades (a fixed bound such as 0.1 s is not).
    first_call = float(rng.uniform(0.5, 0.7))
    executable = TimedExecutable(first_call=first_call, result_delays=rng.uniform(0.001, 0.003, 4))
    samples = timing_samples(executable, None, repeats=4)
    checks.at_least(executable.calls, 5, what="calls for repeats=4 (a warm-up, then four timed)")
    checks.equal(len(samples), 4, what="the number of samples")
    checks.below(
        samples,
        first_call,
        what="each sample (seconds)",
        hint=f"the first call took {first_call:.2f} s: make it the untimed warm-up",
    )
    checks.below(samples, executable.longest_samples(4), what="each sample (seconds)", hint=IN_ORDER)
### END HIDDEN TESTS
checks.score()


# %% [markdown]
# Time both compiled gradients. The samples go into the record as they are; stage 5 shows all
# of them.

# %%
import statistics

timings = {name: timing_samples(compiled, x, repeats=7) for name, compiled in compiled_gradients.items()}
for name, samples in timings.items():
    print(
        f"{name:6s} median {statistics.median(samples) * 1e6:8.1f} µs  samples (µs):",
        [round(s * 1e6, 1) for s in samples],
    )

# %% [markdown]
# One gradient call of this network takes microseconds. Do the two ranges above overlap? If
# they do, these samples cannot say that either policy is faster. Run the cell again and
# compare the medians with the previous run.
#
# ## Does it matter which policy is timed first?
#
# The cell above always times `plain` first. If going first or second moved a median, the
# comparison would measure the order as much as the policy. Measure it: five runs; in each
# run, both orders (plain first, then remat first), each from freshly compiled gradients, with
# your `timing_samples` taking seven samples per policy. A run keeps each policy's median.

# %%
import os

from remat_evidence import ORDERS, order_effect

# Five runs; one while autograding (the cell is not graded, and one run keeps a class's grading short).
ORDER_RUNS = 1 if os.environ.get("NBGRADER_EXECUTION") == "autograde" else 5
medians_by_order = {order: {name: [] for name in names} for order, names in ORDERS.items()}
for _ in range(ORDER_RUNS):
    for order, names in ORDERS.items():
        fresh = {"plain": compile_gradient(plain, x), "remat": compile_gradient(remat, x)}
        for name in names:
            medians_by_order[order][name].append(statistics.median(timing_samples(fresh[name], x, repeats=7)))
for order, medians in medians_by_order.items():
    print(
        f"{order}: "
        + "; ".join(
            f"{name} {statistics.median(runs) * 1e6:.1f} µs (run medians {[round(m * 1e6, 1) for m in runs]})"
            for name, runs in medians.items()
        )
    )
for line in order_effect(medians_by_order):
    print(line)

# %% [markdown]
# Read the last three lines. For each policy: its median when timed first and when timed
# second, in how many runs going first made it slower, and whether the two orders' run
# medians overlap. Then whether the ranking of the two policies survives swapping the order.
# Stage 5 shows the same lines from the record, and claims nothing they do not show.

# %% [markdown]
# ## The record of this stage
#
# Everything stage 5 needs goes to `runs/performance-05/02-build.json`.

# %%
from remat_lesson import save_record

oracle = reverse_oracle(np.asarray(W), np.asarray(x), DEPTH)
gradients = policy_gradients(W, x, DEPTH)
record = {
    "residual_entries": {
        name: sum(residual_kinds(fn, x).values()) for name, fn in (("plain", plain), ("remat", remat))
    },
    "residual_kinds": {name: dict(residual_kinds(fn, x)) for name, fn in (("plain", plain), ("remat", remat))},
    "memory": memory,
    "max_abs_error": {
        f"{name}_vs_oracle": float(np.max(np.abs(np.asarray(gradients[name], np.float64) - oracle)))
        for name in ("plain", "remat")
    },
    "timings_s": timings,
    "timings_by_order_s": {"runs": ORDER_RUNS, "repeats": 7, "medians": medians_by_order},
}
print("recorded", save_record("02-build", record))
print("residual entries:", record["residual_entries"])
print("largest gradient error against the oracle:", record["max_abs_error"])

# %% [markdown]
# ## Carry forward
#
# - Both policies give the gradient of your independent oracle.
# - Their saved-residual lists differ; count them by kind, never by text, and weigh only the
#   new arrays: constants and arguments exist anyway.
# - A checkpoint replays a traced program: keep what it wraps pure, pass keys in, compare with
#   a tolerance.
# - The compiler's estimates are a separate view, reported as unavailable when missing.
# - Timings were taken warm, synchronized, and kept whole; they rank the policies only where
#   the samples do not overlap, and the order of timing was measured, not assumed.
