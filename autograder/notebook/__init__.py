"""One notebook through nbgrader's pipeline: execute (with the judge), repair, pages, and the
plugin that makes `nbgrader autograde` use them."""
