"""The reference run stops grading when the instructor's notebooks are not clean.

The instructor's solutions are graded first, by the same judge as every learner, and the compile
cache comes from that run: an error or a warning in any of its cells (the `KeyError` a
demonstration once raised in autograde mode), or a test cell the solutions do not pass in full,
must stop grading before anyone is graded, naming the notebook and the cell.
"""

from __future__ import annotations

import nbformat
import pytest

from autograder.course.defaults import NOTEBOOKS
from autograder.course.task_template import time_budgets
from autograder.kernel.sandbox import Limits
from autograder.run.reference import (
    ReferenceProblem,
    ReferenceRun,
    into_template,
    problems_of,
    solution_shortfalls,
)


def _cell(*outputs) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell("pass")
    cell.outputs = list(outputs)
    return cell


#: A course's files as a grading task carries them: the assignment's notebooks, by relative path.
TEMPLATE = {f"source/performance-05/{name}": b"{}" for name in NOTEBOOKS}


def _runs() -> list[ReferenceRun]:
    return [ReferenceRun(notebook=name, host="host") for name in NOTEBOOKS]


def test_errors_and_warnings_are_found_with_their_cell():
    notebook = nbformat.v4.new_notebook(
        cells=[
            _cell(nbformat.v4.new_output("stream", name="stdout", text="fine\n")),
            _cell(nbformat.v4.new_output("stream", name="stderr", text="x.py:3: UserWarning: careful\n")),
            _cell(nbformat.v4.new_output("error", ename="KeyError", evalue="'checkpoint_dots'", traceback=[])),
            _cell(nbformat.v4.new_output("stream", name="stderr", text="\n")),
        ]
    )
    assert problems_of(notebook) == [
        "cell 2 wrote to stderr: x.py:3: UserWarning: careful",
        "cell 3: KeyError: 'checkpoint_dots'",
    ]


def test_an_unclean_reference_run_stops_grading_and_names_what_failed():
    runs = _runs()
    runs[2].problems = ["cell 40: KeyError: 'checkpoint_dots'"]
    with pytest.raises(ReferenceProblem, match=rf"{NOTEBOOKS[2]}: cell 40: KeyError: 'checkpoint_dots'"):
        into_template(TEMPLATE, runs)


def test_a_missing_notebook_stops_grading():
    with pytest.raises(ReferenceProblem, match=NOTEBOOKS[-1]):
        into_template(TEMPLATE, _runs()[:-1])


def test_a_clean_reference_run_travels_in_the_template_with_each_notebooks_time_budget():
    runs = _runs()
    for index, run in enumerate(runs):
        run.seconds = 10.0 * index
    template = into_template({**TEMPLATE, "kept": b"1"}, runs, limits=Limits(time_factor=3, time_floor=60))
    assert template["kept"] == b"1"
    budgets = time_budgets(template)
    assert budgets == {run.notebook: 3 * run.seconds + 60 for run in runs}
    assert time_budgets({}) == {} and time_budgets({"time-budgets.json": b"junk"}) == {}


def test_the_helpers_each_notebooks_checks_asked_travel_in_the_template_where_known():
    from autograder.course.task_template import helpers_asked

    runs = _runs()
    runs[0].helpers, runs[1].helpers, runs[2].helpers = ["numpy_only"], ["artifacts", "numpy_only"], []
    assert helpers_asked(into_template(TEMPLATE, runs)) == {
        runs[0].notebook: ["numpy_only"],
        runs[1].notebook: ["artifacts", "numpy_only"],
        runs[2].notebook: [],
    }


def test_without_the_compile_cache_the_template_has_the_budgets_and_no_executable():
    from autograder.kernel.compile_cache import ENTRIES, HOST

    runs = _runs()
    runs[0].entries = {"jit_f-abc": b"an executable"}
    said = []
    cached = into_template(TEMPLATE, runs)
    plain = into_template(TEMPLATE, runs, said.append, compile_cache=False)
    assert f"{ENTRIES}/jit_f-abc" in cached and HOST in cached
    assert not [name for name in plain if name.startswith(ENTRIES) or name == HOST]
    assert time_budgets(plain) == time_budgets(cached)
    assert "compile cache: off" in said[0]


def test_a_test_cell_the_solutions_do_not_pass_in_full_is_named():
    def graded(points, earned, report):
        cell = nbformat.v4.new_code_cell("checks.score()")
        cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": f"test-{earned}", "points": points}
        cell.outputs = [
            nbformat.v4.new_output("stream", name="stdout", text=report),
            nbformat.v4.new_output("execute_result", data={"text/plain": repr(float(earned))}),
        ]
        return cell

    notebook = nbformat.v4.new_notebook(cells=[graded(3, 3, "3 of 3 points\n"), graded(3, 2, "[FAIL] 0/1  a\n")])
    (problem,) = solution_shortfalls(notebook)
    assert problem.startswith("test-2: the solutions earn 2.0 of 3 points") and "[FAIL] 0/1  a" in problem


# ---------------------------------------------------------------------------------------
# A clean reference run, kept for the next run with the same key.
# ---------------------------------------------------------------------------------------
def test_a_clean_run_is_kept_whole_and_read_back_as_it_was(tmp_path):
    from autograder.run.options import GradingOptions
    from autograder.run.reference import keep_reference, kept_reference, reference_key

    runs = [ReferenceRun(name, "host", {"jit_f-abc": bytes([i, 0, 255])}, 1.5 + i) for i, name in enumerate(NOTEBOOKS)]
    runs[0].helpers, runs[1].helpers = ["numpy_only"], []  # the helpers its checks asked; None: not known
    key = reference_key(TEMPLATE, GradingOptions())
    assert kept_reference(tmp_path, key) is None
    keep_reference(tmp_path, key, runs)
    assert kept_reference(tmp_path, key) == runs
    assert [p.name for p in tmp_path.iterdir()] == [key]  # nothing half-written left beside it
    keep_reference(tmp_path, key, runs)  # a second keeper finds it there: no error, no change
    assert kept_reference(tmp_path, key) == runs


def test_a_second_run_with_the_same_key_waits_for_the_first_ones_reference_run(tmp_path):
    """Two gradings at once with one key run the instructor's notebooks once: the second waits
    (and says so) until the first has kept its reference run or given up; another key never waits."""
    import threading

    from autograder.run.reference import claimed_reference

    events, waiting = [], threading.Event()

    def second_run():
        with claimed_reference(tmp_path, "k", lambda: (events.append("waited"), waiting.set())):
            events.append("claimed")

    with claimed_reference(tmp_path, "k"):
        thread = threading.Thread(target=second_run)
        thread.start()
        assert waiting.wait(timeout=60), "the second run did not wait"
        with claimed_reference(tmp_path, "another key", lambda: events.append("waited for another key")):
            pass
        assert events == ["waited"]  # not claimed while the first run holds it
    thread.join(timeout=60)
    assert events == ["waited", "claimed"]


def test_a_run_without_the_sandbox_may_take_a_sandboxed_runs_reference_and_never_the_other_way(tmp_path):
    from autograder.run.options import GradingOptions
    from autograder.run.reference import keep_reference, kept_for, reference_key

    sandboxed, unsafe = GradingOptions(), GradingOptions(unsafe=True)
    runs = [ReferenceRun(name, "host", {"jit_f-abc": b"1"}, 1.0) for name in NOTEBOOKS]
    keep_reference(tmp_path / "a", reference_key(TEMPLATE, sandboxed), runs)
    # The third item names the key the run was kept under (the progress line shows it).
    taken = kept_for(tmp_path / "a", TEMPLATE, unsafe)
    assert taken == (reference_key(TEMPLATE, unsafe), runs, reference_key(TEMPLATE, sandboxed))
    keep_reference(tmp_path / "b", reference_key(TEMPLATE, unsafe), runs)
    assert kept_for(tmp_path / "b", TEMPLATE, sandboxed) == (reference_key(TEMPLATE, sandboxed), None, "")
    assert kept_for(tmp_path / "b", TEMPLATE, unsafe)[1:] == (runs, reference_key(TEMPLATE, unsafe))


def test_a_run_with_a_problem_is_never_kept(tmp_path):
    from autograder.run.reference import keep_reference, kept_reference

    runs = _runs()
    runs[0].problems = ["cell 3: KeyError"]
    keep_reference(tmp_path, "k", runs)
    assert kept_reference(tmp_path, "k") is None


def test_the_key_changes_with_the_source_the_host_and_the_options_that_change_the_run(monkeypatch):
    from autograder.run import reference
    from autograder.run.options import GradingOptions

    base = reference.reference_key(TEMPLATE, GradingOptions())
    changed_source = {**TEMPLATE, "source/performance-05/remat_checks.py": b"# edited"}
    assert reference.reference_key(changed_source, GradingOptions()) != base
    assert reference.reference_key(TEMPLATE, GradingOptions(unsafe=True)) != base
    assert reference.reference_key(TEMPLATE, GradingOptions(limits=Limits(memory=1 << 30))) != base
    # what only the learners' runs use leaves it as it is (the reference run fills the compile
    # cache either way; --no-compile-cache only keeps it from the learners' kernels)
    same = GradingOptions(
        jobs=2, cell_timeout=9, judge_seed=5, limits=Limits(time_factor=3, time_floor=40), compile_cache=False
    )
    assert reference.reference_key(TEMPLATE, same) == base
    monkeypatch.setattr(reference, "host_signature", lambda: "another host")
    assert reference.reference_key(TEMPLATE, GradingOptions()) != base


def test_a_kept_run_that_does_not_read_back_whole_is_not_used(tmp_path):
    from autograder.run.reference import kept_reference

    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "runs.json").write_text('[{"notebook": "01-understand.ipynb"}]')
    assert kept_reference(tmp_path, "k") is None
