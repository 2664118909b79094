"""The kernel host, without a sandbox or a kernel (autograder/sandboxed/kernel_host_program.py and the
grader's side, kernel_host.py): the workspace each notebook starts from, what a host refuses,
and its line protocol, with `become_kernel` replaced by a stand-in that only reports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder.course.paths import ROOT
from autograder.kernel.control_line import BOOTSTRAP, PROGRAM_PLACEHOLDER, program_text
from autograder.kernel.kernel_host import PROGRAM, KernelHost, KernelHostError, alive
from autograder.kernel.sandbox import Limits
from autograder.sandboxed import kernel_host_program as program


@pytest.fixture
def layout(tmp_path) -> dict:
    scratch, connection, assignment = tmp_path / "scratch", tmp_path / "connection", tmp_path / "assignment"
    for folder in (scratch, connection, assignment):
        folder.mkdir()
    (scratch / program.SCRATCH_MARK).touch()
    (assignment / "remat_lesson.py").write_text("SHIPPED = True\n")
    return {
        "uid": None,
        "own_pid_namespace": False,
        "warm": True,
        "scratch": str(scratch),
        "keep": [],
        "workdir": str(scratch / "submission"),
        "assignment": str(assignment),
        "connection": str(connection),
        "limits": Limits().as_dict(),
        "preload": ["json"],
        "preload_later": ["matplotlib"],  # what only some notebooks import (the lesson's adapter's)
    }


def test_program_sent_is_module_after_confines():
    """The program sent is the module's text after confines."""
    text = program_text(PROGRAM, {"warm": True})
    compile(text, "<kernel host>", "exec")
    assert text.index("def drop_privileges") < text.index("class Host") < text.index("main(_json.loads")
    assert "from __future__" not in PROGRAM  # dropped: only a first line may have one


def test_fresh_workspace_holds_only_shipped(layout):
    """A fresh workspace holds the shipped files and nothing a notebook left."""
    scratch = Path(layout["scratch"])
    host = program.Host(layout)
    host.fresh_workspace()
    (scratch / "submission" / "remat_lesson.py").write_text("SHIPPED = False  # shadowed by the learner\n")
    (scratch / "ipython" / "startup.py").write_text("import os\n")
    (Path(layout["connection"]) / "kernel-1").write_text("socket")
    host.fresh_workspace()
    assert sorted(p.name for p in scratch.iterdir()) == sorted(
        [program.SCRATCH_MARK, "cache", "home", "ipython", "matplotlib", "submission"]
    )
    assert (scratch / "submission" / "remat_lesson.py").read_text() == "SHIPPED = True\n"
    assert list((scratch / "ipython").iterdir()) == [] and list(Path(layout["connection"]).iterdir()) == []


def test_emptying_keeps_the_given_mounts(tmp_path):
    """Emptying keeps the mounts it is told to keep."""
    venv = tmp_path / "tmp" / "venv" / "lib"
    venv.mkdir(parents=True)
    (venv / "numpy.py").write_text("")
    (tmp_path / "tmp" / "venv" / "written-by-a-kernel").write_text("")
    (tmp_path / "tmp" / "other").mkdir()
    program.empty(str(tmp_path / "tmp"), frozenset({str(venv)}))
    assert (venv / "numpy.py").exists()
    assert sorted(p.name for p in (tmp_path / "tmp").rglob("*")) == ["lib", "numpy.py", "venv"]


def test_unsandboxed_host_empties_marked_only(layout):
    """Outside a sandbox, a host empties only a folder the grader marked."""
    os.unlink(Path(layout["scratch"]) / program.SCRATCH_MARK)
    with pytest.raises(SystemExit, match="not a grading scratch folder"):
        program.Host(layout)


def test_descendants_are_exactly_those_below():
    """Descendants are every process below and no other.

    A child that starts a thread, and from the thread a grandchild: both are found (the
    grandchild is the thread's child, listed under the thread's task), as psutil finds them."""
    from autograder.kernel import process_limits

    tree = (
        "import subprocess, sys, threading, time\n"
        "def start():\n"
        "    child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "    print(child.pid, flush=True)\n"
        "threading.Thread(target=start).start()\n"
        "time.sleep(60)\n"
    )
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child = subprocess.Popen([sys.executable, "-c", tree], stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(child.stdout.readline())
        below = process_limits.descendants(os.getpid())
        assert child.pid in below and grandchild in below and other.pid in below  # all of this test's
        assert sorted(process_limits.descendants(child.pid)) == [grandchild]
        assert sorted(process_limits._descendants_by_psutil(child.pid)) == [grandchild]
        assert process_limits.descendants(grandchild) == []
    finally:
        for process in (child, other):
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
    os.kill(grandchild, signal.SIGKILL)
    assert process_limits.descendants(child.pid) == []  # gone


def test_unsandboxed_host_ends_own_kernels(layout):
    """Outside a sandbox, a host ends the kernels it started and no other process."""
    host = program.Host(layout)
    mine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        host.kernel_groups.append(mine.pid)
        host.end_the_others()
        assert mine.wait(timeout=10) == -signal.SIGKILL
        assert other.poll() is None and host.kernel_groups == []
    finally:
        other.kill()
        other.wait()


STAND_IN = """
import gc, json, os, sys, time
sys.path.insert(0, {root!r})
import autograder.sandboxed.kernel_host_program as program

SCRATCH = None
PLOTTING = []  # what Matplotlib's folder held each time the host imported the later preload


def start_ipykernel(cells):
    seen = {{
        "cwd_files": sorted(os.listdir()), "env": dict(os.environ), "argv": sys.argv, "cells": cells,
        "plotting": PLOTTING, "frozen": gc.get_freeze_count() > 0,
    }}
    # Written whole, then renamed: the test reads the file as soon as it exists.
    path = os.path.join({report!r}, f"kernel-{{os.getpid()}}.json")
    with open(path + ".part", "w") as handle:
        json.dump(seen, handle)
    os.rename(path + ".part", path)
    with open(os.path.join(SCRATCH, "matplotlib", "matplotlibrc"), "w") as handle:
        handle.write("backend: module://planted\\n")  # what a kernel could leave for the host's import
    time.sleep(60)

program.import_the_kernels_stack = lambda preload: None
program.import_where_possible = lambda names: PLOTTING.append(sorted(os.listdir(os.path.join(SCRATCH, "matplotlib"))))
program.start_ipykernel = start_ipykernel


def main(config):
    global SCRATCH
    SCRATCH = config["scratch"]
    program.main(config)
"""
COMMAND = [sys.executable, "-c", BOOTSTRAP, PROGRAM_PLACEHOLDER]


def _host(layout, report: Path) -> KernelHost:
    source = STAND_IN.format(root=str(ROOT), report=str(report))
    return KernelHost(lambda: COMMAND, layout, dict(os.environ), program=source)


def _seen_by(kernel, report: Path) -> dict:
    """What the stand-in kernel reported (it writes its report as it starts)."""
    deadline = time.monotonic() + 20
    while not (report / f"kernel-{kernel.pid}.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return json.loads((report / f"kernel-{kernel.pid}.json").read_text())


def test_warm_host_forks_kernel_per_request(layout, tmp_path):
    """A warm host forks a kernel per request and ends the one before."""
    report = tmp_path / "report"
    report.mkdir()
    host = _host(layout, report)
    try:
        first = host.launch({"key": "k"}, ["--quiet"], {"NBGRADER_EXECUTION": "autograde"})
        seen = _seen_by(first, report)
        connection = str(Path(layout["scratch"]) / ".kernel.json")
        assert seen == {
            "cwd_files": ["remat_lesson.py"],
            "env": {"NBGRADER_EXECUTION": "autograde"},
            "argv": ["ipykernel_launcher", "-f", connection, "--quiet"],
            "cells": str(Path(layout["scratch"]) / program.CELL_FILES),
            "plotting": [],  # a student's first notebook pays for no plotting it may not do
            "frozen": True,  # what the host holds is out of the kernel's garbage collections
        }
        assert json.loads(Path(connection).read_text()) == {"key": "k"}
        second = host.launch({"key": "k2"}, [], {})
        assert second.pid != first.pid
        first.wait(timeout=10)  # ended by the host before it forked the second
        assert not alive(first.pid) and alive(second.pid)
        # From the second notebook on, the host has the plotting stack, imported once, in a
        # workspace already emptied of what the first kernel left for its configuration.
        assert _seen_by(second, report)["plotting"] == [[]]
        third = host.launch({"key": "k3"}, [], {})
        assert _seen_by(third, report)["plotting"] == [[]]
    finally:
        host.stop()
    # SIGKILL is sent by stop(); the process is gone once the kernel has delivered it.
    deadline = time.monotonic() + 10
    while alive(second.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(second.pid)


def test_failed_host_start_reports_output(layout):
    """A host that does not start is an error that says what it said."""
    broken = KernelHost(lambda: COMMAND, layout, dict(os.environ), program="def main(config):\n    print('no')\n")
    with pytest.raises(KernelHostError, match="did not start: the process ended"):
        broken.start()


def test_long_print_arrives_in_pieces(monkeypatch):
    """A long print leaves the kernel in pieces the grader takes."""
    from ipykernel import iostream

    from autograder.kernel.kernels import MAX_KERNEL_MESSAGE

    long_print = "x" * (5 * program.PRINT_PIECE + 7)
    monkeypatch.setattr(
        iostream.OutStream, "_flush_buffers", lambda stream: iter([({"cell": 1}, long_print), ({"cell": 2}, "")])
    )
    program.print_in_pieces()
    pieces = list(iostream.OutStream._flush_buffers(None))
    assert "".join(text for _, text in pieces) == long_print  # nothing lost, nothing added
    assert [len(text) for _, text in pieces] == [program.PRINT_PIECE] * 5 + [7]
    assert {parent["cell"] for parent, _ in pieces} == {1}  # each piece keeps its cell
    assert program.PRINT_PIECE * 4 < MAX_KERNEL_MESSAGE  # a piece, JSON-escaped, fits a message
