"""Check a notebook the way the grader will, before handing it in: `make validate NB=<path>`.

Runs nbgrader's validator on a copy of the notebook in a scratch folder (with the shipped
modules from beside it, or from notebooks/ when they are not there), prints nbgrader's report,
and exits 1 when a check fails or a test cell was edited (plain `nbgrader validate` exits 0
even then, nbgrader #1908); exit 2 when the notebook is missing or unreadable.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import nbformat

from autograder.adapters.lesson import SHIPPED_MODULES
from autograder.course.assignment import put_venv_on_path
from autograder.course.paths import RELEASE, ROOT


def _validator():
    from nbgrader.validator import Validator
    from traitlets.config.loader import PyFileConfigLoader

    class KeepingResults(Validator):
        """nbgrader's validator, keeping what its last validation found (validate_and_print only prints it)."""

        results: dict = {}

        def validate(self, filename):
            self.results = super().validate(filename)
            return self.results

    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    return KeepingResults(config=config)


def validate(notebook: Path) -> bool:
    """Print nbgrader's validation report for notebook; True when it passes."""
    put_venv_on_path()
    with tempfile.TemporaryDirectory(prefix="performance-05-validate-") as scratch:
        copy = Path(scratch) / notebook.name
        shutil.copyfile(notebook, copy)
        for name in SHIPPED_MODULES:
            beside = notebook.parent / name
            shutil.copyfile(beside if beside.is_file() else RELEASE / name, Path(scratch) / name)
        validator = _validator()
        validator.validate_and_print(str(copy))  # the report nbgrader validate prints, from one run
        results = validator.results
        type_changed, changed = results.get("type_changed", []), results.get("changed", [])
        failed = results.get("failed", [])
    return not (type_changed or changed or failed)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", nargs="?", type=Path, help="the notebook to check, e.g. notebooks/02-build.ipynb")
    args = parser.parse_args(argv)
    if args.notebook is None:
        print("error: name the notebook to validate: make validate NB=notebooks/02-build.ipynb", file=sys.stderr)
        return 2
    notebook = args.notebook.resolve()
    if not notebook.is_file():
        print(f"error: {args.notebook} does not exist", file=sys.stderr)
        return 2
    try:
        nbformat.read(notebook, as_version=4)
    except Exception as error:
        print(
            f"error: {args.notebook} is not a readable notebook ({str(error).splitlines()[0] if str(error) else type(error).__name__})",
            file=sys.stderr,
        )
        return 2
    passed = validate(notebook)
    print(f"{args.notebook}: {'passes every check' if passed else 'VALIDATION FAILED: see the report above'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
