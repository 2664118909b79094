"""The judge's artifact runner: a learner's JAX program, handed over by their kernel, run here.

A learner's kernel hands the judge its programs as `jax.export` artifacts (autograder/agent.py):
serialized StableHLO at the shapes the judge asked for. This process, in a sandbox of its own
(autograder/helpers.py), deserializes one, checks that it takes exactly the inputs asked for
and gives a bounded output, and then either runs it on the judge's inputs ("run") or compiles
it and reads the compiler's memory plan ("plan"). It answers with data only (wire.py).
Deserializing keeps JAX's own checks (no custom call outside its allow-list, no host callback).

Sent as text after wire.py's and confine.py's; `main()` reads one request per line.
"""

from __future__ import annotations

try:  # imported as part of the grader (its tests); sent as text, the two files come first
    from .confine import confine
    from .wire import WireError, decode, dumps, encode, loads
except ImportError:  # pragma: no cover - the sandbox's copy
    pass

#: The most outputs, and bytes of output, one program may give.
MAX_OUTPUTS = 4096
MAX_OUTPUT_BYTES = 64 << 20
MEMORY_FIELDS = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes", "alias_size_in_bytes")


def load(request):
    import base64
    import math

    import jax
    import numpy as np

    exported = jax.export.deserialize(bytearray(base64.b64decode(request["exported"], validate=True)))
    wanted = [(tuple(shape), np.dtype(dtype)) for shape, dtype in request["avals"]]
    given = [(tuple(aval.shape), np.dtype(aval.dtype)) for aval in exported.in_avals]
    if given != wanted:
        raise WireError(f"the program takes {given}, not the inputs asked for ({wanted})")
    if "cpu" not in exported.platforms:
        raise WireError(f"the program was not exported for the CPU ({exported.platforms})")
    outputs = exported.out_avals
    size = sum(math.prod(a.shape) * np.dtype(a.dtype).itemsize for a in outputs)
    if len(outputs) > MAX_OUTPUTS or size > MAX_OUTPUT_BYTES:
        raise WireError(f"the program gives {len(outputs)} outputs of {size} bytes: more than the judge takes")
    return exported


def answer(request) -> dict:
    import jax

    exported = load(request)
    if request["op"] == "run":
        inputs = [decode(item) for item in request["inputs"]]
        return {"result": encode(jax.jit(exported.call)(*inputs))}
    if request["op"] == "plan":
        avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in exported.in_avals]
        analysis = jax.jit(exported.call).lower(*avals).compile().memory_analysis()
        plan = None if analysis is None else {name: int(getattr(analysis, name)) for name in MEMORY_FIELDS}
        return {"result": encode(plan)}
    raise WireError(f"no operation {request['op']!r}")


def main(config: dict) -> None:
    reader, writer = confine(config["uid"], config["limits"])
    import jax  # noqa: F401  (before the first request: its time is the start's, not a request's)

    writer.write(dumps({"ready": True}) + "\n")
    writer.flush()
    for line in reader:
        try:
            response = answer(loads(line))
        except WireError as error:
            response = {"refused": str(error)[:4000]}
        except Exception as error:  # a program that does not deserialize, compile or run
            response = {"failed": f"{type(error).__name__}: {error}"[:4000]}
        writer.write(dumps(response) + "\n")
        writer.flush()
