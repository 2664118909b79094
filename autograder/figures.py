"""`make figures`: rerun the worked example and refresh data/ from what it measured.

Writes, into data/ (or --out):
- reference-execution.txt  the text solutions/main.py prints, under a provenance header;
- storage-views.json       the figure's data (entries, compiler bytes, errors) with provenance;
- storage-views.png/.svg   the two-panel figure drawn from that run.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .course import nbgrader_env
from .paths import DATA, ROOT, SOLUTIONS

FIGURE_STEM = "storage-views"


def regenerate(out: Path, env_overrides: dict | None = None) -> dict:
    """Run main.py in a scratch runs folder; copy its figure and data into out."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="performance-05-figures-") as scratch:
        env = {**nbgrader_env(), "REMAT_LESSON_RUNS_DIR": scratch, **(env_overrides or {})}
        command = [sys.executable, str(SOLUTIONS / "main.py")]
        run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"solutions/main.py failed ({run.returncode}):\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}")
        evidence = json.loads((Path(scratch) / "evidence.json").read_text())
        for suffix in (".png", ".svg"):
            shutil.copy2(Path(scratch) / f"{FIGURE_STEM}{suffix}", out / f"{FIGURE_STEM}{suffix}")
    provenance = {**evidence["provenance"], "command": "make figures (python solutions/main.py)"}
    figure_data = {
        "description": "Data behind storage-views.png: saved residual entries (unit: entries) and the "
        "compiler's memory estimates (unit: bytes; null = analysis unavailable) per policy.",
        "residual_entries": evidence["residual_entries"],
        "memory": evidence["memory"],
        "memory_analysis_available": {p: m is not None for p, m in evidence["memory"].items()},
        "max_abs_error": evidence["max_abs_error"],
        "directional_derivative": evidence["directional_derivative"],
        "timings_s": evidence["timings_s"],
        "provenance": provenance,
    }
    (out / f"{FIGURE_STEM}.json").write_text(json.dumps(figure_data, indent=2) + "\n")
    header = [f"# {key}: {json.dumps(value) if isinstance(value, dict) else value}" for key, value in provenance.items()]
    # Paths in the printed residual lines are machine-specific; keep them relative to the bundle.
    text = run.stdout.replace(str(ROOT) + os.sep, "")
    (out / "reference-execution.txt").write_text("\n".join(header) + "\n\n" + text)
    return figure_data


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DATA, help="where to write (default: data/)")
    args = parser.parse_args(argv)
    data = regenerate(args.out)
    print(f"wrote {args.out}/{FIGURE_STEM}.png/.svg/.json and reference-execution.txt")
    print("entries:", data["residual_entries"], "temp bytes:", {p: (m or {}).get("temp_size_in_bytes") for p, m in data["memory"].items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
