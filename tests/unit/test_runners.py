"""Unit tests of autograder/run/runners.py: the order of the tasks, and both runners with the grading
replaced by a script and Dask by a fake client that runs each task when its result is asked."""

from __future__ import annotations

import os
import signal
import sys
import types

import pytest

from autograder.course.errors import UsageError
from autograder.course.outcomes import Trouble, TroubleKind
from autograder.course.task_template import CourseSource
from autograder.run import runners
from autograder.run.options import GradingOptions
from autograder.run.runners import DaskRunner, HereRunner, in_grading_order
from autograder.run.worker import StudentResult, StudentTask


def _task(student: str, size: int = 1) -> StudentTask:
    return StudentTask(student, {"01.ipynb": b"x" * size}, GradingOptions())


class Grading:
    """grade_student, scripted: each student's attempts fail with the errors listed, then succeed."""

    def __init__(self, **failures: list[Exception]):
        self.failures = {student: list(errors) for student, errors in failures.items()}
        self.calls: list[tuple[str, object, bool]] = []

    def __call__(self, task: StudentTask, template) -> StudentResult:
        self.calls.append((task.student_id, template, task.another_follows))
        errors = self.failures.get(task.student_id)
        if errors:
            raise errors.pop(0)
        return StudentResult(task.student_id, worker="fake")


class Progress:
    def __init__(self):
        self.updates: list[StudentResult] = []

    def update(self, result: StudentResult) -> None:
        self.updates.append(result)


class Future:
    """A Dask future whose task runs when its result is first asked (once: its outcome is kept)."""

    def __init__(self, key: str, fn, args, kwargs=None):
        self.key, self._fn, self._args, self._kwargs, self._outcome = key, fn, args, kwargs or {}, None

    def result(self):
        if self._outcome is None:
            try:
                self._outcome = (True, self._fn(*self._args, **self._kwargs))
            except Exception as error:
                self._outcome = (False, error)
        ok, value = self._outcome
        if not ok:
            raise value
        return value


class AsCompleted:
    """dask.distributed.as_completed: futures come out as they finish (here, the latest added first,
    unlike the order they were sent in), futures added while iterating included."""

    def __init__(self):
        self.pending: list[Future] = []

    def add(self, future: Future) -> None:
        self.pending.append(future)

    def __iter__(self):
        while self.pending:
            yield self.pending.pop()


class Client:
    """The parts of a dask.distributed.Client that DaskRunner uses. As in Dask, a task sent again
    under a key already used is not run again: the earlier future (and its outcome) comes back."""

    def __init__(self, workers: dict | None = None):
        self.workers = {"tls://w1": {"nthreads": 1}, "tls://w2": {"nthreads": 1}} if workers is None else workers
        self.futures: dict[str, Future] = {}
        self.keys: list[str] = []
        self.ran: list = []
        self.scattered: list = []
        self.closed = False
        self.fail_run = False

    def submit(self, fn, *args, key: str, pure: bool = True, **kwargs) -> Future:
        assert pure is False  # every grading task is run, never taken from another's result
        self.keys.append(key)
        return self.futures.setdefault(key, Future(key, fn, args, kwargs))

    def gather(self, futures):
        return [future.result() for future in futures]

    def scatter(self, data, broadcast: bool = False):
        self.scattered.append((data, broadcast))
        return "shared-template"

    def run(self, fn):
        self.ran.append(fn)
        if self.fail_run:
            raise OSError("worker gone")

    def scheduler_info(self) -> dict:
        return {"workers": self.workers}

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def dask(monkeypatch):
    """A DaskRunner on a fake client of two single-threaded workers, with the fake as_completed."""
    fake = types.ModuleType("dask.distributed")
    fake.as_completed = AsCompleted
    monkeypatch.setitem(sys.modules, "dask.distributed", fake)
    runner = DaskRunner(GradingOptions(jobs=3))
    runner.client = Client()
    return runner


def test_grading_order_largest_first():
    """Shared processes take the largest submission first, and the last `processes` tasks expect no follower."""
    tasks = [_task("s", 10), _task("xl", 500), _task("m", 100), _task("l", 300), _task("xs", 1)]
    ordered = in_grading_order(tasks, 3)
    assert [(t.student_id, t.another_follows) for t in ordered] == [
        ("xl", True),
        ("l", True),
        ("m", False),
        ("s", False),
        ("xs", False),
    ]
    assert all(t.another_follows for t in tasks)  # the tasks given are not changed


def test_grading_order_kept_for_one_process():
    """One process keeps the tasks' order and only its last task expects no follower, even with no process count."""
    tasks = [_task("a", 1), _task("b", 9), _task("c", 5)]
    for processes in (1, 0):
        ordered = in_grading_order(tasks, processes, largest_first=False)
        assert [(t.student_id, t.another_follows) for t in ordered] == [("a", True), ("b", True), ("c", False)]
    assert in_grading_order([], 2) == []


def test_here_runner_grades_each_student_in_order(monkeypatch):
    """HereRunner grades each student once, in the order given, and reports each result as it comes."""
    grading = Grading()
    monkeypatch.setattr(runners, "grade_student", grading)
    progress = Progress()
    results = HereRunner(GradingOptions()).run([_task("b", 9), _task("a", 1), _task("c", 5)], "template", progress)
    assert [r.student_id for r in results] == ["b", "a", "c"]
    assert progress.updates == results
    assert grading.calls == [("b", "template", True), ("a", "template", True), ("c", "template", False)]


def test_here_runner_retries_failed_student_once(monkeypatch):
    """A student whose grading fails once is graded again and their result kept."""
    grading = Grading(a=[RuntimeError("flaky")])
    monkeypatch.setattr(runners, "grade_student", grading)
    results = HereRunner(GradingOptions()).run([_task("a"), _task("b")], {}, Progress())
    assert [(r.student_id, r.worker, r.failed) for r in results] == [("a", "fake", []), ("b", "fake", [])]
    assert [call[0] for call in grading.calls] == ["a", "a", "b"]


class StoppedMidGrading(Grading):
    """grade_student, scripted, with the run stopped (its Ctrl-C heard) as the first call begins."""

    def __init__(self, monkeypatch, **failures):
        super().__init__(**failures)
        self.monkeypatch = monkeypatch

    def __call__(self, task, template):
        from autograder.run import stopping

        self.monkeypatch.setattr(stopping, "_STOPPED_BY", [signal.SIGINT])
        return super().__call__(task, template)


def test_here_runner_grades_no_one_again_after_a_stop(monkeypatch):
    """A student's grading that fails because the run was stopped (Ctrl-C taken by a library,
    which then fails on) is not tried again: the stop goes on, and no later student starts."""
    grading = StoppedMidGrading(monkeypatch, a=[RuntimeError("the kernel was interrupted")])
    monkeypatch.setattr(runners, "grade_student", grading)
    with pytest.raises(KeyboardInterrupt):
        HereRunner(GradingOptions()).run([_task("a"), _task("b")], {}, Progress())
    assert [call[0] for call in grading.calls] == ["a"]


def test_here_runner_failed_twice_is_broken(monkeypatch):
    """A student whose grading fails twice gets a broken result naming the error, and the next student is graded."""
    grading = Grading(a=[RuntimeError("one"), ValueError("two"), RuntimeError("never tried")])
    monkeypatch.setattr(runners, "grade_student", grading)
    progress = Progress()
    results = HereRunner(GradingOptions()).run([_task("a"), _task("b")], {}, progress)
    assert [call[0] for call in grading.calls] == ["a", "a", "b"]
    broken, graded = results
    assert broken.student_id == "a" and broken.worker == "" and broken.notebooks == {}
    assert broken.failed == [
        Trouble(TroubleKind.GRADER_FAILED, "grading failed twice (ValueError: two); not graded: grade them again")
    ]
    assert graded.failed == [] and progress.updates == results


def test_here_runner_reference_per_notebook(monkeypatch):
    """HereRunner's reference run is one run per notebook of the source, all in one kept session
    (ended once they are run), and leaving it releases the sandboxes."""
    released, kept = [], []
    monkeypatch.setattr(
        runners, "run_reference", lambda name, source, options, keep_for: (name, len(source.files), keep_for)
    )
    monkeypatch.setattr(runners, "release_reference_session", lambda: kept.append("ended"))
    monkeypatch.setattr(runners, "release_sandboxes", lambda: released.append(True))
    source = CourseSource(b"", {"source/ps1/02.ipynb": b"{}", "source/ps1/01.ipynb": b"{}"})
    with HereRunner(GradingOptions()) as runner:
        runner.start_reference(source)
        runs = runner.reference_runs()
        assert [run[:2] for run in runs] == [("01.ipynb", 2), ("02.ipynb", 2)]
        assert runs[0][2] == runs[1][2] and runs[0][2]  # one session, kept for this run's notebooks
        assert kept == ["ended"] and released == []
    assert released == [True]


def test_dask_runner_returns_each_result_once(dask, monkeypatch):
    """Every student's result comes back once, whatever order the tasks finish in, each reported to progress."""
    grading = Grading()
    monkeypatch.setattr(runners, "grade_student", grading)
    progress = Progress()
    students = ["e", "a", "d", "b", "c"]
    results = dask.run([_task(s, ord(s)) for s in students], {"template": b""}, progress)
    assert sorted(r.student_id for r in results) == sorted(students)
    assert progress.updates == results
    assert sorted(call[0] for call in grading.calls) == sorted(students)
    # The template is sent to every worker once; each task gets the handle, not the bytes.
    assert dask.client.scattered == [({"template": b""}, True)]
    assert {call[1] for call in grading.calls} == {"shared-template"}
    assert dask.client.ran == [runners.warm_up]


def test_dask_runner_keys_unique_with_run_id(dask, monkeypatch):
    """Each task's key is new and names this run's id, the student and the attempt."""
    monkeypatch.setattr(runners, "grade_student", Grading())
    dask.run([_task("ada"), _task("bo")], {}, Progress())
    assert sorted(dask.client.keys) == [
        f"autograder-{dask.run_id}-grade-ada-1",
        f"autograder-{dask.run_id}-grade-bo-1",
    ]
    assert DaskRunner(GradingOptions()).run_id != dask.run_id


def test_dask_runner_retries_under_new_key(dask, monkeypatch):
    """A task that fails once is sent again under a key of its own, and the second attempt's result is kept."""
    grading = Grading(ada=[OSError("worker died")])
    monkeypatch.setattr(runners, "grade_student", grading)
    results = dask.run([_task("ada"), _task("bo")], {}, Progress())
    assert sorted((r.student_id, r.worker, tuple(r.failed)) for r in results) == [
        ("ada", "fake", ()),
        ("bo", "fake", ()),
    ]
    assert len(dask.client.keys) == len(set(dask.client.keys)) == 3
    assert f"autograder-{dask.run_id}-grade-ada-2" in dask.client.keys
    assert [call[0] for call in grading.calls].count("ada") == 2


def test_dask_runner_submits_no_task_again_after_a_stop(dask, monkeypatch):
    """A task failed by the run's stop is not submitted again under a new key: the stop goes on."""
    grading = StoppedMidGrading(monkeypatch, a=[RuntimeError("the kernel was interrupted")])
    monkeypatch.setattr(runners, "grade_student", grading)
    with pytest.raises(KeyboardInterrupt):
        dask.run([_task("a")], {}, Progress())
    assert [call[0] for call in grading.calls] == ["a"]
    assert dask.client.keys == [f"autograder-{dask.run_id}-grade-a-1"]


def test_dask_runner_failed_twice_is_broken(dask, monkeypatch):
    """A task that fails twice gives one broken result naming the error, and is not sent a third time."""
    grading = Grading(ada=[OSError("one"), MemoryError("two"), OSError("three")])
    monkeypatch.setattr(runners, "grade_student", grading)
    results = dask.run([_task("ada"), _task("bo")], {}, Progress())
    by_student = {r.student_id: r for r in results}
    assert len(results) == 2 and set(by_student) == {"ada", "bo"}
    assert [trouble.line() for trouble in by_student["ada"].failed] == [
        "its grading worker failed twice (MemoryError: two); not graded: grade them again"
    ]
    assert by_student["bo"].failed == []
    assert [call[0] for call in grading.calls].count("ada") == 2


def test_dask_runner_orders_tasks_by_worker_count(dask, monkeypatch):
    """Tasks are sent largest first, and the last task of each worker (by the scheduler's count) expects no follower."""
    grading = Grading()
    monkeypatch.setattr(runners, "grade_student", grading)
    dask.run([_task("s", 1), _task("l", 30), _task("m", 20), _task("xs", 0)], {}, Progress())
    sent = [key.split("-grade-")[1] for key in dask.client.keys]
    assert sent == ["l-1", "m-1", "s-1", "xs-1"]
    assert sorted((call[0], call[2]) for call in grading.calls) == [
        ("l", True),
        ("m", True),
        ("s", False),
        ("xs", False),
    ]


def test_dask_runner_no_workers_uses_jobs(dask, monkeypatch):
    """With no worker reported by the scheduler, the runner's own job count decides which tasks expect no follower."""
    grading = Grading()
    monkeypatch.setattr(runners, "grade_student", grading)
    dask.client.workers = {}
    dask.run([_task(s, size) for s, size in (("a", 4), ("b", 3), ("c", 2), ("d", 1))], {}, Progress())
    assert sorted((call[0], call[2]) for call in grading.calls) == [
        ("a", True),
        ("b", False),
        ("c", False),
        ("d", False),
    ]


def test_dask_runner_reference_largest_first(dask, monkeypatch):
    """The reference run sends the largest notebook first, under this run's keys, and gathers every run."""
    monkeypatch.setattr(runners, "run_reference", lambda name, source, options, keep_for: f"ran {name} for {keep_for}")
    source = CourseSource(
        b"",
        {
            "source/ps1/01.ipynb": b"x" * 10,
            "source/ps1/02.ipynb": b"x" * 300,
            "source/ps1/03.ipynb": b"x" * 20,
        },
    )
    dask.start_reference(source)
    assert dask.client.keys == [f"autograder-{dask.run_id}-reference-{n}.ipynb" for n in ("02", "03", "01")]
    # A worker's next notebook of this run may take the session its last one kept (run_reference).
    assert dask.reference_runs() == [f"ran {n}.ipynb for {dask.run_id}" for n in ("02", "03", "01")]


def test_dask_runner_keeps_no_reference_session_on_a_remote_scheduler(dask, monkeypatch):
    """A remote worker's reference notebook keeps no session for the next: a run stopped while the
    worker is busy could not end what it kept (a local worker ends with its run)."""
    monkeypatch.setattr(runners, "run_reference", lambda name, source, options, keep_for: keep_for)
    dask.scheduler = "tls://127.0.0.1:8786"
    dask.start_reference(CourseSource(b"", {"source/ps1/01.ipynb": b"{}", "source/ps1/02.ipynb": b"{}"}))
    assert dask.reference_runs() == [None, None]


@pytest.mark.parametrize(
    "workers, named",
    [({}, "has no workers"), ({"tls://a": {"nthreads": 1}, "tls://b": {"nthreads": 4}}, "tls://b")],
)
def test_dask_runner_refuses_threaded_workers(dask, workers, named):
    """A scheduler with no workers, or with a worker of several threads, is refused and its client closed."""
    dask.client.workers = workers
    with pytest.raises(UsageError, match=named):
        dask._refuse_threaded_workers()
    assert dask.client.closed


def test_dask_runner_accepts_single_threaded(dask):
    """A scheduler whose workers have one thread each is accepted and its client kept open."""
    dask._refuse_threaded_workers()
    assert not dask.client.closed


def test_dask_runner_exit_closes_client(dask):
    """Leaving the runner closes its client even when releasing the workers' sandboxes fails."""
    dask.client.fail_run = True
    assert dask.__exit__(None, None, None) is False
    assert dask.client.ran == [runners.release_sandboxes] and dask.client.closed


def test_a_stop_while_the_workers_close_comes_once_they_have_closed(dask, tmp_path):
    """A Ctrl-C as a finished run closes its local cluster: the close runs to its end, and the stop
    comes after it, before the cluster's folder is removed (cut short, the workers lived on under a
    removed folder and Dask's exit closed them again)."""
    from autograder.run import stopping

    events = []

    class Cluster:
        workers: dict = {}

        def close(self):
            os.kill(os.getpid(), signal.SIGINT)  # as a terminal's Ctrl-C comes, mid-close
            events.append("closed")

    dask.cluster, dask.folder = Cluster(), tmp_path / "cluster"
    dask.folder.mkdir()
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with stopping.listening_for_stops(), pytest.raises(KeyboardInterrupt):
            dask.__exit__(None, None, None)
    finally:
        signal.signal(signal.SIGINT, saved)
    assert events == ["closed"] and dask.client.closed
    assert not (tmp_path / "cluster").exists()


def test_a_stop_while_the_sandboxes_end_comes_once_they_have_ended(monkeypatch):
    """A Ctrl-C as a finished --jobs 1 run ends its sandboxes: they end, then the stop comes
    (cut short, a sandbox's compile-cache files stayed in TMPDIR)."""
    from autograder.run import stopping

    events = []

    def release_sandboxes():
        os.kill(os.getpid(), signal.SIGINT)  # as a terminal's Ctrl-C comes, mid-release
        events.append("released")

    monkeypatch.setattr(runners, "release_sandboxes", release_sandboxes)
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with stopping.listening_for_stops(), pytest.raises(KeyboardInterrupt):
            HereRunner(GradingOptions()).__exit__(None, None, None)
    finally:
        signal.signal(signal.SIGINT, saved)
    assert events == ["released"]


def test_a_stop_while_an_instructors_cluster_is_left_is_not_held(dask):
    """With an instructor's scheduler (no cluster of the run's own), whose workers may not answer,
    a Ctrl-C while the run leaves them stops it there."""
    from autograder.run import stopping

    def run(fn):
        os.kill(os.getpid(), signal.SIGINT)  # as a terminal's Ctrl-C comes, while a worker is asked
        dask.client.ran.append(fn)

    dask.client.run = run
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with stopping.listening_for_stops(), pytest.raises(KeyboardInterrupt):
            dask.__exit__(None, None, None)
    finally:
        signal.signal(signal.SIGINT, saved)
    assert dask.client.ran == [] and not dask.client.closed
