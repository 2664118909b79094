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
is, never stand in for the evidence of another; and the judge compares it with the kernel's own
function (judge/core.py), so a program that is not the notebook's earns nothing.

An answer cell runs here as the notebook's kernel runs it (`_as_a_kernel`): as `__main__`, in
the kernel's working directory with the shipped files, its command line, environment and
modules; learner code that looks for a difference finds none of these. Each fork leaves the
builder's loop before any learner code runs (`_serve` returns into it): no frame of a cell's
holds the judge's line, the request's line or nonce, or the builder, and its only descriptor
besides /dev/null is its own answer's.

JAX's own functions this process traces with are taken before any answer cell runs; a cell that
rebinds any function or class of JAX's modules is refused (and the static scan flags it for review).

Requests: {"op": "program", "cells": {name: [source, ...]}, "target": <value>, "bind": [...] | null,
"avals": [[shape, dtype], ...]}, where a value may hold {"$learner": name} (what the answer cell
defining name binds it to), {"$call": <value>, "args": [...], "kwargs": [[name, value], ...]},
{"$item": <value>, "key": <value>}, {"$shipped": ...} and {"$arg": i} (where bind puts the
program's inputs). Answer: {"program": data as JSON text}, from a fork of this process made before any answer
cell ran (`main`); {"op": "fresh"} as a new notebook begins. Sent as text after wire.py's,
confine.py's and program_data.py's; `main()` answers one request per line, each with its nonce.
"""

from __future__ import annotations

if __package__:  # imported as part of the grader (its tests); sent as text, the three files come first
    from autograder.sandboxed.confine import child_ended, confine, end_the_others, grader_gone, reply, requests
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
#: What a kernel has imported before a notebook's first cell (its host's imports: ipykernel's
#: stack, NumPy, JAX): imported here too, so the modules an answer cell finds loaded are a kernel's.
KERNELS_STACK = (
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "ipykernel.zmqshell",
    "IPython.core.oinspect",
    "IPython.core.completerlib",
    "IPython.extensions.storemagic",
    "tornado.platform.asyncio",
)
#: What ipykernel's shell adds to a kernel's environment as it starts (zmqshell.init_environment).
SHELL_ENV = {
    "TERM": "xterm-color",
    "CLICOLOR": "1",
    "FORCE_COLOR": "1",
    "CLICOLOR_FORCE": "1",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
}


class Builder:
    """JAX's functions, taken before any answer cell ran, and what an answer cell may not change.
    A fork is handed its snapshot (immutable), never the builder."""

    def __init__(self):
        import importlib

        import jax
        import jax.numpy

        for name in AHEAD:
            try:
                importlib.import_module(name)
            except ImportError:  # another JAX: what it imports later is simply not guarded
                pass
        self.make_jaxpr, self.struct, self.asarray = jax.make_jaxpr, jax.ShapeDtypeStruct, jax.numpy.asarray
        self.guarded = tuple(sorted(_jax_definitions().items()))

    def snapshot(self) -> tuple:
        """What a fork needs of the builder: JAX's functions and the identities it guards."""
        return (self.make_jaxpr, self.struct, self.asarray, self.guarded)


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


def _check_jax_unchanged(guarded: tuple) -> None:
    import sys

    for (module_name, name), ident in guarded:
        module = sys.modules.get(module_name)
        if module is None or id(vars(module).get(name)) != ident:
            raise WireError(f"the answer cells changed JAX itself ({module_name}.{name}): nothing is handed over")


# -- the learner's cells, in a fork: as the notebook's kernel runs them ---------------------------
def _main_module(sources: tuple, prelude_modules):
    """The namespace of a name's answer cells: a module of its own called __main__ (put in
    sys.modules while the cells run, as the kernel's cells find theirs), the prelude run in it,
    then each cell in order, one statement at a time (one that cannot run here is left out, and
    what needs it fails when it is used)."""
    import ast
    import builtins
    import sys
    import types

    module = types.ModuleType("__main__", "Automatically created module for IPython interactive environment")
    namespace = vars(module)
    namespace["__builtins__"] = builtins
    sys.modules["__main__"] = module
    exec(compile(prelude(prelude_modules), "<prelude>", "exec"), namespace)
    for source in sources:
        try:
            statements = ast.parse(source).body
        except (SyntaxError, ValueError):
            continue  # a cell that does not parse defines nothing, as in the kernel
        for statement in statements:
            try:
                exec(compile(ast.Module([statement], []), "<answer cell>", "exec"), namespace)
            except Exception:
                pass
    return namespace


def _recipe_value(data, cells: dict, namespaces: dict, prelude_modules, asarray):
    """The judge's recipe as a value of this process (JAX arrays as JAX arrays)."""

    def resolve(form, body, nested):
        if form == "$learner":
            name = body["$learner"]
            sources = cells.get(name) if isinstance(name, str) else None
            sources = (sources,) if isinstance(sources, str) else sources
            if not isinstance(sources, (list, tuple)) or not all(isinstance(s, str) for s in sources):
                raise WireError(f"no answer cell was sent for {name!r}")
            sources = tuple(sources)
            if sources not in namespaces:
                namespaces[sources] = _main_module(sources, prelude_modules)
            namespace = namespaces[sources]
            if name not in namespace:
                raise NameError(f"the answer cells that define {name!r}, run here, do not define it")
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

    return decode(data, resolve=resolve, as_native=asarray)


def build(request: dict, snapshot: tuple) -> dict:
    """The learner's program, bound as the judge asked, at the judge's shapes, as data.
    snapshot: Builder.snapshot(), taken before any answer cell ran."""
    if request.get("op") != "program":
        raise WireError(f"no operation {request.get('op')!r}")
    import sys

    main = sys.modules.get("__main__")
    try:
        return _built(request, snapshot)
    finally:  # (in a fork nothing comes after; in the grader's tests the process goes on)
        if main is not None:
            sys.modules["__main__"] = main


def _built(request: dict, snapshot: tuple) -> dict:
    cells = request.get("cells") or {}
    prelude_modules = tuple(request.get("prelude") or ())
    namespaces: dict = {}
    make_jaxpr, struct, asarray, guarded = snapshot
    target = _recipe_value(request["target"], cells, namespaces, prelude_modules, asarray)
    bind = request.get("bind")
    if bind is None:
        program = target
    else:
        template = [_recipe_value(item, cells, namespaces, prelude_modules, asarray) for item in bind]

        def program(*inputs):
            return target(*[inputs[a.index] if isinstance(a, _Argument) else a for a in template])

    avals = [struct(tuple(shape), dtype) for shape, dtype in request["avals"]]
    closed = make_jaxpr(program)(*avals)
    _check_jax_unchanged(guarded)  # after the trace too: the learner's function ran in it
    # As text: the judge keeps and forwards it without reading it (no Python object per number).
    return {"program": dumps(program_as_data(closed))}


class _Argument:
    """Where a program's inputs go in a bound call."""

    def __init__(self, index: int):
        self.index = index


# -- the builder's own process: the judge's line, one fork per request -----------------------------
#: Where a fork finds the one descriptor it answers on (its own pipe, moved there as it starts).
ANSWER_FD = 3
#: What the builder's loop keeps: the fork it waits for; in a fork, the builder's line (closed by
#: then), kept so that nothing closes its descriptors' numbers again.
_fork_state: dict = {}


def main(config: dict) -> None:
    """Each request is answered by a fork of this process, made before any learner code ran: a
    program is built from the cells it needs and nothing else (no cell of an earlier request, and
    no change a cell made, carries over). The fork leaves the builder's loop before any learner
    code runs: no frame it runs a cell from holds the judge's line, the request's line and nonce,
    or the builder; its only descriptor besides /dev/null is its own answer's."""
    _answer_from_the_fork(*_serve(config))


def _serve(config: dict) -> tuple:
    """The builder's loop (never returns in the builder); in a fork, (the request, Builder.snapshot())."""
    reader, writer = confine(config)
    _as_a_kernel(config)
    builder = Builder()  # JAX imported, its functions taken: before the first request and any cell
    reply(writer, config["start"], {"ready": True})
    for nonce, request in requests(reader):
        if request.get("op") == "fresh":  # a new notebook: nothing an earlier one's cells left is kept
            end_the_others()
            _as_a_kernel(config)
            reply(writer, nonce, {"fresh": True})
            continue
        if _fork():
            _fork_state["line"] = (reader, writer)
            # In the fork, never here: the prelude makes JAX arrays, and a fork of a process whose
            # JAX backend is up cannot compile (an answer cell that computes would hang it).
            _shipped_as_shipped(config)
            _import_prelude(request.get("prelude") or ())
            return request, builder.snapshot()
        reply(writer, nonce, _answer_of_the_fork())
    raise SystemExit(0)


def _as_a_kernel(config: dict) -> None:
    """This process as a notebook's kernel is when its first cell runs: the shipped files in
    `scratch`/submission, its working directory (imported from there, as the kernel imports
    them), the kernel's folders and connection file's name, its command line, its environment,
    the modules its host imported."""
    import importlib
    import json
    import os
    import secrets
    import shutil
    import sys

    scratch = config["scratch"]
    for name in ("home", "ipython", "matplotlib", "cache"):
        shutil.rmtree(os.path.join(scratch, name), ignore_errors=True)
    for name in ("home", "ipython", "matplotlib", "cache"):
        os.makedirs(os.path.join(scratch, name))
    connection = os.path.join(scratch, ".kernel.json")
    with open(connection, "w") as handle:  # the shape of a kernel's, and nothing it could use
        json.dump({"transport": "ipc", "ip": "/run/kernel/kernel", "key": secrets.token_hex(16)}, handle)
    _shipped_as_shipped(config)
    sys.argv = ["ipykernel_launcher", "-f", connection, *config.get("kernel_args", [])]
    for name in KERNELS_STACK:
        try:
            importlib.import_module(name)
        except ImportError:  # an environment without ipykernel: its kernels lack it too
            pass
    _KERNEL_ENV.update({**config["env"], **SHELL_ENV})


def _shipped_as_shipped(config: dict) -> None:
    """The fork's working directory holds the shipped files as shipped, and nothing else: whatever an
    earlier fork's cells wrote there (over a shipped module, a package that shadows one) is gone
    before this fork imports the prelude or runs a cell."""
    import os
    import shutil

    workdir = os.path.join(config["scratch"], "submission")
    shutil.rmtree(workdir, ignore_errors=True)
    shutil.copytree(config["assignment"], workdir, symlinks=False)
    os.chdir(workdir)


def _import_prelude(modules) -> None:
    """The prelude's modules (the shipped ones a notebook imports first), imported by the fork from
    its working directory before any answer cell runs, as the kernel has them by then."""
    import importlib

    for name in modules:
        if isinstance(name, str) and name.isidentifier():
            try:
                importlib.import_module(name)
            except Exception:  # not importable here: the prelude leaves it out, as before
                pass


#: The environment an answer cell finds (a kernel's), set in each fork (JAX's import adds to this
#: process's own).
_KERNEL_ENV: dict = {}


def _fork() -> bool:
    """Fork: in the builder, note the fork to wait for (False); in the fork (True), every
    descriptor closed but its own answer's, moved to ANSWER_FD."""
    import os

    inward, outward = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the fork's side (tests/integration/test_sandbox.py runs it)
        os.setpgid(0, 0)  # what it leaves running is ended with it
        os.dup2(outward, ANSWER_FD)
        _close_all_but((0, 1, 2, ANSWER_FD))
        return True
    os.close(outward)
    _fork_state.update(pid=pid, inward=inward)
    return False


def _answer_from_the_fork(request: dict, snapshot: tuple) -> None:
    """The fork's whole life: build, answer on its descriptor, end."""
    import os

    os.environ.clear()
    os.environ.update(_KERNEL_ENV)
    code = 0
    try:
        text = dumps(_respond(request, snapshot)).encode()
        view = memoryview(text)
        while view:
            view = view[os.write(ANSWER_FD, view) :]
    except BaseException:
        code = 1
    os._exit(code)


def _answer_of_the_fork() -> dict:
    """The fork's answer (the builder's side): read until the fork ends, bounded."""
    import os
    import select
    import signal

    pid, inward = _fork_state.pop("pid"), _fork_state.pop("inward")
    os.set_blocking(inward, False)
    chunks, size, ended = [], 0, False
    try:
        # Read until the fork ends (not until the pipe closes: a process it left may hold it open).
        while size <= MAX_ANSWER:
            if not ended and not select.select([inward], [], [], 0.05)[0]:
                ended = child_ended(pid)
                if not ended and grader_gone():  # nobody will take the answer: the fork, then this process, end
                    os.killpg(pid, signal.SIGKILL)
                    os._exit(0)
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
            child_ended(pid)
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


def _close_all_but(kept) -> None:
    """Close every descriptor of this process but those kept."""
    import os

    start = 0
    for fd in sorted(set(kept)):
        if start < fd:  # (closerange of an empty range closes everything from there on)
            os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, 1 << 16)


def _respond(request: dict, snapshot: tuple) -> dict:
    try:
        response = build(request, snapshot)
    except WireError as error:
        response = {"refused": str(error)[:4000]}
    except BaseException as error:  # the learner's code raised: that is the answer
        response = {"raised": {"mro": [c.__name__ for c in type(error).__mro__][:32], "message": str(error)[:4000]}}
    try:
        dumps(response)
    except Exception as error:
        response = {"refused": f"the answer could not be sent: {type(error).__name__}"}
    return response
