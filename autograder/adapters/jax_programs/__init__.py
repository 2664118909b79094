"""The JAX adapter: what a course whose notebooks are JAX programs needs beyond the grader's core.

- every kernel imports NumPy and JAX: a student's warm kernel host imports them once;
- the judge's program builder and artifact runner (helpers.py, sandboxed/): a learner's JAX
  program is rebuilt from its answer cells and judged as data, never taken from the kernel
  (evidence.py answers a check's requests: gradient, value and gradient, residuals, plan);
- JAX's persistent compile cache (compile_cache.py): the reference run fills it, learners' kernels
  read it, on hosts with the CPU and the jax and jaxlib releases of the one that filled it;
- the grader's JAX and XLA settings reach the kernels; arrays the judge sends arrive as JAX's.
"""

from __future__ import annotations

from autograder.adapters.jax_programs.compile_cache import JAX_CACHE
from autograder.adapters.jax_programs.evidence import ProgramEvidence
from autograder.adapters.jax_programs.helpers import SENT, ArtifactRunner, ProgramBuilder
from autograder.kernel.adapter import Adapter

ADAPTER = Adapter(
    "jax",
    kernel_preload=("numpy", "jax", "jax.numpy"),
    inherited_env=("JAX_", "XLA_", "TF_CPP_"),
    compiler_cache=JAX_CACHE,
    compiler_distributions=("jax", "jaxlib"),
    helpers={"artifacts": ArtifactRunner, "builder": ProgramBuilder},
    evidence=ProgramEvidence,
    native_arrays="jax.numpy.asarray",
    kernel_operations=(SENT / "kernel_operations.py",),
)
