"""The grader: grade a class's nbgrader submissions in sandboxed kernels, every test cell judged in
the grader, keep the class gradebook, write grades and feedback. Installed as `autograder`;
imports nothing from `bundle` (the bundle's authoring side)."""

import sys

# nbformat imports jsonschema to read a notebook, and jsonschema imports rfc3987_syntax, where
# available, to check one string format ("iri"): it builds 38 parsers on import, 0.7 s of CPU in
# every process of the grader (each Dask worker, each command). No schema the grader validates
# uses that format; seen as absent, it is the one format jsonschema leaves unchecked.
# (None in sys.modules is the import system's "not importable"; typeshed allows modules only.)
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
