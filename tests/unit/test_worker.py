"""One student's grading task, in pieces and without a kernel (autograder/run/worker.py): nbgrader's
configuration for the task, failures kept as data, the grades read back, the watchdog. The
whole task, with kernels, is in test_grading_engine.py and test_autograder_scores.py."""

from __future__ import annotations

import threading
from pathlib import Path

import nbformat
import pytest
from nbclient.exceptions import DeadKernelError

from autograder.course.assignment import put_venv_on_path
from autograder.course.errors import UsageError
from autograder.course.outcomes import CellGrade
from autograder.course.task_template import CourseSource, TaskTemplate
from autograder.gradebook.class_gradebook import db_url, quiet_gradebook_warnings
from autograder.kernel.sandbox import Limits
from autograder.notebook.execute import FAILURE_CAUSES, Failure, RequireSandbox, SandboxedExecute, context_of
from autograder.notebook.pages import ForPages
from autograder.run import worker
from autograder.run.options import GradingOptions

#: A template with no course in it: enough where only the run's settings matter.
EMPTY = TaskTemplate(CourseSource(b"", {}), gradebook=b"")

put_venv_on_path()  # nbgrader runs alembic from the environment's bin/


class FakeSession:
    def __init__(self):
        self.closed = threading.Event()
        self.sandbox = type("Sandbox", (), {"limits": Limits(output=123)})()

    def close(self) -> None:
        self.closed.set()

    def halt(self, why: str) -> None:
        self.halted = why
        self.close()


def _course(tmp_path: Path, checks_module: bool = True, named: str = "c.Assignments.checks_module") -> Path:
    """A course folder with one notebook in source/ps1 and its nbgrader_config.py, which names the
    checks module (`named`: the setting that does, or "" for none)."""
    course = tmp_path / "course"
    source = course / "source" / "ps1"
    source.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(), source / "01.ipynb")
    if checks_module:
        (source / "remat_checks.py").write_text("")
    config = "c = get_config()\nc.Execute.timeout = 55\n"
    if named == "c.Assignments.checks_module":
        config += "c.Assignments.checks_module = 'remat_checks'\n"
    elif named:
        config += named + " = {'ps1': {'checks_module': 'remat_checks'}}\n"
    (course / "nbgrader_config.py").write_text(config)
    return course


def test_task_runs_grader_preprocessors(tmp_path):
    """The task's nbgrader runs the grader preprocessors with the run's options."""
    course = _course(tmp_path)
    options = GradingOptions(cell_timeout=17, judge_seed=99)
    api = worker.autograde_api(course, options, Limits(output=123))
    config = api.config
    assert config.Execute.timeout == 17 and config.SandboxedExecute.judge_seed == 99
    assert config.SandboxLimits.output == 123  # the session's sandbox's, not a default
    assert "budget" not in config.SandboxedExecute  # each notebook's comes in its context
    source = str(course / "source" / "ps1")
    assert config.SandboxedExecute.judge_source == source and config.CourseDirectory.root == str(course)
    assert config.CourseDirectory.db_url == db_url(course) and config.Autograde.permissions == 644
    # The config had none of the grader's lines: they were added.
    assert SandboxedExecute in config.Autograde.autograde_preprocessors
    assert config.Autograde.autograde_preprocessors[-1] is ForPages
    assert config.Autograde.sanitize_preprocessors[0] is RequireSandbox


def test_missing_checks_module_is_an_error(tmp_path):
    """An assignment that names a checks module its source lacks is an error, never judged in the kernel."""
    with pytest.raises(UsageError, match="holds no remat_checks.py"):
        worker.autograde_api(_course(tmp_path, checks_module=False), GradingOptions(cell_timeout=5), Limits())


def test_no_checks_module_named_nothing_judged(tmp_path):
    """An assignment that names no checks module is graded in the kernel, as nbgrader grades it."""
    api = worker.autograde_api(_course(tmp_path, named=""), GradingOptions(cell_timeout=5), Limits())
    assert api.config.SandboxedExecute.judge_source == ""


def test_checks_module_per_assignment(tmp_path):
    """Each assignment names its own checks module: another assignment's names none for ps1."""
    ps1 = _course(tmp_path / "ps1", named="c.Assignments.settings")
    assert worker.autograde_api(ps1, GradingOptions(), Limits()).config.SandboxedExecute.judge_source != ""
    other = _course(tmp_path / "other", named="c.Assignments.settings")
    text = (other / "nbgrader_config.py").read_text().replace("'ps1'", "'ps2'")
    (other / "nbgrader_config.py").write_text(text)
    assert worker.autograde_api(other, GradingOptions(), Limits()).config.SandboxedExecute.judge_source == ""


class Converter:
    """Stands in for one of nbgrader's converters: it fails the way it is told to."""

    raises: BaseException | None = None

    def convert_single_notebook(self, notebook_filename: str) -> None:
        if self.raises is not None:
            raise self.raises


def test_converter_failure_kept_and_raised():
    """A converter's failure is kept as data and still raised."""
    recording = worker._recording(Converter)()
    recording.raises = DeadKernelError("Kernel died")
    with pytest.raises(DeadKernelError):
        recording.convert_single_notebook("01.ipynb")
    assert recording.failure == Failure(None, "DeadKernelError", FAILURE_CAUSES["DeadKernelError"])
    assert worker._recording(Converter).__name__ == "Converter"  # nbgrader's config sections still apply


def test_converter_success_records_no_failure():
    """A converter that succeeds records no failure."""
    recording = worker._recording(Converter)()
    recording.convert_single_notebook("01.ipynb")
    assert recording.failure is None


def test_notebook_context_reaches_preprocessors():
    """Each notebook's session, record and budget reach the preprocessors that take them, from the
    converter they run in (as nbgrader makes them: each one's parent is the converter's
    exporter), never through the config."""
    from nbconvert.exporters import NotebookExporter
    from traitlets.config import Configurable

    from autograder.notebook.execute import NotebookContext

    class Autograde(Configurable):
        pass

    context = NotebookContext(FakeSession(), budget=12.0)
    exporter = NotebookExporter(parent=worker._recording(Autograde, context)())
    execute, require, pages = (kind(parent=exporter) for kind in (SandboxedExecute, RequireSandbox, ForPages))
    assert execute.context is context and context_of(require) is context and not hasattr(pages, "context")
    assert execute.session is context.session and execute.record is context.record
    assert execute.notebook_budget == 12.0 and execute.autograde_budget == 0.0  # the config's stays as it was
    alone = NotebookExporter(parent=worker._recording(Autograde)())  # nbgrader autograde's own: no context
    assert SandboxedExecute(parent=alone).context is None and context_of(RequireSandbox(parent=alone)) is None


def test_watchdog_ends_sandbox_unless_cancelled():
    """The watchdog ends the sandbox once the time is up and not after a cancel."""
    late, fired = FakeSession(), []
    worker._watchdog(0.01, fired, late)
    assert late.closed.wait(10) and fired == [True]
    assert "time budget" in late.halted  # the kernel's sandbox and the judge's helpers, with the reason
    on_time, fired = FakeSession(), []
    worker._watchdog(3600, fired, on_time).cancel()
    assert not on_time.closed.is_set() and fired == []


def test_notebook_gets_students_time_left():
    """A notebook gets what is left of the student's time and none once it is spent."""
    assert worker.notebook_budget(100.0, student_deadline=1000.0, now=0.0) == 100.0
    assert worker.notebook_budget(100.0, student_deadline=40.0, now=0.0) == 40.0
    assert worker.notebook_budget(100.0, student_deadline=10.5, now=10.0) == 1.0  # a moment left: at least 1 s
    assert worker.notebook_budget(100.0, student_deadline=10.0, now=10.0) is None
    assert worker.notebook_budget(100.0, student_deadline=10.0, now=500.0) is None


def test_grades_return_as_data(tmp_path):
    """The grades come back as data from the task's gradebook."""
    from nbgrader.api import Gradebook

    quiet_gradebook_warnings()  # nbgrader's add_submission trips SQLAlchemy's autoflush warnings
    course = _course(tmp_path)
    with Gradebook(db_url(course)) as gb:
        gb.add_assignment("ps1")
        gb.add_notebook("01", "ps1")
        gb.add_grade_cell("check", "01", "ps1", max_score=2, cell_type="code")
        gb.add_solution_cell("answer", "01", "ps1")
        gb.add_grade_cell("answer", "01", "ps1", max_score=1, cell_type="markdown")
        gb.add_student("ada")
        gb.add_submission("ps1", "ada")
        grade = gb.find_grade("check", "01", "ps1", "ada")
        grade.auto_score, grade.needs_manual_grade = 1.5, False
        gb.db.commit()
    timestamp, notebooks = worker._read_grades(course, "ada")
    assert notebooks["01"].grades["check"] == CellGrade(1.5, False)
    assert notebooks["01"].late_penalty in (None, 0.0)
    assert worker._read_grades(course, "nobody") == (None, {})


def _task(student: str, size: int, fork: bool = True) -> worker.StudentTask:
    return worker.StudentTask(student, {"01.ipynb": b"x" * size}, GradingOptions(fork_kernels=fork))


def test_shared_processes_largest_first():
    """Shared processes take the largest first and the last of each makes nothing ahead."""
    from autograder.run.runners import in_grading_order

    tasks = [_task("small", 10), _task("large", 300), _task("middle", 200), _task("tiny", 1)]
    shared = in_grading_order(tasks, 2)
    assert [(t.student_id, t.another_follows) for t in shared] == [
        ("large", True),
        ("middle", True),
        ("small", False),
        ("tiny", False),
    ]
    serial = in_grading_order(tasks, 1, largest_first=False)
    assert [(t.student_id, t.another_follows) for t in serial] == [
        ("small", True),
        ("large", True),
        ("middle", True),
        ("tiny", False),
    ]
    assert [(t.student_id, t.another_follows) for t in in_grading_order(tasks[:1], 4)] == [("small", False)]


def test_no_sandbox_ahead_without_follower(monkeypatch):
    """No sandbox is made ahead when no student follows or kernels are not forked."""
    made = []
    monkeypatch.setattr(worker, "student_session", lambda task, template: made.append(task) or object())
    monkeypatch.setattr(worker, "start_session", lambda *args: None)
    monkeypatch.setattr(worker, "_AHEAD", None)
    last = worker.StudentTask("last", {}, GradingOptions(), another_follows=False)
    worker.make_next_session(last, EMPTY, "python3")
    worker.make_next_session(_task("unforked", 1, fork=False), EMPTY, "python3")
    assert made == [] and worker._AHEAD is None
    worker.make_next_session(_task("next", 1), EMPTY, "python3")
    assert [t.student_id for t in made] == ["next"] and worker._AHEAD is not None


def test_sandbox_ahead_starts_no_helper(monkeypatch):
    """A sandbox made ahead starts no helper before its student is known."""
    started = []
    monkeypatch.setattr(worker, "student_session", lambda task, template: object())
    monkeypatch.setattr(worker, "start_session", lambda session, kernel_name, helpers=(): started.append(helpers))
    monkeypatch.setattr(worker, "_AHEAD", None)
    worker.make_next_session(_task("next", 1), EMPTY, "python3")
    assert started == [()]


def test_helpers_ahead_are_those_asked():
    """The helpers started ahead are those the reference run saw the submitted notebooks ask."""
    names = ("numpy_only", "artifacts", "builder")
    template = EMPTY.replace(helpers={"01.ipynb": ["numpy_only"], "03.ipynb": ["artifacts"], "05.ipynb": []})
    assert worker.helpers_ahead(template, ["01.ipynb"], True, names) == {"numpy_only"}
    assert worker.helpers_ahead(template, ["05.ipynb"], True, names) == set()
    assert worker.helpers_ahead(template, ["01.ipynb", "03.ipynb"], True, names) == {"numpy_only", "artifacts"}
    # A notebook the reference run noted nothing for (or no record at all): every helper, as before.
    assert worker.helpers_ahead(template, ["02.ipynb"], True, names) == set(names)
    assert worker.helpers_ahead(EMPTY, ["01.ipynb"], True, names) == set(names)
    # Without the judge no helper is ever asked.
    assert worker.helpers_ahead(template, ["02.ipynb"], False, names) == set()


def test_nbgrader_failure_gives_its_reason():
    """A notebook nbgrader could not grade is reported with nbgrader's last error line, not a log nobody keeps."""
    from autograder.run.worker import _nbgrader_said

    log = "[INFO] Updating/creating assignment\n[ERROR] Invalid timestamp string: yesterday\n[ERROR] nbgrader failed\n"
    assert _nbgrader_said({"success": False, "log": log}) == "Invalid timestamp string: yesterday"
    assert _nbgrader_said({"success": False, "error": "Traceback\n  ...\nValueError: bad\n"}) == "ValueError: bad"
    assert _nbgrader_said({"success": False}) == "no reason given"


def test_a_stop_while_a_notebook_is_graded_stops_the_run(tmp_path):
    """Ctrl-C (or SIGTERM, raised as one) while nbgrader converts a student's notebook stops the
    run: nbgrader's capture_log takes every exception with a bare except, and the stop would
    otherwise be one notebook graded 0 ("Canceled") and the run going on with the next."""
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import LoggingConfigurable

    (tmp_path / "source" / "ps1").mkdir(parents=True)
    (tmp_path / "source" / "ps1" / "nb.ipynb").write_text("{}")

    class Stopped(LoggingConfigurable):
        def __init__(self, coursedir=None, **kwargs):
            super().__init__(**kwargs)
            self.coursedir = coursedir

        def start(self) -> None:
            raise KeyboardInterrupt

    api = LoggingConfigurable()
    api.coursedir = CourseDirectory(root=str(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        worker._convert(api, Stopped, "bob")
