"""Autograde a class's submissions of an assignment: scores, feedback and grades.csv.

    autograder grade SUBMISSIONS (--course COURSE --assignment ID | --bundle CHECKOUT) [--out DIR]
                                 [--jobs N] [--scheduler tls://host:port --tls-ca-file F
                                 --tls-cert F --tls-key F] [--cell-timeout S] [--time-factor F]
                                 [--time-floor S] [--limit NAME=VALUE ...] [--no-compile-cache]
                                 [--no-fork] [--fresh-gradebook] [--judge-seed N] [--reference-cache DIR]
                                 [--no-reference-cache] [--unsafe-no-sandbox] [--help-all]

(`python -m autograder.run.grade` is the same command; every option is explained in
autograder/run/options.py and by `autograder grade --help`.)

SUBMISSIONS holds <student_id>/<notebook>.ipynb (any of the five notebooks). First the
instructor's notebooks run once (the reference every check is judged against, and the compile
cache); then each student is graded in a scratch course of their own, every kernel in the
student's sandbox, on this process (--jobs 1), on a local Dask cluster (--jobs N) or on a
running Dask scheduler; the results are merged into one class gradebook,
OUT/course/gradebook.db, from which OUT/grades.csv is exported. OUT/cells.csv has one row per
graded cell, OUT/feedback/<student>/ the feedback. A submission that breaks (unreadable
notebook, kernel death, a limit, a timeout) loses what it did not finish and is named; a
student folder that cannot be graded is rejected alone; the others are graded all the same.
Exit 0 when every student was graded (a broken submission is graded 0 where it breaks: that is
grading), 2 on bad arguments, 3 when this host cannot grade safely (no working sandbox, or the
instructor's notebooks fail their own checks), 4 when some student could not be graded for a
reason of the grader's own (a FAILED line names each; the others are graded).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import functools
import logging
import os
import secrets
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from autograder.course.assignment import (
    Assignment,
    BundleOrigin,
    CourseOrigin,
    assignment_of_origin,
    put_venv_on_path,
)
from autograder.course.errors import ExitCode, GraderError, UsageError
from autograder.course.intake import not_graded, not_graded_lines, take_in
from autograder.course.outcomes import NotebookTiming, Trouble, TroubleKind
from autograder.course.paths import ROOT
from autograder.course.submissions import find_submissions
from autograder.course.task_template import CourseSource
from autograder.course.text_safety import console_line
from autograder.gradebook.class_course import clear_outputs, prepare_class_course, update_class_course
from autograder.gradebook.class_gradebook import class_students, graded_by_hand
from autograder.gradebook.class_report import write_judged, write_run_report
from autograder.gradebook.merge import merge_into_gradebook
from autograder.gradebook.reports import read_cells, write_class_files
from autograder.gradebook.student_files import write_student_files
from autograder.kernel.sandbox import (
    UNSAFE_WARNING,
    Limits,
    SandboxUnavailable,
    find_sandbox,
    folders_kernels_read,
)
from autograder.run.console import show_log
from autograder.run.feedback import regenerate_feedback
from autograder.run.locks import Taken, held, held_by_another
from autograder.run.options import GradingOptions, help_all, overrides
from autograder.run.progress import Progress, Summary
from autograder.run.reference import (
    KeptReference,
    ReferenceProblem,
    claimed_reference,
    into_template,
    keep_reference,
    kept_for,
)
from autograder.run.runners import DaskRunner, HereRunner
from autograder.run.stopping import (
    as_the_process_command,
    finished,
    is_the_process_command,
    kept_until_exit,
    listening_for_stops,
    raise_if_stopped,
    stopped_by,
)
from autograder.run.tls import SchedulerSecurity
from autograder.run.worker import StudentTask

log = logging.getLogger(__name__)
#: Under --course COURSE without --out: COURSE/<this>/<assignment> (the course folder is never
#: shown to a kernel; nbgrader's own folders of it are refused all the same).
OUT_IN_COURSE = "autograder"
#: Beside OUT: where a clean reference run is kept for the next run (unless --reference-cache says
#: where, or --no-reference-cache)
REFERENCE_CACHE = "reference-cache"


def default_out(origin) -> Path:
    """Where a run's files go when --out is not given: beside nbgrader's folders of the course."""
    if not isinstance(origin, CourseOrigin):
        raise UsageError("--out is required without --course")
    return origin.folder / OUT_IN_COURSE / origin.assignment


def refused_out(out: Path, submissions: Path, origin) -> str | None:
    """Why `out` may not hold a class (its course: solutions, hidden tests, the gradebook), or
    None. Refused: a folder every kernel sees read-only (the system's, the Python installation,
    the virtual environment: a submission would list it), the assignment's own files, the learners'
    release and nbgrader's folders of the course (they are shipped to kernels or handed to
    learners), any folder that holds one of those, and the submissions."""
    out = Path(os.path.realpath(out))
    shown = [Path(p) for p in folders_kernels_read()]
    if origin is not None:
        shown += [Path(os.path.realpath(p)) for p in origin.folders]
    for folder in shown:
        if out == folder or out.is_relative_to(folder):
            return f"--out {out} lies in {folder}, which a kernel or a learner can read: give an --out outside it"
        if folder.is_relative_to(out):  # the course would sit beside what is handed out, or replace it
            return f"--out {out} holds {folder}, which a kernel or a learner can read: give a folder of its own"
    submissions = Path(os.path.realpath(submissions))
    if out == submissions or submissions.is_relative_to(out) or out.is_relative_to(submissions):
        return f"--out {out} would mix the class's files with the submissions in {submissions}"
    return None


class CannotGradeSafely(GraderError, RuntimeError):
    """This host or this course cannot grade anyone fairly and safely."""

    exit_code = ExitCode.UNSAFE


@dataclass
class GradingResult:
    cells: list[dict]
    broken: dict[str, list[Trouble]]
    flagged: dict[str, list[Trouble]]
    seconds: float
    students: list[str]
    assignment: Assignment
    timings: dict[str, list[NotebookTiming]] = field(default_factory=dict)
    student_seconds: dict[str, float] = field(default_factory=dict)
    out: Path | None = None
    phases: dict[str, float] = field(default_factory=dict)  # wall seconds of each step of the run
    rejected: dict[str, str] = field(default_factory=dict)  # student folders not graded, and why
    notes: dict[str, list[str]] = field(default_factory=dict)  # files left out of a submission
    #: students the grader itself failed (a crashed worker, a gradebook it could not write): not the
    #: submission's doing; the run exits 4 when there is any
    failed: dict[str, list[Trouble]] = field(default_factory=dict)
    #: manual grades kept on answers that changed since they were given, to look at again in formgrader
    rechecks: list[str] = field(default_factory=list)
    #: each student's notebooks not graded (UNREADABLE, MISSING, RENAMED), in the assignment's order
    not_graded: dict[str, list[Trouble]] = field(default_factory=dict)
    judge_seed: int | None = None  # the seed of the judge's inputs this run: --judge-seed repeats them
    in_class: list[str] = field(default_factory=list)  # every student the class gradebook holds after the run


# ----------------------------------------------------------------------------------------
# The whole run
# ----------------------------------------------------------------------------------------
def grade(
    submissions: Path,
    out: Path,
    options: GradingOptions | None = None,
    progress_stream=None,
) -> GradingResult:
    """Grade every student in submissions, as `options` say (autograder/run/options.py); write OUT.
    UsageError on bad arguments, GradebookError when OUT's class gradebook holds another
    assignment, CannotGradeSafely when no sandbox works here or the instructor's notebooks fail
    their checks.

    An existing class gradebook in OUT/course is reused, manual grades kept (unless
    options.fresh_gradebook; autograder/gradebook/class_course.py). Without options.judge_seed the judge's
    fresh inputs come from a new seed for this run, which only the grader holds.
    """
    started = time.perf_counter()
    options = (options or GradingOptions()).validated()
    origin = options.origin if options.origin is not None else BundleOrigin(ROOT)
    options = options.replace(origin=origin)
    submissions = Path(submissions).resolve()
    try:
        assignment = assignment_of_origin(origin)
    except (OSError, ValueError) as error:
        raise UsageError(str(error)) from None
    why = refused_out(out, submissions, origin)
    if why:
        raise UsageError(why)
    found = find_submissions(submissions, assignment)
    out = Path(out).resolve()
    # Before anyone is graded: a sandbox that works here, with the options grading uses.
    try:
        if not options.unsafe:
            find_sandbox(options.limits)
    except SandboxUnavailable as error:
        raise CannotGradeSafely(str(error)) from None
    course = out / "course"
    if not options.keep_reference or options.scheduler is not None:
        options = options.replace(reference_cache=None)  # a scheduler's workers are other hosts: they run their own
    elif options.reference_cache is None:
        options = options.replace(reference_cache=out.parent / REFERENCE_CACHE)
    # The folders this run may make besides OUT: the parents --out named that did not exist, the
    # reference cache and its own. A run that raises removes those it made that are empty (a
    # reference cache holds no lock once its run let go: claimed_reference), deepest first.
    cache = [] if options.reference_cache is None else [Path(options.reference_cache).resolve()]
    made = sorted(
        {folder for place in (out, *cache) for folder in (place, *place.parents) if not folder.exists()} - {out},
        key=lambda folder: len(folder.parts),
        reverse=True,
    )
    writing = contextlib.ExitStack()
    try:
        writing.enter_context(writing_out(out))  # before OUT is looked at: one run at a time writes it
    except OutTaken:
        raise  # what this run sees made is the other run's
    except BaseException:
        _remove_empty(made)
        raise
    made_here = not out.exists()
    try:
        with writing:
            try:
                return _grade(submissions, out, course, options, found, assignment, started, progress_stream)
            except BaseException:
                if made_here:  # a run that raises leaves no half-made class in a folder it made
                    shutil.rmtree(out, ignore_errors=True)
                raise
    except BaseException as error:
        _remove_empty(made)  # once OUT's lock is gone too
        if stopped_by() is not None and not isinstance(error, KeyboardInterrupt):
            # A stop that code in its way took for a failure (nbgrader's log capture takes every
            # exception, KeyboardInterrupt included, and says its command failed): the stop's doing.
            raise KeyboardInterrupt from error
        raise


#: The lock file beside OUT that the run writing OUT holds (locks.held: gone as the run ends), and
#: its name inside OUT where OUT's folder cannot be written.
OUT_LOCK = ".{}.grading.lock"
OUT_LOCK_INSIDE = ".grading.lock"


@contextlib.contextmanager
def writing_out(out: Path):
    """While held, no other grading run on this host writes OUT (its class gradebook; and a run that
    fails removes an OUT it made); a second run is refused (OutTaken). The lock is beside OUT, in
    OUT itself only where OUT's folder cannot be written."""
    for folder in out.parents:  # a run that fails removes the OUT it made, another OUT inside it too
        if held_by_another(folder.parent / OUT_LOCK.format(folder.name)):
            raise OutTaken(
                f"another grading run is writing {folder}, which holds {out}: wait until it ends, or grade "
                "into another --out"
            )
    lock = contextlib.ExitStack()
    try:
        try:
            lock.enter_context(held(out.parent / OUT_LOCK.format(out.name), wait=False))
        except PermissionError:
            if not out.is_dir():
                raise
            lock.enter_context(held(out / OUT_LOCK_INSIDE, wait=False))
    except Taken:
        raise OutTaken(
            f"another grading run is writing {out}: wait until it ends, or grade into another --out"
        ) from None
    with lock:
        yield


class OutTaken(UsageError):
    """Another grading run on this host is writing the same OUT."""


def _remove_empty(folders: list[Path]) -> None:
    """Remove these folders where they are empty, in order (one that holds anything stays)."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _grade(submissions, out, course, options, found, assignment, started, progress_stream) -> GradingResult:
    origin = options.origin
    clear_outputs(out, options.fresh_gradebook)
    out.mkdir(parents=True, exist_ok=True)
    phases: dict[str, float] = {}
    put_venv_on_path()
    options = options.replace(judge_seed=options.judge_seed or secrets.randbits(62))

    runner = HereRunner(options) if options.jobs == 1 and options.scheduler is None else DaskRunner(options)
    with runner, contextlib.ExitStack() as claim:
        update_class_course(course, fresh=options.fresh_gradebook, origin=origin)
        source = CourseSource.read(course)
        key, kept, kept_key = (
            kept_for(options.reference_folder, source, options)
            if options.reference_folder
            else KeptReference("", None, "")
        )
        if key and kept is None:
            waiting = functools.partial(log.info, "waiting for another run's reference run (key %s)", key[:12])
            claim.enter_context(claimed_reference(options.reference_folder, key, waiting))
            _, kept, kept_key = kept_for(options.reference_folder, source, options)  # kept while this run waited
        if kept is None:
            runner.start_reference(source)  # on the workers, while the gradebook is built here
        template, configured_timeout = prepare_class_course(course, source)
        raise_if_stopped()
        tasks_options = options.replace(cell_timeout=options.cell_timeout or configured_timeout)

        tasks: list[StudentTask] = []
        broken: dict[str, list[Trouble]] = {}
        flagged: dict[str, list[Trouble]] = {}
        failed: dict[str, list[Trouble]] = {}
        missed: dict[str, list[Trouble]] = {}
        for student, files in found.students.items():
            taken = take_in(
                files, tuple(source.shipped_names())
            )  # never raises: what it cannot take in is named, graded 0
            if taken.broken:
                broken.setdefault(student, []).extend(taken.broken)
            if taken.findings:
                flagged[student] = list(taken.findings)
            handed_in = [name for name in files if name.endswith(".ipynb")] + found.other_notebooks.get(student, [])
            missed[student] = not_graded(assignment.notebooks, handed_in, taken.broken)
            tasks.append(
                StudentTask(
                    student, taken.notebooks, tasks_options, extra_files=taken.extra, not_graded=missed[student]
                )
            )
        phases["setup"] = time.perf_counter() - started

        progress = Progress(len(tasks), stream=progress_stream, problems=missed)
        progress.note(
            f"judge seed: {options.judge_seed} (grading again with --judge-seed {options.judge_seed} gives the same "
            "inputs and messages)"
        )
        mark = time.perf_counter()
        runs = kept if kept is not None else runner.reference_runs()
        raise_if_stopped()
        if kept is not None:
            if kept_key == key:
                progress.note(f"reference run: kept from an earlier run with the same key ({key[:12]})")
            else:  # kept_for: a run without the sandbox may take a sandboxed run's
                progress.note(f"reference run: kept from an earlier sandboxed run (its key {kept_key[:12]})")
        try:
            template = into_template(template, runs, options, progress.note, kept=kept is not None)
        except ReferenceProblem as error:
            raise CannotGradeSafely(str(error)) from None
        if key and kept is None:
            keep_reference(options.reference_folder, key, runs)
        claim.close()  # the next run with this key finds it kept
        phases["reference"] = time.perf_counter() - mark  # beyond what the setup hid
        mark = time.perf_counter()
        progress.begin()
        results = runner.run(tasks, template, progress)
        raise_if_stopped()
        phases["students"] = time.perf_counter() - mark
    mark = time.perf_counter()

    for result in results:
        if result.failed:
            failed.setdefault(result.student_id, []).extend(result.failed)
        # What grading found against the judge's verdicts, reviewed as the scan's findings are.
        if result.flags:
            flagged.setdefault(result.student_id, []).extend(result.flags)
    # A student the grader failed is not merged: no zero stands for a grade nobody gave, and a
    # regrade's earlier grades stay as they were until they are graded again.
    graded_now = [result for result in results if not result.failed]
    # Each student's results merged, and their files written, on their own: one that fails is named.
    merged = merge_into_gradebook(course, graded_now, flagged)
    for student, why in merged.failed.items():
        failed.setdefault(student, []).append(_grader_failed(f"their results could not be stored: {why}"))
    graded_now = [result for result in graded_now if result.student_id not in merged.failed]
    for result in graded_now:
        if result.broken:
            broken.setdefault(result.student_id, []).extend(result.broken)
        try:
            write_student_files(
                out, course, result, found.students[result.student_id], flagged.get(result.student_id, [])
            )
        except Exception as error:
            failed.setdefault(result.student_id, []).append(
                _grader_failed(f"their files could not be written: {type(error).__name__}: {console_line(error)}")
            )
    for result in graded_now:  # what the class report reads of them; their last run's is kept as the one before
        student = result.student_id
        try:
            # The unreadable are among the broken; the missing and the renamed are kept beside them.
            beside = (TroubleKind.MISSING, TroubleKind.RENAMED)
            troubles = broken.get(student, []) + [t for t in missed.get(student, []) if t.kind in beside]
            write_judged(out, student, result.outcomes, troubles, flagged.get(student, []), options.judge_seed)
        except OSError as error:  # their grades are stored; only the report misses them
            log.warning("the class report's record of %s was not written: %s", student, error)
    students = sorted(found.students)
    stored = sorted(result.student_id for result in graded_now)
    cells = read_cells(course, stored)
    in_class = class_students(course)
    if in_class:  # the class files hold what the gradebook holds: nothing before anyone is graded
        write_class_files(out, course, {k: v for k, v in flagged.items() if k in stored}, stored)
        write_run_report(out, course)
    by_hand = graded_by_hand(course, stored)
    if by_hand:  # the pages the workers wrote know nothing of the gradebook's manual grades
        for student, why in regenerate_feedback(out, by_hand).failed.items():
            failed.setdefault(student, []).append(_grader_failed(f"their feedback could not be regenerated: {why}"))
        log.info("feedback of %s regenerated with the manual grades kept in the gradebook", ", ".join(by_hand))
    phases["merge_and_export"] = time.perf_counter() - mark
    seconds = time.perf_counter() - started
    outcome = GradingResult(
        cells=cells,
        broken={k: broken[k] for k in sorted(broken)},
        flagged=flagged,
        seconds=seconds,
        students=students,
        timings={r.student_id: r.timings for r in results},
        student_seconds={r.student_id: r.seconds for r in results},
        out=out,
        phases={k: round(v, 2) for k, v in phases.items()},
        rejected=dict(found.rejected),
        notes=dict(found.notes),
        failed={k: failed[k] for k in sorted(failed)},
        rechecks=merged.rechecks,
        assignment=assignment,
        not_graded={k: v for k, v in sorted(missed.items()) if v},
        judge_seed=options.judge_seed,
        in_class=in_class,
    )
    progress.finish(seconds, summary_of(outcome))
    raise_if_stopped()  # a stop Python dropped while the run wrote its files
    return outcome


def summary_of(result: GradingResult) -> Summary:
    """The run's counts, from its result (the summary line says what the lines after it name)."""
    stored = {row["student_id"] for row in result.cells}

    def having(kind: TroubleKind) -> int:
        return len(
            {s for s, troubles in result.not_graded.items() if s in stored and any(t.kind is kind for t in troubles)}
        )

    broke = {s for s, troubles in result.broken.items() if any(t.kind is not TroubleKind.UNREADABLE for t in troubles)}
    return Summary(
        graded=len(stored),
        broken=len(broke & stored),
        unreadable=having(TroubleKind.UNREADABLE),
        missing=having(TroubleKind.MISSING),
        renamed=having(TroubleKind.RENAMED),
        flagged=len(set(result.flagged) & stored),
        rechecks=len(result.rechecks),
        failed=len(result.failed),
        rejected=len(result.rejected),
    )


def class_line(result: GradingResult) -> str | None:
    """What the class gradebook holds beyond this run's students (a regrade of a few, a late
    student): None when it holds only them."""
    stored = {row["student_id"] for row in result.cells}
    earlier = [student for student in result.in_class if student not in stored]
    if not earlier:
        return None
    return (
        f"the class gradebook holds {len(result.in_class)} student(s): {len(stored)} graded in this run, "
        f"{len(earlier)} kept as earlier runs stored them ({', '.join(earlier[:5])}{', ...' if len(earlier) > 5 else ''})"
    )


def _grader_failed(why: str) -> Trouble:
    return Trouble(TroubleKind.GRADER_FAILED, why)


def score_table(result: GradingResult) -> str:
    """Students x notebooks, points/max as the gradebook counts them (cells.csv's rows: pending
    cells at the score they hold); * marks notebooks with cells still waiting for a person, graded
    in formgrader on the run's course (OUT/course)."""
    course = str(result.out / "course") if result.out is not None else "OUT/course"
    totals: dict[tuple[str, str], list] = {}
    for row in result.cells:
        entry = totals.setdefault((row["student_id"], row["notebook"]), [0.0, 0.0, False])
        entry[0] += row["score"]
        entry[1] += row["max_score"]
        entry[2] |= row["pending"] == "yes"
    stems = result.assignment.stems
    width = max([len("student")] + [len(s) for s in result.students])
    header = f"{'student':<{width}}  " + "  ".join(f"{s[:13]:>13}" for s in stems) + f"  {'total':>11}"
    lines = [header, "-" * len(header)]
    for student in result.students:
        cells, got, most = [], 0.0, 0.0
        for stem in stems:
            score, maximum, manual = totals.get((student, stem), [0.0, 0.0, False])
            got, most = got + score, most + maximum
            cells.append(f"{score:g}/{maximum:g}{'*' if manual else ''}".rjust(13))
        if student in result.failed and not any(row["student_id"] == student for row in result.cells):
            lines.append(f"{student:<{width}}  not graded (FAILED below)")
            continue
        troubled = student in result.broken or student in result.not_graded
        mark = " !" if troubled else (" ?" if student in result.flagged else "")
        lines.append(f"{student:<{width}}  " + "  ".join(cells) + f"  {f'{got:g}/{most:g}':>11}{mark}")
    lines.append(
        f"* cells awaiting a person, counted as they stand (formgrader on {course}); ! a notebook broken, unreadable "
        "or missing; ? flagged for review"
    )
    return "\n".join(lines)


def _limit(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE (e.g. memory=8G), not {text!r}")
    return name.strip(), value.strip()


def command_line() -> argparse.ArgumentParser:
    """`autograder grade`'s arguments (the usage in this module's docstring and autograder/README.md
    shows them all; their settings' flags and help come from their declarations, options.py)."""
    parser = argparse.ArgumentParser(
        prog="autograder grade",
        description=__doc__.splitlines()[0],
        epilog="Any setting of `--help-all` may also be given as --Class.name=value (e.g. --TimePolicy.time_floor=60); "
        "a course's nbgrader_config.py sets them too (command line first).",
    )
    parser.add_argument("submissions", type=Path, help="folder of <student_id>/<notebook>.ipynb")
    parser.add_argument(
        "--out",
        type=Path,
        help=f"where results go, never where a kernel or a learner can read (default with --course: "
        f"COURSE/{OUT_IN_COURSE}/ASSIGNMENT; required otherwise)",
    )
    GradingOptions.add_flags(parser)
    parser.add_argument("--tls-ca-file", help="with --scheduler: the certificate authority of the cluster's TLS")
    parser.add_argument("--tls-cert", help="with --scheduler: this client's certificate")
    parser.add_argument("--tls-key", help="with --scheduler: this client's private key")
    parser.add_argument(
        "--limit",
        type=_limit,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=f"what one kernel may use (SandboxLimits: {', '.join(Limits.names())}; sizes like 8G); one limit "
        "each, e.g. memory=8G; repeatable",
    )
    parser.add_argument(
        "--course",
        type=Path,
        help="grade an assignment of this nbgrader course folder (it holds source/<assignment>/)",
    )
    parser.add_argument(
        "--bundle",
        type=Path,
        metavar="CHECKOUT",
        help="instead of --course: the assignment of a checkout of a course bundle (its nbgrader_config.py names it)",
    )
    parser.add_argument("--assignment", help="with --course: the assignment's id (its folder in source/)")
    parser.add_argument("--help-all", action="store_true", help="every setting of a run, its default and help")
    return parser


def course_config(origin) -> Config:
    """The course's nbgrader_config.py as traitlets reads it (an empty Config where it has none):
    its settings of the run (a limit, the time policy) apply to `autograder grade` as to
    `nbgrader autograde`."""
    folder = origin.folder if isinstance(origin, CourseOrigin) else origin.checkout
    if not (folder / "nbgrader_config.py").is_file():
        return Config()
    try:
        return PyFileConfigLoader("nbgrader_config.py", path=str(folder)).load_config()
    except Exception as error:  # the instructor's file: its own error, said
        raise UsageError(f"{folder / 'nbgrader_config.py'} cannot be read: {type(error).__name__}: {error}") from None


def _options(args, rest: list[str]) -> GradingOptions:
    """The run's options: the declarations' defaults, then the course's configuration, then the
    command line (--Class.name=value, --limit, the flags)."""
    origin = (
        CourseOrigin(args.course.resolve(), args.assignment) if args.course else BundleOrigin(args.bundle.resolve())
    )
    config = course_config(origin)
    config.merge(overrides(rest))
    for name, value in args.limit:
        config.SandboxLimits[name] = value
    tls = [args.tls_ca_file, args.tls_cert, args.tls_key]
    if args.reference_cache is not None:
        args.reference_cache = str(Path(args.reference_cache).resolve())
    try:
        limits = Limits.from_config(config)
    except ValueError as error:
        raise UsageError(str(error)) from None
    return GradingOptions.from_flags(
        args,
        config,
        scheduler_security=SchedulerSecurity(*tls) if all(tls) else None,
        limits=limits,
        origin=origin,
    )


def main(argv=None) -> int:
    args, rest = command_line().parse_known_args(argv)
    if args.help_all:
        print(help_all())
        return ExitCode.DONE
    if bool(args.course) != bool(args.assignment):
        print("error: --course and --assignment go together", file=sys.stderr)
        return ExitCode.USAGE
    if bool(args.course) == bool(args.bundle):
        print("error: name the assignment: --course COURSE --assignment ID, or --bundle CHECKOUT", file=sys.stderr)
        return ExitCode.USAGE
    if args.out is None and not args.course:
        print("error: --out is required without --course", file=sys.stderr)
        return ExitCode.USAGE
    tls = [args.tls_ca_file, args.tls_cert, args.tls_key]
    if any(tls) and not all(tls):
        print("error: --tls-ca-file, --tls-cert and --tls-key go together", file=sys.stderr)
        return ExitCode.USAGE
    show_log()
    with listening_for_stops(), threads_shown_on_request():
        return _graded(args, rest)  # SIGTERM cleans up as Ctrl-C does


@contextlib.contextmanager
def threads_shown_on_request():
    """`kill -USR1 PID` on a run that seems stuck prints where each of its threads is (Python's
    faulthandler, to stderr), and the run goes on. Only for the process's own command (a program
    that calls main([...]) keeps its SIGUSR1 as it set it), and none where stderr has no file
    descriptor. A stopped run keeps it until its process exits (stopping.kept_until_exit): what it
    then waits for (a thread a library left running) is where it would look stuck."""
    registered = False
    if is_the_process_command():
        try:
            faulthandler.register(signal.SIGUSR1, all_threads=True)
            registered = True
        except (AttributeError, ValueError, OSError):  # a stderr that is no file (a test's capture)
            pass
    try:
        yield
    finally:
        if registered and not kept_until_exit():
            faulthandler.unregister(signal.SIGUSR1)


def _graded(args, rest) -> int:
    """The run and what it prints, its stops heard (listening_for_stops)."""
    try:
        options = _options(args, rest)
        if options.unsafe:
            print(UNSAFE_WARNING, file=sys.stderr, flush=True)
        result = grade(args.submissions, args.out or default_out(options.origin), options)
        finished()  # the results are written: a stop while they are printed changes nothing
    except GraderError as error:
        nobody = "nobody was graded: " if error.exit_code is ExitCode.UNSAFE else ""
        print(f"error: {nobody}{error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        finished()  # (a second Ctrl-C while this is printed, too)
        terminated = stopped_by() is signal.SIGTERM
        print(
            f"stopped by {'SIGTERM' if terminated else 'Ctrl-C'} before the run finished: its temporary folders, "
            "and an --out it made, are removed",
            file=sys.stderr,
        )
        return ExitCode.TERMINATED if terminated else ExitCode.INTERRUPTED
    print(score_table(result))
    # Everything after the table may quote a submission: each line goes out with its control
    # characters escaped, so no learner's text acts on the instructor's terminal.
    for student, why in result.rejected.items():
        print(console_line(f"REJECTED {student!r}: not graded: {why}", 1000))
    for student, notes in result.notes.items():
        for note in notes:
            print(console_line(f"NOTE    {student}: {note}", 1000))
    for student, reasons in result.broken.items():
        for reason in reasons:
            print(console_line(f"BROKEN  {student}: {reason.line()}", 1000))
    for student, troubles in result.not_graded.items():  # (the unreadable are among the BROKEN above)
        for line in not_graded_lines(student, [t for t in troubles if t.kind is not TroubleKind.UNREADABLE]):
            print(line)
    for student, findings in result.flagged.items():
        for finding in findings:
            print(console_line(f"REVIEW  {student}: {finding.line()}", 1000))
    for line in result.rechecks:
        print(console_line(line, 1000))
    for student, reasons in result.failed.items():
        for reason in reasons:
            print(
                console_line(f"FAILED  {student}: the grader could not grade them: {reason.line()}", 1000),
                file=sys.stderr,
            )
    assert result.out is not None  # grade() names the OUT it wrote
    where = result.out.relative_to(ROOT) if result.out.is_relative_to(ROOT) else result.out
    if (result.out / "grades.csv").exists():
        print(
            f"wrote {where}/grades.csv, cells.csv, flags.csv, feedback/ and the gradebook {where}/course/gradebook.db"
        )
        kept = class_line(result)
        if kept:
            print(console_line(kept, 1000))
        if (result.out / "report.html").exists():
            print(f"the class at a glance: {where}/report.html (its tables as CSV in {where}/report/)")
    else:
        print(f"wrote no grades: nobody is graded in {where}/course/gradebook.db", file=sys.stderr)
    if result.failed:
        print(
            f"error: {len(result.failed)} student(s) could not be graded for a reason of the grader's own "
            "(FAILED lines above): grade them again",
            file=sys.stderr,
        )
        return ExitCode.GRADER_FAILED
    return ExitCode.DONE


if __name__ == "__main__":
    sys.exit(as_the_process_command(main))
