"""Reference solution for the performance audit: the code a learner writes in starter/model.py.

Stage 1: the model step, an independent NumPy reverse pass, and hand counts of its cost.
Stage 2: a jitted step that counts its own traces, and a diagnosis of each call.
Stage 3: timers that keep trace/lower, compile, first call, warm execution, input transfer
         and asynchronous dispatch apart.
"""

from __future__ import annotations

import re
import time

import jax
import jax.numpy as jnp
import numpy as np

# ---------------------------------------------------------------------------------------
# Stage 1: independent calculations
# ---------------------------------------------------------------------------------------


def _activate(pre_activation, activation: str):
    if activation == "tanh":
        return jnp.tanh(pre_activation)
    if activation == "relu":
        return jnp.maximum(pre_activation, 0.0)
    raise ValueError(f"activation must be 'tanh' or 'relu', got {activation!r}")


def mlp_loss(params, inputs, targets, weight_decay, activation="tanh"):
    """Mean squared error of a one-hidden-layer MLP plus L2 weight decay on both matrices."""
    hidden = _activate(inputs @ params["w1"] + params["b1"], activation)
    predictions = hidden @ params["w2"] + params["b2"]
    penalty = jnp.sum(params["w1"] ** 2) + jnp.sum(params["w2"] ** 2)
    return jnp.mean((predictions - targets) ** 2) + weight_decay * penalty


def numpy_loss_and_grad(params, inputs, targets, weight_decay, activation="tanh"):
    """The same loss and its gradient, with the reverse pass written out by hand in NumPy.

    float64 throughout, so the reference is more precise than the float32 program it checks.
    """
    w1, b1, w2, b2 = (np.asarray(params[name], np.float64) for name in ("w1", "b1", "w2", "b2"))
    x = np.asarray(inputs, np.float64)
    y = np.asarray(targets, np.float64)
    decay = float(weight_decay)

    pre_activation = x @ w1 + b1
    hidden = np.tanh(pre_activation) if activation == "tanh" else np.maximum(pre_activation, 0.0)
    residual = hidden @ w2 + b2 - y
    loss = np.mean(residual**2) + decay * (np.sum(w1**2) + np.sum(w2**2))

    d_predictions = 2.0 * residual / residual.size  # derivative of the mean of squares
    d_hidden = d_predictions @ w2.T
    if activation == "tanh":
        d_pre = d_hidden * (1.0 - hidden**2)  # tanh' = 1 - tanh^2, reusing the forward output
    else:
        d_pre = d_hidden * (pre_activation > 0.0)
    grads = {
        "w1": x.T @ d_pre + 2.0 * decay * w1,
        "b1": d_pre.sum(axis=0),
        "w2": hidden.T @ d_predictions + 2.0 * decay * w2,
        "b2": d_predictions.sum(axis=0),
    }
    return float(loss), grads


def estimate_step_cost(batch, n_inputs, n_hidden, n_outputs, itemsize=4):
    """Hand counts for one loss-and-gradient step with tanh.

    A matmul of (m, k) by (k, n) costs 2*m*k*n FLOPs (one multiply and one add per term).
    """
    forward = 2 * batch * n_inputs * n_hidden + 2 * batch * n_hidden * n_outputs
    backward = (
        2 * batch * n_hidden * n_outputs  # gradient of w2: hidden.T @ d_predictions
        + 2 * batch * n_outputs * n_hidden  # back to the hidden layer: d_pred @ w2.T
        + 2 * batch * n_inputs * n_hidden
    )  # gradient of w1: x.T @ d_pre (none for x)
    n_parameters = n_inputs * n_hidden + n_hidden + n_hidden * n_outputs + n_outputs
    return {
        "matmul_flops": forward + backward,
        "transcendentals": batch * n_hidden,  # one tanh per hidden unit; its derivative reuses it
        # Read once: parameters, inputs, targets and the scalar weight decay.
        "argument_bytes": itemsize * (n_parameters + batch * n_inputs + batch * n_outputs + 1),
        # Written once: the scalar loss and one gradient per parameter.
        "output_bytes": itemsize * (1 + n_parameters),
    }


# ---------------------------------------------------------------------------------------
# Stage 2: changed-condition diagnosis
# ---------------------------------------------------------------------------------------


def make_counted_step(trace_log):
    """A fresh jitted loss-and-gradient step that appends to trace_log each time it is traced.

    The step is defined inside this function so every call builds a new program with cold
    caches, which stage 3 needs to time a real first call.
    """

    def step(params, inputs, targets, weight_decay, activation="tanh"):
        # Python runs this body only while JAX traces, so the log counts traces, not calls.
        trace_log.append(
            {
                "inputs": str(jax.typeof(inputs)),
                "weight_decay": str(jax.typeof(weight_decay)),  # "~" marks weak
                "activation": activation,
            }
        )
        return jax.value_and_grad(mlp_loss)(params, inputs, targets, weight_decay, activation)

    return jax.jit(step, static_argnames="activation")


_TYPE_CHANGE = re.compile(r"now (\w+)\[([\d,\s]*)\]\S* and before (\w+)\[([\d,\s]*)\]")


def name_reason(explanation):
    """Name why JAX traced again, from the text of its cache-miss explanation."""
    if not explanation:
        return "cache hit"
    if "never seen function" in explanation:
        return "first call"
    if "Static(" in explanation or "static argument" in explanation:
        return "static argument"
    if "weak_type=True" in explanation:
        return "weak type"
    change = _TYPE_CHANGE.search(explanation)
    if change:
        now_dtype, now_shape, before_dtype, before_shape = change.groups()
        if now_dtype != before_dtype:
            return "new dtype"
        if now_shape != before_shape:
            return "new shape"
    raise ValueError(f"no known reason in this explanation:\n{explanation}")


def diagnose_call(traces_before, traces_after, cache_size_before, cache_size_after, explanation):
    """Whether one call retraced and recompiled, judged from the program's own counters."""
    cache_known = cache_size_before is not None and cache_size_after is not None
    return {
        "retraced": traces_after > traces_before,
        # A new entry in the jitted function's cache is a new compiled program.
        "recompiled": cache_size_after > cache_size_before if cache_known else None,
        "reason": name_reason(explanation),
    }


# ---------------------------------------------------------------------------------------
# Stage 3: timings that keep compilation, execution, transfer and dispatch apart
# ---------------------------------------------------------------------------------------


def time_lower_and_compile(jitted_step, args, static_kwargs):
    """Return (compiled, trace_and_lower_seconds, compile_seconds) for a step not yet called."""
    start = time.perf_counter()
    lowered = jitted_step.lower(*args, **static_kwargs)
    lowered_at = time.perf_counter()
    compiled = lowered.compile()
    compiled_at = time.perf_counter()
    return compiled, lowered_at - start, compiled_at - lowered_at


def time_first_call(jitted_step, args, static_kwargs):
    """Seconds for the first call to finish: trace, compile and execute together."""
    start = time.perf_counter()
    jax.block_until_ready(jitted_step(*args, **static_kwargs))
    return time.perf_counter() - start


def time_synchronized_calls(jitted_step, args, static_kwargs, repeats):
    """Seconds per warm call, each one waited for until its results are ready."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(jitted_step(*args, **static_kwargs))
        samples.append(time.perf_counter() - start)
    return samples


def time_dispatch_only(jitted_step, args, static_kwargs, repeats):
    """Seconds until each warm call returns control, before its results are ready."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = jitted_step(*args, **static_kwargs)
        samples.append(time.perf_counter() - start)
        # Wait outside the clock, so the next sample does not queue behind this one.
        jax.block_until_ready(result)
    return samples


def time_host_to_device(host_arrays, repeats):
    """Seconds to copy the host arrays to the default device and wait until they are there."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(jax.device_put(host_arrays))
        samples.append(time.perf_counter() - start)
    return samples
