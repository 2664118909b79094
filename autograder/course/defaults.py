"""The bundle's own assignment, as the grader's configuration defaults: what it grades when no
course is given (`autograder grade --bundle CHECKOUT`, `make autograde`). Another course names its
own in its nbgrader configuration; nothing else in the grader knows the lesson."""

#: The assignment's name in the course (nbgrader's assignment id).
ASSIGNMENT = "performance-05"
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
#: The module of the assignment that speaks the judge's protocol (judge/protocol.py).
CHECKS_MODULE = "remat_checks"
#: Ship with the release from data/: the evidence template learners fill in, and the recorded
#: reference run (its printed text and its figure) they compare their own runs with.
SHIPPED_FILES = ("evidence-template.md", "reference-execution.txt", "storage-views.png")
