# %% [markdown]
# # Memory, rematerialization, and optimization tradeoffs
# ## Stage 1 of 5 · Understand
#
# By the end of the five stages you will be able to:
#
# - explain why reverse-mode differentiation needs values from the forward pass;
# - compare ordinary and rematerialized gradients against an independent reverse recurrence
#   that you write in NumPy;
# - read saved-residual descriptions and compiled memory estimates without taking one for
#   the other;
# - time warm gradient calls honestly, and say why a memory benefit depends on the workload.
#
# Each stage runs on its own in a fresh kernel (*Kernel → Restart Kernel and Run All Cells*).
# Cells that say **Your turn** are yours; the cell after each one checks your answer.

# %% [markdown]
# ## Your map
#
# - **Before this lesson:** reading compiled HLO and the roofline model (the phase's previous
#   lesson, *Reason with HLO and the roofline model*). Nothing else is assumed.
# - **The whole lesson:** about 195 minutes over five stages: 25, 60, 65, 30 and 15 minutes,
#   best taken in two or three sittings. The estimate is a model, not a stopwatch: prose read at
#   150 words a minute, half a minute for each code cell plus the time it computes, 2 minutes
#   for each point of a task and for each prediction. Optional *going deeper* cells come on top.
# - **This stage:** about 25 minutes.
# - **Needs:** nothing from another stage.
# - **Points:** 3, checked automatically (one graded cell).
# - **Compare with:** `reference-execution.txt` beside this notebook holds what a complete run
#   of all five stages printed, on a CPU with JAX 0.9.2 (each stage starts at its line "Stage
#   N of 5"; check reports keep only their points). With the pinned versions (JAX and jaxlib
#   0.9.2, and the XLA inside that jaxlib), counts and bytes should match yours exactly; another
#   version may write other programs and plan other bytes. Timings and measured peaks will not
#   match.

# %% [markdown]
# ## The problem
#
# A model runs out of memory while it is being differentiated. A colleague suggests wrapping
# every layer in `jax.checkpoint`. Two questions decide whether that is good advice:
#
# 1. Does it change the gradient?
# 2. Does it lower the memory *this* program needs?
#
# We will not guess. We will compare gradients, list what differentiation keeps, read the
# compiler's memory estimate and time both versions, and only then decide.

# %% [markdown]
# ## The idea: keep an intermediate, or compute it again
#
# To differentiate in reverse, the backward pass needs values that the forward pass produced.
# There are two ways to have them at hand:
#
# - **retain** them: store each intermediate until the backward pass has used it;
# - **rematerialize** them: store less, and rerun part of the forward computation when the
#   backward pass asks.
#
# Rematerialization trades memory for arithmetic *inside one computation*. It has nothing to
# do with writing a training checkpoint to disk, even though JAX calls the function
# `jax.checkpoint`.

# %% [markdown]
# A first look, on a function small enough to see whole. `print_saved_residuals` lists the
# values that differentiation keeps from the forward pass, one line each.

# %% nbgrader={"locked": true, "grade_id": "setup"}
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import print_saved_residuals


print(f"Stage 1 of 5 · Understand · JAX {jax.__version__} on {jax.default_backend()}")


def two_steps(v):
    return jnp.sum(jnp.sin(jnp.cos(v)))


print("two_steps, no checkpoint:")
print_saved_residuals(two_steps, jnp.arange(3.0))

# %% [markdown]
# Read the two lines with care: each names the operation that *made* the saved value, and both
# values were made for the backward pass, not by the forward one. `output of sin` is `sin(v)`,
# the coefficient of the derivative of `cos(v)` (which is `−sin(v)`); `output of cos` is
# `cos(cos(v))`, the derivative of the outer `sin`. The forward result `sin(cos(v))` is not
# kept at all: reverse mode needs the derivatives' coefficients, not the forward values.
# Wrapped in `jax.checkpoint`, only the input is kept; everything else is recomputed from it
# during the backward pass:

# %%
print("jax.checkpoint(two_steps):")
print_saved_residuals(jax.checkpoint(two_steps), jnp.arange(3.0))

# %% [markdown]
# ## The lifetime of an intermediate
#
# Follow one value from birth to last use. In a chain `v0 → v1 → v2 → v3 → loss`, the
# forward pass creates `v1` early, but the backward pass needs it late, after it has walked
# back from the loss through `v3` and `v2`:
#
# | time → | forward: v1 | forward: v2 | forward: v3 | loss | backward at v3 | backward at v2 | backward at v1 |
# |---|---|---|---|---|---|---|---|
# | **retain** `v1` | created | kept | kept | kept | kept | kept | used, freed |
# | **recompute** `v1` | created | freed | | | | | recomputed from `v0`, used |
#
# Retaining holds `v1` across the whole middle of the computation; recomputing frees it early
# and pays one more forward step later. Which is better depends on how big `v1` is, how
# expensive it is to recompute, and what else is alive at the same time.

# %% [markdown]
# ## Three quantities that are easy to confuse
#
# This lesson keeps three things apart, everywhere:
#
# | quantity | unit | where it comes from |
# |---|---|---|
# | saved residual **entries** | entries (one per value) | `print_saved_residuals`: what autodiff plans to keep, before compilation |
# | estimated **bytes** | bytes | `compiled.memory_analysis()`: what the compiler plans to allocate |
# | measured **peak memory** | bytes | the process or device, while the program runs |
#
# The compiler fuses operations and reuses buffers, and its common-subexpression elimination
# (CSE) merges two identical computations into one, which can fold a recomputation back into
# the value it repeats (`jax.checkpoint` guards against that by default, and stage 3 reads in
# the compiled program what the guard costs). So fewer entries need not mean fewer bytes, and an estimate of bytes
# is not a measured peak. Stages 2 and 3 show the first with numbers, and stage 3 sets the
# estimates beside peaks measured in fresh processes.

# %% [markdown]
# The `jax.checkpoint` docstring says the same in one paragraph, and it is this lesson's thesis.
# The next cell prints it from the JAX you have installed (`jax/_src/ad_checkpoint.py`):

# %%
import inspect
import textwrap

thesis = next(part for part in inspect.getdoc(jax.checkpoint).split("\n\n") if "additional internal" in part)
print(textwrap.fill(" ".join(thesis.split()), width=88))

# %% [markdown]
# ## Your turn: write down your predictions
#
# Before any result is shown, predict what per-layer `jax.checkpoint` does to the lesson's
# network: four layers `v ← tanh(W @ v)` with a 16×16 matrix `W`, objective `sum(v²)`.
# "Compiled temp bytes" is one field of the compiler's estimate in the table above
# (`temp_size_in_bytes` of `memory_analysis()`): the bytes of the buffers the compiled
# gradient needs only while it runs, neither its arguments nor its outputs. Residuals kept
# between the forward and the backward part of the program are among them.
# Set `PREDICTIONS` to a dict with these four keys, each `True` or `False`:
#
# ```python
# PREDICTIONS = {
#     "remat_changes_the_gradient": ...,
#     "remat_saves_fewer_residual_entries": ...,
#     "remat_lowers_compiled_temp_bytes": ...,
#     "remat_is_faster": ...,
# }
# ```
#
# Nothing here is graded; stage 5 sets your predictions beside what actually happened, so be
# honest rather than right.

# %% nbgrader={"solution": true, "grade_id": "predictions"}
### BEGIN SOLUTION
# A first guess before measuring anything; stage 5 compares it with what happened.
PREDICTIONS = {
    "remat_changes_the_gradient": False,
    "remat_saves_fewer_residual_entries": True,
    "remat_lowers_compiled_temp_bytes": True,
    "remat_is_faster": False,
}
### END SOLUTION

# %%
from remat_lesson import save_record

expected_keys = {
    "remat_changes_the_gradient",
    "remat_saves_fewer_residual_entries",
    "remat_lowers_compiled_temp_bytes",
    "remat_is_faster",
}
assert set(PREDICTIONS) == expected_keys, f"PREDICTIONS needs exactly these keys: {sorted(expected_keys)}"
assert all(isinstance(value, bool) for value in PREDICTIONS.values()), "answer each prediction with True or False"
save_record("01-understand", {"predictions": PREDICTIONS})
print("Predictions recorded for stage 5.")

# %% [markdown]
# ## Follow one layer backward
#
# One layer maps a vector `x` to `h = tanh(W x)`. Since `d tanh(u)/du = 1 − tanh(u)²`, the
# local factor uses the layer's **output** `h`, not its input. Given the cotangent `h̄`
# (the gradient of the loss with respect to `h`), the cotangent of the input is
#
# $$\bar x = W^\top\bigl(\bar h \odot (1 - h^2)\bigr).$$
#
# Read it right to left: scale the incoming sensitivity by the tanh factor, elementwise, then
# send it back through the transposed weights. This is why reverse mode wants `h` at hand:
# either it was kept, or it has to be recomputed from `x` and `W`.

# %% [markdown]
# ## Your turn: one layer backward
#
# Write `layer_backward(weights, h, h_bar)` in NumPy: it returns `x̄` for one layer
# `h = tanh(weights @ x)`. `weights` may be rectangular, `m × n`: then `h` and `h_bar` have
# length `m` and the result has length `n`. The checks run this answer cell on its own, in a
# process where JAX cannot be imported: use NumPy (`np`) and the standard library only.

# %% nbgrader={"solution": true, "grade_id": "layer-backward"}
import numpy as np


def layer_backward(weights, h, h_bar):
    """Cotangent of a layer's input, given its output h = tanh(weights @ x) and h's cotangent."""
    ### BEGIN SOLUTION
    weights, h, h_bar = (np.asarray(a, dtype=np.float64) for a in (weights, h, h_bar))
    return weights.T @ (h_bar * (1.0 - h**2))
    ### END SOLUTION


# %% [markdown]
# The check compares your rule with **central finite differences**: nudge `x` by `±eps` along
# each coordinate and watch `⟨h̄, h⟩` change. It knows nothing about your formula, so agreement
# is real evidence.

# %% nbgrader={"grade": true, "grade_id": "test-layer-backward", "points": 3}
import numpy as np

from remat_lesson import Checks, W, numpy_only, x


def reference_cotangent(weights, x_point, h_bar, eps=1e-6):
    """d<h_bar, tanh(weights @ x)>/dx by central differences, in float64."""
    weights, x_point = np.asarray(weights, np.float64), np.asarray(x_point, np.float64)
    grad = np.zeros_like(x_point)
    for i in range(x_point.size):
        step = np.zeros_like(x_point)
        step[i] = eps
        up = h_bar @ np.tanh(weights @ (x_point + step))
        down = h_bar @ np.tanh(weights @ (x_point - step))
        grad[i] = (up - down) / (2 * eps)
    return grad


def check_layer(weights, x_point, h_bar):
    """layer_backward, run from its answer cell alone where JAX cannot be imported, against
    finite differences. The tolerance is set by the size of W^T h_bar, so a float32 answer
    passes even where 1 - h**2 is tiny (a saturated layer)."""
    weights, x_point, h_bar = (np.asarray(a, np.float64) for a in (weights, x_point, h_bar))
    checks.close(
        numpy_only(layer_backward)(weights, np.tanh(weights @ x_point), h_bar),
        reference_cotangent(weights, x_point, h_bar),
        rtol=1e-4,
        atol=1e-5 * float((np.abs(weights).T @ np.abs(h_bar)).max()),
        what="x_bar",
    )


checks = Checks(3, where="'Your turn: one layer backward', and the formula above it")
with checks.item(1, "the lesson's 16x16 layer agrees with finite differences"):
    check_layer(W, x, np.linspace(1.0, -2.0, 16))
### BEGIN HIDDEN TESTS
with checks.item(1, "a fresh rectangular layer (fewer outputs than inputs) agrees with finite differences"):
    rng = checks.rng()
    outputs, inputs = int(rng.integers(2, 6)), int(rng.integers(6, 10))
    check_layer(rng.normal(size=(outputs, inputs)), rng.normal(size=inputs), rng.normal(size=outputs))
with checks.item(1, "a nearly saturated layer (|h| close to 1) agrees with finite differences"):
    rng = checks.rng()
    width = int(rng.integers(4, 10))
    check_layer(3.0 * rng.normal(size=(width, width)), rng.normal(size=width), rng.normal(size=width))
### END HIDDEN TESTS
checks.score()


# %% [markdown]
# ## Carry forward
#
# - Reverse mode needs forward values; `1 − h²` is the one this network needs per layer.
# - Keeping a value and recomputing it are two answers to the same need.
# - Entries, estimated bytes and measured peak are three different quantities.
#
# Next, stage 2 builds both policies for the whole network and checks their gradients
# against a reverse recurrence you write yourself.
