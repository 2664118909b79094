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
from autograder.judge.core import Judge, LearnerFunction, LearnerRaised, defines
from autograder.judge.protocol import answer_prelude
from autograder.kernel.helpers import HelperError
from autograder.sandboxed.wire import WireError, decode, dumps, encode

#: The most program text one notebook's judge keeps (its programs, as the builder wrote them).
MAX_PROGRAMS = 64 << 20


class ProgramEvidence:
    """The answers to one notebook's requests for evidence about the learner's programs."""

    operations = tuple(EVIDENCE)

    def __init__(self, judge: Judge):
        self.judge = judge
        self._programs: dict[str, str] = {}  # a builder request -> its program's text (`_program`)

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
            defining = [source for source in judge.answers if defines(source, name)]
            if not defining:
                raise LearnerRaised(["NameError"], about=f"no answer cell of this notebook defines {name!r}")
            cells[name] = defining[-1]
        message = {
            "op": "program",
            "cells": cells,
            "target": target,
            "bind": template,
            "avals": avals,
            "prelude": answer_prelude(judge.modules.checks),
        }
        request = {
            "op": operation,
            "program": self._program(message),
            "avals": avals,
            "wrap": None if wrap is None else judge.outbound(wrap, to_kernel=False, names=set()),
            "argnums": list(argnums) if isinstance(argnums, (tuple, list)) else [int(argnums)],
        }
        if operation != "plan":
            request["inputs"] = [encode(np.asarray(a)) for a in arrays]
        try:
            answer = judge.helpers["artifacts"].request(request, judge.helper_timeout())
        except HelperError as error:
            raise LearnerRaised(["RuntimeError"], error, "your program could not be run by the grader: ") from None
        return judge.result(answer, decode)

    def _program(self, message: dict) -> str:
        """The builder's program for message (one request per target, binding and shapes, kept
        for the notebook): every piece of evidence about it is judged on that one program, so a
        process that answers as it likes cannot give one program for the gradient and another
        for what is saved."""
        key = dumps(message)
        if key not in self._programs:
            try:
                response = self.judge.helpers["builder"].request(message, self.judge.helper_timeout())
            except HelperError as error:
                raise LearnerRaised(
                    ["RuntimeError"], error, "your program could not be rebuilt by the grader: "
                ) from None
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
