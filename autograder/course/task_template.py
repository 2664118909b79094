"""A grading task's template, and what is read from it.

The template is what every task of a run carries, as {relative path: bytes}: the course's
nbgrader_config.py, the assignment's source folder and a gradebook that holds the assignment,
then (after the reference run) the compile cache and each notebook's time budget. A worker
unpacks it into a scratch course of its own.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from autograder.course.assignment import assignment_in

#: Where each notebook's time budget travels inside the template.
BUDGETS = "time-budgets.json"
#: Where the judge's helpers each notebook's checks asked in the reference run travel.
HELPERS = "judge-helpers.json"


def unpack(template: dict[str, bytes], folder: Path, prefix: str) -> None:
    """The template's files under prefix, written under folder."""
    for relative, data in template.items():
        if relative.startswith(prefix):
            (folder / relative[len(prefix) :]).parent.mkdir(parents=True, exist_ok=True)
            (folder / relative[len(prefix) :]).write_bytes(data)


def shipped_files(template: dict[str, bytes], folder: Path) -> Path:
    """The assignment's files a kernel may see (never a notebook), in folder."""
    prefix = f"source/{assignment_in(template).id}/"
    folder.mkdir(parents=True, exist_ok=True)
    for relative, data in template.items():
        if relative.startswith(prefix) and not relative.endswith(".ipynb") and "/" not in relative[len(prefix) :]:
            (folder / relative[len(prefix) :]).write_bytes(data)
    return folder


def judge_checks_module(template: dict[str, bytes]) -> str:
    """The checks module the course's nbgrader_config.py names for the judge ("" for none)."""
    from traitlets.config.loader import PyFileConfigLoader

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "nbgrader_config.py").write_bytes(template.get("nbgrader_config.py", b""))
        try:
            config = PyFileConfigLoader("nbgrader_config.py", path=folder).load_config()
        except Exception:  # an unreadable config names none
            return ""
    return str(config.SandboxedExecute.get("judge_checks_module", "") or "")


def time_budgets(template: dict[str, bytes]) -> dict[str, float]:
    """{notebook: seconds} the reference run set; {} when it set none."""
    try:
        budgets = json.loads(template.get(BUDGETS, b"{}"))
        return {str(name): float(seconds) for name, seconds in budgets.items()}
    except (ValueError, TypeError, AttributeError):
        return {}


def with_budgets(template: dict[str, bytes], budgets: dict[str, float]) -> dict[str, bytes]:
    """The template with each notebook's time budget in it."""
    return {**template, BUDGETS: json.dumps(budgets, sort_keys=True).encode()}


def with_helpers(template: dict[str, bytes], helpers: dict[str, list[str]]) -> dict[str, bytes]:
    """The template with the judge's helpers each notebook's checks asked in the reference run."""
    return {**template, HELPERS: json.dumps(helpers, sort_keys=True).encode()}


def helpers_asked(template: dict[str, bytes]) -> dict[str, list[str]]:
    """{notebook: helper names} the reference run noted; {} when it noted none."""
    try:
        asked = json.loads(template.get(HELPERS, b"{}"))
        return {str(name): [str(helper) for helper in helpers] for name, helpers in asked.items()}
    except (ValueError, TypeError, AttributeError):
        return {}
