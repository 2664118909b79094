"""Autograde a class's submissions of performance-05: scores, feedback and grades.csv.

    python -m autograder.grade SUBMISSIONS [--jobs N] [--scheduler tls://host:port --tls-ca-file F
                               --tls-cert F --tls-key F] [--out DIR] [--cell-timeout S]
                               [--limit NAME=VALUE ...] [--no-compile-cache] [--no-fork]
                               [--unsafe-no-sandbox]

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
import re
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .course import BUNDLE, Assignment, CourseOrigin, assignment_of_origin, use_the_venvs_tools
from .feedback import regenerate_feedback, write_student_files
from .gradebook import (
    GradebookError,
    build_course,
    clear_outputs,
    graded_by_hand,
    merge_into_gradebook,
    prepare_class_course,
    read_cells,
    source_files,
    write_class_files,
)
from .intake import printable, take_in
from .paths import ROOT, RUNS
from .progress import Progress
from .reference import ReferenceProblem, into_template
from .runners import DaskRunner, HereRunner, SchedulerSecurity
from .sandbox import UNSAFE_FLAG, UNSAFE_WARNING, Limits, SandboxUnavailable, find_sandbox
from .submissions import UsageError, find_submissions
from .worker import StudentTask

DEFAULT_OUT = RUNS / "autograde"


class CannotGradeSafely(RuntimeError):
    """This host or this course cannot grade anyone fairly and safely (exit 3)."""


@dataclass
class GradingResult:
    cells: list[dict]
    broken: dict[str, list[str]]
    flagged: dict[str, list[str]]
    seconds: float
    students: list[str]
    timings: dict[str, list[dict]] = field(default_factory=dict)
    student_seconds: dict[str, float] = field(default_factory=dict)
    out: Path | None = None
    phases: dict[str, float] = field(default_factory=dict)  # wall seconds of each step of the run
    rejected: dict[str, str] = field(default_factory=dict)  # student folders not graded, and why
    notes: dict[str, list[str]] = field(default_factory=dict)  # files left out of a submission
    #: students the grader itself failed (a crashed worker, a gradebook it could not write): not the
    #: submission's doing; the run exits 4 when there is any
    failed: dict[str, list[str]] = field(default_factory=dict)
    assignment: Assignment = BUNDLE


# ----------------------------------------------------------------------------------------
# The whole run
# ----------------------------------------------------------------------------------------
def grade(
    submissions: Path,
    out: Path = DEFAULT_OUT,
    jobs: int = 1,
    scheduler: str | None = None,
    cell_timeout: int | None = None,
    progress_stream=None,
    compile_cache: bool = True,
    fork_kernels: bool = True,
    unsafe_no_sandbox: bool = False,
    limits: dict | None = None,
    scheduler_security: SchedulerSecurity | None = None,
    fresh_gradebook: bool = False,
    judge_seed: int | None = None,
    origin: CourseOrigin | None = None,
) -> GradingResult:
    """Grade every student in submissions; write OUT. UsageError on bad arguments,
    GradebookError when OUT's class gradebook holds another assignment, CannotGradeSafely when
    no sandbox works here or the instructor's notebooks fail their checks.

    compile_cache and fork_kernels only change how long grading takes, never a grade: the
    first shares the reference run's compiled programs (autograder/compile_cache.py), the
    second forks each notebook's kernel from one warm host per student (autograder/kernel_host.py).
    An existing class gradebook in OUT/course is reused, manual grades kept (fresh_gradebook:
    start a new one, the old one backed up; autograder/gradebook.py). judge_seed: the seed of
    the judge's fresh inputs (default: a new one for this run, which only the grader holds).
    origin: an instructor's course folder and assignment to grade (default: the bundle's).
    """
    started = time.perf_counter()
    if jobs < 1:
        raise UsageError(f"--jobs must be at least 1, not {jobs}")
    if cell_timeout is not None and cell_timeout < 1:
        raise UsageError(f"--cell-timeout must be at least 1 second, not {cell_timeout}")
    if scheduler is not None:
        if not re.match(r"^tls://\S+$", scheduler):
            raise UsageError(
                f"--scheduler wants a TLS address like tls://host:8786, not {scheduler!r}: an "
                "unencrypted scheduler runs code for anyone who reaches it"
            )
        if scheduler_security is None:
            raise UsageError("--scheduler needs the instructor's TLS files: --tls-ca-file, --tls-cert and --tls-key")
    try:
        sandbox_limits = Limits.from_config(limits)
    except ValueError as error:
        raise UsageError(str(error)) from None
    submissions = Path(submissions).resolve()
    assignment = BUNDLE
    if origin is not None:
        try:
            assignment = assignment_of_origin(origin)
        except (OSError, ValueError) as error:
            raise UsageError(str(error)) from None
    found = find_submissions(submissions, assignment)
    out = Path(out).resolve()
    if out == submissions or submissions.is_relative_to(out):
        raise UsageError(f"--out {out} would overwrite the submissions in {submissions}")
    # Before anyone is graded: a sandbox that works here, with the options grading uses.
    try:
        find_sandbox(sandbox_limits, unsafe=unsafe_no_sandbox)
    except SandboxUnavailable as error:
        raise CannotGradeSafely(str(error)) from None
    course = out / "course"
    clear_outputs(out, fresh_gradebook)
    out.mkdir(parents=True, exist_ok=True)
    phases: dict[str, float] = {}
    use_the_venvs_tools()
    seed = judge_seed if judge_seed else secrets.randbits(62)
    options = {"unsafe": unsafe_no_sandbox, "limits": dict(limits or {}), "judge_seed": seed}

    runner = (
        HereRunner(**options)
        if jobs == 1 and scheduler is None
        else DaskRunner(jobs, scheduler, scheduler_security, **options)
    )
    with runner:
        build_course(course, fresh=fresh_gradebook, origin=origin)
        source = source_files(course)
        runner.start_reference(source, fill_cache=compile_cache)  # on the workers, while the gradebook is built here
        template, configured_timeout = prepare_class_course(course, source)
        timeout = cell_timeout or configured_timeout

        tasks, broken, flagged, findings_by_nb, failed = [], {}, {}, {}, {}
        for student, files in found.students.items():
            taken = take_in(files)  # never raises: what it cannot take in is named, graded 0
            if taken.broken:
                broken.setdefault(student, []).extend(taken.broken)
            if taken.findings:
                findings_by_nb[student] = taken.findings
                flagged[student] = [f"{name}: {f}" for name, found_here in taken.findings.items() for f in found_here]
            tasks.append(
                StudentTask(
                    student, taken.notebooks, timeout, extra_files=taken.extra, fork_kernels=fork_kernels, **options
                )
            )
        phases["setup"] = time.perf_counter() - started

        progress = Progress(len(tasks), stream=progress_stream)
        mark = time.perf_counter()
        try:
            template = into_template(template, runner.reference_runs(), progress.note, sandbox_limits)
        except ReferenceProblem as error:
            raise CannotGradeSafely(str(error)) from None
        phases["reference"] = time.perf_counter() - mark  # beyond what the setup hid
        mark = time.perf_counter()
        results = runner.run(tasks, template, progress)
        phases["students"] = time.perf_counter() - mark
    mark = time.perf_counter()

    for result in results:
        if result.failed:
            failed.setdefault(result.student_id, []).extend(result.failed)
    # Each student's results merged, and their files written, on their own: one that fails is named.
    for student, why in merge_into_gradebook(course, results, findings_by_nb).items():
        failed.setdefault(student, []).append(f"their results could not be stored: {why}")
    for result in results:
        if result.broken:
            broken.setdefault(result.student_id, []).extend(result.broken)
        try:
            write_student_files(
                out, course, result, found.students[result.student_id], findings_by_nb.get(result.student_id, {})
            )
        except Exception as error:
            failed.setdefault(result.student_id, []).append(
                f"their files could not be written: {type(error).__name__}: {printable(error)}"
            )
    students = sorted(found.students)
    cells = read_cells(course, students)
    write_class_files(out, course, flagged, students)
    by_hand = graded_by_hand(course, students)
    if by_hand:  # the pages the workers wrote know nothing of the gradebook's manual grades
        for student, why in regenerate_feedback(out, by_hand).failed.items():
            failed.setdefault(student, []).append(f"their feedback could not be regenerated: {why}")
        print(f"feedback of {', '.join(by_hand)} regenerated with the manual grades kept in the gradebook")
    phases["merge_and_export"] = time.perf_counter() - mark
    seconds = time.perf_counter() - started
    progress.finish(seconds)
    return GradingResult(
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
        assignment=assignment,
    )


def score_table(result: GradingResult) -> str:
    """Students x notebooks, points/max; * marks cells still waiting for a manual grade."""
    totals: dict[tuple[str, str], list] = {}
    for row in result.cells:
        entry = totals.setdefault((row["student_id"], row["notebook"]), [0.0, 0.0, False])
        entry[0] += row["score"] if row["score"] != "" else 0.0
        entry[1] += row["max_score"]
        entry[2] |= row["score"] == ""
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
        mark = " !" if student in result.broken else (" ?" if student in result.flagged else "")
        lines.append(f"{student:<{width}}  " + "  ".join(cells) + f"  {f'{got:g}/{most:g}':>11}{mark}")
    lines.append(
        "* includes cells awaiting manual grading (formgrader on OUT/course); ! broken submission; ? flagged for review"
    )
    return "\n".join(lines)


def _limit(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE (e.g. memory=8G), not {text!r}")
    return name.strip(), value.strip()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("submissions", type=Path, help="folder of <student_id>/<notebook>.ipynb")
    parser.add_argument(
        "--jobs", type=int, default=1, help="students graded at once on a local Dask cluster (default 1: here)"
    )
    parser.add_argument(
        "--scheduler", help="address of a running Dask scheduler that speaks TLS, e.g. tls://10.0.0.5:8786"
    )
    parser.add_argument("--tls-ca-file", help="with --scheduler: the certificate authority of the cluster's TLS")
    parser.add_argument("--tls-cert", help="with --scheduler: this client's certificate")
    parser.add_argument("--tls-key", help="with --scheduler: this client's private key")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"where results go (default {DEFAULT_OUT.relative_to(ROOT)})"
    )
    parser.add_argument("--cell-timeout", type=int, help="seconds a cell may run (default: nbgrader_config.py)")
    parser.add_argument(
        "--limit",
        type=_limit,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help=f"a limit of every kernel, e.g. memory=8G (names: {', '.join(Limits().as_dict())}); repeatable",
    )
    parser.add_argument(
        "--no-compile-cache",
        dest="compile_cache",
        action="store_false",
        help="every kernel compiles for itself (slower; grades are the same)",
    )
    parser.add_argument(
        "--no-fork",
        dest="fork_kernels",
        action="store_false",
        help="a fresh sandbox and kernel per notebook instead of forks of a warm one (slower; same grades)",
    )
    parser.add_argument(
        "--fresh-gradebook",
        action="store_true",
        help="start a new class gradebook (the old one is copied to OUT/gradebook-backups/): "
        "manual grades are then lost; by default they are kept",
    )
    parser.add_argument(
        "--course",
        type=Path,
        help="grade an assignment of this nbgrader course folder (it holds source/<assignment>/); "
        "default: this bundle's performance-05",
    )
    parser.add_argument("--assignment", help="with --course: the assignment's id (its folder in source/)")
    parser.add_argument(
        "--judge-seed",
        type=int,
        help="the seed of the fresh inputs the grader's checks draw (default: a new one for every run); "
        "give the one a run printed to grade again with the same inputs",
    )
    parser.add_argument(
        UNSAFE_FLAG,
        dest="unsafe",
        action="store_true",
        help="grade WITHOUT any sandbox: only for submissions you trust",
    )
    args = parser.parse_args(argv)
    if bool(args.course) != bool(args.assignment):
        print("error: --course and --assignment go together", file=sys.stderr)
        return 2
    origin = CourseOrigin(args.course.resolve(), args.assignment) if args.course else None
    tls = [args.tls_ca_file, args.tls_cert, args.tls_key]
    security = SchedulerSecurity(*tls) if all(tls) else None
    if any(tls) and not all(tls):
        print("error: --tls-ca-file, --tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    if args.unsafe:
        print(UNSAFE_WARNING, file=sys.stderr, flush=True)
    try:
        result = grade(
            args.submissions,
            args.out,
            args.jobs,
            args.scheduler,
            args.cell_timeout,
            compile_cache=args.compile_cache,
            fork_kernels=args.fork_kernels,
            unsafe_no_sandbox=args.unsafe,
            limits=dict(args.limit),
            scheduler_security=security,
            fresh_gradebook=args.fresh_gradebook,
            judge_seed=args.judge_seed,
            origin=origin,
        )
    except (UsageError, GradebookError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except CannotGradeSafely as error:
        print(f"error: nobody was graded: {error}", file=sys.stderr)
        return 3
    print(score_table(result))
    # Everything after the table may quote a submission: each line goes out with its control
    # characters escaped, so no learner's text acts on the instructor's terminal.
    for student, why in result.rejected.items():
        print(printable(f"REJECTED {student!r}: not graded: {why}", 1000))
    for student, notes in result.notes.items():
        for note in notes:
            print(printable(f"NOTE    {student}: {note}", 1000))
    for student, reasons in result.broken.items():
        for reason in reasons:
            print(printable(f"BROKEN  {student}: {reason}", 1000))
    for student, findings in result.flagged.items():
        for finding in findings:
            print(printable(f"REVIEW  {student}: {finding}", 1000))
    for student, reasons in result.failed.items():
        for reason in reasons:
            print(printable(f"FAILED  {student}: the grader could not grade them: {reason}", 1000), file=sys.stderr)
    where = result.out.relative_to(ROOT) if result.out.is_relative_to(ROOT) else result.out
    print(f"wrote {where}/grades.csv, cells.csv, flags.csv, feedback/ and the gradebook {where}/course/gradebook.db")
    if result.failed:
        print(
            f"error: {len(result.failed)} student(s) could not be graded for a reason of the grader's own "
            "(FAILED lines above): grade them again",
            file=sys.stderr,
        )
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
