"""The grader: grade a class's nbgrader submissions in sandboxed kernels, every test cell judged in
the grader, keep the class gradebook, write grades and feedback. Installed as `autograder`;
imports nothing from `bundle` (the bundle's authoring side)."""
