"""A grading run stopped halfway, as an instructor stops one: Ctrl-C (SIGINT to the terminal's
whole process group) or SIGTERM (a scheduler's, a `kill`'s), grading here or on a local Dask
cluster (--jobs 2). Either way the run says it stopped, with no traceback and no error of Dask's,
exits 128 + the signal's number, and leaves nothing behind: no --out it made, nothing in its
TMPDIR, no process of its own."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from autograder.course.paths import AUTOGRADER, ROOT

#: Seconds a stopped run may take to end: far above its cleanup, below the waits of 120 s a
#: thread left waiting on a closed line used to sit out.
STOPS_WITHIN_S = 60


#: Run first, in the child: signals as a terminal's foreground job has them (SIGINT at its default,
#: not blocked), then the grader in its place. Python turns an inherited SIG_IGN into no
#: KeyboardInterrupt at all, and a library an earlier test of this process ran may have left SIGINT
#: ignored (ipykernel's and jupyter_core's launchers ignore it): the run would then finish with
#: exit 0 however often it is stopped. (Not a preexec_fn: forking a process that runs JAX's
#: threads, as this one may, can deadlock the child.) Dispositions at their default and the mask
#: survive the exec.
AS_A_TERMINAL_STARTS_IT = (
    "import os, signal, sys\n"
    "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT, signal.SIGTERM])\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)


def _wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds:.0f} s for {what}"
        time.sleep(0.5)


class _Run:
    """`autograder grade` on one sample student (as ann), started as a terminal's foreground job,
    its output in files, its TMPDIR a folder of the test's own."""

    def __init__(self, tmp_path: Path, sample: str, *options: str):
        self.tmp, self.out = tmp_path / "tmp", tmp_path / "out"
        self.tmp.mkdir()
        submissions = tmp_path / "submissions"
        shutil.copytree(AUTOGRADER / "samples" / sample, submissions / "ann")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"TMPDIR": str(self.tmp)}
        command = [sys.executable, "-c", AS_A_TERMINAL_STARTS_IT, sys.executable, "-m", "autograder.run.grade"]
        command += [str(submissions), "--bundle", str(ROOT), "--out", str(self.out), *options]
        self.printed, self.said = tmp_path / "printed.txt", tmp_path / "said.txt"
        with open(self.printed, "w") as stdout, open(self.said, "w") as stderr:
            self.process = subprocess.Popen(
                command, cwd=tmp_path, env=env, stdout=stdout, stderr=stderr, start_new_session=True
            )

    def temporary(self, prefix: str) -> list[str]:
        """Its temporary folders of that name: in TMPDIR, or in its local cluster's folder there,
        the workers' TMPDIR."""
        found = [*self.tmp.glob(f"{prefix}*"), *self.tmp.glob(f"autograder-workers-*/{prefix}*")]
        return [p.name for p in found]

    def stop(self, signum: int) -> None:
        """Stopped as an instructor stops it; fails the test unless it ends within STOPS_WITHIN_S."""
        if signum == signal.SIGINT:
            os.killpg(self.process.pid, signum)  # Ctrl-C reaches every process of the terminal's group
        else:
            os.kill(self.process.pid, signum)
        try:
            # A second or two when it cleans up; a worker thread that sat out a wait on a closed
            # line (a kernel host's start, 120 s) held the exit for two minutes.
            self.process.wait(timeout=STOPS_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the run had not ended {STOPS_WITHIN_S} s after it was stopped\n{self.where()}")

    def show_threads(self) -> str:
        """What the run prints of its threads on SIGUSR1 (grade.threads_shown_on_request)."""
        before = len(self.said.read_text())
        os.kill(self.process.pid, signal.SIGUSR1)
        _wait_for(lambda: "most recent call first" in self.said.read_text()[before:], 10, "its threads' dump")
        return self.said.read_text()[before:]

    def where(self) -> str:
        """Where a run that did not end is: its threads, its processes, the end of what it said."""
        try:
            threads = self.show_threads()
        except AssertionError as error:
            threads = str(error)
        lines = []
        try:
            tree = [psutil.Process(self.process.pid), *psutil.Process(self.process.pid).children(recursive=True)]
        except psutil.Error as error:
            tree, lines = [], [repr(error)]
        for process in tree:
            try:
                lines.append(f"{process.pid} {process.status()} {' '.join(process.cmdline())[:160]}")
            except psutil.Error as error:  # a sandbox's process, out of reach
                lines.append(f"{process.pid} {error!r}")
        processes = "\n".join(lines)
        return (
            f"its threads:\n{threads[-8000:]}\nits processes:\n{processes}\nit said:\n{self.said.read_text()[-3000:]}"
        )

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def assert_stopped_cleanly(self, signum: int) -> None:
        """Exit 128 + the signal's number, said so with no traceback, nothing left behind."""
        printed, said = self.printed.read_text(), self.said.read_text()
        parent = f"(this test process: SIGINT {signal.getsignal(signal.SIGINT)}, blocked {signal.pthread_sigmask(signal.SIG_BLOCK, [])})"
        assert self.process.returncode == 128 + signum, parent + printed[-2000:] + said[-2000:]
        assert "Traceback" not in printed + said, said[-3000:]
        assert "stopped by" in said and "before the run finished" in said
        assert "ERROR" not in said, said[-3000:]  # Dask's, of workers ended mid-task
        assert not self.out.exists(), "a half-made --out was left"
        assert sorted(p.name for p in self.tmp.iterdir()) == [], "left in its TMPDIR"


SIGNALS = pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
#: Graded here, or on a local cluster of two workers, which Ctrl-C reaches too.
JOBS = pytest.mark.parametrize("jobs", ["1", "2"], ids=["here", "2-jobs"])


@SIGNALS
@JOBS
def test_a_stopped_run_cleans_up_without_a_traceback(tmp_path, signum, jobs):
    # The instructor's notebooks run: a run to stop.
    run = _Run(tmp_path, "sample-partial", "--no-reference-cache", "--jobs", jobs)
    try:
        # Stopped while the reference run works in a temporary folder of its own, --out half made.
        _wait_for(lambda: run.temporary("autograder-reference-"), 300, "the reference run")
        family = [run.process.pid, *(c.pid for c in psutil.Process(run.process.pid).children(recursive=True))]
        run.stop(signum)
    finally:
        run.kill()
    run.assert_stopped_cleanly(signum)
    _wait_for(lambda: not [pid for pid in family if psutil.pid_exists(pid) and _alive(pid)], 30, "its processes to end")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _sandboxed_descendants(pid: int) -> list[int]:
    """The processes below pid that live in a PID namespace of their own (a sandbox's)."""
    from autograder.kernel.kernel_host import namespace_pids

    try:
        below = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [child.pid for child in below if len(namespace_pids(child.pid)) > 1]


@SIGNALS
@JOBS
def test_a_run_stopped_while_a_student_is_graded_stops(tmp_path, signum, jobs):
    """Stopped while a student's notebook is graded (nbgrader's converter at work, whose log
    capture takes every exception, KeyboardInterrupt included), the run stops as above: not one
    notebook scored 0 ("Canceled") and the run going on to exit 0."""
    from tests.grading import reference_cache

    run = _Run(tmp_path, "sample-complete", "--reference-cache", str(reference_cache()), "--jobs", jobs)
    try:
        # The student's phase (its sandboxes' folder made), with the student's kernel host up:
        # it starts as nbgrader converts the first notebook.
        _wait_for(
            lambda: run.temporary("autograder-sandboxes-") and _sandboxed_descendants(run.process.pid),
            900,
            "a student's kernel host",
        )
        if signum == signal.SIGTERM:
            # Asked where it is, a run says it and goes on: the stop below ends it as cleanly.
            assert "File " in run.show_threads() and run.process.poll() is None
        run.stop(signum)
    finally:
        run.kill()
    run.assert_stopped_cleanly(signum)
    assert "Canceled" not in run.printed.read_text() + run.said.read_text()


@pytest.fixture
def stop_state_of_a_new_run(monkeypatch):
    """The stopping module as a run starts, whatever a command run earlier in this test process
    left (a stop recorded, the run finished), and as it was after the test."""
    from autograder.run import stopping

    monkeypatch.setattr(stopping, "_STOPPED_BY", [])
    for name in ("dropped", "finished", "holding", "held"):
        monkeypatch.setattr(stopping._State, name, False)
    return stopping


@JOBS
def test_a_stop_taken_for_a_failure_is_still_a_stop(tmp_path, monkeypatch, jobs, stop_state_of_a_new_run):
    """nbgrader's log capture takes every exception, a stop's KeyboardInterrupt included, and says
    its command failed: a run stopped while it builds its gradebook with nbgrader's API (the
    workers already at the reference run, with --jobs 2) stops, and removes the --out it made."""
    from autograder.run import grade as grading
    from tests.grading import options

    stopping = stop_state_of_a_new_run
    called = []

    def ctrl_c_taken_by_nbgrader(*args, **kwargs):
        called.append(True)
        stopping._STOPPED_BY.append(signal.SIGINT)  # what the handler records as it raises
        raise RuntimeError("nbgrader generate_assignment failed: KeyboardInterrupt")

    monkeypatch.setattr(grading, "prepare_class_course", ctrl_c_taken_by_nbgrader)
    submissions, out = tmp_path / "submissions", tmp_path / "out"
    shutil.copytree(AUTOGRADER / "samples" / "sample-partial", submissions / "ann")
    with pytest.raises(KeyboardInterrupt):
        grading.grade(submissions, out, options(jobs=int(jobs), reference_cache=None))
    assert called, "the run never got to its gradebook"
    assert not out.exists(), "a half-made --out was left"


def test_a_stop_dropped_in_a_notebook_ends_the_student_before_the_next(tmp_path, monkeypatch, stop_state_of_a_new_run):
    """A stop that Python dropped, or a library took, while a notebook was graded (here: recorded as
    the handler records it, then taken) ends the run before the student's next notebook, not a
    whole student later."""
    from autograder.run import grade as grading
    from autograder.run import worker
    from tests.grading import options

    stopping = stop_state_of_a_new_run
    converted = []
    convert = worker._convert

    def stop_taken_in_the_first_notebook(api, converter, student_id, notebook="*", context=None):
        converted.append(notebook)
        failure = convert(api, converter, student_id, notebook, context)
        if len(converted) == 1:
            stopping._STOPPED_BY.append(signal.SIGINT)  # what the handler records as it raises
            stopping._State.dropped = True
        return failure

    monkeypatch.setattr(worker, "_convert", stop_taken_in_the_first_notebook)
    submissions, out = tmp_path / "submissions", tmp_path / "out"
    shutil.copytree(AUTOGRADER / "samples" / "sample-complete", submissions / "ann")
    with pytest.raises(KeyboardInterrupt):
        grading.grade(submissions, out, options(jobs=1))
    assert converted == ["01-understand"], converted
    assert not out.exists(), "a half-made --out was left"


def test_a_stopped_run_removes_the_parents_and_reference_cache_it_made(tmp_path, monkeypatch):
    """--out in folders that did not exist, the reference cache kept beside it (the default): a run
    stopped before it kept a reference run removes OUT, the cache (which holds only its lock) and
    the parents it made; a folder that existed, and what another run keeps in it, stay."""
    from autograder.run import grade as grading
    from autograder.run import stopping
    from tests.grading import options

    def stopped(*args, **kwargs):
        stopping._STOPPED_BY.append(signal.SIGINT)
        raise KeyboardInterrupt

    monkeypatch.setattr(grading, "prepare_class_course", stopped)
    submissions = tmp_path / "submissions"
    shutil.copytree(AUTOGRADER / "samples" / "sample-partial", submissions / "ann")
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / "notes.txt").write_text("the instructor's")
    (tmp_path / "empty-out" / "out").mkdir(parents=True)  # an --out that existed stays
    outs = (tmp_path / "made" / "by" / "the-run" / "out", tmp_path / "kept" / "out", tmp_path / "empty-out" / "out")
    try:
        for out in outs:
            with pytest.raises(KeyboardInterrupt):
                grading.grade(submissions, out, options(jobs=1, reference_cache=None))
            stopping._STOPPED_BY.clear()
        # A reference cache named elsewhere, in folders that did not exist: they go too.
        with pytest.raises(KeyboardInterrupt):
            grading.grade(submissions, tmp_path / "kept" / "out", options(jobs=1, reference_cache=tmp_path / "c" / "d"))
    finally:
        stopping._STOPPED_BY.clear()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty-out", "kept", "submissions"]
    assert [p.name for p in (tmp_path / "kept").iterdir()] == ["notes.txt"]
    assert [p.name for p in (tmp_path / "empty-out").iterdir()] == ["out"]


def test_a_second_run_into_the_same_out_is_refused_and_removes_nothing(tmp_path, monkeypatch):
    """Two runs into one new --out: the one that failed removed the OUT it thought it had made,
    the other's class with it. One run at a time writes an OUT now: the second is refused with a
    message (exit 2), before it looks at OUT, and leaves the first's OUT and folders as they are."""
    from autograder.run import grade as grading
    from autograder.run.grade import OutTaken, writing_out
    from tests.grading import options

    submissions = tmp_path / "submissions"
    shutil.copytree(AUTOGRADER / "samples" / "sample-partial", submissions / "ann")
    out = tmp_path / "made" / "by" / "the-first" / "out"
    with writing_out(out):  # the first run, which made OUT and writes its class there
        out.mkdir()
        (out / "course").mkdir()
        with pytest.raises(OutTaken) as refused:
            grading.grade(submissions, out, options(jobs=1, reference_cache=tmp_path / "made" / "cache"))
        assert str(refused.value) == (
            f"another grading run is writing {out}: wait until it ends, or grade into another --out"
        )
        assert refused.value.exit_code == 2
        assert (out / "course").is_dir()
    assert sorted(p.name for p in out.parent.iterdir()) == ["out"]  # the lock went with the first run
    with writing_out(out):  # and the next run takes it
        pass


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes a read-only folder: CI runs this as an ordinary user")
def test_an_out_whose_folder_cannot_be_written_is_locked_inside(tmp_path):
    from autograder.run.grade import OutTaken, writing_out

    out = tmp_path / "read-only" / "out"
    out.mkdir(parents=True)
    out.parent.chmod(0o555)
    try:
        with writing_out(out):
            assert [p.name for p in out.iterdir()] == [".grading.lock"]
            with pytest.raises(OutTaken), writing_out(out):
                pass
        assert list(out.iterdir()) == []
    finally:
        out.parent.chmod(0o755)


def test_a_run_into_an_out_inside_another_runs_out_is_refused(tmp_path):
    """A run whose OUT lies inside the OUT another run is writing: the other one, failing, removed
    its whole OUT, this one's files and lock with it, and a third run then wrote the same OUT."""
    from autograder.run.grade import OutTaken, writing_out

    outer = tmp_path / "out"
    with writing_out(outer):
        outer.mkdir()
        with pytest.raises(OutTaken) as refused, writing_out(outer / "class" / "nested"):
            pass
        assert str(refused.value).startswith(f"another grading run is writing {outer}, which holds")
        assert [p.name for p in outer.iterdir()] == []
    with writing_out(outer / "class" / "nested"):  # once it ends, the nested one may run
        pass
