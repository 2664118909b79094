"""The class report: the whole class at a glance, for the instructor, after every grading run.

OUT/report.html is one page that runs nothing and fetches nothing (every figure an SVG image
inside it, drawn by the grader itself: figures.py; a Content-Security-Policy that allows no
script, no request): scores, every judged item with the
share of the class that passed it and its failures grouped by reason, who needs a person, the
time each notebook took, and what a regrade changed. Each figure is followed by a table of the
same numbers, and every table is also written as OUT/report/<table>.csv: page and files are
rendered from one `ClassReport`, so they cannot disagree.

What it reads:

- the class gradebook: every score, and which cells await a manual grade;
- OUT/judged/<student>.json (`write_judged`, `record_notebook`, a `StudentRecord`): per notebook
  its outcome (seconds, budget, each judged cell's items as the judge decided them, its troubles),
  the notebooks of the run before kept as `previous` for the comparison, and the student's
  troubles and flags, each with its kind: the report groups by kinds, never by words.

Learner text (a failure quotes the learner's values) is escaped on the page, never markup.
"""

from __future__ import annotations

import base64
import csv
import html
import json
import logging
import os
import re
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from autograder.course.outcomes import NotebookOutcome, Trouble
from autograder.gradebook import figures

log = logging.getLogger(__name__)

REPORT_PAGE = "report.html"
REPORT_DATA = "report"  # OUT/report/<table>.csv
JUDGED = "judged"  # OUT/judged/<student>.json

#: Nothing on the page may run or fetch: images are data: URLs, the style is the page's own.
PAGE_POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
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
    what a regrade is compared with), and their troubles and flags (typed, by notebook)."""

    notebooks: dict[str, NotebookOutcome] = field(default_factory=dict)
    graded_at: dict[str, str] = field(default_factory=dict)
    previous: dict[str, NotebookOutcome] = field(default_factory=dict)
    troubles: list[Trouble] = field(default_factory=list)
    flags: list[Trouble] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "version": RECORD_VERSION,
            "notebooks": {stem: outcome.to_json() for stem, outcome in self.notebooks.items()},
            "graded_at": dict(self.graded_at),
            "previous": {stem: outcome.to_json() for stem, outcome in self.previous.items()},
            "troubles": [trouble.to_json() for trouble in self.troubles],
            "flags": [flag.to_json() for flag in self.flags],
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
    out: Path, student: str, outcomes: dict[str, NotebookOutcome], troubles: list[Trouble], flags: list[Trouble]
) -> None:
    """After `autograder grade` graded a student: their notebooks' outcomes of this run (by file
    name), their troubles and flags. The notebooks of their last run become `previous`, what a
    regrade is compared with."""
    old = read_judged_one(out, student) or StudentRecord()
    when = _now()
    notebooks = {_stem(name): outcome for name, outcome in outcomes.items()}
    _save(out, student, StudentRecord(notebooks, dict.fromkeys(notebooks, when), old.notebooks, troubles, flags))


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
    """A plot of a table's numbers (drawn from the table's own rows, as SVG: figures.py), shown
    just before it."""

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
# Reading the gradebook
# ---------------------------------------------------------------------------------------
def gradebook_scores(db_url: str, assignment: str) -> tuple[list[str], list[dict]]:
    """(the assignment's notebooks, one row per graded cell of each student with a submission:
    student_id, notebook, grade_id, score (None while it awaits a manual grade), max_score)."""
    from nbgrader.api import Gradebook, MissingEntry

    rows = []
    with Gradebook(db_url) as gb:
        try:
            stored = gb.find_assignment(assignment)
        except MissingEntry:
            return [], []
        notebooks = sorted(nb.name for nb in stored.notebooks)
        for submission in sorted(stored.submissions, key=lambda s: s.student.id):
            for notebook in sorted(submission.notebooks, key=lambda n: n.name):
                for grade in notebook.grades:
                    rows.append(
                        {
                            "student_id": submission.student.id,
                            "notebook": notebook.name,
                            "grade_id": grade.name,
                            "score": None if grade.needs_manual_grade else float(grade.score),
                            "max_score": float(grade.max_score),
                        }
                    )
    return notebooks, rows


# ---------------------------------------------------------------------------------------
# Building the report
# ---------------------------------------------------------------------------------------
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


def _scores_section(notebooks: list[str], rows: list[dict]) -> Section:
    students = sorted({r["student_id"] for r in rows})
    got: dict[tuple[str, str], float] = {}
    cells = {(row["notebook"], row["grade_id"]): row["max_score"] for row in rows}
    maximum: dict[str, float] = {}
    for (nb, _), points in cells.items():
        maximum[nb] = maximum.get(nb, 0.0) + points
    pending: dict[str, float] = {}
    for row in rows:
        key = (row["student_id"], row["notebook"])
        got[key] = got.get(key, 0.0) + (row["score"] or 0.0)
        if row["score"] is None:
            pending[row["student_id"]] = pending.get(row["student_id"], 0.0) + row["max_score"]
    total_max = sum(maximum.get(nb, 0.0) for nb in notebooks)
    table_rows = []
    for student in students:
        points = [got.get((student, nb), 0.0) for nb in notebooks]
        table_rows.append([student, *points, sum(points), total_max, pending.get(student, 0.0)])
    parts = ["total", *notebooks]
    bins = {"total": _bins([r[-3] for r in table_rows], total_max)}
    for index, nb in enumerate(notebooks):
        bins[nb] = _bins([r[1 + index] for r in table_rows], maximum.get(nb, 0.0))
    # One row per part, one column per tenth of its points: the same bands as the histograms.
    tops = {"total": total_max, **{nb: maximum.get(nb, 0.0) for nb in notebooks}}
    distribution = Table(
        "score-distribution",
        "Students per tenth of the points (manual points awaiting a grade not counted; "
        "a score on a band's lower edge counts in that band, full marks in the last)",
        ["part", "points", *[f"{10 * i}-{10 * (i + 1)}%" for i in range(10)]],
        [[part, tops[part], *[count for _, _, count in bins[part]]] for part in parts],
    )
    scores = Table(
        "scores",
        "Each student's points (manual points awaiting a grade shown apart, not in the total)",
        ["student", *notebooks, "total", "of", "awaiting manual grading (points)"],
        table_rows,
    )
    waiting = sum(1 for r in table_rows if r[-1])
    lines = [f"{len(students)} student(s) in the class gradebook, {total_max:g} points in all."]
    if waiting:
        lines.append(
            f"{waiting} student(s) have cells awaiting a manual grade: those points are shown apart "
            "and not counted until a person grades them."
        )
    alt = (
        "Histograms of the students' total points and of each notebook's points; the table below has the same numbers."
    )
    return Section("Scores", lines, [Figure(alt, figures.histograms(parts, bins), distribution), scores])


def _cell_order(judged: dict[str, StudentRecord], notebooks: list[str]) -> list[tuple[str, str]]:
    """(notebook, grade_id) of every judged cell in the class, in notebook order, then first seen."""
    seen: dict[tuple[str, str], None] = {}
    for record in judged.values():
        for nb in sorted(record.notebooks, key=lambda n: (notebooks.index(n) if n in notebooks else 99, n)):
            for grade_id in record.notebooks[nb].cells:
                seen.setdefault((nb, grade_id), None)
    return sorted(seen, key=lambda k: (notebooks.index(k[0]) if k[0] in notebooks else 99, k[0]))


def _items_section(judged: dict[str, StudentRecord], notebooks: list[str], class_size: int) -> Section:
    cells = _cell_order(judged, notebooks)
    items: dict[tuple[str, str, str], dict] = {}  # (notebook, grade_id, wording) -> its tally
    for nb, grade_id in cells:
        for record in judged.values():
            outcome = record.notebooks.get(nb)
            cell = outcome.cells.get(grade_id) if outcome is not None else None
            for index, item in enumerate(cell.items if cell else ()):
                items.setdefault((nb, grade_id, item.what), {"order": (cells.index((nb, grade_id)), index)})
    for key, tally in items.items():
        nb, grade_id, what = key
        tally.update(passed=0, reasons={}, points=0.0)
        for student in sorted(judged):
            notebook = judged[student].notebooks.get(nb)
            cell = notebook.cells.get(grade_id) if notebook is not None else None
            found = next((i for i in (cell.items if cell else ()) if i.what == what), None)
            if found is not None and found.passed:
                tally["passed"] += 1
                continue
            if found is not None:
                tally["points"] = max(tally["points"], found.points)
                failure, reason = found.failure, reason_of(found.failure, found.hint)
            elif cell is not None and cell.error:
                failure, reason = cell.error, reason_of(cell.error)
            elif notebook is None:
                failure = reason = "no verdict: this notebook was not handed in or not graded"
            else:
                failure = reason = "no verdict: this check did not run"
            tally["reasons"].setdefault(reason, []).append((student, failure))
    students = len(judged)
    ordered = sorted(items.items(), key=lambda kv: (kv[1]["passed"] / max(1, students), kv[1]["order"]))
    labels = [f"{nb} {grade_id} #{tally['order'][1] + 1}" for (nb, grade_id, _), tally in ordered]
    item_rows = [
        [label, nb, grade_id, what, tally["passed"], students, round(tally["passed"] / max(1, students), 3)]
        for label, ((nb, grade_id, what), tally) in zip(labels, ordered, strict=True)
    ]
    item_table = Table(
        "items",
        "Every judged item, the most missed first",
        ["item", "notebook", "cell", "wording", "passed", "of", "share passed"],
        item_rows,
        empty="no judged item was kept (students graded before items were kept, or no judge)",
    )
    reason_rows = []
    for label, ((_, _, what), tally) in zip(labels, ordered, strict=True):
        for reason, who in sorted(tally["reasons"].items(), key=lambda kv: (-len(kv[1]), kv[0])):
            example_student, example = min(who)
            reason_rows.append([label, what, reason, len(who), example_student, example])
    reasons = Table(
        "failure-reasons",
        "Failures of each item, grouped by the judge's reason (one example each)",
        ["item", "wording", "reason", "students", "example student", "example failure"],
        reason_rows,
    )
    lines = [f"Items kept for {students} of the {class_size} student(s) in the class gradebook."]
    if students < class_size:
        lines.append("The others were graded before the grader kept items, or their grading failed.")
    blocks: list = [reasons]
    if item_rows:
        alt = "Bar chart: the share of the class that passed each judged item, the most missed at the top."
        blocks.insert(0, Figure(alt, figures.share_bars(labels, [row[-1] for row in item_rows]), item_table))
    else:
        blocks.insert(0, item_table)
    return Section("Items", lines, blocks)


def _review_section(
    judged: dict[str, StudentRecord], rows: list[dict], href: Callable[[str, str], str | None]
) -> Section:
    found = {
        (student, _stem(trouble.notebook or ""), trouble.kind.value, trouble.message)
        for student, record in judged.items()
        for trouble in [*record.flags, *record.troubles]
    }
    review_rows = [
        [student, notebook, kind, reason, href(student, notebook) if notebook else None]
        for student, notebook, kind, reason in sorted(found)
    ]
    review = Table(
        "needs-a-person",
        "Flagged submissions: review (code that may tamper with grading), broken parts, limits and budgets hit",
        ["student", "notebook", "kind", "reason", "feedback page"],
        review_rows,
        links=("feedback page",),
    )
    pending: dict[tuple[str, str], list] = {}
    for row in rows:
        if row["score"] is None:
            pending.setdefault((row["notebook"], row["grade_id"]), []).append(row["student_id"])
    pending_table = Table(
        "pending-manual",
        "Cells awaiting a manual grade (formgrader)",
        ["notebook", "cell", "students", "who"],
        [[nb, cell, len(who), ", ".join(sorted(who))] for (nb, cell), who in sorted(pending.items())],
    )
    lines = [
        f"{len({r[0] for r in review_rows})} student(s) flagged; "
        f"{sum(len(w) for w in pending.values())} cell grade(s) await a person."
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
        stats.append({"label": nb, "whislo": low, "q1": q1, "med": med, "q3": q3, "whishi": high, "fliers": []})
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
        blocks.insert(0, Figure(alt, figures.boxes(order, stats), summary))
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


def build_report(
    assignment: str,
    notebooks: list[str],
    rows: list[dict],
    judged: dict[str, StudentRecord],
    href: Callable[[str, str], str | None] = lambda student, notebook: None,
) -> ClassReport:
    """The report's data: `rows` the gradebook's (gradebook_scores), `judged` the kept records
    (read_judged) of the students the gradebook holds, `href` the relative address of a
    student's feedback page of a notebook (None when there is none)."""
    class_size = len({r["student_id"] for r in rows})
    judged = {s: r for s, r in judged.items() if not rows or any(row["student_id"] == s for row in rows)}
    sections = []
    if rows:
        sections.append(_scores_section(notebooks, rows))
    else:
        sections.append(Section("Scores", ["Nobody is graded in the class gradebook yet."]))
    sections += [
        _items_section(judged, notebooks, class_size),
        _review_section(judged, rows, href),
        _time_section(judged, notebooks),
        _changes_section(judged),
    ]
    return ClassReport(f"Class report: {assignment}", sections)


# ---------------------------------------------------------------------------------------
# The page and the files
# ---------------------------------------------------------------------------------------
STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:80em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em;font-size:.9em}
th,td{border:1px solid #bbb;padding:.25em .5em;vertical-align:top;text-align:left}
th{background:#eee} caption{text-align:left;font-weight:bold;padding:.3em 0}
td.text{max-width:40em;overflow-wrap:anywhere;white-space:pre-wrap;font-family:monospace;font-size:.9em}
figure{margin:1em 0} img{max-width:100%;display:block}
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
        "<nav><ul>"
        + "".join(f'<li><a href="#s{i}">{html.escape(s.heading)}</a></li>' for i, s in enumerate(report.sections))
        + "</ul></nav>",
    ]
    for index, section in enumerate(report.sections):
        parts.append(f'<section id="s{index}"><h2>{html.escape(section.heading)}</h2>')
        parts += [f"<p>{html.escape(line)}</p>" for line in section.lines]
        for block in section.blocks:
            if isinstance(block, Figure):
                data = base64.b64encode(block.svg.encode()).decode("ascii")
                parts.append(
                    f"<figure><figcaption>{html.escape(block.table.title)}</figcaption>"
                    f'<img src="data:image/svg+xml;base64,{data}" alt="{html.escape(block.alt, quote=True)}">'
                    f"{_table_html(block.table)}</figure>"
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
            writer.writerows([cell_text(v) for v in row] for row in table.rows)
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
    notebooks, rows = gradebook_scores(db_url, assignment)
    report = build_report(
        assignment,
        notebooks,
        rows,
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
