"""The judge's program builder: a learner's JAX function rebuilt from its answer cell, and written as data.

The checks ask for evidence about a learner's JAX program: its gradient, its saved residuals, its
compiled memory plan (the evidence of artifact_runner.EVIDENCE).
That evidence must not be the kernel's word: a kernel can hand over any program it likes, or
answer with values. So the program is built again here, in a fresh process of the judge's (a
sandbox of its own, the adapter's helpers.py), from the learner's answer cells alone: each cell runs
here one statement at a time (a statement that cannot run is left out), the judge's recipe for
the target is followed (a function the cell defines, called on the judge's values, an item of
what it returned), and the program is traced at the shapes the judge names and handed over
untransformed, as its jaxpr written as data (program_data.py). Nothing the kernel holds
(other cells, hooks, a patched JAX, the agent) reaches this process.

Learner code runs here, so what this process sends is the learner's to choose. That is why it
sends a program and nothing else: the judge's artifact runner, which never runs learner code,
makes the program again from JAX's own primitives and applies every transform itself (the
gradient, the VJP's saved values, the compiler's plan). A program can only be judged for what it
is, never stand in for the evidence of another.

JAX's own functions this process traces with are taken before any answer cell runs; a cell that
rebinds any function or class of JAX's modules is refused (and the static scan flags it for review).

Requests: {"op": "program", "cells": {name: source}, "target": <value>, "bind": [...] | null,
"avals": [[shape, dtype], ...]}, where a value may hold {"$learner": name} (what the answer cell
defining name binds it to), {"$call": <value>, "args": [...], "kwargs": [[name, value], ...]},
{"$item": <value>, "key": <value>}, {"$shipped": ...} and {"$arg": i} (where bind puts the
program's inputs). Answer: {"program": data as JSON text}, from a fork of this process made before any answer
cell ran (`main`). Sent as text after wire.py's, confine.py's and program_data.py's; `main()`
reads one request per line.
"""

from __future__ import annotations

if __package__:  # imported as part of the grader (its tests); sent as text, the three files come first
    from autograder.sandboxed.confine import confine
    from autograder.sandboxed.wire import WireError, decode, dumps, loads, shipped

    from .program_data import program_as_data

#: The names an answer cell finds already bound, as a JAX notebook imports them before it (its
#: own imports come after, and win); then `from M import *` of each module of the course's
#: ANSWER_PRELUDE, which the judge names in its request (judge/protocol.py).
PRELUDE = "import jax\nimport jax.numpy as jnp\nimport numpy as np\nfrom jax import lax\nnumpy = np\n"


def prelude(modules) -> str:
    """PRELUDE, then each module's names (a module that cannot be imported here is left out)."""
    names = [m for m in modules if isinstance(m, str) and m.isidentifier()]
    return PRELUDE + "".join(f"try:\n    from {m} import *\nexcept ImportError:\n    pass\n" for m in names)


#: Top-level packages whose functions and classes an answer cell may not rebind here.
GUARDED = ("jax", "jaxlib")
#: Modules a trace may import on its first use: imported ahead, so they are guarded too.
AHEAD = ("jax.ad_checkpoint", "jax.experimental.multihost_utils", "jaxlib.mlir.dialects.mhlo")
#: The largest answer taken from the fork that builds a program (the program as data).
MAX_ANSWER = 32 << 20


class Builder:
    """The answer cells loaded so far (by their text) and JAX's functions, taken before any ran."""

    def __init__(self):
        import importlib

        import jax
        import jax.numpy

        for name in AHEAD:
            try:
                importlib.import_module(name)
            except ImportError:  # another JAX: what it imports later is simply not guarded
                pass

        self.namespaces: dict[str, dict] = {}
        self.prelude: tuple = ()  # the ANSWER_PRELUDE the judge names in its requests
        self.jax = {
            "make_jaxpr": jax.make_jaxpr,
            "struct": jax.ShapeDtypeStruct,
            "asarray": jax.numpy.asarray,
        }
        self.guarded = self._jax_definitions()

    # -- what an answer cell may not change ---------------------------------------------------------
    @staticmethod
    def _jax_definitions() -> dict:
        """Every function and class JAX's loaded modules bind, by (module, name): their identities."""
        import sys
        import types

        found = {}
        for module_name, module in list(sys.modules.items()):
            if module_name.partition(".")[0] not in GUARDED or not isinstance(module, types.ModuleType):
                continue
            for name, value in list(vars(module).items()):
                if isinstance(value, (types.FunctionType, type)):
                    found[module_name, name] = id(value)
        return found

    def _check_jax_unchanged(self) -> None:
        import sys

        for (module_name, name), ident in self.guarded.items():
            module = sys.modules.get(module_name)
            if module is None or id(vars(module).get(name)) != ident:
                raise WireError(f"the answer cells changed JAX itself ({module_name}.{name}): nothing is handed over")

    # -- the learner's cells ----------------------------------------------------------------------
    def namespace(self, source: str) -> dict:
        if source not in self.namespaces:
            import ast

            namespace = {"__name__": "__answer_cell__"}
            exec(compile(prelude(self.prelude), "<prelude>", "exec"), namespace)
            self.namespaces[source] = namespace
            # One statement at a time, as the NumPy-only runner does: one that cannot run here is left
            # out, and what needs it fails when it is used.
            for statement in ast.parse(source).body:
                try:
                    exec(compile(ast.Module([statement], []), "<answer cell>", "exec"), namespace)
                except Exception:
                    pass
        return self.namespaces[source]

    def value(self, data, cells: dict):
        """The judge's recipe as a value of this process (JAX arrays as JAX arrays)."""

        def resolve(form, body, nested):
            if form == "$learner":
                name = body["$learner"]
                if not isinstance(name, str) or not isinstance(cells.get(name), str):
                    raise WireError(f"no answer cell was sent for {name!r}")
                namespace = self.namespace(cells[name])
                if name not in namespace:
                    raise NameError(f"the answer cell, run on its own, does not define {name!r}")
                return namespace[name]
            if form == "$call":
                args = [nested(item) for item in body.get("args", [])]
                kwargs = {str(key): nested(item) for key, item in body.get("kwargs", [])}
                return nested(body["$call"])(*args, **kwargs)
            if form == "$item":
                return nested(body["$item"])[nested(body["key"])]
            if form == "$shipped":
                return shipped(body, nested)
            if form == "$arg":
                return _Argument(int(body["$arg"]))
            raise WireError(f"{form} is not accepted by the program builder")

        return decode(data, resolve=resolve, as_native=self.jax["asarray"])

    # -- the program ------------------------------------------------------------------------------
    def program(self, request) -> dict:
        """The learner's program, bound as the judge asked, at the judge's shapes, as data."""
        cells = request.get("cells") or {}
        self.prelude = tuple(request.get("prelude") or ())
        target = self.value(request["target"], cells)
        bind = request.get("bind")
        if bind is None:
            program = target
        else:
            template = [self.value(item, cells) for item in bind]

            def program(*inputs):
                return target(*[inputs[a.index] if isinstance(a, _Argument) else a for a in template])

        avals = [self.jax["struct"](tuple(shape), dtype) for shape, dtype in request["avals"]]
        closed = self.jax["make_jaxpr"](program)(*avals)
        self._check_jax_unchanged()  # after the trace too: the learner's function ran in it
        # As text: the judge keeps and forwards it without reading it (no Python object per number).
        return {"program": dumps(program_as_data(closed))}


class _Argument:
    """Where a program's inputs go in a bound call."""

    def __init__(self, index: int):
        self.index = index


def answer(request, builder: Builder) -> dict:
    if request.get("op") != "program":
        raise WireError(f"no operation {request.get('op')!r}")
    return builder.program(request)


def main(config: dict) -> None:
    """Each request is answered by a fork of this process, made before any learner code ran: a
    program is built from the cells it needs and nothing else (no cell of an earlier request, and
    no change a cell made, carries over), and the fork never holds this process's line out."""
    import sys

    reader, writer = confine(config["uid"], config["limits"])
    sys.path.insert(0, config["assignment"])
    builder = Builder()  # JAX imported, its functions taken: before the first request and any cell
    writer.write(dumps({"ready": True}) + "\n")
    writer.flush()
    for line in reader:
        writer.write(dumps(_in_a_fork(line, builder, (reader, writer))) + "\n")
        writer.flush()


def _in_a_fork(line, builder: Builder, private: tuple) -> dict:
    import os
    import select
    import signal

    inward, outward = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the fork's side (tests/integration/test_sandbox.py runs it)
        code = 0
        try:
            os.setpgid(0, 0)  # what it leaves running is ended with it
            os.close(inward)
            for stream in private:
                os.close(stream.fileno())
            with os.fdopen(outward, "w") as out:
                out.write(dumps(_respond(line, builder)))
        except BaseException:
            code = 1
        os._exit(code)
    os.close(outward)
    os.set_blocking(inward, False)
    chunks, size, ended = [], 0, False
    try:
        # Read until the fork ends (not until the pipe closes: a process it left may hold it open).
        while size <= MAX_ANSWER:
            if not ended and not select.select([inward], [], [], 0.05)[0]:
                ended = os.waitpid(pid, os.WNOHANG)[0] != 0
                continue
            try:
                chunk = os.read(inward, 1 << 20)
            except BlockingIOError:
                chunk = None
            if not chunk:
                if ended or chunk == b"":
                    break
                continue
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(inward)
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if not ended:
            os.waitpid(pid, 0)
    if size > MAX_ANSWER:
        return {"refused": "the program built was larger than the judge takes"}
    try:
        response = loads(b"".join(chunks))
    except WireError:
        return {"refused": "the process that built the program ended without an answer (a crash, or a limit)"}
    if not isinstance(response, dict) or not isinstance(response.get("program", ""), str):
        return {"refused": "the process that built the program gave no answer"}
    # Learner code ran in the fork: only the three shapes of an answer pass, the judge checks the rest.
    return {key: response[key] for key in ("program", "raised", "refused") if key in response}


def _respond(line, builder: Builder) -> dict:
    try:
        response = answer(loads(line), builder)
    except WireError as error:
        response = {"refused": str(error)[:4000]}
    except BaseException as error:  # the learner's code raised: that is the answer
        response = {"raised": {"mro": [c.__name__ for c in type(error).__mro__][:32], "message": str(error)[:4000]}}
    try:
        dumps(response)
    except Exception as error:
        response = {"refused": f"the answer could not be sent: {type(error).__name__}"}
    return response
