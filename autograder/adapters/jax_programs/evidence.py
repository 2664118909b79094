"""The judge's side of the JAX adapter: what a check asks about a learner's JAX program, answered
from an artifact the kernel has no part in.

A check asks through the judge's protocol (`getattr(fn, REMOTE)(operation, args, bind, argnums,
wrap)`, autograder/judge/protocol.py) for one of the artifact runner's `EVIDENCE`: the gradient,
the value and gradient, the VJP's saved residuals, the compiler's memory plan. The judge's program
builder rebuilds the function from the learner's answer cells, following how the judge came by it
(a name an answer cell defines, what calling it on the judge's values returned), and hands its
program over as data; the artifact runner makes it again, applies the transform and runs it on the
judge's own inputs, or compiles it (both helpers of this adapter, helpers.py).
"""

from __future__ import annotations

import numpy as np

from autograder.adapters.jax_programs.sandboxed.artifact_runner import EVIDENCE
from autograder.judge.core import Judge, LearnerFunction, LearnerRaised, ProgramDisagrees, named
from autograder.judge.protocol import answer_prelude
from autograder.kernel.helpers import HelperError
from autograder.sandboxed.wire import WireError, decode, dumps, encode

#: The most program text one notebook's judge keeps (its programs, as the builder wrote them).
MAX_PROGRAMS = 64 << 20
#: What JAX raises where a function needs its values while it is traced (np.asarray of a traced
#: array, float(), a Python `if` on one): the builder traces every function it is asked for.
NOT_TRACEABLE = (
    "TracerArrayConversionError",
    "ConcretizationTypeError",
    "TracerBoolConversionError",
    "TracerIntegerConversionError",
)


def _leaves(value) -> list:
    """A value's arrays in JAX's order of a tree's leaves (a dict's by sorted key), None left out."""
    if value is None:
        return []
    if isinstance(value, dict):
        return [leaf for key in sorted(value) for leaf in _leaves(value[key])]
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [np.asarray(value, dtype=np.float64) if np.asarray(value).dtype.kind in "biuf" else np.asarray(value)]


class ProgramEvidence:
    """The answers to one notebook's requests for evidence about the learner's programs."""

    operations = tuple(EVIDENCE)

    def __init__(self, judge: Judge):
        self.judge = judge
        self._programs: dict[str, str] = {}  # a builder request -> its program's text (`_program`)
        self._agreed: set[str] = set()  # the builder requests whose program agrees with the kernel's function

    def request(self, function: LearnerFunction, operation: str, args, bind, argnums, wrap=None):
        """Evidence about the learner's program (function, bound, at args' shapes): the program is
        made by the judge's program builder from the answer cells (never by the kernel) and handed
        over as data; the artifact runner makes it again, wraps it, applies the transform the
        evidence needs and runs it on args, or compiles it for its plan. Anything but a program
        earns nothing. wrap: an object of the shipped modules (sent as its recipe) applied to the
        program first (a renaming of its checkpoint names, say)."""
        import jax.numpy as jnp

        judge = self.judge
        arrays = [jnp.asarray(a) for a in args]  # as the program sees them (JAX's dtypes: float32, not 64)
        avals = [[list(a.shape), a.dtype.name] for a in arrays]
        names: set = set()
        try:
            target = judge.rebuilt(function._origin, names)
            positions: list = []
            template = (
                None
                if bind is None
                else [judge.outbound(i, to_kernel=False, arguments=positions, names=names) for i in bind]
            )
        except WireError as error:
            raise LearnerRaised(["RuntimeError"], about=f"your program cannot be judged: {error}") from None
        cells = {}
        for name in sorted(names):
            cells[name] = judge.cells_for(name)
            if not cells[name]:
                raise LearnerRaised(["NameError"], about=f"no answer cell above this test cell defines {name!r}")
        message = {
            "op": "program",
            "cells": cells,
            "target": target,
            "bind": template,
            "avals": avals,
            "prelude": answer_prelude(judge.modules.checks),
        }
        program = self._program(message, function)
        # As the check wrote it: an int stays an int, a tuple (even of one) is sent as a list and
        # answered as JAX answers a tuple, with a tuple of gradients.
        with_respect_to = list(argnums) if isinstance(argnums, (tuple, list)) else int(argnums)
        request = {
            "op": operation,
            "program": program,
            "avals": avals,
            "wrap": None if wrap is None else judge.outbound(wrap, to_kernel=False, names=set()),
            "argnums": with_respect_to,
        }
        if operation != "plan":
            request["inputs"] = [encode(np.asarray(a)) for a in arrays]
        # The kernel is never sent the check's own inputs: it is compared with the program at a point of its own.
        fresh = self._fresh_point(arrays, dumps(message))
        if fresh.key not in self._agreed:  # once per program: the kernel's own function agrees with it
            self._agree_on_values(function, bind, program, fresh, avals)
            self._agreed.add(fresh.key)
        result = judge.result(self._artifact_request(request), decode)
        if operation == "residuals":
            self._agree_on_residuals(function, bind, fresh, wrap, len(result))
        if operation == "plan" and isinstance(result, dict):
            self._agree_on_plan(function, bind, fresh, result, with_respect_to)
        return result

    def _artifact_request(self, request: dict) -> dict:
        try:
            return self.judge.helpers["artifacts"].request(request, self.judge.helper_timeout())
        except HelperError as error:
            self.judge.note_unrequested(error, "artifact runner")
            raise LearnerRaised(["RuntimeError"], error, "your program could not be run by the grader: ") from None

    def _program(self, message: dict, function: LearnerFunction) -> str:
        """The builder's program for message (one request per target, binding and shapes, kept
        for the notebook): every piece of evidence about it is judged on that one program, so a
        process that answers as it likes cannot give one program for the gradient and another
        for what is saved."""
        key = dumps(message)
        if key not in self._programs:
            try:
                response = self.judge.helpers["builder"].request(message, self.judge.helper_timeout())
            except HelperError as error:
                self.judge.note_unrequested(error, "program builder")
                raise LearnerRaised(
                    ["RuntimeError"], error, "your program could not be rebuilt by the grader: "
                ) from None
            raised = response.get("raised")
            if isinstance(raised, dict) and isinstance(raised.get("mro"), list):
                untraceable = [name for name in raised["mro"] if name in NOT_TRACEABLE]
                if untraceable:  # JAX's own message names the grader's files: what to change instead
                    raise LearnerRaised(
                        untraceable[:1],
                        about=f"your {named(function)} cannot be traced as a JAX program, as the grader traces it "
                        "(jax.make_jaxpr): keep it JAX code, with no NumPy conversion (np.asarray), float() "
                        "or Python if on the values it computes",
                    )
            if "raised" in response or "refused" in response:
                self.judge.result(response, decode)  # raises what the answer cell raised, or why it was refused
            if not isinstance(response.get("program"), str):
                raise LearnerRaised(
                    ["RuntimeError"], about="no program was handed over: an answer that is not a program earns nothing"
                )
            if sum(map(len, self._programs.values())) + len(response["program"]) > MAX_PROGRAMS:
                raise LearnerRaised(["RuntimeError"], about="your programs are larger than the grader keeps")
            self._programs[key] = response["program"]
        return self._programs[key]

    def _fresh_point(self, arrays: list, key: str) -> FreshPoint:
        """Inputs of the program's shapes and dtypes, drawn for it from the run's seed (the same for
        the same program): floating ones at random, others as the check gave them."""
        import zlib

        rng = np.random.default_rng([self.judge.seed, zlib.crc32(key.encode()), 7])
        inputs = []
        for array in (np.asarray(a) for a in arrays):
            if array.dtype.kind == "f":
                array = (0.5 * rng.standard_normal(array.shape)).astype(array.dtype)
            inputs.append(array)
        return FreshPoint(key, inputs)

    def _agree_on_values(self, function: LearnerFunction, bind, program: str, fresh: FreshPoint, avals) -> None:
        """The kernel's own function computes, at the fresh point, what the program rebuilt from the
        answer cells computes there; ProgramDisagrees where it does not."""
        request = {"op": "value", "program": program, "avals": avals, "wrap": None, "argnums": 0}
        built = self.judge.result(self._artifact_request({**request, "inputs": fresh.encoded()}), decode)
        kept = self._from_the_kernel(function, bind, fresh, "call", "computes nothing there")
        found, expected = _leaves(kept), _leaves(built)
        same = len(found) == len(expected) and all(
            a.shape == b.shape and np.allclose(a, b, rtol=1e-3, atol=1e-5 * max(1.0, float(np.abs(b).max(initial=0))))
            for a, b in zip(found, expected)
        )
        if not same:
            raise ProgramDisagrees(
                f"at the grader's own inputs your notebook's {named(function)} computes other values than the program "
                "rebuilt from your answer cells"
            )

    def _agree_on_residuals(self, function, bind, fresh: FreshPoint, wrap, count: int) -> None:
        """The kernel's own function keeps as many values for its backward pass as the program does
        (`count`: a number of the program's shape, not of the values at its inputs); ProgramDisagrees
        where it does not."""
        kept = self._from_the_kernel(
            function, bind, fresh, "residual_count", "cannot be differentiated there", wrap=wrap
        )
        if kept != count:
            raise ProgramDisagrees(
                f"your notebook's {named(function)} keeps {kept!r} values for its backward pass, the program rebuilt "
                f"from your answer cells {count}"
            )

    def _agree_on_plan(self, function, bind, fresh: FreshPoint, plan: dict, argnums: int | list) -> None:
        """The compiler plans the gradient of the kernel's own function as it plans the program's
        (a plan is the program's shape's, not its inputs'); ProgramDisagrees where it does not.
        Nothing to compare where the kernel's backend has no memory analysis."""
        kept = self._from_the_kernel(function, bind, fresh, "memory_plan", "cannot be compiled there", argnums=argnums)
        if isinstance(kept, dict) and kept != plan:
            raise ProgramDisagrees(
                f"the compiler plans {kept.get('temp_size_in_bytes')!r} temporary bytes for the gradient of your "
                f"notebook's {named(function)}, {plan.get('temp_size_in_bytes')} for the program rebuilt from "
                "your answer cells"
            )

    def _from_the_kernel(
        self, function: LearnerFunction, bind, fresh: FreshPoint, op: str, fails: str, wrap=None, argnums=None
    ):
        """What the kernel's own function gives at the fresh point (`op`: call it, or count what its
        VJP keeps); ProgramDisagrees when it raises where the program did not."""
        import jax.numpy as jnp

        inputs = iter([jnp.asarray(a) for a in fresh.inputs])
        template = list(bind) if bind is not None else [self.judge.modules.checks.ARG] * len(fresh.inputs)
        args = [next(inputs) if item is self.judge.modules.checks.ARG else item for item in template]
        message: dict = {
            "op": op,
            "target": {"$handle": function._handle},
            "args": [self.judge.outbound(a) for a in args],
        }
        if op == "call":
            message["kwargs"] = []
        else:  # with respect to the program's inputs only, as the artifact runner takes it
            message["inputs"] = [at for at, item in enumerate(template) if item is self.judge.modules.checks.ARG]
            message["wrap"] = None if wrap is None else self.judge.outbound(wrap)
            message["argnums"] = 0 if argnums is None else argnums
        try:
            return self.judge.result(self.judge.kernel_request(message), decode)
        except LearnerRaised as raised:
            raise ProgramDisagrees(
                f"at the grader's own inputs your notebook's {named(function)} {fails}, where the program rebuilt "
                f"from your answer cells does ({raised})"
            ) from None


class FreshPoint:
    """The judge's own inputs for comparing a program with the kernel's function (ProgramEvidence._fresh_point)."""

    def __init__(self, key: str, inputs: list):
        self.key, self.inputs = key, inputs

    def encoded(self) -> list:
        return [encode(a) for a in self.inputs]
