"""Your performance audit: complete the TODOs stage by stage.

Run a stage with
    python projects/performance-audit/run.py --stage 1 --implementation starter \
        --evidence-dir runs/performance-audit
and read what it prints. Each unfinished function stops its stage with a message that
names the stage; the runner, the inputs and the checker live in projects/performance-audit/audit/.

Stage 1: the model step, an independent NumPy reverse pass, and hand counts of its cost.
Stage 2: a jitted step that counts its own traces, and a diagnosis of each call.
Stage 3: timers that keep trace/lower, compile, first call, warm execution, input transfer
         and asynchronous dispatch apart.
"""

from __future__ import annotations

import re  # noqa: F401  (useful for name_reason)
import time  # noqa: F401  (useful for the stage 3 timers)

import jax  # noqa: F401
import jax.numpy as jnp  # noqa: F401
import numpy as np  # noqa: F401

# ---------------------------------------------------------------------------------------
# Stage 1: independent calculations
# ---------------------------------------------------------------------------------------


def mlp_loss(params, inputs, targets, weight_decay, activation="tanh"):
    """Mean squared error of a one-hidden-layer MLP plus L2 weight decay on both matrices.

    params is a dict with w1 (n_inputs, n_hidden), b1 (n_hidden,), w2 (n_hidden, n_outputs)
    and b2 (n_outputs,). activation is "tanh" or "relu".
        hidden      = activation(inputs @ w1 + b1)
        predictions = hidden @ w2 + b2
        loss        = mean((predictions - targets)**2) + weight_decay * (sum(w1**2) + sum(w2**2))
    Use jax.numpy: the runner differentiates and compiles this function.
    """
    # TODO(stage 1): compute the loss with jnp.
    raise NotImplementedError(
        "stage 1: write mlp_loss in starter/model.py (a jax.numpy MLP loss; the docstring gives the formula)"
    )


def numpy_loss_and_grad(params, inputs, targets, weight_decay, activation="tanh"):
    """Return (loss as a Python float, dict of gradients for w1, b1, w2, b2), in NumPy only.

    Write the reverse pass by hand: no jax, no jnp. Work in float64 so the reference is more
    precise than the float32 program it checks. Useful facts:
        d mean(r**2) / d r = 2 * r / r.size
        tanh'(z) = 1 - tanh(z)**2   and   relu'(z) = (z > 0)
        d (weight_decay * sum(w**2)) / d w = 2 * weight_decay * w
    """
    # TODO(stage 1): forward pass, then the gradients layer by layer from the output back.
    raise NotImplementedError(
        "stage 1: write numpy_loss_and_grad in starter/model.py (the reverse pass by hand in NumPy, without JAX)"
    )


def estimate_step_cost(batch, n_inputs, n_hidden, n_outputs, itemsize=4):
    """Hand counts for one loss-and-gradient step with tanh, as a dict with these keys:

    matmul_flops     FLOPs of every matrix product in the forward and backward passes
                     (an (m, k) @ (k, n) product costs 2*m*k*n). No gradient is needed
                     for the inputs.
    transcendentals  how many tanh evaluations the step needs
    argument_bytes   bytes of everything the step reads: parameters, inputs, targets and
                     the scalar weight decay
    output_bytes     bytes of everything it returns: the scalar loss and the gradients
    """
    # TODO(stage 1): count by hand; the runner sets your numbers beside the compiler's.
    raise NotImplementedError(
        "stage 1: write estimate_step_cost in starter/model.py (hand counts of FLOPs, tanh evaluations and bytes)"
    )


# ---------------------------------------------------------------------------------------
# Stage 2: changed-condition diagnosis
# ---------------------------------------------------------------------------------------


def make_counted_step(trace_log):
    """Return a fresh jax.jit of a loss-and-gradient step that records its own traces.

    The step has the signature step(params, inputs, targets, weight_decay, activation="tanh"),
    returns jax.value_and_grad(mlp_loss) of its arguments, and keeps activation static
    (static_argnames). Inside the step, append one entry to trace_log (for example the
    input type, str(jax.typeof(inputs))): Python runs that line only while JAX traces.
    Define the step inside this function, so each call builds a new program with cold caches.
    """
    # TODO(stage 2): define step, append to trace_log inside it, return the jitted step.
    raise NotImplementedError(
        "stage 2: write make_counted_step in starter/model.py "
        "(a jitted step with a static activation that appends to trace_log)"
    )


def name_reason(explanation):
    """Name why JAX traced again, from its cache-miss explanation text (empty: no miss).

    Return one of: "first call", "cache hit", "new shape", "new dtype", "weak type",
    "static argument". Read the captured explanations in
    runs/performance-audit/stage2-cache-misses.log: a first call says "never seen function";
    a changed input says "now f32[32,8] and before f32[16,8]"; a weakly typed scalar shows
    "weak_type=True"; a changed static argument shows up in the pytree metadata as "Static(".
    """
    # TODO(stage 2): map the explanation text to a reason.
    raise NotImplementedError(
        "stage 2: write name_reason in starter/model.py (read the cache-miss explanation and name the reason)"
    )


def diagnose_call(traces_before, traces_after, cache_size_before, cache_size_after, explanation):
    """Return {"retraced": bool, "recompiled": bool or None, "reason": name_reason(...)}.

    traces_* are len(trace_log) around one call; cache_size_* are jitted._cache_size()
    around it (None when this JAX has no such counter: then recompiled is None, unknown).
    """
    # TODO(stage 2): judge the call from the counters, not from what you expect.
    raise NotImplementedError(
        "stage 2: write diagnose_call in starter/model.py (compare the trace and cache counters before and after)"
    )


# ---------------------------------------------------------------------------------------
# Stage 3: timings that keep compilation, execution, transfer and dispatch apart
# ---------------------------------------------------------------------------------------


def time_lower_and_compile(jitted_step, args, static_kwargs):
    """Return (compiled, trace_and_lower_seconds, compile_seconds) for a step not yet called.

    jitted_step.lower(*args, **static_kwargs) traces and lowers; .compile() on the result
    compiles. Time the two separately with time.perf_counter().
    """
    # TODO(stage 3)
    raise NotImplementedError(
        "stage 3: write time_lower_and_compile in starter/model.py (time .lower(...) and .compile() separately)"
    )


def time_first_call(jitted_step, args, static_kwargs):
    """Seconds for the first call to finish: wait for the result with jax.block_until_ready."""
    # TODO(stage 3)
    raise NotImplementedError(
        "stage 3: write time_first_call in starter/model.py (one call, waited for with jax.block_until_ready)"
    )


def time_synchronized_calls(jitted_step, args, static_kwargs, repeats):
    """A list of `repeats` seconds, one per warm call, each waited for until ready."""
    # TODO(stage 3)
    raise NotImplementedError(
        "stage 3: write time_synchronized_calls in starter/model.py "
        "(keep every sample; block_until_ready inside the clock)"
    )


def time_dispatch_only(jitted_step, args, static_kwargs, repeats):
    """A list of `repeats` seconds, each until a warm call returns, before its result is ready.

    Stop the clock when the call returns; then wait for the result outside the clock, so
    the next call does not queue behind it.
    """
    # TODO(stage 3)
    raise NotImplementedError(
        "stage 3: write time_dispatch_only in starter/model.py (stop the clock before block_until_ready)"
    )


def time_host_to_device(host_arrays, repeats):
    """A list of `repeats` seconds to copy host (NumPy) arrays with jax.device_put and wait."""
    # TODO(stage 3)
    raise NotImplementedError(
        "stage 3: write time_host_to_device in starter/model.py "
        "(jax.device_put, then block_until_ready, inside the clock)"
    )
