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

import json
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder.course.errors import GraderError
from autograder.course.outcomes import Trouble, TroubleKind
from autograder.course.tampering import scan_notebook
from autograder.course.text_safety import console_line

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


class NotANotebook(GraderError, ValueError):
    """What a file holds cannot be graded as a notebook; the message says why, for the instructor
    (the student's notebook is graded 0, the run goes on)."""


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
        raise NotANotebook(f"not a readable notebook ({console_line(str(error).splitlines()[0], 120)})") from None
    return normalized(parsed)


def not_graded(notebooks: Sequence[str], handed_in: Iterable[str], unreadable: Iterable[Trouble]) -> list[Trouble]:
    """What of an assignment's `notebooks` is not graded for a student who handed in the notebook
    files `handed_in` (any name), of which those troubled in `unreadable` could not be read: the
    unreadable ones, the missing ones (MISSING), and the files under another name (RENAMED, each
    matched to a missing notebook its name starts with, when there is one). In the assignment's
    order."""
    found = [trouble for trouble in unreadable if trouble.kind is TroubleKind.UNREADABLE]
    handed = {name if name in notebooks else console_line(name) for name in handed_in}
    missing = [name for name in notebooks if name not in handed]
    found += [Trouble(TroubleKind.MISSING, "not handed in; graded 0", name) for name in missing]
    for name in sorted(handed - set(notebooks)):
        like = next((m for m in missing if name.startswith(Path(m).stem)), None)
        maybe = f" (perhaps {like}, renamed)" if like else ""
        found.append(Trouble(TroubleKind.RENAMED, f"not a notebook of the assignment{maybe}; not graded", name))
    order = {name: index for index, name in enumerate(notebooks)}
    return sorted(found, key=lambda item: (order.get(item.notebook or "", len(order)), item.notebook or ""))


#: The word that opens a notebook-not-graded line on the terminal and in nbgrader's log.
LINE_WORD = {TroubleKind.UNREADABLE: "BROKEN ", TroubleKind.MISSING: "MISSING", TroubleKind.RENAMED: "NOTE   "}


def not_graded_lines(student: str, troubles: Sequence[Trouble]) -> list[str]:
    """A student's notebooks not graded (not_graded's troubles) as lines, escaped (a name is the
    learner's to choose): one per unreadable or renamed notebook, one for all the missing ones."""
    lines = [
        f"{LINE_WORD[t.kind]} {student}: {t.line()}"
        for t in troubles
        if t.kind in (TroubleKind.UNREADABLE, TroubleKind.RENAMED)
    ]
    missing = [t.notebook or "" for t in troubles if t.kind is TroubleKind.MISSING]
    if missing:
        lines.append(f"{LINE_WORD[TroubleKind.MISSING]} {student}: {', '.join(missing)}: not handed in; graded 0")
    return [console_line(line, 1000) for line in lines]


@dataclass
class TakenIn:
    """One student's files as grading takes them: notebooks (normalized, as bytes), other files
    it keeps (timestamp.txt), each notebook left out and why (UNREADABLE), what the scan found
    (REVIEW, by notebook)."""

    notebooks: dict[str, bytes] = field(default_factory=dict)
    extra: dict[str, bytes] = field(default_factory=dict)
    broken: list[Trouble] = field(default_factory=list)
    findings: list[Trouble] = field(default_factory=list)


def take_in(files: dict[str, Path], shipped: tuple[str, ...] = ()) -> TakenIn:
    """Read, normalize and scan one student's files (`shipped`: the names of the assignment's shipped
    files, for the scan); never raises (a failure is a broken line)."""
    taken = TakenIn()
    for name, path in files.items():
        try:
            data = Path(path).read_bytes()
            if not name.endswith(".ipynb"):
                taken.extra[name] = data[:4096]
                continue
            notebook = read_notebook(data)
            taken.notebooks[name] = nbformat.writes(notebook).encode()
        except NotANotebook as why:
            taken.broken.append(Trouble(TroubleKind.UNREADABLE, f"{why}; graded 0", console_line(name)))
            continue  # nothing of it to scan
        except Exception as error:  # anything else about this file: its notebook alone loses
            taken.notebooks.pop(name, None)
            said = f"the grader could not take it in ({type(error).__name__}: {console_line(error, 200)}); graded 0"
            taken.broken.append(Trouble(TroubleKind.UNREADABLE, said, console_line(name)))
            continue
        try:  # for review only: a scan that fails costs no point
            findings = scan_notebook(notebook, shipped)
        except Exception as error:
            findings = [f"the scan could not read this notebook ({type(error).__name__}): look at it yourself"]
        taken.findings += [Trouble(TroubleKind.REVIEW, console_line(finding), name) for finding in findings]
    return taken
