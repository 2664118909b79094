"""When does rematerialization actually save memory? A measured sweep over depth.

The network is a stack of L layers x <- tanh(x @ W_l) applied to a batch x of shape (B, D),
with loss 0.5 * sum(x**2) and float32 throughout. Every policy below computes that same loss;
they differ only in what the backward pass keeps and what it recomputes. The gradient is
taken with respect to the weights, shape (L, D, D). Keep B >= D: with a smaller batch an
activation is smaller than one layer's weight gradient, XLA can keep it inside the gradient's
output buffer, and the temporary bytes no longer count it.

For every (policy, L, D, B) the sweep keeps three views of memory apart, because they answer
different questions:

* saved residuals: what autodiff says it keeps, from `print_saved_residuals` (entries, and
  bytes computed from the printed shapes);
* the compiler's plan: argument, output, temporary and alias bytes from
  `Compiled.memory_analysis()`, or None where the backend offers no analysis (never 0);
* measured peak: how much a fresh process's resident memory grows over one gradient call,
  from the high-water mark in /proc/self/status (Linux, CPU backend), or None elsewhere.

It also times warm gradient calls (all samples kept, policies interleaved round-robin so
that drift in the machine hits them all alike), counts dot and optimization-barrier ops in
the program before and after XLA compiles it (recomputation that survives compilation shows
up as extra dots), and checks every gradient against the plain policy's.

Extra policies are plain callables `loss(weights, x) -> scalar`; pass them to `run_sweep` as
`extra_policies={"name": callable}`. A callable defined at the top level of an importable
module can also be measured in a fresh process; one defined in a notebook cannot, and its
peak is reported as unavailable.
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import gc
import importlib
import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import median

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from remat_lesson import MEMORY_FIELDS, memory_analysis_disabled, provenance, saved_residual_lines

Loss = Callable[[jax.Array, jax.Array], jax.Array]

# ---------------------------------------------------------------------------------------
# The network and the policies that ship with the lesson.
# ---------------------------------------------------------------------------------------


def layer(x, w):
    """One layer: x of shape (B, D), w of shape (D, D)."""
    return jnp.tanh(x @ w)


def final_loss(x):
    return 0.5 * jnp.sum(x**2)


def plain_loss(weights, x):
    """An unrolled Python loop: autodiff keeps every layer's activations."""
    for w in weights:
        x = layer(x, w)
    return final_loss(x)


def checkpoint_per_layer_loss(weights, x):
    """An unrolled loop with each layer wrapped in jax.checkpoint (keep inputs, recompute inside)."""
    checkpointed_layer = jax.checkpoint(layer)
    for w in weights:
        x = checkpointed_layer(x, w)
    return final_loss(x)


def checkpoint_dots_loss(weights, x):
    """Per-layer checkpoint whose policy keeps matmul outputs and recomputes only the tanh."""
    checkpointed_layer = jax.checkpoint(layer, policy=jax.checkpoint_policies.checkpoint_dots)
    for w in weights:
        x = checkpointed_layer(x, w)
    return final_loss(x)


def _scan_step(x, w):
    return layer(x, w), None


def scan_loss(weights, x):
    """lax.scan over the layers: the loop stacks whatever the body needs for its backward pass."""
    x, _ = lax.scan(_scan_step, x, weights)
    return final_loss(x)


def scan_checkpointed_body_loss(weights, x):
    """lax.scan with a checkpointed body: the loop stacks only each layer's input."""
    x, _ = lax.scan(jax.checkpoint(_scan_step), x, weights)
    return final_loss(x)


POLICIES: dict[str, Loss] = {
    "plain": plain_loss,
    "checkpoint_per_layer": checkpoint_per_layer_loss,
    "checkpoint_dots": checkpoint_dots_loss,
    "scan": scan_loss,
    "scan_checkpointed_body": scan_checkpointed_body_loss,
}

#: The policy every other one is compared with, for the gradient and for time.
BASELINE = "plain"


def sqrt_segment_length(depth: int) -> int:
    """The divisor of `depth` closest to sqrt(depth): a segment length that splits it evenly."""
    divisors = [k for k in range(1, depth + 1) if depth % k == 0]
    return min(divisors, key=lambda k: (abs(math.log(k) - 0.5 * math.log(depth)), k))


def make_inputs(depth: int, width: int, batch: int, seed: int = 0):
    """Weights (L, D, D) scaled by 1/sqrt(D), so tanh neither saturates nor vanishes, and x (B, D)."""
    rng = np.random.default_rng(seed)
    weights = (rng.normal(size=(depth, width, width)) / math.sqrt(width)).astype(np.float32)
    x = rng.normal(size=(batch, width)).astype(np.float32)
    return jnp.asarray(weights), jnp.asarray(x)


def policy_reference(loss: Loss) -> str | None:
    """'module:name' under which a fresh process can import `loss`, or None when it cannot."""
    for name, known in POLICIES.items():
        if loss is known:
            return name
    module = getattr(loss, "__module__", None)
    qualname = getattr(loss, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname or "." in qualname:
        return None  # a lambda, a closure, or code typed into a notebook
    try:
        if getattr(importlib.import_module(module), qualname) is not loss:
            return None
    except (ImportError, AttributeError):
        return None
    return f"{module}:{qualname}"


def resolve_policy(reference: str) -> Loss:
    """The loss a policy reference names: a shipped policy's name, or 'module:name'."""
    if reference in POLICIES:
        return POLICIES[reference]
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


# ---------------------------------------------------------------------------------------
# The three views of memory, and the ops in the program.
# ---------------------------------------------------------------------------------------
_DTYPE_BYTES = {
    "f64": 8,
    "s64": 8,
    "u64": 8,
    "f32": 4,
    "s32": 4,
    "u32": 4,
    "i32": 4,
    "bf16": 2,
    "f16": 2,
    "s16": 2,
    "u16": 2,
    "s8": 1,
    "u8": 1,
    "bool": 1,
    "pred": 1,
}
_SHAPE = re.compile(r"^([a-z]+\d*)\[([\d,\s]*)\]")


def residual_bytes(line: str) -> int | None:
    """Bytes of one saved-residual line such as 'f32[1024,128] output of tanh from ...'."""
    match = _SHAPE.match(line)
    if not match or match.group(1) not in _DTYPE_BYTES:
        return None
    dims = [int(d) for d in match.group(2).replace(" ", "").split(",") if d]
    return _DTYPE_BYTES[match.group(1)] * math.prod(dims)


def saved_residuals(loss: Loss, weights, x) -> tuple[int, int | None]:
    """(entries, bytes) that autodiff saves for the gradient with respect to the weights."""
    lines = saved_residual_lines(lambda w: loss(w, x), weights)
    sizes = [residual_bytes(line) for line in lines]
    return len(lines), (None if None in sizes else sum(sizes))


def compiled_memory(compiled) -> dict[str, int | None]:
    """The compiler's byte counts by MEMORY_FIELDS; all None when the analysis is unavailable.

    Some backends return None, raise NotImplementedError, or (jax-ml/jax#18954) report all
    zeros; none of those is a measurement of zero bytes.
    """
    unavailable = {field: None for field in MEMORY_FIELDS}
    if memory_analysis_disabled():
        return unavailable
    try:
        analysis = compiled.memory_analysis()
    except NotImplementedError:
        return unavailable
    if analysis is None:
        return unavailable
    values = {field: getattr(analysis, field, None) for field in MEMORY_FIELDS}
    if all(not value for value in values.values()):
        return unavailable
    return {field: None if value is None else int(value) for field, value in values.items()}


_LOWERED_DOT = re.compile(r"stablehlo\.dot(?:_general)?\b")
_LOWERED_BARRIER = re.compile(r"stablehlo\.optimization_barrier\b")
_COMPILED_DOT = re.compile(r"\sdot\(")
_COMPILED_BARRIER = re.compile(r"\sopt-barrier\(")
_COMPILED_TANH = re.compile(r"\stanh\(")
_LOWERED_TANH = re.compile(r"stablehlo\.tanh\b")


def op_counts(lowered_text: str, compiled_text: str | None) -> dict[str, int | None]:
    """Dots, `tanh` and optimization barriers in the program text before and after compilation.

    These count ops as written, not as executed: a loop body is counted once however many
    times it runs. XLA expands every barrier before it prints the compiled program (on CPU in
    the pass `cse_barrier_expander`, just before layout assignment: see `pass_trace`), so no
    barrier after compilation proves nothing by itself. Whether a recomputation survived shows
    in what it recomputes: in the unrolled per-layer checkpoint the duplicate dots are merged
    after fusion while the recomputed `tanh` stays (count both with
    `remat_lesson.compiled_op_counts`).
    """
    return {
        "dots_lowered": len(_LOWERED_DOT.findall(lowered_text)),
        "dots_compiled": None if compiled_text is None else len(_COMPILED_DOT.findall(compiled_text)),
        "tanh_lowered": len(_LOWERED_TANH.findall(lowered_text)),
        "tanh_compiled": None if compiled_text is None else len(_COMPILED_TANH.findall(compiled_text)),
        "barriers_lowered": len(_LOWERED_BARRIER.findall(lowered_text)),
        "barriers_compiled": None if compiled_text is None else len(_COMPILED_BARRIER.findall(compiled_text)),
    }


def _resident_memory() -> dict[str, int] | None:
    """VmRSS and VmHWM of this process in bytes, or None where /proc does not provide them."""
    try:
        fields = {}
        with open("/proc/self/status") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    fields[key] = int(value.split()[0]) * 1024
        return fields if len(fields) == 2 else None
    except OSError:
        return None


def _release_free_heap() -> None:
    """Hand freed heap pages back to the OS, so that new buffers count as growth (glibc only)."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _measure_peak_here(reference: str, depth: int, width: int, batch: int) -> dict:
    """Inside a fresh process: growth of resident memory over creating the inputs and one call.

    Setup compiles the gradient and calls it once, so that the runtime's one-off work (thread
    pools, code loaded on first use) is done; freed heap is returned to the OS and the
    high-water mark is reset (writing 5 to /proc/self/clear_refs). The measured window then
    creates the arguments and runs one gradient call, so what it sees is argument + output +
    temporary buffers, comparable with the compiler's plan.
    """
    if jax.default_backend() != "cpu":
        return {"peak_bytes": None, "peak_note": "host memory does not measure accelerator memory"}
    if _resident_memory() is None:
        return {"peak_bytes": None, "peak_note": "/proc/self/status has no VmHWM here"}
    loss = resolve_policy(reference)
    shapes = (
        jax.ShapeDtypeStruct((depth, width, width), jnp.float32),
        jax.ShapeDtypeStruct((batch, width), jnp.float32),
    )
    gradient = jax.jit(jax.grad(loss)).lower(*shapes).compile()
    scale = np.float32(1 / math.sqrt(width))
    # Inputs made by a compiled fill: their buffers are created inside the measured window.
    fill = jax.jit(lambda s: (jnp.full(shapes[0].shape, s, jnp.float32), jnp.full(shapes[1].shape, 0.5, jnp.float32)))
    fill = fill.lower(scale).compile()
    jax.block_until_ready(gradient(*fill(scale)))
    _release_free_heap()
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError as error:
        return {"peak_bytes": None, "peak_note": f"cannot reset the high-water mark: {error}"}
    before = _resident_memory()
    weights, x = fill(scale)
    jax.block_until_ready(gradient(weights, x))
    after = _resident_memory()
    return {
        "peak_bytes": after["VmHWM"] - before["VmRSS"],
        "peak_note": "measured",
        "rss_baseline_bytes": before["VmRSS"],
    }


def measure_peak(loss: Loss, depth: int, width: int, batch: int, timeout_s: float = 300) -> dict:
    """Peak growth of one gradient call, measured in a fresh Python process (see _measure_peak_here)."""
    reference = policy_reference(loss)
    if reference is None:
        return {
            "peak_bytes": None,
            "peak_note": "not importable by a fresh process (defined in a notebook or a closure)",
        }
    paths = [str(Path(__file__).resolve().parent)]
    module = sys.modules.get(reference.partition(":")[0])
    if module is not None and getattr(module, "__file__", None):
        paths.append(str(Path(module.__file__).resolve().parent))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths + [os.environ.get("PYTHONPATH", "")]))
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--measure-peak",
        reference,
        str(depth),
        str(width),
        str(batch),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"peak_bytes": None, "peak_note": f"fresh process took longer than {timeout_s:g} s"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"peak_bytes": None, "peak_note": f"fresh process failed: {last}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------
# Which compiler pass does what: XLA's own dump, pass by pass.
# ---------------------------------------------------------------------------------------
_PASS_FILE = re.compile(
    r"^module_\d+\.(?P<module>[^.]+)\.(?P<step>\d{4})\.(?P<pipeline>[^.]+)\.after_(?P<after>.+?)\.before_(?P<before>.+?)\.txt$"
)


def _pass_trace_here(reference: str, depth: int, width: int, batch: int, folder: str) -> list[dict]:
    """Inside a fresh process started with XLA_FLAGS asking for a dump after every pass: compile
    one policy's gradient and read the dump back. One row per dumped step, in pipeline order."""
    loss = resolve_policy(reference)
    shapes = (
        jax.ShapeDtypeStruct((depth, width, width), jnp.float32),
        jax.ShapeDtypeStruct((batch, width), jnp.float32),
    )
    jax.jit(jax.grad(loss)).lower(*shapes).compile()
    rows = []
    for path in sorted(Path(folder).iterdir()):
        match = _PASS_FILE.match(path.name)
        if not match or "grad" not in match["module"] and reference.split(":")[-1] not in match["module"]:
            continue
        text = path.read_text()
        rows.append(
            {
                "step": int(match["step"]),
                "pipeline": match["pipeline"],
                "after": match["after"],
                "before": match["before"],
                "dots": len(_COMPILED_DOT.findall(text)),
                "barriers": len(_COMPILED_BARRIER.findall(text)),
                "tanh": len(_COMPILED_TANH.findall(text)),
            }
        )
    return rows


def pass_trace(
    loss: Loss, depth: int = 4, width: int = 16, batch: int = 32, timeout_s: float = 300
) -> list[dict] | None:
    """Dots, optimization barriers and `tanh` in the program after each pass of XLA's pipeline.

    Runs a fresh Python process with XLA_FLAGS=--xla_dump_to=<scratch> --xla_dump_hlo_pass_re=.*
    (XLA writes the program after every pass that changed it, each file named
    <step>.<pipeline>.after_<pass>.before_<next pass>.txt), compiles the gradient of `loss` there,
    with JAX's persistent compile cache off, and reads the files back: one row per file with the
    pass that ran, the next one, and the dots, barriers and `tanh` it left. None where a fresh process
    cannot import `loss` or fails.
    """
    import tempfile

    reference = policy_reference(loss)
    if reference is None:
        return None
    with tempfile.TemporaryDirectory(prefix="xla-passes-") as folder:
        flags = f"--xla_dump_to={folder} --xla_dump_hlo_pass_re=.*"
        env = dict(
            os.environ,
            XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " " + flags).strip(),
            PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")]),
            # A program loaded from a persistent compile cache is not compiled, so XLA writes no
            # pass: the dump needs a real compile, whatever cache the learner has set up.
            JAX_ENABLE_COMPILATION_CACHE="false",
        )
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--pass-trace",
            reference,
            str(depth),
            str(width),
            str(batch),
            folder,
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        if done.returncode != 0:
            return None
        return json.loads(done.stdout.strip().splitlines()[-1])


def passes_that_changed(rows: list[dict], field: str) -> list[dict]:
    """The rows of a pass trace at which `field` (dots, barriers or tanh) changed, with the value before."""
    changed, previous = [], None
    for row in rows:
        if previous is not None and row[field] != previous:
            changed.append({**row, "from": previous})
        previous = row[field]
    return changed


# ---------------------------------------------------------------------------------------
# The sweep.
# ---------------------------------------------------------------------------------------
SMALL_DEPTHS = (4, 8, 16, 32)
SMALL_WIDTH = 64
SMALL_BATCH = 512

#: Columns of a sweep row, in the order the CSV file keeps them.
COLUMNS = (
    "policy",
    "depth",
    "width",
    "batch",
    "residual_entries",
    "residual_bytes",
    "argument_bytes",
    "output_bytes",
    "temp_bytes",
    "alias_bytes",
    "peak_bytes",
    "peak_note",
    "rss_baseline_bytes",
    "dots_lowered",
    "dots_compiled",
    "tanh_lowered",
    "tanh_compiled",
    "barriers_lowered",
    "barriers_compiled",
    "time_median_s",
    "time_vs_plain",
    "time_samples_s",
    "max_abs_diff_vs_plain",
    "compile_s",
)


_TEXT_COLUMNS = ("policy", "peak_note")
_FLOAT_COLUMNS = ("time_median_s", "time_vs_plain", "max_abs_diff_vs_plain", "compile_s")


class GradientMismatch(AssertionError):
    """A policy's gradient differs from the plain policy's beyond the tolerance."""


def _memory_columns(compiled) -> dict:
    memory = compiled_memory(compiled)
    return {field.replace("_size_in_bytes", "_bytes"): value for field, value in memory.items()}


def _compiled_text(compiled) -> str | None:
    try:
        return compiled.as_text()
    except Exception:  # some backends do not print their executables
        return None


def sweep_size(
    policies: Mapping[str, Loss],
    depth: int,
    width: int,
    batch: int,
    *,
    repeats: int = 5,
    warmups: int = 3,
    peak: bool = True,
    peak_jobs: int = 2,
    rtol: float = 1e-5,
    seed: int = 0,
) -> list[dict]:
    """One row per policy for one (L, D, B); `warmups` untimed calls of each, then times that
    interleave across the policies."""
    weights, x = make_inputs(depth, width, batch, seed)
    rows, executables = {}, {}
    for name, loss in policies.items():
        start = time.perf_counter()
        lowered = jax.jit(jax.grad(loss)).lower(weights, x)
        compiled = lowered.compile()
        compile_s = time.perf_counter() - start
        entries, saved_bytes = saved_residuals(loss, weights, x)
        rows[name] = {
            "policy": name,
            "depth": depth,
            "width": width,
            "batch": batch,
            "residual_entries": entries,
            "residual_bytes": saved_bytes,
            **_memory_columns(compiled),
            **op_counts(lowered.as_text(), _compiled_text(compiled)),
            "compile_s": compile_s,
        }
        executables[name] = compiled

    # The gradient first: a fast policy that computes something else is no policy at all.
    baseline = np.asarray(executables[BASELINE](weights, x)) if BASELINE in executables else None
    for name, compiled in executables.items():
        gradient = np.asarray(compiled(weights, x))  # also the warm-up call
        if baseline is None:
            rows[name]["max_abs_diff_vs_plain"] = None
            continue
        difference = float(np.max(np.abs(gradient - baseline)))
        rows[name]["max_abs_diff_vs_plain"] = difference
        tolerance = rtol * float(np.max(np.abs(baseline))) + 1e-12
        if not np.isfinite(difference) or difference > tolerance:
            raise GradientMismatch(
                f"{name} at L={depth}, D={width}, B={batch}: gradient differs from {BASELINE} by {difference:.3g} "
                f"(tolerance {tolerance:.3g})"
            )

    # The first calls pay one-off costs (memory first touched, caches): untimed, beyond the one above.
    for _ in range(max(warmups - 1, 0)):
        for compiled in executables.values():
            jax.block_until_ready(compiled(weights, x))
    samples = {name: [] for name in executables}
    for _ in range(repeats):
        for name, compiled in executables.items():
            start = time.perf_counter()
            jax.block_until_ready(compiled(weights, x))
            samples[name].append(time.perf_counter() - start)
    del executables
    for name, row in rows.items():
        row["time_samples_s"] = samples[name]
        row["time_median_s"] = median(samples[name])
        row["time_vs_plain"] = row["time_median_s"] / median(samples[BASELINE]) if BASELINE in samples else None

    # Fresh processes measure nothing about time, so they may run side by side.
    if peak:
        with ThreadPoolExecutor(max_workers=max(1, peak_jobs)) as pool:
            peaks = dict(
                zip(policies, pool.map(lambda loss: measure_peak(loss, depth, width, batch), policies.values()))
            )
    else:
        peaks = {name: {"peak_bytes": None, "peak_note": "not measured"} for name in policies}
    for name in policies:
        rows[name].update(peaks[name])
        rows[name].setdefault("rss_baseline_bytes", None)
    return [rows[name] for name in policies]


def run_sweep(
    depths: Iterable[int] = SMALL_DEPTHS,
    width: int = SMALL_WIDTH,
    batch: int = SMALL_BATCH,
    *,
    policies: Iterable[str] | None = None,
    extra_policies: Mapping[str, Loss | str] | None = None,
    repeats: int = 5,
    peak: bool | str = "deepest",
    peak_jobs: int = 2,
    progress: Callable[[str], None] | None = None,
) -> list[dict]:
    """Rows for every policy at every depth. The defaults are a small sweep for the notebook.

    `policies` picks shipped policies by name (all of them by default; the plain policy is
    always included, as the reference for the gradient and for time). `extra_policies` adds
    callables loss(weights, x), or 'module:name' strings, under the names given. `peak` says
    where to measure the fresh-process peak: True (every depth), "deepest" (the default: one
    fresh process per policy instead of one per row, which is most of a small sweep's time),
    or False.
    """
    depths = sorted(depths)
    if peak not in (True, False, "deepest"):
        raise ValueError(f"peak must be True, False or 'deepest', not {peak!r}")
    chosen = dict(POLICIES) if policies is None else {name: POLICIES[name] for name in policies}
    chosen = {BASELINE: POLICIES[BASELINE], **chosen}
    for name, loss in (extra_policies or {}).items():
        chosen[name] = resolve_policy(loss) if isinstance(loss, str) else loss
    rows = []
    for depth in depths:
        start = time.perf_counter()
        measure = peak is True or (peak == "deepest" and depth == depths[-1])
        rows.extend(sweep_size(chosen, depth, width, batch, repeats=repeats, peak=measure, peak_jobs=peak_jobs))
        if progress:
            progress(f"L={depth} D={width} B={batch}: {len(chosen)} policies in {time.perf_counter() - start:.1f} s")
    return rows


# ---------------------------------------------------------------------------------------
# Keeping and showing the results.
# ---------------------------------------------------------------------------------------


def write_csv(rows: list[dict], path: Path, *, command: str | None = None, settings: dict | None = None) -> Path:
    """The rows as CSV (empty cells for None), with provenance beside it as <name>.provenance.json."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            cells = {key: ("" if row.get(key) is None else row.get(key)) for key in COLUMNS}
            cells["time_samples_s"] = " ".join(f"{s:.6g}" for s in row["time_samples_s"])
            writer.writerow(cells)
    record = {**provenance(command), "sweep": settings or {}, "columns": list(COLUMNS)}
    path.with_suffix(".provenance.json").write_text(json.dumps(record, indent=2) + "\n")
    return path


def read_csv(path: Path) -> list[dict]:
    """Rows written by write_csv, with numbers back as numbers and empty cells as None."""
    rows = []
    with Path(path).open(newline="") as handle:
        for raw in csv.DictReader(handle):
            row = {}
            for key, text in raw.items():
                if text == "":
                    row[key] = None
                elif key in _TEXT_COLUMNS:
                    row[key] = text
                elif key == "time_samples_s":
                    row[key] = [float(s) for s in text.split()]
                elif key in _FLOAT_COLUMNS:
                    row[key] = float(text)
                else:
                    row[key] = int(text)
            rows.append(row)
    return rows


def _by_policy(rows):
    grouped: dict[str, list[dict]] = {}
    for row in rows:
        grouped.setdefault(row["policy"], []).append(row)
    return {name: sorted(group, key=lambda r: r["depth"]) for name, group in grouped.items()}


def plot_memory(rows: list[dict], path: Path | None = None):
    """Temporary bytes (solid) and measured peak (dashed, where measured) against depth, log-log.

    The two grey lines are slopes, not fits: O(L) and O(sqrt L), each drawn through one
    measured point so that a curve's slope can be compared with them by eye.
    """
    import matplotlib.pyplot as plt

    mib = 2.0**20
    figure, axes = plt.subplots(figsize=(10, 5.5))
    grouped = _by_policy(rows)
    depths = sorted({row["depth"] for row in rows})
    for index, (name, group) in enumerate(grouped.items()):
        color = f"C{index % 10}"
        temp = [(r["depth"], r["temp_bytes"] / mib) for r in group if r["temp_bytes"]]
        if temp:
            axes.plot(*zip(*temp), "o-", color=color, label=f"{name}: temp")
        peak = [(r["depth"], r["peak_bytes"] / mib) for r in group if r["peak_bytes"]]
        if peak:
            axes.plot(*zip(*peak), "x--", color=color, alpha=0.7, label=f"{name}: measured peak")
    temps = [r for r in rows if r["temp_bytes"]]
    if temps and len(depths) > 1:
        shallow, deep = depths[0], depths[-1]
        anchor_linear = max((r for r in temps if r["depth"] == shallow), key=lambda r: r["temp_bytes"])
        anchor_sqrt = min((r for r in temps if r["depth"] == deep), key=lambda r: r["temp_bytes"])
        grid = np.geomspace(shallow, deep, 50)
        axes.plot(grid, anchor_linear["temp_bytes"] / mib * grid / shallow, ":", color="0.4", label="O(L) slope")
        axes.plot(
            grid, anchor_sqrt["temp_bytes"] / mib * np.sqrt(grid / deep), "-.", color="0.6", label="O(sqrt L) slope"
        )
    if not temps:
        axes.text(0.5, 0.5, "memory analysis unavailable on this backend", ha="center", transform=axes.transAxes)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    _label_depths(axes, depths)
    widths = sorted({(r["width"], r["batch"]) for r in rows})
    shape = ", ".join(f"D={d}, B={b}" for d, b in widths)
    axes.set_xlabel("depth L (layers)")
    axes.set_ylabel("MiB")
    axes.set_title(f"Gradient memory against depth ({shape}, float32, {jax.default_backend()})")
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    _save(figure, path)
    return figure


def plot_time(rows: list[dict], path: Path | None = None):
    """Median warm gradient time of each policy divided by the plain policy's, against depth."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(10, 4.5))
    plain = {r["depth"]: median(r["time_samples_s"]) for r in rows if r["policy"] == BASELINE}
    for index, (name, group) in enumerate(_by_policy(rows).items()):
        points = [(r["depth"], median(r["time_samples_s"]) / plain[r["depth"]]) for r in group if r["depth"] in plain]
        # Spread of the ratio: each sample over the plain median, quartiles as the bar.
        spreads = [
            np.percentile([s / plain[r["depth"]] for s in r["time_samples_s"]], [25, 75])
            for r in group
            if r["depth"] in plain
        ]
        if points:
            xs, ys = zip(*points)
            below = [y - lo for y, (lo, _) in zip(ys, spreads)]
            above = [hi - y for y, (_, hi) in zip(ys, spreads)]
            axes.errorbar(
                xs,
                ys,
                yerr=[np.maximum(below, 0), np.maximum(above, 0)],
                fmt="o-",
                color=f"C{index % 10}",
                capsize=3,
                label=name,
            )
    axes.axhline(1.0, color="0.5", lw=1)
    axes.set_xscale("log", base=2)
    _label_depths(axes, sorted({row["depth"] for row in rows}))
    axes.set_xlabel("depth L (layers)")
    axes.set_ylabel("median time / plain median")
    axes.set_title("Warm gradient time relative to the plain unrolled policy (bars: quartiles)")
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes.grid(True, which="both", alpha=0.3)
    figure.tight_layout()
    _save(figure, path)
    return figure


def _label_depths(axes, depths):
    """Tick the swept depths themselves (16, 32, ...) rather than powers of two."""
    from matplotlib.ticker import NullLocator

    axes.set_xticks(depths)
    axes.set_xticklabels([str(depth) for depth in depths])
    axes.xaxis.set_minor_locator(NullLocator())


def _save(figure, path):
    if path is None:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    figure.savefig(path.with_suffix(".svg"))


def _main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--measure-peak",
        nargs=4,
        metavar=("POLICY", "L", "D", "B"),
        help="internal: measure one policy's peak in this (fresh) process and print JSON",
    )
    parser.add_argument(
        "--pass-trace",
        nargs=5,
        metavar=("POLICY", "L", "D", "B", "DUMP"),
        help="internal: compile one policy's gradient under an XLA dump and print the pass trace as JSON",
    )
    args = parser.parse_args(argv)
    if args.measure_peak:
        reference, depth, width, batch = args.measure_peak
        print(json.dumps(_measure_peak_here(reference, int(depth), int(width), int(batch))))
        return
    if args.pass_trace:
        reference, depth, width, batch, folder = args.pass_trace
        print(json.dumps(_pass_trace_here(reference, int(depth), int(width), int(batch), folder)))
        return
    rows = run_sweep(progress=print)
    for row in rows:
        temp = row["temp_bytes"]
        print(
            f"{row['policy']:>24} L={row['depth']:<4} temp={'n/a' if temp is None else f'{temp / 2**20:.2f} MiB'} "
            f"time={row['time_median_s'] * 1e3:.2f} ms"
        )


if __name__ == "__main__":
    _main()
