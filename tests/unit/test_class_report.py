"""The class report, from synthetic classes: what the class got wrong first, apart from what it did
not attempt, decided by kind; counts and reasons where they belong; the page and its CSV files
agreeing cell by cell; learner text escaped; and the classes that break naive reports (one
student, nobody passing, broken submissions) still readable."""

from __future__ import annotations

import csv
import dataclasses
import html
import re
import statistics
from html.parser import HTMLParser
from pathlib import Path

import pytest

from autograder.course.outcomes import CellVerdict, ItemVerdict, NotebookOutcome, Trouble, TroubleKind
from autograder.gradebook.class_report import (
    StudentRecord,
    build_report,
    read_judged,
    reason_of,
    record_not_graded,
    record_notebook,
    render_html,
    write_class_report,
    write_judged,
    write_report,
)
from autograder.gradebook.totals import CellScore, ClassTotals
from autograder.judge.core import item_records

NOTEBOOKS = ["01-understand", "04-exercise"]
HINT = "twice the slope: the quotient is (f(x + εd) − f(x − εd)) divided by 2ε"
UNANSWERED = "not answered yet: the answer cell still raises NotImplementedError"


def _item(
    what: str,
    passed: bool,
    failure: str | None = None,
    hint: str | None = None,
    points: float = 1.0,
    unanswered: bool = False,
) -> ItemVerdict:
    return ItemVerdict(what, points, passed, None if passed else failure, hint, unanswered)


def _cell(items: list[ItemVerdict], error: str | None = None, unanswered: bool = False) -> CellVerdict:
    earned = sum(i.points for i in items if i.passed)
    return CellVerdict(earned, sum(i.points for i in items) or 1.0, tuple(items), error, unanswered)


def _notebook(cells: dict, seconds: float = 10.0, troubles: tuple[Trouble, ...] = ()) -> NotebookOutcome:
    return NotebookOutcome(seconds, 60.0, cells, troubles)


def _slope_failure(found: float) -> str:
    return (
        f"expected directional derivative within rtol=1e-05 of the reference; found {found:.9g}, expected 1.5, "
        f"off by {found - 1.5:.3g} where 1.5e-05 is allowed ({HINT})"
    )


def _rows(students: list[str], pending: tuple[str, ...] = ()) -> ClassTotals:
    """The gradebook's scores: each student 2/2, 1/3 and a written answer 2/2 (0/2 and pending for
    those in `pending`)."""
    totals = ClassTotals("performance-05", NOTEBOOKS, {"01-understand": 2.0, "04-exercise": 5.0})
    for student in students:
        waits = student in pending
        totals.cells += [
            CellScore(student, "01-understand", "test-a", 2.0, 2.0, False),
            CellScore(student, "04-exercise", "test-central-difference", 1.0, 3.0, False),
            CellScore(student, "04-exercise", "written-answer", 0.0 if waits else 2.0, 2.0, waits),
        ]
    return totals


def _class_of_five() -> dict[str, StudentRecord]:
    """ann and bob pass everything; cat, dan and eve are twice the slope off (each with their own value)."""
    judged = {}
    for index, student in enumerate(["ann", "bob", "cat", "dan", "eve"]):
        misses = student in {"cat", "dan", "eve"}
        slope = _item("the slope along a direction", not misses, _slope_failure(3.0 + index), HINT if misses else None)
        notebooks = {
            "01-understand": _notebook({"test-a": _cell([_item("a shape", True), _item("a value", True)])}),
            "04-exercise": _notebook(
                {"test-central-difference": _cell([_item("EPSILON is a float", True), slope])}, seconds=20.0 + index
            ),
        }
        judged[student] = StudentRecord(notebooks, dict.fromkeys(notebooks, "then"))
    return judged


def _with_item(record: StudentRecord, notebook: str, cell: str, index: int, item: ItemVerdict) -> None:
    """Replace one item of a student's judged cell."""
    items = list(record.notebooks[notebook].cells[cell].items)
    items[index] = item
    record.notebooks[notebook].cells[cell] = _cell(items)


class _Tables(HTMLParser):
    """Each table of a page by its CSV file's name (from its caption), as rows of cell text; each
    figure (an inline SVG) and whether a table follows it; the headings and tables in page order."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.images: list[dict] = []
        self.order: list[str] = []  # "h2:<heading>" and "table:<name>", as the page shows them
        self._table = self._row = self._text = None
        self._after_image = False
        self._in_svg = 0
        self._heading: list[str] | None = None
        self.followed: list[bool] = []  # for each figure: is the next element after it a table?

    def handle_starttag(self, tag, attrs):
        if self._in_svg:
            self._in_svg += tag == "svg"
            return
        if self._after_image:
            self.followed.append(tag == "table")
            self._after_image = False
        if tag == "svg":
            self.images.append(dict(attrs))
            self._in_svg = 1
        elif tag == "h2":
            self._heading = []
        elif tag == "table":
            self._table = []
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag in ("td", "th", "caption"):
            self._text = []

    def handle_endtag(self, tag):
        if self._in_svg:
            self._in_svg -= tag == "svg"
            self._after_image = not self._in_svg
            return
        if tag == "h2":
            self.order.append("h2:" + "".join(self._heading))
            self._heading = None
        elif tag in ("td", "th") and self._row is not None:
            self._row.append("".join(self._text))
            self._text = None
        elif tag == "caption":
            self._name = re.search(r"\(([\w-]+)\.csv\)$", "".join(self._text)).group(1)
            self._text = None
        elif tag == "tr" and self._row is not None:
            self._table.append(self._row)
            self._row = None
        elif tag == "table":
            self.tables[self._name] = self._table
            self.order.append("table:" + self._name)
            self._table = None

    def handle_data(self, data):
        if self._heading is not None:
            self._heading.append(data)
        if self._text is not None and not self._in_svg:
            self._text.append(data)


def _write(tmp_path: Path, judged: dict, rows: ClassTotals, href=lambda s, n: None) -> tuple[str, _Tables]:
    page = write_report(build_report("performance-05", rows, judged, href), tmp_path)
    text = page.read_text()
    tables = _Tables()
    tables.feed(text)
    return text, tables


def _csv(tmp_path: Path, name: str) -> list[dict]:
    with open(tmp_path / "report" / f"{name}.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def _page_and_files_agree(tmp_path: Path, tables: _Tables) -> None:
    for name, rows in tables.tables.items():
        with open(tmp_path / "report" / f"{name}.csv", newline="") as handle:
            written = list(csv.reader(handle))
        header, body = rows[0], rows[1:]
        assert header == written[0], name
        if len(written) == 1:  # an empty table: one row saying so on the page
            assert len(body) == 1 and len(body[0]) == 1, name
        else:
            assert body == written[1:], name


def _no_markup_escapes(text: str) -> None:
    assert "<script" not in text.lower()
    assert not re.search(r"<[^>]+\son\w+\s*=", text, re.I)  # no event handler attribute anywhere
    assert not re.search(r"""(href|src)\s*=\s*["']?\s*javascript:""", text, re.I)


def test_failures_counted_under_judge_reason(tmp_path):
    """Three of five, twice the slope off, are counted under the judge's reason."""
    judged = _class_of_five()
    text, tables = _write(tmp_path, judged, _rows(sorted(judged)))
    items = _csv(tmp_path, "items")
    assert items[0]["wording"] == "the slope along a direction"  # the most missed first
    assert (items[0]["passed"], items[0]["attempted"], items[0]["share passed"]) == ("2", "5", "0.4")
    assert {row["share passed"] for row in items[1:]} == {"1"}
    reasons = _csv(tmp_path, "failure-reasons")
    assert len(reasons) == 1
    assert reasons[0]["reason"] == reason_of(None, HINT)
    assert (reasons[0]["students"], reasons[0]["example student"]) == ("3", "cat")
    assert reasons[0]["example failure"] == _slope_failure(5.0)
    assert html.escape(HINT) in text and "the slope along a direction" in text
    assert tables.tables["failure-reasons"][1][2:5] == [reason_of(None, HINT), "3", "cat"]
    (across,) = _csv(tmp_path, "wrong-reasons")
    assert (across["reason"], across["failures"], across["students"]) == (reason_of(None, HINT), "3", "3")
    _page_and_files_agree(tmp_path, tables)


def test_figures_have_alt_text_and_tables(tmp_path):
    """Every figure has alt text and a table of its numbers and nothing runs."""
    judged = _class_of_five()
    text, tables = _write(tmp_path, judged, _rows(sorted(judged), pending=("bob",)))
    assert len(tables.images) == 4  # items, students by items, scores, time
    assert all(image["role"] == "img" and image["aria-label"] for image in tables.images)
    assert tables.followed == [True, True, True, True]
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    _no_markup_escapes(text)
    scores = {row["student"]: row for row in _csv(tmp_path, "scores")}
    # bob's written answer awaits a person: counted as it stands (0), and named as pending
    assert (scores["bob"]["total"], scores["bob"]["cells awaiting a person"]) == ("3", "1")
    assert scores["bob"]["their points at most"] == "2"
    assert (scores["ann"]["total"], scores["ann"]["of"], scores["ann"]["cells awaiting a person"]) == ("5", "7", "0")
    assert _csv(tmp_path, "pending-manual") == [
        {"notebook": "04-exercise", "cell": "written-answer", "students": "1", "who": "bob"}
    ]
    (total,) = [r for r in _csv(tmp_path, "score-distribution") if r["part"] == "total"]
    assert sum(int(v) for k, v in total.items() if k.endswith("%")) == 5
    time_rows = {row["notebook"]: row for row in _csv(tmp_path, "time")}
    assert (time_rows["04-exercise"]["least"], time_rows["04-exercise"]["median"]) == ("20", "22")
    _page_and_files_agree(tmp_path, tables)


def test_learner_text_is_escaped_never_markup(tmp_path):
    hostile = '<script>alert(1)</script><a href="javascript:alert(2)">x</a><img src=x onerror=alert(3)>'
    judged = _class_of_five()
    raised = _item("the slope along a direction", False, f"your code raised ValueError: {hostile}")
    _with_item(judged["cat"], "04-exercise", "test-central-difference", 1, raised)
    judged["cat"].flags = [
        Trouble(TroubleKind.REVIEW, f"a display update (display_id {hostile}) was refused", "04-exercise.ipynb")
    ]
    text, tables = _write(tmp_path, judged, _rows(sorted(judged)), lambda s, n: f"feedback/{s}/{n}.html")
    _no_markup_escapes(text)
    assert html.escape(hostile) in text
    reasons = {row["reason"]: row for row in _csv(tmp_path, "failure-reasons")}
    assert reasons["your code raised ValueError"]["example failure"] == f"your code raised ValueError: {hostile}"
    review = _csv(tmp_path, "needs-a-person")
    assert review[0]["feedback page"] == "feedback/cat/04-exercise.html" and hostile in review[0]["reason"]
    assert '<a href="feedback/cat/04-exercise.html">' in text
    _page_and_files_agree(tmp_path, tables)


def test_a_class_of_one(tmp_path):
    judged = {"solo": _class_of_five()["cat"]}
    text, tables = _write(tmp_path, judged, _rows(["solo"]))
    items = _csv(tmp_path, "items")
    assert (items[0]["passed"], items[0]["attempted"], items[0]["share passed"]) == ("0", "1", "0")
    assert items[0]["discrimination"] == ""  # one student separates nobody
    assert _csv(tmp_path, "failure-reasons")[0]["example student"] == "solo"
    assert len(tables.images) == 4
    _page_and_files_agree(tmp_path, tables)


def test_a_class_where_nobody_passed_an_item(tmp_path):
    judged = _class_of_five()
    for student, record in judged.items():
        value = _item("a value", False, f"expected the value: 3, found {len(student)}")
        _with_item(record, "01-understand", "test-a", 1, value)
    _, tables = _write(tmp_path, judged, _rows(sorted(judged)))
    items = _csv(tmp_path, "items")
    assert (items[0]["wording"], items[0]["passed"], items[0]["share passed"]) == ("a value", "0", "0")
    reasons = [r for r in _csv(tmp_path, "failure-reasons") if r["wording"] == "a value"]
    assert [(r["reason"], r["students"]) for r in reasons] == [("expected the value: #", "5")]
    _page_and_files_agree(tmp_path, tables)


def test_broken_and_missing_notebooks_named_and_counted_apart(tmp_path):
    """A notebook that broke while graded, one not read, one not handed in and one renamed are each
    named under their kind (never guessed from their words); their items count as not checked or
    not attempted, never as wrong."""
    judged = _class_of_five()
    # The words do not decide the kind: each says something another kind would.
    past = Trouble(TroubleKind.TIME_BUDGET, "it ran past its time limit, in cell 7", "04-exercise.ipynb", 6)
    judged["dan"].notebooks["04-exercise"] = _notebook(
        {"test-central-difference": _cell([], error="this cell's checks did not run: the kernel died, in cell 7")},
        seconds=60.5,
        troubles=(past,),
    )
    judged["dan"].troubles = [past]
    del judged["eve"].notebooks["04-exercise"]
    judged["eve"].troubles = [
        Trouble(TroubleKind.UNREADABLE, "not past any limit: not JSON; graded 0", "04-exercise.ipynb")
    ]
    del judged["bob"].notebooks["04-exercise"]
    judged["bob"].troubles = [
        Trouble(TroubleKind.MISSING, "not handed in; graded 0", "04-exercise.ipynb"),
        Trouble(TroubleKind.RENAMED, "not a notebook of the assignment; not graded", "04-exercise (1).ipynb"),
    ]
    judged["ann"].troubles = [Trouble(TroubleKind.LIMIT, "it used more memory than its budget", "01-understand.ipynb")]
    text, tables = _write(tmp_path, judged, _rows(sorted(judged)), href=lambda s, n: f"feedback/{s}/{n}.html")
    review = {(row["student"], row["notebook"], row["kind"]) for row in _csv(tmp_path, "needs-a-person")}
    assert review == {
        ("dan", "04-exercise", "time budget"),
        ("eve", "04-exercise", "unreadable"),
        ("bob", "04-exercise", "missing"),
        ("bob", "04-exercise (1)", "renamed"),
        ("ann", "01-understand", "limit"),
    }
    assert "4 student(s) named here" in text
    slope = [r for r in _csv(tmp_path, "failure-reasons") if r["wording"] == "the slope along a direction"]
    assert [(r["reason"], r["students"]) for r in slope] == [(reason_of(None, HINT), "1")]  # cat alone
    (item,) = [r for r in _csv(tmp_path, "items") if r["wording"] == "the slope along a direction"]
    assert (item["attempted"], item["passed"], item["not attempted"], item["not checked"]) == ("2", "1", "2", "1")
    apart = {row["why"]: row["items (student by item)"] for row in _csv(tmp_path, "not-attempted")}
    assert apart == {
        "notebook not handed in or not readable": "4",  # two items each of bob's and eve's 04
        "not checked (the cell's checks did not run)": "2",
    }
    assert _csv(tmp_path, "past-budget") == [
        {"student": "dan", "notebook": "04-exercise", "seconds": "60.5", "budget (seconds)": "60"}
    ]
    _page_and_files_agree(tmp_path, tables)


def test_first_screen_is_what_was_got_wrong(tmp_path):
    """The page opens with the attempted-and-wrong reasons, with counts, across items; the not
    attempted (an answer left as released, a name never defined) are counted apart, by kind."""
    judged = _class_of_five()
    judged["bob"].notebooks["04-exercise"].cells["test-central-difference"] = _cell(
        [
            _item("EPSILON is a float", False, UNANSWERED, unanswered=True),
            _item("the slope along a direction", False, UNANSWERED, unanswered=True),
        ]
    )
    # ann's cell could not run at all: a name her notebook never defined
    judged["ann"].notebooks["04-exercise"].cells["test-central-difference"] = _cell(
        [], error="the checks could not run: NameError: name 'EPSILON' is not defined", unanswered=True
    )
    # and one item a reason's words alone would call unanswered, though the checks did not say so
    _with_item(judged["cat"], "01-understand", "test-a", 1, _item("a value", False, UNANSWERED))
    text, tables = _write(tmp_path, judged, _rows(sorted(judged)))
    assert tables.order[:3] == ["h2:What the class got wrong", "table:wrong-reasons", "table:not-attempted"]
    assert text.index("wrong-reasons.csv") < text.index("items.csv")
    wrong = {row["reason"]: (row["failures"], row["students"]) for row in _csv(tmp_path, "wrong-reasons")}
    assert wrong == {reason_of(None, HINT): ("3", "3"), reason_of(UNANSWERED): ("1", "1")}  # cat's by kind: wrong
    apart = {row["why"]: (row["items (student by item)"], row["students"]) for row in _csv(tmp_path, "not-attempted")}
    assert apart == {"not answered (the answer left as released)": ("4", "2")}
    slope = next(r for r in _csv(tmp_path, "items") if r["wording"] == "the slope along a direction")
    # shares over those who attempted: bob and ann did not
    assert (slope["attempted"], slope["passed"], slope["share passed"], slope["not attempted"]) == ("3", "0", "0", "2")
    codes = {row["student"]: row for row in _csv(tmp_path, "students-by-items")}
    assert codes["bob"]["04-exercise test-central-difference #2"] == "-"
    assert codes["cat"]["04-exercise test-central-difference #2"] == "x"
    assert codes["dan"]["01-understand test-a #1"] == "P"
    _page_and_files_agree(tmp_path, tables)


def test_discrimination_is_point_biserial_among_attempts(tmp_path):
    """Discrimination: the correlation between passing an item and the points on the other items,
    among those who attempted it (checked against statistics.correlation)."""
    others = ["o1", "o2", "o3", "o4"]
    passes = {  # student: (passes the item?, how many of the four other items they pass)
        "s1": (True, 4),
        "s2": (True, 3),
        "s3": (False, 3),
        "s4": (True, 1),
        "s5": (False, 0),
        "s6": (False, 1),
    }
    judged = {}
    for student, (ok, rest) in passes.items():
        items = [_item("the item", ok, None if ok else "expected 1, found 2")]
        items += [_item(name, i < rest, None if i < rest else "expected 1, found 2") for i, name in enumerate(others)]
        judged[student] = StudentRecord({"01-understand": _notebook({"test-a": _cell(items)})})
    # s7 did not attempt it: not counted
    unanswered = _item("the item", False, UNANSWERED, unanswered=True)
    judged["s7"] = StudentRecord({"01-understand": _notebook({"test-a": _cell([unanswered])})})
    _write(tmp_path, judged, _rows(sorted(judged)))
    row = next(r for r in _csv(tmp_path, "items") if r["wording"] == "the item")
    expected = statistics.correlation([float(ok) for ok, _ in passes.values()], [float(r) for _, r in passes.values()])
    assert float(row["discrimination"]) == pytest.approx(expected, abs=0.005)
    assert row["attempted"] == "6"


def test_items_failed_together(tmp_path):
    """The pairs of items the same students got wrong, most often first."""
    judged = _class_of_five()
    for student in ("cat", "dan", "eve"):
        _with_item(judged[student], "01-understand", "test-a", 1, _item("a value", False, "expected 3, found 4"))
    _with_item(judged["cat"], "01-understand", "test-a", 0, _item("a shape", False, "expected (2,)"))
    _write(tmp_path, judged, _rows(sorted(judged)))
    together = _csv(tmp_path, "failed-together")
    assert together[0] == {
        "item": "01-understand test-a #2",
        "and item": "04-exercise test-central-difference #2",
        "students wrong on both": "3",
        "of those who attempted both": "5",
    }
    assert len(together) == 1  # the shape went wrong for cat alone


def test_record_not_graded_replaces_a_stale_notebook(tmp_path):
    """Under nbgrader autograde, a notebook not graded now (unreadable) loses its earlier outcome,
    and the notebooks not graded replace the earlier ones, the other troubles kept."""
    record = _notebook({"test-a": _cell([_item("a value", True)])})
    record_notebook(tmp_path, "ann", "01-understand", record, [])
    limit = Trouble(TroubleKind.LIMIT, "too much memory", "04-exercise.ipynb")
    record_notebook(tmp_path, "ann", "04-exercise", dataclasses.replace(record, troubles=(limit,)), [])
    record_not_graded(tmp_path, "ann", [Trouble(TroubleKind.MISSING, "not handed in; graded 0", "05-evidence.ipynb")])
    now = [Trouble(TroubleKind.UNREADABLE, "not JSON; graded 0", "04-exercise.ipynb")]
    record_not_graded(tmp_path, "ann", now)
    kept = read_judged(tmp_path)["ann"]
    assert sorted(kept.notebooks) == ["01-understand"]
    assert kept.previous["04-exercise"].cells == record.cells
    assert kept.troubles == [limit, *now]


def test_student_ids_and_wordings_are_text_in_figures(tmp_path):
    """A figure draws an id or a wording as text, never markup."""
    hostile = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    judged = {hostile: _class_of_five()["cat"]}
    text, tables = _write(tmp_path, judged, _rows([hostile]))
    _no_markup_escapes(text)
    assert html.escape(hostile, quote=True) in text


def test_the_judge_seed_is_on_the_page(tmp_path):
    """The report names the judge's seed of the run (or of each notebook) that graded the class."""
    judged = _class_of_five()
    judged["ann"].judge_seed = 1234
    bob = judged["bob"].notebooks
    bob["01-understand"] = dataclasses.replace(bob["01-understand"], judge_seed=99)
    text, _ = _write(tmp_path, judged, _rows(sorted(judged)))
    assert "Judge seeds: 99, 1234 (grading again with the same seed" in text


def test_ungraded_class_still_gives_page(tmp_path):
    """A class with nobody graded yet still gives a page."""
    text, tables = _write(tmp_path, {}, _rows([]))
    assert "Nobody is graded" in text and not tables.images
    _page_and_files_agree(tmp_path, tables)


@pytest.mark.parametrize(
    "failure, hint, reason",
    [
        (_slope_failure(3.0), HINT, HINT),
        (
            "expected each sample (seconds) below 0.0123, found 0.5 (number 3 of 7)",
            None,
            "expected each sample (seconds) below #",
        ),
        (
            "expected values within rtol=1e-05 of the reference (3 of 4 entries are outside); entry 0 of 4: found 1",
            None,
            "expected values within rtol=# of the reference (# of # entries are outside)",
        ),
        ("your code raised ValueError: [learner's text: nope]", None, "your code raised ValueError"),
        (
            "your code raised RuntimeError: your program could not be rebuilt by the grader: [learner's text: x]",
            None,
            "your code raised RuntimeError: your program could not be rebuilt by the grader",
        ),
        (
            "your code raised TypeError: unsupported operand type(s) for +: 'int' and 'str'",
            None,
            "your code raised TypeError",
        ),
        (
            "not answered yet: the answer cell still raises NotImplementedError",
            None,
            "not answered yet: the answer cell still raises NotImplementedError",
        ),
        ("expected float32 values as numbers, found str", None, "expected float32 values as numbers"),
        (
            "the first call took 0.53 s: make it the untimed warm-up",
            None,
            "the first call took # s: make it the untimed warm-up",
        ),
    ],
)
def test_reason_key_drops_learner_values(failure, hint, reason):
    """The reason key is the judge's wording without the learner's values."""
    assert reason_of(failure, hint) == reason


def test_item_hint_kept_only_for_own_failure():
    """The judge keeps each item's hint only when the failure is that judgment's."""
    judgment = {"kind": "close", "what": "slope", "hint": HINT}
    items = [
        {"points": 1, "what": "passes", "judgments": [judgment], "failure": None},
        {"points": 2, "what": "off", "judgments": [judgment], "failure": f"expected slope ... ({HINT})"},
        {"points": 1, "what": "raised", "judgments": [judgment], "failure": "your code raised TypeError: no"},
    ]
    kept = item_records(items)
    assert [(k.passed, k.hint, k.points) for k in kept] == [
        (True, None, 1.0),
        (False, HINT, 2.0),
        (False, None, 1.0),
    ]


def test_regrade_shows_changes_and_for_whom(tmp_path):
    """A regrade shows what changed and for whom."""
    judged = _class_of_five()
    first = {f"{nb}.ipynb": data for nb, data in judged["cat"].notebooks.items()}
    write_judged(tmp_path, "cat", first, [], [])
    fixed = dict(first)
    fixed["04-exercise.ipynb"] = _notebook(
        {
            "test-central-difference": _cell(
                [_item("EPSILON is a float", True), _item("the slope along a direction", True)]
            )
        }
    )
    write_judged(tmp_path, "cat", fixed, [], [])
    write_judged(tmp_path, "ann", {f"{nb}.ipynb": d for nb, d in judged["ann"].notebooks.items()}, [], [])
    _, tables = _write(tmp_path, read_judged(tmp_path), _rows(["ann", "cat"]))
    changes = _csv(tmp_path, "changes")
    assert [(c["student"], c["notebook"], c["points before"], c["points after"]) for c in changes] == [
        ("cat", "04-exercise", "1", "2")
    ]
    assert changes[0]["now passed"] == "test-central-difference: the slope along a direction"
    assert changes[0]["now failed"] == ""
    _page_and_files_agree(tmp_path, tables)


def test_autograde_keeps_one_notebook_at_a_time(tmp_path):
    """nbgrader autograde keeps one notebook at a time."""
    first, name = "01-understand", "01-understand.ipynb"
    trouble = Trouble(TroubleKind.CELL_TIMEOUT, "a trouble", name, 3)
    record = _notebook(
        {"test-a": _cell([_item("a value", False, "expected the value: 3, found 4")])}, troubles=(trouble,)
    )
    record_notebook(tmp_path, "ann", first, record, [Trouble(TroubleKind.REVIEW, "a finding", name)])
    record_notebook(tmp_path, "ann", "04-exercise", _notebook({}), [])
    again = _notebook({"test-a": _cell([_item("a value", True)])})
    record_notebook(tmp_path, "ann", first, again, [Trouble(TroubleKind.REVIEW, "another finding", name)])
    kept = read_judged(tmp_path)["ann"]
    assert sorted(kept.notebooks) == [first, "04-exercise"]
    assert kept.previous[first] == record and kept.notebooks[first] == again
    assert kept.troubles == [] and kept.flags == [Trouble(TroubleKind.REVIEW, "another finding", name)]


def test_kept_record_of_another_layout_counts_as_none(tmp_path):
    """A record written by an earlier grader (its troubles as words) is read as none, not misread."""
    (tmp_path / "judged").mkdir()
    (tmp_path / "judged" / "ann.json").write_text('{"notebooks": {}, "broken": ["01.ipynb: time limit"]}')
    write_judged(tmp_path, "bob", {"01-understand.ipynb": _notebook({})}, [], [])
    assert sorted(read_judged(tmp_path)) == ["bob"]


def test_report_links_existing_feedback(tmp_path):
    """The report reads the class gradebook and links feedback that exists."""
    from nbgrader.api import Gradebook

    from autograder.gradebook.class_gradebook import quiet_gradebook_warnings
    from autograder.upstream.nbgrader import fast_schema_stamp

    quiet_gradebook_warnings()
    fast_schema_stamp()
    db = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(db) as gb:
        gb.add_assignment("performance-05")
        for nb in NOTEBOOKS:
            gb.add_notebook(nb, "performance-05")
        gb.add_grade_cell("test-a", "01-understand", "performance-05", max_score=2, cell_type="code")
        gb.add_grade_cell("test-central-difference", "04-exercise", "performance-05", max_score=3, cell_type="code")
        for student in ("ann", "cat"):
            gb.add_student(student)
            gb.add_submission("performance-05", student)
            for grade_id, nb, score in (
                ("test-central-difference", "04-exercise", 3.0 if student == "ann" else 1.0),
                ("test-a", "01-understand", 2.0),
            ):
                grade = gb.find_grade(grade_id, nb, "performance-05", student)
                grade.auto_score, grade.needs_manual_grade = score, False
        gb.db.commit()
    judged = _class_of_five()
    flags = {"ann": [], "cat": [Trouble(TroubleKind.REVIEW, "imports ctypes", "04-exercise.ipynb")]}
    for student in ("ann", "cat"):
        notebooks = {f"{nb}.ipynb": d for nb, d in judged[student].notebooks.items()}
        write_judged(tmp_path, student, notebooks, [], flags[student])
    (tmp_path / "feedback" / "cat").mkdir(parents=True)
    (tmp_path / "feedback" / "cat" / "04-exercise.html").write_text("<html></html>")
    page = write_class_report(tmp_path, db, "performance-05", lambda s, n: tmp_path / "feedback" / s / f"{n}.html")
    assert page == tmp_path / "report.html"
    scores = {row["student"]: row["total"] for row in _csv(tmp_path, "scores")}
    assert scores == {"ann": "5", "cat": "3"}
    assert _csv(tmp_path, "needs-a-person")[0]["feedback page"] == "feedback/cat/04-exercise.html"
    assert _csv(tmp_path, "failure-reasons")[0]["students"] == "1"
    assert "<script" not in render_html(build_report("x", ClassTotals("x", []), {})).lower()
