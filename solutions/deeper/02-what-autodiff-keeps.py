# %% [markdown]
# # Going deeper after stage 2 · What autodiff keeps, and what a checkpoint replays
#
# An optional companion of `02-build.ipynb`: no points, nothing graded or later in the lesson
# needs it. Read it after stage 2, in any order; each section stands alone.
#
# - **Time:** about 25 minutes (the same time model as the stages).
# - **Sections:** a boundary goes around pure work; what exactly is kept; residuals that cost
#   nothing; what the compiled programs keep; does the order of timing matter?

# %%
import sys

sys.path.insert(0, "..")  # the lesson's modules sit beside the stages, one folder up

import jax
import jax.numpy as jnp
import numpy as np

from remat_lesson import DEPTH, WIDTH, W, compile_gradient, forward_and_backward, plain, primitive_counts, remat, x

print(f"Going deeper after stage 2 · JAX {jax.__version__} on {jax.default_backend()}")

# %% [markdown]
# ## Two words first: VJP and partial evaluation
#
# `jax.vjp(f, x)` returns `f(x)` and a function that maps a cotangent of the output to the
# cotangent of `x`: a **vector-Jacobian product** (VJP), the backward pass as a function. The
# values that function holds are the saved residuals; `remat_lesson.vjp_residuals` returns them
# as arrays. JAX gets there by **partial evaluation**: it splits the differentiated program into
# the part it can run now (the forward pass, producing the residuals) and the part that must
# wait for the cotangent (the backward pass).
#
# ## A boundary goes around pure work
#
# When JAX recomputes a checkpointed layer it replays the program it traced from your Python
# function; it does not call the Python function again. Count both: how often the layer's Python
# code runs while one gradient is taken, and how many `tanh` the gradient's two programs hold.


# %%
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
# With the checkpoint the Python code ran once for four layers: `jax.checkpoint` traces a
# function once per argument shapes and keeps the trace (`_trace_to_jaxpr` in
# `jax/_src/ad_checkpoint.py`). The programs hold a `tanh` for every layer and another for every
# recomputation; whether the compiler runs both is another matter (stage 3's sweep). Four
# consequences follow.
#
# **A kept trace can go stale.** A layer that reads a Python value bakes it into the trace:

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
    changed = not jnp.array_equal(jax.grad(fn)(x), before[name])
    print(f"after the Python scale changed, the {name} gradient changed: {changed}")
jax.clear_caches()
refreshed = jax.grad(checkpointed_scaled)(x)
print(
    "after jax.clear_caches(), the checkpointed gradient equals the plain one:",
    bool(jnp.allclose(refreshed, jax.grad(plain_scaled)(x))),
)

# %% [markdown]
# **A Python flag must be static.** `if` needs a Python `bool`; `static_argnums` tells
# `jax.checkpoint` to pass that argument through as a Python value (and to trace again for each
# new value):


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
# **Effects: JAX replays the ones it allows and refuses the rest.** A debug callback is allowed
# inside a checkpoint, so it runs again when the layer is recomputed. A host callback with side
# effects (`io_callback`) is another matter. To make it differentiable at all, the next cell
# gives it a derivative rule with `jax.custom_jvp`, a decorator that supplies a function's JVP
# (its forward-mode derivative rule) by hand, as a logging library might. Forward mode
# (`jax.jvp`) differentiates it like any function; the transforms that split a computation by
# partial evaluation (`jax.linearize`, `jax.vjp`, `jax.grad`) refuse it inside a checkpoint:

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
# **Randomness: pass the key in.** With the key as an argument, a checkpointed dropout layer keeps
# the key (a few bytes) instead of the mask, and the backward program draws the same mask again:

# %%
import collections

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
# **Rounding: compare with a tolerance.** A compiler may evaluate two copies of a computation
# differently at rounding level. JAX guards the values a checkpoint saves with an explicit
# `reduce_precision` (the comment in `remat_partial_eval`, `jax/_src/ad_checkpoint.py`, points to
# jax-ml/jax pull request 22244; the companion of stage 3 shows it). Compare a rematerialized
# gradient with the plain one within a tolerance, never bit for bit.
#
# So a boundary belongs around **pure** work: state passed in and returned, random keys passed
# in, Python flags made static, no effects but debugging ones. The `jax.checkpoint` docstring says
# what that boundary does not decide:

# %%
import inspect
import textwrap

thesis = next(part for part in inspect.getdoc(jax.checkpoint).split("\n\n") if "additional internal" in part)
print(textwrap.fill(" ".join(thesis.split()), width=88))

# %% [markdown]
# ## What exactly is kept?
#
# Plain keeps, per layer, an `output of tanh` and an `output of sub`. Stage 1's factor is
# `1 − h²`, but the `sub` is not that. How JAX differentiates one `tanh`:

# %%
print(jax.make_jaxpr(jax.grad(lambda v: jnp.sum(jnp.tanh(v))))(x).pretty_print(use_color=False))

# %% [markdown]
# With `b = h = tanh(a)` and the incoming cotangent `d`, the program forms `c = 1 − h` (the
# `sub`), then `e = d·(1 − h)` and `e + e·h = d·(1 − h²)`. The factor is never formed; `h` and
# `1 − h` are what the backward pass reads. Check it on the values themselves:

# %%
from remat_lesson import vjp_residuals

outputs = [np.asarray(x, np.float64)]
for _ in range(DEPTH):
    outputs.append(np.tanh(np.asarray(W, np.float64) @ outputs[-1]))
candidates = {}
for k, h in enumerate(outputs[1:], start=1):
    candidates.update({f"h{k}": h, f"1 - h{k}": 1.0 - h, f"1 - h{k}**2": 1.0 - h * h})
kept = [np.asarray(value, np.float64) for value in vjp_residuals(plain, x)]
to_one_minus_h, to_square = [], []
for value in (v for v in kept if v.shape == (WIDTH,)):
    name, gap = min(((n, float(np.max(np.abs(value - c)))) for n, c in candidates.items()), key=lambda pair: pair[1])
    square_gap = min(float(np.max(np.abs(value - c))) for n, c in candidates.items() if n.endswith("**2"))
    print(
        f"  a kept vector equals {name:10s} (largest difference {gap:.1e}); the nearest 1 - h**2 is {square_gap:.3f} away"
    )
    if name.startswith("1 - "):
        to_one_minus_h.append(gap)
        to_square.append(square_gap)
print(
    f"The {len(to_one_minus_h)} sub entries: at most {max(to_one_minus_h):.1e} from 1 - h, "
    f"at least {min(to_square):.3f} from any 1 - h**2."
)

# %% [markdown]
# Remat keeps the weights, the argument `v` and four `tanh` outputs: three are the inputs from
# which layers 2, 3 and 4 are recomputed; the fourth, the last output, is kept for the loss,
# whose derivative `2v` reads it. With the loss `sum(v)`, whose derivative needs no `v`, it goes:


# %%
def remat_with_linear_loss(v):
    step = jax.checkpoint(lambda u: jnp.tanh(W @ u))
    for _ in range(DEPTH):
        v = step(v)
    return jnp.sum(v)


for name, fn in (("sum(v**2)", remat), ("sum(v)", remat_with_linear_loss)):
    lines = saved_residual_lines(fn, x)
    tanh_outputs = sum("output of tanh" in line for line in lines)
    print(f"per-layer checkpoint, loss {name:9s}: {len(lines)} entries, {tanh_outputs} of them tanh outputs")

# %% [markdown]
# ## Residuals that cost nothing
#
# An entry `from a constant` or `from the argument v` names a buffer that exists anyway. Only the
# `output of ...` entries are new arrays. Split both lists, and find `W` in the compiled program:

# %%
import re

from remat_sweep import residual_bytes

compiled_gradients = {"plain": compile_gradient(plain, x), "remat": compile_gradient(remat, x)}
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
analysis = compiled_gradients["plain"].memory_analysis()
print(f"W is {W.nbytes} bytes, x {x.nbytes}; the plain gradient's program holds {weight_constants} f32[16,16] constant")
if analysis is not None:
    print(
        f"its estimate: arguments {analysis.argument_size_in_bytes} bytes, temporaries {analysis.temp_size_in_bytes} bytes"
    )

# %% [markdown]
# Of plain's 9 entries, 8 are new arrays; of remat's 6, only 4. And `W` is nowhere in the
# estimate: it is closed over, so it enters the compiled program as a constant, neither an
# argument (the 64 argument bytes are `x` alone) nor a temporary (the 256 temporary bytes are
# fewer than `W`'s 1024).
#
# ## What the compiled programs keep
#
# `executable.as_text()` is the program XLA runs, in HLO, and XLA keeps JAX's names in it: the
# instructions of the backward part carry `transpose(` in theirs. Which values of the forward
# part does the backward part read?

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
# Each program keeps one 16-float vector per layer for its backward part. Plain keeps the `tanh`
# outputs of three layers and the last layer's product; remat keeps the products of three layers
# and one `tanh` output, from which it recomputes the last layer. Neither keeps a `1 − h`: the
# compiler computes it again inside the fused kernels of the backward part, a small
# recomputation of its own that no policy asked for. Both keep as many bytes as the 256
# temporary bytes each plans: the lists differ, the compiled programs keep the same amount.
#
# ## Does it matter which policy is timed first?
#
# If going first or second moved a median, a comparison would measure the order as much as the
# policy. Five runs; in each, both orders, each from freshly compiled gradients, with 3 untimed
# warm-up calls and 7 timed, synchronized calls per policy (`timeit.repeat` with `number=1`
# returns one duration per call). A run keeps each policy's median.

# %%
import os
import statistics
import timeit

from remat_evidence import ORDERS, order_effect
from remat_lesson import save_record

WARMUPS, REPEATS = 3, 7
ORDER_RUNS = 1 if os.environ.get("NBGRADER_EXECUTION") == "autograde" else 5
medians_by_order = {order: {name: [] for name in names} for order, names in ORDERS.items()}
for _ in range(ORDER_RUNS):
    for order, names in ORDERS.items():
        fresh = {"plain": compile_gradient(plain, x), "remat": compile_gradient(remat, x)}
        for name in names:
            durations = timeit.repeat(
                lambda fn=fresh[name]: fn(x).block_until_ready(), number=1, repeat=WARMUPS + REPEATS
            )
            medians_by_order[order][name].append(statistics.median(durations[WARMUPS:]))
for line in order_effect(medians_by_order):
    print(line)
save_record("deeper-02", {"timings_by_order_s": {"runs": ORDER_RUNS, "repeats": REPEATS, "medians": medians_by_order}})

# %% [markdown]
# For each policy: its median when timed first and when timed second, in how many runs going
# first made it slower, and whether the two orders' run medians overlap; then whether the ranking
# of the two policies survives swapping the order. Claim nothing these lines do not show.
