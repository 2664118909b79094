"""A pytest plugin for nbgrader's own test suites run with the grader's plugin enabled
(tests/e2e/test_nbgrader_suites.py): each test the grader differs on deliberately is skipped, with
the reason; autograder/README.md lists the same differences.

Loaded with `-p tests.nbgrader_with_the_grader`; it changes nothing else of nbgrader's tests.
"""

from __future__ import annotations

import pytest

HIDDEN_TESTS = (
    "hidden tests are taken out of autograded notebooks (and so of formgrader's and the feedback's "
    "pages); their reports stay"
)
SOURCE_METADATA = (
    "a submission's nbgrader metadata is replaced by the source's: graded cells the source does not "
    "have (the tests' files/test.ipynb handed in for an empty notebook) are graded as the source says, "
    "so the notebook is graded, not refused with exit status 1"
)
#: nbgrader's test (module::class::name) -> why the grader does otherwise, on purpose.
DELIBERATE = {
    "test_nbgrader_autograde.py::TestNbGraderAutograde::test_side_effects": (
        "a kernel writes only inside its sandbox's scratch folder, emptied after each notebook: a "
        "file a notebook writes is not kept in autograded/, where formgrader and feedback would show it"
    ),
    "test_nbgrader_autograde.py::TestNbGraderAutograde::test_hidden_tests_single_notebook": HIDDEN_TESTS,
    "test_nbgrader_autograde.py::TestNbGraderAutograde::test_hidden_tests_autotest": HIDDEN_TESTS,
    "test_nbgrader_autograde.py::TestNbGraderAutograde::test_handle_failure": SOURCE_METADATA,
    "test_nbgrader_autograde.py::TestNbGraderAutograde::test_handle_failure_single_notebook": SOURCE_METADATA,
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        # The file's name and the test's path in it: a node id leaves out a file that lies outside
        # the rootdir (the installed nbgrader's), so it is not read from there.
        key = item.path.name + item.nodeid[item.nodeid.index("::") :] if "::" in item.nodeid else item.nodeid
        why = DELIBERATE.get(key)
        if why is not None:
            item.add_marker(pytest.mark.skip(reason=f"deliberate difference of the grader: {why}"))
