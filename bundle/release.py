"""Release: notebooks/ (what learners get) generated from solutions/ by nbgrader.

`nbgrader generate_assignment` strips the solution code and the hidden tests; the result is
copied into notebooks/ together with the shipped modules and files. The *Going deeper*
companions (solutions/deeper/, no answers in them, no part of the assignment) are copied into
notebooks/deeper/ as they are. Run `make release`; tests regenerate the release and fail on any
difference.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from autograder.adapters.lesson import ASSIGNMENT, NOTEBOOKS, SHIPPED_FILES, SHIPPED_MODULES
from autograder.course.assignment import nbgrader, new_course
from autograder.course.paths import RELEASE, SOLUTIONS
from bundle import companions


def generate_release(destination: Path) -> list[Path]:
    """Write the student release into destination (replacing what is there)."""
    with tempfile.TemporaryDirectory(prefix="performance-05-release-") as scratch:
        course = new_course(Path(scratch) / "course")
        nbgrader(course, "generate_assignment", ASSIGNMENT, "--force", "--no-db")
        released = course / "release" / ASSIGNMENT
        destination.mkdir(parents=True, exist_ok=True)
        for stale in destination.iterdir():
            if stale.is_file():
                stale.unlink()
        written = []
        for name in (*NOTEBOOKS, *SHIPPED_MODULES, *SHIPPED_FILES):
            shutil.copy2(released / name, destination / name)
            written.append(destination / name)
    deeper = destination / companions.FOLDER
    deeper.mkdir(exist_ok=True)
    for stale in deeper.iterdir():
        if stale.is_file():
            stale.unlink()
    for name in companions.names():
        shutil.copy2(SOLUTIONS / name, destination / name)
        written.append(destination / name)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--to", type=Path, default=RELEASE, help="where to write the release (default: notebooks/)")
    args = parser.parse_args(argv)
    for path in generate_release(args.to):
        print(f"released {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
