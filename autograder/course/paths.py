"""Where the pieces of the bundle live. One place, so no script guesses a path."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "solutions"
RELEASE = ROOT / "notebooks"
AUTOGRADER = ROOT / "autograder"
RUNS = ROOT / "runs"
DATA = ROOT / "data"
KERNEL_NAME = "python3"
