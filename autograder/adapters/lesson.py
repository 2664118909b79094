"""This bundle's lesson (performance-05, "Memory, rematerialization, and optimization tradeoffs"),
the grader's first adapter: the only module of the grader that names the lesson.

- `ADAPTER`: the JAX adapter (autograder/adapters/jax_programs/), with Matplotlib imported from a
  student's second notebook on (some stages plot) and the lesson's own switch for a backend
  without a memory analysis (`REMAT_LESSON_NO_MEMORY_ANALYSIS`) passed to the kernels. Its checks
  module, `remat_checks`, names it (`ADAPTER = "autograder.adapters.lesson"`).
- `BUNDLE`: the assignment as it lies in a checkout of the bundle: the five instructor notebooks
  and the modules they import in solutions/, the files learners read in data/ (what `autograder
  grade --bundle CHECKOUT` and `autograder install-assignment` take; never a solution's
  *_reference.py). The checkout's nbgrader_config.py names this module as its layout.
"""

from __future__ import annotations

import dataclasses

from autograder.adapters.jax_programs import ADAPTER as JAX
from autograder.course.assignment import BundleLayout

#: The assignment's name in the course (nbgrader's assignment id).
ASSIGNMENT = "performance-05"
#: The five stages, in teaching order.
NOTEBOOKS = (
    "01-understand.ipynb",
    "02-build.ipynb",
    "03-experiment.ipynb",
    "04-exercise.ipynb",
    "05-evidence.ipynb",
)
#: Files besides the notebooks that ship with the assignment (and are restored at grading).
SHIPPED_MODULES = ("remat_checks.py", "remat_lesson.py", "remat_evidence.py", "remat_sweep.py")
#: The module of the assignment that speaks the judge's protocol (judge/protocol.py).
CHECKS_MODULE = "remat_checks"
#: Ship with the release from data/: the evidence template learners fill in, and the recorded
#: reference run (its printed text and its figure) they compare their own runs with.
SHIPPED_FILES = ("evidence-template.md", "reference-execution.txt", "storage-views.png")

BUNDLE = BundleLayout(
    ASSIGNMENT,
    {
        **{name: f"solutions/{name}" for name in (*NOTEBOOKS, *SHIPPED_MODULES)},
        **{n: f"data/{n}" for n in SHIPPED_FILES},
    },
    # where its files come from, and the learners' release (`make lab` serves it)
    handed_out=("solutions", "data", "notebooks"),
)

ADAPTER = dataclasses.replace(
    JAX,
    name="performance-05 lesson",
    kernel_preload_later=("matplotlib", "matplotlib.pyplot"),
    inherited_env=(*JAX.inherited_env, "REMAT_LESSON_NO_MEMORY_ANALYSIS"),
)
