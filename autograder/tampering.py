"""A static scan of learners' code for attempts to tamper with grading.

The scan flags a submission for an instructor to review; it never changes a score (plenty of
honest code mentions `builtins`). What it looks for: replacing IPython's error display,
reaching into sys.modules or builtins, rebinding attributes of numpy, jax, remat_lesson or
Checks, and reading the gradebook or files outside the submission folder.
"""
from __future__ import annotations

import re

import nbformat

_MODULES = r"(?:np|numpy|jnp|jax|remat_lesson|Checks|checks)"
PATTERNS = (
    (re.compile(r"showtraceback|set_custom_exc|_showtraceback|displayhook|\.events\.register"),
     "changes how IPython reports errors or results"),
    (re.compile(r"\bsys\.modules\b"), "edits the module table (sys.modules)"),
    (re.compile(r"\b__builtins__\b|\bimport\s+builtins\b|\bbuiltins\."), "touches Python's builtins"),
    (re.compile(r"\bsetattr\s*\(\s*" + _MODULES + r"\b"), "rebinds an attribute of numpy, jax, remat_lesson or Checks"),
    (re.compile(r"^\s*" + _MODULES + r"(?:\.\w+)+\s*=(?!=)", re.MULTILINE),
     "assigns to an attribute of numpy, jax, remat_lesson or Checks"),
    (re.compile(r"gradebook\.db|nbgrader_config"), "reads grading files (the gradebook or nbgrader's configuration)"),
    (re.compile(r"remat_lesson\.py|remat_evidence\.py|__file__"), "opens the shipped lesson module's file"),
    (re.compile(r"""["'](?:\.\./|/work/|/tmp/|~)"""), "opens a path outside the submission folder"),
)


def _graded_by_source(cell) -> bool:
    """Locked and test cells are put back from the source before grading: nothing to scan."""
    meta = cell.metadata.get("nbgrader", {})
    return bool(meta.get("locked") or (meta.get("grade") and not meta.get("solution")))


def scan_notebook(notebook: nbformat.NotebookNode) -> list[str]:
    """One line per suspicious pattern found in the learner's code cells."""
    findings = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code" or _graded_by_source(cell):
            continue
        for pattern, meaning in PATTERNS:
            match = pattern.search(cell.source)
            if match:
                line = cell.source[: match.start()].count("\n") + 1
                findings.append(f"cell {index + 1}, line {line}: {meaning} ({match.group(0).strip()!r})")
    return findings
