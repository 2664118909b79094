# %% [markdown]
# # Memory, rematerialization, and optimization tradeoffs
# ## Stage 1 of 5 · Understand
#
# By the end of the five stages you will be able to:
#
# - explain why reverse-mode differentiation needs forward intermediates;
# - compare ordinary and rematerialized gradients with an independent reverse recurrence;
# - inspect saved residual descriptions and compiled memory estimates without equating them;
# - measure warm gradient calls, and explain why a memory benefit depends on the workload.
#
# Run each stage from the top. **Your turn** cells are yours; the next cell checks them.

# %% [markdown]
# ## Your map
#
# - **Before this lesson:** reading compiled HLO and the roofline model.
# - **The whole lesson:** about 105 minutes over five stages: 15, 35, 25, 20 and 10 minutes.
#   The *Going deeper* notebooks (`deeper/`) are optional, carry no points and are timed apart.
# - **This stage:** about 15 minutes.
# - **Needs:** nothing from another stage.
# - **Points:** 3, checked automatically (one graded cell).
# - **Compare with:** `reference-execution.txt` from "Stage 1 of 5 · Understand", what a complete run
#   printed (JAX 0.9.2, CPU).

# %% [markdown]
# ## The problem
#
# A model runs out of memory while differentiated; a colleague suggests `jax.checkpoint` on
# every layer. Does that change the gradient? Does it lower *this* program's memory?
#
# ## The idea
#
# The backward pass needs values the forward pass produced. It can **retain** them, or
# **rematerialize** them: keep less, and rerun part of the forward pass when needed. This trades
# memory for arithmetic inside one computation; it is not a training checkpoint on disk.
# `print_saved_residuals(f, x)` lists what differentiating `f` keeps, one line per value.

# %% nbgrader={"locked": true, "grade_id": "setup"}
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import print_saved_residuals

print(f"Stage 1 of 5 · Understand · JAX {jax.__version__} on {jax.default_backend()}")


def two_steps(v):
    return jnp.sum(jnp.sin(jnp.cos(v)))


print("two_steps, no checkpoint:")
print_saved_residuals(two_steps, jnp.arange(3.0))
print("jax.checkpoint(two_steps):")
print_saved_residuals(jax.checkpoint(two_steps), jnp.arange(3.0))

# %% [markdown]
# The derivative of `sin(cos(v))` is `cos(cos(v)) · (−sin(v))`: `output of sin` is `sin(v)`,
# `output of cos` is `cos(cos(v))` (not the forward `cos(v)`). Reverse mode keeps whatever its backward pass reads: here factors computed from forward
# values; for `tanh`, the forward output itself ("Jacobian coefficients and other
# intermediates", the docs say). Under `jax.checkpoint` only the input is kept.
#
# **An intermediate's lifetime.** In `v0 → v1 → v2 → v3 → loss`, `v1` is made early and needed
# last. Retained, it is held throughout; recomputed, it is freed and remade from `v0` at the end.
# Which wins depends on its size, its cost, and what else is alive then.
#
# **Three quantities, measured apart:** saved *entries* (before compilation), the compiler's
# estimated *bytes* (`compiled.memory_analysis()`), and the *peak memory* measured as it runs.

# %% [markdown]
# ## Your turn: write down your predictions
#
# The lesson's network: four layers `v ← tanh(W @ v)`, `W` 16×16, objective `sum(v²)`. Predict
# what wrapping each layer in `jax.checkpoint` does ("temp bytes": the compiler's estimate of the
# buffers the gradient needs while it runs). Set each key to `True` or `False`:
#
# ```python
# PREDICTIONS = {"remat_changes_the_gradient": ..., "remat_saves_fewer_residual_entries": ...,
#                "remat_lowers_compiled_temp_bytes": ..., "remat_is_faster": ...}
# ```
#
# Not graded: stage 5 sets them beside what happened.

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
# A layer maps `x` to `h = tanh(W x)`. Since `d tanh(u)/du = 1 − tanh(u)²`, the local factor uses
# the **output** `h`. Given `h̄`, the gradient of the loss with respect to `h` (its cotangent):
#
# $$\bar x = W^\top\bigl(\bar h \odot (1 - h^2)\bigr).$$
#
# So `h` is needed: kept, or recomputed from `x` and `W`.
#
# ## Your turn: one layer backward
#
# Write `layer_backward(weights, h, h_bar)`, returning `x̄`. `weights` may be `m × n`: `h` and
# `h_bar` have length `m`, the result length `n`. NumPy only: the check runs this cell alone,
# where JAX cannot be imported, and compares with finite differences.

# %% nbgrader={"solution": true, "grade_id": "layer-backward"}
import numpy as np


def layer_backward(weights, h, h_bar):
    """Cotangent of a layer's input, given its output h = tanh(weights @ x) and h's cotangent."""
    ### BEGIN SOLUTION
    weights, h, h_bar = (np.asarray(a, dtype=np.float64) for a in (weights, h, h_bar))
    return weights.T @ (h_bar * (1.0 - h**2))
    ### END SOLUTION


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
# - Reverse mode keeps what its backward pass reads; keeping and recomputing answer that need.
# - Entries, estimated bytes and measured peak are three quantities.
