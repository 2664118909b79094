# %% [markdown]
# # Stage 4 of 5 · Exercise
#
# Two more independent checks that rematerialization leaves the function's derivatives alone:
# a finite-difference check of a directional derivative, and Hessian-vector products of both
# policies.

# %% [markdown]
# ## Your map
#
# - **This stage:** about 30 minutes.
# - **Needs:** the lesson's network and both policies, from `remat_lesson.py`; nothing from
#   another stage's run.
# - **Points:** 8: 6 checked automatically (two graded cells) and 2 read by a person (one
#   written answer).
# - **Compare with:** `reference-execution.txt` beside this notebook, from the line
#   "Stage 4 of 5 · Exercise" on: with the pinned JAX 0.9.2, errors and counts should match
#   yours.

# %%
import jax
import jax.numpy as jnp
import numpy as np

from remat_lesson import plain, remat, save_record, x

print(f"Stage 4 of 5 · Exercise · JAX {jax.__version__} on {jax.default_backend()}")

# %% [markdown]
# ## A directional derivative, two ways
#
# Along a direction `d`, the derivative of `f` at `x` is `∇f(x) · d`. Without any autodiff it
# can be estimated by a **central difference**,
#
# $$D_d f(x) \approx \frac{f(x + \varepsilon d) - f(x - \varepsilon d)}{2\varepsilon},$$
#
# whose truncation error shrinks like `ε²`. The one-sided forward difference
# `(f(x+εd) − f(x))/ε` is simpler but its error shrinks only like `ε`: for a curved function
# it is visibly off.
#
# Truncation is only half of the story. In float32 each value of `f` carries a rounding error
# of about `u·|f|`, with `u = 2⁻²⁴` the unit roundoff, and the point `x ± εd` is itself rounded,
# which moves `f` by up to about `u·Σᵢ|∂f/∂xᵢ|·|xᵢ|`. The difference quotient divides both by
# `ε`: a rounding error that *grows* like `u·(|f| + Σᵢ|∂f/∂xᵢ|·|xᵢ|)/ε` as `ε` shrinks. Too large
# an `ε` is off by truncation, too small a one by rounding; the best lies in between. A cell
# after the check shows both ends on the lesson's objective.
#
# ## Your turn: a central difference
#
# Write `central_difference(fn, x, direction, eps)` returning the central-difference estimate as
# a Python float. Then set `EPSILON` to the perturbation you use for the lesson's objective
# (the lesson uses `1e-3` in float32). `fn` is any function of an array that returns a number:
# the checks run this answer cell on its own, where JAX cannot be imported, and hand your
# function NumPy objectives (the lesson's among them, in float32). Use NumPy and Python only.


# %% nbgrader={"solution": true, "grade_id": "central-difference"}
def central_difference(fn, x, direction, eps):
    """(fn(x + eps*d) - fn(x - eps*d)) / (2*eps), as a float."""
    ### BEGIN SOLUTION
    return (float(fn(x + eps * direction)) - float(fn(x - eps * direction))) / (2.0 * eps)
    ### END SOLUTION


### BEGIN SOLUTION
EPSILON = 1e-3
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test-central-difference", "points": 3}
import jax
import jax.numpy as jnp
import numpy as np

from remat_lesson import (
    DEPTH,
    Checks,
    W,
    difference_diagnosis,
    numpy_only,
    plain,
    scaled_square,
    sine_sum,
    tanh_network,
    x,
)

checks = Checks(3, where="'Your turn: a central difference': central_difference and EPSILON")


def check_slope(fn, point, direction, eps, exact, rtol, atol):
    """The learner's central difference of fn (a NumPy objective) against the exact slope; a miss
    says which usual mistake fits it (a one-sided formula, a factor, too small a step)."""
    found = numpy_only(central_difference)(fn, point, direction, eps)
    try:
        diagnosis = difference_diagnosis(fn, point, direction, eps, float(found), exact, rtol)
    except (TypeError, ValueError):  # not one number: the judgment below says what it is
        diagnosis = ""
    checks.close(found, exact, rtol=rtol, atol=atol, what="directional derivative", hint=diagnosis or None)


with checks.item(1, "along (1, ..., 1) at the lesson's input, with EPSILON, it matches grad . d (rtol 3e-3)"):
    checks.equal(np.ndim(EPSILON), 0, what="EPSILON's number of dimensions (one number)")
    checks.at_least(EPSILON, 1e-12, what="EPSILON")
    checks.below(EPSILON, 0.1, what="EPSILON")
    direction = np.ones(x.shape, np.float32)
    # The answer cell runs alone where JAX cannot be imported: the objective is the lesson's, in NumPy.
    check_slope(
        tanh_network(np.asarray(W), DEPTH),
        np.asarray(x),
        direction,
        float(EPSILON),
        float(jnp.vdot(jax.grad(plain)(x), direction)),
        rtol=3e-3,
        atol=1e-6,
    )
### BEGIN HIDDEN TESTS
with checks.item(1, "a curved function where a forward difference is visibly wrong: scale * sum(v**2)"):
    rng = checks.rng()
    scale, point = float(rng.uniform(20.0, 80.0)), 0.5 * rng.normal(size=4)
    d = rng.normal(size=4)
    d /= np.linalg.norm(d)
    check_slope(scaled_square(scale), point, d, 1e-2, 2.0 * scale * float(point @ d), rtol=1e-3, atol=1e-6)
with checks.item(1, "a fresh function, point and direction: sum(sin(k v)) agrees with its exact slope"):
    rng = checks.rng()
    while True:  # a draw that tells the answers apart: a clear slope, a visible curvature
        frequency, point, d = float(rng.uniform(1.0, 4.0)), rng.uniform(-1.0, 1.0, 5), rng.normal(size=5)
        slope = float(np.sum(frequency * np.cos(frequency * point) * d))
        curvature = float(np.sum(-(frequency**2) * np.sin(frequency * point) * d * d))
        third = float(np.sum(-(frequency**3) * np.cos(frequency * point) * d**3))
        tolerance = 1e-3 * abs(slope) + 1e-5
        # a forward difference is off by about eps/2 * curvature, a central one by eps**2/6 * third
        if abs(slope) > 0.1 and 0.5e-3 * abs(curvature) > 10 * tolerance and 1e-6 / 6 * abs(third) < tolerance / 10:
            break
    check_slope(sine_sum(frequency), point, d, 1e-3, slope, rtol=1e-3, atol=1e-5)
### END HIDDEN TESTS
checks.score()


# %%
direction = jnp.ones_like(x)
finite = central_difference(plain, x, direction, EPSILON)
automatic = float(jnp.vdot(jax.grad(plain)(x), direction))
print(f"Directional derivative along (1, ..., 1): finite {finite:.7g}, automatic {automatic:.7g}, epsilon {EPSILON:g}")

# %% [markdown]
# ## Truncation against rounding
#
# The same estimate at other steps, computed as the check computes it (the lesson's network in
# float32 NumPy), each against the automatic derivative, beside the rounding bound
# `u·(|f| + Σᵢ|∂f/∂xᵢ|·|xᵢ|)/ε` (relative to the derivative) and the check's tolerance:

# %%
from remat_lesson import DEPTH, W, tanh_network

numpy_objective = tanh_network(np.asarray(W), DEPTH)
x_numpy, d_numpy = np.asarray(x), np.ones(x.shape, np.float32)
gradient_numpy = np.asarray(jax.grad(plain)(x), np.float64)
unit_roundoff = float(jnp.finfo(jnp.float32).eps) / 2
check_rtol = 3e-3
print(f"the check's tolerance: rtol {check_rtol:g}")
for eps in (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 3e-6, 1e-6):
    error = abs(central_difference(numpy_objective, x_numpy, d_numpy, eps) - automatic) / abs(automatic)
    bound = (
        unit_roundoff
        * (abs(float(numpy_objective(x_numpy))) + float(np.abs(gradient_numpy) @ np.abs(x_numpy)))
        / eps
        / abs(automatic)
    )
    verdict = "within" if error <= check_rtol else "outside"
    trust = (
        "" if bound <= check_rtol or error > check_rtol else ", but only by the luck of rounding: the bound is above it"
    )
    print(f"epsilon {eps:.0e}: relative error {error:.1e}, rounding bound {bound:.1e}, {verdict} the tolerance{trust}")

# %% [markdown]
# The largest step is off by truncation. Below the best step the rounding bound grows tenfold
# with every tenfold smaller step, and the actual error follows it in size but not in detail:
# at some steps the roundings of the two evaluations happen to cancel. The check compares one
# estimate with its tolerance, so it accepts such a lucky step, and it rejects the steps where
# the error is really large. A lucky step can fail on another network or point: choose
# `EPSILON` where the bound itself is below the tolerance, as the lesson's `1e-3` is.

# %% [markdown]
# ## Hessian-vector products
#
# A gradient check compares first derivatives. A stronger check differentiates once more: the
# Hessian-vector product `H(x) d` is the directional derivative of the gradient, and JAX
# computes it without forming `H` by pushing a tangent through the gradient function:
# `jax.jvp(jax.grad(f), (x,), (d,))`. For the rematerialized policy this differentiates
# *through* the recomputation too: the checkpoint acts inside `jax.grad` (reverse mode), and
# the outer `jax.jvp` differentiates the backward program it wrote, recomputation included.
# A section after the check shows which modes a checkpoint changes.
#
# ## Your turn: Hessian-vector products of both policies
#
# Write `hvp(fn, x, direction)` returning `H(x) @ direction` for a scalar function `fn`. Then
# choose `HVP_DIRECTION`: a **nonuniform** direction of the input's length (the lesson uses
# `jnp.linspace(-1, 1, 16)`). A uniform direction like `(1, ..., 1)` weights every coordinate
# alike and can hide an error that a nonuniform one reveals.


# %% nbgrader={"solution": true, "grade_id": "hvp"}
def hvp(fn, x, direction):
    """Hessian of fn at x applied to direction, by forward-over-reverse differentiation."""
    ### BEGIN SOLUTION
    _, tangent = jax.jvp(jax.grad(fn), (x,), (direction,))
    return tangent
    ### END SOLUTION


### BEGIN SOLUTION
HVP_DIRECTION = jnp.linspace(-1.0, 1.0, x.shape[0])
### END SOLUTION

# %% nbgrader={"grade": true, "grade_id": "test-hvp", "points": 3}
import jax
import jax.numpy as jnp
import numpy as np

from remat_lesson import DEPTH, Checks, W, fresh_network, make_objective, x


def jax_hessian_hvp(weights, point, direction, depth):
    """The shipped plain objective's whole Hessian matrix (float32, from JAX) times direction."""
    hessian = jax.hessian(make_objective(jnp.asarray(weights, jnp.float32), depth, False))(jnp.asarray(point))
    return np.asarray(hessian, np.float64) @ np.asarray(direction, np.float64)


def check_hvp(weights, point, direction, depth, reference, atol):
    """Both policies' HVPs against reference(weights, point, direction, depth), within atol: room
    for float32 rounding of an exact product, and none for a difference of gradients."""
    for rematerialize in (False, True):
        objective = make_objective(jnp.asarray(weights, jnp.float32), depth, rematerialize)
        found = hvp(objective, jnp.asarray(point, jnp.float32), jnp.asarray(direction, jnp.float32))
        checks.close(
            found,
            reference(weights, point, direction, depth),
            rtol=0.0,
            atol=atol,
            what=("remat" if rematerialize else "plain") + " HVP",
            hint="an exact Hessian-vector product, not a difference of gradients",
        )


checks = Checks(3, where="'Your turn: Hessian-vector products of both policies': hvp and HVP_DIRECTION")
with checks.item(
    1, "the lesson network along linspace(-1, 1, 16): both policies' HVPs agree with plain's whole Hessian"
):
    # The visible reference is JAX's Hessian matrix of the shipped objective: a NumPy gradient
    # here would show the reverse-oracle task's answer. The hidden item checks against NumPy.
    along = np.linspace(-1.0, 1.0, 16)
    # 2e-6 of the largest entry: between how close an exact float32 product and the best central
    # difference of float32 gradients come here (printed by the cell after this check).
    check_hvp(W, x, along, DEPTH, jax_hessian_hvp, 2e-6 * float(np.abs(jax_hessian_hvp(W, x, along, DEPTH)).max()))
with checks.item(1, "HVP_DIRECTION is nonuniform and has the input's length"):
    d = np.asarray(HVP_DIRECTION, np.float64)
    checks.equal(list(d.shape), [16], what="HVP_DIRECTION's shape")
    checks.at_least(
        np.ptp(d), 1e-3, what="the spread of HVP_DIRECTION's entries (a uniform direction is the weaker test)"
    )


### BEGIN HIDDEN TESTS
def reference_hvp(weights, point, direction, depth):
    """H(point) @ direction in float64 without JAX: the complex-step derivative of a NumPy
    gradient along direction (no difference is taken, so nothing cancels)."""
    weights = np.asarray(weights, np.float64)

    def gradient(at):
        values = [at]
        for _ in range(depth):
            values.append(np.tanh(weights @ values[-1]))
        bar = 2.0 * values[-1]
        for h in values[:0:-1]:
            bar = weights.T @ ((1.0 - h * h) * bar)
        return bar

    step = 1e-20
    return gradient(np.asarray(point, np.float64) + 1j * step * np.asarray(direction, np.float64)).imag / step


with checks.item(1, "a fresh network: both policies agree with an independent reference"):
    rng = checks.rng()
    w_fresh, x_fresh, depth = fresh_network(rng, depths=(2, 5), widths=(4, 9), scale=0.6)
    width = len(x_fresh)
    # A long direction: a difference of gradients is off by its step squared times |d|**3.
    d_fresh = (4.0 * rng.normal(size=width)).astype(np.float32)
    hessian = np.stack([reference_hvp(w_fresh, x_fresh, e, depth) for e in np.eye(width)], axis=1)
    # float32 rounding of H @ d is bounded by the size of |H| @ |d|.
    check_hvp(w_fresh, x_fresh, d_fresh, depth, reference_hvp, 4e-6 * float((np.abs(hessian) @ np.abs(d_fresh)).max()))
### END HIDDEN TESTS
checks.score()


# %%
hvp_plain, hvp_remat = np.asarray(hvp(plain, x, HVP_DIRECTION)), np.asarray(hvp(remat, x, HVP_DIRECTION))
hvp_error = float(np.max(np.abs(hvp_plain - hvp_remat)))
print(f"Hessian-vector products along a nonuniform direction agree; largest difference {hvp_error:.3g}.")
print("All finite:", bool(np.isfinite(hvp_plain).all() and np.isfinite(hvp_remat).all()))

# %% [markdown]
# The check asks for an exact product, not a difference of gradients. How close can central
# differences of float32 gradients come? Try 26 steps from `1e-5` to `1`, against the
# Hessian matrix's product, relative to its largest entry:

# %%
hessian_product = np.asarray(jax.hessian(plain)(x), np.float64) @ np.asarray(HVP_DIRECTION, np.float64)
scale_of_product = float(np.abs(hessian_product).max())
differences_of_gradients = {}
for step in np.geomspace(1e-5, 1.0, 26):
    step = np.float32(step)
    up, down = jax.grad(plain)(x + step * HVP_DIRECTION), jax.grad(plain)(x - step * HVP_DIRECTION)
    quotient = (np.asarray(up, np.float64) - np.asarray(down, np.float64)) / (2 * float(step))
    differences_of_gradients[float(step)] = float(np.abs(quotient - hessian_product).max()) / scale_of_product
best_step = min(differences_of_gradients, key=differences_of_gradients.get)
print(
    f"exact HVP (plain): {float(np.abs(hvp_plain - hessian_product).max()) / scale_of_product:.1e} of the largest entry; "
    f"the best of {len(differences_of_gradients)} differences of gradients: {differences_of_gradients[best_step]:.1e} "
    f"(step {best_step:.1e})"
)

# %% [markdown]
# On this network and direction, the exact product agrees to a few parts in 10⁷ of the largest
# entry, while no step brings a difference of gradients within a few parts in 10⁶: the check's
# tolerance, `2e-6` of the largest entry, lies between the two.

# %% [markdown]
# ## Which differentiation modes does a checkpoint change?
#
# The JAX docs say a checkpointed function behaves differently under `jax.linearize` and
# `jax.vjp` (and `jax.grad`), but not under `jax.jvp` (`docs/gradient-checkpointing.md`).
# Read it in the programs: forward mode (`jax.jvp`) computes values and tangents together in
# one pass; `jax.linearize` splits the work into a primal pass and a linear function to apply
# later, and the linear function is where a checkpoint recomputes. Count the `tanh` and the
# products each program is written with:

# %%
from remat_lesson import primitive_counts

for name, fn in (("plain", plain), ("remat", remat)):
    jvp_program = jax.make_jaxpr(lambda v, t, fn=fn: jax.jvp(fn, (v,), (t,)))(x, HVP_DIRECTION)
    _, linear = jax.linearize(fn, x)
    linear_program = jax.make_jaxpr(linear)(HVP_DIRECTION)
    hvp_program = jax.make_jaxpr(lambda v, t, fn=fn: hvp(fn, v, t))(x, HVP_DIRECTION)
    np.testing.assert_allclose(
        np.asarray(jax.jvp(fn, (x,), (HVP_DIRECTION,))[1]), np.asarray(linear(HVP_DIRECTION)), rtol=1e-6
    )
    print(
        f"{name}: jvp writes {primitive_counts(jvp_program)['tanh']} tanh and {primitive_counts(jvp_program)['dot_general']} "
        f"products; linearize's linear function {primitive_counts(linear_program)['tanh']} tanh and "
        f"{primitive_counts(linear_program)['dot_general']} products; your HVP {primitive_counts(hvp_program)['tanh']} tanh "
        f"and {primitive_counts(hvp_program)['dot_general']} products"
    )

# %% [markdown]
# Under `jax.jvp` the two policies write the same program: the checkpoint changes nothing in
# forward mode. The linear function of plain reuses what `jax.linearize` kept (no `tanh`);
# remat's recomputes the forward pass inside it (four `tanh`, four more products). Your HVP is
# forward over reverse: the checkpoint acts in the inner `jax.grad`, and the outer `jax.jvp`
# pushes a tangent through everything the backward program recomputes, which is why it tests
# the recomputation as well as the gradient.

# %% [markdown]
# ## Your turn: why is the HVP the stronger test?
#
# In two or three sentences: why would equal first derivatives alone be a weaker test of the
# rematerialized policy than equal Hessian-vector products along a nonuniform direction?

# %% [markdown]
# **How this answer is graded** (2 points, by a person, who reads this cell beside your answer):
#
# - 1 point: the HVP differentiates the backward program once more, recomputation included, so
#   it tests the derivatives of the recomputed values (how the gradient changes), where equal
#   gradients test only their values at one point.
# - 1 point: a nonuniform direction weights the coordinates differently, so errors in different
#   coordinates cannot cancel or hide as they can along `(1, …, 1)`.
#
# Any true account in your own words earns the points.

# %% [markdown] nbgrader={"solution": true, "grade": true, "grade_id": "answer-why-hvp", "points": 2}
# Equal gradients show that the recomputed forward values were right at this one point. The
# Hessian-vector product differentiates the whole backward pass once more, recomputation
# included, so it also tests how the gradient *changes*: the derivatives of the recomputed
# values, not only the values. A nonuniform direction gives every coordinate a different
# weight, so errors in different coordinates are less likely to cancel than along (1, …, 1),
# where every coordinate counts alike.

# %%
save_record(
    "04-exercise",
    {
        "directional_derivative": {"finite": finite, "automatic": automatic, "epsilon": EPSILON},
        "max_abs_error": {"hvp_plain_vs_remat": hvp_error},
        "hvp_direction": np.asarray(HVP_DIRECTION).tolist(),
    },
)
print("recorded the exercise for stage 5")

# %% [markdown]
# ## Diagnose the result
#
# If the gradients or HVPs differ: compare inputs, weights, random keys and any hidden effect
# inside the checkpointed function first; recomputation of an impure function need not give
# the same value twice. If memory does not improve: look at where the boundary sits, the
# shapes of what is saved, the compiler's buffer estimates and a measured peak of the full
# step, before adding more checkpoint wrappers.
