"""The reference run stops grading when the instructor's notebooks are not clean.

The instructor's solutions are graded first, by the same judge as every learner, and the compile
cache comes from that run: an error or a warning in any of its cells (the `KeyError` a
demonstration once raised in autograde mode), or a test cell the solutions do not pass in full,
must stop grading before anyone is graded, naming the notebook and the cell.
"""

from __future__ import annotations

import nbformat
import pytest

from autograder.adapters.lesson import NOTEBOOKS
from autograder.course.task_template import CourseSource, TaskTemplate
from autograder.kernel.sandbox import Limits
from autograder.run.options import GradingOptions
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


#: A course's source: the assignment's notebooks, by relative path.
SOURCE = CourseSource(b"", {f"source/performance-05/{name}": b"{}" for name in NOTEBOOKS})
TEMPLATE = TaskTemplate(SOURCE, gradebook=b"")


def _runs() -> list[ReferenceRun]:
    return [ReferenceRun(notebook=name, host="host") for name in NOTEBOOKS]


def test_errors_and_warnings_found_with_cell():
    """Errors and warnings are found with their cell."""
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


def test_unclean_reference_run_stops_grading():
    """An unclean reference run stops grading and names what failed."""
    runs = _runs()
    runs[2].problems = ["cell 40: KeyError: 'checkpoint_dots'"]
    with pytest.raises(ReferenceProblem, match=rf"{NOTEBOOKS[2]}: cell 40: KeyError: 'checkpoint_dots'"):
        into_template(TEMPLATE, runs, GradingOptions())


def test_a_missing_notebook_stops_grading():
    with pytest.raises(ReferenceProblem, match=NOTEBOOKS[-1]):
        into_template(TEMPLATE, _runs()[:-1], GradingOptions())


def test_clean_reference_run_in_template():
    """A clean reference run travels in the template with each notebook's time budget."""
    runs = _runs()
    for index, run in enumerate(runs):
        run.seconds = 10.0 * index
    options = GradingOptions(time_factor=3, time_floor=60)
    template = into_template(TEMPLATE.replace(gradebook=b"kept"), runs, options)
    assert template.gradebook == b"kept" and template.source == SOURCE
    assert template.budgets == {run.notebook: 3 * run.seconds + 60 for run in runs}


def test_template_carries_asked_helpers():
    """The helpers each notebook's checks asked travel in the template where known."""
    runs = _runs()
    runs[0].helpers, runs[1].helpers, runs[2].helpers = ["numpy_only"], ["artifacts", "numpy_only"], []
    assert into_template(TEMPLATE, runs, GradingOptions()).helpers == {
        runs[0].notebook: ["numpy_only"],
        runs[1].notebook: ["artifacts", "numpy_only"],
        runs[2].notebook: [],
    }


def test_template_without_compile_cache():
    """Without the compile cache, the template has the budgets and no executable."""
    runs = _runs()
    runs[0].entries = {"jit_f-abc": b"an executable"}
    runs[1].host, runs[1].entries = "another kind of host", {"jit_g-def": b"another's executable"}
    said = []
    cached = into_template(TEMPLATE, runs, GradingOptions(), said.append)
    plain = into_template(TEMPLATE, runs, GradingOptions(compile_cache=False), said.append)
    # one kind of host's executables only: the first that filled any
    assert cached.cache is not None and cached.cache.host == "host"
    assert cached.cache.entries == {"jit_f-abc": b"an executable"} and cached.cache.size == 13
    assert plain.cache is None and plain.budgets == cached.budgets
    assert "compile cache: 1 executables (0.0 MB)" in said[0] and "compile cache: off" in said[1]
    assert "notebooks earn every point," in said[0]


def test_a_kept_reference_run_is_told_as_past():
    """Grading on a kept reference run says its seconds were that run's, not this one's."""
    said = []
    into_template(TEMPLATE, _runs(), GradingOptions(), said.append, kept=True)
    assert "earned every point in the kept run (" in said[0] and " s of work then)" in said[0], said


def test_cell_solutions_do_not_pass_is_named():
    """A test cell the solutions do not pass in full is named."""

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
def test_clean_run_kept_and_read_back(tmp_path):
    """A clean run is kept whole and read back as it was."""
    from autograder.run.options import GradingOptions
    from autograder.run.reference import keep_reference, kept_reference, reference_key

    runs = [ReferenceRun(name, "host", {"jit_f-abc": bytes([i, 0, 255])}, 1.5 + i) for i, name in enumerate(NOTEBOOKS)]
    runs[0].helpers, runs[1].helpers = ["numpy_only"], []  # the helpers its checks asked; None: not known
    key = reference_key(SOURCE, GradingOptions())
    assert kept_reference(tmp_path, key) is None
    keep_reference(tmp_path, key, runs)
    assert kept_reference(tmp_path, key) == runs
    assert [p.name for p in tmp_path.iterdir()] == [key]  # nothing half-written left beside it
    keep_reference(tmp_path, key, runs)  # a second keeper finds it there: no error, no change
    assert kept_reference(tmp_path, key) == runs


def test_a_stop_while_a_run_is_kept_leaves_nothing_half_written(tmp_path, monkeypatch):
    """Ctrl-C while the reference run is written aside: the half-written folder goes, the stop is
    raised, and nothing is kept (a stopped run left a `.keeping-*` folder beside its --out)."""
    from pathlib import Path

    from autograder.run.options import GradingOptions
    from autograder.run.reference import keep_reference, kept_reference, reference_key

    runs = [ReferenceRun(name, "host", {"jit_f-abc": b"\x00"}, 1.0) for name in NOTEBOOKS]
    key = reference_key(SOURCE, GradingOptions())
    written = []

    def stopped(self, data):
        written.append(self)
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_bytes", stopped)
    with pytest.raises(KeyboardInterrupt):
        keep_reference(tmp_path, key, runs)
    assert written and list(tmp_path.iterdir()) == []
    assert kept_reference(tmp_path, key) is None


def test_same_key_run_waits_for_first(tmp_path):
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


def test_the_lock_goes_with_its_holder_and_still_excludes(tmp_path):
    """A run's lock file is removed as it lets go (a stopped run left `.<key>.lock` beside --out),
    while it still holds it: the run that waited on that file sees it gone and locks the new
    one, so a third run still waits for the second. Nothing stays in the folder."""
    import threading

    from autograder.run.reference import claimed_reference

    events = []
    second_waits, third_waits, second_holds, let_second_go = (threading.Event() for _ in range(4))

    def second_run():
        with claimed_reference(tmp_path, "k", second_waits.set):
            events.append("second claimed")
            second_holds.set()
            assert let_second_go.wait(timeout=60)

    def third_run():
        with claimed_reference(tmp_path, "k", third_waits.set):
            events.append("third claimed")

    second = threading.Thread(target=second_run)
    with claimed_reference(tmp_path, "k"):
        second.start()
        assert second_waits.wait(timeout=60), "the second run did not wait"
    assert second_holds.wait(timeout=60), "the second run did not take the lock after the first"
    third = threading.Thread(target=third_run)
    third.start()
    assert third_waits.wait(timeout=60), "the third run did not wait for the second"
    assert events == ["second claimed"]
    let_second_go.set()
    second.join(timeout=60)
    third.join(timeout=60)
    assert events == ["second claimed", "third claimed"]
    assert list(tmp_path.iterdir()) == []


def test_a_claim_outlasts_a_failed_run_removing_the_folder_as_it_is_made(tmp_path, monkeypatch):
    """A run that failed removes the (empty) cache folder it made: in the middle of another run's
    mkdir, Path.mkdir raises FileExistsError however exist_ok is set. The claim tries again; a lock
    file that can never be opened (a dangling link) ends in an error, not a loop."""
    from pathlib import Path

    from autograder.run import locks, reference

    folder = tmp_path / "reference-cache"
    real_mkdir, raced = Path.mkdir, []

    def mkdir_raced(self, *args, **kwargs):
        if self == folder and not raced:
            raced.append(True)
            raise FileExistsError(17, "File exists", str(self))  # made, then removed by the failed run
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir_raced)
    with reference.claimed_reference(folder, "k"):
        assert raced and (folder / ".k.lock").is_file()
    assert list(folder.iterdir()) == []

    (folder / ".k.lock").symlink_to(tmp_path / "gone" / "lock")
    monkeypatch.setattr(locks, "TRIES", 3)
    with pytest.raises(FileNotFoundError), reference.claimed_reference(folder, "k"):
        pass


def test_unsandboxed_run_may_reuse_sandboxed(tmp_path):
    """A run without the sandbox may take a sandboxed run's reference and never the other way."""
    from autograder.run.options import GradingOptions
    from autograder.run.reference import keep_reference, kept_for, reference_key

    sandboxed, unsafe = GradingOptions(), GradingOptions(unsafe=True)
    runs = [ReferenceRun(name, "host", {"jit_f-abc": b"1"}, 1.0) for name in NOTEBOOKS]
    keep_reference(tmp_path / "a", reference_key(SOURCE, sandboxed), runs)
    # The third item names the key the run was kept under (the progress line shows it).
    taken = kept_for(tmp_path / "a", SOURCE, unsafe)
    assert taken == (reference_key(SOURCE, unsafe), runs, reference_key(SOURCE, sandboxed))
    keep_reference(tmp_path / "b", reference_key(SOURCE, unsafe), runs)
    assert kept_for(tmp_path / "b", SOURCE, sandboxed) == (reference_key(SOURCE, sandboxed), None, "")
    assert kept_for(tmp_path / "b", SOURCE, unsafe)[1:] == (runs, reference_key(SOURCE, unsafe))


def test_a_run_with_a_problem_is_never_kept(tmp_path):
    from autograder.run.reference import keep_reference, kept_reference

    runs = _runs()
    runs[0].problems = ["cell 3: KeyError"]
    keep_reference(tmp_path, "k", runs)
    assert kept_reference(tmp_path, "k") is None


def test_key_changes_with_what_changes_run(monkeypatch):
    """The key changes with the source, the host and the options that change the run."""
    from autograder.run import reference
    from autograder.run.options import GradingOptions

    base = reference.reference_key(SOURCE, GradingOptions())
    changed_source = CourseSource(b"", {**SOURCE.files, "source/performance-05/remat_checks.py": b"# edited"})
    assert reference.reference_key(changed_source, GradingOptions()) != base
    assert reference.reference_key(CourseSource(b"# configured", SOURCE.files), GradingOptions()) != base
    assert reference.reference_key(SOURCE, GradingOptions(unsafe=True)) != base
    assert reference.reference_key(SOURCE, GradingOptions(limits=Limits(memory=1 << 30))) != base
    # what only the learners' runs use leaves it as it is (the reference run fills the compile
    # cache either way; --no-compile-cache only keeps it from the learners' kernels)
    same = GradingOptions(jobs=2, cell_timeout=9, judge_seed=5, time_factor=3, time_floor=40, compile_cache=False)
    assert reference.reference_key(SOURCE, same) == base
    monkeypatch.setattr(reference, "host_signature", lambda distributions: "another host")
    assert reference.reference_key(SOURCE, GradingOptions()) != base


def test_partial_kept_run_is_not_used(tmp_path):
    """A kept run that does not read back whole is not used."""
    from autograder.run.reference import kept_reference

    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "runs.json").write_text('[{"notebook": "01-understand.ipynb"}]')
    assert kept_reference(tmp_path, "k") is None
