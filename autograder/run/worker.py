"""Grade one student in a scratch course of their own: the task a grading worker runs.

Everything the task needs travels with it (the course template, the submission's bytes) and
everything it produces comes back as data (scores, autograded notebooks, feedback HTML), so a
worker may run in this process, in a local Dask worker or on another machine, and no two tasks
ever share a gradebook file. The parent merges the results into the class gradebook.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from autograder.course.assignment import assignment_of, nbgrader_setting, notebook_kernel, put_venv_on_path
from autograder.course.outcomes import (
    CellGrade,
    NotebookGrades,
    NotebookOutcome,
    NotebookTiming,
    Trouble,
    TroubleKind,
)
from autograder.course.settings import judge_source
from autograder.course.task_template import TaskTemplate
from autograder.gradebook.class_gradebook import db_url, quiet_gradebook_warnings
from autograder.kernel.adapter import Adapter, load_adapter
from autograder.kernel.compile_cache import unseal, usable_cache, write_cache
from autograder.kernel.helpers import helper_names
from autograder.kernel.kernels import GRADING_ENV, SandboxSession, kernel_interpreter
from autograder.kernel.sandbox import CACHE, Limits, sandbox_for_grading
from autograder.notebook.execute import (
    CONTEXT_ON_CONVERTER,
    Failure,
    NotebookContext,
    NotebookRecord,
    failure_of,
)
from autograder.notebook.plugin import configure
from autograder.run.options import GradingOptions
from autograder.run.reference import release_reference_session
from autograder.run.stopping import raise_if_stopped
from autograder.upstream.nbgrader import shared_gradebook_engines

log = logging.getLogger(__name__)


@dataclass
class StudentTask:
    student_id: str
    notebooks: dict[str, bytes]  # file name -> bytes, already checked to be readable notebooks
    options: GradingOptions  # the run's, its cell timeout and judge seed settled
    extra_files: dict[str, bytes] = field(default_factory=dict)  # timestamp.txt and the like
    #: Whether this process is likely to grade another student after this one (the runner knows):
    #: only then is a sandbox made ahead for it.
    another_follows: bool = True
    #: The student's notebooks not graded (intake.not_graded's troubles): every page of theirs names them.
    not_graded: list[Trouble] = field(default_factory=list)


@dataclass
class StudentResult:
    student_id: str
    timestamp: str | None = None
    notebooks: dict[str, NotebookGrades] = field(default_factory=dict)  # by notebook name (its stem)
    autograded: dict[str, str] = field(default_factory=dict)  # file name -> notebook JSON
    feedback: dict[str, str] = field(default_factory=dict)  # file name -> HTML
    broken: list[Trouble] = field(default_factory=list)  # what of the submission could not be graded, and why
    failed: list[Trouble] = field(default_factory=list)  # what the grader itself failed to do
    #: For review: what grading found against the judge's verdicts (kind REVIEW, by notebook)
    flags: list[Trouble] = field(default_factory=list)
    timings: list[NotebookTiming] = field(default_factory=list)
    #: file name -> what the class report keeps of the notebook (autograder/gradebook/class_report.py)
    outcomes: dict[str, NotebookOutcome] = field(default_factory=dict)
    seconds: float = 0.0
    worker: str = ""


def autograde_api(course: Path, options: GradingOptions, limits: Limits, not_graded: list[Trouble] | None = None):
    """nbgrader's Python API on the course folder, with its nbgrader_config.py and our overrides
    (the settings of this run: the same for every notebook of every student; `not_graded`, the
    student's notebooks not graded, which the grader found when it took their files in)."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    names = [getattr(p, "__name__", str(p)) for p in config.Autograde.get("autograde_preprocessors", [])]
    if "SandboxedExecute" not in names:  # a course folder without the grader's lines: they are added
        configure(config)
    # The config names the gradebook relative to the course; this process runs elsewhere.
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.db_url = db_url(course)
    config.Exchange.root = str(course / "exchange")  # unused here; nbgrader checks it is writable
    if options.cell_timeout:
        config.Execute.timeout = options.cell_timeout
    # The outputs are in once the last cell has run: end the kernel at once, not after polling it.
    config.Execute.shutdown_kernel = "immediate"
    # The kernel's own log is noise here.
    config.Execute.extra_arguments = ["--IPKernelApp.log_level=ERROR"]
    for name, value in limits.as_dict().items():  # the sandbox's, which the run probed
        config.SandboxLimits[name] = value
    assignment = assignment_of(course).id
    source = course / "source" / assignment
    # The judge checks the test cells where the assignment names its checks module.
    config.SandboxedExecute.judge_source = judge_source(config, assignment, source)
    # nbgrader writes autograded files read-only (444); the grader may run as an ordinary user and
    # must be able to replace them when it grades again.
    config.Autograde.permissions = 644
    config.SandboxedExecute.judge_seed = options.judge_seed
    # The grader took the files in and writes its own class report: the exporter only notes, on
    # each page, which notebooks were not graded.
    config.TakenInExporter.not_graded = [trouble.to_json() for trouble in not_graded or []]
    config.TakenInExporter.class_report = False
    coursedir = CourseDirectory(config=config)
    return NbGraderAPI(coursedir=coursedir, config=config)


def _sandbox_settings(task: StudentTask, template: TaskTemplate) -> str:
    """What a student's sandbox is made of, as a key: two tasks with the same key can take the same
    kind of sandbox (one made ahead for the next task is taken only by a task of the same key)."""
    digest = hashlib.sha256()
    cache = template.cache
    for name, data in [*template.source.hashed_items(), *sorted(cache.entries.items() if cache else [])]:
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    options = task.options
    settings = [options.limits.as_dict(), options.unsafe, options.fork_kernels, cache.host if cache else ""]
    digest.update(json.dumps(settings, sort_keys=True).encode())
    return digest.hexdigest()


#: This process's folder for students' sandboxes and the compile cache they read (one per run's template).
_FOLDER: Path | None = None
#: How that folder's name begins (in TMPDIR: a local cluster's workers have the run's folder as theirs).
SANDBOXES_PREFIX = "autograder-sandboxes-"
#: A sandbox made ahead for this process's next student, with its key; None when there is none.
_AHEAD: tuple[str, SandboxSession] | None = None


def _folder() -> Path:
    global _FOLDER
    if _FOLDER is None or not _FOLDER.is_dir():
        _FOLDER = Path(tempfile.mkdtemp(prefix=SANDBOXES_PREFIX))
    return _FOLDER


def _compile_cache(template: TaskTemplate, adapter: Adapter) -> Path | None:
    """The template's compile cache, written once in this process's folder; None when it has none
    (or it was filled on another kind of machine)."""
    cache = template.cache
    if cache is None or adapter.compiler_cache is None:
        return None
    items = [(cache.host, b""), *sorted(cache.entries.items())]
    digest = hashlib.sha256(b"".join(n.encode() + b"\0" + d for n, d in items)).hexdigest()[:16]
    folder = _folder() / f"cache-{digest}"
    if not folder.is_dir():
        staged = Path(tempfile.mkdtemp(dir=_folder()))
        write_cache(cache.entries, cache.host, staged, adapter.compiler_distributions)
        os.rename(staged, folder)
    return usable_cache(folder, adapter.compiler_distributions)


def student_session(task: StudentTask, template: TaskTemplate) -> SandboxSession:
    """The student's sandbox: the shipped files, the compile cache read-only, the grading mode; the
    one made ahead for this kind of task when there is one (its host already starting)."""
    global _AHEAD
    ahead, _AHEAD = _AHEAD, None
    if ahead is not None:
        if ahead[0] == _sandbox_settings(task, template):
            return ahead[1]
        ahead[1].remove()
    sandbox = sandbox_for_grading(task.options.limits, task.options.unsafe)
    adapter = load_adapter(template.source.adapter)
    cache = _compile_cache(template, adapter)
    env = dict(GRADING_ENV)
    if cache is not None and adapter.compiler_cache is not None:
        env.update(adapter.compiler_cache.reading(str(cache) if sandbox.unsafe else CACHE))
    folder = Path(tempfile.mkdtemp(prefix="session-", dir=_folder()))
    return SandboxSession(
        sandbox,
        folder,
        template.source.shipped_files(folder / "assignment"),
        cache=cache,
        fork=task.options.fork_kernels,
        env=env,
        adapter=adapter,
    )


def start_session(session: SandboxSession, kernel_name: str, helpers=()) -> None:
    """Start what the student's notebooks will need before the first one asks: the warm kernel host
    (its imports, about a second for a JAX course) and these of the judge's helpers."""
    if session.fork:
        session.start_host(kernel_interpreter(kernel_name), session.kernel_environment(os.environ))
    if helpers:
        session.judge_helpers().launch(helpers)


def helpers_ahead(template: TaskTemplate, notebooks: list[str], judged: bool, names: tuple[str, ...]) -> set[str]:
    """The judge's helpers (of `names`, the student's) to start as a student's grading begins: those
    the reference run's checks asked in these notebooks (all of them for a notebook it noted
    nothing for). Any other one starts on its first request: a student who handed in one notebook
    starts no JAX for another."""
    if not judged:
        return set()
    return {helper for name in notebooks for helper in template.helpers.get(name, names)}


def make_next_session(task: StudentTask, template: TaskTemplate, kernel_name: str) -> None:
    """A sandbox for this process's next student, started now, while this one's later notebooks
    and feedback are graded: a fresh one (its own uid, nothing of this student's in it), taken by
    the next task with the same settings, or removed. Not made after a process's last student."""
    global _AHEAD
    if _AHEAD is None and task.options.fork_kernels and task.another_follows:
        session = student_session(task, template)
        start_session(session, kernel_name)  # the helpers wait for the next student's notebooks
        _AHEAD = (_sandbox_settings(task, template), session)


def _make_next_session_or_log(task: StudentTask, template: TaskTemplate, kernel_name: str) -> None:
    try:
        make_next_session(task, template, kernel_name)
    except Exception as error:  # only time is lost: the next student makes their own
        log.warning("no sandbox could be made ahead for the next student: %s", error)


def _scratch() -> Path:
    """A new folder for the student being graded: the same path for each student of this process
    (it grades one at a time), so that their gradebooks have one database URL and one engine,
    which compiles each statement once (shared_gradebook_engines). A folder the last student's
    grading could not remove is not reused: a folder of another name is made then."""
    folder = _folder() / "student"
    try:
        folder.mkdir()
    except FileExistsError:
        return Path(tempfile.mkdtemp(prefix="student-", dir=_folder()))
    return folder


def release_sandboxes() -> None:
    """Remove the sandbox made ahead (if any), the reference run's kept session and this process's
    sandbox folder: the run is over."""
    global _AHEAD, _FOLDER
    try:
        release_reference_session()
    finally:
        ahead, _AHEAD = _AHEAD, None
        if ahead is not None:
            ahead[1].remove()
        if _FOLDER is not None:
            unseal(_FOLDER)  # a sealed cache folder cannot be listed, so not removed, until unsealed
            shutil.rmtree(_FOLDER, ignore_errors=True)
            _FOLDER = None


def _recording(converter, context: NotebookContext | None = None):
    """nbgrader's converter `converter`, keeping what a notebook's failure raised as data
    (`failure`) instead of only in its log, and holding the notebook's context for each of its
    preprocessors that takes one (execute.SandboxedExecute, execute.RequireSandbox: they find it
    through their parents, execute.context_of)."""

    class Recording(converter):
        failure: Failure | None = None
        #: A stop (Ctrl-C; SIGTERM, raised as one by grade.py) that reached the converter: nbgrader's
        #: capture_log takes every exception with a bare except, so _convert raises it again.
        stopped: KeyboardInterrupt | None = None

        def start(self) -> None:
            try:
                super().start()
            except KeyboardInterrupt as stop:
                self.stopped = stop
                raise

        def convert_single_notebook(self, notebook_filename: str) -> None:
            try:
                super().convert_single_notebook(notebook_filename)
            except Exception as error:
                self.failure = self.failure or failure_of(error, None)
                raise

    setattr(Recording, CONTEXT_ON_CONVERTER, context)
    Recording.__name__ = converter.__name__  # nbgrader's config sections are named for the class
    return Recording


def _convert(
    api, converter, student_id: str, notebook: str = "*", context: NotebookContext | None = None
) -> Failure | None:
    """Run one of nbgrader's converters for one student (for one notebook: its context); None when
    it succeeded, else its failure."""
    from nbgrader.utils import capture_log, temp_attrs

    assignment = assignment_of(Path(api.coursedir.root)).id
    with temp_attrs(api.coursedir, assignment_id=assignment, student_id=student_id, notebook_id=notebook):
        app = _recording(converter, context)(coursedir=api.coursedir, parent=api)
        app.force = True
        if hasattr(app, "create_student"):
            app.create_student = True
        outcome = capture_log(app)
    if app.stopped is not None:  # the run was stopped, not this notebook failed: the run stops
        raise app.stopped
    if outcome["success"]:
        return None
    return app.failure or Failure(None, "NbGraderException", f"nbgrader could not grade it: {_nbgrader_said(outcome)}")


def _nbgrader_said(outcome: dict) -> str:
    """nbgrader's own first error line of a failed converter (an unreadable timestamp.txt, say): it
    logs the specific reason first, then that the step failed."""
    lines = [line for line in outcome.get("log", "").splitlines() if line.startswith(("[ERROR]", "[CRITICAL]"))]
    lines = lines or [line for line in outcome.get("error", "").splitlines() if line.strip()][-1:]
    return lines[0].removeprefix("[ERROR] ").removeprefix("[CRITICAL] ").strip()[:300] if lines else "no reason given"


def _read_grades(course: Path, student_id: str) -> tuple[str | None, dict[str, NotebookGrades]]:
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url(course)) as gb:
        try:
            submission = gb.find_submission(assignment_of(course).id, student_id)
        except MissingEntry:
            return None, {}
        timestamp = submission.timestamp.isoformat() if submission.timestamp else None
        notebooks = {
            nb.name: NotebookGrades(
                {g.name: CellGrade(g.auto_score, bool(g.needs_manual_grade)) for g in nb.grades},
                {c.name: c.auto_comment for c in nb.comments},
                nb.late_submission_penalty,
            )
            for nb in submission.notebooks
        }
        return timestamp, notebooks


#: What the watchdog says when it ends a notebook's sandbox past its budget and grace.
PAST_THE_BUDGET = "it ran past its time budget and was stopped"


def _watchdog(seconds: float, fired: list, session: SandboxSession) -> threading.Timer:
    """End everything of the student's (the kernel's sandbox, the judge's helpers) if one notebook runs
    past `seconds` (a kernel that ignores interrupts, a helper that stalls the judge)."""

    def fire():
        fired.append(True)
        session.halt(PAST_THE_BUDGET)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    return timer


def _notebook_troubles(
    name: str, record: NotebookRecord, failure: Failure | None, fired: bool, graded: bool
) -> list[Trouble]:
    """What went wrong in one notebook, by kind: it was not graded at all (nbgrader failed on it,
    or the watchdog ended it before it was written), it ran past its budget, or the troubles its
    record noted (a limit, a cell's timeout, the kernel's death)."""
    if failure is not None or not graded:
        failure = record.failure or failure
        if fired:
            return [Trouble(TroubleKind.TIME_BUDGET, f"{PAST_THE_BUDGET}; graded 0", name)]
        if failure is None:
            return [Trouble(TroubleKind.NOT_GRADED, "nbgrader wrote no autograded notebook; graded 0", name)]
        where = f" (in cell {failure.cell + 1})" if failure.cell is not None else ""
        return [Trouble(TroubleKind.NOT_GRADED, f"{failure.cause}{where}; graded 0", name, failure.cell)]
    if fired:
        finished = "the checks it had finished keep their points, the rest scored 0"
        return [Trouble(TroubleKind.TIME_BUDGET, f"{PAST_THE_BUDGET}; {finished}", name)]
    return [dataclasses.replace(trouble, notebook=name) for trouble in record.troubles]


def _timing(name: str, seconds: float, record: NotebookRecord) -> NotebookTiming:
    """Where the notebook's seconds went: starting its kernel, its first cell (the imports), its
    other cells, its test cells, and the rest (nbgrader's own steps)."""
    cells = record.cells
    first = cells[0]["seconds"] if cells else 0.0
    tests = sum(c["seconds"] for c in cells if c["test"])
    work = sum(c["seconds"] for c in cells[1:] if not c["test"])
    rest = max(0.0, seconds - record.kernel_start - first - work - tests)
    return NotebookTiming(name, seconds, record.kernel_start, first, work, tests, rest)


def notebook_budget(own: float, student_deadline: float, now: float) -> float | None:
    """A notebook's time budget in seconds: its own, or what is left of the student's if that is less;
    None once the student's time is spent (no further notebook of theirs runs)."""
    left = student_deadline - now
    if left <= 0:
        return None
    return max(1.0, min(own, left))


def grade_student(task: StudentTask, template: TaskTemplate) -> StudentResult:
    """Autograde one student's notebooks and generate their feedback, in a scratch course
    written from the template (the same for every task of the run)."""
    started = time.perf_counter()
    from nbgrader.converters import Autograde, GenerateFeedback

    result = StudentResult(task.student_id, worker=f"{socket.gethostname()}:{os.getpid()}")
    put_venv_on_path()
    quiet_gradebook_warnings()
    shared_gradebook_engines(scratch=_folder())
    scratch = _scratch()
    session = None
    try:
        course = scratch / "course"
        template.write_course(course)
        assignment = template.assignment
        submitted = course / "submitted" / task.student_id / assignment.id
        submitted.mkdir(parents=True)
        for name, data in {**task.extra_files, **task.notebooks}.items():
            (submitted / name).write_bytes(data)
        session = student_session(task, template)
        api = autograde_api(course, task.options, session.sandbox.limits, task.not_graded)
        # No Execute.kernel_name: nbgrader runs the kernel the notebooks name.
        kernel_name = nbgrader_setting(api.config, "Execute", "kernel_name") or notebook_kernel(
            template.source.notebook(assignment.notebooks[0])
        )
        judged = bool(api.config.SandboxedExecute.judge_source)
        submitted_notebooks = [name for name in assignment.notebooks if name in task.notebooks]
        # while nbgrader prepares the first notebook
        helpers = helper_names(session.adapter.helpers)
        start_session(session, kernel_name, helpers_ahead(template, submitted_notebooks, judged, helpers))
        autograded = course / "autograded" / task.student_id / assignment.id

        # Time is the course's to give, not the submission's to take: each notebook has the budget the
        # reference run set for it, and the student the sum of them, whatever the notebooks hold.
        own = {name: template.budgets.get(name, task.options.budget_without_reference) for name in submitted_notebooks}
        student_deadline = time.monotonic() + sum(own.values())
        for position, name in enumerate(submitted_notebooks):
            # A stop Python dropped, or a library took, inside the last notebook: the run stops
            # here, not a whole student later (grading here; a worker of a cluster hears none).
            raise_if_stopped()
            budget = notebook_budget(own[name], student_deadline, time.monotonic())
            if budget is None:  # the student's time is spent: graded with what finished, the class goes on
                spent = Trouble(
                    TroubleKind.TIME_BUDGET,
                    f"not graded: this student's time budget of {sum(own.values()):.0f} s ran out before it; graded 0",
                    name,
                )
                result.broken.append(spent)
                result.outcomes[name] = NotebookOutcome(0.0, 0.0, troubles=(spent,))
                continue
            if position == 1:
                # After this student's first notebook: the next sandbox's imports then fill the
                # waits of this student's later ones, instead of delaying the next first notebook.
                _make_next_session_or_log(task, template, kernel_name)
            context = NotebookContext(
                session, NotebookRecord(), budget, reserve=max(0.0, budget - task.options.time_floor) if budget else 0.0
            )
            record = context.record
            fired: list = []
            timer = _watchdog(budget + task.options.watchdog_grace, fired, session)
            t0 = time.perf_counter()
            try:
                failure = _convert(api, Autograde, task.student_id, Path(name).stem, context)
            finally:
                timer.cancel()
            seconds = time.perf_counter() - t0
            if record.ledger is not None:
                result.flags += [Trouble(TroubleKind.REVIEW, finding, name) for finding in record.ledger.findings]
            troubles = _notebook_troubles(name, record, failure, fired=bool(fired), graded=(autograded / name).exists())
            result.broken += troubles
            result.outcomes[name] = NotebookOutcome(
                seconds, budget, dict(record.ledger.items) if record.ledger is not None else {}, tuple(troubles)
            )
            result.timings.append(_timing(name, seconds, record))

        if len(submitted_notebooks) < 2:
            _make_next_session_or_log(task, template, kernel_name)
        result.timestamp, result.notebooks = _read_grades(course, task.student_id)
        # Only notebooks that graded cleanly keep their scores; the parent zeroes the rest.
        graded = {p.name for p in autograded.glob("*.ipynb")} if autograded.exists() else set()
        result.notebooks = {k: v for k, v in result.notebooks.items() if f"{k}.ipynb" in graded}

        # nbgrader wrote them as pages will show them (pages.ForPages), read-only: only read here.
        for path in sorted(autograded.glob("*.ipynb")) if autograded.exists() else []:
            result.autograded[path.name] = path.read_text()

        raise_if_stopped()
        t0 = time.perf_counter()
        if result.autograded:
            failure = _convert(api, GenerateFeedback, task.student_id)
            if failure is not None:
                result.broken.append(
                    Trouble(TroubleKind.NO_FEEDBACK, f"feedback could not be generated: {failure.cause}")
                )
        feedback_dir = course / "feedback" / task.student_id / assignment.id
        for path in sorted(feedback_dir.glob("*.html")) if feedback_dir.exists() else []:
            result.feedback[path.name] = path.read_text()
        result.timings.append(NotebookTiming("(feedback)", time.perf_counter() - t0))
    finally:
        if session is not None:
            session.remove()
        shutil.rmtree(scratch, ignore_errors=True)
    result.seconds = time.perf_counter() - started
    return result


def warm_up() -> str:
    """Import what grading needs, once per worker process, before the first task arrives; end the
    session the reference run kept here (its notebooks are all run)."""
    release_reference_session()
    import nbconvert.exporters  # noqa: F401
    import nbgrader.apps  # noqa: F401
    import nbgrader.converters  # noqa: F401

    from autograder.notebook import execute, pages, repair  # noqa: F401  (the preprocessors nbgrader's config names)

    return f"{socket.gethostname()}:{os.getpid()}"
