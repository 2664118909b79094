"""Submission repair: a learner's notebook made gradable whatever they did to its cells.

Three preprocessors in `Autograde.sanitize_preprocessors` (autograder/notebook/plugin.py puts them there):
MetadataFromSource first (a submission's cell metadata is the source's, whatever the submission
claims), then DeduplicateIdsCleanly and RestoreMissingCells in place of nbgrader's
DeduplicateIds and OverwriteCells, whose failures on duplicated or deleted cells would lose a
learner's whole notebook.
"""

from __future__ import annotations

import copy

import nbformat
from nbgrader.preprocessors import DeduplicateIds, NbGraderPreprocessor, OverwriteCells


class MetadataFromSource(NbGraderPreprocessor):
    """Every cell's nbgrader metadata as the source has it, whatever the submission claims.

    A cell whose grade_id the source knows gets the source's metadata back (points, graded,
    locked: a learner cannot raise points or make a cell graded); any other cell loses its
    nbgrader metadata and is an ordinary cell (a made-up graded cell, or a test cell whose id was
    changed: the real one is then restored from the source by RestoreMissingCells).
    """

    def preprocess(self, nb, resources):
        from autograder.course.assignment import assignment_source

        path = assignment_source(self.config, resources) / f"{resources['nbgrader']['notebook']}.ipynb"
        source = nbformat.read(path, as_version=4)
        by_id = {
            c.metadata["nbgrader"]["grade_id"]: c for c in source.cells if "grade_id" in c.metadata.get("nbgrader", {})
        }
        for cell in nb.cells:
            meta = cell.get("metadata", {}).get("nbgrader")
            if meta is None:
                continue
            grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
            if isinstance(grade_id, str) and grade_id in by_id:
                cell.metadata["nbgrader"] = copy.deepcopy(by_id[grade_id].metadata["nbgrader"])
            else:
                del cell.metadata["nbgrader"]
        return nb, resources


class DeduplicateIdsCleanly(DeduplicateIds):
    """nbgrader's DeduplicateIds, leaving no empty nbgrader metadata behind.

    A learner who pastes a graded cell twice gets the earlier copies turned into plain cells.
    Stock DeduplicateIds leaves `"nbgrader": {}` on them, and OverwriteCells (with
    add_missing_cells) then fails with KeyError 'grade_id', losing the whole notebook.
    """

    def preprocess_cell(self, cell, resources, cell_index):
        cell, resources = super().preprocess_cell(cell, resources, cell_index)
        if cell.metadata.get("nbgrader") == {}:
            del cell.metadata["nbgrader"]
        return cell, resources


class RestoreMissingCells(OverwriteCells):
    """nbgrader's OverwriteCells, restoring a deleted test cell even when its answer cell is gone too.

    Stock add_missing_grade_cells inserts a missing cell after the source cell just before it,
    and fails with KeyError when that one was deleted as well. Here it goes after the nearest
    earlier source cell still present (or first, when none is).
    """

    def preprocess_cell(self, cell, resources, cell_index):
        """A locked cell handed in as it was released (its hidden tests taken out, as nbgrader's
        release does) gets the source's text back without the "checksum has changed" warning
        stock nbgrader prints for every such cell of an honest class; a cell changed otherwise
        is still reported and restored."""
        from nbgrader.api import MissingEntry
        from nbgrader.preprocessors import ClearHiddenTests

        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id is not None:
            try:
                source_cell = self.gradebook.find_source_cell(grade_id, self.notebook_id, self.assignment_id)
            except MissingEntry:
                source_cell = None
            if source_cell is not None and source_cell.locked and cell.source != source_cell.source:
                # As nbgrader's release makes it: a test cell, its hidden tests taken out.
                released = nbformat.v4.new_code_cell(source_cell.source, metadata={"nbgrader": {"grade": True}})
                ClearHiddenTests(config=self.config).preprocess_cell(released, {}, 0)
                if released.source != source_cell.source and released.source == cell.source:
                    cell.source = source_cell.source
        return super().preprocess_cell(cell, resources, cell_index)

    def add_missing_grade_cells(self, nb, resources):
        source_nb = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
        order = [cell.name for cell in source_nb.source_cells]
        solution_ids = {cell.name for cell in source_nb.solution_cells}
        for grade_cell in sorted(source_nb.grade_cells, key=lambda c: order.index(c.name)):
            present = {
                cell.metadata["nbgrader"]["grade_id"]: index
                for index, cell in enumerate(nb.cells)
                if "grade_id" in cell.metadata.get("nbgrader", {})
            }
            if grade_cell.name in present:
                continue
            self.log.warning("Missing grade cell %s: restored from the source", grade_cell.name)
            source_cell = source_nb.source_cells[order.index(grade_cell.name)]
            restored = self.missing_cell_transform(
                source_cell, grade_cell.max_score, is_solution=grade_cell.name in solution_ids
            )
            earlier = [present[name] for name in order[: order.index(grade_cell.name)] if name in present]
            nb.cells.insert(max(earlier) + 1 if earlier else 0, restored)
        return nb, resources
