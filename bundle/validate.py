"""Check a notebook the way the grader will, before handing it in: `make validate NB=<path>`.

Runs nbgrader's validator on a copy of the notebook in a scratch folder (with the shipped
modules from beside it, or from notebooks/ when they are not there) and prints the report and
nothing else: for each graded cell that failed, its id and what its checks said (not the test
cell's source, which learners can read in the notebook; not the kernel's log). Exits 1 when a
check fails or a read-only cell was edited (plain `nbgrader validate` exits 0 even then, nbgrader
#1908); exit 2 when the notebook is missing or unreadable.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import textwrap
from pathlib import Path

import nbformat

from autograder.adapters.lesson import SHIPPED_MODULES
from autograder.course.assignment import put_venv_on_path
from autograder.course.paths import RELEASE, ROOT


def _validator():
    from nbgrader.validator import Validator
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    # The kernel's notice about unencrypted loopback TCP is no part of a learner's report.
    config.Execute.extra_arguments = ["--IPKernelApp.log_level=ERROR"]
    return Validator(config=config)


def _cell_names(path: Path) -> dict[str, str]:
    """Each nbgrader cell's source -> its grade_id: how the report names a cell."""
    notebook = nbformat.read(path, as_version=4)
    return {
        cell.source: cell.metadata["nbgrader"].get("grade_id", "a cell")
        for cell in notebook.cells
        if "nbgrader" in cell.metadata
    }


def _print_summary(validator, text: str) -> None:
    print(textwrap.fill(text, width=validator.width) + "\n")


def _print_report(name: str, text: str) -> None:
    print("=" * 88)
    print(f"{name}:")
    print("\n".join("    " + line for line in text.rstrip().splitlines()) + "\n")


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
        results = validator.validate(str(copy))
        names = _cell_names(copy)
        # nbgrader's own summary lines (its public warning templates), then each cell named by its id.
        type_changed, changed = results.get("type_changed", []), results.get("changed", [])
        failed = results.get("failed", [])
        if type_changed:
            _print_summary(validator, validator.type_changed_warning.format(num_changed=len(type_changed)))
            for cell in type_changed:
                _print_report(names.get(cell["source"], "a cell"), f"was {cell['old_type']}, is now {cell['new_type']}")
        elif changed:
            _print_summary(validator, validator.changed_warning.format(num_changed=len(changed)))
            for cell in changed:
                _print_report(names.get(cell["source"], "a read-only cell"), "was edited: undo the change")
        elif failed:
            _print_summary(validator, validator.failed_warning.format(num_failed=len(failed)))
            for cell in failed:
                _print_report(names.get(cell["source"], "a graded cell"), cell["raw_error"])
        else:
            print("Success! Your notebook passes all the tests.")
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
