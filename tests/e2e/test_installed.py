"""The installed `autograder` command, as an instructor uses it outside this checkout.

- it knows nothing of the checkout: the assignment is named (`--course` or `--bundle`), and
  `--out` is given or derived from the course;
- an `--out` a kernel or a learner could read is refused before anything is written: inside the
  virtual environment or the Python installation (every kernel sees them read-only), the system's
  folders, the assignment's files, nbgrader's folders of the course, the submissions;
- `autograder install-assignment` puts exactly the assignment's source files into a course,
  never an answer file.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from autograder.adapters.lesson import ASSIGNMENT, NOTEBOOKS, SHIPPED_FILES, SHIPPED_MODULES
from autograder.course.assignment import BundleOrigin
from autograder.course.paths import RELEASE, ROOT
from autograder.run.grade import main as grade_main
from autograder.run.grade import refused_out

PY = sys.executable


def _class(tmp_path: Path) -> tuple[Path, Path]:
    """A course with the assignment installed, and a one-student class."""
    course = tmp_path / "course"
    BundleOrigin(ROOT).install_assignment(course)
    shutil.copyfile(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    subs = tmp_path / "subs"
    (subs / "ann").mkdir(parents=True)
    shutil.copyfile(RELEASE / NOTEBOOKS[0], subs / "ann" / NOTEBOOKS[0])
    return course, subs


def _refused_places(course: Path, subs: Path) -> dict[str, Path]:
    site = Path(sysconfig.get_paths()["purelib"])
    return {
        "site-packages": site / "runs" / "autograde",
        "the venv": Path(sys.prefix) / "grading",
        "the venv itself": Path(sys.prefix),
        "the Python installation": Path(os.path.realpath(sys.base_prefix)) / "grading",
        "/usr": Path("/usr/local/share/grading"),
        "the assignment": course / "source" / ASSIGNMENT / "out",
        "the release": course / "release" / "out",
        "learners' feedback": course / "feedback" / "out",
        "the submissions": subs / "out",
        "above the submissions": subs.parent,
        "the course itself": course,
    }


@pytest.mark.parametrize(
    "where",
    [
        "site-packages",
        "the venv",
        "the venv itself",
        "the Python installation",
        "/usr",
        "the assignment",
        "the release",
        "learners' feedback",
        "the submissions",
        "above the submissions",
        "the course itself",
    ],
)
def test_readable_out_refused_nothing_written(tmp_path, capsys, where):
    """An --out a kernel or learner could read is refused and nothing written."""
    course, subs = _class(tmp_path)
    out = _refused_places(course, subs)[where]
    existed = out.exists()
    code = grade_main([str(subs), "--course", str(course), "--assignment", ASSIGNMENT, "--out", str(out)])
    assert code == 2
    assert "error: --out" in capsys.readouterr().err
    assert out.exists() == existed, f"{out} was made"
    if not existed:
        assert not out.parent.exists() or out.name not in os.listdir(out.parent)


def test_out_beside_course_or_in_tmp_accepted(tmp_path):
    """An --out beside the course or in /tmp is accepted."""
    course, subs = _class(tmp_path)
    from autograder.course.assignment import CourseOrigin

    origin = CourseOrigin(course, ASSIGNMENT)
    for out in (tmp_path / "graded", course / "autograder" / ASSIGNMENT, Path("/tmp") / "a-class"):
        assert refused_out(out, subs, origin) is None, out
    # A symbolic link into the venv is the venv.
    (tmp_path / "link").symlink_to(sys.prefix)
    assert refused_out(tmp_path / "link" / "out", subs, origin) is not None


def test_out_in_or_above_release_refused(tmp_path):
    """`make lab` serves notebooks/ to learners: a class course there, or in a folder that holds
    it (the checkout itself), is refused as the solutions are."""
    from autograder.course.assignment import BundleOrigin
    from autograder.course.paths import ROOT

    origin, subs = BundleOrigin(ROOT), tmp_path / "submissions"
    subs.mkdir()
    for out in (ROOT / "notebooks" / "y", ROOT / "solutions" / "y", ROOT, ROOT.parent):
        assert refused_out(out, subs, origin) is not None, out
    assert refused_out(ROOT / "runs" / "autograde", subs, origin) is None  # make autograde's default


def test_command_derives_out_from_course(tmp_path, capsys):
    """The command names its assignment and derives --out from the course."""
    course, subs = _class(tmp_path)
    assert grade_main([str(subs), "--out", str(tmp_path / "out")]) == 2
    assert "--course COURSE --assignment ID, or --bundle CHECKOUT" in capsys.readouterr().err
    assert grade_main([str(subs), "--bundle", str(ROOT)]) == 2
    assert "--out is required without --course" in capsys.readouterr().err
    assert not (ROOT / "runs" / "autograde" / "course" / "ann").exists()
    from autograder.course.assignment import CourseOrigin
    from autograder.run.grade import default_out

    assert default_out(CourseOrigin(course, ASSIGNMENT)) == course / "autograder" / ASSIGNMENT


def test_installed_messages_name_no_make_target():
    """The installed command's messages name its own subcommands: an instructor without this
    checkout has no Makefile."""
    import ast

    targets = re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert "autograde" in targets
    named = re.compile(rf"\bmake ({'|'.join(targets)})\b")
    found = []
    for path in sorted((ROOT / "autograder").glob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        }
        texts = [
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
        ]
        found += [f"{path.name}: {text.strip()[:80]}" for text in texts if named.search(text)]
    assert found == []


def test_install_assignment_installs_exact_files(tmp_path):
    """install-assignment installs exactly the assignment's files."""
    course = tmp_path / "course"
    course.mkdir()
    run = subprocess.run(
        [PY, "-m", "autograder.commands.cli", "install-assignment", str(ROOT), str(course)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    installed = sorted(p.name for p in (course / "source" / ASSIGNMENT).iterdir())
    assert installed == sorted([*NOTEBOOKS, *SHIPPED_MODULES, *SHIPPED_FILES])
    assert "remat_sweep_reference.py" not in installed
    # The same bytes as the checkout's, and every module a notebook imports is among them.
    for name, path in BundleOrigin(ROOT).assignment_files().items():
        assert (course / "source" / ASSIGNMENT / name).read_bytes() == path.read_bytes()
    # Again: refused, then --force replaces the folder whole (an answer file copied by hand goes).
    (course / "source" / ASSIGNMENT / "remat_sweep_reference.py").write_text("# the answer")
    again = subprocess.run(
        [PY, "-m", "autograder.commands.cli", "install-assignment", str(ROOT), str(course)],
        capture_output=True,
        text=True,
    )
    assert again.returncode == 2 and "--force" in again.stderr
    forced = subprocess.run(
        [PY, "-m", "autograder.commands.cli", "install-assignment", str(ROOT), str(course), "--force"],
        capture_output=True,
        text=True,
    )
    assert forced.returncode == 0, forced.stderr
    assert not (course / "source" / ASSIGNMENT / "remat_sweep_reference.py").exists()


def test_notebook_imports_installed_answers_not():
    """Every module the notebooks import is installed and no answer is.

    What the five notebooks import from the lesson's own modules is shipped; the sweep's
    reference module (the sqrt(L) answer) is imported by none of them."""

    imported = set()
    for name in NOTEBOOKS:
        notebook = json.loads((ROOT / "solutions" / name).read_text())
        for cell in notebook["cells"]:
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            imported |= set(re.findall(r"^\s*(?:from|import)\s+(remat_\w+)", source, re.MULTILINE))
    assert imported and {f"{m}.py" for m in imported} <= set(SHIPPED_MODULES)
    assert "remat_sweep_reference.py" not in SHIPPED_MODULES


def test_run_grading_nobody_exits_4(tmp_path, monkeypatch, capsys):
    """Every student's grading fails for a reason of the grader's own: the run says so (exit 4,
    a FAILED line each) and writes no grades.csv, cells.csv or feedback with zeros for them."""
    import autograder.run.runners
    from tests.grading import reference_cache, session_seed

    def broken(task, template):
        raise OSError("the grader's disk is full")

    monkeypatch.setattr(autograder.run.runners, "grade_student", broken)
    _, subs = _class(tmp_path)
    out = tmp_path / "out"
    seed = ["--judge-seed", str(session_seed())] if session_seed() else []
    code = grade_main(
        [str(subs), "--bundle", str(ROOT), "--out", str(out), "--reference-cache", str(reference_cache()), *seed]
    )
    printed = capsys.readouterr()
    assert code == 4, printed.out + printed.err
    assert "FAILED  ann: the grader could not grade them" in printed.err
    assert re.search(r"^ann +not graded \(FAILED below\)$", printed.out, re.MULTILINE), printed.out
    assert "wrote no grades" in printed.err
    for name in ("grades.csv", "cells.csv", "feedback/ann", "course/autograded/ann", "course/feedback/ann"):
        assert not (out / name).exists(), f"{name} written for a student nobody graded"


def test_unset_config_is_nbgrader_default():
    """A course's config read as nbgrader reads it: a setting it does not name is nbgrader's
    default (Execute.timeout 30 s, no kernel name: the notebook's), never traitlets' placeholder."""
    from traitlets.config import Config

    from autograder.course.assignment import nbgrader_setting, notebook_kernel

    empty = Config()
    empty.Execute.timeout  # noqa: B018 - reading a missing name leaves a placeholder behind
    assert nbgrader_setting(empty, "Execute", "timeout") == 30
    assert nbgrader_setting(empty, "Execute", "kernel_name") == ""
    assert nbgrader_setting(empty, "IncludeHeaderFooter", "header") == ""
    unlimited = Config()
    unlimited.Execute.timeout = None
    assert nbgrader_setting(unlimited, "Execute", "timeout") is None
    assert notebook_kernel(b'{"metadata": {"kernelspec": {"name": "julia-1.10"}}}') == "julia-1.10"
    assert notebook_kernel(b'{"metadata": {}}') == "python3"


def test_quickstart_relative_header_found(tmp_path):
    """`nbgrader quickstart` names its header relative to the course folder; the grader's copy of
    the course generates the assignment with it, from wherever the grader runs."""
    import nbformat

    from autograder.course.assignment import CourseOrigin
    from autograder.course.task_template import CourseSource
    from autograder.gradebook.class_course import prepare_class_course, update_class_course

    course = tmp_path / "course"
    (course / "source" / "ps1").mkdir(parents=True)
    header = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("HEADER OF THE COURSE")])
    nbformat.write(header, course / "source" / "header.ipynb")
    task = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    task.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(task, course / "source" / "ps1" / "problem1.ipynb")
    (course / "nbgrader_config.py").write_text(
        'c = get_config()  # noqa\nc.IncludeHeaderFooter.header = "source/header.ipynb"\n'
    )
    out_course = tmp_path / "out" / "course"
    update_class_course(out_course, origin=CourseOrigin(course, "ps1"))
    template, timeout = prepare_class_course(out_course, CourseSource.read(out_course))
    assert timeout == 30  # nbgrader's default: the config names none
    released = (out_course / "release" / "ps1" / "problem1.ipynb").read_text()
    assert "HEADER OF THE COURSE" in released
    missing = tmp_path / "missing"
    (missing / "source" / "ps1").mkdir(parents=True)
    shutil.copy2(course / "source" / "ps1" / "problem1.ipynb", missing / "source" / "ps1")
    shutil.copy2(course / "nbgrader_config.py", missing / "nbgrader_config.py")
    with pytest.raises(FileNotFoundError, match="header.ipynb"):
        update_class_course(tmp_path / "out2" / "course", origin=CourseOrigin(missing, "ps1"))


def test_kernel_search_finds_no_class(tmp_path, capsys):
    """hostile-searches-host walks every folder its kernel can list for an answered 02-build
    notebook and for files named like a canary. Graded into the out derived from the course and
    into one inside this checkout (beside the venv), it finds neither the class course nor the
    canaries planted in the out and the course; an out inside the venv is refused before
    anything is written, so nothing of a class is ever where a kernel looks."""
    from autograder.course.assignment import new_course
    from tests.fixtures import build as fixtures
    from tests.grading import reference_cache, session_seed

    course = new_course(tmp_path / "course")
    subs = tmp_path / "subs"
    (subs / "hostile").mkdir(parents=True)
    shutil.copyfile(
        fixtures.SUBMISSIONS / "hostile-searches-host" / "02-build.ipynb", subs / "hostile" / "02-build.ipynb"
    )
    secret = f"class-canary-{os.getpid()}-{id(tmp_path)}"
    (course / "performance05-canary-course.txt").write_text(secret)
    site = Path(sysconfig.get_paths()["purelib"])
    beside_venv = ROOT / "runs" / f"hostile-out-{os.getpid()}"
    seed = ["--judge-seed", str(session_seed())] if session_seed() else []
    common = ["--course", str(course), "--assignment", ASSIGNMENT, "--reference-cache", str(reference_cache()), *seed]
    assert grade_main([str(subs), *common, "--out", str(site / "runs" / "autograde")]) == 2
    assert not (site / "runs").exists()
    try:
        for out in (course / "autograder" / ASSIGNMENT, beside_venv):
            out.mkdir(parents=True)
            (out / "performance05-canary-out.txt").write_text(secret)
            args = [str(subs), *common] + (["--out", str(out)] if out == beside_venv else [])
            assert grade_main(args) == 0, capsys.readouterr().err
            notebook = json.loads(
                (out / "course" / "autograded" / "hostile" / ASSIGNMENT / "02-build.ipynb").read_text()
            )
            printed = "".join(
                o.get("text", "") if isinstance(o.get("text", ""), str) else "".join(o["text"])
                for cell in notebook["cells"]
                for o in cell.get("outputs", [])
            )
            assert "canaries found: []" in printed, printed[-2000:]
            assert "borrowed answers from" not in printed and secret not in printed
            cells = list(csv.DictReader(open(out / "cells.csv")))
            assert sum(float(row["score"]) for row in cells) == 0
    finally:
        shutil.rmtree(beside_venv, ignore_errors=True)


def test_console_table_counts_recheck_like_csv():
    """A manual grade kept while its changed answer awaits a re-check: cells.csv counts the kept
    score and says the cell is pending, as nbgrader's export and grades.csv count it, and so does
    the table."""
    from autograder.course.assignment import Assignment
    from autograder.run.grade import GradingResult, score_table

    rows = [
        {
            "student_id": "ann",
            "notebook": "04-exercise",
            "grade_id": "test-hvp",
            "score": 5.0,
            "max_score": 6.0,
            "pending": "no",
        },
        {
            "student_id": "ann",
            "notebook": "04-exercise",
            "grade_id": "answer-why-hvp",
            "score": 1.5,
            "max_score": 2.0,
            "pending": "yes",
        },
    ]
    result = GradingResult(
        cells=rows,
        broken={},
        flagged={},
        seconds=0.0,
        students=["ann"],
        assignment=Assignment(ASSIGNMENT, ("04-exercise.ipynb",)),
    )
    line = next(line for line in score_table(result).splitlines() if line.startswith("ann"))
    assert line.split()[1:] == ["6.5/8*", "6.5/8"]
