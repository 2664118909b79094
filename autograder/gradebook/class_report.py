"""The class report: what the class got wrong, first, for the instructor, after every grading run.

OUT/report.html is one page that runs nothing and fetches nothing (its figures are inline SVG,
under a Content-Security-Policy that allows no script and no request). Its first screen is the
reasons the judge gave for items the class attempted and got wrong, rolled up across items, most
common first, apart from what was not attempted. Then every judged item (its share passed among
those who attempted it, its discrimination, the items failed together), the students by items at
a glance, the scores, who needs a person, the time each notebook took, and what a regrade
changed. Each figure is followed by a table of the same numbers, and every table is also written
as OUT/report/<table>.csv: page and files are rendered from one `ClassReport`, so they cannot
disagree. `nbgrader autograde` with the grader's lines writes the same page into
COURSE/class-report/<assignment>/.

What it reads:

- the class gradebook, through gradebook/totals.py: every score as every other output counts it,
  and which cells await a person;
- OUT/judged/<student>.json (`write_judged`, `record_notebook`, `record_not_graded`: a
  `StudentRecord`): per notebook its outcome (seconds, budget, each judged cell's items as the
  judge decided them, its troubles, the judge's seed), the notebooks of the run before kept as
  `previous` for the comparison, and the student's troubles (notebooks not graded among them)
  and flags, each with its kind.

Each item of each student has an `Outcome`, decided by kind (whether it passed, whether the
checks said the answer was never given, whether the notebook was graded, whether the cell's
checks ran), never by the words of a failure; the words only name a failure's reason.
Learner text (a failure quotes the learner's values) is escaped on the page, never markup.
"""

from __future__ import annotations

import csv
import enum
import html
import itertools
import json
import logging
import math
import os
import re
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from autograder.course.outcomes import NOT_GRADED, NotebookOutcome, Trouble, TroubleKind
from autograder.course.text_safety import csv_cell
from autograder.gradebook import svg
from autograder.gradebook.totals import ClassTotals

log = logging.getLogger(__name__)

REPORT_PAGE = "report.html"
REPORT_DATA = "report"  # OUT/report/<table>.csv
JUDGED = "judged"  # OUT/judged/<student>.json

#: Nothing on the page may run or fetch: figures are inline SVG, the style is the page's own.
PAGE_POLICY = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
#: The longest reason key: past it a reason is cut (it is a group's name, not its whole story).
REASON_LENGTH = 160
#: Where a failure's text turns to what the learner's code produced: their quoted words, or the
#: value found ("..., found 2.5", "entry 3 of 8: found ...").
_LEARNER_PART = re.compile(r"\[learner's text|[,;:]?\s+found\b|[,;:]?\s*entry \(?\d")
#: The checks' words for an exception the learner's code raised: its message follows (the
#: judge's words about it first, when it has any, then the learner's text, marked).
_RAISED = re.compile(r"^(your code raised [\w.]+): ")
#: A number standing alone (not part of a name such as float32 or 2ε).
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])")


# ---------------------------------------------------------------------------------------
# What is kept of each student between runs: OUT/judged/<student>.json
# ---------------------------------------------------------------------------------------
#: The layout of a kept record: a record of another layout counts as none (the next run writes it anew).
RECORD_VERSION = 2


@dataclass
class StudentRecord:
    """What the report keeps of one student between runs: the outcome of each notebook of their
    last run (by its stem) and when it was graded, the notebooks of the run before (`previous`,
    what a regrade is compared with), their troubles and flags (typed, by notebook), and the
    judge's seed of their last `autograder grade` run (None under `nbgrader autograde`, where each
    notebook's outcome has its own)."""

    notebooks: dict[str, NotebookOutcome] = field(default_factory=dict)
    graded_at: dict[str, str] = field(default_factory=dict)
    previous: dict[str, NotebookOutcome] = field(default_factory=dict)
    troubles: list[Trouble] = field(default_factory=list)
    flags: list[Trouble] = field(default_factory=list)
    judge_seed: int | None = None

    def to_json(self) -> dict:
        return {
            "version": RECORD_VERSION,
            "notebooks": {stem: outcome.to_json() for stem, outcome in self.notebooks.items()},
            "graded_at": dict(self.graded_at),
            "previous": {stem: outcome.to_json() for stem, outcome in self.previous.items()},
            "troubles": [trouble.to_json() for trouble in self.troubles],
            "flags": [flag.to_json() for flag in self.flags],
            "judge_seed": self.judge_seed,
        }

    @classmethod
    def from_json(cls, data) -> StudentRecord | None:
        """The record of to_json's data; None when it is not one (another layout, say)."""
        if not isinstance(data, dict) or data.get("version") != RECORD_VERSION:
            return None
        try:
            return cls(
                {str(stem): NotebookOutcome.from_json(o) for stem, o in data["notebooks"].items()},
                {str(stem): str(when) for stem, when in data.get("graded_at", {}).items()},
                {str(stem): NotebookOutcome.from_json(o) for stem, o in data.get("previous", {}).items()},
                [Trouble.from_json(t) for t in data.get("troubles", [])],
                [Trouble.from_json(t) for t in data.get("flags", [])],
                None if data.get("judge_seed") is None else int(data["judge_seed"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


def judged_file(out: Path, student: str) -> Path:
    return Path(out) / JUDGED / f"{student}.json"


def read_judged(out: Path) -> dict[str, StudentRecord]:
    """Every student's kept record, by student id ({} when none was kept)."""
    found = {}
    for path in sorted((Path(out) / JUDGED).glob("*.json")):
        record = read_judged_one(out, path.stem)
        if record is not None:  # a record that cannot be read counts as none
            found[path.stem] = record
    return found


def read_judged_one(out: Path, student: str) -> StudentRecord | None:
    try:
        return StudentRecord.from_json(json.loads(judged_file(out, student).read_text()))
    except (OSError, ValueError):
        return None


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


def _stem(name: str) -> str:
    return name.removesuffix(".ipynb")


def _save(out: Path, student: str, record: StudentRecord) -> None:
    path = judged_file(out, student)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record.to_json(), indent=1, sort_keys=True))


def write_judged(
    out: Path,
    student: str,
    outcomes: dict[str, NotebookOutcome],
    troubles: list[Trouble],
    flags: list[Trouble],
    judge_seed: int | None = None,
) -> None:
    """After `autograder grade` graded a student: their notebooks' outcomes of this run (by file
    name), their troubles (notebooks not graded among them) and flags, and the run's judge seed.
    The notebooks of their last run become `previous`, what a regrade is compared with."""
    old = read_judged_one(out, student) or StudentRecord()
    when = _now()
    notebooks = {_stem(name): outcome for name, outcome in outcomes.items()}
    record = StudentRecord(notebooks, dict.fromkeys(notebooks, when), old.notebooks, troubles, flags, judge_seed)
    _save(out, student, record)


def record_notebook(out: Path, student: str, notebook: str, outcome: NotebookOutcome, flags: list[Trouble]) -> None:
    """Under `nbgrader autograde`, one notebook (its stem) at a time: its outcome replaces its last
    one (kept as `previous`), and its troubles (the outcome's) and flags replace its earlier ones."""
    record = read_judged_one(out, student) or StudentRecord()
    stem, name = _stem(notebook), f"{_stem(notebook)}.ipynb"
    if stem in record.notebooks:
        record.previous[stem] = record.notebooks[stem]
    record.notebooks[stem], record.graded_at[stem] = outcome, _now()
    others = lambda troubles: [t for t in troubles if t.notebook != name]  # noqa: E731
    record.troubles = others(record.troubles) + list(outcome.troubles)
    record.flags = others(record.flags) + list(flags)
    _save(out, student, record)


def record_not_graded(out: Path, student: str, not_graded: Iterable[Trouble]) -> None:
    """Under `nbgrader autograde`, after a student's last notebook: their notebooks not graded this
    time (intake.not_graded: unreadable, missing, renamed) replace the earlier ones. A notebook not
    graded now loses the outcome of an earlier run (kept as `previous`): its items count as not
    handed in."""
    record = read_judged_one(out, student) or StudentRecord()
    troubles = list(not_graded)
    gone = {_stem(t.notebook or "") for t in troubles if t.kind in (TroubleKind.UNREADABLE, TroubleKind.MISSING)}
    for stem in gone & set(record.notebooks):
        record.previous[stem] = record.notebooks.pop(stem)
    record.troubles = [t for t in record.troubles if t.kind not in NOT_GRADED] + troubles
    _save(out, student, record)


# ---------------------------------------------------------------------------------------
# Reasons
# ---------------------------------------------------------------------------------------
def reason_of(failure: str | None, hint: str | None = None) -> str:
    """The short key a failure is grouped by, the same for the same mistake whatever values the
    learner's code produced:

    - the judge's own diagnosis when the failing judgment gave one (its `hint`, which the failure
      ends with: "twice the slope: ...", "wait for each result before stopping the clock ...");
    - else the failure's text up to the first thing the learner's code produced: their quoted
      words (`[learner's text: ...]`) or the value found ("..., found 2.5"); for an exception
      their code raised, its name, and the judge's words about it when its message is marked
      ("your code raised RuntimeError: your program could not be rebuilt by the grader");

    then every number standing alone written `#` (a bound or a count that differs from student
    to student), and the key cut at REASON_LENGTH characters."""
    text = hint if hint else (failure or "no verdict")
    if not hint:
        match = _LEARNER_PART.search(text)
        raised = _RAISED.match(text)
        if raised and not (match and match.group().startswith("[")):
            text = raised.group(1)  # an exception's own message: the learner's code chose it
        elif match and match.start() > 0:
            text = text[: match.start()]
    text = _NUMBER.sub("#", text).strip(" ,;:")
    return text if len(text) <= REASON_LENGTH else text[: REASON_LENGTH - 3].rstrip() + "..."


# ---------------------------------------------------------------------------------------
# The report as data
# ---------------------------------------------------------------------------------------
@dataclass
class Table:
    """One table of the page, and OUT/report/<name>.csv. `links`: columns holding a relative
    address (a link on the page, the address in the file)."""

    name: str
    title: str
    columns: list[str]
    rows: list[list]
    links: tuple[str, ...] = ()
    empty: str = "none"  # what the page says instead of an empty table


@dataclass
class Figure:
    """A plot of a table's numbers (drawn from the table's own rows, as inline SVG), shown just
    before it."""

    alt: str
    svg: str
    table: Table


@dataclass
class Section:
    heading: str
    lines: list[str] = field(default_factory=list)  # plain text, escaped on the page
    blocks: list = field(default_factory=list)  # Figure or Table


@dataclass
class ClassReport:
    title: str
    sections: list[Section]
    about: list[str] = field(default_factory=list)  # lines under the title (the judge's seeds)

    def tables(self) -> list[Table]:
        return [b.table if isinstance(b, Figure) else b for s in self.sections for b in s.blocks]


def cell_text(value) -> str:
    """A table's value as both the page and the file write it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value != int(value) else f"{value:.0f}"
    return str(value)


# ---------------------------------------------------------------------------------------
# Each item of each student, by kind
# ---------------------------------------------------------------------------------------
class Outcome(enum.Enum):
    """What became of one judged item for one student."""

    PASSED = "passed"
    WRONG = "attempted and wrong"
    UNANSWERED = "not answered (the answer left as released)"
    NOT_HANDED_IN = "notebook not handed in or not readable"
    NOT_CHECKED = "not checked (the cell's checks did not run)"

    @property
    def attempted(self) -> bool:
        return self in (Outcome.PASSED, Outcome.WRONG)


#: The not attempted, counted apart from the attempted and wrong.
NOT_ATTEMPTED = (Outcome.UNANSWERED, Outcome.NOT_HANDED_IN)
#: How each outcome is drawn, and written in the students-by-items table.
PALETTE = {
    Outcome.PASSED: (svg.BLUE, "passed", "P"),
    Outcome.WRONG: (svg.RED, "attempted and wrong", "x"),
    Outcome.UNANSWERED: (svg.GREY, "not answered", "-"),
    Outcome.NOT_HANDED_IN: (svg.PALE, "notebook not handed in or not read", "."),
    Outcome.NOT_CHECKED: (svg.SAND, "not checked", "?"),
}


@dataclass(frozen=True)
class Item:
    """A judged item of the assignment: its notebook, cell and wording, where it comes in order."""

    notebook: str
    grade_id: str
    what: str
    position: tuple[int, int]  # (the cell's place in the class's order, the item's in its cell)
    points: float

    @property
    def label(self) -> str:
        return f"{self.notebook} {self.grade_id} #{self.position[1] + 1}"


@dataclass(frozen=True)
class Verdict:
    """One item of one student: its outcome, and for a wrong one the failure and its reason."""

    outcome: Outcome
    failure: str = ""
    reason: str = ""


def _items(judged: dict[str, StudentRecord], notebooks: list[str]) -> list[Item]:
    """Every judged item any student's record holds, in notebook order, then cell, then item."""
    rank = {nb: index for index, nb in enumerate(notebooks)}
    cells: dict[tuple[str, str], None] = {}
    for record in judged.values():
        for nb in sorted(record.notebooks, key=lambda n: (rank.get(n, len(rank)), n)):
            for grade_id in record.notebooks[nb].cells:
                cells.setdefault((nb, grade_id), None)
    ordered = sorted(cells, key=lambda key: (rank.get(key[0], len(rank)), key[0]))
    found: dict[tuple[str, str, str], Item] = {}
    for place, (nb, grade_id) in enumerate(ordered):
        for record in judged.values():
            outcome = record.notebooks.get(nb)
            cell = outcome.cells.get(grade_id) if outcome is not None else None
            for index, judged_item in enumerate(cell.items if cell is not None else ()):
                key = (nb, grade_id, judged_item.what)
                if key not in found or found[key].points < judged_item.points:
                    found[key] = Item(nb, grade_id, judged_item.what, (place, index), judged_item.points)
    return sorted(found.values(), key=lambda item: item.position)


def verdict(record: StudentRecord, item: Item) -> Verdict:
    """What became of `item` in one student's record, by kind: a notebook without a record was not
    handed in, not readable, or not graded; a cell whose checks did not run, or an item its cell
    does not hold, was not checked; an item the checks marked as never answered (the release's
    stub, a name never defined) was not attempted."""
    notebook = record.notebooks.get(item.notebook)
    if notebook is None:
        return Verdict(Outcome.NOT_HANDED_IN)
    cell = notebook.cells.get(item.grade_id)
    if cell is None:
        return Verdict(Outcome.NOT_CHECKED)
    found = next((i for i in cell.items if i.what == item.what), None)
    if found is None:
        return Verdict(Outcome.UNANSWERED if cell.unanswered else Outcome.NOT_CHECKED, cell.error or "")
    if found.passed:
        return Verdict(Outcome.PASSED)
    if found.unanswered:
        return Verdict(Outcome.UNANSWERED, found.failure or "")
    failure = found.failure or "no verdict"
    return Verdict(Outcome.WRONG, failure, reason_of(failure, found.hint))


@dataclass
class ClassItems:
    """Every item's verdict for every student whose record the report has."""

    items: list[Item]
    students: list[str]
    verdicts: dict[tuple[str, Item], Verdict]

    def of(self, item: Item) -> dict[str, Verdict]:
        return {student: self.verdicts[(student, item)] for student in self.students}

    def count(self, item: Item, *outcomes: Outcome) -> int:
        return sum(1 for v in self.of(item).values() if v.outcome in outcomes)

    def share_passed(self, item: Item) -> float | None:
        attempted = self.count(item, Outcome.PASSED, Outcome.WRONG)
        return self.count(item, Outcome.PASSED) / attempted if attempted else None

    def judged_points(self, student: str) -> float:
        return sum(i.points for i in self.items if self.verdicts[(student, i)].outcome is Outcome.PASSED)


def class_items(judged: dict[str, StudentRecord], notebooks: list[str]) -> ClassItems:
    items = _items(judged, notebooks)
    students = sorted(judged)
    return ClassItems(items, students, {(s, i): verdict(judged[s], i) for s in students for i in items})


def discrimination(found: ClassItems, item: Item) -> float | None:
    """How well `item` separates strong from weak, among those who attempted it: the point-biserial
    correlation between passing it (1 or 0) and the student's points on the other judged items.
    None where fewer than three attempted it, or passing or the other points do not vary."""
    pairs = []
    for student, judged in found.of(item).items():
        if judged.outcome.attempted:
            rest = found.judged_points(student) - (item.points if judged.outcome is Outcome.PASSED else 0.0)
            pairs.append((1.0 if judged.outcome is Outcome.PASSED else 0.0, rest))
    if len(pairs) < 3:
        return None
    n = len(pairs)
    passed = [rest for ok, rest in pairs if ok]
    failed = [rest for ok, rest in pairs if not ok]
    mean = sum(rest for _, rest in pairs) / n
    spread = math.sqrt(sum((rest - mean) ** 2 for _, rest in pairs) / n)
    if not passed or not failed or spread == 0:
        return None
    p = len(passed) / n
    return round((sum(passed) / len(passed) - sum(failed) / len(failed)) / spread * math.sqrt(p * (1 - p)), 2)


def failed_together(found: ClassItems, most: int = 10) -> list[list]:
    """The pairs of items most often attempted and got wrong by the same students (at least two)."""
    wrong = {
        item: {s for s, v in found.of(item).items() if v.outcome is Outcome.WRONG}
        for item in found.items
        if found.count(item, Outcome.WRONG)
    }
    attempted = {item: {s for s, v in found.of(item).items() if v.outcome.attempted} for item in wrong}
    pairs = []
    for first, second in itertools.combinations(wrong, 2):
        both = wrong[first] & wrong[second]
        if len(both) >= 2:
            pairs.append((len(both), first.label, second.label, len(attempted[first] & attempted[second])))
    pairs.sort(key=lambda pair: (-pair[0], pair[1], pair[2]))
    return [[first, second, both, of] for both, first, second, of in pairs[:most]]


# ---------------------------------------------------------------------------------------
# The sections
# ---------------------------------------------------------------------------------------
def _or(value: float | None, instead: float) -> float:
    return instead if value is None else value


def _bins(values: list[float], top: float, count: int = 10) -> list[tuple[float, float, int]]:
    """count equal bins from 0 to top (the most points there are); a value on an edge goes to the
    bin above it, the top one to the last bin."""
    top = top if top > 0 else max(values + [1.0])
    width = top / count
    counts = [0] * count
    for value in values:
        counts[min(count - 1, max(0, int(value // width)))] += 1
    return [(round(i * width, 3), round((i + 1) * width, 3), counts[i]) for i in range(count)]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    place = (len(ordered) - 1) * q
    low = int(place)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (place - low)


def _wrong_section(found: ClassItems, class_size: int) -> Section:
    """The first screen: the reasons of the attempted and wrong, across items, apart from the rest."""
    reasons: dict[str, list[tuple[str, Item, str]]] = {}
    for (student, item), judged in sorted(found.verdicts.items(), key=lambda kv: (kv[0][1].position, kv[0][0])):
        if judged.outcome is Outcome.WRONG:
            reasons.setdefault(judged.reason, []).append((student, item, judged.failure))
    rows = []
    for reason, cases in sorted(reasons.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        labels = list(dict.fromkeys(item.label for _, item, _ in cases))
        student, item, failure = cases[0]
        shown = ", ".join(labels[:4]) + (f" and {len(labels) - 4} more" if len(labels) > 4 else "")
        rows.append([reason, len(cases), len({s for s, _, _ in cases}), shown, student, failure])
    wrong = Table(
        "wrong-reasons",
        "Attempted and wrong: the judge's reasons across every item, most common first (one example each)",
        ["reason", "failures", "students", "items", "example student", "example failure"],
        rows,
        empty="no attempted item was wrong",
    )
    apart = []
    for outcome in (*NOT_ATTEMPTED, Outcome.NOT_CHECKED):
        these = [(s, i) for (s, i), v in found.verdicts.items() if v.outcome is outcome]
        if these:
            notebooks = sorted({i.notebook for _, i in these})
            apart.append([outcome.value, len(these), len({s for s, _ in these}), ", ".join(notebooks)])
    unattempted = Table(
        "not-attempted",
        "Not attempted, and not checked: counted apart from the attempted and wrong",
        ["why", "items (student by item)", "students", "notebooks"],
        apart,
    )
    counts = {outcome: 0 for outcome in Outcome}
    for judged in found.verdicts.values():
        counts[judged.outcome] += 1
    lines = [
        f"{len(found.students)} of the {class_size} student(s) in the gradebook have judged items kept; "
        f"{len(found.items)} judged items. Attempted and wrong: {counts[Outcome.WRONG]} (student by item). "
        f"Not attempted: {sum(counts[o] for o in NOT_ATTEMPTED)} ({counts[Outcome.UNANSWERED]} not answered, "
        f"{counts[Outcome.NOT_HANDED_IN]} in notebooks not handed in or not read). "
        f"Not checked: {counts[Outcome.NOT_CHECKED]}.",
    ]
    if len(found.students) < class_size:
        lines.append("The others were graded before the grader kept items, or their grading failed.")
    return Section("What the class got wrong", lines, [wrong, unattempted])


def _items_section(found: ClassItems) -> Section:
    shares = {item: found.share_passed(item) for item in found.items}
    ordered = sorted(found.items, key=lambda i: (_or(shares[i], 2.0), i.position))
    shown = {item: None if shares[item] is None else round(_or(shares[item], 0.0), 3) for item in ordered}
    item_rows = [
        [
            item.label,
            item.notebook,
            item.grade_id,
            item.what,
            found.count(item, Outcome.PASSED, Outcome.WRONG),
            found.count(item, Outcome.PASSED),
            shown[item],
            found.count(item, *NOT_ATTEMPTED),
            found.count(item, Outcome.NOT_CHECKED),
            discrimination(found, item),
        ]
        for item in ordered
    ]
    item_table = Table(
        "items",
        "Every judged item, the most missed first (shares over those who attempted it)",
        [
            "item",
            "notebook",
            "cell",
            "wording",
            "attempted",
            "passed",
            "share passed",
            "not attempted",
            "not checked",
            "discrimination",
        ],
        item_rows,
        empty="no judged item was kept (students graded before items were kept, or no judge)",
    )
    reason_rows = []
    for item in ordered:
        wrong: dict[str, list[tuple[str, str]]] = {}
        for student, judged in found.of(item).items():
            if judged.outcome is Outcome.WRONG:
                wrong.setdefault(judged.reason, []).append((student, judged.failure))
        for reason, who in sorted(wrong.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            example_student, example = min(who)
            reason_rows.append([item.label, item.what, reason, len(who), example_student, example])
    reasons = Table(
        "failure-reasons",
        "Each item's wrong answers, grouped by the judge's reason (one example each)",
        ["item", "wording", "reason", "students", "example student", "example failure"],
        reason_rows,
    )
    together = Table(
        "failed-together",
        "Items most often got wrong by the same students (pairs wrong for two or more)",
        ["item", "and item", "students wrong on both", "of those who attempted both"],
        failed_together(found),
    )
    lines = [
        "Discrimination: the point-biserial correlation, among the students who attempted the item, "
        "between passing it and their points on the other judged items: near 1 the strong pass it and the "
        "weak do not; near 0 or below it separates nobody (or the wrong way). Empty where fewer than three "
        "attempted it or nothing varies."
    ]
    blocks: list = [reasons, together]
    if item_rows:
        alt = "Bar chart: the share of those who attempted each judged item that passed it, the most missed at the top."
        labels = [item.label for item in ordered]
        figure = svg.bars(alt, labels, [shown[item] for item in ordered], "share passed, of those who attempted")
        blocks.insert(0, Figure(alt, figure, item_table))
    else:
        blocks.insert(0, item_table)
    return Section("Items", lines, blocks)


def _students_section(found: ClassItems, totals: ClassTotals) -> Section:
    students = sorted(found.students, key=lambda s: (-totals.score(s), s))
    codes = [[PALETTE[found.verdicts[(student, i)].outcome][2] for i in found.items] for student in students]
    rows = [[student, totals.score(student), *marks] for student, marks in zip(students, codes, strict=True)]
    table = Table(
        "students-by-items",
        "Each student's judged items (P passed, x attempted and wrong, - not answered, . notebook not handed in "
        "or not read, ? not checked), the highest totals first",
        ["student", "total", *[item.label for item in found.items]],
        rows,
        empty="no judged item was kept",
    )
    if not rows or not found.items:
        return Section("Students by items", [], [table])
    alt = "A grid: one row per student (the highest totals first), one square per judged item, coloured by outcome."
    palette = {code: (colour, words) for colour, words, code in PALETTE.values()}
    figure = svg.grid(alt, students, [i.label for i in found.items], codes, palette)
    return Section("Students by items", [], [Figure(alt, figure, table)])


def _scores_section(totals: ClassTotals) -> Section:
    notebooks, students = totals.notebooks, totals.students
    total_max = totals.maximum()
    table_rows = [
        [
            student,
            *[totals.score(student, nb) for nb in notebooks],
            totals.score(student),
            total_max,
            len(totals.pending(student)),
            totals.pending_points(student),
        ]
        for student in students
    ]
    parts = ["total", *notebooks]
    bins = {"total": _bins([totals.score(student) for student in students], total_max)}
    for nb in notebooks:
        bins[nb] = _bins([totals.score(student, nb) for student in students], totals.maximum(nb))
    # One row per part, one column per tenth of its points: the same bands as the histograms.
    tops = {"total": total_max, **{nb: totals.maximum(nb) for nb in notebooks}}
    distribution = Table(
        "score-distribution",
        "Students per tenth of the points (a score on a band's lower edge counts in that band, full marks in the last)",
        ["part", "points", *[f"{10 * i}-{10 * (i + 1)}%" for i in range(10)]],
        [[part, tops[part], *[count for _, _, count in bins[part]]] for part in parts],
    )
    scores = Table(
        "scores",
        "Each student's points as the gradebook counts them (cells awaiting a person counted as they stand)",
        ["student", *notebooks, "total", "of", "cells awaiting a person", "their points at most"],
        table_rows,
    )
    waiting = sum(1 for row in table_rows if row[-2])
    lines = [f"{len(students)} student(s) in the class gradebook, {total_max:g} points in all."]
    if waiting:
        lines.append(
            f"{waiting} student(s) have cells awaiting a person (a written answer, or a manual grade to check "
            "again): their totals count those cells as they stand now, as grades.csv and formgrader do."
        )
    alt = (
        "Histograms of the students' total points and of each notebook's points; the table below has the same numbers."
    )
    figure = svg.histograms(alt, [(part, bins[part]) for part in parts])
    return Section("Scores", lines, [Figure(alt, figure, distribution), scores])


def _review_section(
    judged: dict[str, StudentRecord], totals: ClassTotals, href: Callable[[str, str], str | None]
) -> Section:
    found = {
        (student, trouble.kind.value, _stem(trouble.notebook or ""), trouble.message)
        for student, record in judged.items()
        for trouble in [*record.flags, *record.troubles]
    }
    review_rows = [
        [student, notebook, kind, reason, href(student, notebook) if notebook else None]
        for student, kind, notebook, reason in sorted(found)
    ]
    review = Table(
        "needs-a-person",
        "Flagged code (review); notebooks that could not be read (unreadable), were not handed in (missing) or "
        "came under another name (renamed); notebooks that broke, hit a limit or ran past their time",
        ["student", "notebook", "kind", "reason", "feedback page"],
        review_rows,
        links=("feedback page",),
    )
    pending: dict[tuple[str, str], list[str]] = {}
    for cell in totals.pending():
        pending.setdefault((cell.notebook, cell.grade_id), []).append(cell.student)
    pending_table = Table(
        "pending-manual",
        "Cells awaiting a person (formgrader): a written answer, or a manual grade kept on a changed answer",
        ["notebook", "cell", "students", "who"],
        [[nb, cell, len(who), ", ".join(sorted(who))] for (nb, cell), who in sorted(pending.items())],
    )
    kinds: dict[str, set[str]] = {}
    for student, kind, _, _ in found:
        kinds.setdefault(kind, set()).add(student)
    named = "; ".join(f"{kind} {len(who)}" for kind, who in sorted(kinds.items()))
    lines = [
        f"{len({row[0] for row in review_rows})} student(s) named here{f' ({named})' if named else ''}; "
        f"{len(totals.pending())} cell grade(s) await a person."
    ]
    return Section("Needs a person", lines, [review, pending_table])


def _time_section(judged: dict[str, StudentRecord], notebooks: list[str]) -> Section:
    seconds: dict[str, list[float]] = {}
    over = []
    for student, record in sorted(judged.items()):
        for nb, outcome in record.notebooks.items():
            seconds.setdefault(nb, []).append(outcome.seconds)
            if outcome.past_budget:
                over.append([student, nb, outcome.seconds, outcome.budget])
    order = sorted(seconds, key=lambda n: (notebooks.index(n) if n in notebooks else 99, n))
    summary_rows, stats = [], []
    for nb in order:
        values = seconds[nb]
        q1, med, q3 = (_percentile(values, q) for q in (0.25, 0.5, 0.75))
        low, high = min(values), max(values)
        summary_rows.append([nb, len(values), round(low, 1), round(q1, 1), round(med, 1), round(q3, 1), round(high, 1)])
        stats.append({"whislo": low, "q1": q1, "med": med, "q3": q3, "whishi": high})
    summary = Table(
        "time",
        "Seconds per notebook across the class",
        ["notebook", "students", "least", "first quartile", "median", "third quartile", "most"],
        summary_rows,
        empty="no notebook's time was kept",
    )
    over_table = Table(
        "past-budget",
        "Notebooks that ran past their time budget (stopped; the checks that finished kept their points)",
        ["student", "notebook", "seconds", "budget (seconds)"],
        over,
    )
    blocks: list = [over_table]
    if summary_rows:
        alt = "Box plot of the seconds each notebook took across the class (whiskers: least and most)."
        blocks.insert(0, Figure(alt, svg.boxes(alt, order, stats), summary))
    else:
        blocks.insert(0, summary)
    return Section("Time", [], blocks)


def _passes(notebook: NotebookOutcome) -> dict[tuple[str, str], bool]:
    return {(grade_id, item.what): item.passed for grade_id, cell in notebook.cells.items() for item in cell.items}


def _earned(notebook: NotebookOutcome) -> float:
    return sum(cell.earned for cell in notebook.cells.values())


def _changes_section(judged: dict[str, StudentRecord]) -> Section:
    rows = []
    for student, record in sorted(judged.items()):
        before_all, after_all = record.previous, record.notebooks
        for nb in sorted(set(before_all) & set(after_all)):
            before, after = before_all[nb], after_all[nb]
            was, now = _passes(before), _passes(after)
            fixed = [f"{g}: {w}" for (g, w), ok in now.items() if ok and was.get((g, w)) is False]
            broke = [f"{g}: {w}" for (g, w), ok in now.items() if not ok and was.get((g, w)) is True]
            points = (_earned(before), _earned(after))
            if fixed or broke or points[0] != points[1]:
                when = record.graded_at.get(nb, "")
                rows.append([student, nb, when, points[0], points[1], "; ".join(fixed), "; ".join(broke)])
    table = Table(
        "changes",
        "What each student's last regrade changed (the judge's points; manual grades apart)",
        ["student", "notebook", "regraded at", "points before", "points after", "now passed", "now failed"],
        rows,
        empty="no regrade changed a judged item or point",
    )
    regraded = sum(1 for r in judged.values() if set(r.previous) & set(r.notebooks))
    lines = [f"{regraded} student(s) were graded again; {len({r[0] for r in rows})} of them changed."]
    return Section("Before and after", lines, [table])


def _seeds(judged: dict[str, StudentRecord]) -> list[str]:
    """The judge's seeds the records name: a run's (`autograder grade`), or each notebook's."""
    seeds = {record.judge_seed for record in judged.values() if record.judge_seed}
    seeds |= {nb.judge_seed for record in judged.values() for nb in record.notebooks.values() if nb.judge_seed}
    if not seeds:
        return []
    shown = ", ".join(str(seed) for seed in sorted(seeds)[:5]) + (" ..." if len(seeds) > 5 else "")
    return [
        f"Judge seed{'s' if len(seeds) > 1 else ''}: {shown} (grading again with the same seed, --judge-seed, "
        "gives the same inputs and messages)."
    ]


def build_report(
    assignment: str,
    totals: ClassTotals,
    judged: dict[str, StudentRecord],
    href: Callable[[str, str], str | None] = lambda student, notebook: None,
) -> ClassReport:
    """The report's data: `totals` the gradebook's (gradebook/totals.py), `judged` the kept records
    (read_judged) of the students the gradebook holds, `href` the relative address of a student's
    feedback page of a notebook (None when there is none)."""
    in_gradebook = set(totals.students)
    judged = {s: r for s, r in judged.items() if not in_gradebook or s in in_gradebook}
    found = class_items(judged, totals.notebooks)
    sections = [_wrong_section(found, len(in_gradebook)), _items_section(found), _students_section(found, totals)]
    if totals.cells:
        sections.append(_scores_section(totals))
    else:
        sections.append(Section("Scores", ["Nobody is graded in the class gradebook yet."]))
    sections += [
        _review_section(judged, totals, href),
        _time_section(judged, totals.notebooks),
        _changes_section(judged),
    ]
    return ClassReport(f"Class report: {assignment}", sections, _seeds(judged))


# ---------------------------------------------------------------------------------------
# The page and the files
# ---------------------------------------------------------------------------------------
STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:80em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.9em}
th,td{border:1px solid #bbb;padding:.25em .5em;vertical-align:top;text-align:left}
th{background:#eee} caption{text-align:left;font-weight:bold;padding:.3em 0}
td.text{max-width:40em;overflow-wrap:anywhere;white-space:pre-wrap;font-family:monospace;font-size:.9em}
figure{margin:1em 0} svg{max-width:100%;height:auto;display:block}
"""


def _cell_html(table: Table, column: str, value) -> str:
    text = cell_text(value)
    if column in table.links and text:
        return f'<td><a href="{html.escape(text, quote=True)}">{html.escape(text)}</a></td>'
    kind = ' class="text"' if isinstance(value, str) and len(value) > 40 else ""
    return f"<td{kind}>{html.escape(text)}</td>"


def _table_html(table: Table) -> str:
    caption = f"<caption>{html.escape(table.title)} ({html.escape(table.name)}.csv)</caption>"
    head = "<tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in table.columns) + "</tr>"
    if not table.rows:
        body = f'<tr><td colspan="{len(table.columns)}">{html.escape(table.empty)}</td></tr>'
    else:
        body = "".join(
            "<tr>" + "".join(_cell_html(table, c, v) for c, v in zip(table.columns, row, strict=True)) + "</tr>"
            for row in table.rows
        )
    return f"<table>{caption}<thead>{head}</thead><tbody>{body}</tbody></table>"


def render_html(report: ClassReport) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{PAGE_POLICY}">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>{html.escape(report.title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(report.title)}</h1>",
        f"<p>Written {html.escape(_now())}. The numbers of each table are in {REPORT_DATA}/&lt;table&gt;.csv.</p>",
        *[f"<p>{html.escape(line)}</p>" for line in report.about],
        "<nav><ul>"
        + "".join(f'<li><a href="#s{i}">{html.escape(s.heading)}</a></li>' for i, s in enumerate(report.sections))
        + "</ul></nav>",
    ]
    for index, section in enumerate(report.sections):
        parts.append(f'<section id="s{index}"><h2>{html.escape(section.heading)}</h2>')
        parts += [f"<p>{html.escape(line)}</p>" for line in section.lines]
        for block in section.blocks:
            if isinstance(block, Figure):  # svg.py escapes every text it draws
                parts.append(
                    f"<figure><figcaption>{html.escape(block.table.title)}</figcaption>"
                    f"{block.svg}{_table_html(block.table)}</figure>"
                )
            else:
                parts.append(_table_html(block))
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(report: ClassReport, out: Path) -> Path:
    """OUT/report.html and OUT/report/<table>.csv (a table no longer in the report is removed)."""
    out = Path(out)
    data = out / REPORT_DATA
    data.mkdir(parents=True, exist_ok=True)
    names = set()
    for table in report.tables():
        names.add(f"{table.name}.csv")
        with open(data / f"{table.name}.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(table.columns)
            writer.writerows([csv_cell(cell_text(v)) for v in row] for row in table.rows)
    for stale in data.glob("*.csv"):
        if stale.name not in names:
            stale.unlink()
    page = out / REPORT_PAGE
    page.write_text(render_html(report))
    return page


def relative_href(out: Path, page: Path) -> str | None:
    """A page's address relative to OUT, each part quoted; None when the page does not exist."""
    if not page.is_file():
        return None
    relative = os.path.relpath(page, out)
    return "/".join(urllib.parse.quote(part) for part in Path(relative).parts)


def write_class_report(out: Path, db_url: str, assignment: str, feedback: Callable[[str, str], Path]) -> Path:
    """The class report in OUT from the gradebook at db_url and OUT/judged/ (each student's
    outcomes, troubles and flags); `feedback(student, notebook)`: where that feedback page is
    (linked when it exists)."""
    from autograder.gradebook.totals import class_totals

    report = build_report(
        assignment,
        class_totals(db_url, assignment),
        read_judged(out),
        lambda student, notebook: relative_href(Path(out), feedback(student, notebook)),
    )
    return write_report(report, out)


def write_run_report(out: Path, course: Path) -> Path | None:
    """After `autograder grade` or `autograder export`: the report in OUT, the feedback pages
    linked from OUT/feedback/. A report that cannot be written is logged, never a grading
    failure (None then): every grade is already stored."""
    from autograder.course.assignment import assignment_of
    from autograder.gradebook.class_gradebook import db_url

    out = Path(out)
    try:
        return write_class_report(
            out,
            db_url(course),
            assignment_of(course).id,
            lambda student, notebook: out / "feedback" / student / f"{notebook}.html",
        )
    except Exception as error:  # the grades stand without it
        log.warning("the class report was not written: %s: %s", type(error).__name__, error)
        return None
