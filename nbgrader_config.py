"""nbgrader configuration of the course that holds assignment performance-05, in one copy.

JupyterLab's Validate button reads it (`make lab` serves notebooks/ from here: nbgrader reads
./nbgrader_config.py of the server's working directory); the release and the grader copy it into
the course folders they build under runs/, so every nbgrader command of the bundle reads the same
settings. Only this checkout reads it; no other course does (`make venv` writes no
environment-wide nbgrader config).
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

# The assignment: where it lies in this checkout (autograder/adapters/lesson.py: `autograder grade
# --bundle`, `autograder install-assignment`), and its checks module, whose checks the grader's
# judge runs (autograder/judge/protocol.py).
c.Bundle.layout = "autograder.adapters.lesson"
c.Assignments.settings = {"performance-05": {"checks_module": "remat_checks"}}

# The grader (the autograder package: python -m autograder.run.grade, or nbgrader's own
# `nbgrader autograde` through autograder/notebook/plugin.py) adds its defenses to the stock pipeline: each
# kernel in a sandbox, every test cell checked by the judge outside the learner's process
# (autograder/judge/core.py), cell metadata from the source, deleted or duplicated graded cells
# restored, pages that run no learner's script. Where the package is not importable, plain
# nbgrader's pipeline runs and the checks decide in the kernel (see the README).
try:
    from autograder.notebook.plugin import configure
except ImportError:
    pass
else:
    configure(c)
