# %% [markdown]
# # Stage 4 of 5 · Exercise
#
# Two more independent checks that rematerialization leaves the derivatives alone: a finite
# difference, and Hessian-vector products of both policies.

# %% [markdown]
# ## Your map
#
# - **This stage:** about 20 minutes.
# - **Needs:** nothing from another stage's run.
# - **Points:** 8: 6 checked automatically (two graded cells) and 2 read by a person (one
#   written answer).
# - **Compare with:** `reference-execution.txt` from "Stage 4 of 5 · Exercise" (the HVPs' tiny
#   difference agrees in size, not digit for digit).

# %%
import jax
import jax.numpy as jnp
import numpy as np

from remat_lesson import plain, remat, save_record, x

print(f"Stage 4 of 5 · Exercise · JAX {jax.__version__} on {jax.default_backend()}")

# %% [markdown]
# ## A directional derivative, two ways
#
# The derivative of `f` along `d` is `∇f(x) · d`; a **central difference** estimates it:
#
# $$D_d f(x) \approx \frac{f(x + \varepsilon d) - f(x - \varepsilon d)}{2\varepsilon}.$$
#
# Its truncation error shrinks like `ε²`, but float32 rounding of `f`, divided by `ε`, grows:
# too large an `ε` truncates, too small rounds (*Going deeper:* `deeper/04-differences-and-modes.ipynb`
# shows both).
#
# ## Your turn: a central difference
#
# Write `central_difference(fn, x, direction, eps)`, returning a Python float, and set
# `EPSILON` to a step of your choice, small enough to truncate little and large enough to round
# little: the check asks your estimate along `(1, …, 1)` to match `jax.grad`'s to a relative
# `3e-3`. NumPy only: the checks run this cell alone and hand it NumPy objectives.


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


# %% [markdown]
# ## Hessian-vector products
#
# The Hessian-vector product `H(x) d` is the directional derivative of the gradient: forward
# mode (`jax.jvp`) applied to the function `jax.grad(f)`, at `x`, along `d`, never forming the
# whole Hessian matrix.
#
# ## Your turn: Hessian-vector products of both policies
#
# Write `hvp(fn, x, direction)`, returning `H(x) @ direction`, and choose a **nonuniform**
# `HVP_DIRECTION` of the input's length (its entries not all equal). The checks use their own
# directions too, and compile `hvp` with `jax.jit`: keep it JAX code (no NumPy conversion inside).
# The written question below asks why the direction matters.


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

from remat_lesson import (
    ARG,
    DEPTH,
    Checks,
    W,
    bind,
    derivatives_along,
    float32_objective,
    fresh_network,
    make_objective,
    plain,
    program_value,
    remat,
    x,
)


def jax_hessian_hvp(weights, point, direction, depth):
    """The shipped plain objective's whole Hessian matrix (float32, from JAX) times direction."""
    hessian = jax.hessian(make_objective(jnp.asarray(weights, jnp.float32), depth, False))(jnp.asarray(point))
    return np.asarray(hessian, np.float64) @ np.asarray(direction, np.float64)


def check_hvp(weights, point, direction, depth, reference, atol):
    """Both policies' HVPs against reference(weights, point, direction, depth), within atol: room
    for float32 rounding of an exact product, and none for a difference of gradients (the
    objective computes in float32, and hvp is judged as the float32 program it is)."""
    for rematerialize in (False, True):
        objective = float32_objective(jnp.asarray(weights, jnp.float32), depth, rematerialize)
        point32, direction32 = jnp.asarray(point, jnp.float32), jnp.asarray(direction, jnp.float32)
        found = program_value(bind(hvp, objective, ARG, ARG), point32, direction32)
        checks.close(
            found,
            reference(weights, point, direction, depth),
            rtol=0.0,
            atol=atol,
            what=("remat" if rematerialize else "plain") + " HVP",
            hint="an exact Hessian-vector product, not a difference of gradients",
        )


def check_linear(weights, point, direction, other, depth, atol):
    """Both policies' hvp is linear in its direction, as an exact product is: along another direction
    its second derivative is exactly zero and its first is its HVP of that direction (a difference of
    gradients, however extrapolated, is neither)."""
    for rematerialize in (False, True):
        objective = float32_objective(jnp.asarray(weights, jnp.float32), depth, rematerialize)
        program = bind(hvp, objective, ARG, ARG)
        point32, other32 = jnp.asarray(point, jnp.float32), jnp.asarray(other, jnp.float32)
        first, second = program_value(
            program, point32, jnp.asarray(direction, jnp.float32), wrap=derivatives_along(other32)
        )
        policy = "remat" if rematerialize else "plain"
        checks.equal(
            float(np.abs(np.asarray(second)).max()),
            0.0,
            what=f"the largest entry of the {policy} HVP's second derivative along another direction",
            hint="H(x) @ direction is linear in direction: an exact product (jax.jvp of jax.grad) of the direction as given",
        )
        checks.close(
            first,
            program_value(program, point32, other32),
            rtol=0.0,
            atol=atol,
            what=f"the {policy} HVP's derivative along another direction, against its HVP of that direction",
        )


checks = Checks(3, where="'Your turn: Hessian-vector products of both policies': hvp and HVP_DIRECTION")
with checks.item(
    1, "the lesson network along linspace(-1, 1, 16): both policies' HVPs agree with plain's whole Hessian"
):
    # The visible reference is JAX's Hessian matrix of the shipped objective: a NumPy gradient
    # here would show the reverse-oracle task's answer. The hidden item checks against NumPy.
    along = np.linspace(-1.0, 1.0, 16)
    # 2e-6 of the largest entry: between how close an exact float32 product and the best central
    # difference of float32 gradients come here (this stage's Going deeper notebook measures both).
    bound = 2e-6 * float(np.abs(jax_hessian_hvp(W, x, along, DEPTH)).max())
    check_hvp(W, x, along, DEPTH, jax_hessian_hvp, bound)
    check_linear(W, x, along, np.cos(np.arange(16.0)), DEPTH, bound)
with checks.item(1, "HVP_DIRECTION: nonuniform, the input's length; along it the two policies' HVPs agree"):
    d = np.asarray(HVP_DIRECTION, np.float64)
    checks.equal(list(d.shape), [16], what="HVP_DIRECTION's shape")
    checks.at_least(
        np.ptp(d), 1e-3, what="the spread of HVP_DIRECTION's entries (a uniform direction is the weaker test)"
    )
    along_yours = jnp.asarray(HVP_DIRECTION, jnp.float32)
    plain_hvp = np.asarray(hvp(plain, x, along_yours), np.float64)
    checks.close(
        hvp(remat, x, along_yours),
        plain_hvp,
        rtol=1e-5,
        atol=1e-6 * float(np.abs(plain_hvp).max()),
        what="remat's HVP against plain's, along HVP_DIRECTION",
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


def exact_float32_error(weights, point, direction, depth):
    """How far the exact float32 HVP (forward over reverse, both policies) is from the reference."""
    reference = reference_hvp(weights, point, direction, depth)
    worst = 0.0
    for rematerialize in (False, True):
        objective = make_objective(jnp.asarray(weights, jnp.float32), depth, rematerialize)
        _, exact = jax.jvp(jax.grad(objective), (jnp.asarray(point),), (jnp.asarray(direction),))
        worst = max(worst, float(np.abs(np.asarray(exact, np.float64) - reference).max()))
    return worst


def rounding_bound(hessian, direction):
    """Room for float32 rounding of H @ direction, which the size of |H| @ |direction| bounds."""
    return 4e-6 * float((np.abs(hessian) @ np.abs(direction)).max())


with checks.item(1, "a fresh network along random directions: both policies agree with an independent reference"):
    rng = checks.rng()
    while True:
        w_fresh, x_fresh, depth = fresh_network(rng, depths=(2, 5), widths=(4, 9), scale=0.6)
        # Long directions: a difference of gradients is off by its step squared times |d|**3.
        d_fresh = (4.0 * rng.normal(size=len(x_fresh))).astype(np.float32)
        d_other = (4.0 * rng.normal(size=len(x_fresh))).astype(np.float32)
        hessian = np.stack([reference_hvp(w_fresh, x_fresh, e, depth) for e in np.eye(len(x_fresh))], axis=1)
        # About 1 draw in 700 rounds the exact product itself past its bound (the instructor's
        # solutions then failed their own check, and nobody was graded): drawn again until it
        # lies within half of it along each direction.
        if all(
            exact_float32_error(w_fresh, x_fresh, d, depth) <= rounding_bound(hessian, d) / 2
            for d in (d_fresh, d_other)
        ):
            break
    # H @ (8 d) is exactly 8 (H @ d), rounding included (8 is a power of two), while a difference's
    # error grows 512 times: a step whose error lands within the bound along d by luck fails there.
    for along in (d_fresh, np.float32(8.0) * d_fresh, d_other):
        check_hvp(w_fresh, x_fresh, along, depth, reference_hvp, rounding_bound(hessian, along))
    check_linear(w_fresh, x_fresh, d_fresh, d_other, depth, rounding_bound(hessian, d_other))
### END HIDDEN TESTS
checks.score()


# %%
direction = jnp.ones_like(x)
finite = central_difference(plain, x, direction, EPSILON)
automatic = float(jnp.vdot(jax.grad(plain)(x), direction))
print(f"Directional derivative along (1, ..., 1): finite {finite:.7g}, automatic {automatic:.7g}")
hvp_plain, hvp_remat = np.asarray(hvp(plain, x, HVP_DIRECTION)), np.asarray(hvp(remat, x, HVP_DIRECTION))
hvp_error = float(np.max(np.abs(hvp_plain - hvp_remat)))
print(
    f"HVPs of plain and remat along HVP_DIRECTION: largest difference {hvp_error:.3g}, of entries up to {np.abs(hvp_plain).max():.3g}"
)
save_record(
    "04-exercise",
    {
        "directional_derivative": {"finite": finite, "automatic": automatic, "epsilon": EPSILON},
        "max_abs_error": {"hvp_plain_vs_remat": hvp_error},
        "hvp_direction": np.asarray(HVP_DIRECTION).tolist(),
    },
)

# %% [markdown]
# ## Your turn: why is the HVP the stronger test?
#
# In two or three sentences: what do equal HVPs of the two policies test that equal gradients
# do not? What can one direction miss, and how do you make that unlikely? One point per question,
# graded by a person; your own words.

# %% [markdown] nbgrader={"solution": true, "grade": true, "grade_id": "answer-why-hvp", "points": 2}
# Equal gradients show that the recomputed forward values were right at this one point. The HVP
# differentiates the whole backward pass once more, recomputation included, so it also tests
# how the gradient *changes*: the derivatives of the recomputed values. Along one direction `d`
# only `H d` is compared, so an error that `d` maps to zero stays hidden (along (1, …, 1), any
# error whose rows sum to zero); a nonuniform direction, better several random ones, makes such
# a coincidence unlikely.
#
# *Rubric for the grader (not shown to learners): 1 point, the HVP tests the derivatives of the
# recomputed values (how the gradient changes), not only their values at a point; 1 point, one
# direction sees only H d, so errors it maps to zero hide, and nonuniform or several random
# directions make that unlikely. A claim that a nonuniform direction rules out every hidden
# error is false.*
