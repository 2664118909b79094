"""Where the pieces of the bundle live. One place, so no script guesses a path."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENT = "performance-05"
SOLUTIONS = ROOT / "solutions"
RELEASE = ROOT / "notebooks"
AUTOGRADER = ROOT / "autograder"
RUNS = ROOT / "runs"
DATA = ROOT / "data"
KERNEL_NAME = "python3"

#: The five stages, in teaching order.
NOTEBOOKS = (
    "01-understand.ipynb",
    "02-build.ipynb",
    "03-experiment.ipynb",
    "04-exercise.ipynb",
    "05-evidence.ipynb",
)
#: Files besides the notebooks that ship with the assignment (and are restored at grading).
SHIPPED_MODULES = ("remat_checks.py", "remat_lesson.py", "remat_evidence.py", "remat_sweep.py")
#: Ship with the release from data/: the evidence template learners fill in, and the recorded
#: reference run (its printed text and its figure) they compare their own runs with.
SHIPPED_FILES = ("evidence-template.md", "reference-execution.txt", "storage-views.png")
