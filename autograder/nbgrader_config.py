"""nbgrader configuration of the course that holds assignment performance-05.

The release and the grader copy this file into the course folder they build under runs/,
so every nbgrader command of the bundle reads the same settings.
"""
c = get_config()  # noqa: F821 (provided by traitlets when nbgrader loads this file)

c.CourseDirectory.course_id = "performance"
# The SQLite gradebook in the course root (nbgrader's default), named here so nothing guesses.
c.CourseDirectory.db_url = "sqlite:///gradebook.db"

# Pinned kernel: a submission that names another kernel is run with this one (nbgrader #417).
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
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
# the kernel runs sandboxed (autograder/sandbox.py), and a test cell that does not end with the
# score report Checks prints gets 0 (so learner code that hides its errors earns nothing), and
# duplicated or deleted graded cells no longer stop a notebook from being graded.
# Plain `nbgrader autograde` in a course folder, where the bundle is not importable, keeps
# nbgrader's own pipeline.
try:
    from autograder.preprocessors import (
        DeduplicateIdsCleanly,
        RequireScoreReport,
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

    # Duplicated or deleted graded cells make the stock pair fail and lose the whole notebook.
    c.Autograde.sanitize_preprocessors = [
        ClearOutput,
        DeduplicateIdsCleanly,
        OverwriteKernelspec,
        RestoreMissingCells,
        CheckCellMetadata,
    ]

    c.Autograde.autograde_preprocessors = [
        SandboxedExecute,
        IgnorePattern,
        # Before LimitOutput, which could cut the report off a long output.
        RequireScoreReport,
        ClearMetadataPreprocessor,
        LimitOutput,
        SaveAutoGrades,
        AssignLatePenalties,
        CheckCellMetadata,
    ]
