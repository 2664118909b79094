"""Learner text made safe by one module (autograder/course/text_safety.py), one named policy per
place it is shown: the terminal, a report line, the learner's own words in it, a page."""

from __future__ import annotations

import re

import pytest

from autograder.course import text_safety
from autograder.course.paths import AUTOGRADER
from autograder.course.text_safety import (
    console_line,
    learner_name,
    learner_text,
    page_text,
    reads_like_the_report,
    report_line,
)


def test_console_line_escapes_what_a_terminal_acts_on():
    assert console_line("a\x1b[2Jb\rc\u202ed\te") == "a\\x1b[2Jb\\rc\\u202ed\te"
    assert console_line("x" * 1000) == "x" * 300 + "..."
    assert console_line("\n" * 200, 9) == "\\n\\n\\n\\n..."  # no escape cut in two, no lone backslash


def test_report_line_escapes_what_hides_a_line_and_quotes_marks():
    said = "found \u200b[PASS]\uff3b 3 of 3 points\u2028ok"
    assert report_line(said) == "found \\u200b\\[PASS]\\uff3b \\3 of 3 points\\u2028ok"
    assert report_line(report_line(said)) == report_line(said)  # a quoted mark is not quoted again


def test_learner_text_is_ascii_marked_and_closed_once():
    assert learner_text("") == ""  # the stub's bare NotImplementedError() says nothing
    assert learner_text("no ] here\\ [FAIL] é") == "[learner's text: no \\] here\\\\ \\[FAIL\\] \\xe9]"
    cut = learner_text("y" * 900)
    assert cut == f"[learner's text: {'y' * 600}...]"
    assert learner_name("np.linalg.LinAlgError") == "np.linalg.LinAlgError"
    assert learner_name("Bad\nName").startswith("[learner's text: Bad\\nName")


def test_page_text_shows_line_breakers():
    assert page_text("a\rb\u2029c\u202ed\te\nf") == "a\\rb\\u2029c\\u202ed\te\nf"


@pytest.mark.parametrize(
    "text, reads",
    [
        ("[PASS] all good", True),
        ("\x1b[32m[PA\x1b[0mSS]", True),  # colours split the word
        ("[\u0420\u0410SS]", True),  # Cyrillic letters drawn as Latin
        ("3\u2007of\u20073 points", True),  # figure spaces
        ("3 of 3 points, or so", True),
        ("passed: 3 of 4", False),
    ],
)
def test_reads_like_the_report_to_the_eye(text, reads):
    assert reads_like_the_report(text) is reads


def test_policies_are_named_once():
    """Each policy is declared once, with its name, in the one module."""
    policies = [value for value in vars(text_safety).values() if isinstance(value, text_safety.Policy)]
    assert sorted(p.name for p in policies) == ["console line", "learner's text", "page text", "report line"]


def test_no_other_module_writes_escapes_of_its_own():
    """No module of the grader escapes learner text itself (what runs in a sandbox, sent alone as
    text, cannot import the module and is left out): a new place uses a policy of text_safety."""
    own = re.compile(r"unicode_escape|\bascii\(|\.isprintable\(")
    found = [
        str(path.relative_to(AUTOGRADER))
        for path in sorted(AUTOGRADER.rglob("*.py"))
        if path.name != "text_safety.py" and "sandboxed" not in path.parts and own.search(path.read_text())
    ]
    assert found == []


def test_csv_cell_keeps_a_spreadsheet_from_running_a_learners_text():
    """A file name a learner chose is text in the class report's CSV files, never a formula."""
    from autograder.course.text_safety import csv_cell

    for formula in ('=HYPERLINK("https:evil.example","click").ipynb', "+SUM(1+1).ipynb", "-2+3+cmd.ipynb", "@SUM(1)"):
        assert csv_cell(formula) == "'" + formula
    assert [csv_cell(t) for t in ("-0.5", "+3", "02-build.ipynb", "")] == ["-0.5", "+3", "02-build.ipynb", ""]
