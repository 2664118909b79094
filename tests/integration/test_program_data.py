"""A program written as data (autograder/adapters/jax_programs/sandboxed/program_data.py): made again, it saves what the original
saves and plans what the original plans; what is not JAX's own never comes back."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.ad_checkpoint import checkpoint_name
from jax.extend import core as jaxpr_core

from autograder.adapters.jax_programs.sandboxed.program_data import (
    MAX_EQUATIONS,
    program_as_data,
    program_from_data,
    wider_floats,
)
from autograder.sandboxed.wire import WireError, dumps, loads

WEIGHTS = np.asarray(jax.random.normal(jax.random.key(0), (16, 16, 16)) / 4, np.float32)
X = np.linspace(-1, 1, 16, dtype=np.float32)


def named_policy(w, x):
    def one(v):
        return jnp.tanh(checkpoint_name(w[0] @ v, "preactivation"))

    one = jax.checkpoint(one, policy=jax.checkpoint_policies.save_only_these_names("preactivation"))
    for _ in range(4):
        x = one(x)
    return jax.jit(lambda v: jnp.sum(v * v))(x)


def segments(w, x):
    @jax.checkpoint
    def run(x, segment):
        return lax.scan(lambda carry, layer: (jnp.tanh(layer @ carry), None), x, segment)[0], None

    return jnp.sum(lax.scan(run, x, w.reshape(4, 4, 16, 16))[0] ** 2)


def plain(w, x):
    for layer in w:
        x = jnp.tanh(layer @ x)
    return jnp.sum(x**2)


def loops_and_policies(w, x):
    both = jax.checkpoint_policies.save_from_both_policies(
        jax.checkpoint_policies.dots_saveable, jax.checkpoint_policies.save_any_names_but_these("skip")
    )
    step = jax.checkpoint(lambda v: jnp.sin(checkpoint_name(w[1] @ v, "skip")) * 2.0, policy=both)
    y = lax.fori_loop(0, 3, lambda i, carry: carry * 0.5 + step(carry), x)
    return jnp.sum(lax.cond(y[0] > 0, lambda v: v * 2, lambda v: jnp.cos(v), y))


def _made_again(fn, *args):
    closed = jax.make_jaxpr(fn)(*args)
    back = program_from_data(loads(dumps(program_as_data(closed))))  # as it travels

    def again(*inputs):
        return jaxpr_core.jaxpr_as_fun(back)(*inputs)[0]

    return again


def _residuals(fn, *args):
    return jax.tree_util.tree_leaves(jax.vjp(fn, *args)[1])


def _temp_bytes(fn, *args):
    return jax.jit(jax.grad(fn)).lower(*args).compile().memory_analysis().temp_size_in_bytes


@pytest.mark.parametrize("fn", [named_policy, segments, plain, loops_and_policies], ids=lambda f: f.__name__)
def test_rebuilt_program_saves_like_original(fn):
    """Made again, it saves and plans what the original does."""
    again = _made_again(fn, WEIGHTS, X)
    kept, kept_again = _residuals(fn, WEIGHTS, X), _residuals(again, WEIGHTS, X)
    assert [np.shape(r) for r in kept_again] == [np.shape(r) for r in kept]
    assert all(np.array_equal(a, b) for a, b in zip(kept, kept_again))
    assert _temp_bytes(again, WEIGHTS, X) == _temp_bytes(fn, WEIGHTS, X)
    np.testing.assert_allclose(jax.grad(again)(WEIGHTS, X), jax.grad(fn)(WEIGHTS, X), rtol=1e-6)


def test_learner_own_policy_does_not_travel():
    """A policy of the learner's own does not travel."""
    mine = jax.checkpoint(lambda v: jnp.sin(v), policy=lambda prim, *_, **__: prim.name == "sin")
    with pytest.raises(WireError, match="function of your own.*jax.checkpoint_policies"):
        program_as_data(jax.make_jaxpr(mine)(X))


def test_a_side_effect_does_not_travel():
    def effect(v):
        jax.debug.callback(lambda value: None, v)
        return v * 2

    with pytest.raises(WireError, match="side effects"):
        program_as_data(jax.make_jaxpr(effect)(X))


def test_custom_derivative_travels_as_body():
    """A custom derivative travels as its plain body."""
    data = program_as_data(jax.make_jaxpr(lambda v: jnp.sum(jax.nn.relu(v)))(X))
    assert "custom_jvp_call" not in dumps(data) and '"closed_call"' in dumps(data)
    again = program_from_data(data)
    assert float(jaxpr_core.jaxpr_as_fun(again)(X)[0]) == pytest.approx(float(jnp.sum(jax.nn.relu(X))))


def _data(fn=plain):
    return loads(dumps(program_as_data(jax.make_jaxpr(fn)(WEIGHTS, X))))


def _top(data):
    return data["closed"][data["program"]]


def _first(data, name):
    return next(eqn for eqn in _top(data)["jaxpr"]["eqns"] if eqn["p"] == name)


def _hostile(change):
    data = _data()
    change(data)
    return data


HOSTILE = {
    "a callback": lambda d: _first(d, "tanh").update(p="pure_callback"),
    "a collective": lambda d: _first(d, "tanh").update(p="psum"),
    "uninitialized memory": lambda d: _first(d, "tanh").update(p="empty"),
    "a primitive of core's": lambda d: _first(d, "tanh").update(p="call"),
    "no such primitive": lambda d: _first(d, "tanh").update(p="os.system"),
    "an operand before it is defined": lambda d: _first(d, "tanh")["in"].__setitem__(0, {"v": 10_000}),
    "an equation that reads its own output": lambda d: _top(d)["jaxpr"]["eqns"][0]["in"].__setitem__(
        0, {"v": len(_top(d)["jaxpr"]["in"])}
    ),
    "an object dtype": lambda d: _top(d)["jaxpr"]["in"][0].update(dtype="object"),
    "a structured dtype": lambda d: _top(d)["jaxpr"]["in"][0].update(dtype="V8"),
    "a negative size": lambda d: _top(d)["jaxpr"]["in"][0].update(shape=[-1, 16, 16]),
    "a class outside lax": lambda d: _first(d, "dot_general")["params"].update(
        dimension_numbers={"$named": ["Popen", ["ls"]]}
    ),
    "an enum outside lax": lambda d: _first(d, "dot_general")["params"].update(
        precision={"$enum": ["Signals", "SIGKILL"]}
    ),
    "a shipped function": lambda d: _first(d, "tanh")["params"].update(accuracy={"$shipped": ["os", "system"]}),
    "a policy by another name": lambda d: _first(d, "tanh")["params"].update(accuracy={"$policy": ["exec", "x"]}),
    "a policy of names that are not text": lambda d: _first(d, "tanh")["params"].update(
        accuracy={"$policy": ["save_only_these_names", [1]]}
    ),
    "a constant too many": lambda d: _top(d)["consts"].append(0),
    "a constant that is not there": lambda d: _top(d).update(consts=[99]),
    "a program that is not there": lambda d: d.update(program=7),
    "a program that holds itself": lambda d: _first(d, "tanh")["params"].update(accuracy={"$closed": d["program"]}),
}


@pytest.mark.parametrize("change", list(HOSTILE.values()), ids=list(HOSTILE))
def test_what_is_not_jaxs_own_is_refused(change):
    with pytest.raises(WireError):
        program_from_data(_hostile(change))


def test_hostile_data_control_reads_back():
    """The control of the hostile data reads back."""
    assert program_from_data(_data()) is not None


def test_nesting_and_size_are_bounded():
    empty = {"jaxpr": {"const": [], "in": [], "eqns": [], "out": []}, "consts": []}
    deep = {"program": 70, "closed": [empty], "arrays": []}
    for n in range(70):  # a program inside a call inside a call ...
        call = {"p": "closed_call", "in": [], "out": [], "params": {"call_jaxpr": {"$closed": n}}}
        deep["closed"].append({"jaxpr": {"const": [], "in": [], "out": [], "eqns": [call]}, "consts": []})
    with pytest.raises(WireError, match="nested"):
        program_from_data(deep)
    aval = {"shape": [16], "dtype": "float32", "weak": False}
    negate = {"p": "neg", "in": [{"v": 0}], "out": [{"aval": aval}], "params": {}}
    jaxpr = {"const": [], "in": [aval], "eqns": [negate] * (MAX_EQUATIONS + 1), "out": [{"v": 0}]}
    many = {"program": 0, "closed": [{"jaxpr": jaxpr, "consts": []}], "arrays": []}
    with pytest.raises(WireError, match="equations"):
        program_from_data(many)


def test_shared_constant_stays_one_value():
    """One jitted layer called four times closes over one weight array: made again, its VJP keeps
    the weights once, as the original does (four copies would be four residuals)."""

    def objective(w, x):
        layer = jnp.asarray(w[0])
        step = jax.jit(lambda v: jnp.tanh(layer @ v))
        for _ in range(4):
            x = step(x)
        return jnp.sum(x)

    weights = jnp.asarray(WEIGHTS)
    original = lambda x: objective(weights, x)  # noqa: E731
    again = _made_again(original, X)
    kept, kept_again = _residuals(original, X), _residuals(again, X)
    assert [np.shape(r) for r in kept_again] == [np.shape(r) for r in kept]
    assert sum(np.shape(r) == (16, 16) for r in kept_again) == 1


def _in_float64(fn):
    """fn computed in float64 inside a program of float32 inputs, its result float32 again."""

    def wide(v):
        with jax.enable_x64(True):
            return jnp.asarray(fn(jnp.asarray(v, jnp.float64)), jnp.float32)

    return wide


#: Where a program can compute in float64: at its top, inside a jit, a loop body, a checkpoint, a
#: custom derivative's body; and in a float64 constant it closes over.
WIDE = {
    "top": _in_float64(jnp.sin),
    "jit": lambda v: jax.jit(_in_float64(jnp.sin))(v),
    "scan": lambda v: lax.scan(lambda c, _: (_in_float64(jnp.tanh)(c), None), v, None, length=3)[0],
    "checkpoint": jax.checkpoint(_in_float64(jnp.cos)),
    "custom_jvp": jax.custom_jvp(_in_float64(jnp.exp)),
}
WIDE["custom_jvp"].defjvps(lambda t, ans, v: t * ans)


def _with_a_float64_constant(v):
    with jax.enable_x64(True):
        scale = jnp.asarray(np.float64(1.0) + 1e-12)
        return jnp.asarray(jnp.asarray(v, jnp.float64) * scale, jnp.float32)


@pytest.mark.parametrize("where", sorted(WIDE))
def test_float64_inside_a_float32_program_is_found_wherever_it_is(where):
    """The artifact runner judges a program at its inputs' precision: float64 anywhere inside one of
    float32 inputs is found (read from the program as it travels)."""
    closed = jax.make_jaxpr(WIDE[where])(X)
    assert wider_floats(program_from_data(loads(dumps(program_as_data(closed))))) == ["float64"]


def test_a_float32_program_and_a_float64_one_compute_in_nothing_wider():
    assert wider_floats(jax.make_jaxpr(named_policy)(WEIGHTS, X)) == []
    assert wider_floats(jax.make_jaxpr(jax.checkpoint(plain))(WEIGHTS, X)) == []
    assert wider_floats(jax.make_jaxpr(_with_a_float64_constant)(X)) == ["float64"]
    with jax.enable_x64(True):  # its inputs float64: float64 inside is their precision
        assert wider_floats(jax.make_jaxpr(jnp.sin)(np.asarray(X, np.float64))) == []


@pytest.mark.parametrize("transform", [jax.hessian, lambda f: jax.jacfwd(jax.grad(f))], ids=["hessian", "jacfwd"])
def test_a_hessian_travels(transform):
    """jax.hessian's program holds vmap's split sizes as NumPy integers and its basis's conversion
    with a sharding that splits nothing: both travel (an HVP through the whole Hessian is exact)."""
    weights = jnp.asarray(WEIGHTS)
    hessian = transform(lambda v: plain(weights[:4], v))
    again = _made_again(hessian, X)
    np.testing.assert_allclose(np.asarray(again(X)), np.asarray(hessian(X)), rtol=1e-6, atol=1e-7)
