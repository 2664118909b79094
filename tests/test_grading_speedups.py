"""What makes grading fast must not make it wrong or leaky.

The compile cache (autograder/compile_cache.py): student kernels load from it, never write to it,
and only on the kind of machine that filled it. The zygote (autograder/zygote.py): each kernel is
a fork, so nothing one notebook does reaches the next; forks stay in the student's sandbox; a
kernel that kills the zygote costs nothing but a restart. That grades do not change with either
is checked on a whole class in test_grading_engine.py.
"""
from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError

from autograder import compile_cache
from autograder.execute import execute_notebook
from autograder.paths import ROOT
from autograder.sandbox import SandboxedKernelManager, bwrap_path
from autograder.zygote import ZYGOTES, stop_zygotes

needs_bwrap = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed")

#: In the kernel: count this process's persistent-cache hits from here on.
COUNT_HITS = """
from jax._src import monitoring
HITS = []
monitoring.register_event_listener(lambda event, **kw: HITS.append(event) if event == '/jax/compilation_cache/cache_hits' else None)
"""
DOUBLE = "import jax, jax.numpy as jnp\nprint(float(jax.jit(lambda a: (a * 2.5).sum())(jnp.arange(7.0))))"


def _notebook(*sources: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])


def _run(notebook, workdir: Path, **manager) -> nbformat.NotebookNode:
    """Run notebook in a kernel of SandboxedKernelManager(**manager), working in workdir."""
    client = NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True,
                            kernel_manager_class=SandboxedKernelManager,
                            resources={"metadata": {"path": str(workdir)}},
                            extra_arguments=["--IPKernelApp.log_level=ERROR"])
    client.km = client.create_kernel_manager()
    for name, value in manager.items():
        setattr(client.km, name, value)
    client.execute()
    return notebook


def _stdout(notebook, index: int) -> str:
    return "".join(o.get("text", "") for o in notebook.cells[index].outputs if o.output_type == "stream" and o.name == "stdout")


def _error(notebook, index: int) -> str:
    return "".join(f"{o.ename}: {o.evalue}" for o in notebook.cells[index].outputs if o.output_type == "error")


@pytest.fixture
def filled_cache(tmp_path) -> Path:
    """A cache filled the trusted way: the bundle's unsandboxed notebook runner with writing_env."""
    cache, work = tmp_path / "cache", tmp_path / "instructor"
    work.mkdir()
    nbformat.write(_notebook(DOUBLE), work / "fill.ipynb")
    run = execute_notebook(work / "fill.ipynb", timeout=120, env=compile_cache.writing_env(cache))
    assert run.error is None, run.error
    assert _stdout(run.notebook, 0).strip() == "52.5"
    assert any(cache.iterdir()), "the trusted kernel wrote no cache entry"
    return cache


@needs_bwrap
def test_a_student_kernel_loads_from_the_cache_and_cannot_write_to_it(filled_cache, tmp_path):
    student = tmp_path / "student"
    student.mkdir()
    before = sorted(p.name for p in filled_cache.iterdir())
    write = ("import os\ntry:\n    open(os.path.join(os.environ['JAX_COMPILATION_CACHE_DIR'], 'planted-cache'), 'wb').write(b'x')\n"
             "    print('written')\nexcept OSError as error:\n    print('refused', type(error).__name__)")
    notebook = _run(_notebook(COUNT_HITS, DOUBLE, "print(len(HITS))", write), student,
                    compile_cache=str(filled_cache), hide=[str(tmp_path)])
    assert _stdout(notebook, 1).strip() == "52.5"
    assert int(_stdout(notebook, 2)) >= 1, "the program the instructor's kernel compiled was compiled again"
    assert _stdout(notebook, 3).startswith("refused"), _stdout(notebook, 3)
    assert sorted(p.name for p in filled_cache.iterdir()) == before


def test_a_cache_filled_on_another_kind_of_machine_is_not_used(tmp_path):
    filled = compile_cache.Filled("01-understand.ipynb", "another-cpu", {"jit_f-abc-cache": b"native code"})
    template = compile_cache.into_template({"nbgrader_config.py": b""}, [filled])
    course = tmp_path / "course"
    for relative, data in template.items():
        (course / relative).parent.mkdir(parents=True, exist_ok=True)
        (course / relative).write_bytes(data)
    assert compile_cache.usable_cache(course) is None
    (course / compile_cache.HOST).write_text(compile_cache.host_signature())
    assert compile_cache.usable_cache(course) == course / compile_cache.ENTRIES


def test_no_cache_entries_leave_the_template_unchanged():
    template = {"nbgrader_config.py": b""}
    assert compile_cache.into_template(template, [compile_cache.Filled("x.ipynb", "h", {}, error="boom")]) == template


@pytest.fixture
def forking(tmp_path):
    yield
    stop_zygotes()


def _zygote_pid() -> int:
    (zygote,) = ZYGOTES.values()
    return zygote.process.pid


@needs_bwrap
def test_forked_kernels_share_nothing_and_stay_in_the_sandbox(forking, tmp_path):
    student = tmp_path / "student"
    student.mkdir()
    options = {"fork_kernels": True, "hide": [str(tmp_path)]}
    first = _run(_notebook("import numpy\nnumpy.planted = 1\nLEFT_BEHIND = 2\nimport os\nprint(os.getpid())"), student, **options)
    zygote = _zygote_pid()
    second = _run(_notebook("import numpy, os\nprint(hasattr(numpy, 'planted'), 'LEFT_BEHIND' in globals())",
                            f"print(sorted(set(os.listdir({str(ROOT)!r})) & {{'solutions', 'autograder', 'tests'}}), os.getcwd())",
                            "print(os.getpid())"), student, **options)
    assert _zygote_pid() == zygote, "the second kernel should come from the same zygote"
    assert _stdout(second, 0).strip() == "False False"
    assert _stdout(second, 1).strip() == "[] /tmp/submission"
    assert _stdout(first, 0) != _stdout(second, 2), "each notebook gets its own process"


@needs_bwrap
def test_a_kernel_that_kills_the_zygote_only_costs_a_restart(forking, tmp_path):
    student = tmp_path / "student"
    student.mkdir()
    options = {"fork_kernels": True, "hide": [str(tmp_path)]}
    _run(_notebook("print(1)"), student, **options)
    first = _zygote_pid()
    # Its parent is the zygote; the sandbox's PID namespace ends with it, this kernel included.
    with pytest.raises(DeadKernelError):
        _run(_notebook("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nimport time\ntime.sleep(30)"), student, **options)
    later = _run(_notebook("print(6 * 7)"), student, **options)
    assert _stdout(later, 0).strip() == "42"
    assert _zygote_pid() != first


@needs_bwrap
def test_an_endless_forked_kernel_is_interrupted(forking, tmp_path):
    student = tmp_path / "student"
    student.mkdir()
    notebook = _notebook("import time\nwhile True:\n    time.sleep(0.01)", "print('next cell runs')")
    client = NotebookClient(notebook, timeout=3, kernel_name="python3", allow_errors=True, interrupt_on_timeout=True,
                            kernel_manager_class=SandboxedKernelManager, resources={"metadata": {"path": str(student)}})
    client.km = client.create_kernel_manager()
    client.km.fork_kernels, client.km.hide = True, [str(tmp_path)]
    started = time.monotonic()
    client.execute()
    assert time.monotonic() - started < 60
    assert "KeyboardInterrupt" in _error(notebook, 0) or "Timeout" in _error(notebook, 0)
    assert _stdout(notebook, 1).strip() == "next cell runs"


def test_stopping_the_zygotes_ends_their_kernels(forking, tmp_path):
    student = tmp_path / "student"
    student.mkdir()
    notebook = _notebook("import os\nprint(os.getpid())")
    _run(notebook, student, fork_kernels=True, hide=[str(tmp_path)])
    zygote = _zygote_pid()
    stop_zygotes()
    assert not ZYGOTES
    assert not Path(f"/proc/{zygote}").exists()
