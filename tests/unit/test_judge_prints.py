"""What a test cell prints while the judge runs it is captured for its report from the judging
thread only: the process's other threads (the run's own, or the program that called the grader,
once a stopped run's judge is still checking) print where they did."""

from __future__ import annotations

import io
import sys
import threading

from autograder.judge.core import _prints_captured


def test_a_judging_threads_prints_are_captured_and_no_one_elses(capsys):
    before = sys.stdout
    captured, inside, done = io.StringIO(), threading.Event(), threading.Event()

    def judging():
        with _prints_captured(captured):
            print("the cell's own line")
            inside.set()
            done.wait(10)
            print("its second line")

    judge = threading.Thread(target=judging)
    judge.start()
    assert inside.wait(10)
    print("the caller's line, meanwhile")  # another thread's: not the cell's
    done.set()
    judge.join(10)
    assert captured.getvalue() == "the cell's own line\nits second line\n"
    assert capsys.readouterr().out == "the caller's line, meanwhile\n"
    assert sys.stdout is before  # put back once no thread captures


def test_captures_in_two_threads_stay_apart():
    outs = [io.StringIO(), io.StringIO()]
    both_in = threading.Barrier(2, timeout=10)

    def judging(k):
        with _prints_captured(outs[k]):
            both_in.wait()
            print(f"cell {k}")
            both_in.wait()

    threads = [threading.Thread(target=judging, args=(k,)) for k in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert [out.getvalue() for out in outs] == ["cell 0\n", "cell 1\n"]


def test_the_judging_thread_sees_its_capture_whole():
    """Every way of writing reaches the capture (writelines too), and what a capture lacks (a file
    descriptor) is lacking, as under contextlib.redirect_stdout: nothing of the cell's goes out raw."""
    import pytest

    captured = io.StringIO()
    with _prints_captured(captured):
        sys.stdout.writelines(["one\n", "two\n"])
        with pytest.raises(io.UnsupportedOperation):
            sys.stdout.fileno()
        assert not hasattr(sys.stdout, "buffer")
    assert captured.getvalue() == "one\ntwo\n"
