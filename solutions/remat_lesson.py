"""The lesson's fixed network and the plumbing that every stage of performance-05 shares.

This module ships with the assignment: the student release gets a copy, and the autograder
restores it from the source before grading, so the checks below can be trusted. What the
learner writes (the oracle, the residual count, the memory report, the timing loop, the
difference quotients) is deliberately not here: it lives in the notebooks' answer cells.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import io
import itertools
import json
import math
import os
import platform
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import print_saved_residuals
from jax.extend import core as jaxpr_core

# How graded cells check answers (shipped beside this module); re-exported for the notebooks.
from remat_checks import (  # noqa: F401
    ARG,
    REMOTE,
    CheckFailed,
    Checks,
    TimedExecutable,
    difference_diagnosis,
    numpy_only,
    scaled_square,
    sine_sum,
    tanh_network,
)

# ---------------------------------------------------------------------------------------
# The fixed network: four layers of tanh(W @ v), objective sum(v**2).
# ---------------------------------------------------------------------------------------
SEED = 18
WIDTH = 16
DEPTH = 4
WEIGHT_SCALE = 0.1


def lesson_weights(seed: int = SEED, width: int = WIDTH, scale: float = WEIGHT_SCALE) -> np.ndarray:
    """The weight matrix W: scale * standard normal, float32, drawn from a fixed seed."""
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(width, width)) * scale).astype(np.float32)


def lesson_input(width: int = WIDTH) -> np.ndarray:
    """The input x: evenly spaced points on [-0.5, 0.5]."""
    return np.linspace(-0.5, 0.5, width, dtype=np.float32)


def _recipe(value, name: str, *args, **kwargs):
    """Mark a value a check may hand to a learner's function with how it was made here, so the
    grader can make it again in the learner's kernel (it sends the recipe, never the object):
    (module, function, args, kwargs), or (module, attribute, None, None) for a module's own."""
    value.__recipe__ = ("remat_lesson", name, args, kwargs)
    return value


def make_objective(weights, depth: int = DEPTH, rematerialize: bool = False):
    """sum(v_L**2) after `depth` layers v <- tanh(W @ v).

    With rematerialize=True every layer is wrapped in jax.checkpoint: the backward pass
    recomputes what happens inside a layer instead of keeping it.
    """
    w = jnp.asarray(weights)

    def layer(v):
        return jnp.tanh(w @ v)

    step = jax.checkpoint(layer) if rematerialize else layer

    def objective(v):
        for _ in range(depth):
            v = step(v)
        return jnp.sum(v * v)

    return objective


def fresh_network(rng: np.random.Generator, depths, widths, scale: float, saturation: float = 0.95):
    """(weights, x, depth): a fresh network for a check, float32, drawn from rng (depth and width
    uniformly from the two ranges) until no layer saturates (every |tanh| at most `saturation`):
    near |h| = 1, float32 cannot tell 1 - h**2 from 0, so every method's gradient there is off."""
    while True:
        depth, width = int(rng.integers(*depths)), int(rng.integers(*widths))
        weights = (scale * rng.normal(size=(width, width))).astype(np.float32)
        point = rng.normal(size=width).astype(np.float32)
        v, largest = point.astype(np.float64), 0.0
        for _ in range(depth):
            v = np.tanh(weights.astype(np.float64) @ v)
            largest = max(largest, float(np.abs(v).max()))
        if largest <= saturation:
            return weights, point, depth


def _with_recipes(factory):
    """factory, its results marked with how they were made (see _recipe); inspect.getsource of the
    result shows factory's own source."""

    @functools.wraps(factory)
    def made(*args, **kwargs):
        return _recipe(factory(*args, **kwargs), factory.__name__, *args, **kwargs)

    return made


make_objective = _with_recipes(make_objective)


def float32_objective(weights, depth: int = DEPTH, rematerialize: bool = False):
    """make_objective's network, computed in float32 whatever it is given: an input of another
    dtype (float64, where a learner's code turned on jax_enable_x64) is rounded to float32 first.
    The HVP checks hand this one to `hvp`, so a difference of gradients taken in float64 is as
    coarse as one in float32, while an exact product is unchanged."""
    objective = make_objective(weights, depth, rematerialize)

    def in_float32(v):
        return objective(jnp.asarray(v, jnp.float32))

    return in_float32


float32_objective = _with_recipes(float32_objective)
W = jnp.asarray(lesson_weights())
x = jnp.asarray(lesson_input())
plain = make_objective(W, DEPTH, rematerialize=False)
remat = make_objective(W, DEPTH, rematerialize=True)
# Handed to a learner's function, these are this module's own objects (a check may ask `fn is plain`).
plain.__recipe__ = ("remat_lesson", "plain", None, None)
remat.__recipe__ = ("remat_lesson", "remat", None, None)


def objective_defined_at(filename: str):
    """sum(cos(sin(v))), written as if its code sat in the file `filename` (a path may hold
    spaces): its saved residuals name that file, and one of them a line without a column."""
    source = "def objective(v):\n    u = jnp.sin(v)\n    return jnp.sum(\njnp.cos(u))\n"
    namespace = {"jnp": jnp}
    exec(compile(source, filename, "exec"), namespace)
    return _recipe(namespace["objective"], "objective_defined_at", filename)


# ---------------------------------------------------------------------------------------
# Plumbing around JAX's diagnostics.
# ---------------------------------------------------------------------------------------
def saved_residual_lines(fn, *args) -> list[str]:
    """What jax.ad_checkpoint.print_saved_residuals prints for fn at args, one line per entry.

    Each line reads like 'f32[16] output of tanh from /path/file.py:17:20 (layer)'; the
    file:line:column part changes with where the code sits, so count or parse lines and
    never compare their text.
    """
    stream = io.StringIO()
    with contextlib.redirect_stdout(stream):
        print_saved_residuals(fn, *args)
    return [line.strip() for line in stream.getvalue().splitlines() if line.strip()]


def vjp_residuals(fn, *args, rename: tuple[str, str] | None = None) -> list:
    """The values jax.vjp(fn, *args) keeps for the backward pass, as arrays, in the order the
    backward function holds them: the values behind the lines of print_saved_residuals.

    rename=(old, new): those of fn with every checkpoint_name `old` in it called `new` instead,
    everything else as written: a policy that selects by the name `old` then no longer finds it.
    """
    wrap = None if rename is None else renaming(*rename)
    found = _judged(fn, "residuals", args) if wrap is None else _judged(fn, "residuals", args, wrap=wrap)
    if found is not NotImplemented:
        return found
    _, backward = jax.vjp(fn if wrap is None else wrap(fn), *args)
    return jax.tree_util.tree_leaves(backward)


def _renamed_jaxpr(jaxpr, old: str, new: str):
    """jaxpr (open or closed) with every `name` equation called `old` called `new`, inner programs
    (checkpoints, jit, loops, branches) included."""
    if isinstance(jaxpr, jaxpr_core.ClosedJaxpr):
        return jaxpr.replace(jaxpr=_renamed_jaxpr(jaxpr.jaxpr, old, new))

    def param(value):
        if isinstance(value, (jaxpr_core.Jaxpr, jaxpr_core.ClosedJaxpr)):
            return _renamed_jaxpr(value, old, new)
        if isinstance(value, tuple) and any(isinstance(v, (jaxpr_core.Jaxpr, jaxpr_core.ClosedJaxpr)) for v in value):
            return tuple(param(v) for v in value)
        return value

    eqns = []
    for eqn in jaxpr.eqns:
        params = {key: param(value) for key, value in eqn.params.items()}
        if eqn.primitive.name == "name" and params.get("name") == old:
            params["name"] = new
        eqns.append(eqn.replace(params=params))
    return jaxpr.replace(eqns=eqns)


def renaming(old: str, new: str):
    """A function that turns a program into the same program with every checkpoint_name `old` in
    it called `new` (read from its jaxpr, so a name inside a jit or a loop is renamed too)."""

    def rename(fn):
        def renamed(*args):
            closed, shape = jax.make_jaxpr(fn, return_shape=True)(*args)
            outputs = jaxpr_core.jaxpr_as_fun(_renamed_jaxpr(closed, old, new))(*jax.tree_util.tree_leaves(args))
            return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shape), outputs)

        return renamed

    return _recipe(rename, "renaming", old, new)


# ---------------------------------------------------------------------------------------
# Evidence about a JAX program: what a check asks of a learner's function.
# ---------------------------------------------------------------------------------------
class Program:
    """fn with some arguments fixed: bind(fn, ARG, ARG, 8)(a, b) is fn(a, b, 8)."""

    def __init__(self, fn, template):
        self.fn, self.template = fn, tuple(template)

    def __call__(self, *inputs):
        given = iter(inputs)
        return self.fn(*[next(given) if item is ARG else item for item in self.template])


def bind(fn, *template) -> Program:
    """fn with the arguments that are not ARG fixed; the ARGs take a program's inputs, in order."""
    return Program(fn, template)


def _judged(fn, operation: str, args, **options):
    """While graded, fn may be the grader's handle on a learner's function: then the grader's
    judge answers (it builds the program again from the learner's answer cells, never asking the
    kernel for it, and runs it on args itself).
    NotImplemented for an ordinary function."""
    target, template = (fn.fn, fn.template) if isinstance(fn, Program) else (fn, None)
    remote = getattr(target, REMOTE, None)
    if remote is None:
        return NotImplemented
    return remote(operation, args, bind=template, **options)


@functools.lru_cache(maxsize=128)
def _differentiated(transform, fn, argnums):
    return transform(fn, argnums=argnums)


def differentiated(transform, fn, argnums=0):
    """transform(fn, argnums) (jax.grad or jax.value_and_grad), made once per fn and argnums.

    jax.jit keeps its traces and compiled programs per function: a new jax.grad(fn) on every
    call is a new function, traced and compiled again each time, while this one is traced once
    per argument shape (a check that compares ten seeds of one loss compiles it once). As with
    jax.jit, a later call does not see a change to a global that fn reads while it is traced.
    """
    argnums = tuple(argnums) if isinstance(argnums, list) else argnums
    try:
        return _differentiated(transform, fn, argnums)
    except TypeError:  # fn cannot be a dictionary key: made afresh
        return transform(fn, argnums=argnums)


def program_value(fn, *args, wrap=None):
    """fn(*args), compiled (wrap(fn)(*args) with a wrap): fn must be a JAX program (traceable, no
    NumPy conversion inside). While graded, the grader computes it from the program it rebuilds
    from the answer cells, at the precision of its inputs (a float32 program that turns on
    float64 inside is refused)."""
    found = _judged(fn, "value", args) if wrap is None else _judged(fn, "value", args, wrap=wrap)
    if found is not NotImplemented:
        return found
    return jax.jit(fn if wrap is None else wrap(fn))(*args)


def derivatives_along(tangent):
    """A wrap: a program of (point, direction) turned into its first and second derivatives along
    `tangent`, added to the direction: d/dt and d2/dt2 of fn(point, direction + t * tangent) at 0.
    A program linear in its direction (an exact Hessian-vector product) has fn(point, tangent)
    as the first and exactly zero as the second: JAX differentiates what it computes."""

    def wrap(fn):
        def derivatives(point, direction):
            def along(t):
                return fn(point, direction + t * jnp.asarray(tangent, direction.dtype))

            one, zero = jnp.ones((), direction.dtype), jnp.zeros((), direction.dtype)

            def first(t):
                return jax.jvp(along, (t,), (one,))[1]

            return first(zero), jax.jvp(first, (zero,), (one,))[1]

        return derivatives

    return _recipe(wrap, "derivatives_along", tangent)


def gradient(fn, *args, argnums=0):
    """jax.grad(fn, argnums) at args, compiled."""
    found = _judged(fn, "grad", args, argnums=argnums)
    return found if found is not NotImplemented else jax.jit(differentiated(jax.grad, fn, argnums))(*args)


def value_and_gradient(fn, *args, argnums=0):
    """jax.value_and_grad(fn, argnums) at args, compiled."""
    found = _judged(fn, "value_and_grad", args, argnums=argnums)
    if found is not NotImplemented:
        return found
    return jax.jit(differentiated(jax.value_and_grad, fn, argnums))(*args)


def planned_memory(fn, *args) -> dict | None:
    """The compiler's plan for jax.jit(jax.grad(fn)) at args' shapes: the four byte counts of
    MEMORY_FIELDS, or None where the backend has no memory analysis."""
    found = _judged(fn, "plan", args)
    if found is NotImplemented:
        compiled = jax.jit(differentiated(jax.grad, fn)).lower(*args).compile()
        found = memory_fields(compiled.memory_analysis())
    return None if memory_analysis_disabled() else found


def memory_fields(analysis) -> dict | None:
    """A memory analysis as {field: bytes} (MEMORY_FIELDS), None when there is none."""
    return None if analysis is None else {name: int(getattr(analysis, name)) for name in MEMORY_FIELDS}


# ---------------------------------------------------------------------------------------
# The two programs of a VJP, as JAX writes them (before XLA compiles anything).
# ---------------------------------------------------------------------------------------
def forward_and_backward(fn, *args):
    """(forward, backward): the jaxprs of jax.vjp(fn, *args), the view the JAX docs'
    gradient-checkpointing page prints with its print_fwd_bwd helper.

    The forward program returns fn's output and the residuals; the backward program takes the
    residuals and the output's cotangent (its last input) and returns the cotangents of args.
    """
    forward = jax.make_jaxpr(lambda *values: jax.vjp(fn, *values))(*args)
    output, backward_fn = jax.vjp(fn, *args)
    residuals, tree = jax.tree_util.tree_flatten(backward_fn)

    def backward(*values):
        *saved, cotangent = values
        return jax.tree_util.tree_unflatten(tree, saved)(cotangent)

    return forward, jax.make_jaxpr(backward)(*residuals, output)


#: Primitives that only call another program: their equations are read through.
_CALLS = frozenset({"remat2", "checkpoint", "pjit", "jit", "closed_call"})


def _inner_jaxprs(eqn):
    for value in eqn.params.values():
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if hasattr(item, "eqns"):
                yield item
            elif hasattr(item, "jaxpr") and hasattr(item.jaxpr, "eqns"):
                yield item.jaxpr


def _is_var(value) -> bool:
    """A jaxpr variable (a literal constant is not one, and is not hashable)."""
    return type(value).__name__ not in ("Literal", "DropVar")


def primitive_counts(closed_jaxpr) -> collections.Counter:
    """How often each primitive is written in a jaxpr, inner programs included. A loop body
    (scan, while) is counted once, however many times it runs; calls are read through."""
    counts = collections.Counter()

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            if eqn.primitive.name not in _CALLS:
                counts[eqn.primitive.name] += 1
            for inner in _inner_jaxprs(eqn):
                walk(inner)

    walk(closed_jaxpr.jaxpr)
    return counts


def most_residuals_held(fn, *args) -> dict:
    """The most residual values the backward pass of jax.vjp(fn, *args) holds at once.

    A residual here is any value of the backward program that does not depend on the output's
    cotangent: what the forward pass handed over, and what the backward pass recomputes. The
    backward program is run in thought one equation at a time, as JAX wrote it (calls read
    through, a loop as one step); a value is held from the step that makes it to its last use.
    This counts what the checkpoint boundary asks for, in entries (and their bytes), before
    XLA fuses, reorders or shares anything: a model, not a measurement of memory.
    """
    backward = forward_and_backward(fn, *args)[1].jaxpr
    sizes, from_cotangent, steps, fresh = {}, {}, [], itertools.count()

    def new(var, tainted):
        key = next(fresh)
        sizes[key] = math.prod(var.aval.shape) * np.dtype(var.aval.dtype).itemsize
        from_cotangent[key] = tainted
        return key

    def flatten(jaxpr, keys):
        for var in jaxpr.constvars:
            keys[var] = new(var, False)
            steps.append(([], [keys[var]]))
        for eqn in jaxpr.eqns:
            inputs = [keys[v] for v in eqn.invars if _is_var(v) and v in keys]
            tainted = any(from_cotangent[k] for k in inputs)
            if eqn.primitive.name in _CALLS:
                (inner,) = _inner_jaxprs(eqn)
                inner_keys = {iv: keys[ov] for iv, ov in zip(inner.invars, eqn.invars) if _is_var(ov) and ov in keys}
                flatten(inner, inner_keys)
                for outer, out in zip(eqn.outvars, inner.outvars):
                    keys[outer] = inner_keys[out] if _is_var(out) and out in inner_keys else new(outer, tainted)
                continue
            outputs = [keys.setdefault(v, new(v, tainted)) for v in eqn.outvars if _is_var(v)]
            steps.append((inputs, outputs))

    keys = {}
    for index, var in enumerate(backward.invars):
        keys[var] = new(var, index == len(backward.invars) - 1)  # the last input is the cotangent
    flatten(backward, keys)
    kept = {keys[v] for v in backward.outvars if _is_var(v) and v in keys}
    last_use = {}
    for index, (inputs, _) in enumerate(steps):
        for key in inputs:
            last_use[key] = index
    held = {keys[v] for v in backward.invars}

    def residuals(values):
        chosen = [k for k in values if not from_cotangent[k]]
        return len(chosen), sum(sizes[k] for k in chosen)

    most = residuals(held)
    for index, (_, outputs) in enumerate(steps):
        held |= set(outputs)
        most = max(most, residuals(held))
        held = {k for k in held if last_use.get(k, -1) > index or k in kept}
    return {"entries": most[0], "bytes": most[1]}


MEMORY_FIELDS = (
    "argument_size_in_bytes",
    "output_size_in_bytes",
    "temp_size_in_bytes",
    "alias_size_in_bytes",
)

#: Set this environment variable to 1 to make the bundle behave as on a backend that has no
#: memory analysis (the figure, the evidence file and the checks then show "unavailable").
NO_MEMORY_ANALYSIS_ENV = "REMAT_LESSON_NO_MEMORY_ANALYSIS"


def memory_analysis_disabled() -> bool:
    return os.environ.get(NO_MEMORY_ANALYSIS_ENV, "").strip() not in ("", "0")


class WithoutMemoryAnalysis:
    """A compiled executable as a backend without memory analysis presents it.

    Calls go through unchanged; memory_analysis() returns None or raises
    NotImplementedError, the two ways real backends say "not available".
    """

    def __init__(self, compiled, *, raises: bool = False):
        self._compiled = compiled
        self._raises = raises
        _recipe(self, "WithoutMemoryAnalysis", compiled, raises=raises)

    def __call__(self, *args, **kwargs):
        return self._compiled(*args, **kwargs)

    def memory_analysis(self):
        if self._raises:
            raise NotImplementedError("memory analysis is not implemented on this backend")
        return None

    def __getattr__(self, name):
        return getattr(self._compiled, name)


def compile_gradient(fn, *args):
    """jax.jit(jax.grad(fn)) lowered and compiled ahead of time for these argument shapes."""
    compiled = compile_gradient_with_analysis(fn, *args)
    return (
        WithoutMemoryAnalysis(_recipe(compiled, "compile_gradient", fn, *args))
        if memory_analysis_disabled()
        else compiled
    )


def compile_gradient_with_analysis(fn, *args):
    """compile_gradient, with the backend's memory analysis whatever REMAT_LESSON_NO_MEMORY_ANALYSIS says."""
    return _recipe(jax.jit(jax.grad(fn)).lower(*args).compile(), "compile_gradient_with_analysis", fn, *args)


# ---------------------------------------------------------------------------------------
# The program XLA compiled: what it runs and what its backward part reads.
# ---------------------------------------------------------------------------------------
_HLO_LINE = re.compile(
    r"^\s*(?:ROOT )?%(?P<name>[\w.\-]+) = (?P<shape>\S+) (?P<op>[\w\-]+)\((?P<operands>[^)]*)\)(?P<rest>.*)$"
)
_OP_NAME = re.compile(r'op_name="([^"]*)"')


def _hlo_instructions(text: str):
    for line in text.splitlines():
        match = _HLO_LINE.match(line)
        if match:
            yield match


def compiled_op_counts(executable) -> collections.Counter:
    """How often each operation is written in the compiled program's text (`as_text()`), the
    computations inside fusions included. A loop body is counted once, however often it runs."""
    return collections.Counter(match["op"] for match in _hlo_instructions(executable.as_text()))


def forward_values_read_by_backward(executable) -> collections.Counter:
    """The values the compiled program's forward part computes and its backward part reads, by
    the operation that made them ("tanh", "dot_general", ...), each value counted once.

    XLA keeps JAX's names in each instruction's metadata: an instruction of the backward part
    carries `transpose(` in its op_name. Parameters and constants are buffers that exist anyway
    and are not counted. The program's entry computation is read; fusions count as what their
    metadata names (a fused `tanh` is a tanh output).
    """
    text = executable.as_text()
    entry = text[text.index("ENTRY") :]
    made_by, read = {}, set()
    for match in _hlo_instructions(entry):
        op_name = _OP_NAME.search(match["rest"])
        path = op_name.group(1) if op_name else ""
        if "transpose(" in path:
            read.update(operand.strip().lstrip("%") for operand in match["operands"].split(","))
        elif match["op"] not in ("parameter", "constant"):
            made_by[match["name"]] = path.rsplit("/", 1)[-1] or match["op"]
    return collections.Counter(made_by[name] for name in read if name in made_by)


# ---------------------------------------------------------------------------------------
# Where a run's results go, and what made them.
# ---------------------------------------------------------------------------------------
RUNS_DIR_ENV = "REMAT_LESSON_RUNS_DIR"


def runs_dir() -> Path:
    """runs/performance-05 of the bundle this module sits in, or of the working directory.

    Inside the bundle (solutions/ or notebooks/) results go to the bundle's runs/; a copy
    elsewhere (an autograder's submission folder, say) keeps them beside itself.
    """
    if os.environ.get(RUNS_DIR_ENV):
        return Path(os.environ[RUNS_DIR_ENV])
    bundle = Path(__file__).resolve().parent.parent
    if (bundle / "requirements-cpu.txt").is_file() and (bundle / "solutions").is_dir():
        return bundle / "runs" / "performance-05"
    return Path.cwd() / "runs" / "performance-05"


def save_record(stage: str, record: dict) -> Path:
    """Keep one stage's measurements as runs/performance-05/<stage>.json."""
    path = runs_dir() / f"{stage}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, default=_jsonable) + "\n")
    return path


def load_record(stage: str):
    """One stage's measurements, or None when that stage has not been run yet."""
    path = runs_dir() / f"{stage}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _jsonable(value):
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot store {type(value).__name__} in a record")


#: Environment variables that change what JAX or the lesson does, kept with every result.
RECORDED_VARIABLES = ("JAX_", "XLA_", "TF_CPP_", "REMAT_LESSON_NO_MEMORY_ANALYSIS")


def provenance(command: str | None = None, **extra) -> dict:
    """When, with what and on what a result was produced: the one record of it for the lesson,
    its sweep, the evidence kit and the phase project (which adds what it needs in `extra`)."""
    import importlib.metadata

    import jaxlib

    try:  # read from its metadata: importing Matplotlib would cost a notebook that never plots a third of a second
        matplotlib_version = importlib.metadata.version("matplotlib")
    except importlib.metadata.PackageNotFoundError:  # the figure is optional; the record is not
        matplotlib_version = None
    devices = jax.devices()
    return {
        "utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "numpy": np.__version__,
        "matplotlib": matplotlib_version,
        "platform": platform.platform(),
        "devices": {"backend": jax.default_backend(), "kind": devices[0].device_kind, "count": len(devices)},
        "memory_analysis": "disabled" if memory_analysis_disabled() else "as the backend reports",
        "environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith(RECORDED_VARIABLES)},
        "jax_environment": jax.print_environment_info(return_string=True).strip().splitlines(),
        "command": command or " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        **extra,
    }
