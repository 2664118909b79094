"""The kernel's side of the judge: what a learner's kernel does when the grader asks it something.

While grading, no check runs in the learner's kernel. The judge (autograder/judge/core.py) runs the
checks in the grader and, whenever an item needs the learner's work, sends the kernel one
request, as an execute request of its own (not stored in the kernel's history): this file's
text after autograder/sandboxed/wire.py's, and the request. Nothing of a hidden test travels: a request
names a learner's function and carries data (arrays drawn fresh for the run). The answer goes
back as one display output of type RESPONSE_MIME, and is only ever data (wire.py). A learner's
program is never asked of the kernel: an adapter's helpers rebuild it from the answer cells (the
JAX adapter's program builder, autograder/adapters/jax_programs/).

Requests (JSON):

    {"op": "describe", "names": [...]}   each name of the learner's: a value, a handle, or missing
    {"op": "call", "target": <value>, "args": [...], "kwargs": [[name, value], ...]}
    ...                                  and what the assignment's adapter adds (OPERATIONS)

A timed executable ({"$timed": ...}) asks the judge, through the kernel's stdin channel, at each
call and at each wait for a result: the judge answers when it chooses, and notes when it was
asked, so a learner's timing is checked against delays it never learns.

Nothing here is trusted: learner code shares this process and may change any of it. It can
only ever change what data goes back, and the judge checks that data.
"""

from __future__ import annotations

try:  # imported as part of the grader (its tests); sent to a kernel, wire.py's text comes first
    from .wire import WireError, decode, dumps, encode, loads, shipped
except ImportError:  # pragma: no cover - the kernel's copy
    pass

RESPONSE_MIME = "application/vnd.autograder.judge+json"
#: Where this kernel keeps the objects the judge holds handles on (across requests).
HANDLES = "_autograder_handles"


def _handles() -> dict:
    import sys

    table = sys.__dict__.get(HANDLES)
    if not isinstance(table, dict):
        table = {}
        setattr(sys, HANDLES, table)
    return table


def _keep(value) -> int:
    table = _handles()
    ident = len(table) + 1
    table[ident] = value
    return ident


class _Timed:
    """The kernel's half of a timed executable: each call and each first wait asks the judge. Its
    results are the checks module's own PendingResult (the judge's protocol), told to ask too."""

    def __init__(self, ident: int, executable, pending):
        self._ident, self._executable, self._calls, self._pending = ident, executable, 0, pending

    def _ask(self, event: str, call: int) -> None:
        import builtins

        builtins.input(dumps({"timed": self._ident, "event": event, "call": call}))

    def __call__(self, *args, **kwargs):
        self._calls += 1
        call = self._calls
        self._ask("call", call)
        result = self._executable(*args, **kwargs) if self._executable is not None else None
        return self._pending(self, call, result, waited=lambda: self._ask("wait", call))


#: What makes an array the judge sent as the assignment's own array type (JAX's, say) one again,
#: as "module.function" (its `asarray`): set by the grader when it installs the agent, from the
#: assignment's adapter (`Adapter.native_arrays`); None: arrays stay NumPy's.
NATIVE_ARRAYS = None


def _as_native(array):
    import importlib

    module, _, function = str(NATIVE_ARRAYS).rpartition(".")
    return getattr(importlib.import_module(module), function)(array)


def _value(data):
    """A value of the judge's, as the learner's code would have been given it (an array of the
    assignment's own type as one)."""
    return decode(data, resolve=_resolve, as_native=_as_native if NATIVE_ARRAYS else None)


def _resolve(form, data, nested):
    if form == "$handle":
        table = _handles()
        if data["$handle"] not in table:
            raise WireError(f"no object with handle {data['$handle']!r} in this kernel")
        return table[data["$handle"]]
    if form == "$shipped":
        return shipped(data, nested)
    if form == "$timed":
        executable = data.get("executable")
        checks = str(data.get("checks", ""))
        if not checks.isidentifier():
            raise WireError("a timed executable names no checks module")
        return _Timed(int(data["$timed"]), None if executable is None else nested(executable), _pending_result(checks))
    raise WireError(f"{form} is not accepted by the kernel")


#: The PendingResult classes this agent loaded, by checks module (in the agent's own namespace).
_PENDING_CLASSES: dict = {}


def _pending_result(checks: str):
    """The checks module's PendingResult (the judge's protocol), from a copy of the module of the
    agent's own, loaded once from the shipped file: what the learner's code did to the module it
    imported (a class put in its place) does not reach the judge's timed results."""
    import importlib.util
    import os

    kept = _PENDING_CLASSES  # the agent's own: nothing a learner's cell set before the agent came
    if checks not in kept:
        # The grader's copy of the shipped files (read-only in the sandbox), else where an import finds it.
        path = os.path.join("/assignment", checks + ".py")
        if not os.path.isfile(path):
            import importlib.machinery

            # Searched on sys.path, not taken from sys.modules (whose module's file may be gone).
            found = importlib.machinery.PathFinder.find_spec(checks)
            if found is None or not found.origin or not os.path.isfile(found.origin):
                raise WireError(f"no {checks}.py beside the notebook")
            path = found.origin
        spec = importlib.util.spec_from_file_location(f"_agent_{checks}", path)
        if spec is None or spec.loader is None:
            raise WireError(f"{checks}.py cannot be loaded")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        kept[checks] = module.PendingResult
    return kept[checks]


def _user_namespace() -> dict:
    from IPython import get_ipython

    shell = get_ipython()
    return shell.user_ns if shell is not None else {}


def _describe(names) -> dict:
    """Each name as the learner's namespace has it now: data, a handle, or {"$missing": true}."""
    namespace = _user_namespace()
    found: dict[str, object] = {}
    for name in names:
        if not isinstance(name, str) or name not in namespace:
            found[str(name)] = {"$missing": True}
            continue
        try:
            found[name] = encode(namespace[name], keep=_keep)
        except WireError:  # too big or too deep to travel: left where it is
            value = namespace[name]
            found[name] = {"$handle": _keep(value), "type": type(value).__name__, "callable": callable(value)}
    return {"values": found}


def _call(request) -> dict:
    target = _value(request["target"])
    args = [_value(item) for item in request.get("args", [])]
    kwargs = {str(name): _value(item) for name, item in request.get("kwargs", [])}
    return {"result": encode(target(*args, **kwargs), keep=_keep)}


#: The requests this agent answers, by "op". An assignment's adapter may add its own: its
#: `Adapter.kernel_operations` texts run after this one's and add to it (the JAX adapter's
#: residual count and memory plan, which compare a kernel's function with the judge's program).
OPERATIONS = {
    "describe": lambda request: _describe(request["names"]),
    "call": _call,
}


def respond(line: str) -> dict:
    """The response to one request line (raised exceptions of the learner's code included)."""
    request = loads(line)
    try:
        return OPERATIONS[request["op"]](request)
    except WireError as error:
        return {"refused": str(error)}
    except BaseException as error:  # the learner's code raised (or exited): that is the answer
        return {
            "raised": {
                "mro": [cls.__name__ for cls in type(error).__mro__][:32],
                "message": str(error)[:4000],
            }
        }


def answer(line: str) -> None:
    """Answer one request as a display output of this execution (the judge reads nothing else)."""
    from IPython.display import publish_display_data

    try:
        text = dumps(respond(line))
    except Exception as error:  # a result that could not be written down
        text = dumps({"refused": f"the answer could not be sent: {type(error).__name__}: {error}"[:4000]})
    publish_display_data({RESPONSE_MIME: text, "text/plain": "(an answer to the grader)"})
