"""Nothing of the grader's is within a learner's reach: from inside a kernel, the NumPy-only worker
and the program builder's fork, no handle of any other process opens, and none of their own is the
grader's line.

Learner code in each place walks /proc: every other process it sees (the first process of its
sandbox, which holds the grader's line) and each of its tasks, every entry there. A directory it
can list (fd, fdinfo, map_files, ns, task/N/fd...), a link it can read (cwd, root, exe, an fd), a
file it can read that is not one of the world-readable summaries in PUBLIC (environ, mem, maps,
auxv, stack...), a command line that is not all zeros, or a file it can write is a handle: the
test fails on each. Then its own descriptors are compared with the grader's line: none may be one
of its pipes.

Run as root and as an ordinary user: graded as root, the kernel's uid differs from every process
of the grader's and root hides most of this; graded as an ordinary user (CI runs the tests as
`ci-grader`), every process of the sandbox has the kernel's uid.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from autograder.adapters.jax_programs.helpers import ProgramBuilder
from autograder.adapters.lesson import SHIPPED_MODULES
from autograder.course.paths import RELEASE
from autograder.kernel.helpers import NumpyOnlyRunner
from autograder.kernel.kernels import SandboxedKernelManager, SandboxSession
from autograder.kernel.sandbox import find_sandbox

#: Entries of /proc/PID (and of its tasks) readable by any process that sees PID, and which tell
#: nothing of the grader's: the process's state, limits and scheduling, and the mounts and
#: namespace maps the reader shares with it.
PUBLIC = frozenset(
    {
        "status", "stat", "statm", "comm", "limits", "sched", "schedstat", "autogroup", "timens_offsets",
        "wchan", "cpuset", "cgroup", "oom_score", "oom_adj", "oom_score_adj", "loginuid", "sessionid",
        "coredump_filter", "uid_map", "gid_map", "projid_map", "setgroups", "children", "mounts", "mountinfo",
        "mountstats", "net", "attr", "arch_status", "cpu_resctrl_groups", "patch_state", "ksm_stat",
        "ksm_merging_pages",
    }
)  # fmt: skip

#: What learner code runs to look: `reach()` returns {"others": [a handle opened...], "own": {fd: target}}.
WALK = r"""
import json as _json
import os as _os

_PUBLIC = set(PUBLIC_NAMES)


def _handles(where):
    found = []
    try:
        names = _os.listdir(where)
    except OSError:
        return found
    for name in names:
        path = f"{where}/{name}"
        if name == "task":
            continue
        if _os.path.islink(path):
            try:
                found.append(f"{path} -> {_os.readlink(path)}")
            except OSError:
                pass
            continue
        if _os.path.isdir(path):
            try:
                inside = _os.listdir(path)
            except OSError:
                continue
            if name not in _PUBLIC and inside:
                found.append(f"{path}/ lists {len(inside)}")
            continue
        try:
            fd = _os.open(path, _os.O_WRONLY)
        except OSError:
            pass
        else:
            try:
                _os.write(fd, b"0\n")
                found.append(f"{path} written")
            except OSError:
                pass
            finally:
                _os.close(fd)
        if name in _PUBLIC:
            continue
        try:
            fd = _os.open(path, _os.O_RDONLY)
        except OSError:
            continue
        try:
            data = _os.read(fd, 4096)
        except OSError:
            continue
        finally:
            _os.close(fd)
        if data.strip(b"\0"):
            found.append(f"{path} reads {data[:32]!r}")
    return found


def reach():
    me = _os.getpid()
    others = []
    for entry in sorted(_os.listdir("/proc")):
        if not entry.isdigit() or int(entry) == me:
            continue
        others += _handles(f"/proc/{entry}")
        try:
            tasks = _os.listdir(f"/proc/{entry}/task")
        except OSError:
            tasks = []
        for task in tasks:
            others += _handles(f"/proc/{entry}/task/{task}")
    own = {}
    for fd in _os.listdir("/proc/self/fd"):
        try:
            own[fd] = _os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            pass
    return {"pid": me, "others": sorted(others)[:20], "own": own}
""".replace("PUBLIC_NAMES", repr(sorted(PUBLIC)))


def line_pipes(line) -> set[str]:
    """The grader's line as a process's /proc/PID/fd would show it: its two pipes."""
    return {f"pipe:[{os.fstat(fd).st_ino}]" for fd in (line._requests_out, line._answers_in)}


def first_process_descriptors(process) -> list[str] | None:
    """What the sandbox's first process holds, seen from the grader: its descriptors' targets.
    None where the grader may not look (an ordinary user's grader: the process is not dumpable,
    so its descriptors are root's to list)."""
    from autograder.kernel.kernel_host import namespace_pids
    from autograder.kernel.process_limits import descendants

    first = next(pid for pid in descendants(process.pid) if len(namespace_pids(pid)) > 1)
    folder = f"/proc/{first}/fd"
    try:
        return sorted(os.readlink(f"{folder}/{fd}") for fd in os.listdir(folder))
    except PermissionError:
        assert os.geteuid() != 0
        return None


def assert_holds_only(held: list[str] | None, grader: set[str], others: int = 0) -> list[str]:
    """The first process holds /dev/null on its three standard descriptors, the grader's line, and
    `others` more; those others (for the caller to check). Nothing to check where held is None."""
    if held is None:
        return []
    rest = [target for target in held if target != "/dev/null" and target not in grader]
    assert held.count("/dev/null") == 3 and set(held) >= grader and len(rest) == others, held
    return rest


def assert_nothing_reached(seen: dict, grader: set[str]) -> None:
    """seen: what reach() found; grader: the grader's line (line_pipes)."""
    assert seen["others"] == [], "learner code opened handles of another process:\n  " + "\n  ".join(seen["others"])
    assert [target for target in seen["own"].values() if target in grader] == [], seen["own"]


@pytest.fixture
def assignment(tmp_path) -> Path:
    folder = tmp_path / "assignment"
    folder.mkdir()
    for name in SHIPPED_MODULES:
        (folder / name).write_bytes((RELEASE / name).read_bytes())
    return folder


@pytest.mark.parametrize("fork", [True, False], ids=["warm-host", "cold"])
def test_kernel_reaches_no_other_process(tmp_path, assignment, fork):
    """A kernel opens no handle of its host (the sandbox's first process) and holds no end of its line."""
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"performance-05-test-{uuid.uuid4().hex[:8]}"
    session = SandboxSession(find_sandbox(), folder, assignment, fork=fork)
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(WALK + "\nprint(_json.dumps(reach()))")])
    try:
        client = NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True)
        client.kernel_manager_class = SandboxedKernelManager
        client.km = client.create_kernel_manager()
        client.km.sandbox_session = session
        with client.setup_kernel():
            grader = line_pipes(session.host.line)
            held = first_process_descriptors(session.host.process)
            client.execute_cell(notebook.cells[0], 0)
    finally:
        session.remove()
    printed = "".join(o.get("text", "") for o in notebook.cells[0].outputs if o.get("name") == "stdout")
    assert printed, notebook.cells[0].outputs
    seen = json.loads(printed)
    assert seen["pid"] != 1  # the host is the sandbox's first process, not the kernel
    assert_nothing_reached(seen, grader)
    assert_holds_only(held, grader)  # the host: /dev/null and its line, nothing else of the grader's


def test_numpy_only_worker_reaches_no_other_process(tmp_path, assignment):
    """The NumPy-only process's worker (where an answer cell runs) opens no handle of the process
    holding the judge's line, and holds no end of it."""
    helper = NumpyOnlyRunner(find_sandbox(), tmp_path / "numpy-only", assignment=assignment)
    try:
        loaded = helper.request({"op": "load", "cell": 1, "source": WALK}, 120)
        assert loaded == {"loaded": True}, loaded
        held = first_process_descriptors(helper.process)
        answer = helper.request({"op": "call", "cell": 1, "name": "reach", "args": []}, 120)
        from autograder.sandboxed.wire import decode

        grader = line_pipes(helper.line)
        seen = decode(answer["result"])
        assert_nothing_reached(seen, grader)
        # Its first process holds /dev/null, the line, and the worker's two pipes (the worker's own).
        workers = assert_holds_only(held, grader, others=2)
        assert set(workers) <= set(seen["own"].values()), (workers, seen["own"])
    finally:
        helper.stop()


def test_builder_fork_reaches_no_other_process(tmp_path, assignment):
    """The program builder's fork (where answer cells run) opens no handle of the builder, and
    holds no end of the judge's line."""
    cell = WALK + "\n\ndef probe(x):\n    raise RuntimeError(_json.dumps(reach()))\n"
    request = {"op": "program", "cells": {"probe": cell}, "target": {"$learner": "probe"}, "bind": None}
    helper = ProgramBuilder(find_sandbox(), tmp_path / "builder", assignment=assignment)
    try:
        answer = helper.request({**request, "avals": [[[3], "float32"]]}, 120)
        held = first_process_descriptors(helper.process)
        grader = line_pipes(helper.line)
        assert_nothing_reached(json.loads(answer["raised"]["message"]), grader)
        assert_holds_only(held, grader)
    finally:
        helper.stop()
