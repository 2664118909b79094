"""Benchmark: stock serial `nbgrader autograde` against the parallel grader, same class.

    python -m bundle.bench_grading [--copies K] [--jobs N] [--repeats R] [--growth K,K,...] [--jobs-sweep N,N,...]
    (make bench-grading K=16 BENCH_JOBS=2 [BENCH_REPEATS=3] [BENCH_GROWTH=4,16,64] [BENCH_JOBS_SWEEP=2,4])

Makes K copies of the sample submissions (autograder/samples/<student>/<nb>.ipynb, or the
solution notebooks as one student while there are no samples), grades them the stock way (one
course, one gradebook: generate_assignment, autograde, generate_feedback, export, each one
nbgrader command) and with autograder.run.grade --jobs N (sandboxed, its verdicts decided in the
grader), and writes runs/bench/grading.json: both wall times, their ratio, seconds per student,
where a notebook's seconds go, the floor it is measured against (five fresh kernel starts plus
`import jax`, shared by the cores; the grader may go below it: it forks kernels from a warm
process), and `same_scores`: whether both sides gave every cell the same score (a speed-up
bought by skipping work shows there).

With --repeats R the comparison runs R times (stock, then the grader, each time) and the figures
are the medians, each run's kept beside them. --growth grades classes of those sizes with the
grader alone, --jobs-sweep the class of K with those numbers of jobs: how the wall time grows
with the class and with the workers, per student and per core (`growth`, `jobs_sweep`).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder.adapters.lesson import ASSIGNMENT, NOTEBOOKS
from autograder.course.assignment import new_course, put_venv_on_path, stock_nbgrader_env, without_the_grader
from autograder.course.errors import ExitCode
from autograder.course.hidden_tests import BEGIN as HIDDEN_BEGIN
from autograder.course.outcomes import NotebookTiming
from autograder.course.paths import AUTOGRADER, KERNEL_NAME, RUNS, SOLUTIONS
from autograder.run.grade import GradingResult, grade
from autograder.run.options import GradingOptions

BENCH = RUNS / "bench"


def sample_students(source: str = "samples") -> dict[str, Path]:
    samples = AUTOGRADER / "samples"
    if source == "solutions":
        return {"solution": SOLUTIONS}
    found = (
        {p.name: p for p in sorted(samples.iterdir()) if p.is_dir() and any(p.glob("*.ipynb"))}
        if samples.is_dir()
        else {}
    )
    return found or {"solution": SOLUTIONS}


def make_class(copies: int, destination: Path, source: str = "samples") -> list[str]:
    if destination.exists():
        shutil.rmtree(destination)
    students = []
    samples = sample_students(source)
    for i in range(copies):
        name, folder = list(samples.items())[i % len(samples)]
        student = f"{name}-{i:03d}"
        (destination / student).mkdir(parents=True)
        for notebook in NOTEBOOKS:
            if (folder / notebook).is_file():
                shutil.copyfile(folder / notebook, destination / student / notebook)
        students.append(student)
    return students


def stock_serial(submissions: Path, course: Path) -> dict:
    """nbgrader the way its docs run it: one course folder, one command at a time, nothing of this
    grader in its pipeline."""
    new_course(course)
    config = course / "nbgrader_config.py"
    config.write_text(without_the_grader(config.read_text()))
    tmp = Path(tempfile.mkdtemp(prefix="stock-nbgrader-"))
    env = stock_nbgrader_env(tmp)
    steps = {}

    failures = []

    def run(*args):
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True, text=True
        )
        steps[args[0]] = time.perf_counter() - start
        (course / f"{args[0]}.log").write_text(done.stdout + done.stderr)
        # nbgrader exits 1 when any one submission failed; the others are graded all the same.
        failures.extend(
            line
            for line in (done.stdout + done.stderr).splitlines()
            if "There was an error processing assignment '" in line
        )

    start = time.perf_counter()
    try:
        run("generate_assignment", ASSIGNMENT, "--force")
        for student in sorted(p.name for p in submissions.iterdir()):
            shutil.copytree(submissions / student, course / "submitted" / student / ASSIGNMENT)
        run("autograde", ASSIGNMENT)
        run("generate_feedback", ASSIGNMENT)
        run("export", "--to", str(course / "grades.csv"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    wall = time.perf_counter() - start
    # Stock nbgrader leaves the hidden tests in the autograded notebooks (this grader never does):
    # where they are missing, the grader's pipeline ran and the comparison would be with itself.
    graded = sorted((course / "autograded").glob(f"*/{ASSIGNMENT}/*.ipynb"))
    if not graded or not any(HIDDEN_BEGIN in path.read_text() for path in graded):
        raise RuntimeError(f"the stock side did not run stock nbgrader (see {course / 'autograde.log'})")
    return {"wall_s": wall, "steps_s": steps, "failures": failures}


def stock_scores(course: Path) -> dict[tuple[str, str, str], float | None]:
    """(student, notebook, grade_id) -> score in a stock course's gradebook (None: awaits a person)."""
    from nbgrader.api import Gradebook

    scores = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student in gb.students:
            for notebook in gb.find_assignment(ASSIGNMENT).notebooks:
                for cell in notebook.grade_cells:
                    grade = gb.find_grade(cell.name, notebook.name, ASSIGNMENT, student.id)
                    scores[(student.id, notebook.name, cell.name)] = (
                        None if grade.needs_manual_grade else float(grade.score)
                    )
    return scores


def compare_scores(stock: dict, cells: list[dict]) -> list[str]:
    """Every cell the two sides scored differently (empty: the same scores)."""
    ours = {
        # cells.csv gives a pending cell's score as it stands (0 until a person grades it) and says so.
        (r["student_id"], r["notebook"], r["grade_id"]): (None if r["pending"] == "yes" else float(r["score"]))
        for r in cells
    }
    return [
        f"{'/'.join(key)}: stock {stock.get(key)}, parallel {ours.get(key)}"
        for key in sorted(set(stock) | set(ours))
        if stock.get(key) != ours.get(key)
    ]


def measure_floor(repeats: int = 5) -> dict:
    """A fresh kernel, then `import jax` and one op in it: the least one notebook can cost."""
    from jupyter_client.manager import start_new_kernel

    starts, imports = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        km, kc = start_new_kernel(kernel_name=KERNEL_NAME, extra_arguments=["--IPKernelApp.log_level=ERROR"])
        t1 = time.perf_counter()
        kc.execute_interactive(
            "import jax, jax.numpy as jnp; jnp.zeros(1).block_until_ready()",
            timeout=120,
            output_hook=lambda message: None,
        )
        t2 = time.perf_counter()
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        starts.append(t1 - t0)
        imports.append(t2 - t1)
    return {
        "kernel_start_s": statistics.median(starts),
        "import_jax_s": statistics.median(imports),
        "floor_per_notebook_s": statistics.median(starts) + statistics.median(imports),
    }


#: Where a notebook's seconds go, as each notebook's timing names them.
PARTS = tuple(f.name for f in dataclasses.fields(NotebookTiming) if f.name != "notebook")


def cost_breakdown(timings: dict[str, list[NotebookTiming]]) -> dict[str, dict[str, float]]:
    """Median seconds per notebook and part, over the students (a part none of them spent time
    in left out: the feedback step has its total alone)."""
    table = {}
    for name in (*NOTEBOOKS, "(feedback)"):
        rows = [t for student in timings.values() for t in student if t.notebook == name]
        if rows:
            medians = {p: round(statistics.median(getattr(r, p) for r in rows), 3) for p in PARTS}
            table[name] = {p: m for p, m in medians.items() if p == "total" or any(getattr(r, p) for r in rows)}
    return table


def grader_run(submissions: Path, jobs: int, out: Path) -> tuple[float, GradingResult]:
    """The grader's side: a fresh class gradebook, its own reference run (none kept from another
    run is taken: it is part of what grading costs); (wall seconds, its GradingResult)."""
    shutil.rmtree(out, ignore_errors=True)  # a fresh class gradebook, like stock nbgrader's
    start = time.perf_counter()
    result = grade(submissions, out, GradingOptions(jobs=jobs, keep_reference=False), io.StringIO())
    return time.perf_counter() - start, result


def scaling_row(students: int, jobs: int, cores: int, wall: float, result: GradingResult) -> dict:
    """One grading run's cost, from its wall time and its result: per student; per core reserved
    (the wall seconds each student takes of the cores the run could use, min(jobs, cores):
    reserved, not measured use); the reference run, which every run pays once whatever the
    class; the students phase per student (setup, which reads every submission, and merging are
    in the wall time only); and the students the grader failed or found broken (a row with any
    timed less work)."""
    phases = result.phases
    return {
        "students": students,
        "jobs": jobs,
        "wall_s": round(wall, 2),
        "s_per_student": round(wall / students, 3),
        "core_s_per_student": round(wall * min(jobs, cores) / students, 3),
        "reference_s": round(phases.get("reference", 0.0), 2),
        "students_s_per_student": round(phases.get("students", 0.0) / students, 3),
        "failed_students": len(result.failed),
        "broken_students": len(result.broken),
    }


def growth_of(rows: list[dict]) -> list[dict]:
    """Each row with its seconds per student and per core against the first row's (the smallest
    class, or the fewest jobs). As the class grows at fixed jobs, per student 1.0 is linear growth
    and below 1 the run's fixed costs spread; as the jobs grow at a fixed class, per student
    1/jobs is perfect scaling and the core seconds' ratio (1.0 at perfect) is the efficiency."""
    if not rows:
        return []
    first = rows[0]
    return [
        {
            **row,
            "per_student_vs_first": round(row["s_per_student"] / first["s_per_student"], 3),
            "core_s_vs_first": round(row["core_s_per_student"] / first["core_s_per_student"], 3),
        }
        for row in rows
    ]


def median_of_runs(runs: list[dict]) -> dict:
    """The comparison's figures over repeated runs: each side's median wall; `speedup`, the
    median of the runs' own speedups (each stock run against the grader run after it: with an
    even number of runs, the mean of the middle two), with their range and the ratio of the
    median walls beside it; whether every run gave the same scores, and every run's stock
    failures and score differences (each run's own are in its entry)."""
    stock = statistics.median(r["stock_wall_s"] for r in runs)
    parallel = statistics.median(r["parallel_wall_s"] for r in runs)
    return {
        "runs": len(runs),
        "stock_serial_wall_s": round(stock, 2),
        "parallel_wall_s": round(parallel, 2),
        "speedup": round(statistics.median(r["speedup"] for r in runs), 2),
        "speedup_range": [min(r["speedup"] for r in runs), max(r["speedup"] for r in runs)],
        "ratio_of_median_walls": round(stock / parallel, 2),
        "same_scores": all(r["same_scores"] for r in runs),
        "stock_failures": sorted({line for r in runs for line in r.get("stock_failures", [])}),
        "score_differences": sorted({line for r in runs for line in r.get("score_differences", [])}),
    }


def sizes(text: str) -> list[int]:
    """A comma-separated list of positive whole numbers ("4,16,64"; "" for none)."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]  # "4,,16": an empty part is no size
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of whole numbers: {text!r} (say e.g. 4,16,64)") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"each must be at least 1: {text!r}")
    return sorted(set(values))  # smallest first: the tables read each row against the first


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=16, help="students in the benchmark class (default 16)")
    parser.add_argument("--jobs", type=int, default=2, help="workers for the parallel grader (default 2)")
    parser.add_argument(
        "--students",
        choices=("samples", "solutions"),
        default="samples",
        help="copy autograder/samples (default) or the solution notebooks as every student",
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="run the comparison this many times; report the medians (default 1)"
    )
    parser.add_argument(
        "--growth", type=sizes, default=[], help="class sizes graded by the grader alone at --jobs, e.g. 4,16,64"
    )
    parser.add_argument(
        "--jobs-sweep",
        type=sizes,
        default=[],
        help="numbers of jobs the grader alone grades the class of --copies with, e.g. 2,4",
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    put_venv_on_path()
    submissions = BENCH / "submissions"
    students = make_class(args.copies, submissions, args.students)
    print(f"benchmark class: {len(students)} students from {', '.join(sample_students(args.students))}", flush=True)

    floor = measure_floor()
    print(f"floor: kernel start {floor['kernel_start_s']:.2f} s + import jax {floor['import_jax_s']:.2f} s", flush=True)
    n = len(students)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    runs: list[dict] = []
    for repeat in range(1, args.repeats + 1):
        said = f" (run {repeat} of {args.repeats})" if args.repeats > 1 else ""
        stock = stock_serial(submissions, BENCH / "stock-course")
        print(f"stock serial nbgrader{said}: {stock['wall_s']:.1f} s", flush=True)
        if stock["failures"]:
            # nbgrader drops a whole submission when one notebook trips it: it then does less work
            # than the grader, and the ratio flatters it.
            print(
                f"WARNING: stock nbgrader failed on {len(stock['failures'])} of {len(students)} submissions "
                f"(see {BENCH / 'stock-course' / 'autograde.log'}): the comparison is not like for like",
                flush=True,
            )
        parallel_wall, result = grader_run(submissions, args.jobs, BENCH / "parallel")
        print(f"parallel grader, {args.jobs} jobs{said}: {parallel_wall:.1f} s", flush=True)
        differences = compare_scores(stock_scores(BENCH / "stock-course"), result.cells)
        if differences:
            print(
                f"WARNING: {len(differences)} cells scored differently by the two sides: {differences[:5]}", flush=True
            )
        runs.append(
            {
                "stock_wall_s": round(stock["wall_s"], 2),
                "parallel_wall_s": round(parallel_wall, 2),
                "speedup": round(stock["wall_s"] / parallel_wall, 2),
                "same_scores": not differences,
                "score_differences": differences,
                "stock_failures": stock["failures"],
                "stock_steps_s": {k: round(v, 2) for k, v in stock["steps_s"].items()},
                "parallel_phases_s": result.phases,
                "grader_failed": sorted(result.failed),
                "broken": result.broken,
            }
        )
    medians = median_of_runs(runs)
    # The floor: five kernel starts plus imports, shared by the cores.
    floor_per_student = floor["floor_per_notebook_s"] * len(NOTEBOOKS) / min(args.jobs, cpus)
    parallel_per_student = medians["parallel_wall_s"] / n

    growth: list[dict] = []
    sweep: list[dict] = []

    def write() -> dict:
        """The report as it stands, written (again) as each part ends: a later part that fails
        loses none of the runs before it."""
        report = {
            "students": n,
            "student_source": args.students,
            "notebooks_per_student": len(NOTEBOOKS),
            "jobs": args.jobs,
            "cpus": cpus,
            "runs": len(runs),
            "stock_serial_wall_s": medians["stock_serial_wall_s"],
            "stock_failures": medians["stock_failures"],  # every run's
            "parallel_wall_s": medians["parallel_wall_s"],
            "speedup": medians["speedup"],  # the median of the runs' speedups
            "speedup_range": medians["speedup_range"],
            "ratio_of_median_walls": medians["ratio_of_median_walls"],
            "stock_s_per_student": round(medians["stock_serial_wall_s"] / n, 2),
            "parallel_s_per_student": round(parallel_per_student, 2),
            "floor": {k: round(v, 3) for k, v in floor.items()},
            "floor_per_student_s": round(floor_per_student, 2),
            "parallel_over_floor": round(parallel_per_student / floor_per_student, 2),
            "same_scores": medians["same_scores"],  # in every run
            "score_differences": medians["score_differences"],  # every run's
            "each_run": runs,
            # One run's own figures: the last comparison's.
            "last_run_stock_steps_s": runs[-1]["stock_steps_s"],
            "last_run_parallel_phases_s": result.phases,
            "last_run_work_s_per_student": round(statistics.mean(result.student_seconds.values()), 2),
            "last_run_breakdown_per_notebook_s": cost_breakdown(result.timings),
            "growth": growth_of(growth),
            "jobs_sweep": growth_of(sweep),
        }
        BENCH.mkdir(parents=True, exist_ok=True)
        (BENCH / "grading.json").write_text(json.dumps(report, indent=2) + "\n")
        return report

    write()
    for size in args.growth:
        grown = make_class(size, BENCH / f"submissions-{size}", args.students)
        wall, grown_result = grader_run(BENCH / f"submissions-{size}", args.jobs, BENCH / f"parallel-{size}")
        growth.append(scaling_row(len(grown), args.jobs, cpus, wall, grown_result))
        print(f"growth: {size} students, {args.jobs} jobs: {wall:.1f} s", flush=True)
        write()
    for jobs in args.jobs_sweep:
        wall, swept = grader_run(submissions, jobs, BENCH / f"parallel-jobs-{jobs}")
        sweep.append(scaling_row(n, jobs, cpus, wall, swept))
        print(f"jobs sweep: {n} students, {jobs} jobs: {wall:.1f} s", flush=True)
        write()
    report = write()
    print(report_text(report))
    print(f"\nwrote {BENCH / 'grading.json'}")
    return ExitCode.DONE


def report_text(report: dict) -> str:
    """The report as the console shows it (every figure read from the report itself)."""
    runs, (low, high) = report["runs"], report["speedup_range"]
    of = f" (the median of {runs} runs' speedups, {low:.2f} to {high:.2f}; walls: medians)" if runs > 1 else ""
    cores = min(report["jobs"], report["cpus"])
    lines = [
        f"\n{'':28}{'stock serial':>14}{'parallel':>12}",
        f"{'wall (s)':28}{report['stock_serial_wall_s']:>14.1f}{report['parallel_wall_s']:>12.1f}",
        f"{'s per student':28}{report['stock_s_per_student']:>14.2f}{report['parallel_s_per_student']:>12.2f}",
        f"speedup {report['speedup']:.2f}x with {report['jobs']} jobs on {report['cpus']} CPUs{of}; "
        f"same scores cell by cell: {report['same_scores']}",
        f"floor {report['floor_per_student_s']:.2f} s per student (5 x (kernel start + import jax) / {cores} cores); "
        f"the parallel grader takes {report['parallel_over_floor']:.2f}x that",
        "the last grader run, wall seconds: "
        + ", ".join(f"{k} {v:.1f}" for k, v in report["last_run_parallel_phases_s"].items()),
        "\nmedian seconds per notebook (the last grader run):",
        f"{'notebook':22}" + "".join(f"{p[:12]:>13}" for p in PARTS),
    ]
    for name, row in report["last_run_breakdown_per_notebook_s"].items():
        lines.append(f"{name:22}" + "".join(f"{row[p]:>13.2f}" if p in row else f"{'':>13}" for p in PARTS))
    for title, rows in (("growth with the class", report["growth"]), ("growth with the jobs", report["jobs_sweep"])):
        if rows:
            lines.append(f"\n{title} (the grader alone, one run each):")
            lines.append(
                f"{'students':>9}{'jobs':>6}{'wall s':>9}{'s/student':>11}{'core s/st.':>12}{'reference s':>12}"
                f"{'vs first':>10}{'core vs 1st':>12}{'failed':>8}"
            )
            for row in rows:
                lines.append(
                    f"{row['students']:>9}{row['jobs']:>6}{row['wall_s']:>9.1f}{row['s_per_student']:>11.2f}"
                    f"{row['core_s_per_student']:>12.2f}{row['reference_s']:>12.1f}{row['per_student_vs_first']:>10.2f}"
                    f"{row['core_s_vs_first']:>12.2f}{row['failed_students']:>8}"
                )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
