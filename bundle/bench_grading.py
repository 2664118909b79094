"""Benchmark: stock serial `nbgrader autograde` against the parallel grader, same class.

    python -m bundle.bench_grading [--copies K] [--jobs N]     (make bench-grading K=16)

Makes K copies of the sample submissions (autograder/samples/<student>/<nb>.ipynb, or the
solution notebooks as one student while there are no samples), grades them the stock way (one
course, one gradebook: generate_assignment, autograde, generate_feedback, export, each one
nbgrader command) and with autograder.run.grade --jobs N (sandboxed, its verdicts decided in the
grader), and writes runs/bench/grading.json: both wall times, their ratio, seconds per student,
where a notebook's seconds go, the floor it is measured against (five fresh kernel starts plus
`import jax`, shared by the cores; the grader may go below it: it forks kernels from a warm
process), and `same_scores`: whether both sides gave every cell the same score (a speed-up
bought by skipping work shows there).
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
import time
from pathlib import Path

from autograder.adapters.lesson import ASSIGNMENT, NOTEBOOKS
from autograder.course.assignment import new_course, put_venv_on_path, stock_nbgrader_env, without_the_grader
from autograder.course.errors import ExitCode
from autograder.course.hidden_tests import BEGIN as HIDDEN_BEGIN
from autograder.course.outcomes import NotebookTiming
from autograder.course.paths import AUTOGRADER, KERNEL_NAME, RUNS, SOLUTIONS
from autograder.run.grade import grade
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
    env = stock_nbgrader_env()
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
    run("generate_assignment", ASSIGNMENT, "--force")
    for student in sorted(p.name for p in submissions.iterdir()):
        shutil.copytree(submissions / student, course / "submitted" / student / ASSIGNMENT)
    run("autograde", ASSIGNMENT)
    run("generate_feedback", ASSIGNMENT)
    run("export", "--to", str(course / "grades.csv"))
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
    args = parser.parse_args(argv)
    put_venv_on_path()
    submissions = BENCH / "submissions"
    students = make_class(args.copies, submissions, args.students)
    print(f"benchmark class: {len(students)} students from {', '.join(sample_students(args.students))}", flush=True)

    floor = measure_floor()
    print(f"floor: kernel start {floor['kernel_start_s']:.2f} s + import jax {floor['import_jax_s']:.2f} s", flush=True)
    stock = stock_serial(submissions, BENCH / "stock-course")
    print(f"stock serial nbgrader: {stock['wall_s']:.1f} s", flush=True)
    if stock["failures"]:
        # nbgrader drops a whole submission when one notebook trips it: it then does less work
        # than the grader, and the ratio flatters it.
        print(
            f"WARNING: stock nbgrader failed on {len(stock['failures'])} of {len(students)} submissions "
            f"(see {BENCH / 'stock-course' / 'autograde.log'}): the comparison is not like for like",
            flush=True,
        )
    shutil.rmtree(BENCH / "parallel", ignore_errors=True)  # a fresh class gradebook, like stock nbgrader's
    start = time.perf_counter()
    # Its reference run is part of what it costs: none kept from the last benchmark is taken.
    options = GradingOptions(jobs=args.jobs, keep_reference=False)
    result = grade(submissions, BENCH / "parallel", options, io.StringIO())
    parallel_wall = time.perf_counter() - start
    print(f"parallel grader, {args.jobs} jobs: {parallel_wall:.1f} s", flush=True)

    differences = compare_scores(stock_scores(BENCH / "stock-course"), result.cells)
    if differences:
        print(f"WARNING: {len(differences)} cells scored differently by the two sides: {differences[:5]}", flush=True)
    n = len(students)
    cpus = os.cpu_count() or 1
    # The floor: five kernel starts plus imports, shared by the cores.
    floor_per_student = floor["floor_per_notebook_s"] * len(NOTEBOOKS) / min(args.jobs, cpus)
    report = {
        "students": n,
        "student_source": args.students,
        "notebooks_per_student": len(NOTEBOOKS),
        "jobs": args.jobs,
        "cpus": cpus,
        "stock_serial_wall_s": round(stock["wall_s"], 2),
        "stock_steps_s": {k: round(v, 2) for k, v in stock["steps_s"].items()},
        "stock_failures": stock["failures"],
        "parallel_wall_s": round(parallel_wall, 2),
        "parallel_phases_s": result.phases,
        "speedup": round(stock["wall_s"] / parallel_wall, 2),
        "stock_s_per_student": round(stock["wall_s"] / n, 2),
        "parallel_s_per_student": round(parallel_wall / n, 2),
        "parallel_work_s_per_student": round(statistics.mean(result.student_seconds.values()), 2),
        "floor": {k: round(v, 3) for k, v in floor.items()},
        "floor_per_student_s": round(floor_per_student, 2),
        "parallel_over_floor": round(parallel_wall / n / floor_per_student, 2),
        "breakdown_per_notebook_s": cost_breakdown(result.timings),
        "same_scores": not differences,
        "score_differences": differences,
        "broken": result.broken,
    }
    BENCH.mkdir(parents=True, exist_ok=True)
    (BENCH / "grading.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"\n{'':28}{'stock serial':>14}{'parallel':>12}")
    print(f"{'wall (s)':28}{report['stock_serial_wall_s']:>14.1f}{report['parallel_wall_s']:>12.1f}")
    print(f"{'s per student':28}{report['stock_s_per_student']:>14.2f}{report['parallel_s_per_student']:>12.2f}")
    print(
        f"speedup {report['speedup']:.2f}x with {args.jobs} jobs on {cpus} CPUs; same scores cell by cell: {report['same_scores']}"
    )
    print(
        f"floor {floor_per_student:.2f} s per student (5 x (kernel start + import jax) / {min(args.jobs, cpus)} cores); "
        f"the parallel grader takes {report['parallel_over_floor']:.2f}x that"
    )
    print("parallel run, wall seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in result.phases.items()))
    print("\nmedian seconds per notebook (parallel run):")
    print(f"{'notebook':22}" + "".join(f"{p[:12]:>13}" for p in PARTS))
    for name, row in report["breakdown_per_notebook_s"].items():
        print(f"{name:22}" + "".join(f"{row[p]:>13.2f}" if p in row else f"{'':>13}" for p in PARTS))
    print(f"\nwrote {BENCH / 'grading.json'}")
    return ExitCode.DONE


if __name__ == "__main__":
    sys.exit(main())
