"""A Dask client or local cluster whose event-loop thread did not start in time is made again
(autograder/upstream/distributed.py); any other failure is not."""

from __future__ import annotations

import pytest

from autograder.upstream.distributed import loop_did_not_start, made_despite_slow_loop


def _start_unlocked():
    """Stands for distributed's LoopRunner step of that name: its assert on the loop."""
    loop = None
    assert loop is not None


def _maker(failures: list):
    """A maker that fails as each of `failures` says ("loop": distributed's loop assert, an
    exception: that), then returns "made"; `calls` counts its calls."""

    def make():
        make.calls += 1
        if failures:
            failure = failures.pop(0)
            if failure == "loop":
                _start_unlocked()
            raise failure
        return "made"

    make.calls = 0
    return make


def test_a_loop_that_did_not_start_is_tried_again():
    make = _maker(["loop", "loop"])
    assert made_despite_slow_loop(make, attempts=3, pause=0) == "made"
    assert make.calls == 3


def test_it_is_raised_once_the_attempts_are_spent():
    make = _maker(["loop", "loop", "loop"])
    with pytest.raises(AssertionError) as raised:
        made_despite_slow_loop(make, attempts=3, pause=0)
    assert loop_did_not_start(raised.value) and make.calls == 3


@pytest.mark.parametrize("failure", [AssertionError("another assert"), OSError("refused"), TypeError("no TLS")])
def test_any_other_failure_is_raised_at_once(failure):
    make = _maker([failure])
    with pytest.raises(type(failure)):
        made_despite_slow_loop(make, attempts=3, pause=0)
    assert make.calls == 1


def test_the_loop_assert_is_read_from_where_it_was_raised():
    with pytest.raises(AssertionError) as raised:
        _start_unlocked()
    assert loop_did_not_start(raised.value)
    with pytest.raises(AssertionError) as elsewhere:
        raise AssertionError("an assert of something else")
    assert not loop_did_not_start(elsewhere.value)
    assert not loop_did_not_start(OSError("not an assert"))
