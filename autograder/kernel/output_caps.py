"""How much output one notebook may put into its autograded file, counted as it arrives.

The grader is the only place output is cut (a kernel's own code could undo any cap set inside
it). Three limits, each with its note in the cell where it bit: the bytes of one cell
(`Limits.output`), the bytes of the whole notebook, display updates counted once per output
they replace (`Limits.notebook_output`), and the number of outputs of one cell (MAX_OUTPUTS).
"""

from __future__ import annotations

import json

from nbformat.notebooknode import NotebookNode

#: The most outputs one cell keeps (a loop of a million tiny prints is cut there).
MAX_OUTPUTS = 1000
#: What a cell may print beyond its output limit before it is cut: room for the note itself.
SLACK = 64 << 10
#: What a replaced display update counts, per output it replaces.
REPLACED_UPDATE = 100


def size_of(content) -> int:
    """How many characters an output message's content would add to the notebook."""
    try:
        return len(json.dumps(content, default=str))
    except (TypeError, ValueError, RecursionError):
        return 1 << 30


def note(text: str) -> NotebookNode:
    return NotebookNode(output_type="stream", name="stdout", text=text)


class OutputCaps:
    """The output counted so far in one notebook, and what may still come in."""

    def __init__(self, cell_bytes: int, notebook_bytes: int, max_outputs: int = MAX_OUTPUTS):
        self.cell_bytes, self.notebook_bytes, self.max_outputs = cell_bytes + SLACK, notebook_bytes, max_outputs
        self.notebook = 0
        self._cells: dict[int, list[int]] = {}  # cell index -> [bytes, outputs]
        self._cut: set[int] = set()

    def admit(self, cell_index: int, content) -> str | None:
        """Count a new output of a cell; None when it is kept, else why it is not."""
        size = size_of(content)
        used = self._cells.setdefault(cell_index, [0, 0])
        past = (
            f"more than {self.cell_bytes / (1 << 20):g} MiB, the output limit of a cell"
            if used[0] + size > self.cell_bytes
            else f"past the {self.notebook_bytes / (1 << 20):g} MiB output limit of a notebook"
            if self.notebook + size > self.notebook_bytes
            else f"more than {self.max_outputs} outputs, the limit of a cell"
            if used[1] >= self.max_outputs
            else None
        )
        used[0] += size
        used[1] += 1
        if past is None:
            self.notebook += size
        return past

    def cut_note(self, cell_index: int, why: str) -> NotebookNode | None:
        """The note a cut cell gets, once; None when it has it already."""
        if cell_index in self._cut:
            return None
        self._cut.add(cell_index)
        return note(f"\n[output cut: this cell printed {why} in grading]\n")

    def admit_update(self, content: dict, targets: int) -> None:
        """Count a display update that replaces `targets` outputs (in any cell); past a limit its
        data is replaced, in place, by a line that says so."""
        size = size_of(content) * max(targets, 1)
        if size > self.cell_bytes or self.notebook + size > self.notebook_bytes:
            content["data"] = {"text/plain": f"[a display update of {size} bytes: past the output limit of grading]"}
            content["metadata"] = {}
            size = REPLACED_UPDATE * max(targets, 1)
        self.notebook += size
