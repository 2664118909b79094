"""The class gradebook: the course folder nbgrader reads, merged from each student's run, and what
is written from it (grades, LMS file, the class report)."""
