"""The judge's protocol: what a course's checks module offers the judge, and the names both share.

A checks module is one module of an assignment's source (the course's configuration names it:
`autograder configure COURSE --checks-module NAME`). Learners import it in their notebooks, where
every check runs in their own kernel; while grading, the judge loads its own copy from the
course's source and runs each test cell with it, in the grader (judge/core.py). It needs nothing
of the grader: it is shipped to learners who never install it. It provides:

- `REMOTE` (equal to REMOTE below): a check asks for evidence about a learner's function with
  `getattr(fn, REMOTE, None)`; the judge's handles answer `(operation, args, bind, argnums,
  wrap)` for one of the operations its adapter offers (`Adapter.evidence`), or
  `("numpy_only", ())`; anything else has no such attribute, and the check works on the
  function itself.
- `JUDGE`: None; the judge sets it to the run's seed on its own copy.
- `Checks`: a test cell's checks; `Checks.latest` is the last made, with `.items` (dicts with
  "points", "what", "failure", and optionally "unanswered": True when the item failed because
  the answer was never given, which the class report counts as not attempted) and `.where`.
- `report_lines(items, where) -> (lines, earned, _)` and `points_line(earned, declared, most)`:
  the one wording of a report, used by the learner's kernel and by the judge alike.
- `TimedExecutable`: an executable for a learner's timing code; the judge plays it from outside
  the kernel (`delay(event, call)`, `note(kind, call, seconds)`, `executable`).
- `PendingResult(timed, call, result, waited=None)`: a timed call's result, waiting for which
  runs `waited()` (in the learner's process: the executable's delay, noted). The kernel's agent
  uses this one class too, with a `waited` that asks the judge.
- `ARG`: the placeholder for the judge's own inputs in a bound program.
- `ANSWER_PRELUDE`: modules of the assignment whose names an answer cell finds bound
  (`from M import *`, as the notebooks import them before it); may be empty.
- `ADAPTER` (optional): the module of the grader that offers what the assignment's environment
  needs beyond the core (autograder/kernel/adapter.py), as a string literal: the grader reads it
  from the module's text, before anything imports the module.

An object a check hands to learner code may carry RECIPE: `(module, name, args, kwargs)`, how a
helper process builds it again from the shipped module `module`.

Where evidence is refused for a reason of the judge's own (the program rebuilt from the answer
cells is not the one the notebook's kernel runs: judge/core.py, `ProgramDisagrees`), the exception
raised inside the item carries `judge_finding = True`: a checks module reports its message as it
is (it was not raised by the learner's code).
"""

from __future__ import annotations

#: The attribute a judge's handle offers for evidence about a learner's function.
REMOTE = "__judge_remote__"
#: The attribute of an object a helper can build again: (module, name, args, kwargs).
RECIPE = "__recipe__"
#: What a checks module must define (ANSWER_PRELUDE may be left out: nothing is bound).
REQUIRED = ("REMOTE", "JUDGE", "Checks", "report_lines", "points_line", "TimedExecutable", "PendingResult", "ARG")


def lacks(module) -> list[str]:
    """What a checks module lacks of the protocol, or where it disagrees with it (empty: it speaks it)."""
    missing = [name for name in REQUIRED if not hasattr(module, name)]
    if hasattr(module, "REMOTE") and module.REMOTE != REMOTE:
        missing.append(f"REMOTE = {REMOTE!r} (it has {module.REMOTE!r})")
    prelude = getattr(module, "ANSWER_PRELUDE", ())
    if not (isinstance(prelude, tuple) and all(isinstance(m, str) and m.isidentifier() for m in prelude)):
        missing.append("ANSWER_PRELUDE as a tuple of module names")
    if not isinstance(getattr(module, "ADAPTER", ""), str):
        missing.append("ADAPTER as a module's name")
    return missing


def answer_prelude(module) -> list[str]:
    """The modules an answer cell finds star-imported before it."""
    return list(getattr(module, "ANSWER_PRELUDE", ()))
