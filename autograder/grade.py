"""Autograde a class's submissions of performance-05: scores, feedback and grades.csv.

    python -m autograder.grade SUBMISSIONS [--jobs N] [--scheduler tcp://host:port]
                               [--out DIR] [--cell-timeout S] [--no-compile-cache] [--no-fork]

SUBMISSIONS holds <student_id>/<notebook>.ipynb (any of the five notebooks). Each student is
graded in a scratch course of their own (their own gradebook; the kernel sandboxed), on this
process (--jobs 1), on a local Dask cluster (--jobs N) or on a running Dask scheduler; the
results are merged into one class gradebook, OUT/course/gradebook.db, from which OUT/grades.csv
is exported. OUT/cells.csv has one row per graded cell, OUT/feedback/<student>/ the feedback.
A submission that breaks (unreadable notebook, kernel death, timeout) scores 0 where it
breaks and is named; the others are graded all the same. Exit 0 when grading ran, 2 on bad
arguments.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .course import nbgrader_env
from .gradebook import (  # noqa: F401 (re-exported: the gradebook functions lived here)
    CELL_COLUMNS, GradebookError, _api, _escape, _flag_note, build_course, clear_outputs, export_grades,
    merge_into_gradebook, prepare_class_course, read_cells, source_cell_order, source_files, write_class_files,
)
from .paths import ASSIGNMENT, NOTEBOOKS, ROOT, RUNS, SHIPPED_MODULES
from .compile_cache import Filled, fill_from_source, into_template
from .progress import Progress
from .tampering import scan_notebook
from .worker import StudentResult, StudentTask, grade_student, quiet_gradebook_warnings, valid_student_id, warm_up

DEFAULT_OUT = RUNS / "autograde"
# Files a collected submission may carry besides notebooks (nbgrader collect writes timestamp.txt).
EXTRA_FILES = ("timestamp.txt",)


class UsageError(ValueError):
    """Bad arguments: the command line or the submissions folder is not what grading needs."""


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


# ----------------------------------------------------------------------------------------
# Reading the submissions folder
# ----------------------------------------------------------------------------------------
def find_submissions(folder: Path) -> dict[str, dict[str, Path]]:
    """{student_id: {notebook or extra file name: path}}; UsageError when the layout is wrong."""
    folder = Path(folder)
    if not folder.exists():
        raise UsageError(f"the submissions folder {folder} does not exist")
    if not folder.is_dir():
        raise UsageError(f"{folder} is a file: give the folder that holds <student_id>/<notebook>.ipynb")
    layout = f"expected {folder}/<student_id>/<notebook>.ipynb, notebooks among: {', '.join(NOTEBOOKS)}"
    found: dict[str, dict[str, Path]] = {}
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_file():
            if entry.suffix == ".ipynb":
                raise UsageError(f"{entry} sits at the top of the submissions folder; {layout}")
            continue
        if not valid_student_id(entry.name):
            raise UsageError(f"{entry.name!r} is not usable as a student id (letters, digits and _.@+- only)")
        files: dict[str, Path] = {}
        for item in sorted(entry.iterdir()):
            if item.name.startswith("."):
                continue
            if item.is_dir():
                hint = " (that is nbgrader's submitted/ layout: give the notebooks directly)" if item.name == ASSIGNMENT else ""
                raise UsageError(f"{item} is a folder{hint}; {layout}")
            if item.suffix == ".ipynb":
                if item.name not in NOTEBOOKS:
                    raise UsageError(f"{item} is not a notebook of {ASSIGNMENT}; {layout}")
                files[item.name] = item
            elif item.name in EXTRA_FILES:
                files[item.name] = item
        if not any(name.endswith(".ipynb") for name in files):
            raise UsageError(f"{entry} holds no notebooks; {layout}")
        found[entry.name] = files
    if not found:
        raise UsageError(f"{folder} holds no student folders; {layout}")
    return found


def read_notebook(path: Path) -> tuple[bytes | None, nbformat.NotebookNode | None, str | None]:
    """(bytes, notebook, None) for a readable notebook, (None, None, why) otherwise."""
    data = path.read_bytes()
    try:
        with warnings.catch_warnings():  # nbformat's warnings about cell ids: nbgrader copes
            warnings.simplefilter("ignore")
            notebook = nbformat.reads(data.decode("utf-8"), as_version=4)
    except UnicodeDecodeError:
        return None, None, "not a notebook (the file is not UTF-8 text)"
    except Exception as error:  # nbformat raises several kinds for a damaged file
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return None, None, f"not a readable notebook ({first})"
    if not isinstance(notebook.get("cells"), list):
        return None, None, "not a readable notebook (it has no cell list)"
    return data, notebook, None


# ----------------------------------------------------------------------------------------
# The class course: one gradebook, kept from run to run (autograder/gradebook.py)
# ----------------------------------------------------------------------------------------
def write_student_files(out: Path, course: Path, result: StudentResult, submission: dict[str, Path],
                        findings: dict[str, list[str]]) -> None:
    """The course folder a stock nbgrader run would leave (for formgrader), and OUT/feedback/."""
    student = result.student_id
    submitted = course / "submitted" / student / ASSIGNMENT
    autograded = course / "autograded" / student / ASSIGNMENT
    feedback = course / "feedback" / student / ASSIGNMENT
    for folder in (submitted, autograded, feedback, out / "feedback" / student):
        folder.mkdir(parents=True, exist_ok=True)
    for name, path in submission.items():
        shutil.copyfile(path, submitted / name)
    for name, text in result.autograded.items():
        (autograded / name).write_text(text)
    for name in SHIPPED_MODULES:
        source = course / "source" / ASSIGNMENT / name
        if result.autograded and source.exists():
            shutil.copyfile(source, autograded / name)
    for name, html in result.feedback.items():
        notes = findings.get(Path(name).stem + ".ipynb")
        if notes:
            html = _flag_note(html, notes)
        (feedback / name).write_text(html)
        (out / "feedback" / student / name).write_text(html)


# ----------------------------------------------------------------------------------------
# Running the tasks: here, or on Dask
# ----------------------------------------------------------------------------------------
def _broken_result(student_id: str, why: str) -> StudentResult:
    return StudentResult(student_id, broken=[f"the whole submission: {why}; graded 0"])


class HereRunner:
    """Grading in this process, one student after another (--jobs 1)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def start_filling(self, source: dict[str, bytes]) -> None:
        self._source = source

    def filled(self) -> list[Filled]:
        return [fill_from_source(name, self._source) for name in NOTEBOOKS]

    def run(self, tasks, template, progress) -> list[StudentResult]:
        results = []
        for task in tasks:
            for attempt in (1, 2):
                try:
                    result = grade_student(task, template)
                    break
                except Exception as error:  # the machinery failed on this submission: retry once
                    if attempt == 2:
                        result = _broken_result(task.student_id, f"grading failed twice ({type(error).__name__}: {error})")
            progress.update(result)
            results.append(result)
        return results


class DaskRunner:
    """Grading on a local Dask cluster of `jobs` worker processes, or on a running scheduler.

    Started before the class course is set up, so the workers start, import and fill the
    compile cache while this process builds the gradebook.
    """

    def __init__(self, jobs: int, scheduler: str | None):
        self.jobs, self.scheduler = jobs, scheduler
        self.cluster = self.client = None
        self._fills: list = []

    def __enter__(self):
        import logging

        import dask
        from dask.distributed import Client, LocalCluster

        # A task that kills its worker fails at once (not after three workers) and is retried here, once.
        with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
            if self.scheduler is None:
                self.cluster = LocalCluster(n_workers=self.jobs, threads_per_worker=1, processes=True,
                                            dashboard_address=None, memory_limit=0, silence_logs=logging.ERROR)
            self.client = Client(self.cluster if self.cluster is not None else self.scheduler, timeout="30s")
        return self

    def __exit__(self, *exc):
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()
        return False

    def start_filling(self, source: dict[str, bytes]) -> None:
        # Largest notebook first (the most to compile), so the workers finish at about the same time.
        order = sorted(NOTEBOOKS, key=lambda name: -len(source.get(f"source/{ASSIGNMENT}/{name}", b"")))
        self._fills = [self.client.submit(fill_from_source, name, source, key=f"cache-{name}", pure=False) for name in order]

    def filled(self) -> list[Filled]:
        return self.client.gather(self._fills)

    def run(self, tasks, template, progress) -> list[StudentResult]:
        from dask.distributed import as_completed

        client = self.client
        client.run(warm_up)
        shared = client.scatter(template, broadcast=True)
        attempts, results = {}, []
        futures = as_completed()
        for task in tasks:
            attempts[task.student_id] = 1
            futures.add(client.submit(grade_student, task, shared, key=f"grade-{task.student_id}-1", pure=False))
        by_key = {f"grade-{t.student_id}": t for t in tasks}
        for future in futures:
            task = by_key[future.key.rsplit("-", 1)[0]]
            try:
                result = future.result()
            except Exception as error:
                if attempts[task.student_id] < 2:
                    attempts[task.student_id] += 1
                    key = f"grade-{task.student_id}-{attempts[task.student_id]}"
                    futures.add(client.submit(grade_student, task, shared, key=key, pure=False))
                    continue
                result = _broken_result(task.student_id, f"its grading worker failed twice ({type(error).__name__}: {error})")
            progress.update(result)
            results.append(result)
        return results


# ----------------------------------------------------------------------------------------
# The whole run
# ----------------------------------------------------------------------------------------
def grade(submissions: Path, out: Path = DEFAULT_OUT, jobs: int = 1, scheduler: str | None = None,
          cell_timeout: int | None = None, progress_stream=None, compile_cache: bool = True,
          fork_kernels: bool = True, fresh_gradebook: bool = False) -> GradingResult:
    """Grade every student in submissions; write OUT; UsageError on bad arguments.

    compile_cache and fork_kernels only change how long grading takes, never a grade: the
    first shares the source notebooks' compiled programs (autograder/compile_cache.py), the
    second forks each kernel from a warm process per student (autograder/zygote.py).
    An existing class gradebook in OUT/course is reused, manual grades kept (fresh_gradebook:
    start a new one, the old one backed up; autograder/gradebook.py).
    """
    started = time.perf_counter()
    if jobs < 1:
        raise UsageError(f"--jobs must be at least 1, not {jobs}")
    if cell_timeout is not None and cell_timeout < 1:
        raise UsageError(f"--cell-timeout must be at least 1 second, not {cell_timeout}")
    if scheduler is not None and not re.match(r"^(tcp|tls|ws|wss|inproc)://\S+$", scheduler):
        raise UsageError(f"--scheduler wants an address like tcp://host:8786, not {scheduler!r}")
    submissions = Path(submissions).resolve()
    found = find_submissions(submissions)
    out = Path(out).resolve()
    if out == submissions or submissions.is_relative_to(out):
        raise UsageError(f"--out {out} would overwrite the submissions in {submissions}")
    course = out / "course"
    clear_outputs(out, fresh_gradebook)
    out.mkdir(parents=True, exist_ok=True)
    phases: dict[str, float] = {}
    # Before any worker starts: nbgrader shells out to alembic, from the venv's bin.
    os.environ.update({k: v for k, v in nbgrader_env().items() if k in ("PATH", "MPLBACKEND")})

    with (HereRunner() if jobs == 1 and scheduler is None else DaskRunner(jobs, scheduler)) as runner:
        build_course(course, fresh=fresh_gradebook)
        source = source_files(course)
        if compile_cache:
            runner.start_filling(source)  # on the workers, while the gradebook is built here
        template, configured_timeout = prepare_class_course(course, source)
        timeout = cell_timeout or configured_timeout

        tasks, broken, flagged, findings_by_nb = [], {}, {}, {}
        for student, files in found.items():
            notebooks, extra = {}, {}
            for name, path in files.items():
                if not name.endswith(".ipynb"):
                    extra[name] = path.read_bytes()
                    continue
                data, notebook, why = read_notebook(path)
                if why:
                    broken.setdefault(student, []).append(f"{name}: {why}; graded 0")
                    continue
                notebooks[name] = data
                findings = scan_notebook(notebook)
                if findings:
                    findings_by_nb.setdefault(student, {})[name] = findings
                    flagged.setdefault(student, []).extend(f"{name}: {f}" for f in findings)
            tasks.append(StudentTask(student, notebooks, timeout, hide=[str(submissions), str(out)], extra_files=extra,
                                     fork_kernels=fork_kernels))
        phases["setup"] = time.perf_counter() - started

        progress = Progress(len(tasks), stream=progress_stream)
        if compile_cache:
            mark = time.perf_counter()
            template = into_template(template, runner.filled(), progress)
            phases["compile_cache"] = time.perf_counter() - mark  # beyond what the setup hid
        mark = time.perf_counter()
        results = runner.run(tasks, template, progress)
        phases["students"] = time.perf_counter() - mark
    mark = time.perf_counter()

    merge_into_gradebook(course, results, findings_by_nb)
    for result in results:
        if result.broken:
            broken.setdefault(result.student_id, []).extend(result.broken)
        write_student_files(out, course, result, found[result.student_id], findings_by_nb.get(result.student_id, {}))
    students = sorted(found)
    cells = read_cells(course, students)
    write_class_files(out, course, flagged, students)
    phases["merge_and_export"] = time.perf_counter() - mark
    seconds = time.perf_counter() - started
    progress.finish(seconds)
    return GradingResult(
        cells=cells, broken={k: broken[k] for k in sorted(broken)}, flagged=flagged, seconds=seconds,
        students=students, timings={r.student_id: r.timings for r in results},
        student_seconds={r.student_id: r.seconds for r in results}, out=out,
        phases={k: round(v, 2) for k, v in phases.items()},
    )


def score_table(result: GradingResult) -> str:
    """Students x notebooks, points/max; * marks cells still waiting for a manual grade."""
    totals: dict[tuple[str, str], list] = {}
    for row in result.cells:
        entry = totals.setdefault((row["student_id"], row["notebook"]), [0.0, 0.0, False])
        entry[0] += row["score"] if row["score"] != "" else 0.0
        entry[1] += row["max_score"]
        entry[2] |= row["score"] == ""
    stems = [Path(n).stem for n in NOTEBOOKS]
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
    lines.append("* includes cells awaiting manual grading (formgrader on OUT/course);"
                 " ! broken submission; ? flagged for review")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("submissions", type=Path, help="folder of <student_id>/<notebook>.ipynb")
    parser.add_argument("--jobs", type=int, default=1, help="students graded at once on a local Dask cluster (default 1: here)")
    parser.add_argument("--scheduler", help="address of a running Dask scheduler, e.g. tcp://10.0.0.5:8786")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where results go (default {DEFAULT_OUT.relative_to(ROOT)})")
    parser.add_argument("--cell-timeout", type=int, help="seconds a cell may run (default: nbgrader_config.py)")
    parser.add_argument("--no-compile-cache", dest="compile_cache", action="store_false",
                        help="every kernel compiles for itself (slower; grades are the same)")
    parser.add_argument("--no-fork", dest="fork_kernels", action="store_false",
                        help="a fresh kernel process per notebook instead of forks of a warm one (slower; same grades)")
    parser.add_argument("--fresh-gradebook", action="store_true",
                        help="start a new class gradebook (the old one is copied to OUT/gradebook-backups/): "
                             "manual grades are then lost; by default they are kept")
    args = parser.parse_args(argv)
    try:
        result = grade(args.submissions, args.out, args.jobs, args.scheduler, args.cell_timeout,
                       compile_cache=args.compile_cache, fork_kernels=args.fork_kernels,
                       fresh_gradebook=args.fresh_gradebook)
    except (UsageError, GradebookError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(score_table(result))
    for student, reasons in result.broken.items():
        for reason in reasons:
            print(f"BROKEN  {student}: {reason}")
    for student, findings in result.flagged.items():
        for finding in findings:
            print(f"REVIEW  {student}: {finding}")
    where = result.out.relative_to(ROOT) if result.out.is_relative_to(ROOT) else result.out
    print(f"wrote {where}/grades.csv, cells.csv, flags.csv, feedback/ and the gradebook {where}/course/gradebook.db")
    return 0


if __name__ == "__main__":
    sys.exit(main())
