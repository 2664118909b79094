"""The grader of assignment performance-05: grade a class in sandboxed kernels, keep the class
gradebook, write grades and feedback. Imports nothing from `bundle` (the authoring side)."""
