"""Adapters: what an assignment's environment needs beyond the grader's core, one module each.

A course's checks module names its adapter (`ADAPTER = "autograder.adapters.lesson"`); the core
loads it by that name (autograder/kernel/adapter.py) and never imports one itself:

- `jax_programs`: any JAX course: JAX preloaded in the kernel host, the judge's program builder
  and artifact runner (a learner's JAX program rebuilt from its answer cells and judged as
  data), JAX's persistent compile cache filled by the reference run;
- `lesson`: this bundle's lesson (performance-05): the JAX adapter with Matplotlib for the
  notebooks that plot and the lesson's own environment switch, and the bundle's assignment as
  it lies in a checkout (`--bundle`, `autograder install-assignment`).
"""
