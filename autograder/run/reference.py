"""The reference run: the instructor's notebooks, graded once per grading run before any student.

Each source notebook (solutions and hidden tests) runs in the same sandbox and mode as a
learner's (`NBGRADER_EXECUTION=autograde`), each test cell checked by the judge exactly as a
learner's is (autograder/judge/core.py), in parallel on the workers. As a learner's notebooks share
their session, the notebooks one worker runs share one (`keep_for`): the judge's helpers one
notebook started serve the next, instead of starting again for each. It gives the grader two things:

- a self-test: every test cell must earn all its points on the instructor's solutions, and no
  cell may raise or warn; otherwise nobody is graded (CannotGradeSafely, exit 3);
- the compile cache (autograder/kernel/compile_cache.py), where the assignment's adapter has one:
  every program the solutions' kernels and the judge's helpers compile.

A clean reference run may be kept (`GradingOptions.reference_cache`, `--reference-cache DIR`)
under a key of everything it depends on: the assignment's source, the grader's own code, this
host and the run's options. A later run with the same key (a regrade after a late submission)
takes it from there instead of running the instructor's notebooks again; any change makes a new
key (a run without the sandbox may take a sandboxed run's, never the other way round). Two runs
with the same key at once run it once: the second waits for the first's (`claimed_reference`).
A run with a remote scheduler always runs its own (its workers are other hosts).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import nbformat

from autograder.course.errors import ExitCode, GraderError
from autograder.course.paths import KERNEL_NAME
from autograder.course.settings import judge_source
from autograder.course.task_template import CompileCache, CourseSource, TaskTemplate
from autograder.judge.core import is_test_cell
from autograder.kernel.adapter import load_adapter
from autograder.kernel.compile_cache import host_signature
from autograder.kernel.kernels import GRADING_ENV, SandboxSession
from autograder.kernel.sandbox import CACHE, sandbox_for_grading
from autograder.run.locks import held
from autograder.run.options import GradingOptions


class ReferenceProblem(GraderError, RuntimeError):
    """The instructor's solutions do not pass their own checks: no student can be graded fairly."""

    exit_code = ExitCode.UNSAFE


@dataclass
class ReferenceRun:
    """What one source notebook gave: its compiled programs, its trouble."""

    notebook: str
    host: str
    #: the compile cache's files this notebook added (one worker's notebooks share a cache: a program
    #: an earlier one compiled is that one's); only the merge of every run's is the cache
    entries: dict[str, bytes] = field(default_factory=dict)
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)  # errors and warnings, each with its cell
    #: the judge's helpers its checks asked (autograder/kernel/helpers.py), started ahead for a learner's
    #: notebook of the same name; None where that is not known (all are started ahead)
    helpers: list[str] | None = None


def problems_of(notebook) -> list[str]:
    found = []
    for index, cell in enumerate(notebook.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                found.append(f"cell {index + 1}: {out.get('ename')}: {str(out.get('evalue', '')).strip()[:300]}")
            elif out.get("output_type") == "stream" and out.get("name") == "stderr" and out.get("text", "").strip():
                found.append(f"cell {index + 1} wrote to stderr: {out['text'].strip().splitlines()[-1][:300]}")
    return found


def solution_shortfalls(notebook) -> list[str]:
    """Each test cell of an executed, judged source notebook that earned less than its points."""
    found = []
    for index, cell in enumerate(notebook.cells):
        if not is_test_cell(cell):
            continue
        points = float(cell.metadata["nbgrader"].get("points", 0))
        outputs = cell.get("outputs", [])
        results = [o for o in outputs if o.get("output_type") == "execute_result"]
        try:  # a judged cell (or one that returns its points) says what it earned ...
            earned = float(results[-1].get("data", {}).get("text/plain"))
        except (IndexError, TypeError, ValueError):  # ... a plain one earns all or nothing, as nbgrader scores it
            earned = 0.0 if any(o.get("output_type") == "error" for o in outputs) else points
        if earned is None or abs(earned - points) > 1e-9:
            report = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
            grade_id = cell.metadata["nbgrader"].get("grade_id", f"cell {index + 1}")
            found.append(f"{grade_id}: the solutions earn {earned} of {points:g} points:\n    {report.strip()[:1500]}")
    return found


@dataclass
class _ReferenceSession:
    """One worker's sandbox session for the reference run: its scratch folder (the source, the
    shipped files, the compile cache being filled) and its judge's helpers, kept from one of the
    run's notebooks to the next on the same worker, as a student's are from one notebook to the
    next (each notebook's kernel is a fresh sandbox; the helpers are made fresh per notebook)."""

    keep_for: str | None  # the run it may be kept for (None: this notebook's alone)
    scratch: Path
    session: SandboxSession
    cache: Path | None

    def remove(self) -> None:
        try:
            self.session.remove()
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)


#: The session the last reference notebook on this worker left for the next one of its run.
_KEPT: _ReferenceSession | None = None


def release_reference_session() -> None:
    """End the kept reference session of this process, if any: the reference run is over."""
    global _KEPT
    kept, _KEPT = _KEPT, None
    if kept is not None:
        kept.remove()


def _reference_session(source: CourseSource, options: GradingOptions, adapter, keep_for: str | None):
    """The session kept for this run by this worker's last reference notebook, or a new one."""
    global _KEPT
    kept, _KEPT = _KEPT, None
    if kept is not None and keep_for is not None and kept.keep_for == keep_for:
        return kept
    if kept is not None:  # another run's: never shared
        kept.remove()
    sandbox = sandbox_for_grading(options.limits, options.unsafe)
    scratch = Path(tempfile.mkdtemp(prefix="autograder-reference-"))
    try:
        source.write_assignment(scratch / "source")
        env = dict(GRADING_ENV)
        cache = None
        if adapter.compiler_cache is not None:
            cache = scratch / "cache"
            cache.mkdir()
            env.update(adapter.compiler_cache.writing(str(cache) if sandbox.unsafe else CACHE))
        session = SandboxSession(
            sandbox,
            scratch / "session",
            source.shipped_files(scratch / "assignment"),
            cache=cache,
            cache_writable=True,
            fork=False,  # each notebook's kernel a fresh sandbox, started cold: its seconds set its budget
            env=env,
            adapter=adapter,
        )
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return _ReferenceSession(keep_for, scratch, session, cache)


def _cache_files(cache: Path | None, leaving_out=frozenset()) -> dict[str, bytes]:
    """The compile cache's files by name (those named in leaving_out not read)."""
    if cache is None:
        return {}
    return {p.name: p.read_bytes() for p in sorted(cache.iterdir()) if p.is_file() and p.name not in leaving_out}


def run_reference(
    notebook: str, source: CourseSource, options: GradingOptions, keep_for: str | None = None
) -> ReferenceRun:
    """Run one source notebook of the course in a sandboxed kernel, each test cell judged, with
    the reference run's cell timeout, every program it compiles kept for the compile cache (the
    learners' kernels get it unless options.compile_cache is off: `into_template`).

    keep_for: the run's id, where the same worker may run another of its notebooks next: a clean
    notebook then leaves its session (the judge's helpers started) for that one
    (`release_reference_session` ends it)."""
    global _KEPT
    from autograder.notebook.execute import NotebookContext, SandboxedExecute

    started = time.perf_counter()
    adapter = load_adapter(source.adapter)
    kept = _reference_session(source, options, adapter, keep_for)
    session, folder, keep = kept.session, kept.scratch / "source", False
    try:
        before = frozenset(p.name for p in kept.cache.iterdir()) if kept.cache else frozenset()
        executed = nbformat.read(folder / notebook, as_version=4)
        executor = SandboxedExecute(
            context=NotebookContext(session),
            timeout=options.reference_cell_timeout,
            kernel_name=KERNEL_NAME,
            extra_arguments=["--IPKernelApp.log_level=ERROR"],
            judge_source=judge_source(source.loaded_config, source.assignment.id, folder),
            judge_checks_module=source.checks_module,
            judge_seed=options.judge_seed,
        )
        run = ReferenceRun(notebook, host_signature(adapter.compiler_distributions))
        if executor.judge_source:
            session.judge_helpers().forget_asked()  # which helpers *this* notebook asks
            session.judge_helpers().launch()  # they start while the kernel does (those not running yet)
        try:
            executor.preprocess(executed, {})
        except Exception as error:  # no kernel, say: reported, and grading stops on it
            run.problems.append(f"the notebook could not run: {type(error).__name__}: {error}")
        finally:
            run.helpers = session.judge_helpers().used() if executor.judge_source else []
            session.close()  # its kernel's sandbox (the helpers stay with the session)
        run.problems += (
            problems_of(executed) + solution_shortfalls(executed) + [t.line() for t in executor.record.troubles]
        )
        run.entries = _cache_files(kept.cache, leaving_out=before)
        run.seconds = time.perf_counter() - started
        keep = keep_for is not None and not run.problems
        return run
    finally:
        if keep:
            _KEPT = kept
        else:
            kept.remove()


def into_template(
    template: TaskTemplate,
    runs: list[ReferenceRun],
    options: GradingOptions,
    say=lambda line: None,
    kept: bool = False,
) -> TaskTemplate:
    """The template with the time budgets (the options' time policy) and, unless the options'
    compile_cache is off, the compile cache; ReferenceProblem when a run was not clean. `kept`:
    the runs are an earlier run's (what is said of their seconds is then in the past)."""
    failed = [f"{run.notebook}: {problem}" for run in runs for problem in run.problems]
    if failed:
        raise ReferenceProblem(
            "the reference run of the instructor's notebooks was not clean; no one is "
            "graded against it:\n  " + "\n  ".join(failed)
        )
    missing = sorted(set(template.assignment.notebooks) - {run.notebook for run in runs})
    if missing:
        raise ReferenceProblem(f"no reference run for {missing}")
    compile_cache = options.compile_cache
    cache = CompileCache.merged([(run.host, run.entries) for run in runs]) if compile_cache else None
    budgets = {run.notebook: options.time_factor * run.seconds + options.time_floor for run in runs}
    merged = template.replace(
        budgets=budgets,
        helpers={run.notebook: run.helpers for run in runs if run.helpers is not None},
        cache=cache,
    )
    count, size = (len(cache.entries), cache.size) if cache is not None else (0, 0)
    cache_said = f"{count} executables ({size / 1e6:.1f} MB)" if compile_cache else "off"
    work = f"{sum(r.seconds for r in runs):.1f} s of work"
    said = f"earned every point in the kept run ({work} then)" if kept else f"earn every point, {work}"
    say(
        f"reference run: the instructor's notebooks {said}; compile cache: {cache_said}; time budgets "
        + ", ".join(f"{Path(name).stem[:2]} {seconds:.0f} s" for name, seconds in sorted(budgets.items()))
    )
    return merged


# ---------------------------------------------------------------------------------------
# A clean reference run, kept for the next run with the same key.
# ---------------------------------------------------------------------------------------
def reference_key(source: CourseSource, options: GradingOptions) -> str:
    """What a reference run depends on, hashed: the course's source files, the grader's code,
    this host (its CPU, and its adapter's compiler: JAX's releases for a JAX course), and the
    options that change the run."""
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]
    grader = sorted(package.rglob("*.py"))
    for name, data in [
        *source.hashed_items(),
        *((f"autograder/{p.relative_to(package)}", p.read_bytes()) for p in grader),
    ]:
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    settings = {
        "host": host_signature(load_adapter(source.adapter).compiler_distributions),
        "unsafe": options.unsafe,
        "timeout": options.reference_cell_timeout,
        "limits": options.limits.as_dict(),
    }
    digest.update(json.dumps(settings, sort_keys=True).encode())
    return digest.hexdigest()[:32]


def kept_reference(folder: Path, key: str) -> list[ReferenceRun] | None:
    """The clean reference runs kept under `key` in folder; None when there are none (or they do
    not read back whole)."""
    kept = Path(folder) / key
    try:
        runs = []
        for item in json.loads((kept / "runs.json").read_text()):
            entries = {p.name: p.read_bytes() for p in sorted((kept / "entries" / item["notebook"]).glob("*"))}
            helpers = item.get("helpers")
            helpers = None if helpers is None else [str(name) for name in helpers]
            runs.append(ReferenceRun(item["notebook"], item["host"], entries, float(item["seconds"]), helpers=helpers))
        return runs
    except (OSError, ValueError, KeyError, TypeError):
        return None


class KeptReference(NamedTuple):
    """What a run finds kept for it (`kept_for`)."""

    key: str  # the key this run keeps its own reference run under
    runs: list[ReferenceRun] | None  # a kept run it may take instead of running one; None: none
    kept_key: str  # the key those runs were kept under ("" when there are none)


def kept_for(folder: Path, source: CourseSource, options: GradingOptions) -> KeptReference:
    """The reference run kept for this run: under its own key or, for a run without the sandbox, a
    sandboxed run's. A sandboxed run never takes one made without the sandbox: a solution that
    only works outside it would have passed there."""
    key = reference_key(source, options)
    kept = kept_reference(folder, key)
    if kept is not None:
        return KeptReference(key, kept, key)
    if options.unsafe:
        sandboxed = reference_key(source, options.replace(unsafe=False))
        kept = kept_reference(folder, sandboxed)
        if kept is not None:
            return KeptReference(key, kept, sandboxed)
    return KeptReference(key, None, "")


@contextlib.contextmanager
def claimed_reference(folder: Path, key: str, waiting=None):
    """While held, no other grading run on this host makes the reference run of `key` in
    `folder`: a second run with the same key waits here (after calling `waiting()`), then finds
    the first one's kept, or, where it was not clean, runs its own. The lock file goes as its
    holder leaves (locks.held): nothing of a run's stays in the cache but what it kept."""
    with held(Path(folder) / f".{key}.lock", wait=True, waiting=waiting):
        yield


def keep_reference(folder: Path, key: str, runs: list[ReferenceRun]) -> None:
    """Keep clean runs under `key` (written aside, then moved into place: never half a run)."""
    if any(run.problems for run in runs):
        return
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".keeping-", dir=folder))
    try:
        for run in runs:
            entries = scratch / "entries" / run.notebook
            entries.mkdir(parents=True)
            for name, data in run.entries.items():
                (entries / name).write_bytes(data)
        index = [{"notebook": r.notebook, "host": r.host, "seconds": r.seconds, "helpers": r.helpers} for r in runs]
        (scratch / "runs.json").write_text(json.dumps(index))
        os.rename(scratch, folder / key)
    except OSError:  # kept already (another run was first), or the folder cannot take it: not kept
        shutil.rmtree(scratch, ignore_errors=True)
    except BaseException:  # a stop (Ctrl-C) while it was written: nothing half-written stays
        shutil.rmtree(scratch, ignore_errors=True)
        raise
