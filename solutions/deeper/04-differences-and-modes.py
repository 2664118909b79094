# %% [markdown]
# # Going deeper after stage 4 · Differences, rounding and differentiation modes
#
# An optional companion of `04-exercise.ipynb`: no points, nothing graded or later in the lesson
# needs it.
#
# - **Time:** about 10 minutes (the same time model as the stages).
# - **Sections:** truncation against rounding; differences of gradients against exact HVPs;
#   which differentiation modes a checkpoint changes.

# %%
import sys

sys.path.insert(0, "..")  # the lesson's modules sit beside the stages, one folder up

import jax
import jax.numpy as jnp
import numpy as np

from remat_lesson import DEPTH, W, plain, primitive_counts, remat, tanh_network, x

print(f"Going deeper after stage 4 · JAX {jax.__version__} on {jax.default_backend()}")

# %% [markdown]
# ## Truncation against rounding
#
# In float32 each value of `f` carries a rounding error of about `u·|f|`, with `u = 2⁻²⁴` the unit
# roundoff, and the point `x ± εd` is itself rounded, which moves `f` by up to about
# `u·Σᵢ|∂f/∂xᵢ|·|xᵢ|`. The central difference divides both by `ε`: a rounding error that *grows*
# like `u·(|f| + Σᵢ|∂f/∂xᵢ|·|xᵢ|)/ε` as `ε` shrinks, while truncation shrinks like `ε²`. The
# estimate at several steps, on the lesson's network in float32 NumPy (as stage 4's check computes
# it), beside that rounding bound (relative to the derivative) and the check's tolerance:

# %%
numpy_objective = tanh_network(np.asarray(W), DEPTH)
x_numpy, d_numpy = np.asarray(x), np.ones(x.shape, np.float32)
gradient_numpy = np.asarray(jax.grad(plain)(x), np.float64)
automatic = float(gradient_numpy @ d_numpy)
unit_roundoff = float(jnp.finfo(jnp.float32).eps) / 2
check_rtol = 3e-3
print(f"the check's tolerance: rtol {check_rtol:g}")
for eps in (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 3e-6, 1e-6):
    estimate = (float(numpy_objective(x_numpy + eps * d_numpy)) - float(numpy_objective(x_numpy - eps * d_numpy))) / (
        2 * eps
    )
    error = abs(estimate - automatic) / abs(automatic)
    size = abs(float(numpy_objective(x_numpy))) + float(np.abs(gradient_numpy) @ np.abs(x_numpy))
    bound = unit_roundoff * size / eps / abs(automatic)
    verdict = "within" if error <= check_rtol else "outside"
    luck = (
        "" if bound <= check_rtol or error > check_rtol else ", but only by the luck of rounding: the bound is above it"
    )
    print(f"epsilon {eps:.0e}: relative error {error:.1e}, rounding bound {bound:.1e}, {verdict} the tolerance{luck}")

# %% [markdown]
# The largest step is off by truncation. Below the best step the rounding bound grows tenfold with
# every tenfold smaller step, and the actual error follows it in size but not in detail: at some
# steps the roundings of the two evaluations happen to cancel. A check that compares one estimate
# with its tolerance accepts such a lucky step; it can fail on another network or point. Choose
# a step where the bound itself is below the tolerance.
#
# ## Differences of gradients against an exact HVP
#
# Stage 4's check asks for an exact product, not a difference of gradients. How close can central
# differences of float32 gradients come? 26 steps from `1e-5` to `1`, against the Hessian matrix's
# product, relative to its largest entry:

# %%
direction = jnp.linspace(-1.0, 1.0, x.shape[0])
hessian_product = np.asarray(jax.hessian(plain)(x), np.float64) @ np.asarray(direction, np.float64)
exact = np.asarray(jax.jvp(jax.grad(plain), (x,), (direction,))[1], np.float64)
scale = float(np.abs(hessian_product).max())
differences = {}
for step in np.geomspace(1e-5, 1.0, 26):
    step = np.float32(step)
    up, down = jax.grad(plain)(x + step * direction), jax.grad(plain)(x - step * direction)
    quotient = (np.asarray(up, np.float64) - np.asarray(down, np.float64)) / (2 * float(step))
    differences[float(step)] = float(np.abs(quotient - hessian_product).max()) / scale
best = min(differences, key=differences.get)
print(
    f"exact HVP (forward over reverse): {float(np.abs(exact - hessian_product).max()) / scale:.1e} of the largest "
    f"entry; the best of {len(differences)} differences of gradients: {differences[best]:.1e} (step {best:.1e})"
)

# %% [markdown]
# The exact product agrees to a few parts in 10⁷ of the largest entry, while no step brings a
# difference of gradients within a few parts in 10⁶: the check's tolerance, `2e-6` of the largest
# entry, lies between the two. These digits move a little from run to run; their sizes do not.
#
# ## Which differentiation modes does a checkpoint change?
#
# The JAX docs say a checkpointed function behaves differently under `jax.linearize` and
# `jax.vjp` (and `jax.grad`), but not under `jax.jvp`. Read it in the programs: forward mode
# (`jax.jvp`) computes values and tangents together in one pass; `jax.linearize` splits the work
# into a primal pass and a linear function to apply later, and that linear function is where a
# checkpoint recomputes:

# %%
for name, fn in (("plain", plain), ("remat", remat)):
    jvp_program = jax.make_jaxpr(lambda v, t, fn=fn: jax.jvp(fn, (v,), (t,)))(x, direction)
    _, linear = jax.linearize(fn, x)
    linear_program = jax.make_jaxpr(linear)(direction)
    np.testing.assert_allclose(np.asarray(jax.jvp(fn, (x,), (direction,))[1]), np.asarray(linear(direction)), rtol=1e-6)
    print(
        f"{name}: jvp writes {primitive_counts(jvp_program)['tanh']} tanh and "
        f"{primitive_counts(jvp_program)['dot_general']} products; linearize's linear function "
        f"{primitive_counts(linear_program)['tanh']} tanh and {primitive_counts(linear_program)['dot_general']} products"
    )

# %% [markdown]
# Under `jax.jvp` the two policies write the same program: a checkpoint changes nothing in forward
# mode. The linear function of plain reuses what `jax.linearize` kept (no `tanh`); remat's
# recomputes the forward pass inside it. A forward-over-reverse HVP differentiates the inner
# `jax.grad`, where the checkpoint acts, so it tests the recomputation as well as the gradient.
