"""The reference run: the instructor's notebooks, run once per grading run before any student.

Each source notebook (solutions and hidden tests) runs in the same sandbox and mode as a
learner's (`NBGRADER_EXECUTION=autograde`, the checks observing), in parallel on the workers.
It gives the grader two things:

- the reference every learner's test cell is judged against (autograder/verdicts.py): what
  each check compares, with the expected values the instructor's code computed; a solution
  that fails its own check stops grading before anyone is graded;
- the compile cache (autograder/compile_cache.py): every program the solutions compile.

A reference run must be clean: an error or a warning in any cell is reported.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from .compile_cache import add_entries, host_signature, writing_env
from .kernels import SandboxedKernelManager, SandboxSession
from .paths import ASSIGNMENT, KERNEL_NAME, NOTEBOOKS
from .sandbox import CACHE, Limits, sandbox_for_grading
from .verdicts import ReferenceError, load_checks, reference_of

#: Where the reference travels inside a grading task's template.
REFERENCE = "reference.json"
CHECKS_MODULE = "remat_checks.py"
#: The mode every graded kernel runs in: the grader's pipeline, the checks only observing.
GRADING_ENV = {"NBGRADER_EXECUTION": "autograde", "REMAT_LESSON_CHECKS": "observe"}


@dataclass
class ReferenceRun:
    """What one source notebook gave: its checks' reference, its compiled programs, its trouble."""

    notebook: str
    host: str
    reference: dict = field(default_factory=dict)
    entries: dict[str, bytes] = field(default_factory=dict)
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)  # errors and warnings, each with its cell


def unpack(template: dict[str, bytes], folder: Path, prefix: str) -> None:
    for relative, data in template.items():
        if relative.startswith(prefix):
            (folder / relative[len(prefix) :]).parent.mkdir(parents=True, exist_ok=True)
            (folder / relative[len(prefix) :]).write_bytes(data)


def shipped_files(template: dict[str, bytes], folder: Path) -> Path:
    """The assignment's files a kernel may see (never a notebook), in folder."""
    prefix = f"source/{ASSIGNMENT}/"
    folder.mkdir(parents=True, exist_ok=True)
    for relative, data in template.items():
        if relative.startswith(prefix) and not relative.endswith(".ipynb") and "/" not in relative[len(prefix) :]:
            (folder / relative[len(prefix) :]).write_bytes(data)
    return folder


def problems_of(notebook) -> list[str]:
    found = []
    for index, cell in enumerate(notebook.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                found.append(f"cell {index + 1}: {out.get('ename')}: {str(out.get('evalue', '')).strip()[:300]}")
            elif out.get("output_type") == "stream" and out.get("name") == "stderr" and out.get("text", "").strip():
                found.append(f"cell {index + 1} wrote to stderr: {out['text'].strip().splitlines()[-1][:300]}")
    return found


def run_reference(
    notebook: str,
    template: dict[str, bytes],
    *,
    unsafe: bool = False,
    limits: dict | None = None,
    timeout: int = 300,
    fill_cache: bool = True,
) -> ReferenceRun:
    """Run one source notebook of the template in a sandboxed kernel, observing its checks."""
    started = time.perf_counter()
    sandbox = sandbox_for_grading(Limits.from_config(limits), unsafe)
    scratch = Path(tempfile.mkdtemp(prefix="performance-05-reference-"))
    try:
        source = scratch / "source"
        unpack(template, source, f"source/{ASSIGNMENT}/")
        cache = scratch / "cache"
        cache.mkdir()
        inside = str(cache) if sandbox.unsafe else CACHE
        env = {**GRADING_ENV, **(writing_env(inside) if fill_cache else {})}
        session = SandboxSession(
            sandbox,
            scratch / "session",
            shipped_files(template, scratch / "assignment"),
            cache=cache if fill_cache else None,
            cache_writable=True,
            fork=False,
            env=env,
        )
        executed = nbformat.read(source / notebook, as_version=4)
        client = NotebookClient(
            executed,
            timeout=timeout,
            kernel_name=KERNEL_NAME,
            allow_errors=True,
            kernel_manager_class=SandboxedKernelManager,
            extra_arguments=["--IPKernelApp.log_level=ERROR"],
        )
        client.km = client.create_kernel_manager()
        client.km.session_for_kernels = session
        run = ReferenceRun(notebook, host_signature())
        try:
            client.execute()
        except Exception as error:  # no kernel, say: reported, and grading stops on it
            run.problems.append(f"the notebook could not run: {type(error).__name__}: {error}")
        finally:
            session.remove()
        run.problems += problems_of(executed)
        try:
            run.reference = reference_of(executed, load_checks(source / CHECKS_MODULE))
        except ReferenceError as error:
            run.problems.append(str(error))
        if fill_cache:
            run.entries = {p.name: p.read_bytes() for p in sorted(cache.iterdir()) if p.is_file()}
        run.seconds = time.perf_counter() - started
        return run
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def into_template(template: dict[str, bytes], runs: list[ReferenceRun], say=lambda line: None) -> dict[str, bytes]:
    """The template with the reference and the compile cache; ReferenceError when a run failed."""
    failed = [f"{run.notebook}: {problem}" for run in runs for problem in run.problems]
    if failed:
        raise ReferenceError(
            "the reference run of the instructor's notebooks was not clean; no one is "
            "graded against it:\n  " + "\n  ".join(failed)
        )
    missing = sorted(set(NOTEBOOKS) - {run.notebook for run in runs})
    if missing:
        raise ReferenceError(f"no reference run for {missing}")
    reference = {Path(run.notebook).stem: run.reference for run in runs}
    merged, count, size = add_entries(template, [(run.host, run.entries) for run in runs])
    merged[REFERENCE] = json.dumps(reference, sort_keys=True).encode()
    cells = sum(len(cells) for cells in reference.values())
    say(
        f"reference run: {cells} graded cells from the instructor's notebooks, {sum(r.seconds for r in runs):.1f} s of "
        f"work; compile cache: {count} executables ({size / 1e6:.1f} MB)"
    )
    return merged
