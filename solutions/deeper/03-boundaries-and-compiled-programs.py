# %% [markdown]
# # Going deeper after stage 3 · Boundaries, policies and the compiled programs
#
# An optional companion of `03-experiment.ipynb`: no points, nothing graded or later in the
# lesson needs it. Each section stands alone.
#
# - **Time:** about 40 minutes (the same time model as the stages).
# - **Sections:** the two programs of a gradient; where a boundary pays off; more policies; the
#   compiled programs behind the sweep; where in XLA's pipeline; `prevent_cse` inside a scan; time
#   and its spread; accelerators and libraries; nested checkpoints and the optimal schedule.

# %%
import sys

sys.path.insert(0, "..")  # the lesson's modules sit beside the stages, one folder up

import jax
import jax.numpy as jnp
import numpy as np

from remat_lesson import DEPTH, W, compile_gradient, forward_and_backward, plain, primitive_counts, remat, x
from remat_lesson import most_residuals_held, saved_residual_lines, vjp_residuals

print(f"Going deeper after stage 3 · JAX {jax.__version__} on {jax.default_backend()}")
whole = jax.checkpoint(plain)
gradient_plain = np.asarray(jax.grad(plain)(x))

# %% [markdown]
# ## The two programs of a gradient
#
# `jax.vjp(f, x)` returns `f(x)` and the backward pass as a function, a vector-Jacobian product
# (VJP). JAX writes it as two programs: a **forward** program that computes `f(x)` and hands over
# the residuals, and a **backward** program that takes them and the output's cotangent. The JAX
# docs' page on gradient checkpointing prints both with a helper, `print_fwd_bwd`;
# `forward_and_backward` in `remat_lesson.py` returns the same two jaxprs. Count what each runs:

# %%
for name, fn in (("plain", plain), ("remat", remat), ("whole", whole)):
    forward, backward = forward_and_backward(fn, x)
    f_counts, b_counts = primitive_counts(forward), primitive_counts(backward)
    print(
        f"{name:6s} forward: {f_counts['dot_general']} dots, {f_counts['tanh']} tanh, {f_counts['sub']} sub | "
        f"backward: {b_counts['dot_general']} dots, {b_counts['tanh']} tanh, {b_counts['sub']} sub | "
        f"residuals handed over: {len(forward.jaxpr.outvars) - 1}"
    )

# %% [markdown]
# The backward program of `whole` holds the entire forward pass: the four layers' dots, `tanh` and
# `sub` run again there, before the four transposed dots of the backward pass proper. This is what
# the docs spell out for `jax.checkpoint(f)`: run the forward pass discarding every residual; at
# the start of the backward pass run it again, keeping every residual; then run the backward pass
# on those. `most_residuals_held` counts the most residual values (handed over or recomputed)
# alive at once while the backward program runs, one equation at a time as JAX wrote it: a count of
# what the boundary asks for, before XLA fuses anything, not a measurement of bytes.

# %%
for name, fn in (("plain", plain), ("remat", remat), ("whole", whole)):
    held = most_residuals_held(fn, x)
    print(
        f"{name:6s} hands over {len(saved_residual_lines(fn, x))} entries; the backward pass holds at most "
        f"{held['entries']} residual entries ({held['bytes']} bytes) at once"
    )

# %% [markdown]
# `whole` holds as many as `plain` at its peak: the residuals moved into the backward pass. The docs
# draw a second conclusion: a checkpoint around the **last** stage saves nothing either, because
# its residuals are rebuilt at the very start of the backward pass, while everything before it is
# still held. Try each placement on the four layers:


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
# Around the whole objective, or around the last layer only, the backward pass holds as many as
# plain: no saving, and extra work. Around the first layers it holds fewer. Checkpointing layers
# 1-3 one by one holds exactly what checkpointing all four does: the per-layer policy's wrapper
# around the last layer buys nothing.
#
# ## More policies
#
# JAX 0.9.2 offers the policies as functions in `jax.checkpoint_policies`:

# %%
print(sorted(name for name in dir(jax.checkpoint_policies) if not name.startswith("_")))

# %% [markdown]
# The two extremes around the whole objective: `everything_saveable` allows every value, the four
# products `W @ v` included; `nothing_saveable` allows none, which is what `jax.checkpoint` does
# without a policy.

# %%
policies = jax.checkpoint_policies


def preactivations_kept(fn):
    """How many of the four products W @ v are among the values fn's VJP keeps."""
    v, products = np.asarray(x, np.float64), []
    for _ in range(DEPTH):
        products.append(np.asarray(W, np.float64) @ v)
        v = np.tanh(products[-1])
    kept = [np.asarray(value, np.float64) for value in vjp_residuals(fn, x)]
    return sum(any(k.shape == z.shape and np.allclose(k, z, rtol=1e-5, atol=1e-7) for k in kept) for z in products)


def temp_bytes(fn):
    analysis = compile_gradient(fn, x).memory_analysis()
    return None if analysis is None else analysis.temp_size_in_bytes


for policy_name in ("everything_saveable", "nothing_saveable"):
    extreme = jax.checkpoint(plain, policy=getattr(policies, policy_name))
    np.testing.assert_allclose(np.asarray(jax.grad(extreme)(x)), gradient_plain, rtol=1e-6, atol=0)
    print(
        f"{policy_name:>19}: {len(saved_residual_lines(extreme, x))} entries, {preactivations_kept(extreme)} of them "
        f"products W @ v; planned temporary bytes {temp_bytes(extreme)}"
    )
print(f"for comparison, plain: {len(saved_residual_lines(plain, x))} entries, {preactivations_kept(plain)} products")

# %% [markdown]
# `everything_saveable` saves what plain saves, 9 entries, and none of the four products it
# allowed: a value is saved only if the backward pass needs it, and `tanh`'s backward pass needs
# `h` and `1 − h`, never its input. `nothing_saveable` saves what the whole-objective checkpoint
# saves. The plan is the same for both, and for plain.
#
# Names: `save_only_these_names(...)` allows only the named values listed;
# `save_any_names_but_these(...)` every named value except those, and nothing unnamed;
# `save_anything_except_these_names(...)` everything, unnamed values included, except those. A
# three-step chain shows the difference (each saved line printed without its location):

# %%
from jax.ad_checkpoint import checkpoint_name


def chain(v):
    first = checkpoint_name(jnp.sin(v), "first")
    second = checkpoint_name(jnp.sin(first), "second")
    return jnp.sum(jnp.sin(second))


def without_location(line):
    """A saved-residual line without where the value was made (a kind that starts with 'from' has none)."""
    shape, description = line.split(" ", 1)
    return f"{shape} {description if description.startswith('from ') else description.split(' from ', 1)[0]}"


def show_saved(title, fn, *args):
    lines = saved_residual_lines(fn, *args)
    print(f"{title}: {len(lines)} entries")
    for line in lines:
        print("   ", without_location(line))


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
        "    named values kept:", [n for n, value in named_values.items() if any(np.allclose(k, value) for k in kept)]
    )

# %% [markdown]
# Without a checkpoint the chain keeps its three `cos` factors; inside one with no policy, only its
# argument. Saving only `"first"` keeps the argument and `"first"`; saving every name but
# `"first"` keeps the argument and `"second"`; saving anything except `"first"` keeps the three
# `cos`, as no checkpoint does: they are unnamed, so allowed, and they are what is needed.
#
# Why does a value saved by its name print as `output of reduce_precision`? JAX passes every value
# a checkpoint computes and saves through a `reduce_precision` to its own format, a guard against
# rounding differences between the two passes; for float32 it changes no bit, but
# `print_saved_residuals` of JAX 0.9.2 names a value by the operation that made it. JAX 0.11.0
# looks through it and prints `named 'first'` (read in its source, not run here). So identify a
# saved value by its value, as the lines above do, never by its label:

# %%
forward, _ = forward_and_backward(jax.checkpoint(chain, policy=policies.save_only_these_names("first")), v0)
marks = [eqn for eqn in forward.jaxpr.eqns if eqn.primitive.name == "reduce_precision"]
print(
    f"{len(marks)} reduce_precision in the forward program, with exponent_bits={marks[0].params['exponent_bits']} "
    f"and mantissa_bits={marks[0].params['mantissa_bits']}; float32 has {jnp.finfo(jnp.float32).nexp} and "
    f"{jnp.finfo(jnp.float32).nmant}"
)

# %% [markdown]
# Policies also select by operation. `dots_with_no_batch_dims_saveable` keeps the output of every
# matrix product without batch dimensions (in the docs' words, such products are often limited by
# arithmetic, so keeping them is cheaper than recomputing them):

# %%
dots_policy = jax.checkpoint(plain, policy=policies.dots_with_no_batch_dims_saveable)
show_saved("whole objective, dots_with_no_batch_dims_saveable", dots_policy, x)
forward, _ = forward_and_backward(plain, x)
dot = next(eqn for eqn in forward.jaxpr.eqns if eqn.primitive.name == "dot_general")
print("a layer's dot: (contracting, batch) dimensions =", dot.params["dimension_numbers"])
np.testing.assert_allclose(np.asarray(jax.grad(dots_policy)(x)), gradient_plain, rtol=1e-6, atol=0)

# %% [markdown]
# The dot's batch dimensions are `((), ())`: none, so each product is saveable; the `tanh` and
# `sub` are recomputed from the saved products.
#
# **A policy inside `lax.scan`.** The docs advise a checkpoint on a loop's body, with a policy if
# some values are worth keeping. The lesson's network as a scan over its four layers:

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
# A scan saves a few entries, each a stack with one slice per layer (`f32[4,16]`). The plain body
# stacks the `tanh` outputs and their `sub`; the checkpointed body stacks each layer's input, and
# its backward loop recomputes the product and the `tanh`; with the dots policy it stacks the
# products, and recomputes only the `tanh`.
#
# **Offloading: keeping a value somewhere else.** A third answer besides keeping and recomputing
# is to move a saved value to another memory and bring it back for the backward pass:
# `offload_dot_with_no_batch_dims(offload_src, offload_dst)` offloads the products the dots policy
# keeps. Source and destination are memory kinds:

# %%
device = jax.devices()[0]
print("device:", device.platform, "| its memory kinds:", [memory.kind for memory in device.addressable_memories()])
offloaded = jax.checkpoint(plain, policy=policies.offload_dot_with_no_batch_dims("device", "pinned_host"))
show_saved("whole objective, offload_dot_with_no_batch_dims('device', 'pinned_host')", offloaded, x)
np.testing.assert_allclose(np.asarray(jax.grad(offloaded)(x)), gradient_plain, rtol=1e-6, atol=0)
print("the gradient is plain's")

# %% [markdown]
# The products are kept in `pinned_host` memory (the `<host>` in their type). On a CPU that
# moves nothing that matters: the "device" is the host. Offloading is for an accelerator with its
# own memory, where a host copy frees device memory at the price of transfers; not measured here.
#
# ## The compiled programs behind the sweep
#
# By default (`prevent_cse=True`) `jax.checkpoint` wraps each recomputation in an **optimization
# barrier** (`opt-barrier` in HLO): an operation whose output is its input, which XLA may not look
# through, so common-subexpression elimination (CSE) cannot merge the recomputation with the
# forward pass's identical copy. Read the compiled programs (`compiled.as_text()`) of the sweep's
# unrolled policies at its deepest size, with the barrier and without it (`prevent_cse=False`):

# %%
import remat_sweep
from remat_lesson import compiled_op_counts
from remat_sweep import SMALL_BATCH, SMALL_DEPTHS, SMALL_WIDTH, compiled_memory, final_loss, layer, make_inputs


def unrolled(policy=None, prevent_cse=True):
    """The sweep's unrolled loop with each layer checkpointed (policy, prevent_cse as given)."""

    def loss(weights, v):
        checkpointed = jax.checkpoint(layer, policy=policy, prevent_cse=prevent_cse)
        for w in weights:
            v = checkpointed(v, w)
        return final_loss(v)

    return loss


UNROLLED = {
    "plain": remat_sweep.plain_loss,
    "checkpoint_per_layer": remat_sweep.checkpoint_per_layer_loss,
    "checkpoint_per_layer, prevent_cse=False": unrolled(prevent_cse=False),
    "checkpoint_dots": remat_sweep.checkpoint_dots_loss,
    "checkpoint_dots, prevent_cse=False": unrolled(policies.checkpoint_dots, prevent_cse=False),
}
DEEPEST = max(SMALL_DEPTHS)
inputs = make_inputs(DEEPEST, SMALL_WIDTH, SMALL_BATCH)
executables = {}
print(f"L={DEEPEST}, D={SMALL_WIDTH}, B={SMALL_BATCH}; before → after compilation:")
for name, loss in UNROLLED.items():
    lowered = jax.jit(jax.grad(loss)).lower(*inputs)
    executables[name] = lowered.compile()
    before, after = remat_sweep.op_counts(lowered.as_text(), None), compiled_op_counts(executables[name])
    temp = compiled_memory(executables[name])["temp_size_in_bytes"]
    plain_temp = compiled_memory(executables["plain"])["temp_size_in_bytes"]
    print(
        f"{name:>40}: barriers {before['barriers_lowered']}→{after['opt-barrier']}, dots {before['dots_lowered']}→"
        f"{after['dot']}, tanh {before['tanh_lowered']}→{after['tanh']}; planned temporary "
        f"{temp / 2**20:.2f} MiB ({temp / plain_temp:.2f}x plain's)"
    )

# %% [markdown]
# The per-layer checkpoint runs 63 `tanh` where plain runs 32: every layer's recomputed `tanh` but
# one survived compilation. Its dots are plain's 95: the recomputed products were merged with the
# forward pass's. So each `tanh` is recomputed in the backward pass *from the product the forward
# pass computed*, which stays alive until then beside each layer's input: two arrays per layer
# where plain keeps one, 1.83x plain's bytes.
#
# With `prevent_cse=False` both the per-layer checkpoint and `checkpoint_dots` compile to plain's
# program: 32 `tanh`, 95 dots, 4.50 MiB. On CPU the barrier is the *cause* of the extra memory, for
# `checkpoint_dots` too. The docstring's warning that the barrier "can foil other optimizations"
# applies here, on a CPU.
#
# ## Where in XLA's pipeline
#
# XLA can write the program after every pass of its pipeline; the next cell does so in a fresh
# process for a 4-layer per-layer checkpoint and reports the passes that changed the number of
# barriers, dots or `tanh` (a pass that changed nothing writes no file; XLA's pass log,
# `TF_CPP_VMODULE=hlo_pass_pipeline=1`, lists every pass that ran).

# %%
import os

from remat_sweep import pass_trace, passes_that_changed

trace = (
    None
    if os.environ.get("NBGRADER_EXECUTION") == "autograde"
    else pass_trace(remat_sweep.checkpoint_per_layer_loss, depth=4)
)
if not trace:
    print("No pass trace here (no fresh process could run).")
else:
    order = [row["after"] for row in trace]
    for field in ("barriers", "dots", "tanh"):
        for row in passes_that_changed(trace, field):
            print(f"{field}: {row['from']} -> {row[field]} after pass '{row['after']}' (pipeline '{row['pipeline']}')")
    print(
        "the passes that changed the program, in order:",
        " -> ".join(name for name in order if name != "pipeline-start"),
    )
    print("a pass named for rematerialization among them:", any("remat" in name for name in order))

# %% [markdown]
# In this jaxlib the barriers go in `cse_barrier_expander` (XLA's `OptimizationBarrierExpander`)
# just before layout assignment; `fusion` then builds the kernels, the recomputed `tanh` inside
# the backward pass's; and the `cse` after layout assignment merges the duplicate products, which
# fusion left outside any kernel. No pass of the list recomputes values to fit a memory budget:
# XLA's `HloRematerialization` pass is not in this CPU pipeline. JAX's flag
# `jax_compiler_enable_remat_pass` (on by default) turns that pass off where a backend runs it.
# Fusion does recompute cheap elementwise values (the companion of stage 2 found `1 − h` recomputed
# inside kernels), to save memory traffic, not to meet a limit. Pass names and order belong to
# this jaxlib's XLA and have changed between versions.
#
# ## `prevent_cse` inside a scan
#
# The `jax.checkpoint` docstring calls the barrier unnecessary inside `lax.scan`. Both settings on
# the checkpointed scan at the sweep's width and batch:

# %%
import statistics
import timeit


def checkpointed_scan(prevent_cse):
    """The sweep's scan with a checkpointed body, with this prevent_cse setting."""

    def loss(weights, v):
        step = jax.checkpoint(lambda carry, w: (layer(carry, w), None), prevent_cse=prevent_cse)
        carry, _ = lax.scan(step, v, weights)
        return final_loss(carry)

    return loss


cse_weights, cse_x = make_inputs(64, SMALL_WIDTH, SMALL_BATCH)
cse_executables = {}
for prevent_cse in (True, False):
    lowered = jax.jit(jax.grad(checkpointed_scan(prevent_cse))).lower(cse_weights, cse_x)
    cse_executables[prevent_cse] = lowered.compile()
    counts = remat_sweep.op_counts(lowered.as_text(), cse_executables[prevent_cse].as_text())
    print(
        f"prevent_cse={prevent_cse!s:5}: {counts['barriers_lowered']} optimization barrier(s) written, "
        f"{counts['dots_compiled']} dots compiled, planned temporary "
        f"{compiled_memory(cse_executables[prevent_cse])['temp_size_in_bytes'] / 2**20:.2f} MiB"
    )
np.testing.assert_allclose(
    np.asarray(cse_executables[False](cse_weights, cse_x)),
    np.asarray(cse_executables[True](cse_weights, cse_x)),
    rtol=1e-6,
    atol=1e-7,
)

# %% [markdown]
# The barrier is the only difference JAX writes; inside the loop the compiler plans the same
# bytes and the same dots for both, because the recomputation sits in the backward loop's body,
# with nothing to merge it with. So the barrier's cost depends on where the checkpoint sits.
#
# ## Time, and its spread
#
# What the recomputation costs in time is measured, not modelled: the counts above say what
# each program runs (the per-layer program: plain's dots and 31 more `tanh`, and 1.83x the bytes
# to write and read). Time the unrolled programs and the two scans in several rounds, each with
# 3 untimed warm-up calls and 7 timed calls per program, interleaved, and look at how much a ratio
# of medians moves between rounds:

# %%
scans = {"scan": remat_sweep.scan_loss, "scan_checkpointed_body": remat_sweep.scan_checkpointed_body_loss}
for name, loss in scans.items():
    executables[name] = jax.jit(jax.grad(loss)).lower(*inputs).compile()
ROUNDS = 1 if os.environ.get("NBGRADER_EXECUTION") == "autograde" else 5
ratios = {"checkpoint_per_layer / plain": [], "scan_checkpointed_body / scan": []}
for _ in range(ROUNDS):
    medians = {}
    for name in ("plain", "checkpoint_per_layer", "scan", "scan_checkpointed_body"):
        durations = timeit.repeat(lambda e=executables[name]: jax.block_until_ready(e(*inputs)), number=1, repeat=10)
        medians[name] = statistics.median(durations[3:])
    ratios["checkpoint_per_layer / plain"].append(medians["checkpoint_per_layer"] / medians["plain"])
    ratios["scan_checkpointed_body / scan"].append(medians["scan_checkpointed_body"] / medians["scan"])
for name, values in ratios.items():
    print(
        f"time {name}: median ratio per round {[round(r, 2) for r in values]}, from {min(values):.2f} to {max(values):.2f}"
    )

# %% [markdown]
# Read the spread before the ratio: on a shared or busy machine the ratio of two medians moves
# from round to round, sometimes across 1. The bytes and the operation counts do not move; a time
# claim needs the spread of several rounds on the workload that matters, on the target device.
# The "one extra forward pass" of the `sqrt(L)` literature counts arithmetic, not time.
#
# ## On an accelerator: not measured here
#
# Every figure here comes from a CPU. What XLA does on a GPU or a TPU is another pipeline: the
# `jax.checkpoint` docstring warns that preventing CSE "can incur high overheads on some backends,
# especially GPU". Measure there: `Device.memory_stats()` (the allocator's `bytes_in_use` and
# `peak_bytes_in_use`; `None` on this CPU, as the next cell shows),
# `jax.profiler.save_device_memory_profile(path)`, and `compiled.memory_analysis()`. Model
# libraries wrap the same transform: Flax's `nnx.remat` (`nn.remat` in Linen) and Equinox's
# `eqx.filter_checkpoint` take the same `policy` and `prevent_cse` arguments.

# %%
print("memory_stats() of", jax.devices()[0].platform, "device:", jax.devices()[0].memory_stats())

# %% [markdown]
# ## Nested checkpoints and the optimal schedule
#
# Chen et al. (2016, *Training Deep Nets with Sublinear Memory Cost*, arXiv:1604.06174) split a
# chain of `n` layers into segments of about `sqrt(n)`, keep only segment boundaries, and
# recompute each segment once: stage 3's task. Applying the idea inside each segment again trades
# more recomputation for less memory. The JAX docs show it recursively: checkpoint the half of a
# chain that runs first, and do the same inside each half. Count it on a chain of `sin`:


# %%
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

# %% [markdown]
# Doubling the chain doubles plain's entries; the recursive checkpoint's grow by one, and the
# `sin`/`cos` it runs grow faster than plain's. Griewank and Walther's *revolve* (ACM Transactions
# on Mathematical Software, 2000) gives the optimal tradeoff: with `s` snapshots and no step run
# forward more than `t` times, at most `C(s + t, t)` steps can be reversed. For the sweep's deepest
# network, how many snapshots each number of forward runs needs:

# %%
import math

for forward_runs in (1, 2, 3):
    snapshots = next(s for s in range(1, DEEPEST + 1) if math.comb(s + forward_runs, forward_runs) >= DEEPEST)
    print(f"t = {forward_runs} forward run(s) per step: {snapshots} snapshots reverse L={DEEPEST} layers")
