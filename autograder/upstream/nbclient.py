"""nbclient past its public API: a display update seen before it is applied.

A `display(..., display_id=...)` output may be updated later, from any cell, and nbclient applies
the update to every output that shares the id in one private step, `_update_display_id`, which
no public hook (`on_cell_*`, `output`) sees: an update arrives outside `output`. The grader must
see it first (an update may not rewrite the judge's verdict, and counts against the output caps).
"""

from __future__ import annotations

from nbclient import NotebookClient


class DisplayUpdateSteps(NotebookClient):
    """NotebookClient calling `on_display_update` before it applies a display update."""

    def on_display_update(self, display_id: str, msg: dict, targets: dict[int, list[int]]) -> None:
        """Before the update `msg` of `display_id` is applied to its `targets` (cell index -> the
        indices of that cell's outputs with this id; empty when none has it, and nothing is
        applied). `targets` is nbclient's own map: a cell taken out of it keeps its outputs as they
        are. May change `msg`'s content."""

    def _update_display_id(self, display_id: str, msg: dict) -> None:
        self.on_display_update(display_id, msg, self._display_id_map.get(display_id, {}))
        super()._update_display_id(display_id, msg)
