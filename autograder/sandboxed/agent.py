"""The kernel's side of the judge: what a learner's kernel does when the grader asks it something.

While grading, no check runs in the learner's kernel. The judge (autograder/judge/core.py) runs the
checks in the grader and, whenever an item needs the learner's work, sends the kernel one
request, as an execute request of its own (not stored in the kernel's history): this file's
text after autograder/sandboxed/wire.py's, and the request. Nothing of a hidden test travels: a request
names a learner's function and carries data (arrays drawn fresh for the run). The answer goes
back as one display output of type RESPONSE_MIME, and is only ever data (wire.py). A learner's
JAX program is never asked of the kernel: the judge's program builder rebuilds it from the
answer cells (autograder/sandboxed/program_builder.py).

Requests (JSON):

    {"op": "describe", "names": [...]}   each name of the learner's: a value, a handle, or missing
    {"op": "call", "target": <value>, "args": [...], "kwargs": [[name, value], ...]}

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

RESPONSE_MIME = "application/vnd.performance05.judge+json"
#: Where this kernel keeps the objects the judge holds handles on (across requests).
HANDLES = "_performance05_handles"


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


class _Pending:
    """A result a timed executable returned: waiting for it asks the judge first. Every way of
    waiting works: block_until_ready, jax.block_until_ready, np.asarray, jax.device_get, float."""

    def __init__(self, timed, call: int, result):
        self._timed, self._call, self._result, self._waited = timed, call, result, False

    def _wait(self):
        if not self._waited:
            if self._result is not None and hasattr(self._result, "block_until_ready"):
                self._result.block_until_ready()
            self._timed._ask("wait", self._call)
            self._waited = True
        return self

    def block_until_ready(self):
        return self._wait()

    def copy_to_host_async(self):
        return None

    def __array__(self, dtype=None, copy=None):
        import numpy

        self._wait()
        value = numpy.zeros(3) if self._result is None else numpy.asarray(self._result)
        return value.astype(dtype) if dtype is not None else value

    def __float__(self):
        self._wait()
        return 0.0 if self._result is None else float(self._result)

    def item(self):
        return float(self)

    def tolist(self):
        import numpy

        return numpy.asarray(self).tolist()

    @property
    def shape(self):
        import numpy

        return numpy.shape(self._result) if self._result is not None else (3,)


class _Timed:
    """The kernel's half of a timed executable: each call and each first wait asks the judge."""

    def __init__(self, ident: int, executable):
        self._ident, self._executable, self._calls = ident, executable, 0

    def _ask(self, event: str, call: int) -> None:
        import builtins

        builtins.input(dumps({"timed": self._ident, "event": event, "call": call}))

    def __call__(self, *args, **kwargs):
        self._calls += 1
        call = self._calls
        self._ask("call", call)
        result = self._executable(*args, **kwargs) if self._executable is not None else None
        return _Pending(self, call, result)


def _as_jax(array):
    import jax.numpy

    return jax.numpy.asarray(array)


def _value(data):
    """A value of the judge's, as the learner's code would have been given it (JAX arrays as JAX arrays)."""
    return decode(data, resolve=_resolve, as_jax=_as_jax)


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
        return _Timed(int(data["$timed"]), None if executable is None else nested(executable))
    raise WireError(f"{form} is not accepted by the kernel")


def _user_namespace() -> dict:
    from IPython import get_ipython

    shell = get_ipython()
    return shell.user_ns if shell is not None else {}


def _describe(names) -> dict:
    """Each name as the learner's namespace has it now: data, a handle, or {"$missing": true}."""
    namespace, found = _user_namespace(), {}
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


def respond(line: str) -> dict:
    """The response to one request line (raised exceptions of the learner's code included)."""
    request = loads(line)
    operations = {"describe": lambda r: _describe(r["names"]), "call": _call}
    try:
        return operations[request["op"]](request)
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
