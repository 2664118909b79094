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

Requests: {"op": "load", "cell": id, "source": text}, then {"op": "call", "cell": id, "name":
..., "args": [...]}. Sent as text after wire.py's and confine.py's; `main()` reads one per line.
"""

from __future__ import annotations

try:  # imported as part of the grader (its tests); sent as text, the two files come first
    from .confine import confine
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
        # One statement at a time: one that cannot run here (it needs JAX, say) is left out, so the
        # function is judged on its own; a function that needs JAX fails when it is called.
        for statement in ast.parse(str(request["source"])).body:
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


def main(config: dict) -> None:
    import sys

    reader, writer = confine(config["uid"], config["limits"])
    only_allowed()
    sys.path.insert(0, config["assignment"])
    import numpy  # noqa: F401

    cells: dict = {}
    writer.write(dumps({"ready": True}) + "\n")
    writer.flush()
    for line in reader:
        try:
            response = answer(loads(line), cells)
        except WireError as error:
            response = {"refused": str(error)[:4000]}
        except BaseException as error:  # the learner's code raised: that is the answer
            response = {"raised": {"mro": [c.__name__ for c in type(error).__mro__][:32], "message": str(error)[:4000]}}
        try:
            text = dumps(response)
        except Exception as error:
            text = dumps({"refused": f"the answer could not be sent: {type(error).__name__}"})
        writer.write(text + "\n")
        writer.flush()
