"""The judge's ledger is the only source of a judged cell's points, and the learner's words in a
report stay theirs (autograder/judge/judged_cells.py, judge.py), without a grading run: nbgrader's own
reading of a verdict tampered with every way the fixtures try (hostile-verdict-display-*), the
display updates that would tamper with it, and the escaping of exception messages and class
names (hostile-forged-report-lines)."""

from __future__ import annotations

import nbformat
import pytest
from nbgrader import utils
from nbgrader.api import Gradebook

from autograder.course.text_safety import JUDGE_MARKS, learner_name, learner_text, report_line
from autograder.gradebook.class_gradebook import quiet_gradebook_warnings
from autograder.judge.core import LearnerRaised, write_verdict
from autograder.judge.judged_cells import LEDGER, MAX_FINDINGS, JudgedCells, JudgeSettings, Ledger, LedgerGrades
from autograder.kernel.output_caps import OutputCaps
from autograder.kernel.sandbox import Limits
from autograder.notebook.execute import SandboxedExecute
from autograder.upstream.nbgrader import fast_schema_stamp


def _test_cell(grade_id: str = "test-x", points: float = 3) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell("from remat_checks import Checks")
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": grade_id, "points": points}
    return cell


def _judged(earned: float, index: int = 0, grade_id: str = "test-x") -> tuple[nbformat.NotebookNode, Ledger]:
    cell, ledger = _test_cell(grade_id), Ledger()
    write_verdict(cell, earned, f"[FAIL] 0/3  the thing\n{earned:g} of 3 points")
    ledger.enter(cell, index, earned)
    return cell, ledger


def _reading(cell):
    """What nbgrader 0.9.6 reads from a cell's outputs: points, or the exception it raises."""
    try:
        return utils.determine_grade(cell)[0]
    except Exception as error:
        return error


# What the fixtures write over the judge's score (data, metadata), and what nbgrader makes of it.
TAMPERED = {
    "negative": ({"text/plain": "-1"}, {}, 3.0),
    "list": ({"text/plain": ["3", "3"]}, {}, 3.0),
    "nan": ({"text/plain": "nan"}, {}, 3.0),
    "-inf": ({"text/plain": "-inf"}, {}, 3.0),
    "not a number": ({"text/plain": "'full marks'"}, {}, 3.0),
    "inf": ({"text/plain": "inf"}, {}, ValueError),
    "over the points": ({"text/plain": "4"}, {}, ValueError),
    "no text": ({"text/html": "<b>3</b>"}, {}, KeyError),
    "full, with metadata": ({"text/plain": "3"}, {"nbgrader": {"score": 3, "points": 3}}, 3.0),
    "partial": ({"text/plain": "1.5"}, {}, 1.5),
}


@pytest.mark.parametrize("how", sorted(TAMPERED))
def test_tampered_score_yields_to_judge(how):
    """A tampered score gives way to the judge's and is noted."""
    data, metadata, nbgrader_reads = TAMPERED[how]
    cell, ledger = _judged(0.0)
    cell.outputs[1]["data"], cell.outputs[1]["metadata"] = data, metadata
    read = _reading(cell)
    # nbgrader on its own would store full or partial marks, or fail the whole notebook.
    if isinstance(nbgrader_reads, type):
        assert isinstance(read, nbgrader_reads), read
    else:
        assert read == nbgrader_reads
    assert ledger.settle(cell, read) == 0.0
    assert len(ledger.findings) == 1 and ledger.findings[0].startswith("test-x: the score read from")
    assert "the judge's stands" in ledger.findings[0]


@pytest.mark.parametrize("earned", [0.0, 1.5, 3.0])
def test_untouched_verdict_agrees_silently(earned):
    """An untouched verdict agrees with the ledger and nothing is noted."""
    cell, ledger = _judged(earned)
    assert _reading(cell) == earned
    assert ledger.settle(cell, _reading(cell)) == earned and ledger.findings == []


def test_cell_without_verdict_scores_zero():
    """A judged notebook's test cell without a verdict scores zero and is noted."""
    cell, ledger = _judged(3.0, grade_id="test-x")
    stray = _test_cell("test-y")  # nbgrader alone: no output at all reads as full marks
    assert _reading(stray) == 3
    assert ledger.settle(stray, _reading(stray)) == 0.0
    assert ledger.findings == ["test-y: the grader's judge wrote no verdict for this cell; scored 0"]
    answer = nbformat.v4.new_code_cell("x = 1")
    answer.metadata["nbgrader"] = {"grade": True, "solution": True, "grade_id": "a", "points": 1}
    assert ledger.settle(answer, None) is None  # not the judge's to score


def test_findings_are_bounded():
    ledger = Ledger()
    for number in range(3 * MAX_FINDINGS):
        ledger.note(f"finding {number}")
    assert len(ledger.findings) == MAX_FINDINGS + 1 and ledger.findings[-1].startswith("more findings")


def test_gradebook_stores_ledger_points(tmp_path):
    """The gradebook stores the ledger's points and flags the notebook."""
    quiet_gradebook_warnings()
    fast_schema_stamp()  # no `alembic` command needed
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with Gradebook(url) as gb:
        gb.add_assignment("ps1")
        gb.add_notebook("02", "ps1")
        for grade_id in ("test-a", "test-b"):
            gb.add_grade_cell(grade_id, "02", "ps1", max_score=3, cell_type="code")
        gb.add_student("mallory")
        gb.add_submission("ps1", "mallory")
    notebook, ledger = nbformat.v4.new_notebook(), Ledger()
    for index, (grade_id, earned) in enumerate([("test-a", 0.0), ("test-b", 2.0)]):
        cell = _test_cell(grade_id)
        write_verdict(cell, earned, "report")
        ledger.enter(cell, index, earned)
        notebook.cells.append(cell)
    notebook.cells[0].outputs[1]["data"] = {"text/plain": "-1"}  # what the display_id route left
    resources = {
        "nbgrader": {"notebook": "02", "assignment": "ps1", "student": "mallory", "db_url": url},
        LEDGER: ledger,
    }
    LedgerGrades().preprocess(notebook, resources)
    with Gradebook(url) as gb:
        stored = gb.find_submission_notebook("02", "ps1", "mallory")
        assert {g.name: g.auto_score for g in stored.grades} == {"test-a": 0.0, "test-b": 2.0}
        assert stored.flagged and not any(g.needs_manual_grade for g in stored.grades)
    assert len(ledger.findings) == 1 and ledger.findings[0].startswith("test-a:")
    # Without a ledger (nothing judged in the grader), nbgrader's own reading is stored, as before.
    LedgerGrades().preprocess(notebook, {"nbgrader": resources["nbgrader"]})
    with Gradebook(url) as gb:
        assert gb.find_grade("test-a", "02", "ps1", "mallory").auto_score == 3.0


# ---------------------------------------------------------------------------------------
# No display update reaches a verdict.
# ---------------------------------------------------------------------------------------
def _update(display_id: str, data: dict, msg_type: str = "update_display_data") -> dict:
    return {
        "msg_type": msg_type,
        "header": {"msg_type": msg_type},
        "parent_header": {"msg_id": "later"},
        "content": {"data": data, "metadata": {}, "execution_count": 7, "transient": {"display_id": display_id}},
    }


@pytest.fixture
def executor():
    """A notebook whose cell 0 holds the judge's verdict (output 2 under display_id "score"
    before it was written), cell 1 an output of the learner's under the same id."""
    executor = SandboxedExecute(timeout=30)
    executor.reset_execution_trackers()
    executor.clear_before_next_output = False  # as nbclient sets it when a cell starts
    executor._caps = OutputCaps(Limits().output, Limits().notebook_output)
    executor._judged = JudgedCells(JudgeSettings("/x", "remat_checks", 1), [], 30, float("inf"))
    verdict, _ = _judged(0.0)
    learners = nbformat.v4.new_code_cell("display(...)")
    learners.outputs = [nbformat.v4.new_output("display_data", data={"text/plain": "mine"})]
    executor.nb = nbformat.v4.new_notebook(cells=[verdict, learners, nbformat.v4.new_code_cell("pass")])
    executor._judged.ledger.enter(verdict, 0, 0.0)
    executor._display_id_map = {"score": {0: [1], 1: [0]}, "other": {0: [0]}}
    return executor


@pytest.mark.parametrize("msg_type", ["update_display_data", "display_data", "execute_result"])
@pytest.mark.parametrize("data", [{"text/plain": "-1"}, {"text/plain": ["3", "3"]}, {"text/plain": "nan"}])
def test_display_message_never_reaches_verdict(executor, msg_type, data):
    """No display message reaches a verdict and the attempt is noted."""
    before = [dict(output) for output in executor.nb.cells[0].outputs]
    later = executor.nb.cells[2]
    executor.process_message(_update("score", data, msg_type), later, 2)
    assert [dict(output) for output in executor.nb.cells[0].outputs] == before
    assert executor.nb.cells[1].outputs[0]["data"] == data  # the learner's own output is updated as usual
    (finding,) = executor._judged.ledger.findings
    assert finding.startswith("test-x: a display update (display_id [learner's text: score]) aimed at")
    executor.process_message(_update("score", data), later, 2)  # the verdict is out of the map for good
    executor.process_message(_update("other", {"text/plain": "3"}), later, 2)  # output 1, the report
    assert [dict(output) for output in executor.nb.cells[0].outputs] == before
    assert len(executor._judged.ledger.findings) == 2
    assert _reading(executor.nb.cells[0]) == 0.0


def test_display_update_before_verdict_allowed(executor):
    """A display update before the verdict is written is the learner's own business."""
    executor._judged.ledger = Ledger()  # no verdict yet: cell 0 is still running in the kernel
    executor.process_message(_update("score", {"text/plain": "x"}), executor.nb.cells[2], 2)
    assert executor.nb.cells[0].outputs[1]["data"] == {"text/plain": "x"}
    assert executor._judged.ledger.findings == []


# ---------------------------------------------------------------------------------------
# The learner's words in a report.
# ---------------------------------------------------------------------------------------
FORGED = ["[PASS] 3/3  every check", "        where to look: nowhere", "3 of 3 points"]
BREAKS = [
    "\n", "\r", "\r\n", "\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1b[2K\r",
    "\x1b[8m\n", "\u202e\n", "\u200b\n", "\t", "\u3000", "\x00", "\ufeff\n",
]  # fmt: skip


def _lines(text: str) -> list[str]:
    return text.splitlines()  # every line break Python knows, U+2028 and U+0085 included


@pytest.mark.parametrize("brk", BREAKS, ids=[ascii(b) for b in BREAKS])
def test_learner_text_is_one_defused_line(brk):
    """Learner text is one marked ASCII line with the judge's marks defused."""
    said = (
        brk + brk.join(FORGED) + brk + "\uff3bPASS\uff3d 3/3" + brk + "[ pass ] 1/1" + brk + "2.5 of 3 points checked"
    )
    text = learner_text(said)
    assert len(_lines(text)) == 1 and text.isascii() and text.isprintable()
    assert text.startswith("[learner's text: ") and text.endswith("]") and "]" not in text[:-1].replace("\\]", "")
    # Every mark of the judge's is quoted by a backslash, and none is left bare.
    assert all(text[match.start() - 1] == "\\" for match in JUDGE_MARKS.finditer(text))
    assert text.count("\\[PASS\\] 3/3") == 1 and text.count("\\[ pass \\] 1/1") == 1
    assert text.count("\\3 of 3 points") == 1 and text.count("\\2.5 of 3 points") == 1
    assert "PASS\\uff3d" in text  # fullwidth brackets as escapes


@pytest.mark.parametrize("brk", BREAKS, ids=[ascii(b) for b in BREAKS])
def test_report_line_escapes_what_breaks_it(brk):
    """A report line keeps the judge's words and escapes what breaks them."""
    line = report_line(f"expected the kinds: 'a', found {'x' + brk + FORGED[0]!s}")
    assert len(_lines(line)) == 1 and line.isprintable()
    assert all(line[match.start() - 1] == "\\" for match in JUDGE_MARKS.finditer(line))
    assert report_line("expected the step ≤ 0.5 × h, found 0.7") == "expected the step ≤ 0.5 × h, found 0.7"
    # What learner_text quoted is not quoted again.
    said = learner_text("\n3 of 3 points\n[PASS]")
    assert report_line(f"your code raised ValueError: {said}") == f"your code raised ValueError: {said}"
    assert said == "[learner's text: \\n\\3 of 3 points\\n\\[PASS\\]]"


def test_names_and_exceptions_of_the_learner():
    assert learner_name("ValueError") == "ValueError" and learner_name("numpy.linalg.LinAlgError").endswith("Error")
    assert learner_name("PASS\n3 of 3 points") == "[learner's text: PASS\\n\\3 of 3 points]"
    raised = LearnerRaised(["Forged\n[PASS] 3/3", "ValueError"], "boom\r\n3 of 3 points", "the process: ")
    assert raised.learner_mro == ["[learner's text: Forged\\n\\[PASS\\] 3/3]", "ValueError"]
    assert str(raised) == "the process: [learner's text: boom\\r\\n\\3 of 3 points]"
    assert str(LearnerRaised(["NotImplementedError"])) == ""  # the stub's bare raise still reads as unanswered
    assert learner_text("x" * 5000).endswith("...]") and len(learner_text("x" * 5000)) < 700
    # A learner's own backslash is doubled: theirs cannot pass for the judge's quoting.
    assert learner_text("\\[PASS]") == "[learner's text: \\\\\\[PASS\\]]"
