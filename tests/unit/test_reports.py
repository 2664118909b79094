"""What the grader writes for people, tested without grading anyone: hidden tests taken out of
what learners see, the score table it prints, and flags.csv and its note in the feedback."""

from __future__ import annotations

import csv

import nbformat
import pytest

from autograder.adapters.lesson import BUNDLE, NOTEBOOKS
from autograder.course.hidden_tests import PLACEHOLDER, strip_hidden_tests, strip_source
from autograder.course.paths import SOLUTIONS
from autograder.gradebook.reports import CELL_COLUMNS, FLAG_COLUMNS, flag_findings, read_flags
from autograder.gradebook.student_files import flag_note
from autograder.run.grade import GradingResult, class_line, score_table

BLOCK = "### BEGIN HIDDEN TESTS\nassert secret == 42\n### END HIDDEN TESTS\n"


@pytest.mark.parametrize(
    "source, expected",
    [
        ("visible()\n" + BLOCK + "after()\n", "visible()\n" + PLACEHOLDER + "after()\n"),
        # indented inside an item, and written without the space nbgrader's template has
        (
            "with item:\n    ###BEGIN HIDDEN TESTS\n    check(1)\n    ###END HIDDEN TESTS\nend()\n",
            "with item:\n" + PLACEHOLDER + "end()\n",
        ),
        # two blocks: both go, what is between them stays
        (BLOCK + "between()\n" + BLOCK, PLACEHOLDER + "between()\n" + PLACEHOLDER),
        # no END: everything after BEGIN is hidden, never shown
        ("shown()\n### BEGIN HIDDEN TESTS\nsecret()\nmore_secret()", "shown()\n" + PLACEHOLDER),
        # the last line of the cell, without a newline
        ("a()\n### BEGIN HIDDEN TESTS\nb()\n### END HIDDEN TESTS", "a()\n" + PLACEHOLDER),
        # the words in a string or a comment that is not a marker line are code like any other
        ('print("BEGIN HIDDEN TESTS")\n', 'print("BEGIN HIDDEN TESTS")\n'),
    ],
    ids=["plain", "indented-no-space", "two-blocks", "no-end", "no-final-newline", "not-a-marker"],
)
def test_strip_source(source, expected):
    assert strip_source(source) == expected


def _without_hidden_lines(source: str) -> str:
    """The same stripping, line by line: each marked block, markers included, becomes one placeholder."""
    kept, inside = [], False
    for line in source.splitlines(keepends=True):
        if "BEGIN HIDDEN TESTS" in line:
            kept.append(PLACEHOLDER)
            inside = True
        elif not inside:
            kept.append(line)
        elif "END HIDDEN TESTS" in line:
            inside = False
    return "".join(kept)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_only_hidden_lines_are_removed(name):
    """Every hidden line of the solutions goes and every other line stays."""
    notebook = nbformat.read(SOLUTIONS / name, as_version=4)
    before = [cell.source for cell in notebook.cells]
    changed = strip_hidden_tests(notebook)
    assert changed == sum("BEGIN HIDDEN TESTS" in source for source in before)
    for old, cell in zip(before, notebook.cells):
        assert cell.source == _without_hidden_lines(old)
        assert "HIDDEN TESTS" not in cell.source


def _result(**extra) -> GradingResult:
    rows = [
        ("ann", "01-understand", "test-a", 2.0, 3.0, "no"),
        ("ann", "04-exercise", "answer-why-hvp", 1.5, 2.0, "yes"),  # a manual grade kept through a RECHECK
        ("ann", "04-exercise", "test-b", 1.0, 1.0, "no"),
        ("bob", "01-understand", "test-a", 3.0, 3.0, "no"),
    ]
    cells = [dict(zip(CELL_COLUMNS, row)) for row in rows]
    extra = {"broken": {}, "flagged": {}, **extra}
    return GradingResult(cells=cells, **extra, seconds=1.0, students=["ann", "bob"], assignment=BUNDLE.as_assignment())


def test_score_table_sums_and_marks_manual():
    """The score table adds each notebook as the gradebook counts it (a pending cell at the score
    it holds) and marks what awaits a human."""
    lines = score_table(_result()).splitlines()
    ann = next(line for line in lines if line.startswith("ann"))
    bob = next(line for line in lines if line.startswith("bob"))
    assert ann.split() == ["ann", "2/3", "0/0", "0/0", "2.5/3*", "0/0", "4.5/6"]
    assert bob.split() == ["bob", "3/3", "0/0", "0/0", "0/0", "0/0", "3/3"]
    assert lines[0].split() == ["student", *[name.removesuffix(".ipynb")[:13] for name in NOTEBOOKS], "total"]


def test_score_table_marks_broken_flagged():
    """The score table marks broken and flagged students."""
    lines = score_table(_result(broken={"ann": ["01-understand"]}, flagged={"bob": ["x"]})).splitlines()
    assert next(line for line in lines if line.startswith("ann")).endswith(" !")
    assert next(line for line in lines if line.startswith("bob")).endswith(" ?")


def test_a_regrade_of_a_few_names_the_students_kept():
    """A run that graded some of the class says how many the class gradebook holds, and which it
    kept as earlier runs stored them; a run that graded everyone in it says nothing more."""
    assert class_line(_result(in_class=["ann", "bob"])) is None
    assert class_line(_result(in_class=["ann", "bob", "carol", "dan"])) == (
        "the class gradebook holds 4 student(s): 2 graded in this run, 2 kept as earlier runs stored them (carol, dan)"
    )
    many = class_line(_result(in_class=["ann", "bob", *(f"s{i}" for i in range(7))]))
    assert many is not None and many.endswith("(s0, s1, s2, s3, s4, ...)")


def test_flags_read_back_as_written(tmp_path):
    """Flags read back as written, whatever the finding holds."""
    findings = [
        ("ann", '02-build.ipynb: cell "test-x": assigns to numpy.testing, line 3, "quoted", comma'),
        ("ann", "01-understand.ipynb: a finding\nover two lines"),
        ("bob", "02-build.ipynb: imports ctypes"),
        ("ann", "not a notebook finding"),
    ]
    with open(tmp_path / "flags.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(FLAG_COLUMNS)
        writer.writerows(findings)
    assert read_flags(tmp_path) == findings
    assert flag_findings(tmp_path, "ann") == {
        "02-build.ipynb": ['cell "test-x": assigns to numpy.testing, line 3, "quoted", comma'],
        "01-understand.ipynb": ["a finding\nover two lines"],
    }
    assert flag_findings(tmp_path, "carol") == {}
    assert read_flags(tmp_path / "nowhere") == []


def test_flag_note_after_body_and_escaped():
    """The flag note sits after body and escapes what it quotes."""
    page = '<html><body class="x"><p>feedback</p></body></html>'
    noted = flag_note(page, ["imports <script>alert(1)</script> & more"])
    assert noted.startswith('<html><body class="x"><div class="alert alert-warning"')
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in noted
    assert "<script>" not in noted
    assert noted.endswith("<p>feedback</p></body></html>")


def test_the_lesson_has_hidden_tests_to_strip():
    counts = [strip_hidden_tests(nbformat.read(SOLUTIONS / name, as_version=4)) for name in NOTEBOOKS]
    assert sum(counts) >= 3, counts


def test_lms_export_scores_every_student(tmp_path):
    """Each student's row holds their own scores (a loop once reused the assignment's name)."""
    from nbgrader.api import Gradebook

    from autograder.course.assignment import put_venv_on_path
    from autograder.gradebook.class_gradebook import db_url, quiet_gradebook_warnings
    from autograder.gradebook.reports import lms_export

    put_venv_on_path()  # nbgrader runs alembic from the environment's bin/
    quiet_gradebook_warnings()
    course = tmp_path / "course"
    (course / "source" / "ps1").mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(), course / "source" / "ps1" / "01.ipynb")
    with Gradebook(db_url(course)) as gb:
        gb.add_assignment("ps1")
        gb.add_notebook("01", "ps1")
        gb.add_grade_cell("check", "01", "ps1", max_score=4, cell_type="code")
        for student, score, first, last in (
            ("ada", 3.0, "Ada", "Lovelace"),
            ("bob", 4.0, None, None),
            ("cy", 1.5, "", ""),
        ):
            gb.add_student(student, first_name=first, last_name=last)
            gb.add_submission("ps1", student)
            grade = gb.find_grade("check", "01", "ps1", student)
            grade.auto_score, grade.needs_manual_grade = score, False
        gb.db.commit()
    export = lms_export(course)
    assert export.header[-2:] == ["ps1", "ps1 01"] and export.points[-2:] == ["4", "4"]
    assert [(row[0], row[2], row[-2]) for row in export.rows] == [
        ("Lovelace, Ada", "ada", "3"),
        ("bob", "bob", "4"),
        ("cy", "cy", "1.5"),
    ]
    assert export.pending == {}


def test_new_gradebook_stamped_with_revision(tmp_path, monkeypatch):
    """A new gradebook is stamped with the revision the alembic command reads."""
    import sqlite3

    import nbgrader.api
    from nbgrader.api import Gradebook

    from autograder.course.assignment import put_venv_on_path
    from autograder.upstream.nbgrader import fast_schema_stamp

    put_venv_on_path()  # nbgrader's own reading runs the venv's `alembic heads`
    monkeypatch.setattr(nbgrader.api, "get_alembic_version", nbgrader.api.get_alembic_version)
    by_command = nbgrader.api.get_alembic_version()
    fast_schema_stamp()

    def no_command(*args, **kwargs):
        raise AssertionError(f"a command ran: {args}")

    monkeypatch.setattr(nbgrader.api.sp, "check_output", no_command)
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}"):
        pass
    with sqlite3.connect(tmp_path / "gradebook.db") as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchall() == [(by_command,)]


@pytest.mark.filterwarnings("ignore:Object of type")  # nbgrader's own add_submission, as it is
def test_nbgrader_export_names_what_awaits_a_person(tmp_path, monkeypatch):
    """`nbgrader export` through the plugin: what each submission still awaits from a person, per
    assignment and student, as the export's --assignment and --student narrow it."""
    import nbgrader.api
    from nbgrader.api import Gradebook

    from autograder.gradebook.reports import awaiting_a_person, pending_lines
    from autograder.upstream.nbgrader import schema_head

    monkeypatch.setattr(nbgrader.api, "get_alembic_version", schema_head)  # read here, not by running `alembic`

    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gb:
        for assignment in ("ps1", "ps2"):
            gb.update_or_create_assignment(assignment)
            gb.add_notebook("nb", assignment)
            gb.add_grade_cell("written", "nb", assignment, max_score=2, cell_type="markdown")
            gb.add_grade_cell("test", "nb", assignment, max_score=1, cell_type="code")
        for student in ("ann", "bob"):
            gb.add_student(student)
            for assignment in ("ps1", "ps2"):
                gb.add_submission(assignment, student)
        waiting = {("ann", "ps1", "written"), ("ann", "ps1", "test"), ("bob", "ps2", "written")}  # test: a re-check
        for student in ("ann", "bob"):
            for assignment in ("ps1", "ps2"):
                for cell in ("written", "test"):
                    grade = gb.find_grade(cell, "nb", assignment, student)
                    grade.needs_manual_grade = (student, assignment, cell) in waiting
        gb.db.commit()
        both = ["ps1", "ps2"]
        assert awaiting_a_person(gb, both) == {
            "ps1": {"ann": ["nb/test", "nb/written"]},
            "ps2": {"bob": ["nb/written"]},
        }
        assert awaiting_a_person(gb, ["ps2"]) == {"ps2": {"bob": ["nb/written"]}}
        assert awaiting_a_person(gb, both, students=["ann"]) == {"ps1": {"ann": ["nb/test", "nb/written"]}}
    assert pending_lines({"ann": ["nb/test", "nb/written"]}, "ps1") == ["PENDING ann: ps1: nb/test, nb/written"]
    assert pending_lines({"ann": ["nb/test"]}) == ["PENDING ann: nb/test"]  # route B's: one assignment
    # Many cells: as many names as fit, then how many more; never longer than the console's cut
    # (1,000 characters), whatever the student's and assignment's names; a name whole or not at all.
    many = [f"02-build/written-answer-{i:03d}" for i in range(60)]
    for student, assignment in (("ann", "ps1"), ("s" * 200, "a" * 120)):
        (line,) = pending_lines({student: many}, assignment)
        listed, more = line.removeprefix(f"PENDING {student}: {assignment}: ").rsplit(" and ", 1)
        names = listed.split(", ")
        assert len(line) <= 960 and more == f"{60 - len(names)} more", line
        assert names == many[: len(names)] and len(names) > 10
    (line,) = pending_lines({"ann": ["x" * 2000, "nb/test"]}, "ps1")
    assert line == "PENDING ann: ps1: 2 cell(s), their names too long for this line"
    assert pending_lines({"ann": ["nb/a", "nb/b"]}) == ["PENDING ann: nb/a, nb/b"]  # all fit: no count
