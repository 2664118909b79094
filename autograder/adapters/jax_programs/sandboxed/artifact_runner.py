"""The judge's artifact runner: a learner's JAX program, made again from data, transformed and run here.

No learner code runs in this process. The judge's program builder (program_builder.py, beside this
file) hands over a learner's program untransformed, as its jaxpr written as data, at the shapes the
judge asked for (program_data.py). This process, in a sandbox of its own (the adapter's helpers.py,
autograder/kernel/helpers.py), makes the program again from JAX's own primitives alone, checks that it
takes exactly the inputs asked for and computes in no wider floats than they hold, applies the
check's wrap (a shipped function of a program, a renaming of checkpoint names, say), and then the
transform the evidence needs, itself:
- "grad", "value_and_grad": run on the judge's inputs;
- "residuals": the values `jax.vjp` keeps for the backward pass, at the judge's inputs;
- "plan": the compiler's memory plan of the program's gradient (`jax.jit(jax.grad(...))`);
- "value": the program itself, run on the judge's inputs (the judge compares it with the
  kernel's own function there).
Every piece of evidence about a program comes from what the judge did to it here: a program can
only be judged for what it is. It answers with data only (wire.py), its outputs bounded.

Sent as text after wire.py's, confine.py's and program_data.py's; `main()` answers one request per
line, each with its nonce (confine.py).
"""

from __future__ import annotations

if __package__:  # imported as part of the grader (its tests); sent as text, the three files come first
    from autograder.sandboxed.confine import confine, reply, requests
    from autograder.sandboxed.wire import WireError, decode, dumps, encode, loads, shipped

    from .program_data import program_from_data, wider_floats

#: The most outputs, and bytes of output, one answer may give.
MAX_OUTPUTS = 4096
MAX_OUTPUT_BYTES = 64 << 20
#: The longest program text taken (the program builder's answers are at most this long too).
MAX_PROGRAM = 32 << 20
MEMORY_FIELDS = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes", "alias_size_in_bytes")


def rebuilt(request):
    """The program written as data, made again, as a function of its inputs (its one output bare),
    with the check's wrap applied: a function of JAX's objects and the shipped modules alone."""
    import numpy as np
    from jax.extend import core as jaxpr_core

    if not isinstance(request.get("program"), str):
        raise WireError("no program was sent")
    closed = program_from_data(loads(request["program"], limit=MAX_PROGRAM))
    wanted = [(tuple(shape), np.dtype(dtype)) for shape, dtype in request["avals"]]
    given = [(tuple(v.aval.shape), np.dtype(v.aval.dtype)) for v in closed.jaxpr.invars]
    if given != wanted:
        raise WireError(f"the program takes {given}, not the inputs asked for ({wanted})")
    wider = wider_floats(closed)
    if wider:  # judged at its inputs' precision: a difference taken in float64 is not a float32 program's answer
        raise WireError(
            f"the program computes in {' and '.join(wider)}, wider than its inputs (jax.enable_x64 inside it?): "
            "a program is judged at the precision of its inputs"
        )
    run = jaxpr_core.jaxpr_as_fun(closed)

    def program(*inputs):
        outputs = run(*inputs)
        return outputs[0] if len(outputs) == 1 else list(outputs)

    wrap = request.get("wrap")
    if wrap is None:
        return program
    return decode(wrap, resolve=_shipped)(program)


def _shipped(form, body, nested):
    if form != "$shipped":
        raise WireError(f"{form} is not accepted by the artifact runner")
    return shipped(body, nested)


def _gradient(program, which):
    import jax

    return jax.grad(program, argnums=which)


def _value_and_gradient(program, which):
    import jax

    return jax.value_and_grad(program, argnums=which)


def _residuals(program, which):
    import jax

    return lambda *values: jax.tree_util.tree_leaves(jax.vjp(program, *values)[1])


#: The evidence a check may ask about a learner's program, each with the transform this runner
#: applies to it ("plan" compiles the gradient for its memory plan). The one registry of them:
#: the judge's side takes its names from here (autograder/adapters/jax_programs/evidence.py).
EVIDENCE = {
    "grad": _gradient,
    "value_and_grad": _value_and_gradient,
    "residuals": _residuals,
    "plan": _gradient,
    "value": lambda program, which: program,
}


def transformed(program, operation: str, argnums: int | list):
    """argnums as JAX takes it: an int is one input (its gradient alone), a list is a tuple of
    inputs (a tuple of gradients, even of one)."""
    return EVIDENCE[operation](program, argnums if isinstance(argnums, int) else tuple(argnums))


#: The executables made this notebook, by what made them (the request but its inputs): a check
#: asks for the same program and transform again (its value at a point of the kernel's, then at
#: its own inputs), and it is traced and compiled once. Emptied at each notebook ("fresh").
_MADE: dict = {}
#: The most executables kept for one notebook (each a small compiled program; a notebook asks for dozens).
MAX_MADE = 256


def _made(request, operation: str, argnums: int | list):
    """(the compiled executable, its memory plan or None) for request, made once per notebook.
    WireError for a program whose outputs are larger than the judge takes."""
    import hashlib
    import math

    import jax
    import numpy as np

    key = hashlib.sha256(
        dumps([request["program"], request.get("wrap"), operation, argnums, request["avals"]]).encode()
    ).hexdigest()
    if key in _MADE:
        return _MADE[key]
    avals = [jax.ShapeDtypeStruct(tuple(shape), dtype) for shape, dtype in request["avals"]]
    traced = jax.jit(transformed(rebuilt(request), operation, argnums)).trace(*avals)
    if operation != "plan":
        outputs = jax.tree_util.tree_leaves(traced.out_info)
        size = sum(math.prod(a.shape) * np.dtype(a.dtype).itemsize for a in outputs)
        if len(outputs) > MAX_OUTPUTS or size > MAX_OUTPUT_BYTES:
            raise WireError(f"the program gives {len(outputs)} outputs of {size} bytes: more than the judge takes")
    compiled = traced.lower().compile()
    plan = None
    if operation == "plan":
        analysis = compiled.memory_analysis()
        plan = None if analysis is None else {name: int(getattr(analysis, name)) for name in MEMORY_FIELDS}
    if len(_MADE) >= MAX_MADE:
        _MADE.clear()
    _MADE[key] = compiled, plan
    return compiled, plan


def fresh() -> dict:
    """A new notebook: nothing of an earlier one's is kept here."""
    _MADE.clear()
    return {"fresh": True}


def answer(request) -> dict:
    if not isinstance(request.get("program"), str):
        raise WireError("no program was sent")
    operation = request.get("op")
    if operation not in EVIDENCE:
        raise WireError(f"no operation {operation!r}")
    argnums = request.get("argnums", 0)
    positions = [argnums] if type(argnums) is int else argnums
    if not (isinstance(positions, list) and positions and all(type(a) is int and a >= 0 for a in positions)):
        raise WireError("argnums that are not an input position or a list of them")
    if len(set(positions)) != len(positions):  # JAX's own answer would be a bare StopIteration
        raise WireError("argnums that name an input twice")
    # A transform of inputs (not "value", "residuals") refuses one the program lacks before it is
    # traced: JAX's TypeError would come back as the learner's program failing.
    differentiates = operation in ("grad", "value_and_grad", "plan")
    if differentiates and (not isinstance(request.get("avals"), list) or max(positions) >= len(request["avals"])):
        raise WireError("argnums that name an input the program does not take")
    compiled, plan = _made(request, operation, argnums)
    if operation == "plan":
        return {"result": encode(plan)}
    inputs = [decode(item) for item in request["inputs"]]
    return {"result": encode(compiled(*inputs))}


def main(config: dict) -> None:
    import sys

    reader, writer = confine(config)
    if config.get("assignment"):
        sys.path.insert(0, config["assignment"])  # the shipped modules a wrap comes from
    import jax  # noqa: F401  (before the first request: its time is the start's, not a request's)

    reply(writer, config["start"], {"ready": True})
    for nonce, request in requests(reader):
        if request.get("op") == "fresh":
            reply(writer, nonce, fresh())
            continue
        try:
            response = answer(request)
        except WireError as error:
            response = {"refused": str(error)[:4000]}
        except Exception as error:  # a program that does not build, compile or run
            response = {"failed": f"{type(error).__name__}: {error}"[:4000]}
        reply(writer, nonce, response)
