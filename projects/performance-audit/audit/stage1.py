"""Stage 1: check the jitted step against NumPy, and hand counts against the compiler."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import jax
import numpy as np

from . import compiled_info, evidence, inputs, spec
from .learner import call, learner_code, require

STAGE = 1
OUTPUT_FILE = spec.STAGE_FILES[STAGE][0]


def jitted_loss_and_grad(model):
    return jax.jit(jax.value_and_grad(model.mlp_loss), static_argnames="activation")


def uses_jax(function) -> bool:
    """True when the source of `function` calls into JAX, which would make it no reference."""
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return False
    body = source.split('"""')[-1] if source.count('"""') >= 2 else source
    return re.search(r"\b(jax|jnp|lax)\.", body) is not None


def compare_leaf(actual, expected) -> dict:
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    error = np.abs(actual - expected)
    allowed = spec.ATOL + spec.RTOL * np.abs(expected)
    return {
        "max_abs_error": float(error.max()),
        "max_abs_reference": float(np.abs(expected).max()),
        "worst_tolerance_ratio": float((error / allowed).max()),
    }


def check_against_numpy(model, step, activation: str) -> dict:
    """Run the jitted step and the learner's NumPy reverse pass on the same inputs."""
    params = inputs.make_params()
    batch_inputs, targets = inputs.make_batch()
    weight_decay = inputs.strong_weight_decay()
    loss, grads = step(params, batch_inputs, targets, weight_decay, activation=activation)
    reference = call(model, STAGE, "numpy_loss_and_grad", params, batch_inputs, targets, weight_decay, activation)
    require(
        isinstance(reference, tuple) and len(reference) == 2, STAGE, "numpy_loss_and_grad", "must return (loss, grads)"
    )
    reference_loss, reference_grads = reference
    require(
        isinstance(reference_grads, dict) and set(reference_grads) == set(spec.PARAMETER_NAMES),
        STAGE,
        "numpy_loss_and_grad",
        f"must return gradients for {spec.PARAMETER_NAMES}",
    )
    require(
        all(isinstance(value, np.ndarray) for value in reference_grads.values()),
        STAGE,
        "numpy_loss_and_grad",
        "must return NumPy arrays (np.ndarray), computed without JAX",
    )
    leaves = {"loss": compare_leaf(loss, reference_loss)}
    for name in spec.PARAMETER_NAMES:
        require(
            np.shape(reference_grads[name]) == np.shape(params[name]),
            STAGE,
            "numpy_loss_and_grad",
            f"gradient {name} has shape {np.shape(reference_grads[name])}, expected {np.shape(params[name])}",
        )
        leaves[f"grad_{name}"] = compare_leaf(grads[name], reference_grads[name])
    worst = max(leaf["worst_tolerance_ratio"] for leaf in leaves.values())
    return {
        "activation": activation,
        "jax_loss": float(loss),
        "numpy_loss": float(reference_loss),
        "leaves": leaves,
        "worst_tolerance_ratio": worst,
        "agrees": bool(worst <= 1.0),
    }


def hand_estimate(model) -> dict:
    estimate = call(model, STAGE, "estimate_step_cost", spec.BATCH, spec.N_INPUTS, spec.N_HIDDEN, spec.N_OUTPUTS, 4)
    expected_keys = {"matmul_flops", "transcendentals", "argument_bytes", "output_bytes"}
    require(
        isinstance(estimate, dict) and expected_keys <= set(estimate),
        STAGE,
        "estimate_step_cost",
        f"must return a dict with keys {sorted(expected_keys)}",
    )
    return {key: int(estimate[key]) for key in sorted(expected_keys)}


def ratio(numerator, denominator):
    """numerator / denominator, or None when either side is unavailable."""
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def compare_with_compiler(estimate: dict, cost: dict, memory: dict) -> dict:
    return {
        "matmul_flops_over_compiler_flops": ratio(estimate["matmul_flops"], cost["flops"]),
        "transcendentals": {"hand": estimate["transcendentals"], "compiler": cost["transcendentals"]},
        "argument_bytes": {"hand": estimate["argument_bytes"], "compiler": memory["argument_size_in_bytes"]},
        "output_bytes": {"hand": estimate["output_bytes"], "compiler": memory["output_size_in_bytes"]},
        # Op-by-op traffic counted by the compiler, set against the minimum: read and write once.
        "compiler_bytes_accessed_over_minimum": ratio(
            cost["bytes_accessed"], estimate["argument_bytes"] + estimate["output_bytes"]
        ),
    }


def run(model, evidence_dir: Path) -> dict[str, str]:
    step = jitted_loss_and_grad(model)
    with learner_code(STAGE):
        numpy_checks = [check_against_numpy(model, step, activation) for activation in ("tanh", "relu")]
    estimate = hand_estimate(model)
    baseline_args, baseline_static = inputs.condition_arguments(spec.BASELINE)
    with learner_code(STAGE):
        compiled = step.lower(*baseline_args, **baseline_static).compile()
    cost = compiled_info.cost_summary(compiled)
    memory = compiled_info.memory_summary(compiled)
    record = {
        "sizes": {
            "batch": spec.BATCH,
            "n_inputs": spec.N_INPUTS,
            "n_hidden": spec.N_HIDDEN,
            "n_outputs": spec.N_OUTPUTS,
            "dtype": "float32",
        },
        "tolerance": {"rtol": spec.RTOL, "atol": spec.ATOL},
        "numpy_reference_uses_jax": uses_jax(model.numpy_loss_and_grad),
        "numpy_checks": numpy_checks,
        "hand_estimate": estimate,
        "compiler": {"cost_analysis": cost, "memory_analysis": memory},
        "comparison": compare_with_compiler(estimate, cost, memory),
    }
    evidence.write_json(evidence_dir / OUTPUT_FILE, record)
    print_summary(record)
    return {
        OUTPUT_FILE: "stage 1: JAX vs NumPy agreement; hand FLOP/byte counts beside the "
        "compiler's cost_analysis and memory_analysis"
    }


def show(value) -> str:
    if value is None:
        return "unavailable"
    return f"{value:,.3g}" if isinstance(value, float) else f"{value:,}"


def print_summary(record: dict) -> None:
    print("Stage 1: independent calculations")
    for check in record["numpy_checks"]:
        verdict = "agrees" if check["agrees"] else "DISAGREES"
        print(
            f"  {check['activation']}: JAX loss {check['jax_loss']:.6f}, NumPy loss "
            f"{check['numpy_loss']:.6f}; worst error / tolerance "
            f"{check['worst_tolerance_ratio']:.3g} ({verdict})"
        )
    comparison = record["comparison"]
    print(f"  hand matmul FLOPs / compiler FLOPs: {show(comparison['matmul_flops_over_compiler_flops'])}")
    for key in ("transcendentals", "argument_bytes", "output_bytes"):
        print(f"  {key}: hand {show(comparison[key]['hand'])}, compiler {show(comparison[key]['compiler'])}")
