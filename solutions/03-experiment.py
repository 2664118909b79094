# %% [markdown]
# # Stage 3 of 5 · Experiment
#
# Stage 2 put a `jax.checkpoint` boundary around each layer. Here we move the boundary and
# watch what changes: the gradient must not, the residual list and the memory estimate may.
# Then we read the two programs of a gradient to see *why*, choose what to save by name, and
# measure, on networks large enough to matter, when rematerialization saves memory at all.

# %% [markdown]
# ## Your map
#
# - **This stage:** about 65 minutes, the longest of the five; a natural break comes before
#   the sweep. Cells headed *Going deeper (optional)* add about 10 minutes; nothing graded
#   needs them.
# - **Needs:** nothing recorded by another stage. It uses the lesson's network and policies
#   from `remat_lesson.py` and the sweep from `remat_sweep.py`; stage 2's list of what each
#   policy saves is the starting point.
# - **Points:** 7, checked automatically (two graded cells: a named-residual policy, 3; sqrt(L)
#   segments, 4).
# - **Compare with:** `reference-execution.txt` beside this notebook, from the line
#   "Stage 3 of 5 · Experiment" on: with the pinned JAX 0.9.2 (and its XLA), counts and planned
#   bytes should match yours; measured peaks and timings will not.

# %%
import jax
import jax.numpy as jnp
import numpy as np

from remat_lesson import DEPTH, W, compile_gradient, plain, remat, saved_residual_lines, save_record, x

print(f"Stage 3 of 5 · Experiment · JAX {jax.__version__} on {jax.default_backend()}")

# %% [markdown]
# ## Move the boundary to the whole objective
#
# Wrapping the entire objective in one `jax.checkpoint` tells autodiff to keep only what goes
# *into* the objective and to rerun the whole forward pass during the backward pass.
#
# **Predict before you run the next cell:** how many entries will `whole` save, and will its
# compiled temporary bytes be lower than the per-layer policy's?

# %%
whole = jax.checkpoint(plain)

# %% [markdown]
# First the gradient. Stage 2 checked `plain` against your independent NumPy oracle; here
# `whole` is checked against `plain`.

# %%
gradient_whole = np.asarray(jax.grad(whole)(x))
gradient_plain = np.asarray(jax.grad(plain)(x))
np.testing.assert_allclose(gradient_whole, gradient_plain, rtol=3e-5, atol=1e-7)
print(
    "whole-objective gradient agrees with plain; largest difference:",
    float(np.max(np.abs(gradient_whole - gradient_plain))),
)

# %% [markdown]
# Now what it saves, beside the two policies of stage 2:

# %%
entries = {name: saved_residual_lines(fn, x) for name, fn in (("plain", plain), ("remat", remat), ("whole", whole))}
for name, lines in entries.items():
    print(f"{name}: {len(lines)} entries")
    print("\n".join("  " + line for line in lines))

# %% [markdown]
# And what the compiler plans for each. The raw analysis object is printed as the compiler
# returns it; `None` would mean this backend offers no estimate.

# %%
compiled = {name: compile_gradient(fn, x) for name, fn in (("plain", plain), ("remat", remat), ("whole", whole))}
for name, executable in compiled.items():
    print(f"{name}: {executable.memory_analysis()}")


# %%
def temp_bytes(executable):
    analysis = executable.memory_analysis()
    return None if analysis is None else analysis.temp_size_in_bytes


whole_entries = len(entries["whole"])
temp = {name: temp_bytes(executable) for name, executable in compiled.items()}
print(f"Entries: plain {len(entries['plain'])}, remat {len(entries['remat'])}, whole {whole_entries}.")
if None in temp.values():
    print("Temporary bytes: unavailable on this backend, so no comparison of estimates is possible.")
else:
    same = len(set(temp.values())) == 1
    print(
        f"Temporary bytes: plain {temp['plain']}, remat {temp['remat']}, whole {temp['whole']}: "
        + ("the same for all three boundaries." if same else "they differ between boundaries.")
    )

# %%
analysis = compiled["whole"].memory_analysis()
save_record(
    "03-experiment",
    {
        "residual_entries": {"whole": whole_entries},
        "memory": {
            "whole": None
            if analysis is None
            else {
                name: getattr(analysis, name)
                for name in (
                    "argument_size_in_bytes",
                    "output_size_in_bytes",
                    "temp_size_in_bytes",
                    "alias_size_in_bytes",
                )
            }
        },
        "max_abs_error": {"whole_vs_plain": float(np.max(np.abs(gradient_whole - gradient_plain)))},
    },
)
print("recorded the whole-objective boundary for stage 5")

# %% [markdown]
# The whole-objective boundary saves the fewest entries, its gradient is still right, and the
# compiler's temporary bytes did not move. Its two entries are `W` and the argument, the
# buffers stage 2 found exist anyway. Fewer entries, no saving: the reason is in the
# gradient's own programs. That it holds for any function, not only this small one, is the
# JAX docs' statement, not a measurement of this lesson: checkpointing the whole function you
# differentiate saves no memory (`docs/gradient-checkpointing.md`, the section on what
# `jax.checkpoint` does under `jax.grad`).
#
# ## Read the VJP: what a boundary really asks for
#
# `jax.vjp(f, x)` splits a gradient into two programs: a **forward** program that computes
# `f(x)` and hands over the residuals, and a **backward** program that takes those residuals
# and the output's cotangent. The JAX docs' page on gradient checkpointing
# (`docs/gradient-checkpointing.md` in jax-ml/jax) prints both side by side with a helper,
# `print_fwd_bwd`; `forward_and_backward` in `remat_lesson.py` returns the same two jaxprs.
# Count the primitives each one runs:

# %%
from remat_lesson import forward_and_backward, most_residuals_held, primitive_counts, vjp_residuals

for name, fn in (("plain", plain), ("remat", remat), ("whole", whole)):
    forward, backward = forward_and_backward(fn, x)
    f_counts, b_counts = primitive_counts(forward), primitive_counts(backward)
    print(
        f"{name:6s} forward: {f_counts['dot_general']} dots, {f_counts['tanh']} tanh, {f_counts['sub']} sub | "
        f"backward: {b_counts['dot_general']} dots, {b_counts['tanh']} tanh, {b_counts['sub']} sub | "
        f"residuals handed over: {len(forward.jaxpr.outvars) - 1}"
    )

# %% [markdown]
# The backward program of `whole` holds the entire forward pass: the four layers' dots, `tanh`
# and `sub` run again there, before the four transposed dots of the backward pass proper.
# This is what the docs spell out for `jax.checkpoint(f)`:
#
# 1. run the forward pass, discarding every residual;
# 2. at the start of the backward pass, run the forward pass again, *keeping* every residual;
# 3. run the backward pass on those.
#
# This is the boundary principle of rematerialization: a checkpoint keeps what enters it (its
# inputs) and can drop only what is computed inside it. The two entries are only what crosses
# the outer boundary. Inside the backward pass, step 2
# rebuilds all of plain's residuals, and they are held together again. `most_residuals_held`
# counts that: the most residual values (what the forward pass handed over, and what the
# backward pass recomputes) alive at once while the backward program runs, one equation at a
# time as JAX wrote it. It is a count of what the boundary asks for, in entries, before XLA
# fuses anything: a model, not a measurement of bytes.

# %%
for name, fn in (("plain", plain), ("remat", remat), ("whole", whole)):
    held = most_residuals_held(fn, x)
    print(
        f"{name:6s} hands over {len(saved_residual_lines(fn, x))} entries; the backward pass holds at most "
        f"{held['entries']} residual entries ({held['bytes']} bytes) at once"
    )

# %% [markdown]
# `whole` holds as many as `plain` at its peak: a checkpoint around the whole function moves
# the residuals from between the passes into the backward pass, and saves nothing. The docs
# draw a second conclusion from the same steps: a checkpoint around the **last** stage saves
# nothing either, because its residuals are rebuilt at the very start of the backward pass,
# while everything before it is still held. The first stages are the ones worth wrapping.
# Try each placement on the lesson's four layers:


# %%
def lesson_layer(v):
    return jnp.tanh(W @ v)


def checkpoint_these(wrapped_layers):
    """The lesson's objective with a checkpoint around each listed layer (1 to 4) alone."""

    def objective(v):
        for number in range(1, DEPTH + 1):
            v = (jax.checkpoint(lesson_layer) if number in wrapped_layers else lesson_layer)(v)
        return jnp.sum(v * v)

    return objective


def checkpoint_first_three(v):
    """One checkpoint around layers 1 to 3 together; layer 4 plain."""

    def first_three(u):
        for _ in range(3):
            u = lesson_layer(u)
        return u

    out = lesson_layer(jax.checkpoint(first_three)(v))
    return jnp.sum(out * out)


placements = {
    "no checkpoint (plain)": checkpoint_these(()),
    "whole objective": whole,
    "last layer only": checkpoint_these((4,)),
    "layers 1-3 together": checkpoint_first_three,
    "each of layers 1-3": checkpoint_these((1, 2, 3)),
    "each of layers 1-4 (remat)": checkpoint_these((1, 2, 3, 4)),
}
for name, fn in placements.items():
    np.testing.assert_allclose(np.asarray(jax.grad(fn)(x)), gradient_plain, rtol=1e-6, atol=0)
    print(
        f"{name:>27}: hands over {len(saved_residual_lines(fn, x))} entries, "
        f"the backward pass holds at most {most_residuals_held(fn, x)['entries']}"
    )
print(f"All {len(placements)} placements give plain's gradient within rtol 1e-6.")

# %% [markdown]
# Every placement gives plain's gradient (the last line). Read the held counts, not the
# handed-over ones:
#
# - around the whole objective, or around the last layer only, the backward pass holds as
#   many residuals as plain's: no saving, and extra work;
# - around the first layers, it holds fewer;
# - checkpointing layers 1-3 one by one holds exactly what checkpointing all four does: the
#   per-layer policy of stage 2 wraps the last layer too, and that wrapper buys nothing.
#
# These are entries in JAX's program. The compiler's temporary bytes printed earlier are a
# separate view, and the sweep further down shows when the two part ways.

# %% [markdown]
# ## Choose what to save: policies and names
#
# Placing `jax.checkpoint` well means editing the model's code. A **policy** is the other
# way: `jax.checkpoint(f, policy=...)` says which values the checkpoint *may* save. It does
# not make JAX save them: in the docs' words, "a value is only saved if it's actually needed
# by the backward pass" (`docs/gradient-checkpointing.md`, "List of policies"); whatever the
# backward pass needs and may not save is recomputed. JAX 0.9.2 offers the policies as
# functions in `jax.checkpoint_policies`:

# %%
print(sorted(name for name in dir(jax.checkpoint_policies) if not name.startswith("_")))

# %% [markdown]
# The two extremes first, around the lesson's whole objective: `everything_saveable` allows
# every value, the four products `W @ v` included; `nothing_saveable` allows none, which is
# what `jax.checkpoint` does without a policy (their docstrings). What does each save, and
# what does the compiler plan?

# %%
from remat_lesson import vjp_residuals


def preactivations_kept(fn):
    """How many of the four products W @ v are among the values fn's VJP keeps."""
    v, products = np.asarray(x, np.float64), []
    for _ in range(DEPTH):
        products.append(np.asarray(W, np.float64) @ v)
        v = np.tanh(products[-1])
    kept = [np.asarray(value, np.float64) for value in vjp_residuals(fn, x)]
    return sum(any(k.shape == z.shape and np.allclose(k, z, rtol=1e-5, atol=1e-7) for k in kept) for z in products)


for policy_name in ("everything_saveable", "nothing_saveable"):
    extreme = jax.checkpoint(plain, policy=getattr(jax.checkpoint_policies, policy_name))
    np.testing.assert_allclose(np.asarray(jax.grad(extreme)(x)), gradient_plain, rtol=1e-6, atol=0)
    print(
        f"{policy_name:>19}: {len(saved_residual_lines(extreme, x))} entries, {preactivations_kept(extreme)} of them "
        f"products W @ v; planned temporary bytes {temp_bytes(compile_gradient(extreme, x))}"
    )
print(f"for comparison, plain: {len(saved_residual_lines(plain, x))} entries, {preactivations_kept(plain)} products")

# %% [markdown]
# `everything_saveable` saves what plain saves, 9 entries, and none of the four products it
# allowed: the backward pass of `tanh` needs `h` and `1 − h`, never the product that went in.
# `nothing_saveable` saves what the whole-objective checkpoint saves. The plan is the same
# for both extremes, and for plain.

# %% [markdown]
# Some policies look for names. `jax.ad_checkpoint.checkpoint_name(value, name)` returns
# `value` unchanged and attaches a name to it. `save_only_these_names(...)` allows only the
# named values listed; `save_any_names_but_these(...)` allows every named value except those,
# and nothing unnamed; `save_anything_except_these_names(...)` allows everything, unnamed
# values included, except the names listed. A three-step chain shows the difference:

# %%
import re

from jax.ad_checkpoint import checkpoint_name

policies = jax.checkpoint_policies


def chain(v):
    first = checkpoint_name(jnp.sin(v), "first")
    second = checkpoint_name(jnp.sin(first), "second")
    return jnp.sum(jnp.sin(second))


def show_saved(title, fn, *args):
    """The saved residuals of fn at args, without their source locations."""
    lines = saved_residual_lines(fn, *args)
    print(f"{title}: {len(lines)} entries")
    for line in lines:
        print("   ", re.sub(r" from \S+:\d+:\d+( \(.*\))?$", "", line))


v0 = jnp.linspace(0.0, 1.0, 3)
named_values = {"first": np.sin(np.asarray(v0)), "second": np.sin(np.sin(np.asarray(v0)))}
for title, fn in (
    ("no checkpoint", chain),
    ("checkpoint, no policy", jax.checkpoint(chain)),
    ("save_only_these_names('first')", jax.checkpoint(chain, policy=policies.save_only_these_names("first"))),
    ("save_any_names_but_these('first')", jax.checkpoint(chain, policy=policies.save_any_names_but_these("first"))),
    (
        "save_anything_except_these_names('first')",
        jax.checkpoint(chain, policy=policies.save_anything_except_these_names("first")),
    ),
):
    show_saved(title, fn, v0)
    kept = [np.asarray(value) for value in vjp_residuals(fn, v0)]
    print(
        "    named values kept:",
        [name for name, value in named_values.items() if any(np.allclose(k, value) for k in kept)],
    )

# %% [markdown]
# Without a checkpoint the chain keeps its three `cos` factors. Inside a checkpoint with no
# policy it keeps only its argument. Saving only `"first"` keeps the argument and `"first"`;
# saving every name but `"first"` keeps the argument and `"second"`; in both, everything else
# is recomputed in the backward pass. Saving anything except `"first"` keeps the three `cos`,
# as no checkpoint does: they are unnamed, so allowed, and they are what the backward pass
# needs; neither name is needed.

# %% [markdown] tags=["going-deeper"]
# #### Going deeper (optional): the mark on saved values
#
# Why does a value saved by its name print as `output of reduce_precision`? JAX puts every
# value that a checkpoint computes and saves through a `reduce_precision` to its own format
# (the guard against rounding differences between the forward and the backward pass that
# stage 2 cited); the checkpoint's own inputs, such as the argument here, are saved as they
# came in, with no such mark. For
# float32 that changes no bit, but `print_saved_residuals` of JAX 0.9.2 names a value by the
# operation that produced it, and that is now the `reduce_precision`. The source of JAX
# 0.11.0 looks through it and prints `named 'first' from ...` instead (read there, not run
# here). So identify a saved value by its value, as the `named values kept` lines do, never by
# its printed label. The forward program shows the guard:

# %% tags=["going-deeper"]
forward, _ = forward_and_backward(jax.checkpoint(chain, policy=policies.save_only_these_names("first")), v0)
marks = [eqn for eqn in forward.jaxpr.eqns if eqn.primitive.name == "reduce_precision"]
saved_by_name = saved_residual_lines(jax.checkpoint(chain, policy=policies.save_only_these_names("first")), v0)
print(
    f"{len(saved_by_name)} values saved (the argument and 'first'), "
    f"{len(marks)} reduce_precision in the forward program, with exponent_bits={marks[0].params['exponent_bits']} "
    f"and mantissa_bits={marks[0].params['mantissa_bits']}; float32 has {jnp.finfo(jnp.float32).nexp} and "
    f"{jnp.finfo(jnp.float32).nmant}"
)

# %% [markdown]
# Policies also select by operation. `dots_with_no_batch_dims_saveable` keeps the output of
# every matrix product without batch dimensions (the docs' reason: such products are often
# limited by arithmetic, so keeping them is cheaper than recomputing them). Around the
# lesson's whole objective:

# %%
dots_policy = jax.checkpoint(plain, policy=policies.dots_with_no_batch_dims_saveable)
show_saved("whole objective, dots_with_no_batch_dims_saveable", dots_policy, x)
forward, _ = forward_and_backward(plain, x)
dot = next(eqn for eqn in forward.jaxpr.eqns if eqn.primitive.name == "dot_general")
print("a layer's dot: (contracting, batch) dimensions =", dot.params["dimension_numbers"])
np.testing.assert_allclose(np.asarray(jax.grad(dots_policy)(x)), gradient_plain, rtol=1e-6, atol=0)

# %% [markdown]
# The dot's batch dimensions are `((), ())`: none, so each layer's product `W @ v` is
# saveable, and the weights are kept as always. The `tanh` and `sub` are recomputed from the
# saved products.

# %% [markdown]
# ## Your turn: a named-residual policy
#
# Put both ideas together: a boundary around each layer (not the whole objective), and a
# policy that keeps the one value per layer that is expensive to recompute, its product.
#
# Write `named_policy_objective(weights, depth)`. It returns the lesson's objective for these
# weights and depth (`depth` layers `v ← tanh(weights @ v)`, then `sum(v²)`), with two
# changes:
#
# - inside the layer, the **pre-activation** `weights @ v` passes through
#   `checkpoint_name(..., "preactivation")` before the `tanh`;
# - each layer is wrapped in its own `jax.checkpoint`, with the policy
#   `jax.checkpoint_policies.save_only_these_names("preactivation")`; the loss `sum(v²)`
#   stays outside the checkpoints.
#
# **Predict first:** how many entries will it hand over at the lesson's `x`, and of which
# kinds (remember stage 2's `2v`)? Will its gradient change? The checks tell its saved
# residuals apart by value and compare its gradient (on the lesson's network; when graded, on
# a fresh one too). Then they rename `"preactivation"` in your program: a policy keyed on that
# name then finds nothing to save, and each layer keeps its input instead. A policy that keeps
# the products by operation (`checkpoint_dots`, `dots_with_no_batch_dims_saveable`) keeps the
# same values without using the name, and loses that point.

# %% nbgrader={"solution": true, "grade_id": "named-policy"}
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name


def named_policy_objective(weights, depth):
    """sum(v_depth**2), v <- tanh(weights @ v), each layer checkpointed, keeping its named pre-activation."""
    ### BEGIN SOLUTION
    w = jnp.asarray(weights)
    policy = jax.checkpoint_policies.save_only_these_names("preactivation")

    def layer(v):
        return jnp.tanh(checkpoint_name(w @ v, "preactivation"))

    layer = jax.checkpoint(layer, policy=policy)

    def objective(v):
        for _ in range(depth):
            v = layer(v)
        return jnp.sum(v * v)

    return objective
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test-named-policy", "points": 3}
import jax
import jax.numpy as jnp
import numpy as np

from remat_lesson import DEPTH, Checks, W, fresh_network, gradient, plain, vjp_residuals, x

checks = Checks(3, where="'Your turn: a named-residual policy': named_policy_objective")


def what_is_saved(fn, weights, point, depth, rename=None):
    """The values fn's VJP keeps at point, told apart by value: each layer's pre-activation
    `weights @ v`, each layer's input v (the first is the argument), the weights. What the loss
    keeps outside the checkpoints depends on how it is written (`v * v` keeps the last output,
    `v**2` keeps 2v): it is only asked to keep something of its own. rename=(old, new): the
    same, with every checkpoint_name `old` in fn called `new`."""
    weights64, inputs, preactivations = np.asarray(weights, np.float64), [np.asarray(point, np.float64)], []
    for _ in range(depth):
        preactivations.append(weights64 @ inputs[-1])
        inputs.append(np.tanh(preactivations[-1]))

    def layer_of(value, targets):
        match = (value.shape == z.shape and bool(np.allclose(value, z, rtol=1e-5, atol=1e-6)) for z in targets)
        return next((k + 1 for k, same in enumerate(match) if same), None)

    kept = {"pre-activations": [], "inputs": [], "weights": 0, "other": 0}
    for value in (np.asarray(v, np.float64) for v in vjp_residuals(fn, point, rename=rename)):
        if layer_of(value, preactivations) is not None:
            kept["pre-activations"].append(layer_of(value, preactivations))
        elif layer_of(value, inputs[:-1]) is not None:
            kept["inputs"].append(layer_of(value, inputs[:-1]))
        elif layer_of(value, [weights64]) is not None:
            kept["weights"] += 1
        else:
            kept["other"] += 1
    return {
        "pre-activations kept, by layer": sorted(kept["pre-activations"]),
        "layer inputs kept, by layer (the first is the argument)": sorted(kept["inputs"]),
        "weights": kept["weights"],
        "the loss keeps a value outside the checkpoints": kept["other"] > 0,
    }


LAYERS = "pre-activations kept, by layer"
INPUTS = "layer inputs kept, by layer (the first is the argument)"
with checks.item(
    1, "the lesson network saves the weights, its 4 pre-activations and what the loss keeps; its gradient is plain's"
):
    objective = named_policy_objective(W, DEPTH)
    checks.equal(
        what_is_saved(objective, W, x, DEPTH),
        {LAYERS: [1, 2, 3, 4], INPUTS: [], "weights": 1, "the loss keeps a value outside the checkpoints": True},
        what="the saved residuals, told apart by value",
        hint="name each pre-activation W @ v, and wrap each layer (not the loss) in jax.checkpoint with "
        'save_only_these_names("preactivation")',
    )
    checks.close(
        gradient(objective, x),
        jax.grad(plain)(x),  # a NumPy reference here would show the reverse-oracle task's answer
        rtol=1e-5,
        atol=1e-7,
        what="gradient",
    )
with checks.item(1, 'the name selects what is saved: kept while called "preactivation", recomputed once renamed'):
    # The same program with every checkpoint_name "preactivation" in it called otherwise: a
    # policy keyed on that name no longer finds it, so each layer keeps its input instead; a
    # policy that keeps the products by their operation keeps them whatever they are called.
    objective = named_policy_objective(W, DEPTH)
    kept = {}
    for label, rename in (('named "preactivation"', None), ("renamed", ("preactivation", "not-preactivation"))):
        saved = what_is_saved(objective, W, x, DEPTH, rename=rename)
        kept[label] = {"pre-activations": saved[LAYERS], "layer inputs": saved[INPUTS]}
    if not kept['named "preactivation"']["pre-activations"]:
        hint = (
            'nothing is kept under the name: pass W @ v through checkpoint_name(..., "preactivation") and give '
            'each layer\'s jax.checkpoint the policy save_only_these_names("preactivation")'
        )
    elif kept["renamed"]["pre-activations"]:
        hint = (
            "the pre-activations are kept whatever they are called, so the name selects nothing: a policy that "
            "keeps products by their operation (checkpoint_dots, dots_with_no_batch_dims_saveable) or keeps every "
            'name does not use it; use save_only_these_names("preactivation")'
        )
    else:
        hint = "once renamed, each layer (each in its own jax.checkpoint) keeps its input instead"
    checks.equal(
        kept,
        {
            'named "preactivation"': {"pre-activations": [1, 2, 3, 4], "layer inputs": []},
            "renamed": {"pre-activations": [], "layer inputs": [1, 2, 3, 4]},
        },
        what="the values kept, by layer",
        hint=hint,
    )


### BEGIN HIDDEN TESTS
def reference_gradient(weights, point, depth):
    """An independent float64 gradient of sum(v_depth**2)."""
    weights, values = np.asarray(weights, np.float64), [np.asarray(point, np.float64)]
    for _ in range(depth):
        values.append(np.tanh(weights @ values[-1]))
    bar = 2.0 * values[-1]
    for h in values[:0:-1]:
        bar = weights.T @ ((1.0 - h * h) * bar)
    return bar


with checks.item(1, "a fresh network: it keeps exactly its pre-activations, and its gradient"):
    w_fresh, x_fresh, depth = fresh_network(checks.rng(), depths=(2, 6), widths=(4, 9), scale=0.7)
    x_fresh = jnp.asarray(x_fresh)
    objective = named_policy_objective(w_fresh, depth)
    checks.equal(
        what_is_saved(objective, w_fresh, x_fresh, depth),
        {
            LAYERS: list(range(1, depth + 1)),
            INPUTS: [],
            "weights": 1,
            "the loss keeps a value outside the checkpoints": True,
        },
        what=f"the saved residuals of a depth-{depth} network, told apart by value",
    )
    expected = reference_gradient(w_fresh, x_fresh, depth)
    checks.close(
        gradient(objective, x_fresh), expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()), what="gradient"
    )
### END HIDDEN TESTS
checks.score()


# %% [markdown]
# Your policy beside the others: what crosses the boundary, the most the backward pass holds,
# how many products the backward pass writes, and the compiler's temporary bytes.

# %%
named = named_policy_objective(W, DEPTH)
for name, fn in (("plain", plain), ("whole", whole), ("remat", remat), ("your named policy", named)):
    _, backward = forward_and_backward(fn, x)
    print(
        f"{name:>18}: hands over {len(saved_residual_lines(fn, x))} entries, holds at most "
        f"{most_residuals_held(fn, x)['entries']}, backward dots {primitive_counts(backward)['dot_general']}, "
        f"planned temporary bytes {temp_bytes(compile_gradient(fn, x))}"
    )

# %% [markdown]
# Your policy holds no more than the per-layer checkpoint, and its backward pass writes only
# the transposed products: the products of the forward pass were kept, so only the `tanh` and
# `sub` are recomputed. The compiler's planned bytes stay where they were for a network this
# small.

# %% [markdown]
# ## A policy inside `lax.scan`
#
# The docs' practical notes single out loops. Under `jax.jit`, XLA makes its own decisions
# about what to keep and what to recompute, so a checkpoint is often not needed there; but a
# `lax.scan` stages out a forward loop and a backward loop, and XLA optimizes less across the
# two. There the docs advise a checkpoint on the loop's body, with a policy if some values are
# worth keeping. The lesson's network as a scan over its four layers:

# %%
from jax import lax

stacked = jnp.stack([W] * DEPTH)


def scan_objective(body_policy):
    """sum(v**2) after a lax.scan over the stacked layers; body_policy: None (no checkpoint),
    "checkpoint" (no policy), or a policy for the checkpointed body."""

    def body(v, w):
        return jnp.tanh(w @ v), None

    if body_policy == "checkpoint":
        body = jax.checkpoint(body)
    elif body_policy is not None:
        body = jax.checkpoint(body, policy=body_policy)

    def objective(v):
        v, _ = lax.scan(body, v, stacked)
        return jnp.sum(v * v)

    return objective


for name, body_policy in (
    ("plain body", None),
    ("checkpointed body", "checkpoint"),
    ("body with dots_with_no_batch_dims_saveable", policies.dots_with_no_batch_dims_saveable),
):
    fn = scan_objective(body_policy)
    np.testing.assert_allclose(np.asarray(jax.grad(fn)(x)), gradient_plain, rtol=1e-5, atol=1e-9)
    _, backward = forward_and_backward(fn, x)
    shapes = [line.split(" ")[0] for line in saved_residual_lines(fn, x)]
    counts = primitive_counts(backward)
    print(
        f"{name:>43}: saves {shapes}; the backward loop's body writes {counts['dot_general']} dot(s), {counts['tanh']} tanh"
    )

# %% [markdown]
# A scan saves a few entries, each a stack with one slice per layer (`f32[4,16]`), besides the
# stacked weights and the last output (kept for `2v`). The plain body stacks two arrays (the
# `tanh` outputs and their `sub`); the checkpointed body stacks one, each layer's input, and
# its backward loop recomputes the product and the `tanh` (two dots: the recomputed product
# and the transposed one); with the dots policy it stacks the products instead, and its
# backward loop recomputes only the `tanh`. The sweep below measures what a checkpointed body
# does to the compiler's bytes.

# %% [markdown] tags=["going-deeper"]
# ## Going deeper (optional): offloading, keeping a value somewhere else
#
# A third answer besides keeping and recomputing is to move a saved value to another memory
# and bring it back for the backward pass. JAX names two such policies:
# `save_and_offload_only_these_names(names_which_can_be_saved=..., names_which_can_be_offloaded=...,
# offload_src=..., offload_dst=...)` keeps some names on the device, offloads others and
# recomputes the rest; `offload_dot_with_no_batch_dims(offload_src, offload_dst)` offloads the
# products the dots policy above would keep. Source and destination are memory kinds. Here:

# %% tags=["going-deeper"]
device = jax.devices()[0]
print("device:", device.platform, "| its memory kinds:", [memory.kind for memory in device.addressable_memories()])
offloaded = jax.checkpoint(plain, policy=policies.offload_dot_with_no_batch_dims("device", "pinned_host"))
show_saved("whole objective, offload_dot_with_no_batch_dims('device', 'pinned_host')", offloaded, x)
np.testing.assert_allclose(np.asarray(jax.grad(offloaded)(x)), gradient_plain, rtol=1e-6, atol=0)
print("the gradient is plain's")

# %% [markdown] tags=["going-deeper"]
# The products are kept in `pinned_host` memory (the `<host>` in their type), and the
# gradient is unchanged. On this CPU backend that moves nothing anywhere that matters: the
# "device" is the host, so its memory kinds all live in the same RAM. Offloading is for an
# accelerator with its own memory (a GPU's or a TPU's), where a host copy frees device memory
# at the price of transfers. This lesson runs on a CPU and does not measure it.

# %% [markdown]
# ## When does rematerialization actually save memory? A sweep over depth
#
# The four-layer network above plans a few hundred temporary bytes. Here the network is a
# stack of `L` layers `x ← tanh(x @ W_l)` acting on a batch `x` of shape `(B, D)`, with loss
# `0.5 * sum(x**2)`, in float32, differentiated with respect to the weights `W` of shape
# `(L, D, D)`. The batch is at least as wide as a layer (`B ≥ D`), so every activation is at
# least as big as a layer's weights; narrower batches are not measured in this lesson.
#
# `remat_sweep.py` computes the same loss in five ways that differ only in what the backward
# pass keeps:
#
# | policy | what it is |
# |---|---|
# | `plain` | an unrolled Python loop over the layers |
# | `checkpoint_per_layer` | the same loop with every layer wrapped in `jax.checkpoint` |
# | `checkpoint_dots` | per-layer checkpoint with `jax.checkpoint_policies.checkpoint_dots`: keep matmul outputs, recompute the `tanh` |
# | `scan` | `lax.scan` over the stacked weights |
# | `scan_checkpointed_body` | `lax.scan` whose body is wrapped in `jax.checkpoint` |
#
# For each policy and depth it records the three views of memory that stage 2 taught you to
# keep apart: saved-residual entries (and their bytes, from the printed shapes), the
# compiler's argument/output/temporary bytes, and the measured peak growth of a fresh Python
# process over one gradient call. It also counts the dot ops in the program before and after
# XLA compiles it, times warm calls, and checks every gradient against `plain`.
#
# **Predict before you run the sweep.** Set `SWEEP_PREDICTION` to a dict with these keys:
#
# ```python
# SWEEP_PREDICTION = {
#     "checkpoint_per_layer_lowers_temp": ...,    # True/False: below plain at the deepest L?
#     "scan_checkpointed_body_lowers_temp": ...,  # True/False: below scan at the deepest L?
#     "plain_temp_grows_like": ...,               # "constant", "sqrt(L)" or "L"
# }
# ```
#
# Nothing here is graded; the cell after the sweep sets your guesses beside the compiler's
# plans.

# %% nbgrader={"solution": true, "grade_id": "sweep-prediction"}
### BEGIN SOLUTION
# A guess from the storage model alone: every layer's activation is kept, and a checkpoint
# boundary should drop what lies inside it.
SWEEP_PREDICTION = {
    "checkpoint_per_layer_lowers_temp": True,
    "scan_checkpointed_body_lowers_temp": True,
    "plain_temp_grows_like": "L",
}
### END SOLUTION

# %%
assert set(SWEEP_PREDICTION) == {
    "checkpoint_per_layer_lowers_temp",
    "scan_checkpointed_body_lowers_temp",
    "plain_temp_grows_like",
}, "SWEEP_PREDICTION needs exactly the three keys shown above"
assert isinstance(SWEEP_PREDICTION["checkpoint_per_layer_lowers_temp"], bool)
assert isinstance(SWEEP_PREDICTION["scan_checkpointed_body_lowers_temp"], bool)
assert SWEEP_PREDICTION["plain_temp_grows_like"] in ("constant", "sqrt(L)", "L")
print("Prediction noted.")

# %% [markdown]
# ### Run the small sweep
#
# The default sweep is small enough for a laptop: a few depths, a narrow network. Measuring a
# peak means starting a fresh Python process, so the small sweep does that at its deepest
# size only. (`make sweep` runs the full-size version, with peaks at every depth, from the
# command line.)

# %%
import math
import os

import matplotlib.pyplot as plt
import numpy as np

import remat_sweep
from remat_sweep import plot_memory, plot_time, run_sweep

# The sweep is not graded: while autograding, two depths, the four policies compared below, one
# timing sample and no fresh processes keep a whole class's grading fast; learners and
# instructors get the full small sweep.
if os.environ.get("NBGRADER_EXECUTION") == "autograde":
    graded_quickly = ("checkpoint_per_layer", "scan", "scan_checkpointed_body")
    sweep_rows = run_sweep(depths=(4, 8), policies=graded_quickly, repeats=1, peak=False, progress=print)
else:
    sweep_rows = run_sweep(peak="deepest", progress=print)

MIB = 2.0**20
DEEPEST = max(row["depth"] for row in sweep_rows)
SHALLOWEST = min(row["depth"] for row in sweep_rows)
at_deepest = {row["policy"]: row for row in sweep_rows if row["depth"] == DEEPEST}
at_shallowest = {row["policy"]: row for row in sweep_rows if row["depth"] == SHALLOWEST}


def mib(value):
    return "n/a" if value is None else f"{value / MIB:.2f}"


print(f"\nAt L={DEEPEST}, D={remat_sweep.SMALL_WIDTH}, B={remat_sweep.SMALL_BATCH}, what the programs plan:")
print(f"{'policy':>24} {'entries':>8} {'saved MiB':>10} {'temp MiB':>9} {'dots before→after':>18} {'max |Δgrad|':>11}")
for name, row in at_deepest.items():
    dots = f"{row['dots_lowered']}→{row['dots_compiled']}"
    print(
        f"{name:>24} {row['residual_entries']:>8} {mib(row['residual_bytes']):>10} {mib(row['temp_bytes']):>9} "
        f"{dots:>18} {row['max_abs_diff_vs_plain']:>11.2g}"
    )
print("\nand what was measured (a fresh process's peak growth; median warm time over plain's):")
for name, row in at_deepest.items():
    print(f"{name:>24}: peak {mib(row['peak_bytes'])} MiB, time {row['time_vs_plain']:.2f}x plain's")

# %%
from remat_lesson import load_record

stage_record = load_record("03-experiment") or {}
stage_record["sweep_temp_bytes"] = {
    policy: {row["depth"]: row["temp_bytes"] for row in sweep_rows if row["policy"] == policy}
    for policy in dict.fromkeys(row["policy"] for row in sweep_rows)
}
save_record("03-experiment", stage_record)
print("recorded the sweep's planned temporary bytes for stage 5's figure")

# %% [markdown]
# Solid lines are the compiler's temporary bytes; crosses are the measured peak growth of a
# fresh process (argument + output + temporary buffers, so they sit above the solid line of
# the same colour). Policies with identical plans draw on top of each other. The grey lines
# are slopes for comparison, not fits.

# %%
plot_memory(sweep_rows)
plt.show()
plot_time(sweep_rows)
plt.show()


# %%
def growth_exponent(policy):
    """Slope of log(temp bytes) against log(L): 1 for O(L), 0.5 for O(sqrt L), 0 for flat."""
    points = [(row["depth"], row["temp_bytes"]) for row in sweep_rows if row["policy"] == policy and row["temp_bytes"]]
    if len(points) < 2:
        return None
    depths, temps = np.log(np.array(points, dtype=float)).T
    return float(np.polyfit(depths, temps, 1)[0])


def nearest_growth(exponent):
    return min({"constant": 0.0, "sqrt(L)": 0.5, "L": 1.0}.items(), key=lambda item: abs(item[1] - exponent))[0]


def temp_at_deepest(policy):
    return at_deepest[policy]["temp_bytes"]


if temp_at_deepest("plain") is None:
    print("This backend offers no memory analysis: the temporary-byte comparison cannot be made here.")
else:
    planned = {
        "checkpoint_per_layer_lowers_temp": temp_at_deepest("checkpoint_per_layer") < temp_at_deepest("plain"),
        "scan_checkpointed_body_lowers_temp": temp_at_deepest("scan_checkpointed_body") < temp_at_deepest("scan"),
        "plain_temp_grows_like": nearest_growth(growth_exponent("plain")),
    }
    for key, value in planned.items():
        verdict = "as you predicted" if SWEEP_PREDICTION[key] == value else "not what you predicted"
        print(f"{key}: planned {value!r}, {verdict}")
    print(f"(plain's planned temp grows like L^{growth_exponent('plain'):.2f} between L={SHALLOWEST} and L={DEEPEST})")

# %% [markdown]
# ### Your turn: sqrt(L) segments
#
# The checkpointed scan keeps one activation per layer: still `O(L)`. Split the `L` layers
# into `L / k` segments of `k` consecutive layers instead, and checkpoint whole segments:
#
# * an outer `lax.scan` runs over the segments; its body is wrapped in `jax.checkpoint`, so
#   the outer loop keeps only the activation entering each segment (`L / k` of them);
# * the body runs an inner `lax.scan` over that segment's `k` layers, so during the backward
#   pass a segment reruns its forward pass once and keeps its `k` layers' residuals only
#   while that segment is being differentiated.
#
# Memory is then about `L / k + k` activations, smallest near `k = sqrt(L)`, for the price of
# one extra forward pass.
#
# Write `sqrt_segments_loss(weights, x, segment_length)`: `weights` has shape `(L, D, D)`,
# `x` has shape `(B, D)`, and `L` is divisible by `segment_length` (raise `ValueError`
# otherwise). Return the same scalar loss as the other policies. Use `layer(x, w)` and
# `final_loss(x)` from `remat_sweep`, `weights.reshape(...)` to group the layers, and
# `lax.scan` with `jax.checkpoint`.
#
# This is the hardest task of the lesson (4 points). The visible checks compare your loss and
# gradients with plain scan at L=16, D=8 in segments of 4, count the activations your program
# hands its backward pass there (one per segment, give or take one), and ask for the
# `ValueError`; when graded, fresh sizes and the compiled plan at L=64 are checked too. The
# next two cells walk through the shapes; the hint after them gives the outline.
#
# #### The shapes, one level at a time
#
# Take `L = 12` layers of width `D = 4`, a batch `B = 5`, and segments of `k = 3`. A reshape
# groups the stacked weights into segments without copying a layer anywhere else:

# %%
from jax import lax

walk_weights, walk_x = remat_sweep.make_inputs(12, 4, 5)
grouped = walk_weights.reshape(12 // 3, 3, 4, 4)
print("weights", walk_weights.shape, "-> grouped", grouped.shape)
print("segment 2 holds layers 4 to 6:", bool(np.array_equal(grouped[1], walk_weights[3:6])))

# %% [markdown]
# `lax.scan(body, carry, xs)` calls `body(carry, xs[i])` for each `i` along the first axis and
# threads the carry through. Here is what a body receives from a scan over `grouped`, and what
# a scan over one segment hands its own body (each body prints while JAX traces it, once):


# %%
def inner_body(carry, one_layer):
    print("  a scan over one segment gives its body: carry", carry.shape, "and one layer", one_layer.shape)
    return carry, None


def outer_body(carry, one_segment):
    print("a scan over the segments gives its body: carry", carry.shape, "and one segment", one_segment.shape)
    lax.scan(inner_body, carry, one_segment)
    return carry, None


_ = lax.scan(outer_body, walk_x, grouped)

# %% [markdown]
# <details><summary><b>Hint: the outline</b> (open it when you are stuck)</summary>
#
# 1. Read `depth, width, _ = weights.shape`; raise `ValueError` unless `depth % segment_length == 0`.
# 2. Group: `segments = weights.reshape(depth // segment_length, segment_length, width, width)`.
# 3. Write `run_segment(x, segment_weights)`: an inner `lax.scan` of `layer` over
#    `segment_weights` (its body returns `(layer(carry, w), None)`), returning `(x, None)`.
#    Wrap `run_segment` in `jax.checkpoint`: that boundary is what keeps only one activation
#    per segment.
# 4. `x, _ = lax.scan(run_segment, x, segments)`, then `return final_loss(x)`.
#
# </details>

# %% nbgrader={"solution": true, "grade_id": "sqrt-segments"}
import jax
from jax import lax

from remat_sweep import final_loss, layer


def sqrt_segments_loss(weights, x, segment_length):
    """0.5 * sum(x_L**2) with the layers run in checkpointed segments of `segment_length`.

    weights: (L, D, D) with L divisible by segment_length; x: (B, D).
    """
    ### BEGIN SOLUTION
    depth, width, _ = weights.shape
    if depth % segment_length:
        raise ValueError(f"depth {depth} is not divisible by segment_length {segment_length}")
    segments = weights.reshape(depth // segment_length, segment_length, width, width)

    @jax.checkpoint
    def run_segment(x, segment_weights):
        x, _ = lax.scan(lambda carry, w: (layer(carry, w), None), x, segment_weights)
        return x, None

    x, _ = lax.scan(run_segment, x, segments)
    return final_loss(x)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test-sqrt-segments", "points": 4}
import functools

import numpy as np

import remat_sweep
from remat_lesson import ARG, Checks, bind, planned_memory, value_and_gradient, vjp_residuals

checks = Checks(4, where="Part 3, 'Your turn: sqrt(L) segments': sqrt_segments_loss")


def loss_and_gradient(loss, weights, x):
    """The loss and its gradient with respect to weights and x, compiled."""
    value, (weight_gradient, x_gradient) = value_and_gradient(loss, weights, x, argnums=(0, 1))
    return np.asarray(value), np.asarray(weight_gradient), np.asarray(x_gradient)


@functools.lru_cache
def reference_scan(depth, width, batch, seed):
    return loss_and_gradient(remat_sweep.scan_loss, *remat_sweep.make_inputs(depth, width, batch, seed))


def compare_with_plain_scan(depth, width, batch, segment_length, seed):
    weights, x = remat_sweep.make_inputs(depth, width, batch, seed)
    found = loss_and_gradient(bind(sqrt_segments_loss, ARG, ARG, segment_length), weights, x)
    label = f"L={depth}, D={width}, B={batch}, segment_length={segment_length}"
    for index, what in enumerate(("loss", "weight gradient", "x gradient")):
        # Summation order may differ between programs: compare at each array's own scale. In
        # float32, through up to 20 layers, two right programs have differed by 3.5e-5 of the x
        # gradient's largest entry; a wrong segmentation differs by the entries themselves.
        checks.close(
            found[index],
            reference_scan(depth, width, batch, seed)[index],
            rtol=3e-4,
            atol=3e-4 * float(np.abs(reference_scan(depth, width, batch, seed)[index]).max()),
            what=f"{what} ({label})",
        )


def batch_sized_residuals(loss, weights, x) -> list:
    """The values of shape (B, D) the backward pass of loss is handed (its VJP's residuals, a
    stacked one taken apart): what the checkpoint boundaries keep, before the compiler plans
    anything. The weights, which every policy keeps, are not among them."""
    batch, width = x.shape
    found = []
    for residual in (np.asarray(r, np.float64) for r in vjp_residuals(loss, weights, x)):
        if residual.ndim >= 2 and residual.shape[-2:] in ((batch, width), (width, batch)):
            for value in residual.reshape(-1, *residual.shape[-2:]):
                found.append(value if value.shape == (batch, width) else value.T)
    return found


def layer_outputs(weights, x) -> list:
    """x and each layer's output, as the plain scan computes them: the activations a segment keeps."""
    values = [np.asarray(x, np.float64)]
    for w in weights:
        values.append(np.asarray(remat_sweep.layer(values[-1].astype(np.float32), w), np.float64))
    return values


def activations_kept(values, weights, x) -> int:
    """How many of values are activations of the network (x or a layer's output, by value)."""
    outputs = layer_outputs(weights, x)
    return sum(any(np.allclose(value, a, rtol=1e-4, atol=1e-5) for a in outputs) for value in values)


with checks.item(1, "same loss and gradient as plain scan: 16 layers of width 8, segments of 4"):
    compare_with_plain_scan(16, 8, 32, 4, seed=0)
with checks.item(1, "16 layers in segments of 4 keep one activation per segment, not one per layer"):
    # Checkpointed segments hand the backward pass each segment's input (L/k = 4) and the last
    # output the loss reads; a scan without the checkpoint keeps several per layer (49 here), a
    # checkpointed body one per layer (17), a checkpoint around the whole loss only x (1).
    weights, x = remat_sweep.make_inputs(16, 8, 32)
    values = batch_sized_residuals(bind(sqrt_segments_loss, ARG, ARG, 4), weights, x)
    checks.at_least(
        activations_kept(values, weights, x),
        4,
        what="activations of shape (32, 8) kept for the backward pass",
        hint="fewer than one per segment: a checkpoint around the whole loss keeps only x and recomputes all L "
        "layers at once; wrap each segment (the outer scan's body) in jax.checkpoint",
    )
    checks.below(
        len(values),
        4 + 3,
        what="activations of shape (32, 8) kept for the backward pass",
        hint="about one per layer or more: without jax.checkpoint on the segment (the outer scan's body) the scans "
        "keep every layer's residuals",
    )
with checks.item(1, "a segment length that does not divide L raises ValueError"):
    weights, x = remat_sweep.make_inputs(16, 8, 32)
    checks.raises(ValueError, sqrt_segments_loss, weights, x, 5, what="sqrt_segments_loss(weights of L=16, x, 5)")

### BEGIN HIDDEN TESTS
with checks.item(
    1,
    "fresh sizes: the gradient of plain scan for every segment length that divides L; at L=64, segments of 8 plan "
    "well under the checkpointed-body scan's temporary bytes",
):
    rng = checks.rng()
    depth = int(rng.choice([6, 12, 20]))
    width, batch = int(rng.integers(3, 9)), int(rng.integers(9, 17))
    for segment_length in [k for k in range(1, depth + 1) if depth % k == 0]:
        compare_with_plain_scan(depth, width, batch, segment_length, seed=int(rng.integers(1 << 30)))
    # B >> D, so the kept activations dominate the plan: the checkpointed body keeps one per layer
    # (64), checkpointed segments about L/k + k (16). The program planned must compute the loss:
    # its gradient is checked first (the grader judges one program per function and shapes).
    compare_with_plain_scan(64, 16, 1024, 8, seed=int(rng.integers(1 << 30)))
    inputs = remat_sweep.make_inputs(64, 16, 1024)
    segments_plan = planned_memory(bind(sqrt_segments_loss, ARG, ARG, 8), *inputs)
    if segments_plan is None:
        print("memory analysis is unavailable on this backend: this relation cannot be checked here")
    else:
        checks.below(
            segments_plan["temp_size_in_bytes"],
            0.75 * planned_memory(remat_sweep.scan_checkpointed_body_loss, *inputs)["temp_size_in_bytes"],
            what="temporary bytes of segments of 8 at L=64, D=16, B=1024",
            hint="3/4 of the checkpointed-body scan's: an outer scan over checkpointed segments, each an inner "
            "scan, keeps about L/k + k activations instead of L",
        )
### END HIDDEN TESTS

checks.score()


# %% [markdown]
# ### Your policy beside the others
#
# The same compiler analysis for your segments, with `k` the divisor of `L` nearest
# `sqrt(L)`, at the sweep's width and batch and at depths beyond the small sweep, beside the
# two scans and the unrolled plain loop. The scans compile in a fraction of a second at any
# depth; the unrolled loop takes seconds at the deepest.

# %%
from remat_sweep import (
    SMALL_BATCH,
    SMALL_WIDTH,
    compiled_memory,
    make_inputs,
    plain_loss,
    scan_checkpointed_body_loss,
    scan_loss,
    sqrt_segment_length,
)


def planned_temp(loss, depth):
    weights, x = make_inputs(depth, SMALL_WIDTH, SMALL_BATCH)
    return compiled_memory(jax.jit(jax.grad(loss)).lower(weights, x).compile())["temp_size_in_bytes"]


def your_segments(weights, x):
    return sqrt_segments_loss(weights, x, sqrt_segment_length(weights.shape[0]))


# Three depths for the slope; two while autograding (the feedback still shows the comparison).
LONG_DEPTHS = (16, 64) if os.environ.get("NBGRADER_EXECUTION") == "autograde" else (16, 64, 256)
long_temps = {
    name: [planned_temp(loss, depth) for depth in LONG_DEPTHS]
    for name, loss in (
        ("plain (unrolled)", plain_loss),
        ("scan", scan_loss),
        ("scan_checkpointed_body", scan_checkpointed_body_loss),
        ("your sqrt segments", your_segments),
    )
}
if any(None in temps for temps in long_temps.values()):
    print("This backend offers no memory analysis: nothing to compare.")
else:
    for name, temps in long_temps.items():
        slope = float(np.polyfit(np.log(LONG_DEPTHS), np.log(temps), 1)[0])
        shown = ", ".join(f"L={d}: {t / MIB:.2f} MiB" for d, t in zip(LONG_DEPTHS, temps))
        print(f"{name:>24}: {shown}   (grows like L^{slope:.2f})")
    deepest = {name: temps[-1] for name, temps in long_temps.items()}
    print(
        f"At L={LONG_DEPTHS[-1]} your segments plan {deepest['scan'] / deepest['your sqrt segments']:.1f}x fewer "
        f"temporary bytes than the plain scan and {deepest['plain (unrolled)'] / deepest['your sqrt segments']:.1f}x "
        f"fewer than the unrolled plain loop; the checkpointed body plans "
        f"{deepest['scan_checkpointed_body'] / deepest['plain (unrolled)']:.2f}x the unrolled plain loop's."
    )

# %% [markdown]
# ### Reading the sweep
#
# The next cell turns the sweep's rows into the facts this discussion rests on.

# %%
plain_row, per_layer_row = at_deepest["plain"], at_deepest["checkpoint_per_layer"]
scan_row, scan_checkpointed_row = at_deepest["scan"], at_deepest["scan_checkpointed_body"]
print(
    f"Unrolled, L={DEEPEST}: per-layer checkpoint writes {per_layer_row['dots_lowered']} dots and "
    f"{per_layer_row['barriers_lowered']} optimization barriers before compilation (plain: {plain_row['dots_lowered']} and "
    f"{plain_row['barriers_lowered']}); after compilation it has {per_layer_row['dots_compiled']} dots "
    f"(plain: {plain_row['dots_compiled']}) and {per_layer_row['barriers_compiled']} barriers."
)
if plain_row["temp_bytes"] is not None:
    dots_row = at_deepest.get("checkpoint_dots")  # left out of the quick sweep while autograding
    print(
        f"Its planned temporary bytes are {per_layer_row['temp_bytes'] / plain_row['temp_bytes']:.2f}x plain's"
        + (f"; checkpoint_dots: {dots_row['temp_bytes'] / plain_row['temp_bytes']:.2f}x." if dots_row else ".")
    )
    print(
        f"Scan, L={DEEPEST}: plain scan plans {scan_row['temp_bytes'] / plain_row['temp_bytes']:.2f}x the unrolled "
        f"plain's temporary bytes; the checkpointed body plans {scan_checkpointed_row['temp_bytes'] / scan_row['temp_bytes']:.2f}x "
        f"the plain scan's, with {scan_checkpointed_row['dots_compiled']} dots in the compiled program against "
        f"{scan_row['dots_compiled']} (each loop body is counted once, however often it runs)."
    )
    print(
        f"Against the unrolled plain loop, L={DEEPEST}: the checkpointed body plans {mib(scan_checkpointed_row['temp_bytes'])} "
        f"MiB of temporaries, plain {mib(plain_row['temp_bytes'])} MiB "
        f"({scan_checkpointed_row['temp_bytes'] / plain_row['temp_bytes']:.2f}x)."
    )
print(
    f"Saved-residual entries at L={DEEPEST}: plain {plain_row['residual_entries']}, scan {scan_row['residual_entries']} "
    f"({mib(plain_row['residual_bytes'])} MiB against {mib(scan_row['residual_bytes'])} MiB): "
    "entries count arrays, and a scan stacks a whole loop's worth into each."
)
measured_rows = [row for row in sweep_rows if row["peak_bytes"] and row["temp_bytes"] is not None]
if measured_rows:
    ratios = [
        row["peak_bytes"] / (row["argument_bytes"] + row["output_bytes"] + row["temp_bytes"]) for row in measured_rows
    ]
    print(
        f"Measured peak growth / (argument + output + temp bytes), over {len(ratios)} rows: "
        f"from {min(ratios):.2f} to {max(ratios):.2f}."
    )

# %% [markdown]
# ### Read the compiled program
#
# **Why per-layer `jax.checkpoint` cost memory in the unrolled loop.** `jax.checkpoint` did
# its part: the program JAX hands to XLA recomputes every layer in the backward pass (the
# extra dots before compilation, above), and because `prevent_cse=True` is the default it
# wraps each recomputation in an optimization barrier, which keeps the compiler from merging
# it with the forward pass's copy. What did the compiler make of it? Read the compiled
# program itself: `compiled.as_text()` is its HLO, and counting its operations says what it
# runs. Four versions of the unrolled loop at the small sweep's deepest size: plain, the
# per-layer checkpoint as the sweep wrote it, the same checkpoint with `prevent_cse=False`,
# and `checkpoint_dots`.

# %%
from remat_lesson import compiled_op_counts
from remat_sweep import checkpoint_dots_loss, checkpoint_per_layer_loss, final_loss, layer


def per_layer_without_barriers(weights, x):
    """The sweep's per-layer checkpoint with prevent_cse=False: no optimization barriers."""
    checkpointed_layer = jax.checkpoint(layer, prevent_cse=False)
    for w in weights:
        x = checkpointed_layer(x, w)
    return final_loss(x)


unrolled = {
    "plain": remat_sweep.plain_loss,
    "checkpoint_per_layer": checkpoint_per_layer_loss,
    "checkpoint_per_layer, prevent_cse=False": per_layer_without_barriers,
    "checkpoint_dots": checkpoint_dots_loss,
}
# Four compilations of a 32-layer unrolled loop take seconds: skipped while autograding (not graded).
if os.environ.get("NBGRADER_EXECUTION") == "autograde":
    print("The compiled programs are not read while autograding (this cell is not graded).")
else:
    compiled_depth = max(remat_sweep.SMALL_DEPTHS)
    compiled_inputs = make_inputs(compiled_depth, SMALL_WIDTH, SMALL_BATCH)
    print(f"Compiled gradients at L={compiled_depth}, D={SMALL_WIDTH}, B={SMALL_BATCH}:")
    for name, loss in unrolled.items():
        executable = jax.jit(jax.grad(loss)).lower(*compiled_inputs).compile()
        ops = compiled_op_counts(executable)
        print(
            f"{name:>40}: {ops['tanh']} tanh, {ops['dot']} dots, {ops['opt-barrier']} barriers; planned temporary "
            f"{mib(compiled_memory(executable)['temp_size_in_bytes'])} MiB"
        )

# %% [markdown]
# Read each row against plain's. The per-layer checkpoint runs 63 `tanh` where plain runs 32:
# the recomputed `tanh` of every layer but one survived compilation. Its dots are plain's 95: the recomputed products
# did not, they were merged with the forward pass's products. So the compiled program
# recomputes each `tanh` in the backward pass *from the product the forward pass computed*,
# and keeps that product alive until then, on top of each layer's input, which the weight
# gradient needs anyway. Two arrays per layer where plain keeps one (its `tanh` outputs serve
# both as the next layer's input and for the derivative): 1.83x plain's temporary bytes.
#
# With `prevent_cse=False` the same checkpoint compiles to plain's program: 32 `tanh`, 95
# dots, 4.50 MiB. On CPU, then, the barrier is the *cause* of the extra memory, not a guard
# that failed. It stops the merge that would have undone the recomputation, and by the time a
# later merge could happen (see "Going deeper" below) the recomputed `tanh` sits inside the
# backward pass's fused kernels, where only the products, which are not fused, can still be
# merged. The docstring's warning that the barrier "can foil other optimizations" applies
# here, on a CPU.
#
# `checkpoint_dots` writes no extra products at all (95 before and after compilation, in the
# sweep's table): its policy *asks* to keep each layer's product besides its input, and to
# recompute only the `tanh`. Its 1.83x is what it asked for. The compiler turned the default
# per-layer checkpoint into that same "keep the products" plan.
#
# The rule to carry away: a checkpoint keeps what crosses its boundary and can only drop
# what lies inside it, and whether the compiled program drops it is read in the compiled
# program, not in the policy.

# %% [markdown] tags=["going-deeper"]
# #### Going deeper (optional): where in XLA's pipeline
#
# Nothing graded needs this part. XLA can write the program after every pass of its
# pipeline; the next cell does so in a fresh process for a 4-layer per-layer checkpoint and
# reports the passes that changed the number of barriers, dots or `tanh`. A pass that changed
# nothing writes no file, so the list skips every pass that left the program as it was (the
# `cse` that runs before the barrier expander is one of them: it meets the barriers and can
# merge nothing across them; XLA's pass log, `TF_CPP_VMODULE=hlo_pass_pipeline=1`, lists every
# pass that ran).

# %% tags=["going-deeper"]
from remat_sweep import pass_trace, passes_that_changed

# A fresh process and an XLA dump: skipped while autograding (this cell is not graded).
trace = None if os.environ.get("NBGRADER_EXECUTION") == "autograde" else pass_trace(checkpoint_per_layer_loss, depth=4)
if not trace:
    print("No pass trace here (autograding, or no fresh process could run).")
else:
    order = [row["after"] for row in trace]
    for field in ("barriers", "dots", "tanh"):
        for row in passes_that_changed(trace, field):
            print(
                f"{field}: {row['from']} -> {row[field]} after pass '{row['after']}' (dump step {row['step']}, "
                f"pipeline '{row['pipeline']}')"
            )
    print(
        "the passes that changed the program, in order:",
        " -> ".join(name for name in order if name != "pipeline-start"),
    )
    print("a pass named for rematerialization among them:", any("remat" in name for name in order))

# %% [markdown] tags=["going-deeper"]
# In this jaxlib the barriers go in `cse_barrier_expander` (XLA's `OptimizationBarrierExpander`)
# just before layout assignment; `fusion` then builds the kernels, the recomputed `tanh`
# inside the backward pass's; and the `cse` of the pipeline after layout assignment merges the
# duplicate products, which fusion left outside any kernel. The `tanh` count drops by one
# there, for the one layer whose recomputed `tanh` no kernel had taken in: every other
# recomputation of `tanh` is in the program that runs. No pass of the list recomputes values
# to fit a memory budget (XLA's `HloRematerialization`, which other backends run); fusion
# does recompute cheap elementwise values, as stage 5 finds in the 4-layer network, but to
# save memory traffic, not to meet a limit. To see where the bytes go, dump XLA's buffer
# assignment with `XLA_FLAGS=--xla_dump_to=DIR`. Pass names and their order belong to this
# jaxlib's XLA and have changed between versions.

# %% [markdown]
# **Why scan changes that, and by how much.** A `lax.scan` is one loop in the compiled
# program. Its backward pass is a second loop that reads whatever the forward loop stacked up,
# one slice per iteration, and the forward loop stacks exactly what the body's own backward
# pass needs. With a checkpointed body that is only the carry entering each layer; the
# recomputation sits in the backward loop's body, where there is no forward copy for CSE to
# merge it with, and it survives compilation (the dot counts above).
#
# Against what, though? Against the plain scan the checkpointed body plans far less (0.35x at
# L=32). But a plain scan is no cure by itself: it stacks every residual its body needs and
# plans 2.75x the unrolled plain loop. Against the unrolled plain loop, the fair baseline,
# the checkpointed body plans only a little less: 0.98x at L=32 (above), 0.90x at L=256 (the
# table after your segments). Only the sqrt(L) segments plan clearly less than the unrolled
# loop. Entries mislead here in the other direction: a scan saves a handful of entries, each
# of them a stack of one array per layer.
#
# So the docs' practical note (under `jax.jit` XLA makes its own choices in straight-line
# code, and a checkpoint on a scan's body helps across the loop) holds here relative to the
# plain scan. In the unrolled loop a per-layer checkpoint has nothing to offer on CPU: with
# its barriers it keeps more than plain (above), and without them it compiles to plain's
# program.

# %% [markdown]
# **What the recomputation costs: a model.** Count matrix products, the work that dominates
# here. A layer's forward pass is one product; its backward pass is two (the gradient with
# respect to the layer's input and to its weights). A gradient step without recomputation
# is then three products per layer, and one that reruns the whole forward pass once is four:
# at most 4/3 of the time, the "one extra forward pass" of the sqrt(L) literature. A program
# whose recomputation was merged away costs what plain does. The model beside the sweep's
# measured medians:

# %%
model_ratio = 4 / 3
print(f"model: a program that reruns the forward pass once takes {model_ratio:.2f}x the time of one that does not")
for numerator, denominator in (("scan_checkpointed_body", "scan"), ("checkpoint_per_layer", "plain")):
    if numerator in at_deepest and denominator in at_deepest:
        measured_ratio = at_deepest[numerator]["time_median_s"] / at_deepest[denominator]["time_median_s"]
        print(f"measured at L={DEEPEST}: {numerator} takes {measured_ratio:.2f}x the median time of {denominator}")

# %% [markdown]
# The model counts arithmetic only, and gives the most a full recomputation can add. The
# measured lines are medians of a few samples on whatever machine ran them: read them with
# stage 2's rule, and do not expect them to land on the model. What the model leaves out can
# move them either way: elementwise work (`tanh`, its derivative) adds time, and a program
# that keeps less also writes and reads less memory, which on a CPU can pay for part or all
# of the extra products. Time it on your own workload before you count on either.

# %% [markdown]
# **`prevent_cse` inside a scan.** The `jax.checkpoint` docstring calls the barrier
# unnecessary inside `lax.scan`, where `prevent_cse=False` may drop it. Both settings on the
# checkpointed scan at L=64 and the sweep's width and batch: what JAX writes, what the compiler
# plans, and warm time.

# %%
import statistics
import time


def checkpointed_scan(prevent_cse):
    """The sweep's scan with a checkpointed body, with this prevent_cse setting."""

    def loss(weights, x):
        step = jax.checkpoint(lambda carry, w: (remat_sweep.layer(carry, w), None), prevent_cse=prevent_cse)
        carry, _ = lax.scan(step, x, weights)
        return remat_sweep.final_loss(carry)

    return loss


cse_weights, cse_x = make_inputs(64, SMALL_WIDTH, SMALL_BATCH)
cse_executables, cse_gradients = {}, {}
for prevent_cse in (True, False):
    lowered = jax.jit(jax.grad(checkpointed_scan(prevent_cse))).lower(cse_weights, cse_x)
    cse_executables[prevent_cse] = lowered.compile()
    counts = remat_sweep.op_counts(lowered.as_text(), cse_executables[prevent_cse].as_text())
    cse_gradients[prevent_cse] = np.asarray(cse_executables[prevent_cse](cse_weights, cse_x))  # also the warm-up
    print(
        f"prevent_cse={prevent_cse!s:5}: {counts['barriers_lowered']} optimization barrier(s) written, "
        f"{counts['dots_compiled']} dots compiled, planned temporary "
        f"{mib(compiled_memory(cse_executables[prevent_cse])['temp_size_in_bytes'])} MiB"
    )
np.testing.assert_allclose(cse_gradients[False], cse_gradients[True], rtol=1e-6, atol=1e-7)
cse_samples = {True: [], False: []}
for _ in range(9):
    for prevent_cse, executable in cse_executables.items():
        start = time.perf_counter()
        jax.block_until_ready(executable(cse_weights, cse_x))
        cse_samples[prevent_cse].append(time.perf_counter() - start)
for prevent_cse, samples in cse_samples.items():
    print(
        f"prevent_cse={prevent_cse!s:5}: median {statistics.median(samples) * 1e3:.2f} ms, "
        f"samples from {min(samples) * 1e3:.2f} to {max(samples) * 1e3:.2f} ms"
    )
apart = max(cse_samples[True]) < min(cse_samples[False]) or max(cse_samples[False]) < min(cse_samples[True])
print("the two settings' timing samples", "do not overlap" if apart else "overlap: they rank neither setting")

# %% [markdown]
# The barrier is the only difference in the program JAX writes; inside the loop the compiler
# plans the same bytes and the same dots for both, because the recomputation sits in the
# backward loop's body, with nothing to merge it with. Read the timings with stage 2's rule:
# a setting is faster only where its samples do not overlap the other's. So the barrier's
# cost depends on where the checkpoint sits: nothing measurable inside a scan here, 1.83x
# plain's temporary bytes in the unrolled loop above.

# %% [markdown]
# **On an accelerator: not measured here.** Every figure in this lesson comes from a CPU, and
# what XLA does on a GPU or a TPU is another pipeline: the `jax.checkpoint` docstring warns
# that preventing CSE "can incur high overheads on some backends, especially GPU", and the
# GPU compiler runs passes the CPU pipeline above does not, a rematerialization pass among
# them, in an order that has changed between XLA versions. Measure there rather than reason
# from this CPU. JAX gives you the tools: `Device.memory_stats()` (the allocator's
# `bytes_in_use` and `peak_bytes_in_use`, on GPU and TPU; `None` on this CPU, as the next
# cell shows), `jax.profiler.save_device_memory_profile(path)` (a pprof profile of what is
# allocated, by the line that allocated it), and `compiled.memory_analysis()` as here. The
# host-process peak measured in this stage says nothing about an accelerator's memory.
#
# In a model library, the same transform has other names: Flax's `nnx.remat` (and
# `nn.remat` in Linen) and Equinox's `eqx.filter_checkpoint` wrap `jax.checkpoint`, and
# take the same `policy` and `prevent_cse` arguments.

# %%
print("memory_stats() of", jax.devices()[0].platform, "device:", jax.devices()[0].memory_stats())

# %% [markdown]
# **The curve and the theory.** Chen et al. (2016, *Training Deep Nets with Sublinear Memory
# Cost*, arXiv:1604.06174) split a chain of `n` layers into segments of about `sqrt(n)`, keep
# only segment boundaries, and recompute each segment once during the backward pass:
# `O(sqrt n)` memory for one extra forward pass. That is the exercise you just wrote, and the
# slope printed above is the planned counterpart of that exponent: a slope of the compiler's
# plans, not of measured peaks.

# %% [markdown] tags=["going-deeper"]
# #### Going deeper (optional): nested checkpoints and the optimal schedule
#
# Applying the idea inside each segment again trades more recomputation for less memory. The
# JAX docs show it in its recursive form: checkpoint the half of a chain that runs first, and
# do the same inside each half, so that the saved entries grow like `log2` of the chain's length.
# Count it on a chain of `sin`, in entries, and in the `sin` and `cos` the two programs run:


# %% tags=["going-deeper"]
def chain_of_sines(length):
    def f(v):
        for _ in range(length):
            v = jnp.sin(v)
        return v

    return f


def recursive_checkpoint(length):
    """sin applied `length` times: the half that runs first is checkpointed, and so on inside each half."""
    if length <= 2:
        return chain_of_sines(length)
    first, second = recursive_checkpoint(length // 2), recursive_checkpoint(length - length // 2)
    return lambda v: second(jax.checkpoint(first)(v))


def trig_runs(fn, point):
    forward, backward = forward_and_backward(fn, point)
    return sum(primitive_counts(program)[name] for program in (forward, backward) for name in ("sin", "cos"))


point = jnp.float32(3.0)
for length in (8, 16, 32):
    plain_chain, recursive_chain = chain_of_sines(length), recursive_checkpoint(length)
    np.testing.assert_allclose(jax.grad(recursive_chain)(point), jax.grad(plain_chain)(point), rtol=1e-5)
    print(
        f"chain of {length:2d} sin: plain saves {len(saved_residual_lines(plain_chain, point)):2d} entries "
        f"and runs {trig_runs(plain_chain, point):3d} sin/cos; recursive checkpoint saves "
        f"{len(saved_residual_lines(recursive_chain, point)):2d} and runs {trig_runs(recursive_chain, point):3d}"
    )

# %% [markdown] tags=["going-deeper"]
# Doubling the chain doubles plain's entries; the recursive checkpoint's grow by one, and the
# `sin`/`cos` it runs grow faster than plain's: every level of nesting reruns its part of the
# forward pass once more. Griewank and Walther's *revolve* (ACM Transactions
# on Mathematical Software, 2000) gives the optimal tradeoff: with `s` snapshots and no step
# run forward more than `t` times, at most `C(s + t, t)` steps can be reversed, and revolve
# schedules exactly that many. The next cell computes, for the sweep's deepest network, how
# many snapshots each number of forward runs needs.

# %% tags=["going-deeper"]
for forward_runs in (1, 2, 3):
    snapshots = next(s for s in range(1, DEEPEST + 1) if math.comb(s + forward_runs, forward_runs) >= DEEPEST)
    print(f"t = {forward_runs} forward run(s) per step: {snapshots} snapshots reverse L={DEEPEST} layers")


# %% [markdown]
# ## Carry forward
#
# - A checkpoint keeps what crosses its boundary and can only drop what lies inside it: around
#   the whole objective, or around the last layer, it saves nothing.
# - A policy says what a checkpoint *may* save; `checkpoint_name` and `save_only_these_names`
#   choose by name, and the saved values are told apart by value, not by their printed labels.
# - Read the compiled program (`as_text()`) before trusting a policy: on CPU, in an unrolled
#   loop, the default `prevent_cse=True` made a per-layer checkpoint plan more than plain, and
#   `prevent_cse=False` gave plain's program back.
# - Inside `lax.scan` a checkpointed body keeps one activation per layer, and sqrt(L) segments
#   keep about `L/k + k`: that is where rematerialization saved memory here, for about one
#   extra forward pass of work.
# - Entries, planned bytes and measured peaks stayed three numbers; stage 5 puts them together.
