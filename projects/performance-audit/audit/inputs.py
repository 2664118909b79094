"""The fixed parameters and batches, and the arguments for each audited condition."""

from __future__ import annotations

import numpy as np

from . import spec


def make_params(seed: int = spec.DATA_SEED) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    scale_1 = 1.0 / np.sqrt(spec.N_INPUTS)
    scale_2 = 1.0 / np.sqrt(spec.N_HIDDEN)
    return {
        "w1": (rng.normal(size=(spec.N_INPUTS, spec.N_HIDDEN)) * scale_1).astype(np.float32),
        "b1": (rng.normal(size=(spec.N_HIDDEN,)) * 0.1).astype(np.float32),
        "w2": (rng.normal(size=(spec.N_HIDDEN, spec.N_OUTPUTS)) * scale_2).astype(np.float32),
        "b2": (rng.normal(size=(spec.N_OUTPUTS,)) * 0.1).astype(np.float32),
    }


def make_batch(batch: int = spec.BATCH, seed: int = spec.DATA_SEED + 1):
    rng = np.random.default_rng(seed)
    inputs = rng.normal(size=(batch, spec.N_INPUTS)).astype(np.float32)
    targets = rng.normal(size=(batch, spec.N_OUTPUTS)).astype(np.float32)
    return inputs, targets


def strong_weight_decay() -> np.ndarray:
    # A 0-d float32 array is strongly typed; a bare Python float would be weakly typed.
    return np.asarray(spec.WEIGHT_DECAY, dtype=np.float32)


def condition_arguments(name: str):
    """(positional arguments, static keyword arguments) for one named condition."""
    params = make_params()
    inputs, targets = make_batch()
    weight_decay = strong_weight_decay()
    activation = "tanh"
    if name == "same_shape_again":
        inputs, targets = make_batch(seed=spec.DATA_SEED + 2)
    elif name == "new_batch_shape":
        inputs, targets = make_batch(batch=2 * spec.BATCH)
    elif name == "new_input_dtype":
        inputs = inputs.astype(np.float16)
    elif name == "weak_python_scalar":
        weight_decay = float(spec.WEIGHT_DECAY)
    elif name == "changed_static_argument":
        activation = "relu"
    elif name != spec.BASELINE:
        raise ValueError(f"unknown condition {name!r}")
    return (params, inputs, targets, weight_decay), {"activation": activation}
