"""Execute notebooks headless, each in a fresh kernel, as `make run` and the tests do.

Executed copies go to runs/executed/<folder>/; the committed notebooks stay output-free.
`python -m bundle.execute solutions` runs the five stages in order, then the *Going deeper*
companions (deeper/), and stops at the first failure with the cell that failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from autograder.adapters.lesson import NOTEBOOKS
from autograder.course.assignment import nbgrader_env
from autograder.course.paths import KERNEL_NAME, ROOT, RUNS
from bundle import companions


@dataclass
class Execution:
    """What one headless run of a notebook produced."""

    notebook: nbformat.NotebookNode
    seconds: float
    error: CellExecutionError | None = None
    failed_cell: int | None = None
    stderr: list[str] = field(default_factory=list)


def execute_notebook(path: Path, save_to: Path | None = None, timeout: int = 300, env: dict | None = None) -> Execution:
    """Run every cell of path in a fresh kernel, working directory = the notebook's folder.

    env adds to (or overrides) the kernel's environment, e.g. REMAT_LESSON_RUNS_DIR.
    """
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name=KERNEL_NAME,
        resources={"metadata": {"path": str(path.parent)}},
        # The kernel's notice about unencrypted loopback TCP is noise in every run's log.
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
    )
    env = {**nbgrader_env(), **(env or {})}
    start = time.perf_counter()
    error, failed = None, None
    try:
        client.execute(env=env)
    except CellExecutionError as exc:
        error = exc
        failed = next(
            (i for i, c in enumerate(notebook.cells) if any(o.output_type == "error" for o in c.get("outputs", []))),
            None,
        )
    seconds = time.perf_counter() - start
    stderr = [
        out.get("text", "")
        for cell in notebook.cells
        for out in cell.get("outputs", [])
        if out.output_type == "stream" and out.name == "stderr"
    ]
    if save_to is not None:
        save_to.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebook, save_to)
    return Execution(notebook, seconds, error, failed, stderr)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="solutions or notebooks")
    parser.add_argument(
        "names",
        nargs="*",
        default=[*NOTEBOOKS, *companions.names()],
        help="notebooks to run, relative to the folder (default: the five stages, then the companions in deeper/)",
    )
    args = parser.parse_args(argv)
    folder = (ROOT / args.folder).resolve() if not args.folder.is_absolute() else args.folder
    total = 0.0
    for name in args.names:
        path = folder / name
        if not path.is_file():
            print(f"error: {path} does not exist", file=sys.stderr)
            return 2
        run = execute_notebook(path, RUNS / "executed" / folder.name / name)
        total += run.seconds
        if run.error is not None:
            print(f"FAILED {path} at cell {run.failed_cell} after {run.seconds:.1f} s:\n{run.error}", file=sys.stderr)
            return 1
        note = f" ({len(run.stderr)} stderr outputs)" if run.stderr else ""
        print(f"ran {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} in {run.seconds:.1f} s{note}")
    print(f"all {len(args.names)} notebooks ran in {total:.1f} s; executed copies in {RUNS / 'executed' / folder.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
