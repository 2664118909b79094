"""The lines of the lesson's hidden tests that nothing given to learners contains.

A line of a hidden test may also be found in the release, a shipped module or a right answer
(`kinds = collections.Counter()` is a line of each, `rtol=3e-5,` part of a visible check); such a
line tells a learner nothing. The others must never reach a learner's kernel, notebook or page.
"""

from __future__ import annotations

import re

import nbformat

from autograder.adapters.lesson import NOTEBOOKS, SHIPPED_MODULES
from autograder.course.paths import RELEASE, SOLUTIONS

HIDDEN_BLOCK = re.compile(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", re.S)


def hidden_test_lines() -> list[str]:
    given: set[str] = set()
    for name in NOTEBOOKS:
        for cell in nbformat.read(RELEASE / name, as_version=4).cells:
            given |= {line.strip() for line in cell.source.splitlines()}
        for cell in nbformat.read(SOLUTIONS / name, as_version=4).cells:
            if cell.metadata.get("nbgrader", {}).get("solution"):
                given |= {line.strip() for line in cell.source.splitlines()}
    for module in SHIPPED_MODULES:
        given |= {line.strip() for line in (RELEASE / module).read_text().splitlines()}
    everything_given = "\n".join(given)
    return [
        line.strip()
        for name in NOTEBOOKS
        for cell in nbformat.read(SOLUTIONS / name, as_version=4).cells
        for match in HIDDEN_BLOCK.finditer(cell.source)
        for line in match.group(1).splitlines()
        if len(line.strip()) > 8 and any(ch.isalpha() for ch in line) and line.strip() not in everything_given
    ]
