"""The VJP view of remat_lesson.py (forward and backward programs, what they keep and hold), on the
lesson's network: the facts stages 2 and 3 print, checked without a notebook."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "solutions"))

from remat_lesson import (  # noqa: E402
    DEPTH,
    W,
    forward_and_backward,
    most_residuals_held,
    plain,
    primitive_counts,
    remat,
    saved_residual_lines,
    vjp_residuals,
    x,
)


def _forward_outputs():
    values = [np.asarray(x, np.float64)]
    for _ in range(DEPTH):
        values.append(np.tanh(np.asarray(W, np.float64) @ values[-1]))
    return values[1:]


def test_plain_keeps_h_and_one_minus_h():
    """Plain keeps h and one minus h, not one minus h squared."""
    kept = [np.asarray(v, np.float64) for v in vjp_residuals(plain, x) if v.shape == (16,)]
    assert len(kept) == 2 * DEPTH == len(saved_residual_lines(plain, x)) - 1
    for h in _forward_outputs():
        assert any(np.allclose(k, h, atol=1e-6) for k in kept)
        assert any(np.allclose(k, 1.0 - h, atol=1e-6) for k in kept)
        assert not any(np.allclose(k, 1.0 - h * h, atol=1e-3) for k in kept)


def test_whole_checkpoint_reruns_forward():
    """The whole objective checkpoint reruns the forward pass and holds as much as plain."""
    whole = jax.checkpoint(plain)
    forward, backward = forward_and_backward(whole, x)
    assert len(forward.jaxpr.outvars) - 1 == len(saved_residual_lines(whole, x)) == 2
    counts = primitive_counts(backward)
    assert (counts["dot_general"], counts["tanh"], counts["sub"]) == (2 * DEPTH, DEPTH, DEPTH)
    assert most_residuals_held(whole, x) == most_residuals_held(plain, x) == {"entries": 9, "bytes": 1536}
    assert most_residuals_held(remat, x) == {"entries": 6, "bytes": 1344}


def test_last_layer_checkpoint_holds_as_plain():
    """A checkpoint around the last layer holds as much as plain."""

    def layer(v):
        return jnp.tanh(W @ v)

    def last_only(v):
        for _ in range(DEPTH - 1):
            v = layer(v)
        v = jax.checkpoint(layer)(v)
        return jnp.sum(v * v)

    assert len(saved_residual_lines(last_only, x)) == 8
    assert most_residuals_held(last_only, x)["entries"] == most_residuals_held(plain, x)["entries"]
