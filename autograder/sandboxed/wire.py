"""Values as data, between the grader and the processes it does not trust.

The judge (autograder/judge/core.py) reaches a learner's work only through this format: the
arguments it sends and every result that comes back are JSON made of the forms below, and
decoding builds nothing but plain values (None, booleans, numbers, text, lists, tuples, dicts
and NumPy arrays of a few dtypes) and the opaque handles the caller asks for. No pickle, no
code, no object of the sender's choosing: whatever a learner's process does to its side of
the conversation, the grader receives data and checks it.

    {"$list": [...]}  {"$tuple": [...]}  {"$dict": [[key, value], ...]}
    {"$array": {"dtype": "float32", "shape": [16], "data": "<base64>", "native": false}}
    {"$handle": 3, "type": "function", "callable": true}        an object left where it lives
    {"$shipped": ["<shipped module>", "<function>"], "args": [...], "kwargs": [...]}
                                                                  rebuilt from a shipped module
    {"$timed": 2, "executable": <value or null>}                 a timed executable (judge.py)
    {"$arg": 0}                                                   where a program's inputs go

This file needs only the standard library and NumPy, and imports nothing of the grader: its
text is sent, as it is, to the kernel (autograder/sandboxed/agent.py) and to the judge's helper
processes (autograder/kernel/helpers.py).
"""

from __future__ import annotations

import base64
import json
import math

import numpy as np

#: The dtypes an array may have on the wire (anything else is refused).
DTYPES = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    }
)
#: How deep values may nest, how many items one value may hold, how many bytes its arrays.
MAX_DEPTH = 24
MAX_ITEMS = 200_000
MAX_ARRAY_BYTES = 64 << 20
#: The longest text kept from one string (a learner's exception message, a dict key).
MAX_TEXT = 20_000
#: The most keys of one $dict that may share a hash. Keys that all hash alike make each insertion
#: compare with every earlier key (quadratic); text is hashed with a secret seed and never gets
#: near this, numbers at most a few times (equal modulo 2**61 - 1), so only chosen keys reach it.
MAX_SAME_HASH = 16


class WireError(ValueError):
    """A value that is not in the format, or past its limits."""


class _Budget:
    def __init__(self):
        self.items = 0
        self.bytes = 0

    def count(self, items: int = 1, size: int = 0) -> None:
        self.items += items
        self.bytes += size
        if self.items > MAX_ITEMS:
            raise WireError(f"more than {MAX_ITEMS} items in one value")
        if self.bytes > MAX_ARRAY_BYTES:
            raise WireError(f"more than {MAX_ARRAY_BYTES >> 20} MiB of arrays in one value")


def _is_array(value) -> bool:
    return hasattr(value, "__array__") and hasattr(value, "shape") and hasattr(value, "dtype")


def encode(value, *, keep=None, _depth: int = 0, _budget: _Budget | None = None):
    """value as wire data. keep(obj) -> handle id is called for what cannot travel as data
    (functions, other objects); without it such a value is a WireError."""
    budget = _budget or _Budget()
    budget.count()
    if _depth > MAX_DEPTH:
        raise WireError(f"a value nested more than {MAX_DEPTH} deep")
    if value is None or isinstance(value, bool | str):
        return value if not isinstance(value, str) else value[:MAX_TEXT]
    if isinstance(value, int):
        if abs(value) >= 1 << 63:
            raise WireError("an integer too large to travel")
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, np.generic) or _is_array(value):
        array = np.asarray(value)
        if array.dtype.name not in DTYPES:
            raise WireError(f"arrays of dtype {array.dtype.name} do not travel")
        budget.count(0, array.nbytes)
        data = base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")
        return {
            "$array": {
                "dtype": array.dtype.name,
                "shape": [int(n) for n in array.shape],
                "data": data,
                # an array of another library's (the assignment's own array type): made one again
                # where the receiver can (decode's as_native)
                "native": not isinstance(value, np.ndarray | np.generic),
                "scalar": isinstance(value, np.generic),
            }
        }
    nested = lambda item: encode(item, keep=keep, _depth=_depth + 1, _budget=budget)  # noqa: E731
    if isinstance(value, tuple):
        return {"$tuple": [nested(item) for item in value]}
    if isinstance(value, list):
        return {"$list": [nested(item) for item in value]}
    if isinstance(value, dict) or (hasattr(value, "items") and hasattr(value, "keys")):
        return {"$dict": [[nested(key), nested(item)] for key, item in list(value.items())]}
    if keep is not None:
        return {"$handle": int(keep(value)), "type": type(value).__name__[:200], "callable": callable(value)}
    raise WireError(f"a {type(value).__name__} does not travel as data")


def decode(data, *, resolve=None, as_native=None, _depth: int = 0, _budget: _Budget | None = None):
    """Wire data as a value. resolve(form, data, nested) builds the non-data forms ($handle,
    $shipped, $timed, $arg); without it they are a WireError. as_native(array) turns the arrays
    sent as another library's (JAX's, say) into that library's again (the kernel's side);
    otherwise every array is NumPy's. Anything malformed is a WireError."""
    budget = _budget or _Budget()
    budget.count()
    if _depth > MAX_DEPTH:
        raise WireError(f"a value nested more than {MAX_DEPTH} deep")
    if data is None or isinstance(data, bool):
        return data
    if isinstance(data, int | float):
        return data
    if isinstance(data, str):
        return data[:MAX_TEXT]
    if not isinstance(data, dict) or len(data) < 1:
        raise WireError(f"not a value of the wire format: a bare {type(data).__name__}")
    form = next(iter(data))
    if not isinstance(form, str) or not form.startswith("$"):
        raise WireError("not a value of the wire format: an object without a $form")
    nested = lambda item: decode(item, resolve=resolve, as_native=as_native, _depth=_depth + 1, _budget=budget)  # noqa: E731
    body = data[form]
    if form in ("$list", "$tuple"):
        if not isinstance(body, list):
            raise WireError(f"{form} holds no list")
        items = [nested(item) for item in body]
        return items if form == "$list" else tuple(items)
    if form == "$dict":
        if not isinstance(body, list):
            raise WireError("$dict holds no list of pairs")
        result: dict = {}
        sharing: dict[int, int] = {}
        for pair in body:
            if not isinstance(pair, list) or len(pair) != 2:
                raise WireError("$dict holds something that is not a [key, value] pair")
            key = nested(pair[0])
            try:
                digest = hash(key)
            except TypeError:
                raise WireError("a $dict key that cannot be a key") from None
            sharing[digest] = sharing.get(digest, 0) + 1
            if sharing[digest] > MAX_SAME_HASH:
                raise WireError(f"a $dict with more than {MAX_SAME_HASH} keys of one hash")
            result[key] = nested(pair[1])
        return result
    if form == "$array":
        array = _array(body, budget)
        return as_native(array) if as_native is not None and body.get("native") is True else array
    if resolve is not None:
        return resolve(form, data, nested)
    raise WireError(f"{form} is not accepted here")


def _array(body, budget: _Budget):
    if not isinstance(body, dict):
        raise WireError("$array holds no description")
    dtype, shape, data = body.get("dtype"), body.get("shape"), body.get("data")
    if dtype not in DTYPES:
        raise WireError(f"arrays of dtype {dtype!r} are not accepted")
    if not isinstance(shape, list) or len(shape) > 32 or not all(type(n) is int and n >= 0 for n in shape):
        raise WireError("an array whose shape is not a list of sizes")
    if not isinstance(data, str):
        raise WireError("an array without its data")
    size = math.prod(shape) * np.dtype(dtype).itemsize
    if size > MAX_ARRAY_BYTES or len(data) > 4 * MAX_ARRAY_BYTES // 3 + 4:
        raise WireError(f"an array of more than {MAX_ARRAY_BYTES >> 20} MiB")
    budget.count(0, size)
    try:
        raw = base64.b64decode(data.encode("ascii"), validate=True)
    except (ValueError, UnicodeError):
        raise WireError("an array whose data is not base64") from None
    if len(raw) != size:
        raise WireError(f"an array of shape {shape} and dtype {dtype} with {len(raw)} bytes of data")
    array = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    return array[()] if body.get("scalar") and array.ndim == 0 else array


def dumps(message) -> str:
    """One message as one line of JSON (NaN and infinities kept, as Python's json writes them)."""
    return json.dumps(message, allow_nan=True, separators=(",", ":"))


def loads(line: str | bytes, limit: int = 4 * MAX_ARRAY_BYTES):
    """One line of JSON; WireError when it is too long, not JSON, or nested too deep."""
    if len(line) > limit:
        raise WireError(f"a message of more than {limit >> 20} MiB")
    try:
        return json.loads(line)
    except (ValueError, RecursionError) as error:
        raise WireError(f"a message that is not JSON ({type(error).__name__})") from None


def shipped(data, nested):
    """A shipped module's object named by {"$shipped": [module, name]}, called with its args and
    kwargs (each made by `nested`) when the data carries them: the kernel's agent and the program
    builder make the judge's recipes the same way."""
    import importlib

    module, attribute = data["$shipped"]
    if not (isinstance(module, str) and isinstance(attribute, str)):
        raise WireError("a shipped object named by something other than text")
    value = getattr(importlib.import_module(module), attribute)
    if "args" not in data and "kwargs" not in data:
        return value
    args = [nested(item) for item in data.get("args", [])]
    kwargs = {str(name): nested(item) for name, item in data.get("kwargs", [])}
    return value(*args, **kwargs)
