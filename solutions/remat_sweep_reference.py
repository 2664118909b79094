"""Instructor reference for the rematerialization sweep: the sqrt(L) policies and the full run.

Not part of the student release: `sqrt_segments_loss` is the answer to the graded exercise
"Your turn: sqrt(L) segments". Everything else the sweep needs lives in remat_sweep.py.

    python solutions/remat_sweep_reference.py --out data     # what `make sweep` runs

writes data/remat-sweep.csv, data/remat-sweep.provenance.json and the two figures.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import jax
import remat_sweep
from jax import lax
from remat_sweep import final_loss, layer, sqrt_segment_length


def _scan_layers(x, weights):
    """Run layers weights[0], weights[1], ... over x with a plain scan (everything saved)."""
    x, _ = lax.scan(lambda carry, w: (layer(carry, w), None), x, weights)
    return x


def sqrt_segments_loss(weights, x, segment_length):
    """The loss with the layers split into segments of `segment_length`, each one checkpointed.

    weights has shape (L, D, D) and L must be divisible by segment_length. The outer scan
    keeps only the activation entering each segment (L / segment_length of them); during the
    backward pass each segment reruns its forward pass once, keeping its segment_length
    layers' residuals only while that segment is being differentiated. With segment_length
    near sqrt(L) both terms are about sqrt(L): O(sqrt L) memory for one extra forward pass
    (Chen et al. 2016).
    """
    depth, width, _ = weights.shape
    if depth % segment_length:
        raise ValueError(f"depth {depth} is not divisible by segment_length {segment_length}")
    segments = weights.reshape(depth // segment_length, segment_length, width, width)

    @jax.checkpoint
    def run_segment(x, segment_weights):
        return _scan_layers(x, segment_weights), None

    x, _ = lax.scan(run_segment, x, segments)
    return final_loss(x)


def sqrt_segments(weights, x):
    """The sweep's sqrt(L) policy: segments of the divisor of L nearest sqrt(L)."""
    return sqrt_segments_loss(weights, x, sqrt_segment_length(weights.shape[0]))


def nested_segment_lengths(depth: int, smallest: int = 4) -> tuple[int, ...]:
    """How nested_sqrt_segments splits `depth`: sqrt of sqrt ... until a segment is `smallest` or less.

    256 -> (16, 4, 4): 16 segments of 16 layers, each run as 4 checkpointed pieces of 4 layers.
    """
    counts = []
    while depth > smallest:
        length = sqrt_segment_length(depth)
        if length in (1, depth):  # a prime depth cannot be split evenly any further
            break
        counts.append(depth // length)
        depth = length
    return (*counts, depth)


def nested_sqrt_segments(weights, x):
    """sqrt(L) segments applied recursively: each segment is itself a scan of checkpointed pieces.

    Every level keeps about sqrt of its own length in activations, so memory falls to a sum of
    small terms, and every level of nesting reruns the forward pass once more during the
    backward pass.
    """
    depth, width, _ = weights.shape
    counts = nested_segment_lengths(depth)

    def run(x, block, level):
        if level == len(counts) - 1:
            return _scan_layers(x, block)
        pieces = block.reshape(counts[level], -1, width, width)

        @jax.checkpoint
        def run_piece(x, piece):
            return run(x, piece, level + 1), None

        x, _ = lax.scan(run_piece, x, pieces)
        return x

    return final_loss(run(x, weights, 0))


REFERENCE_POLICIES = {
    "sqrt_segments": sqrt_segments,
    "nested_sqrt_segments": nested_sqrt_segments,
}

#: The full sweep behind `make sweep`: depths on a doubling grid up to 256, B >= D.
FULL_DEPTHS = (16, 32, 64, 128, 256)
FULL_WIDTH = 128
FULL_BATCH = 1024
FULL_REPEATS = 5


def run_full_sweep(
    depths=FULL_DEPTHS, width=FULL_WIDTH, batch=FULL_BATCH, repeats=FULL_REPEATS, peak=True, progress=print
):
    return remat_sweep.run_sweep(
        depths, width, batch, extra_policies=REFERENCE_POLICIES, repeats=repeats, peak=peak, progress=progress
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description="Run the full rematerialization sweep and draw its figures.")
    parser.add_argument(
        "--out", type=Path, default=Path("data"), help="folder for the CSV, its provenance and the figures"
    )
    parser.add_argument("--depths", type=int, nargs="+", default=list(FULL_DEPTHS))
    parser.add_argument("--width", type=int, default=FULL_WIDTH)
    parser.add_argument("--batch", type=int, default=FULL_BATCH)
    parser.add_argument("--repeats", type=int, default=FULL_REPEATS)
    parser.add_argument("--no-peak", action="store_true", help="skip the fresh-process peak measurements")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="remat-sweep-cache-") as cache:
        # The fresh processes that measure peaks load the big executables compiled here from
        # JAX's persistent cache instead of compiling them a second time.
        jax.config.update("jax_compilation_cache_dir", cache)
        os.environ["JAX_COMPILATION_CACHE_DIR"] = cache
        rows = run_full_sweep(args.depths, args.width, args.batch, args.repeats, peak=not args.no_peak)
    settings = {
        "depths": args.depths,
        "width": args.width,
        "batch": args.batch,
        "repeats": args.repeats,
        "policies": sorted({row["policy"] for row in rows}),
        "seconds": round(time.perf_counter() - start, 1),
        **_largest_resident_sets(),
    }
    command = " ".join([Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)])
    csv_path = remat_sweep.write_csv(rows, args.out / "remat-sweep.csv", command=command, settings=settings)
    remat_sweep.plot_memory(rows, args.out / "remat-sweep-memory.png")
    remat_sweep.plot_time(rows, args.out / "remat-sweep-time.png")
    print(f"wrote {csv_path} and its figures in {settings['seconds']} s")
    print(summary(rows))


def _largest_resident_sets() -> dict:
    """How much memory the sweep process itself needed at most, in MiB.

    (Its children's ru_maxrss is no help: on Linux a child inherits the parent's high-water
    mark when it forks, so that figure reports the parent's size, not the child's.)
    """
    try:
        import resource
    except ImportError:  # not on this platform
        return {}
    per_mib = 2**20 if sys.platform == "darwin" else 2**10  # ru_maxrss: bytes on macOS, KiB on Linux
    return {"max_rss_sweep_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / per_mib, 1)}


def summary(rows) -> str:
    """The claims the figures support, at the deepest size swept, computed from the rows."""
    deepest = max(row["depth"] for row in rows)
    at = {row["policy"]: row for row in rows if row["depth"] == deepest}
    lines = [f"At L={deepest}:"]
    mib = 2.0**20
    for name, row in at.items():
        temp = "n/a" if row["temp_bytes"] is None else f"{row['temp_bytes'] / mib:.1f}"
        peak = "n/a" if row["peak_bytes"] is None else f"{row['peak_bytes'] / mib:.1f}"
        lines.append(
            f"  {name:>24}: temp {temp} MiB, peak {peak} MiB, {row['residual_entries']} residual entries, "
            f"dots {row['dots_lowered']}->{row['dots_compiled']}, median {row['time_median_s'] * 1e3:.1f} ms"
        )
    nested, plain, scan = at.get("nested_sqrt_segments"), at.get("plain"), at.get("scan")
    if nested and plain and scan and nested["temp_bytes"] and plain["temp_bytes"]:
        lines.append(f"  nested temp / plain temp = {nested['temp_bytes'] / plain['temp_bytes']:.3f} (claim: <= 0.25)")
        lines.append(
            f"  nested time / scan time = {nested['time_median_s'] / scan['time_median_s']:.3f} (claim: <= 1.5)"
        )
    for row in rows:
        planned = [row[key] for key in ("argument_bytes", "output_bytes", "temp_bytes")]
        if row["peak_bytes"] and None not in planned and row["temp_bytes"] >= 32 * mib:
            ratio = row["peak_bytes"] / sum(planned)
            flag = "" if abs(ratio - 1) <= 0.10 else "  <-- outside 10%"
            lines.append(
                f"  peak / (argument + output + temp) for {row['policy']} at L={row['depth']}: {ratio:.3f}{flag}"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    # Run the importable copy of this module, so that a fresh process can import its policies
    # by name ("remat_sweep_reference:sqrt_segments") to measure their peak memory.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import remat_sweep_reference

    remat_sweep_reference.main()
