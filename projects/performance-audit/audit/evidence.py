"""Reading and writing the evidence directory.

evidence.json is the index: who produced the evidence (provenance), which stages finished,
and every artifact with a one-line description. Each stage also writes its own files.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from . import spec


def write_json(path: Path, payload) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n")


def read_json(path: Path):
    return json.loads(path.read_text())


def read_index(evidence_dir: Path) -> dict | None:
    index_path = evidence_dir / spec.EVIDENCE_INDEX
    if not index_path.exists():
        return None
    try:
        return read_json(index_path)
    except json.JSONDecodeError:
        return None


def remove_stage_files(evidence_dir: Path, stage: int) -> None:
    """Delete what `stage` wrote last time, so stale evidence cannot pass for new evidence."""
    for relative in spec.STAGE_FILES[stage]:
        (evidence_dir / relative).unlink(missing_ok=True)
    index = read_index(evidence_dir)
    if index is not None:
        index.get("stages", {}).pop(str(stage), None)
        for relative in spec.STAGE_FILES[stage]:
            index.get("artifacts", {}).pop(relative, None)
        write_json(evidence_dir / spec.EVIDENCE_INDEX, index)


def provenance(implementation: str) -> dict:
    """Where and how this evidence was produced: the lesson's one provenance record
    (solutions/remat_lesson.py), with the implementation added. Imports JAX, so only the
    stages call it."""
    from remat_lesson import provenance as lesson_provenance

    return lesson_provenance(shlex.join([Path(sys.executable).name] + sys.argv), implementation=implementation)


def record_stage(evidence_dir: Path, stage: int, implementation: str, artifacts: dict[str, str]) -> None:
    """Add a finished stage and its artifacts to evidence.json.

    Evidence from a different implementation is never mixed in: the runner clears it first.
    """
    index = read_index(evidence_dir) or {}
    stamp = provenance(implementation)
    index["project"] = "performance-audit"
    index["implementation"] = implementation
    index["provenance"] = stamp  # of the latest stage written
    index.setdefault("stages", {})[str(stage)] = {"provenance": stamp, "artifacts": sorted(artifacts)}
    index.setdefault("artifacts", {}).update(artifacts)
    index["stages"] = dict(sorted(index["stages"].items()))
    index["artifacts"] = dict(sorted(index["artifacts"].items()))
    write_json(evidence_dir / spec.EVIDENCE_INDEX, index)
