"""`autograder feedback` stopped, or failing, loses no page it had: a student's earlier pages stay
until theirs are made again, and Ctrl-C (which nbgrader takes for a failure of its own) stops the
command after the students done, naming them, instead of going on as if the student had failed."""

from __future__ import annotations

import signal
from pathlib import Path

import nbformat
import pytest

from autograder.run import feedback


@pytest.fixture
def ctrl_c_raises():
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    for signum, before in saved.items():
        signal.signal(signum, before)


def test_a_stop_nbgrader_took_for_a_failure_stops_the_command(monkeypatch, tmp_path, capsys, ctrl_c_raises):
    made = []

    def regenerate_one(api, out, course, student):
        if student == "b":  # as nbgrader's converter does: the Ctrl-C caught, a failed outcome
            try:
                signal.raise_signal(signal.SIGINT)
            except KeyboardInterrupt:
                pass
            raise RuntimeError("nbgrader generate_feedback failed: KeyboardInterrupt")
        made.append(student)
        return [out / "feedback" / student / "01.html"]

    monkeypatch.setattr(feedback, "require_gradebook", lambda out: out / "course")
    monkeypatch.setattr(feedback, "class_students", lambda course: ["a", "b", "c"])
    monkeypatch.setattr(feedback, "open_api", lambda course: (None, None))
    monkeypatch.setattr(feedback, "_regenerate_one", regenerate_one)
    assert feedback.main(["--out", str(tmp_path)]) == 130
    said = capsys.readouterr()
    assert made == ["a"]  # c is not started after the stop
    assert "stopped by Ctrl-C: pages made again for a; b's pages in" in said.err
    assert "FAILED" not in said.err and said.out == ""


def _notebook(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), path)


def test_a_students_earlier_pages_stay_when_theirs_cannot_be_made(tmp_path):
    out, course = tmp_path, tmp_path / "course"
    _notebook(course / "source" / "ps1" / "01.ipynb")
    _notebook(course / "autograded" / "s" / "ps1" / "01.ipynb")
    earlier = out / "feedback" / "s" / "01.html"
    earlier.parent.mkdir(parents=True)
    earlier.write_text("<p>the earlier page</p>")

    class FailingApi:
        def generate_feedback(self, assignment, student, force):
            return {"success": False, "log": "it failed", "error": None}

    with pytest.raises(RuntimeError, match="it failed"):
        feedback._regenerate_one(FailingApi(), out, course, "s")
    assert earlier.read_text() == "<p>the earlier page</p>"
