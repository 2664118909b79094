"""A learner's JAX program as data: its jaxpr written out by the program builder, and made again
by the artifact runner from JAX's own primitives.

Why: the program builder runs the learner's answer cell, so whatever that process sends is the
learner's to choose, even a program that merely computes the values a check compares. Evidence of
*how* a program is built (which values its VJP saves, the compiler's memory plan of its gradient)
must therefore come from transforms the judge applies itself, in a process that never runs
learner code. So the builder sends the program untransformed, as a jaxpr written as data; the
artifact runner reads it back with an allow-list (JAX's own primitives, parameters of known
kinds, JAX's own checkpoint policies), and applies `jax.vjp` or `jax.grad` itself. A process that
sends another program than its answer cell's sends a program the judge then judges for what it
is: it cannot send the values of one program as the evidence of another.

What does not travel: a primitive that carries Python code (callbacks, a custom rule's
functions) and a checkpoint policy of the learner's own. A custom derivative's function travels
as its plain body (`closed_call`): the judge differentiates what it computes.

The format, all JSON: {"program": c, "closed": [closed program...], "arrays": [array...]}, c the
index of the program among the closed programs; a closed program {"jaxpr": J, "consts": [index of
an array...]} (each closed program and each constant written once, shared by index as JAX shared
them); J = {"const": [aval],
"in": [aval], "eqns": [{"p": name, "in": [atom], "out": [output], "params": {name: value}}],
"out": [atom]}; an output {"aval": aval} (the next variable) or {"drop": aval} (nobody reads it); an aval {"shape": [...], "dtype": name, "weak": bool}; an atom {"v": n} (the n-th
variable of its jaxpr: constants, inputs, then each equation's outputs) or {"lit": array, "aval":
aval}; a parameter value is JSON, or one of the $forms of
`_value`. Arrays travel as wire.py writes them.
"""

from __future__ import annotations

if __package__:  # imported as part of the grader (its tests); sent as text after wire.py, it needs no import
    from autograder.sandboxed.wire import WireError, decode, encode

#: JAX's modules whose primitives a program may hold (pure computations, loops, checkpoints, jit).
PRIMITIVE_MODULES = ("jax._src.lax", "jax._src.ad_checkpoint", "jax._src.pjit", "jax._src.ad_util")
#: Of core's primitives, only the plain call (what a custom derivative's body travels as).
CORE_PRIMITIVES = ("closed_call",)
#: Of those, what has no place in a program judged on one CPU: collectives and their tokens,
#: uninitialized buffers, the platform's identity, layouts and shardings, an evaluator of jaxprs.
DENIED = frozenset(
    [
        "ag_done",
        "ag_start",
        "after_all",
        "all_gather",
        "all_gather_invariant",
        "all_gather_reduced",
        "all_to_all",
        "axis_index",
        "composite",
        "create_token",
        "dce_sink",
        "empty",
        "empty2",
        "eval_jaxpr",
        "layout_constraint",
        "pbroadcast",
        "platform_index",
        "pmax",
        "pmin",
        "ppermute",
        "precv",
        "preduced",
        "psend",
        "psum",
        "psum_invariant",
        "ragged_all_to_all",
        "reduce_scatter",
        "reshard",
        "sharding_constraint",
        "tie",
        "unreduced_psum",
        "unreduced_reduce_scatter",
        "vary_unreduced_cast_p",
    ]
)
#: Primitives that travel as their plain body.
INLINED = {"custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr"}
#: JAX's checkpoint policies, by name: those that take names, and those that are one function.
NAMED_POLICIES = ("save_only_these_names", "save_any_names_but_these", "save_anything_except_these_names")
PLAIN_POLICIES = ("everything_saveable", "nothing_saveable", "dots_saveable", "dots_with_no_batch_dims_saveable")
#: Bounds on what the artifact runner reads back.
MAX_EQUATIONS = 200_000
MAX_NESTING = 64


# -- written by the program builder -----------------------------------------------------------------
def program_as_data(closed) -> dict:
    """A ClosedJaxpr as data. WireError names what cannot travel."""
    written = _Written()
    top = written.closed(closed)
    return {"program": top, "closed": written.closed_data, "arrays": written.arrays}


class _Written:
    """What one program's writing has written: each closed program and each constant once, by
    identity. JAX shares them (one jitted layer called four times closes over one weight array),
    and what the VJP keeps depends on it: four copies of the weights would be four residuals."""

    def __init__(self):
        self.closed_data: list = []
        self.arrays: list = []
        self._closed: dict = {}
        self._arrays: dict = {}
        self._alive: list = []  # what the ids above refer to, kept until the writing ends

    def closed(self, closed) -> int:
        if id(closed) not in self._closed:
            consts = [self.array(c) for c in closed.consts]
            data = {"jaxpr": _jaxpr_as_data(closed.jaxpr, self), "consts": consts}
            self._alive.append(closed)
            self._closed[id(closed)] = len(self.closed_data)
            self.closed_data.append(data)
        return self._closed[id(closed)]

    def array(self, value) -> int:
        if id(value) not in self._arrays:
            self._alive.append(value)
            self._arrays[id(value)] = len(self.arrays)
            self.arrays.append(_array_data(value))
        return self._arrays[id(value)]


def _array_data(value):
    import numpy as np

    return encode(np.asarray(value))


def _aval_data(aval) -> dict:
    import numpy as np

    if type(aval).__name__ != "ShapedArray":
        raise WireError(f"a value of kind {type(aval).__name__} cannot be judged (arrays only)")
    return {"shape": [int(n) for n in aval.shape], "dtype": np.dtype(aval.dtype).name, "weak": bool(aval.weak_type)}


def _jaxpr_as_data(jaxpr, written: _Written) -> dict:
    from jax._src import core

    numbers: dict = {}

    def define(var) -> dict:
        if isinstance(var, core.DropVar):
            return {"drop": _aval_data(var.aval)}
        numbers[var] = len(numbers)
        return {"aval": _aval_data(var.aval)}

    def atom(value) -> dict:
        if isinstance(value, core.Literal):
            return {"lit": _array_data(value.val), "aval": _aval_data(value.aval)}
        return {"v": numbers[value]}

    const = [_aval_data(v.aval) for v in jaxpr.constvars]
    inputs = [_aval_data(v.aval) for v in jaxpr.invars]
    for var in [*jaxpr.constvars, *jaxpr.invars]:
        define(var)
    eqns = []
    for eqn in jaxpr.eqns:
        if eqn.effects:
            raise WireError(f"the program has side effects ({eqn.primitive.name}): it cannot be judged")
        name, params = eqn.primitive.name, dict(eqn.params)
        if name in INLINED:
            name, params = "closed_call", {"call_jaxpr": params[INLINED[name]]}
            if not isinstance(params["call_jaxpr"], core.ClosedJaxpr):
                raise WireError("a custom derivative whose body is not a closed program")
        values = {key: _value(value, f"{name}'s {key}", written) for key, value in params.items()}
        ins = [atom(v) for v in eqn.invars]
        eqns.append({"p": name, "in": ins, "out": [define(v) for v in eqn.outvars], "params": values})
    return {"const": const, "in": inputs, "eqns": eqns, "out": [atom(v) for v in jaxpr.outvars]}


def _value(value, where: str, written: _Written):
    """A parameter's value as data: JSON itself, or {"$tuple"}, {"$dtype"}, {"$jaxpr"}, {"$closed"},
    {"$enum"}, {"$named"} (a NamedTuple of lax's), {"$policy"}, {"$unspecified"}, {"$empty_mesh"},
    {"$unsharded"} (a NamedSharding that splits nothing);
    {"$closed": n} is the n-th closed program."""
    import enum

    import numpy as np
    from jax._src import core

    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (np.integer, np.floating, np.bool_)):  # a NumPy scalar (vmap's split sizes): its value
        return value.item()
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return {"$named": [type(value).__name__, [_value(v, where, written) for v in value]]}
    if isinstance(value, (tuple, list)):
        return {"$tuple" if isinstance(value, tuple) else "$list": [_value(v, where, written) for v in value]}
    if isinstance(value, core.ClosedJaxpr):
        return {"$closed": written.closed(value)}
    if isinstance(value, core.Jaxpr):
        return {"$jaxpr": _jaxpr_as_data(value, written)}
    if isinstance(value, enum.Enum):
        return {"$enum": [type(value).__name__, value.name]}
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return {"$dtype": np.dtype(value).name}
    kind = type(value).__name__
    if kind == "UnspecifiedValue":
        return {"$unspecified": True}
    if kind in ("Mesh", "AbstractMesh") and tuple(getattr(value, "axis_names", ("?",))) == ():
        return {"$empty_mesh": kind}
    if kind == "NamedSharding" and _unsharded(value):  # jax.hessian's basis, say: nothing is split
        return {"$unsharded": len(value.spec)}
    if callable(value):
        return {"$policy": _policy_data(value, where)}
    raise WireError(f"{where} is a {kind}: the program cannot be judged")


def _unsharded(sharding) -> bool:
    """Whether a NamedSharding splits nothing: no mesh axis, every dimension unpartitioned."""
    mesh = getattr(sharding, "mesh", None)
    return (
        type(mesh).__name__ == "AbstractMesh"
        and tuple(getattr(mesh, "axis_names", ("?",))) == ()
        and all(entry is None for entry in getattr(sharding, "spec", (0,)))
    )


def _policy_data(policy, where: str):
    """One of JAX's checkpoint policies, by name (and names); nothing else travels."""
    from jax._src import ad_checkpoint

    for name in PLAIN_POLICIES:
        if policy is getattr(ad_checkpoint, name):
            return [name]
    factory = policy.__qualname__.partition(".<locals>.")[0]
    if policy.__module__ == ad_checkpoint.__name__ and policy.__closure__:
        free = dict(zip(policy.__code__.co_freevars, (cell.cell_contents for cell in policy.__closure__)))
        if factory in NAMED_POLICIES and len(free) == 1:
            (names,) = free.values()
            if all(isinstance(n, str) for n in names):
                return [factory, sorted(names)]
        if factory == "save_from_both_policies" and set(free) == {"policy_1", "policy_2"}:
            return [factory, _policy_data(free["policy_1"], where), _policy_data(free["policy_2"], where)]
    raise WireError(
        f"{where} is a function of your own: the grader judges checkpoint policies from "
        "jax.checkpoint_policies only (save_only_these_names, dots_saveable, ...)"
    )


# -- read by the artifact runner ------------------------------------------------------------------
class _Reading:
    """One program's reading: JAX's primitives by name, what it has used so far (its bounds), and
    each closed program and constant made once (shared as they were when written)."""

    def __init__(self, data):
        if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in ("closed", "arrays")):
            raise WireError("a program that is not written as closed programs and constants")
        self.equations = 0
        self.primitives = _primitives()
        self.closed_data, self.array_data = data["closed"], data["arrays"]
        self._closed: dict = {}
        self._arrays: dict = {}

    def closed(self, index, depth: int):
        if type(index) is not int or not 0 <= index < len(self.closed_data):
            raise WireError("a reference to a closed program that is not there")
        if index not in self._closed:
            self._closed[index] = None  # being read: a program that holds itself is refused
            self._closed[index] = _closed(self.closed_data[index], self, depth)
        if self._closed[index] is None:
            raise WireError("a closed program that holds itself")
        return self._closed[index]

    def array(self, index):
        if type(index) is not int or not 0 <= index < len(self.array_data):
            raise WireError("a reference to a constant that is not there")
        if index not in self._arrays:
            import jax.numpy as jnp

            # A JAX array, as a traced program's constants are: made once, it stays one value in
            # every jit that closes over it (a NumPy array would be put on the device at each).
            self._arrays[index] = jnp.asarray(decode(self.array_data[index]))
        return self._arrays[index]


def program_from_data(data):
    """The ClosedJaxpr that `program_as_data` wrote, made from JAX's own objects only."""
    reading = _Reading(data)
    return reading.closed(data.get("program"), 0)


def wider_floats(closed) -> list[str]:
    """The floating dtypes a program computes in that are wider than its widest floating input
    (float32 where it takes none), nested programs included: a program of float32 inputs that
    turns on float64 inside (jax.enable_x64) computes what its inputs' precision cannot."""
    import numpy as np
    from jax._src import core

    def floating(var) -> np.dtype | None:
        dtype = getattr(getattr(var, "aval", None), "dtype", None)
        return np.dtype(dtype) if dtype is not None and np.dtype(dtype).kind == "f" else None

    widest = max((d.itemsize for d in map(floating, closed.jaxpr.invars) if d is not None), default=4)
    wider: set[str] = set()
    seen: set[int] = set()

    def walk(jaxpr) -> None:
        if id(jaxpr) in seen:
            return
        seen.add(id(jaxpr))
        used = [*jaxpr.constvars, *jaxpr.invars, *jaxpr.outvars]
        for eqn in jaxpr.eqns:
            used += [*eqn.invars, *eqn.outvars]
        wider.update(d.name for d in map(floating, used) if d is not None and d.itemsize > widest)
        for inner in core.subjaxprs(jaxpr):
            walk(inner)

    walk(closed.jaxpr)
    return sorted(wider)


def _primitives() -> dict:
    """{name: primitive} of every primitive JAX's allowed modules define; a name two of them
    define differently is left out (the data could not say which)."""
    import sys
    import types

    from jax._src import core

    found: dict = {}
    clashes: set = set()
    for module_name, module in list(sys.modules.items()):
        if not isinstance(module, types.ModuleType) or not module_name.startswith(
            PRIMITIVE_MODULES + ("jax._src.core",)
        ):
            continue
        for value in list(vars(module).values()):
            if not isinstance(value, core.Primitive):
                continue
            if module_name == "jax._src.core" and value.name not in CORE_PRIMITIVES:
                continue
            if found.get(value.name, value) is not value:
                clashes.add(value.name)
            found[value.name] = value
    return {name: p for name, p in found.items() if name not in clashes and name not in DENIED}


def _closed(data, reading: _Reading, depth: int):
    from jax._src import core

    if not isinstance(data, dict) or not isinstance(data.get("consts"), list):
        raise WireError("a closed program without its constants")
    jaxpr = _jaxpr(data.get("jaxpr"), reading, depth)
    consts = [reading.array(c) for c in data["consts"]]
    if len(consts) != len(jaxpr.constvars):
        raise WireError("a closed program with the wrong number of constants")
    return core.ClosedJaxpr(jaxpr, consts)


def _aval(data):
    import numpy as np
    from jax._src import core

    if not isinstance(data, dict) or not isinstance(data.get("shape"), list) or not isinstance(data.get("weak"), bool):
        raise WireError("a value's type is not written as a shape and a dtype")
    shape = data["shape"]
    if len(shape) > 32 or not all(type(n) is int and 0 <= n < 1 << 40 for n in shape):
        raise WireError("a value whose shape is not a list of sizes")
    try:
        dtype = np.dtype(data.get("dtype"))
    except TypeError:
        raise WireError("a value of an unknown dtype") from None
    if dtype.kind not in "biuf":
        raise WireError(f"values of dtype {dtype.name} are not judged")
    return core.ShapedArray(tuple(shape), dtype, weak_type=data["weak"])


def _jaxpr(data, reading: _Reading, depth: int):
    from jax._src import core

    if depth > MAX_NESTING:
        raise WireError(f"programs nested more than {MAX_NESTING} deep")
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in ("const", "in", "eqns", "out")):
        raise WireError("a program that is not written as constants, inputs, equations and outputs")
    variables: list = []

    def define(item):
        if isinstance(item, dict) and set(item) == {"drop"}:
            return core.DropVar(_aval(item["drop"]))
        if not isinstance(item, dict) or set(item) != {"aval"}:
            raise WireError("an output that is not written by its type")
        var = core.Var(_aval(item["aval"]))
        variables.append(var)
        return var

    def atom(item):
        if not isinstance(item, dict):
            raise WireError("an operand that is neither a variable nor a literal")
        if set(item) == {"v"}:
            number = item["v"]
            if type(number) is not int or not 0 <= number < len(variables):
                raise WireError("an operand used before it is defined")
            return variables[number]
        if set(item) == {"lit", "aval"}:
            return core.Literal(decode(item["lit"]), _aval(item["aval"]))
        raise WireError("an operand that is neither a variable nor a literal")

    constvars = [define({"aval": a}) for a in data["const"]]
    invars = [define({"aval": a}) for a in data["in"]]
    eqns = []
    for eqn in data["eqns"]:
        reading.equations += 1
        if reading.equations > MAX_EQUATIONS:
            raise WireError(f"a program of more than {MAX_EQUATIONS} equations")
        if not isinstance(eqn, dict) or not isinstance(eqn.get("params"), dict):
            raise WireError("an equation that is not written as a primitive, operands, outputs and parameters")
        primitive = reading.primitives.get(eqn.get("p"))
        if primitive is None:
            raise WireError(f"the primitive {str(eqn.get('p'))[:80]!r} is not one the judge runs")
        ins = [atom(item) for item in eqn.get("in") or []]
        params = {str(k): _read_value(v, reading, depth + 1) for k, v in eqn["params"].items()}
        outs = [
            core.DropVar(_aval(item["drop"])) if isinstance(item, dict) and set(item) == {"drop"} else None
            for item in eqn.get("out") or []
        ]
        # Outputs are defined after the operands are read: an equation cannot read its own outputs.
        outs = [out if out is not None else define(item) for out, item in zip(outs, eqn.get("out") or [])]
        eqns.append(core.new_jaxpr_eqn(ins, outs, primitive, params, frozenset()))
    outvars = [atom(item) for item in data["out"]]
    names = tuple(f"input {n}" for n in range(len(invars)))
    info = core.DebugInfo(
        "the judge", "a program written as data", names, tuple(f"output {n}" for n in range(len(outvars)))
    )
    return core.Jaxpr(constvars, invars, outvars, eqns, frozenset(), info)


def _read_value(data, reading: _Reading, depth: int):
    import numpy as np
    from jax import lax
    from jax._src import mesh as mesh_lib
    from jax._src.sharding_impls import UNSPECIFIED

    if depth > MAX_NESTING:
        raise WireError(f"parameters nested more than {MAX_NESTING} deep")
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if not isinstance(data, dict) or len(data) != 1:
        raise WireError("a parameter that is not written in the judge's format")
    ((form, body),) = data.items()
    nested = lambda item: _read_value(item, reading, depth + 1)  # noqa: E731
    if form in ("$tuple", "$list") and isinstance(body, list):
        items = [nested(item) for item in body]
        return tuple(items) if form == "$tuple" else items
    if form == "$closed":
        return reading.closed(body, depth + 1)
    if form == "$jaxpr":
        return _jaxpr(body, reading, depth + 1)
    if form == "$dtype" and isinstance(body, str):
        try:
            dtype = np.dtype(body)
        except TypeError:
            raise WireError("an unknown dtype") from None
        if dtype.kind not in "biuf":
            raise WireError(f"dtype {dtype.name} is not judged")
        return dtype
    if form == "$enum" and isinstance(body, list) and len(body) == 2:
        kind = getattr(lax, str(body[0]), None)
        member = getattr(kind, "__members__", {}).get(body[1])
        if member is None:
            raise WireError(f"no {str(body[0])[:80]}.{str(body[1])[:80]} in jax.lax")
        return member
    if form == "$named" and isinstance(body, list) and len(body) == 2 and isinstance(body[1], list):
        kind = getattr(lax, str(body[0]), None)
        if not (isinstance(kind, type) and issubclass(kind, tuple) and hasattr(kind, "_fields")):
            raise WireError(f"no named tuple {str(body[0])[:80]} in jax.lax")
        return kind(*[nested(item) for item in body[1]])
    if form == "$policy":
        return _read_policy(body)
    if form == "$unspecified" and body is True:
        return UNSPECIFIED
    if form == "$empty_mesh" and body in ("Mesh", "AbstractMesh"):
        return mesh_lib.empty_concrete_mesh if body == "Mesh" else mesh_lib.empty_abstract_mesh
    if form == "$unsharded" and type(body) is int and 0 <= body <= 32:
        from jax.sharding import NamedSharding, PartitionSpec

        return NamedSharding(mesh_lib.empty_abstract_mesh, PartitionSpec(*[None] * body))
    raise WireError(f"a parameter of the form {str(form)[:40]!r} is not judged")


def _read_policy(body):
    import jax

    policies = jax.checkpoint_policies
    if not isinstance(body, list) or not body or not isinstance(body[0], str):
        raise WireError("a checkpoint policy that is not written by its name")
    name = body[0]
    if name in PLAIN_POLICIES and len(body) == 1:
        return getattr(policies, name)
    if name in NAMED_POLICIES and len(body) == 2 and isinstance(body[1], list):
        if not all(isinstance(n, str) for n in body[1]):
            raise WireError("a checkpoint policy whose names are not text")
        return getattr(policies, name)(*body[1])
    if name == "save_from_both_policies" and len(body) == 3:
        return policies.save_from_both_policies(_read_policy(body[1]), _read_policy(body[2]))
    raise WireError(f"the checkpoint policy {name[:80]!r} is not judged")
