"""A grading run stopped halfway, as an instructor stops one: Ctrl-C (SIGINT to the terminal's
whole process group) or SIGTERM (a scheduler's, a `kill`'s). Either way the run says it stopped,
with no traceback, exits 128 + the signal's number, and leaves nothing behind: no --out it made,
no temporary folder, no process of its own."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

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


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stopped_run_cleans_up_without_a_traceback(tmp_path, signum):
    tmp, submissions, out = tmp_path / "tmp", tmp_path / "submissions", tmp_path / "out"
    tmp.mkdir()
    shutil.copytree(AUTOGRADER / "samples" / "sample-partial", submissions / "ann")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"TMPDIR": str(tmp)}
    command = [sys.executable, "-c", AS_A_TERMINAL_STARTS_IT, sys.executable, "-m", "autograder.run.grade"]
    command += [str(submissions), "--bundle", str(ROOT)]
    command += ["--out", str(out), "--no-reference-cache"]  # the instructor's notebooks run: a run to stop
    run = subprocess.Popen(
        command,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        # Stopped while the reference run works in a temporary folder of its own, --out half made.
        _wait_for(
            lambda: any(p.name.startswith("autograder-reference-") for p in tmp.iterdir()), 300, "the reference run"
        )
        family = [run.pid, *(child.pid for child in psutil.Process(run.pid).children(recursive=True))]
        if signum == signal.SIGINT:
            os.killpg(run.pid, signum)  # Ctrl-C reaches every process of the terminal's group
        else:
            os.kill(run.pid, signum)
        try:
            # A second or two when it cleans up; a worker thread that sat out a wait on a closed
            # line (a kernel host's start, 120 s) held the exit for two minutes.
            printed, said = run.communicate(timeout=STOPS_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the run had not ended {STOPS_WITHIN_S} s after it was stopped")
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    parent = f"(this test process: SIGINT {signal.getsignal(signal.SIGINT)}, blocked {signal.pthread_sigmask(signal.SIG_BLOCK, [])})"
    assert run.returncode == 128 + signum, parent + printed[-2000:] + said[-2000:]
    assert "Traceback" not in printed + said, said[-3000:]
    assert "stopped by" in said and "before the run finished" in said
    assert not out.exists(), "a half-made --out was left"
    assert [p.name for p in tmp.iterdir() if p.name.startswith("autograder-")] == []
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


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_run_stopped_while_a_student_is_graded_stops(tmp_path, signum):
    """Stopped while a student's notebook is graded (nbgrader's converter at work, whose log
    capture takes every exception, KeyboardInterrupt included), the run stops as above: not one
    notebook scored 0 ("Canceled") and the run going on to exit 0."""
    from tests.grading import reference_cache

    tmp, submissions, out = tmp_path / "tmp", tmp_path / "submissions", tmp_path / "out"
    tmp.mkdir()
    shutil.copytree(AUTOGRADER / "samples" / "sample-complete", submissions / "ann")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"TMPDIR": str(tmp)}
    command = [sys.executable, "-c", AS_A_TERMINAL_STARTS_IT, sys.executable, "-m", "autograder.run.grade"]
    command += [str(submissions), "--bundle", str(ROOT), "--out", str(out), "--reference-cache", str(reference_cache())]
    printed, said = tmp_path / "printed.txt", tmp_path / "said.txt"
    with open(printed, "w") as stdout, open(said, "w") as stderr:
        run = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=stdout, stderr=stderr, start_new_session=True)
    try:
        # The student's phase (its sandboxes' folder made), with the student's kernel host up:
        # it starts as nbgrader converts the first notebook.
        _wait_for(
            lambda: (
                any(p.name.startswith("autograder-sandboxes-") for p in tmp.iterdir())
                and _sandboxed_descendants(run.pid)
            ),
            900,
            "a student's kernel host",
        )
        if signum == signal.SIGINT:
            os.killpg(run.pid, signum)
        else:
            os.kill(run.pid, signum)
        try:
            run.wait(timeout=STOPS_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the run had not ended {STOPS_WITHIN_S} s after it was stopped")
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    output = printed.read_text() + said.read_text()
    assert run.returncode == 128 + signum, output[-3000:]
    assert "Traceback" not in output and "Canceled" not in output, output[-3000:]
    assert "stopped by" in output
    assert not out.exists(), "a half-made --out was left"
    assert [p.name for p in tmp.iterdir() if p.name.startswith("autograder-")] == []
