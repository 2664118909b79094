"""The program builder runs an answer cell as the notebook's kernel does: learner code that looks
at where it runs finds the same name, module, files, command line and environment in both, so it
cannot hand the builder another program than the one the notebook runs.

The same probe runs in a kernel of a student's sandbox and, as an answer cell, in the builder's
fork (where what it found comes back as the message of the exception it raises); the two must
agree on everything it looked at. What the kernel's earlier cells left in its namespace is not
compared: the builder runs each answer cell after the notebook's imports (its prelude), not after
the notebook's other cells.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from autograder.adapters import lesson
from autograder.adapters.lesson import SHIPPED_MODULES
from autograder.course.paths import RELEASE
from autograder.kernel.kernels import GRADING_ENV, SandboxedKernelManager, SandboxSession
from autograder.kernel.sandbox import find_sandbox

#: Learner code that looks at where it runs.
PROBE = r"""
import json as _json
import os as _os
import sys as _sys


def where_am_i():
    import remat_lesson

    main = _sys.modules["__main__"]
    return {
        "__name__": __name__,
        "__main__ is this namespace": vars(main) is globals(),
        "__main__'s doc": main.__doc__,
        "working directory": _os.getcwd(),
        "its files": sorted(_os.listdir()),
        "/tmp": sorted(_os.listdir("/tmp")),
        "/run/kernel": _os.path.isdir("/run/kernel"),
        "argv": _sys.argv,
        "sys.path": _sys.path[:3],
        "isolated": _sys.flags.isolated,
        "environment": dict(_os.environ),
        "the lesson module": [remat_lesson.__name__, remat_lesson.__file__],
        "the kernel's modules": sorted(name for name in ("ipykernel", "IPython", "zmq", "jax", "numpy") if name in _sys.modules),
    }
"""  # noqa: E501


def test_builder_runs_a_cell_as_the_kernel_does(tmp_path):
    """What an answer cell sees of where it runs is the same in the kernel and in the builder."""
    assignment = tmp_path / "assignment"
    assignment.mkdir()
    for name in SHIPPED_MODULES:
        (assignment / name).write_bytes((RELEASE / name).read_bytes())
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"performance-05-test-{uuid.uuid4().hex[:8]}"
    session = SandboxSession(find_sandbox(), folder, assignment, env=dict(GRADING_ENV), adapter=lesson.ADAPTER)
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(PROBE + "print(_json.dumps(where_am_i()))")])
    cell = PROBE + "\n\ndef probe(x):\n    raise RuntimeError(_json.dumps(where_am_i()))\n"
    request = {
        "op": "program",
        "cells": {"probe": cell},
        "target": {"$learner": "probe"},
        "bind": None,
        "avals": [[[3], "float32"]],
        "prelude": ["remat_lesson"],
    }
    try:
        client = NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True)
        client.kernel_manager_class = SandboxedKernelManager
        client.km = client.create_kernel_manager()
        client.km.sandbox_session = session
        client.execute()
        answer = session.judge_helpers()["builder"].request(request, 120)
    finally:
        session.remove()
    printed = "".join(o.get("text", "") for o in notebook.cells[0].outputs if o.get("name") == "stdout")
    in_the_kernel = json.loads(printed)
    in_the_builder = json.loads(answer["raised"]["message"])
    assert in_the_kernel["__name__"] == "__main__" and in_the_kernel["the lesson module"][1].startswith("/tmp/")
    differing = {key: (in_the_kernel[key], in_the_builder.get(key)) for key in in_the_kernel}
    assert {key: pair for key, pair in differing.items() if pair[0] != pair[1]} == {}
