"""nbgrader configuration of the course that holds assignment performance-05.

The release and the grader copy this file into the course folder they build under runs/,
so every nbgrader command of the bundle reads the same settings.
"""

c = get_config()  # noqa: F821 (provided by traitlets when nbgrader loads this file)

c.CourseDirectory.course_id = "performance"
# The SQLite gradebook in the course root (nbgrader's default), named here so nothing guesses.
c.CourseDirectory.db_url = "sqlite:///gradebook.db"

# The stubs a release leaves where the solutions were.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
# Pinned kernel: a submission that names another kernel is run with this one (nbgrader #417).
c.Execute.kernel_name = "python3"
# Per cell. The lesson's slowest cell (the small sweep) needs well under a minute.
c.Execute.timeout = 120
c.Execute.interrupt_on_timeout = True
# (Execute always carries on after an error: nbgrader 0.9.6 has no `allow_errors` setting.)

# A warning printed on stderr by a passing check must not turn full marks into zero
# (nbgrader counts any stderr output in a test cell as a failure): drop every stderr stream.
c.IgnorePattern.enabled = True  # off by default in nbgrader 0.9.6
c.IgnorePattern.pattern = r"(?s).*"

# Students delete cells: put deleted graded and locked cells back from the source.
c.OverwriteCells.add_missing_cells = True
c.CheckCellMetadata.enabled = True

# The bundle's grader (python -m autograder.grade) adds its defenses to the stock pipeline:
# each kernel runs in the student's sandbox (autograder/sandbox.py, autograder/kernels.py);
# every test cell is checked by the grader's judge, outside the learner's process, reaching
# the learner's work only through data (autograder/judge.py); a submission's cell metadata is
# the source's; duplicated or deleted graded cells no longer stop a notebook from being graded.
# Plain `nbgrader autograde` in a course folder, where the bundle is not importable, keeps
# nbgrader's own pipeline, and the checks decide in the kernel (see the README).
try:
    from autograder.preprocessors import (
        DeduplicateIdsCleanly,
        ForPages,
        MetadataFromSource,
        RestoreMissingCells,
        SandboxedExecute,
    )
except ImportError:
    pass
else:
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.preprocessors import (
        AssignLatePenalties,
        CheckCellMetadata,
        ClearOutput,
        IgnorePattern,
        LimitOutput,
        OverwriteKernelspec,
        SaveAutoGrades,
    )

    c.Autograde.sanitize_preprocessors = [
        ClearOutput,
        MetadataFromSource,
        DeduplicateIdsCleanly,
        OverwriteKernelspec,
        RestoreMissingCells,
        CheckCellMetadata,
    ]

    c.Autograde.autograde_preprocessors = [
        SandboxedExecute,
        IgnorePattern,
        ClearMetadataPreprocessor,
        LimitOutput,
        SaveAutoGrades,
        AssignLatePenalties,
        CheckCellMetadata,
        ForPages,
    ]
