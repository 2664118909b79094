"""A grading run: one student's task (worker), the reference run, runners (local or Dask), the
`autograder grade` command and feedback."""
