"""The grading engine: scores stored in the gradebook, parallel = serial, broken submissions,
hostile code, hidden tests kept out of feedback, and validate's exit status.

One small class is graded once serially (module fixture); the parallel and scheduler runs
grade the same class and must produce the same files. No wall-clock thresholds here: timing
lives in `make bench-grading`.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import html
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder.adapters.lesson import ASSIGNMENT, NOTEBOOKS, SHIPPED_MODULES
from autograder.course.outcomes import TroubleKind
from autograder.course.paths import RELEASE, ROOT, SOLUTIONS
from autograder.run.grade import grade
from autograder.run.options import GradingOptions
from autograder.run.tls import SchedulerSecurity
from tests.grading import options, reference_cache
from tests.hidden import hidden_test_lines
from tests.lesson_cache import lesson_run_env

PY = sys.executable
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{Path(PY).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def _copy_all(source: Path, student: Path) -> None:
    student.mkdir(parents=True)
    for name in NOTEBOOKS:
        shutil.copyfile(source / name, student / name)


@pytest.fixture(scope="module")
def klass(tmp_path_factory) -> Path:
    """perfect: the solution notebooks; blank: the release as handed out; broken: one damaged notebook."""
    root = tmp_path_factory.mktemp("submissions")
    _copy_all(SOLUTIONS, root / "perfect")
    _copy_all(RELEASE, root / "blank")
    (root / "broken").mkdir()
    text = (SOLUTIONS / "01-understand.ipynb").read_text()
    (root / "broken" / "01-understand.ipynb").write_text(text[: len(text) // 2])
    return root


@contextlib.contextmanager
def recorded_kernel_messages():
    """Every message this process sends a kernel meanwhile, as JSON text, in the list yielded."""
    from jupyter_client.session import Session

    sent, send = [], Session.send

    def recording(self, stream, msg_or_type, content=None, *args, **kwargs):
        message = msg_or_type if isinstance(msg_or_type, dict) else {"content": content}
        sent.append(json.dumps(message.get("content", content), default=str))
        return send(self, stream, msg_or_type, content, *args, **kwargs)

    Session.send = recording
    try:
        yield sent
    finally:
        Session.send = send


def hidden_lines_in(sent: list[str]) -> list[str]:
    """The hidden-test lines found in these messages (a request is JSON inside a string: its
    text is searched with the escapes undone as well)."""
    text = "\n".join(sent)
    unescaped = text.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
    return [line for line in hidden_test_lines() if line in text or line in unescaped]


@pytest.fixture(scope="module")
def serial(klass, tmp_path_factory):
    """The class graded in this process, every message sent to a learner's kernel recorded
    (`sent`); the reference run is the session's kept one (its own messages are searched in
    test_reference_messages_hold_no_hidden_test)."""
    out = tmp_path_factory.mktemp("serial")
    with recorded_kernel_messages() as sent:
        result = grade(klass, out, options(), io.StringIO())
    result.sent = sent
    return result


def _stored_grades(out: Path, student: str) -> dict[str, list]:
    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}") as gb:
        submission = gb.find_submission(ASSIGNMENT, student)
        return {
            nb.name: [(g.name, g.score, g.max_score, g.needs_manual_grade, g.cell_type) for g in nb.grades]
            for nb in submission.notebooks
        }


def test_perfect_submission_gets_full_marks(serial):
    """A perfect submission gets full marks in the gradebook."""
    stored = _stored_grades(serial.out, "perfect")
    assert set(stored) == {Path(n).stem for n in NOTEBOOKS}
    auto = [g for grades in stored.values() for g in grades if not g[3]]
    assert auto, "no autograded cells found"
    for name, score, maximum, _, _ in auto:
        assert score == maximum, f"{name}: {score}/{maximum}"
    # Written answers wait for a human, and cells.csv says they are pending.
    manual = {g[0] for grades in stored.values() for g in grades if g[3]}
    assert manual == {"answer-why-hvp", "explanation"}
    rows = [r for r in serial.cells if r["student_id"] == "perfect"]
    assert {r["grade_id"] for r in rows if r["pending"] == "yes"} == manual
    assert "perfect" not in serial.broken and "perfect" not in serial.flagged


def test_blank_submission_gets_zeros(serial):
    stored = _stored_grades(serial.out, "blank")
    assert all(score == 0 for grades in stored.values() for _, score, *_ in grades)
    assert "blank" not in serial.broken


def test_malformed_notebook_reported_rest_graded(serial):
    """A malformed notebook is reported and the class still graded."""
    assert any(
        (trouble.kind, trouble.notebook) == (TroubleKind.UNREADABLE, "01-understand.ipynb")
        and "not a readable notebook" in trouble.message
        for trouble in serial.broken["broken"]
    )
    stored = _stored_grades(serial.out, "broken")
    assert all(score == 0 for grades in stored.values() for _, score, *_ in grades)
    assert {r["student_id"] for r in serial.cells} == {"perfect", "blank", "broken"}


def test_output_files(serial):
    with open(serial.out / "cells.csv") as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames == ["student_id", "notebook", "grade_id", "score", "max_score", "pending"]
        rows = list(reader)
    graded_cells = sum(
        1
        for n in NOTEBOOKS
        for c in nbformat.read(SOLUTIONS / n, as_version=4).cells
        if c.metadata.get("nbgrader", {}).get("grade")
    )
    assert len(rows) == 3 * graded_cells
    with open(serial.out / "grades.csv") as handle:
        grades = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert set(grades) == {"perfect", "blank", "broken"}
    assert float(grades["blank"]["score"]) == 0
    for student in ("perfect", "blank"):
        assert sorted(p.name for p in (serial.out / "feedback" / student).glob("*.html")) == sorted(
            Path(n).stem + ".html" for n in NOTEBOOKS
        )


def test_feedback_shows_checks_not_hidden_tests(serial):
    """Feedback shows check messages but never hidden tests."""
    hidden: dict[str, list[str]] = {}
    for name in NOTEBOOKS:
        # Lines of this notebook's hidden tests that appear nowhere in what learners were given
        # (the released notebook and the shipped modules, which tracebacks may quote).
        released = {
            line.strip() for c in nbformat.read(RELEASE / name, as_version=4).cells for line in c.source.splitlines()
        } | {line.strip() for module in SHIPPED_MODULES for line in (RELEASE / module).read_text().splitlines()}
        hidden[Path(name).stem] = [
            line.strip()
            for cell in nbformat.read(SOLUTIONS / name, as_version=4).cells
            for match in re.finditer(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", cell.source, re.S)
            for line in match.group(1).splitlines()
            if any(ch.isalnum() for ch in line) and line.strip() not in released
        ]
    assert any(hidden.values()), "the lesson has hidden tests to hide"
    pages = list((serial.out / "feedback").rglob("*.html"))
    autograded = list((serial.out / "course" / "autograded").rglob("*.ipynb"))
    assert pages and autograded
    for path in pages + autograded:
        text = path.read_text()
        if path.suffix == ".html":
            text = html.unescape(re.sub(r"<[^>]+>", "", text))
        else:  # the cells' source and outputs, as lines
            notebook = nbformat.reads(text, as_version=4)
            text = "\n".join(
                [c.source for c in notebook.cells]
                + [o.get("text", "") for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
            )
        assert "BEGIN HIDDEN TESTS" not in text, path
        if "blank" in path.parts:  # a solution may share a line with a hidden test; the release cannot
            shown = {line.strip() for line in text.splitlines()}
            leaked = [line for line in hidden[path.stem] if line in shown]
            assert leaked == [], f"{path} shows hidden test source: {leaked}"
    blank = (serial.out / "feedback" / "blank" / "02-build.html").read_text()
    assert "where to look" in blank and "[FAIL]" in blank


def test_kernel_messages_hold_no_hidden_test(serial):
    """No message to a kernel holds a line of a hidden test.

    Every message this process sent to a learner's kernel while grading (cells, the judge's
    requests, everything) is searched for each hidden-test line."""
    assert len(hidden_test_lines()) > 40 and len(serial.sent) > 100
    leaked = hidden_lines_in(serial.sent)
    assert leaked == [], f"{len(leaked)} hidden-test line(s) reached a kernel, e.g. {leaked[:3]}"
    assert any("autograder_agent" in message for message in serial.sent)  # the judge did ask


def test_reference_messages_hold_no_hidden_test(tmp_path):
    """No message of a reference run to its kernel holds a line of a hidden test.

    The reference run runs the instructor's own notebooks, hidden tests in their test cells:
    every message it sends its kernel is searched for each hidden-test line. 02-build holds the
    most of them (128 of the lesson's lines), in checks of every kind the judge runs."""
    from autograder.course.task_template import CourseSource
    from autograder.gradebook.class_course import update_class_course
    from autograder.run.reference import run_reference

    course = update_class_course(tmp_path / "course", fresh=True)
    with recorded_kernel_messages() as sent:
        run = run_reference("02-build.ipynb", CourseSource.read(course), options())
    leaked = hidden_lines_in(sent)
    assert leaked == [], f"{len(leaked)} hidden-test line(s) reached the reference run's kernel, e.g. {leaked[:3]}"
    assert run.problems == [] and run.entries and len(sent) > 50
    assert any("autograder_agent" in message for message in sent)  # its test cells were judged
    # Its checks build and run learner programs and a NumPy-only answer: a learner's 02 starts all
    # three helpers ahead.
    assert sorted(run.helpers) == ["artifacts", "builder", "numpy_only"]


def test_reference_notebooks_of_a_run_share_a_kept_session(tmp_path):
    """A worker's reference notebooks of one run share one session, as a student's notebooks do:
    the helpers one notebook started serve the next (each notebook noting only those it asked);
    a notebook of another run never takes it; releasing it ends it and removes its folder."""
    from autograder.course.task_template import CourseSource
    from autograder.gradebook.class_course import update_class_course
    from autograder.run import reference

    source = CourseSource.read(update_class_course(tmp_path / "course", fresh=True))
    try:
        first = reference.run_reference("01-understand.ipynb", source, options(), keep_for="run-a")
        kept = reference._KEPT
        assert first.problems == [] and first.helpers == ["numpy_only"] and kept is not None
        numpy_only = kept.session.judge_helpers()["numpy_only"].process
        second = reference.run_reference("05-evidence.ipynb", source, options(), keep_for="run-a")
        assert second.problems == [] and second.helpers == [] and reference._KEPT is kept
        assert kept.session.judge_helpers()["numpy_only"].process is numpy_only and numpy_only.poll() is None
        other = reference.run_reference("05-evidence.ipynb", source, options(), keep_for="run-b")
        assert other.problems == [] and reference._KEPT is not kept
        assert not kept.scratch.exists() and numpy_only.poll() is not None  # ended with its session
        last = reference._KEPT
    finally:
        reference.release_reference_session()
    assert reference._KEPT is None and not last.scratch.exists()
    # Without keep_for, nothing is kept.
    alone = reference.run_reference("05-evidence.ipynb", source, options())
    assert alone.problems == [] and reference._KEPT is None


def _normalised(out: Path) -> dict[str, str]:
    """Files that must match between runs, minus what legitimately varies (times, timestamps)."""
    files = {"cells.csv": (out / "cells.csv").read_text()}
    grades = list(csv.DictReader(open(out / "grades.csv")))
    files["grades.csv"] = json.dumps([{k: v for k, v in row.items() if k != "timestamp"} for row in grades])
    for page in sorted((out / "feedback").rglob("*.html")):
        text = page.read_text()
        text = re.sub(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?(\+00:00| UTC)?", "<timestamp>", text)
        # Measured times differ from run to run, like timestamps: every decimal number goes.
        # (Scores are compared exactly below, through cells.csv and the gradebook.)
        text = re.sub(r"\d+\.\d+(e[-+]?\d+)?", "<n>", text)
        text = re.sub(r"\d+(?=\s*(µs|ms|ns|s)\b)", "<n>", text)
        text = re.sub(r"[ \t]+", " ", text)
        files[str(page.relative_to(out))] = text
    with Gradebook(f"sqlite:///{out / 'course' / 'gradebook.db'}") as gb:
        rows = []
        for student in ("perfect", "blank", "broken"):
            for nb in gb.find_submission(ASSIGNMENT, student).notebooks:
                rows += [
                    (student, nb.name, g.name, g.auto_score, g.manual_score, g.needs_manual_grade) for g in nb.grades
                ]
                rows += [(student, nb.name, c.name, c.auto_comment) for c in nb.comments]
                rows.append((student, nb.name, nb.flagged, nb.late_submission_penalty))
        files["gradebook"] = json.dumps(rows)
    return files


def _assert_same(expected: dict, found: dict) -> None:
    assert sorted(found) == sorted(expected)
    for name in expected:
        assert found[name] == expected[name], f"{name} differs"


def test_parallel_grading_matches_serial(klass, serial, tmp_path):
    parallel = grade(klass, tmp_path / "parallel", options(jobs=2), io.StringIO())
    assert parallel.broken.keys() == serial.broken.keys()
    _assert_same(_normalised(serial.out), _normalised(parallel.out))


def test_grading_without_the_speedups_matches(klass, serial, tmp_path):
    """The compile cache and the forked kernels change how long grading takes, nothing else."""
    plain = grade(klass, tmp_path / "plain", options(compile_cache=False, fork_kernels=False), io.StringIO())
    assert plain.broken.keys() == serial.broken.keys()
    _assert_same(_normalised(serial.out), _normalised(plain.out))


def test_feedback_is_the_same_without_a_sandbox(klass, serial, tmp_path):
    """--unsafe-no-sandbox changes what learner code can reach, not a score or a byte of feedback
    (the kernel's scratch folder is written as /tmp, where a sandboxed kernel has it). It takes
    the sandboxed serial run's kept reference run, and says so."""
    progress = io.StringIO()
    unsafe = grade(klass, tmp_path / "unsafe", options(unsafe=True), progress)
    assert "reference run: kept from an earlier sandboxed run (its key " in progress.getvalue()
    assert unsafe.broken.keys() == serial.broken.keys()
    _assert_same(_normalised(serial.out), _normalised(unsafe.out))
    assert "performance-05-grade-" not in "".join(
        p.read_text() for p in (tmp_path / "unsafe" / "feedback").rglob("*.html")
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tls_files(folder: Path) -> SchedulerSecurity:
    """The course's TLS files (`autograder tls`), as the grader's client uses them."""
    from autograder.run.tls import make_tls_files

    files = make_tls_files(folder / "tls", ["localhost", "127.0.0.1"], days=1)
    return SchedulerSecurity(str(files["ca.pem"]), str(files["client.pem"]), str(files["client-key.pem"]))


def docs_cluster_commands() -> list[str]:
    """The command lines of docs/instructors.md's Dask section, as an instructor copies them."""
    text = (ROOT / "docs" / "instructors.md").read_text()
    section = text[text.index("**On one machine**") :]
    block = section[section.index("```bash\n") + len("```bash\n") :]
    block = block[: block.index("```")]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def test_docs_cluster_grading_matches_serial(klass, serial, tmp_path):
    """docs/instructors.md's lines for Dask on one machine, word for word but for the port, run
    from the course folder: `autograder tls`, a `dask scheduler`, two `dask worker`s (the worker
    line run twice) over TLS, then `autograder grade --scheduler`: the same files as a local run.
    The grader comes installed (`make venv` installs it); nothing is on PYTHONPATH."""
    commands = docs_cluster_commands()
    assert [c.split()[:2] for c in commands] == [
        ["autograder", "tls"],
        ["dask", "scheduler"],
        ["dask", "worker"],
        ["autograder", "grade"],
    ]
    assert all("--host 127.0.0.1" in c for c in commands[:3]), "one machine: every server on 127.0.0.1"
    port = _free_port()
    bin_dir = Path(PY).parent

    # The instructor's course, the assignment installed (`autograder install-assignment`) with the
    # bundle's config and the class collected into submitted/; grading derives its --out from it:
    # my-course/autograder/performance-05.
    from autograder.course.assignment import new_course

    course = new_course(tmp_path / "my-course")
    shutil.copytree(klass, course / "submitted")

    def line(command: str) -> list[str]:
        words = command.replace("8786", str(port)).split()
        return [str(bin_dir / words[0]), *words[1:]]

    env = {k: v for k, v in ENV.items() if k != "PYTHONPATH"}
    made = subprocess.run(line(commands[0]), cwd=course, env=env, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    logs = open(tmp_path / "dask.log", "w")
    started = [
        subprocess.Popen(line(command), cwd=course, env=env, stdout=logs, stderr=subprocess.STDOUT)
        for command in (commands[1], commands[2], commands[2])
    ]
    try:
        from dask.distributed import Client
        from distributed.security import Security

        from autograder.upstream.distributed import made_despite_slow_loop

        tls = course / "tls"
        security = Security(
            tls_ca_file=str(tls / "ca.pem"),
            tls_client_cert=str(tls / "client.pem"),
            tls_client_key=str(tls / "client-key.pem"),
            require_encryption=True,
        )
        address = f"tls://127.0.0.1:{port}"
        deadline = time.monotonic() + 90

        # Each client is made as the grader makes its own: again when distributed's event-loop thread
        # did not start within its fixed 10 s (a loaded two-core CI machine).
        def client(**kwargs):
            return made_despite_slow_loop(lambda: Client(address, timeout="5s", **kwargs))

        while True:
            try:
                with client(security=security) as connected:
                    if len(connected.scheduler_info()["workers"]) >= 2:
                        break
            except OSError:  # the scheduler is not up yet; the deadline below bounds the wait
                pass
            assert time.monotonic() < deadline, (tmp_path / "dask.log").read_text()
            time.sleep(1)
        # Without the course's certificate nobody gets in, a learner's kernel included: nor
        # through the HTTP port each Dask server opens beside its TLS one (--preload autograder.run.tls).
        with pytest.raises((OSError, TypeError)):
            client()
        with client(security=security) as connected:
            assert _http_ports_that_answer(connected.scheduler_info()) == []
            # The preload keeps each server's housekeeping rare, as a local cluster's is.
            assert _housekeeping_of(connected) == [QUIET] * 3
        graded = subprocess.run(line(commands[3]), cwd=course, env=env, capture_output=True, text=True, timeout=900)
        assert graded.returncode == 0, graded.stdout[-3000:] + graded.stderr[-3000:]
        _assert_same(_normalised(serial.out), _normalised(course / "autograder" / ASSIGNMENT))
        logs.flush()
        # The servers' HTTP ports are closed: no line announces a dashboard.
        assert "dashboard at" not in (tmp_path / "dask.log").read_text()
    finally:
        for process in started:
            process.terminate()
        for process in started:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        logs.close()


#: A grading cluster's housekeeping (autograder/run/tls.py's keep_housekeeping_rare, runners.py's config).
QUIET = {"profiling": False, "tick_ms": 1000, "monitor_ms": 5000}


def _housekeeping_of(client) -> list[dict]:
    """The scheduler's housekeeping, then each worker's: whether it profiles, how often it ticks
    and reads its counters."""

    # Defined here, so that it travels by value: a cluster's servers cannot import the tests.
    def housekeeping(dask_worker=None, dask_scheduler=None) -> dict:
        timers = (dask_worker or dask_scheduler).periodic_callbacks
        return {
            "profiling": "profile" in timers,
            "tick_ms": timers["tick"].callback_time,
            "monitor_ms": timers["monitor"].callback_time,
        }

    return [client.run_on_scheduler(housekeeping), *client.run(housekeeping).values()]


def _http_ports_that_answer(info: dict) -> list[str]:
    """The HTTP ports (Dask's "dashboard" service, opened with or without a dashboard) of a
    scheduler and its workers that accept a connection on this machine."""
    servers = {"scheduler": info, **{f"worker {address}": worker for address, worker in info["workers"].items()}}
    answering = []
    for name, server in servers.items():
        port = server.get("services", {}).get("dashboard")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        except (OSError, TypeError):
            continue
        answering.append(f"{name}: {port}")
    return answering


def test_a_local_grading_cluster_serves_no_http():
    """The scheduler's HTTP pages name each task, and a grading task's name holds the student's
    id: a local run's cluster (on 127.0.0.1, for anyone on the machine) opens no such port."""
    import signal

    from autograder.run.runners import DaskRunner

    ctrl_c_here = signal.getsignal(signal.SIGINT)
    with DaskRunner(options(jobs=1)) as runner:
        info = runner.client.scheduler_info()
        assert info["services"]["dashboard"] and len(info["workers"]) == 1
        assert _http_ports_that_answer(info) == []

        # Nor does it spend the kernels' CPU on its own housekeeping: no profiles nobody can read,
        # no health tick 50 times a second, in the workers or the scheduler.
        assert _housekeeping_of(runner.client) == [QUIET] * 2

        # A heartbeat lost as the run closes the cluster is no traceback under a finished run.
        # (Defined here, so that it travels by value: a cluster's servers cannot import the tests.)
        def logs_lost_heartbeat(dask_worker=None) -> bool:
            """Whether this worker's log would take the line of a heartbeat that found the scheduler gone."""
            import logging

            from autograder.run.tls import HEARTBEAT_LOST

            record = logging.LogRecord("distributed.worker", logging.ERROR, "", 1, HEARTBEAT_LOST + ".", None, None)
            return bool(logging.getLogger("distributed.worker").filter(record))

        assert list(runner.client.run(logs_lost_heartbeat).values()) == [False]

        # Ctrl-C reaches the workers too (a terminal's whole process group): they leave it to the
        # run, which ends them itself before it removes its folders.
        def ignores_ctrl_c(dask_worker=None) -> bool:
            import signal

            return signal.getsignal(signal.SIGINT) is signal.SIG_IGN

        assert list(runner.client.run(ignores_ctrl_c).values()) == [True]
        # The scheduler runs the same preload in the run's own process, whose Ctrl-C stays as it was.
        assert signal.getsignal(signal.SIGINT) is ctrl_c_here

        # Dask's scratch space, the workers' and the scheduler's, is the run's: in its folder.
        folder = runner.folder
        assert folder is not None and (folder / "dask-scratch-space").is_dir()
    assert not folder.exists(), "the local cluster's folder was left"


def test_insecure_scheduler_is_refused(klass, tmp_path):
    """An unencrypted or unauthenticated scheduler is refused."""
    from autograder.course.errors import UsageError

    with pytest.raises(UsageError, match="TLS"):
        grade(klass, tmp_path / "out", GradingOptions(scheduler="tcp://127.0.0.1:8786"))
    with pytest.raises(UsageError, match="--tls-ca-file"):
        grade(klass, tmp_path / "out", GradingOptions(scheduler="tls://127.0.0.1:8786"))


def _with_answer(source_notebook: Path, grade_id: str, code: str) -> nbformat.NotebookNode:
    notebook = nbformat.read(source_notebook, as_version=4)
    for cell in notebook.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            cell.source = code
    return notebook


def test_timeouts_and_hidden_errors_score_zero(tmp_path):
    """Timeouts and hidden errors score zero and are named.

    A cell that hangs is stopped; code that hides its errors gets 0 and a flag."""
    subs = tmp_path / "subs"
    (subs / "sleepy").mkdir(parents=True)
    (subs / "sneaky").mkdir()
    sleepy = _with_answer(RELEASE / "01-understand.ipynb", "layer-backward", "import time\ntime.sleep(600)")
    nbformat.write(sleepy, subs / "sleepy" / "01-understand.ipynb")
    sneaky = _with_answer(
        RELEASE / "01-understand.ipynb",
        "layer-backward",
        (
            "import os\n"
            f"print('SOLUTIONS VISIBLE:', os.path.exists({str(SOLUTIONS / '01-understand.py')!r}))\n"
            "get_ipython().showtraceback = lambda *args, **kwargs: None\n"
            "def layer_backward(weights, h, h_bar):\n"
            "    raise SystemExit('no report for you')\n"
        ),
    )
    nbformat.write(sneaky, subs / "sneaky" / "01-understand.ipynb")
    result = grade(subs, tmp_path / "out", options(cell_timeout=8), io.StringIO())
    assert any(
        (r.kind, r.notebook) == (TroubleKind.CELL_TIMEOUT, "01-understand.ipynb") for r in result.broken["sleepy"]
    ), result.broken
    scores = {(r["student_id"], r["grade_id"]): r["score"] for r in result.cells}
    assert scores[("sleepy", "test-layer-backward")] == 0
    assert scores[("sneaky", "test-layer-backward")] == 0
    assert any(f.kind is TroubleKind.REVIEW and "IPython" in f.message for f in result.flagged["sneaky"])
    page = (tmp_path / "out" / "feedback" / "sneaky" / "01-understand.html").read_text()
    assert "Flagged for instructor review" in page
    autograded = (
        tmp_path / "out" / "course" / "autograded" / "sneaky" / ASSIGNMENT / "01-understand.ipynb"
    ).read_text()
    assert "SOLUTIONS VISIBLE: False" in autograded
    with Gradebook(f"sqlite:///{tmp_path / 'out' / 'course' / 'gradebook.db'}") as gb:
        assert gb.find_submission_notebook("01-understand", ASSIGNMENT, "sneaky").flagged


def _cli(*args, cwd=ROOT, env=ENV):
    return subprocess.run([PY, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_ungradable_folders_named_rest_graded(tmp_path):
    """Student folders that cannot be graded are named and the rest graded."""
    subs = tmp_path / "subs"
    for name in ("zoë", "ann smith", ".hidden", "ok-1", "empty"):
        (subs / name).mkdir(parents=True)
    for name in ("zoë", "ann smith", ".hidden", "ok-1"):
        shutil.copyfile(RELEASE / "01-understand.ipynb", subs / name / "01-understand.ipynb")
    shutil.copyfile(RELEASE / "01-understand.ipynb", subs / "ok-1" / "scratch.ipynb")
    run = _cli(
        "autograder.run.grade",
        str(subs),
        "--bundle",
        str(ROOT),
        "--out",
        str(tmp_path / "out"),
        "--reference-cache",
        str(reference_cache()),
    )
    assert run.returncode == 0, run.stdout + run.stderr
    graded = {row["student_id"] for row in csv.DictReader(open(tmp_path / "out" / "cells.csv"))}
    assert graded == {"zoë", "ok-1"}
    for name in ("ann smith", ".hidden", "empty"):
        assert f"REJECTED {name!r}: not graded:" in run.stdout, run.stdout
    assert "NOTE    ok-1: scratch.ipynb: not a notebook of the assignment; not graded" in run.stdout
    assert (tmp_path / "out" / "feedback" / "zoë" / "01-understand.html").is_file()


def test_stock_nbgrader_grades_plain_course(tmp_path):
    """Without the grader's lines in any config nbgrader reads, nbgrader's own pipeline runs and
    the checks decide in the kernel: the solutions get every auto-graded point, and the hidden
    tests are in the autograded notebooks, as stock nbgrader leaves them."""
    from autograder.course.assignment import new_course, stock_nbgrader_env, without_the_grader
    from autograder.course.hidden_tests import BEGIN

    course = new_course(tmp_path / "course")
    # An instructor's own course folder without the grader's lines: nbgrader's own pipeline.
    config = course / "nbgrader_config.py"
    config.write_text(without_the_grader(config.read_text()))
    # The lesson's compile cache changes how long the kernels compile, not nbgrader's pipeline.
    env = {**stock_nbgrader_env(tmp_path / "stock-tmp"), **lesson_run_env()}
    for command in (["generate_assignment", ASSIGNMENT, "--force"], ["autograde", ASSIGNMENT, "--force"]):
        if command[0] == "autograde":
            for name in NOTEBOOKS:
                (course / "submitted" / "perfect" / ASSIGNMENT).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(SOLUTIONS / name, course / "submitted" / "perfect" / ASSIGNMENT / name)
        done = subprocess.run(
            [PY, "-m", "nbgrader", *command], cwd=course, env=env, capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        grades = [
            g
            for nb in gb.find_submission(ASSIGNMENT, "perfect").notebooks
            for g in nb.grades
            if not g.needs_manual_grade
        ]
        assert grades and all(g.score == g.max_score for g in grades), [(g.name, g.score) for g in grades]
    autograded = (course / "autograded" / "perfect" / ASSIGNMENT / "02-build.ipynb").read_text()
    assert BEGIN in autograded, "the grader's pipeline ran, not nbgrader's own"
    # The empty config folder jupyter_core makes for each process that reads no config went into
    # the TMPDIR given, which the caller removes, not into the machine's.
    assert [p.name for p in (tmp_path / "stock-tmp").glob("jupyter-clean-cfg-*")]


@pytest.mark.parametrize("layout", ["missing", "empty", "flat", "unknown"])
def test_bad_arguments_exit_2_with_a_message(tmp_path, layout):
    subs = tmp_path / "subs"
    if layout != "missing":
        subs.mkdir()
    if layout == "flat":
        shutil.copyfile(RELEASE / NOTEBOOKS[0], subs / NOTEBOOKS[0])
    elif layout == "unknown":
        (subs / "ann").mkdir()
        shutil.copyfile(RELEASE / NOTEBOOKS[0], subs / "ann" / "homework.ipynb")
    run = _cli("autograder.run.grade", str(subs), "--bundle", str(ROOT), "--out", str(tmp_path / "out"))
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.startswith("error: ") and str(subs) in run.stderr
    assert not (tmp_path / "out").exists()


def test_usage_texts_show_every_option():
    """The usage in autograder/run/grade.py's docstring and in docs/instructors.md lists each option
    `autograder grade` takes (one had drifted without four of them)."""
    import autograder.run.grade

    options = {o for a in autograder.run.grade.command_line()._actions for o in a.option_strings} - {"-h", "--help"}
    usage = autograder.run.grade.__doc__.split("\n\n")[1]
    docs = (ROOT / "docs" / "instructors.md").read_text()
    docs = docs[docs.index("### `autograder grade`, every option") :].split("```")[1]
    for text in (usage, docs):
        shown = set(re.findall(r"--[a-z][a-z-]*", text))
        assert shown == options, f"missing: {sorted(options - shown)}, unknown: {sorted(shown - options)}"


def test_off_switch_help_says_what_it_disables(capsys):
    """--no-fork and --no-compile-cache turn a speed-up off: their help must not read as if they
    turned it on."""
    from autograder.run.grade import main

    with pytest.raises(SystemExit):
        main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    off = "on by default (this flag turns it off):"
    assert f"--no-fork {off} each notebook's kernel is forked from one warm host" in shown
    assert f"--no-compile-cache {off} kernels share the reference run's compiled programs" in shown


def test_validate_fails_failing_passes_passing(tmp_path):
    """`validate` fails a failing notebook and passes a passing one."""
    validate = functools.partial(_cli, "bundle.validate", env={**ENV, **lesson_run_env()})
    blank = validate(str(RELEASE / "01-understand.ipynb"))
    assert blank.returncode == 1, blank.stdout + blank.stderr
    assert "VALIDATION FAILED" in blank.stdout
    # The solution, alone in a folder: validate brings the shipped modules from notebooks/.
    shutil.copyfile(SOLUTIONS / "01-understand.ipynb", tmp_path / "01-understand.ipynb")
    perfect = validate(str(tmp_path / "01-understand.ipynb"))
    assert perfect.returncode == 0, perfect.stdout + perfect.stderr
    assert "Success" in perfect.stdout
    missing = validate(str(tmp_path / "nope.ipynb"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_multithreaded_workers_are_refused(klass, tmp_path):
    """Workers with more than one thread are refused."""
    from dask.distributed import LocalCluster
    from distributed.security import Security

    from autograder.course.errors import UsageError

    files = _tls_files(tmp_path)
    security = Security(
        tls_ca_file=files.ca_file,
        tls_scheduler_cert=files.cert,
        tls_scheduler_key=files.key,
        tls_worker_cert=files.cert,
        tls_worker_key=files.key,
        tls_client_cert=files.cert,
        tls_client_key=files.key,
        require_encryption=True,
    )
    with (
        LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=False,
            protocol="tls://",
            security=security,
            dashboard_address=None,
            host="127.0.0.1",
        ) as cluster,
        pytest.raises(UsageError, match="more than one thread"),
    ):
        grade(klass, tmp_path / "out", GradingOptions(scheduler=cluster.scheduler_address, scheduler_security=files))
