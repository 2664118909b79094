"""The class report in headless Chromium: opened from disk as an instructor opens it, with a
learner's failure text that would run script if it were markup. Nothing runs, every figure (an
inline SVG) is drawn under the page's policy, and each has alt text and a table of its numbers
right after it; the first screen shows what the class got wrong."""

from __future__ import annotations

import pytest

from autograder.course.outcomes import Trouble, TroubleKind
from autograder.gradebook.class_report import build_report, write_report
from tests.unit.test_class_report import _class_of_five, _item, _rows, _with_item

pytestmark = pytest.mark.browser

HOSTILE = (
    "<script>window.PWNED='script'</script><img src=x onerror=\"window.PWNED='onerror'\">"
    "<a id=hostile href=\"javascript:window.PWNED='link'\">x</a>"
)


def test_class_report_inert_and_accessible(make_page, tmp_path):
    """The class report runs nothing and every figure has alt text and a table."""
    judged = _class_of_five()
    raised = _item("the slope along a direction", False, f"your code raised ValueError: {HOSTILE}")
    _with_item(judged["cat"], "04-exercise", "test-central-difference", 1, raised)
    judged["cat"].flags = [Trouble(TroubleKind.REVIEW, HOSTILE, "04-exercise.ipynb")]
    report = build_report("performance-05", _rows(sorted(judged)), judged)
    path = write_report(report, tmp_path)
    page = make_page()
    page.goto(path.as_uri())
    page.shots("report")
    figures = page.evaluate(
        """() => [...document.querySelectorAll('figure > svg')].map(svg => ({
            alt: svg.getAttribute('aria-label') || '',
            drawn: svg.getBoundingClientRect().width > 0 && svg.querySelectorAll('rect').length > 0,
            next: svg.nextElementSibling ? svg.nextElementSibling.tagName : null,
        }))"""
    )
    assert len(figures) == 4
    assert all(f["alt"] and f["drawn"] and f["next"] == "TABLE" for f in figures), figures
    # The first screen: what the class got wrong, with counts, before anything else.
    first = page.evaluate("() => document.querySelector('section h2').textContent")
    assert first == "What the class got wrong"
    assert page.locator("table").first.inner_text().startswith("Attempted and wrong")
    assert page.evaluate("() => document.scripts.length") == 0
    assert page.evaluate("() => document.querySelectorAll('#hostile, [onerror]').length") == 0
    assert page.locator("body").inner_text().count("window.PWNED='script'") >= 2  # shown as text
    assert page.evaluate("() => window.PWNED === undefined")
    assert not [m for m in page.console_messages if "pageerror" in m]
