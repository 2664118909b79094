"""The JAX adapter's requests to a learner's kernel, added to the kernel's agent
(autograder/sandboxed/agent.py, whose `OPERATIONS` this extends; sent as text after it, as
`Adapter.kernel_operations`). The judge compares what the kernel's own function does with the
program it rebuilt from the answer cells (evidence.py):

    {"op": "residual_count", "target": <value>, "args": [...], "inputs": [i, ...], "wrap": <value> | null}
                                         how many values jax.vjp of the function (wrapped) keeps,
                                         with respect to the args at `inputs`, the others fixed
    {"op": "memory_plan", ...}           the same function's gradient, compiled: its memory plan

Nothing here is trusted: it runs in the learner's process, as the agent does.
"""

from __future__ import annotations

if __package__:  # imported as part of the grader (its tests); sent to a kernel, the agent's text comes first
    from autograder.sandboxed.agent import OPERATIONS, _value
    from autograder.sandboxed.wire import encode


def _traced(request):
    """(the kernel's function of the request's inputs, the other arguments fixed, traced as the
    program builder traces a program and run from its jaxpr, wrapped as the request says; the
    inputs' values)."""
    import jax
    import jax.extend

    function = _value(request["target"])
    args = [_value(item) for item in request.get("args", [])]
    inputs = [int(at) for at in request["inputs"]]

    def program(*values):
        given = dict(zip(inputs, values))
        return function(*[given.get(at, arg) for at, arg in enumerate(args)])

    values = [args[at] for at in inputs]
    run = jax.extend.core.jaxpr_as_fun(jax.make_jaxpr(program)(*values))

    def traced(*values):
        outputs = run(*values)
        return outputs[0] if len(outputs) == 1 else list(outputs)

    if request.get("wrap") is not None:
        traced = _value(request["wrap"])(traced)
    return traced, values


def _residual_count(request) -> dict:
    import jax

    traced, values = _traced(request)
    return {"result": len(jax.tree_util.tree_leaves(jax.vjp(traced, *values)[1]))}


#: The compiler's memory plan, field by field (the artifact runner's MEMORY_FIELDS).
PLAN_FIELDS = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes", "alias_size_in_bytes")


def _memory_plan(request) -> dict:
    import jax

    traced, values = _traced(request)
    argnums = request.get("argnums", 0)  # as the artifact runner reads it: an int, or a list for a tuple
    which = int(argnums) if isinstance(argnums, int) else tuple(int(at) for at in argnums)
    analysis = jax.jit(jax.grad(traced, argnums=which)).lower(*values).compile().memory_analysis()
    plan = None if analysis is None else {name: int(getattr(analysis, name)) for name in PLAN_FIELDS}
    return {"result": encode(plan)}


OPERATIONS.update({"residual_count": _residual_count, "memory_plan": _memory_plan})
