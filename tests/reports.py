"""What the tests hold a judge's report to, wherever it was written (the judge in this process,
or a grading run's autograded notebooks): every line is the judge's. And what they hold a page
to: no TeX command of a learner's that MathJax would run (`live_tex`)."""

from __future__ import annotations

import re

#: A cell's points line, as remat_checks.points_line writes it.
POINTS_LINE = re.compile(r"^\S+ of \S+ points")


def assert_judges_lines_only(report: str, last: str) -> None:
    """One points line, `last`, at the end; no [PASS] line (nothing was answered); no character
    that breaks or hides a line on a page or a terminal (U+2028, U+0085, \\r, ANSI escapes)."""
    lines = report.rstrip("\n").split("\n")
    assert report.rstrip("\n").splitlines() == lines, ascii(report)
    assert all(line.isprintable() for line in lines), ascii(report)
    assert [line for line in lines if line.lstrip().upper().startswith(("[PASS]", "[ PASS"))] == [], report
    assert [line for line in lines if POINTS_LINE.search(line)] == [last], report
    assert lines[-1] == last, report


#: Elements whose text MathJax does not read (its tex2jax skipTags).
MATHJAX_SKIPS = ("script", "noscript", "style", "textarea", "pre", "code", "annotation", "annotation-xml")


def live_tex(page: str) -> list[str]:
    """The control words MathJax would read on a page beyond pages.TEX_COMMANDS (the math it keeps):
    in the page's text as a browser decodes it (the text between tags joined), outside the
    elements MathJax skips."""
    from bs4 import BeautifulSoup

    from autograder.notebook.pages import TEX_COMMANDS

    soup = BeautifulSoup(page, features="html.parser")
    for element in soup.find_all(MATHJAX_SKIPS):
        element.decompose()
    text = soup.get_text()
    found, at = [], 0
    while at < len(text):
        if text[at] != "\\":
            at += 1
            continue
        end = at + 1
        while end < len(text) and text[end].isascii() and text[end].isalpha():
            end += 1
        if end == at + 1:  # a control symbol: \\, \{, \(
            at += 2
            continue
        if text[at + 1 : end] not in TEX_COMMANDS:
            found.append(text[at:end])
        at = end
    return found
