"""One source of truth: solutions/*.py -> solutions/*.ipynb -> notebooks/, with no leak and no drift."""

from __future__ import annotations

import ast
import re

import nbformat
import pytest

from autograder.adapters.lesson import NOTEBOOKS, SHIPPED_FILES, SHIPPED_MODULES
from autograder.course.paths import DATA, RELEASE, SOLUTIONS
from bundle import companions, sync
from bundle.release import generate_release

LEAK_MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


def test_solutions_in_sync_with_sources():
    """Solution notebooks and main.py are in sync with their sources."""
    stale = sync.render(check=True)
    assert stale == [], f"run `make sync`: out of date: {stale}"


def test_release_regenerates_identically(tmp_path):
    written = generate_release(tmp_path)
    made = sorted(str(p.relative_to(tmp_path)) for p in written)
    assert made == sorted((*NOTEBOOKS, *SHIPPED_MODULES, *SHIPPED_FILES, *companions.names()))
    committed = sorted(str(p.relative_to(RELEASE)) for p in RELEASE.rglob("*") if p.is_file())
    assert committed == made, "notebooks/ holds files the release does not make"
    drifted = [name for name in made if (tmp_path / name).read_bytes() != (RELEASE / name).read_bytes()]
    assert drifted == [], f"notebooks/ differs from a fresh release (run `make release`): {drifted}"


@pytest.mark.parametrize("name", companions.names())
def test_companions_released_as_written(name):
    """A Going deeper companion holds no answer and no hidden test: the release carries it as
    solutions/ holds it, without nbgrader cells or outputs."""
    text = (RELEASE / name).read_text()
    assert text == (SOLUTIONS / name).read_text()
    for marker in LEAK_MARKERS:
        assert marker not in text, f"{name} holds '{marker}'"
    notebook = nbformat.read(RELEASE / name, as_version=4)
    assert all(not cell.get("outputs") and "nbgrader" not in cell.metadata for cell in notebook.cells)


_REGION = re.compile(r"^([ \t]*)### BEGIN (SOLUTION|HIDDEN TESTS)\n.*?^[ \t]*### END \2[ \t]*\n?", re.M | re.S)


def released_source(cell) -> str:
    """What the release must show of a solution cell: each answer replaced by the stub, each
    hidden test gone, everything else as it is; a written answer replaced by its stub."""
    if cell.cell_type == "markdown" and cell.metadata.get("nbgrader", {}).get("solution"):
        return "YOUR ANSWER HERE"

    def stub(match):
        indent, kind = match.group(1), match.group(2)
        return f"{indent}# YOUR CODE HERE\n{indent}raise NotImplementedError()\n" if kind == "SOLUTION" else ""

    return _REGION.sub(stub, cell.source)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_release_has_no_solutions_or_hidden(name):
    """Every cell of the release is its solution cell with the answers stubbed and the hidden
    tests removed, character for character: no line of an answer or a hidden test, however
    short, can be left behind."""
    release_text = (RELEASE / name).read_text()
    for marker in LEAK_MARKERS:
        assert marker not in release_text, f"{name} leaks '{marker}'"
    solution = nbformat.read(SOLUTIONS / name, as_version=4)
    release = nbformat.read(RELEASE / name, as_version=4)
    assert len(release.cells) == len(solution.cells)
    for ours, theirs in zip(solution.cells, release.cells):
        assert theirs.source.rstrip("\n") == released_source(ours).rstrip("\n"), f"{name}, cell {ours.get('id')}"


def _backward_loops(source: str) -> list[int]:
    """Lines of loops that walk a sequence backwards and multiply by a transpose (`W.T @ ...`):
    the shape of a hand-written reverse pass, the answer to the reverse-oracle task."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.For):
            continue
        target = node.iter
        backwards = (isinstance(target, ast.Call) and getattr(target.func, "id", "") == "reversed") or (
            isinstance(target, ast.Subscript)
            and isinstance(target.slice, ast.Slice)
            and isinstance(target.slice.step, ast.UnaryOp)
            and isinstance(target.slice.step.op, ast.USub)
        )
        transposed = any(isinstance(n, ast.Attribute) and n.attr == "T" for n in ast.walk(node))
        if backwards and transposed:
            found.append(node.lineno)
    return found


def test_backward_loop_detector_sees_oracle():
    """The backward loop detector sees the oracle, however it is walked."""
    assert _backward_loops("for h in values[:0:-1]:\n    bar = w.T @ (bar * (1 - h * h))") == [1]
    assert _backward_loops("for h in reversed(values):\n    bar = (1 - h**2) * bar @ w.T") == [1]
    assert _backward_loops("for h in values[::-1]:\n    print(h)") == []


@pytest.mark.parametrize("name", [*NOTEBOOKS, *companions.names()])
def test_no_released_cell_holds_a_reverse_pass(name):
    """A test cell's reference that learners can read must not be a graded task's answer: the
    NumPy reverse recurrence lives only in the reverse-oracle answer (stubbed) and in hidden
    tests (removed); visible checks compare with jax.grad or jax.hessian of the shipped objective."""
    release = nbformat.read(RELEASE / name, as_version=4)
    leaks = [
        (cell.metadata.get("nbgrader", {}).get("grade_id") or index, lines)
        for index, cell in enumerate(release.cells)
        if cell.cell_type == "code" and (lines := _backward_loops(cell.source))
    ]
    assert leaks == [], f"{name}: cells that show a reverse pass (cell, lines): {leaks}"
    shipped = [module for module in SHIPPED_MODULES if _backward_loops((RELEASE / module).read_text())]
    assert shipped == [], f"shipped modules that hold a reverse pass: {shipped}"


@pytest.mark.parametrize("folder", [SOLUTIONS, RELEASE])
def test_committed_notebooks_carry_no_outputs(folder):
    for name in NOTEBOOKS:
        notebook = nbformat.read(folder / name, as_version=4)
        assert all(not cell.get("outputs") for cell in notebook.cells), f"{folder.name}/{name} has outputs"
        assert notebook.metadata["kernelspec"]["name"] == "python3"


def test_graded_cells_declare_check_points():
    """Graded cells declare the points their checks add up to."""
    for name in NOTEBOOKS:
        for cell in nbformat.read(SOLUTIONS / name, as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("grade") and not meta.get("solution"):
                declared = float(re.search(r"Checks\(\s*(\d+(?:\.\d+)?)", cell.source).group(1))
                items = sum(float(p) for p in re.findall(r"checks\.item\(\s*(\d+(?:\.\d+)?)", cell.source))
                assert declared == meta["points"] == items, (
                    f"{name} {meta['grade_id']}: {declared}, {meta['points']}, {items}"
                )


def test_learners_get_the_recorded_reference_run():
    """The recorded execution and its figure ship beside the notebooks, as data/ holds them."""
    assert {"reference-execution.txt", "storage-views.png"} <= set(SHIPPED_FILES)
    for name in SHIPPED_FILES:
        assert (RELEASE / name).read_bytes() == (DATA / name).read_bytes(), f"notebooks/{name} differs from data/{name}"


def test_recorded_execution_hides_hidden_checks():
    """The recorded execution reveals no hidden check.

    Check reports are cut to their points line: no item of a hidden test reaches learners."""
    recorded = (RELEASE / "reference-execution.txt").read_text()
    assert not re.search(r"^\[(PASS|FAIL)\] ", recorded, re.M)
    for name in NOTEBOOKS:
        for cell in nbformat.read(SOLUTIONS / name, as_version=4).cells:
            for hidden in re.findall(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", cell.source, re.S):
                for what in re.findall(r'checks\.item\(\s*[\d.]+,\s*"([^"]+)"', hidden):
                    assert what not in recorded, (
                        f"{name}: a hidden check's wording is in reference-execution.txt: {what}"
                    )


def _points() -> tuple[float, float]:
    """(all points, points graded by hand) of the assignment, from the source notebooks."""
    total = manual = 0.0
    for name in NOTEBOOKS:
        for cell in nbformat.read(SOLUTIONS / name, as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("grade") or meta.get("task"):
                total += meta.get("points", 0)
                if meta.get("task") or meta.get("solution"):  # answers and tasks wait for a human
                    manual += meta.get("points", 0)
    return total, manual


def test_the_readme_states_the_assignments_points():
    total, manual = _points()
    readme = (SOLUTIONS.parent / "README.md").read_text()
    assert f"{manual:g} of the {total:g} points" in readme
    instructors = (SOLUTIONS.parent / "docs" / "instructors.md").read_text()
    assert f"{manual:g} of the {total:g} points" in instructors
    assert f"out of {total:g} |" in instructors
    samples = (SOLUTIONS.parent / "autograder" / "samples" / "README.md").read_text()
    assert samples.count(f"/{total:g} |") == 3
