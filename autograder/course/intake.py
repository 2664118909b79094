"""A student's files, taken in: read, put in order, scanned; whatever they hold, nothing raises.

Everything the grader's own process does with a submission before it goes to a worker happens
here, for one student at a time, under one guard (`take_in`): reading each notebook, putting
its JSON in a shape every later step can rely on (`normalized`), and the static scan for review
(autograder/course/tampering.py). A notebook that cannot be taken in is left out with one line naming
it and why (it scores 0); any other failure of these steps is that student's alone, named the
same way; the rest of the class is graded all the same.

`normalized` keeps what grading needs and nothing a later step could trip on: a list of cells,
each a code, markdown or raw cell with text as its source, a dict as its metadata (nbgrader's a
dict too, or none), a unique valid id; code cells' outputs go (grading clears them anyway).
"""

from __future__ import annotations

import enum
import json
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder.course.tampering import scan_notebook

#: The largest notebook file taken in (a bigger one is left out, named).
MAX_NOTEBOOK_BYTES = 32 << 20
#: The most cells a notebook may have (grading time is bounded apart, per notebook).
MAX_CELLS = 5000
#: The longest source kept for one cell (the rest is cut).
MAX_SOURCE = 1 << 20
#: The most source a notebook's cells may hold together: the scan and the pages read every
#: character of it in the grader's own process (the lesson's largest notebook holds under 100 KB).
MAX_NOTEBOOK_SOURCE = 1 << 20
CELL_TYPES = ("code", "markdown", "raw")
_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
#: Control characters (but tab) that a terminal would act on, line breaks among them.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


class NotANotebook(ValueError):
    """What a file holds cannot be graded as a notebook; the message says why, for the instructor."""


def printable(text, limit: int = 300) -> str:
    """Text from a submission as one safe console line: control characters (escape sequences,
    carriage returns, bidirectional overrides) written as escapes, and cut at `limit`."""
    text = str(text)
    text = _CONTROL.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), text)
    return text if len(text) <= limit else text[:limit] + "..."


def _text(value) -> str:
    if isinstance(value, str):
        return value[:MAX_SOURCE]
    if isinstance(value, list) and all(isinstance(part, str) for part in value):
        return "".join(value)[:MAX_SOURCE]
    return ""


def _plain_json(value, depth: int = 0):
    """value if it is plain JSON no deeper than 32 levels, else None (metadata is kept only as data)."""
    if depth > 32:
        raise ValueError("metadata nested too deep")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list):
        return [_plain_json(item, depth + 1) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain_json(item, depth + 1) for key, item in value.items()}
    raise ValueError(f"metadata holds a {type(value).__name__}")


def _cell_metadata(raw) -> dict:
    """What grading reads of a cell's metadata, in the shape nbformat's schema asks: nbgrader's
    (a dict of plain JSON), tags (text), and whether it is editable or deletable."""
    if not isinstance(raw, dict):
        return {}
    kept = {}
    try:
        if isinstance(raw.get("nbgrader"), dict):
            kept["nbgrader"] = _plain_json(raw["nbgrader"])
    except (ValueError, RecursionError):
        pass
    tags = raw.get("tags")
    if isinstance(tags, list) and all(isinstance(tag, str) and "," not in tag for tag in tags):
        kept["tags"] = list(dict.fromkeys(tags))
    for flag in ("editable", "deletable"):
        if isinstance(raw.get(flag), bool):
            kept[flag] = raw[flag]
    return kept


def normalized(data) -> nbformat.NotebookNode:
    """A notebook's JSON (already parsed) in the shape grading relies on; NotANotebook if no cell list."""
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise NotANotebook("not a readable notebook (it has no cell list)")
    if len(data["cells"]) > MAX_CELLS:
        raise NotANotebook(f"a notebook of {len(data['cells'])} cells (at most {MAX_CELLS} are graded)")
    cells, seen = [], set()
    for raw in data["cells"]:
        if not isinstance(raw, dict) or raw.get("cell_type") not in CELL_TYPES:
            continue  # not a cell grading knows: left out
        cell_metadata = _cell_metadata(raw.get("metadata"))
        ident = raw.get("id")
        if not isinstance(ident, str) or not _ID.match(ident) or ident in seen:
            ident = uuid.uuid4().hex[:12]
        seen.add(ident)
        source = _text(raw.get("source"))
        if raw["cell_type"] == "code":
            cell = nbformat.v4.new_code_cell(source, metadata=cell_metadata, id=ident)
        elif raw["cell_type"] == "markdown":
            cell = nbformat.v4.new_markdown_cell(source, metadata=cell_metadata, id=ident)
        else:
            cell = nbformat.v4.new_raw_cell(source, metadata=cell_metadata, id=ident)
        cells.append(cell)
    total = sum(len(cell.source) for cell in cells)
    if total > MAX_NOTEBOOK_SOURCE:
        raise NotANotebook(
            f"cells that hold {total / (1 << 20):.1f} MiB of source (at most {MAX_NOTEBOOK_SOURCE >> 20} MiB are graded)"
        )
    # The notebook's own metadata goes: nbgrader sets the kernel, nothing else is read.
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.nbformat, notebook.nbformat_minor = 4, 5
    nbformat.validate(notebook)  # what it made is a valid notebook, whatever it was given
    return notebook


def read_notebook(data: bytes) -> nbformat.NotebookNode:
    """A notebook file's bytes, parsed and normalized; NotANotebook with the reason otherwise."""
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise NotANotebook(f"a notebook file of {len(data) >> 20} MiB (at most {MAX_NOTEBOOK_BYTES >> 20} MiB)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise NotANotebook("not a notebook (the file is not UTF-8 text)") from None
    try:
        parsed = json.loads(text)
    except RecursionError:
        raise NotANotebook("not a readable notebook (its JSON is nested too deep)") from None
    except ValueError as error:
        raise NotANotebook(f"not a readable notebook ({printable(str(error).splitlines()[0], 120)})") from None
    return normalized(parsed)


class NotGradedKind(enum.StrEnum):
    """Why a notebook of the assignment was not graded for a student (it scores 0 either way)."""

    UNREADABLE = "unreadable"  # handed in, but not a notebook the grader can read
    MISSING = "missing"  # not handed in
    RENAMED = "renamed"  # a notebook handed in under a name the assignment does not have


@dataclass(frozen=True)
class NotGraded:
    """One notebook not graded for a student: its kind, the file's name as handed in (as the
    assignment names it, for a missing one) and, for an unreadable one, why; for a renamed one,
    the assignment's notebook it may be."""

    kind: NotGradedKind
    notebook: str
    detail: str = ""

    def reason(self) -> str:
        """Why, in words (without the notebook's name)."""
        if self.kind is NotGradedKind.UNREADABLE:
            return f"{self.detail}; graded 0"
        if self.kind is NotGradedKind.MISSING:
            return "not handed in; graded 0"
        maybe = f" (perhaps {self.detail}, renamed)" if self.detail else ""
        return f"not a notebook of the assignment{maybe}; not graded"

    def words(self) -> str:
        """The problem in words, for the terminal, the report and the feedback."""
        return f"{self.notebook}: {self.reason()}"

    def as_data(self) -> dict:
        return {"kind": self.kind.value, "notebook": self.notebook, "detail": self.detail}

    @classmethod
    def from_data(cls, data: dict) -> NotGraded:
        return cls(NotGradedKind(data["kind"]), str(data["notebook"]), str(data.get("detail", "")))


def not_graded(notebooks: Sequence[str], handed_in: Iterable[str], unreadable: dict[str, str]) -> list[NotGraded]:
    """What of an assignment's `notebooks` is not graded for a student who handed in the
    notebook files `handed_in` (any name), of which `unreadable` ({name: why}) could not be read:
    the unreadable ones, the missing ones, and the files under another name (each matched to a
    missing notebook its name starts with, when there is one). In the assignment's order."""
    handed = {printable(name) if name not in notebooks else name for name in handed_in}
    found = [NotGraded(NotGradedKind.UNREADABLE, printable(name), why) for name, why in sorted(unreadable.items())]
    missing = [name for name in notebooks if name not in handed]
    found += [NotGraded(NotGradedKind.MISSING, name) for name in missing]
    for name in sorted(handed - set(notebooks)):
        like = next((m for m in missing if name.startswith(Path(m).stem)), "")
        found.append(NotGraded(NotGradedKind.RENAMED, name, like))
    order = {name: index for index, name in enumerate(notebooks)}
    return sorted(found, key=lambda item: (order.get(item.notebook, len(order)), item.notebook))


#: The word that opens a problem's line on the terminal and in nbgrader's log, by kind.
LINE_WORD = {NotGradedKind.UNREADABLE: "BROKEN ", NotGradedKind.MISSING: "MISSING", NotGradedKind.RENAMED: "NOTE   "}


def not_graded_lines(student: str, items: Sequence[NotGraded]) -> list[str]:
    """A student's notebooks not graded as lines, escaped (a name is the learner's to choose): one
    per unreadable or renamed notebook, one for all the missing ones."""
    lines = [f"{LINE_WORD[i.kind]} {student}: {i.words()}" for i in items if i.kind is not NotGradedKind.MISSING]
    missing = [item.notebook for item in items if item.kind is NotGradedKind.MISSING]
    if missing:
        lines.append(f"{LINE_WORD[NotGradedKind.MISSING]} {student}: {', '.join(missing)}: not handed in; graded 0")
    return [printable(line, 1000) for line in lines]


@dataclass
class TakenIn:
    """One student's files as grading takes them: notebooks (normalized, as bytes), other files
    it keeps (timestamp.txt), each notebook left out and why (as lines, and as {name: why} in
    `unreadable`), what the scan found."""

    notebooks: dict[str, bytes] = field(default_factory=dict)
    extra: dict[str, bytes] = field(default_factory=dict)
    broken: list[str] = field(default_factory=list)
    findings: dict[str, list[str]] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)


def take_in(files: dict[str, Path]) -> TakenIn:
    """Read, normalize and scan one student's files; never raises (a failure is a broken line)."""
    taken = TakenIn()
    for name, path in files.items():
        try:
            data = Path(path).read_bytes()
            if not name.endswith(".ipynb"):
                taken.extra[name] = data[:4096]
                continue
            notebook = read_notebook(data)
            taken.notebooks[name] = nbformat.writes(notebook).encode()
        except Exception as error:  # this file's notebook alone loses: scored 0, named
            taken.notebooks.pop(name, None)
            taken.unreadable[name] = (
                str(error)
                if isinstance(error, NotANotebook)
                else f"the grader could not take it in ({type(error).__name__}: {printable(error, 200)})"
            )
            taken.broken.append(NotGraded(NotGradedKind.UNREADABLE, printable(name), taken.unreadable[name]).words())
            continue
        try:  # for review only: a scan that fails costs no point
            findings = scan_notebook(notebook)
        except Exception as error:
            findings = [f"the scan could not read this notebook ({type(error).__name__}): look at it yourself"]
        if findings:
            taken.findings[name] = [printable(finding) for finding in findings]
    return taken
