"""Shared runner and checker code for the phase 08 performance audit.

Nothing in this package is the learner's work: it builds the inputs, calls the functions in
starter/model.py or solution/model.py, writes the evidence directory, and checks it.
Only `spec`, `evidence` and `checks` are needed by the checker; they import no JAX, so the
stage 4 check can run on any machine that has the evidence directory.
"""
