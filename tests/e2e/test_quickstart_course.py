"""nbgrader's own quickstart course, graded by both routes where neither JAX nor Matplotlib exists.

A fresh virtual environment with the grader's wheel and no extra, every dependency at the lower
end of the range the grader declares (requirements-lowest.txt, made by `make lock`): what CI
tests beside the pins. In it, `nbgrader quickstart` makes `ps1` (two notebooks, 3 points graded
by tests, 10 by a person), and the tests' second assignment joins it as `ps2`, its test cells
written with a checks module of its own (`ps1_checks`, the judge's protocol: no adapter, the
grader's core alone). The class is graded three ways:

- stock nbgrader (no grader line in the course's configuration, no other config read);
- `nbgrader autograde` with the grader's lines (`autograder configure`), a sandbox per notebook;
- `autograder grade --course`, the warm kernel host forking each notebook's kernel.

Both of the grader's routes give every cell the same score (and the same "awaits a person"),
equal to stock nbgrader's on this honest class, and both write the class report. One venv per
session (about four minutes to install the first time, pip's cache after that).
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from packaging.version import Version

from autograder.course.paths import ROOT
from tests.fixtures import second_assignment
from tests.unit.test_dependencies import _name, lower_ends, pins

#: The quickstart's assignment, and the second assignment's id in this course.
PS1, PS2 = "ps1", "ps2"
#: ps1's honest class: one answers everything as the source does, one hands in the release.
PS1_CLASS = ("answered", "blank")
#: ps2's honest class (tests/fixtures/second_assignment.py).
PS2_CLASS = ("right", "partly-wrong")
#: The points ps1's tests give each student (the rest of its 13 points await a person).
PS1_AUTO = {"answered": 3.0, "blank": 0.0}


def _run(*command, cwd: Path, env: dict, timeout: int = 900, code: int = 0) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == code, f"{command}: {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="session")
def lowest(tmp_path_factory) -> dict:
    """A fresh venv outside the checkout: the grader's wheel, no extra, its ranges' lower ends."""
    home = tmp_path_factory.mktemp("lowest")
    wheels = home / "wheels"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(wheels), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = wheels.glob("*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(home / "venv")], check=True, timeout=300)
    bin_dir = home / "venv" / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "JUPYTER_CONFIG_DIR")}
    env |= {"PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", "HOME": str(home), "MPLBACKEND": "Agg"}
    # Stock nbgrader reads no config here (JUPYTER_NO_CONFIG), and jupyter_core leaves an empty
    # config folder in TMPDIR for each of its processes: this one goes with the test's folder.
    (home / "tmp").mkdir()
    env["TMPDIR"] = str(home / "tmp")
    constraints = home / "lowest.txt"  # uv's lock as pip's constraints: its pins, without its comments
    constraints.write_text(re.sub(r"(?m)^\s*#.*\n", "", (ROOT / "requirements-lowest.txt").read_text()))
    _run(bin_dir / "pip", "install", "--quiet", "--no-compile", wheel, "--constraint", constraints, cwd=home, env=env)
    # The quickstart's notebooks name the kernel "python": an environment where it is called so.
    _run(bin_dir / "python", "-m", "ipykernel", "install", "--sys-prefix", "--name", "python", cwd=home, env=env)
    return {"home": home, "env": env, "bin": bin_dir}


def test_environment_has_lower_ends_and_no_jax(lowest):
    """The environment holds the lower end of each range the grader declares, and no JAX or Matplotlib."""
    python = lowest["bin"] / "python"
    for missing in ("jax", "jaxlib", "matplotlib"):
        done = subprocess.run([python, "-c", f"import {missing}"], env=lowest["env"], capture_output=True)
        assert done.returncode != 0, f"{missing} is importable"
    frozen = pins(_run(lowest["bin"] / "pip", "freeze", cwd=lowest["home"], env=lowest["env"]).stdout)
    ends = {_name(end): Version(end.split("==")[1].split(";")[0]) for end in lower_ends(_pyproject())}
    assert {name: Version(frozen[name]) for name in ends} == ends


def _pyproject() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _answered(release: Path, source: Path) -> nbformat.NotebookNode:
    """The release notebook with every answer cell as the source's solution has it."""
    notebook, solved = nbformat.read(release, as_version=4), nbformat.read(source, as_version=4)
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in solved.cells if c.metadata.get("nbgrader")}
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            cell.source = re.sub(r"(?m)^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", "", answers[meta["grade_id"]])
    return notebook


@pytest.fixture(scope="module")
def course(lowest) -> Path:
    """The quickstart course with ps1's class, and ps2 beside it with its class."""
    env, home = lowest["env"], lowest["home"]
    _run(lowest["bin"] / "nbgrader", "quickstart", "course101", cwd=home, env=env)
    course = home / "course101"
    second_assignment.write_assignment(course, judged=True, assignment=PS2, students=PS2_CLASS)
    _run(lowest["bin"] / "nbgrader", "generate_assignment", PS1, cwd=course, env=env)
    for student in PS1_CLASS:
        folder = course / "submitted" / student / PS1
        folder.mkdir(parents=True)
        for release in sorted((course / "release" / PS1).glob("*.ipynb")):
            if student == "answered":
                nbformat.write(_answered(release, course / "source" / PS1 / release.name), folder / release.name)
            else:
                shutil.copy2(release, folder / release.name)
    shutil.rmtree(course / "release")
    return course


def _scores(python: Path, course: Path, env: dict, assignment: str) -> dict:
    """{(student, notebook, cell): (score, awaits a person)} of the course's gradebook."""
    code = (
        "import json, sys\nfrom nbgrader.api import Gradebook\n"
        "with Gradebook(sys.argv[1]) as gb:\n"
        "    print(json.dumps([[s.student.id, nb.name, g.name, g.score, g.needs_manual_grade]\n"
        "        for s in gb.find_assignment(sys.argv[2]).submissions for nb in s.notebooks for g in nb.grades]))\n"
    )
    import json

    done = _run(python, "-c", code, f"sqlite:///{course / 'gradebook.db'}", assignment, cwd=course, env=env)
    return {(s, nb, g): (score, manual) for s, nb, g, score, manual in json.loads(done.stdout)}


@pytest.fixture(scope="module")
def graded(lowest, course, tmp_path_factory) -> dict:
    """The class graded by stock nbgrader, by `nbgrader autograde` with the grader's lines, and by
    `autograder grade --course`: {route: {assignment: scores}}, and each route's output."""
    env, bin_dir, python = lowest["env"], lowest["bin"], lowest["bin"] / "python"
    stock, plugin = tmp_path_factory.mktemp("stock") / "course", tmp_path_factory.mktemp("plugin") / "course"
    shutil.copytree(course, stock)
    shutil.copytree(course, plugin)
    found: dict = {"stock": {}, "plugin": {}, "grade": {}, "said": {}}
    for assignment in (PS1, PS2):
        _run(
            bin_dir / "nbgrader",
            "generate_assignment",
            assignment,
            "--force",
            cwd=stock,
            env={**env, "JUPYTER_NO_CONFIG": "1"},
        )
        _run(bin_dir / "nbgrader", "autograde", assignment, cwd=stock, env={**env, "JUPYTER_NO_CONFIG": "1"})
        found["stock"][assignment] = _scores(python, stock, env, assignment)
    _run(
        bin_dir / "autograder",
        "configure",
        plugin,
        "--checks-module",
        second_assignment.CHECKS_MODULE,
        "--assignment",
        PS2,
        cwd=plugin,
        env=env,
    )
    for assignment in (PS1, PS2):
        _run(bin_dir / "nbgrader", "generate_assignment", assignment, "--force", cwd=plugin, env=env)
        done = _run(bin_dir / "nbgrader", "autograde", assignment, cwd=plugin, env=env)
        found["plugin"][assignment] = _scores(python, plugin, env, assignment)
        found["said"][("plugin", assignment)] = done.stdout + done.stderr
    for assignment in (PS1, PS2):
        command = [
            bin_dir / "autograder",
            "grade",
            plugin / "submitted",
            "--course",
            plugin,
            "--assignment",
            assignment,
        ]
        done = _run(*command, cwd=plugin, env=env, timeout=1200)
        found["grade"][assignment] = _scores(python, plugin / "autograder" / assignment / "course", env, assignment)
        found["said"][("grade", assignment)] = done.stdout + done.stderr
    found["plugin_course"] = plugin
    return found


@pytest.mark.parametrize("assignment", [PS1, PS2])
def test_both_routes_score_every_cell_alike(graded, assignment):
    """`nbgrader autograde` with the grader and `autograder grade --course` give every cell the same
    score, and the same cells await a person."""
    plugin, ours = graded["plugin"][assignment], graded["grade"][assignment]
    assert plugin and ours == plugin


@pytest.mark.parametrize("assignment", [PS1, PS2])
def test_routes_score_as_stock_nbgrader(graded, assignment):
    """On this honest class, the grader's routes score every cell as stock nbgrader does."""
    assert graded["stock"][assignment] and graded["plugin"][assignment] == graded["stock"][assignment]


def test_scores_are_the_class_deserves(graded):
    """The scores compared above are the ones the class earned, not all zero: ps1's tests give the
    answered student all 3 points and the blank one none; the answered student's written answers
    await a person, the blank's unchanged ones score 0 at once (nbgrader's "No response"), and a
    task cell awaits a person whatever was handed in; ps2 scores as the second assignment's EXPECTED."""
    ps1 = graded["grade"][PS1]
    auto = {}
    for (student, _, _), (score, manual) in ps1.items():
        if not manual:
            auto[student] = auto.get(student, 0.0) + (score or 0.0)
    assert auto == PS1_AUTO
    tasks = {
        cell.metadata["nbgrader"]["grade_id"]
        for path in (graded["plugin_course"] / "source" / PS1).glob("*.ipynb")
        for cell in nbformat.read(path, as_version=4).cells
        if cell.metadata.get("nbgrader", {}).get("task")
    }
    pending = {name: {cell for (s, _, cell), (_, manual) in ps1.items() if manual and s == name} for name in PS1_CLASS}
    assert tasks and pending["blank"] == tasks and tasks < pending["answered"], (tasks, pending)
    ps2 = {(s, nb): score for (s, nb, cell), (score, _) in graded["grade"][PS2].items() if cell.startswith("test-")}
    assert ps2 == {key: value for key, value in second_assignment.EXPECTED.items() if key[0] in PS2_CLASS}


def test_both_routes_write_the_class_report(graded):
    """Both routes write the class report of each assignment, its figures drawn without Matplotlib,
    and say where it is."""
    plugin = graded["plugin_course"]
    for assignment, students in ((PS1, PS1_CLASS), (PS2, PS2_CLASS)):
        said = graded["said"][("plugin", assignment)]
        assert str(plugin / "class-report" / assignment / "report.html") in said, said[-2000:]
        for folder in (plugin / "class-report" / assignment, plugin / "autograder" / assignment):
            page = (folder / "report.html").read_text()
            assert all(student in page for student in students), folder
            assert "<svg" in page  # figures drawn inline, without Matplotlib
            scores = list(csv.DictReader(open(folder / "report" / "scores.csv")))
            assert sorted(row["student"] for row in scores) == sorted(students)


def test_the_grade_route_forks_and_compiles_nothing(graded):
    """`autograder grade` runs its reference run and grades with its warm host (no --no-fork), with
    no compile cache: the core alone keeps none."""
    for assignment in (PS1, PS2):
        said = graded["said"][("grade", assignment)]
        assert "reference run: the instructor's notebooks earn every point" in said
        assert "compile cache: 0 executables" in said and "Traceback" not in said
