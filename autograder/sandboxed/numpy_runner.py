"""The judge's NumPy-only runner: a learner's answer cell, run alone where JAX cannot be imported.

The NumPy tasks of the lesson (one layer backward, the reverse oracle, the central difference)
must not lean on JAX, nor on any other library that differentiates for them (SciPy, SymPy).
This process offers NumPy and the standard library, and nothing else, by an allow-list:

- in its sandbox (autograder/kernel/helpers.py) every folder of installed packages (the virtual
  environment's, the base Python's, the system's) is replaced by one that holds only NumPy:
  no other package's files exist there, so no route (a path added, an import hook removed, a
  `.so` loaded by its file name, another Python started) can load one;
- in this process, an import hook refuses every top-level module outside `allowed_modules()`
  (without a sandbox, `--unsafe-no-sandbox`, that hook is the only guard).

The cell runs alone, in a namespace that holds only `np` (and `numpy`); the judge then calls its
function on inputs it sends. What the cell prints goes nowhere; the answers are data only
(wire.py).

Learner code never runs in the process that holds the judge's line. Each cell runs in a *worker*
of its own, forked from this process when the cell is loaded (NumPy imported, the import hook in
place, the judge's line closed): no cell reaches another's, and none reaches the line. This
process passes each request on to the cell's worker and its answer back, one answer per request,
tied to it by a sequence number: a line the worker was not asked for (one waiting before a
request, a second one after an answer, one with another number) is not passed on, and the
judge is told (`{"unrequested": ...}`); a worker that ends answers `{"ended": ...}`.

Requests: {"op": "load", "cell": id, "source": [text, ...]} (the answer cells a name needs,
in order), then {"op": "call", "cell": id, "name":
..., "args": [...]}; {"op": "fresh"} as a new notebook begins. Sent as text after wire.py's and confine.py's; `main()` answers one per line,
each with its nonce (confine.py).
"""

from __future__ import annotations

try:  # imported as part of the grader (its tests); sent as text, the two files come first
    from .confine import child_ended, confine, end_the_others, grader_gone, reply, requests
    from .wire import WireError, decode, dumps, encode, loads
except ImportError:  # pragma: no cover - the sandbox's copy
    pass

#: Modules whose functions a check may hand to the learner's function (NumPy-only ones): the
#: course's checks module, named by the judge in its requests (judge/protocol.py).
SHIPPED: set = set()


def _resolve(form, data, nested):
    import importlib

    if form != "$shipped":
        raise WireError(f"{form} is not accepted here")
    module, name = data["$shipped"]
    if module not in SHIPPED:
        raise WireError(f"{module!r} is not a module this process builds values from")
    value = getattr(importlib.import_module(module), name)
    if "args" not in data:
        return value
    return value(*[nested(a) for a in data["args"]], **{str(k): nested(v) for k, v in data.get("kwargs", [])})


#: Besides the standard library, the only top-level modules this process imports.
ALLOWED_PACKAGES = ("numpy",)


def allowed_modules() -> frozenset:
    """The top-level modules an answer cell may import here: the standard library, NumPy, and the
    shipped modules the judge builds values from."""
    import sys

    return frozenset(sys.stdlib_module_names) | set(ALLOWED_PACKAGES) | set(SHIPPED) | {"__main__"}


def only_allowed() -> None:
    """An import hook, first in line, that refuses any module outside allowed_modules()."""
    import sys

    allowed = allowed_modules()

    class OnlyAllowed:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] not in allowed and name.partition(".")[0] not in SHIPPED:
                raise ModuleNotFoundError(
                    f"No module named {name!r} (this process offers NumPy and the standard library only)", name=name
                )
            return None

    sys.meta_path.insert(0, OnlyAllowed())


#: Names an answer cell commonly gives JAX (bound in another cell of the notebook, which this
#: process never runs), besides those its own failed imports would have bound.
CONVENTIONAL_JAX_NAMES = frozenset({"jax", "jnp", "lax", "jsp", "jrandom"})
#: Per loaded cell: the names that stand for JAX there.
JAX_NAMES: dict[str, set] = {}
#: What a learner reads when a NumPy-only answer reaches for JAX.
NOT_AVAILABLE = "JAX is not available here; use NumPy"


def _is_jax(module) -> bool:
    return isinstance(module, str) and module.partition(".")[0] in ("jax", "jaxlib")


def _bound_by(statement) -> set:
    """The names an import statement binds (`import jax.numpy as jnp`: jnp; `import jax`: jax)."""
    import ast

    if not isinstance(statement, ast.Import | ast.ImportFrom):
        return set()
    return {alias.asname or alias.name.partition(".")[0] for alias in statement.names}


def without_jax(error: BaseException, jax_names) -> BaseException:
    """error, said as what the learner must change when it comes from reaching for JAX (a name
    that stands for JAX, an import of it); otherwise error itself."""
    if isinstance(error, NameError) and getattr(error, "name", None) in jax_names:
        return NameError(f"{NOT_AVAILABLE} ({error}: this answer cell runs alone, where JAX cannot be imported)")
    if isinstance(error, ImportError) and _is_jax(error.name):
        return ModuleNotFoundError(
            f"{NOT_AVAILABLE} (this answer cell runs alone, where {error.name!r} cannot be imported)"
        )
    return error


def answer(request, cells: dict) -> dict:
    import numpy

    if request["op"] == "load":
        import ast

        SHIPPED.update(name for name in request.get("shipped", []) if isinstance(name, str) and name.isidentifier())

        namespace = {"__name__": "__answer_cell__", "np": numpy, "numpy": numpy}
        cells[str(request["cell"])] = namespace
        JAX_NAMES[str(request["cell"])] = set(CONVENTIONAL_JAX_NAMES)
        # The answer cells the name needs, in order (the judge's cells_for); one statement at a
        # time: one that cannot run here (it needs JAX, say) is left out, so the function is
        # judged on its own; a function that needs JAX fails when it is called.
        sources = request["source"] if isinstance(request["source"], list) else [request["source"]]
        for source in sources:
            try:
                statements = ast.parse(str(source)).body
            except (SyntaxError, ValueError):
                continue  # a cell that does not parse defines nothing, as in the kernel
            for statement in statements:
                try:
                    exec(compile(ast.Module([statement], []), "<answer cell>", "exec"), namespace)
                except ImportError as error:
                    if _is_jax(error.name):  # the names it would have bound are JAX's
                        JAX_NAMES[str(request["cell"])] |= _bound_by(statement)
                except Exception:
                    pass
        return {"loaded": True}
    if request["op"] == "call":
        loaded = cells.get(str(request["cell"]))
        if loaded is None:
            raise WireError("that cell was not loaded")
        function = loaded.get(str(request["name"]))
        if function is None:
            raise NameError(f"the answer cell, run where JAX cannot be imported, does not define {request['name']!r}")
        args = [decode(item, resolve=_resolve) for item in request["args"]]
        try:
            result = function(*args)
        except (NameError, ImportError) as error:
            raise without_jax(error, JAX_NAMES.get(str(request["cell"]), CONVENTIONAL_JAX_NAMES)) from None
        return {"result": encode(result)}
    raise WireError(f"no operation {request['op']!r}")


#: The most workers kept at once (a load past it ends the oldest; the judge loads a few cells per notebook).
MAX_WORKERS = 8
#: The longest line taken from a worker (its answer).
MAX_WORKER_LINE = 256 << 20
#: Seconds between looks at the grader's line while a worker computes.
GRADER_CHECK = 0.5


class Worker:
    """One answer cell's process: a fork of this one, which holds only its own two pipes."""

    def __init__(self):
        import os
        import signal

        into, self._requests = os.pipe()
        self._answers, out = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - the worker's side (tests/integration/test_reach.py runs it)
            code = 0
            try:
                os.setpgid(0, 0)
                # Nothing but its own two pipes: not the judge's line, not another cell's worker's.
                _close_all_but((0, 1, 2, into, out))
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _serve_cell(into, out)
            except BaseException:
                code = 1
            os._exit(code)
        os.close(into)
        os.close(out)
        self._sent, self._buffer = 0, b""

    def ask(self, request: dict) -> dict:
        """The worker's one answer to request; {"unrequested": ...} when it said what it was not
        asked, {"ended": ...} when it ended."""
        import os
        import select

        if self._buffer or select.select([self._answers], [], [], 0)[0]:
            return {"unrequested": "the answer cell's process sent the grader a line it did not ask for"}
        self._sent += 1
        try:
            _write_all(self._requests, (dumps({"seq": self._sent, **request}) + "\n").encode())
        except OSError:
            return {"ended": "the answer cell's process ended (it crashed, exited, or ran into a limit)"}
        while b"\n" not in self._buffer:
            if not select.select([self._answers], [], [], GRADER_CHECK)[0]:
                if grader_gone():  # nobody will take the answer: this process, and its sandbox, end
                    self.end()
                    os._exit(0)
                continue
            chunk = os.read(self._answers, 1 << 20)
            if not chunk:
                return {"ended": "the answer cell's process ended (it crashed, exited, or ran into a limit)"}
            self._buffer += chunk
            if len(self._buffer) > MAX_WORKER_LINE:
                return {"ended": "the answer cell's process answered more than the judge takes"}
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            response = loads(line)
        except WireError:
            response = None
        if not isinstance(response, dict) or response.pop("seq", None) != self._sent or self._buffer:
            return {"unrequested": "the answer cell's process sent the grader a line it did not ask for"}
        # Learner code answered: only the shapes of an answer pass, the judge checks the rest.
        return {key: response[key] for key in ("loaded", "result", "raised", "refused") if key in response}

    def end(self) -> None:
        import os
        import signal

        for fd in (self._requests, self._answers):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        child_ended(self.pid)


def _close_all_but(kept) -> None:
    """Close every descriptor of this process but those kept."""
    import os

    start = 0
    for fd in sorted(set(kept)):
        if start < fd:  # (closerange of an empty range closes everything from there on)
            os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, 1 << 16)


def _write_all(fd: int, data: bytes) -> None:
    import os

    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _serve_cell(requests_fd: int, answers_fd: int) -> None:
    """The worker: one cell's requests, in order, each answered with its sequence number."""
    import os

    cells: dict = {}
    with os.fdopen(requests_fd, "r") as reader, os.fdopen(answers_fd, "w") as writer:
        for line in reader:
            request = loads(line)
            seq = request.pop("seq")
            try:
                response = answer(request, cells)
            except WireError as error:
                response = {"refused": str(error)[:4000]}
            except BaseException as error:  # the learner's code raised: that is the answer
                response = {
                    "raised": {"mro": [c.__name__ for c in type(error).__mro__][:32], "message": str(error)[:4000]}
                }
            try:
                text = dumps({"seq": seq, **response})
            except Exception as error:
                text = dumps({"seq": seq, "refused": f"the answer could not be sent: {type(error).__name__}"})
            writer.write(text + "\n")
            writer.flush()


def serve(request: dict, workers: dict) -> dict:
    """One request of the judge's, passed on to its cell's worker (a load starts the worker); at a
    new notebook ("fresh"), every worker and whatever they left ended."""
    if request.get("op") == "fresh":
        while workers:
            workers.popitem()[1].end()
        end_the_others()
        return {"fresh": True}
    cell = str(request.get("cell"))
    if request.get("op") == "load":
        if cell in workers:
            workers.pop(cell).end()
        while len(workers) >= MAX_WORKERS:
            workers.pop(next(iter(workers))).end()
        workers[cell] = Worker()
    worker = workers.get(cell)
    if worker is None:
        return {"refused": "that cell was not loaded"}
    response = worker.ask(request)
    if "ended" in response or "unrequested" in response:
        workers.pop(cell).end()
    return response


def main(config: dict) -> None:
    import sys

    reader, writer = confine(config)
    only_allowed()
    sys.path.insert(0, config["assignment"])
    import numpy  # noqa: F401

    workers: dict = {}
    reply(writer, config["start"], {"ready": True})
    for nonce, request in requests(reader):
        reply(writer, nonce, serve(request, workers))
