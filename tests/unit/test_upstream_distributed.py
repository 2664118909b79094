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


def test_a_failed_attempt_leaves_dasks_configuration_as_it_was():
    """A Client sets itself as Dask's default scheduler before its loop starts: what a failed attempt
    set is taken back, so the next attempt (and whoever closes the client made) finds it as it was."""
    import dask

    seen = []

    def make():
        seen.append(dask.config.get("scheduler"))
        dask.config.set(scheduler="dask.distributed")  # as Client.__init__: never undone by it
        if len(seen) == 1:
            _start_unlocked()
        return "made"

    def failing():
        dask.config.set(scheduler="dask.distributed")
        _start_unlocked()

    with dask.config.set(scheduler="threads"):
        assert made_despite_slow_loop(make, attempts=2, pause=0) == "made"
        assert seen == ["threads", "threads"]
    with dask.config.set(scheduler="threads"):
        with pytest.raises(AssertionError):
            made_despite_slow_loop(failing, attempts=1, pause=0)
        assert dask.config.get("scheduler") == "threads"


def test_distributeds_own_loop_runner_is_recognised_and_made_again(monkeypatch):
    """distributed's real LoopRunner, its loop thread started late past a shortened wait: its assert
    is the one recognised, and the runner made again starts. Fails when distributed renames or
    rewrites the step this module reads."""
    import threading
    import time
    import types

    import distributed.utils as du

    late = [1]
    factory = du.get_loop_factory

    def late_factory():
        if late[0]:
            late[0] -= 1
            time.sleep(0.5)  # the loop thread starts late ...
        return factory()

    class QuickEvent(threading.Event):
        def wait(self, timeout=None):  # ... past a wait shortened from distributed's 10 s
            return super().wait(0.1 if timeout == 10 else timeout)

    shim = types.ModuleType("threading")
    shim.__dict__.update(threading.__dict__)
    shim.Event = QuickEvent
    monkeypatch.setattr(du, "get_loop_factory", late_factory)
    monkeypatch.setattr(du, "threading", shim)

    def make():
        runner = du.LoopRunner(asynchronous=False)
        runner.start()
        return runner

    late[0] = 1
    with pytest.raises(AssertionError) as raised:
        make()
    assert loop_did_not_start(raised.value)
    late[0] = 1
    runner = made_despite_slow_loop(make, pause=0)
    assert runner.is_started()
    runner.stop()


def test_the_configuration_is_copied_while_a_finalizer_or_thread_changes_it():
    """CI once failed with "dictionary changed size during iteration" in the copy of Dask's
    configuration: a client that failed to connect, closed by the garbage collector, puts back the
    configuration it set. The copy is taken with the collector paused, and again when another
    thread changed the dict mid-copy."""
    import gc

    from autograder.upstream.distributed import config_snapshot

    config = {"a": 1}

    class ChangesTheDictOnce:
        changes = 1

        def __deepcopy__(self, memo):
            if ChangesTheDictOnce.changes:
                ChangesTheDictOnce.changes -= 1
                config[f"added-{len(config)}"] = 2  # as another thread's write, mid-copy
            return self

    config["b"] = ChangesTheDictOnce()
    copied = config_snapshot(config)
    assert set(copied) == set(config) and ChangesTheDictOnce.changes == 0

    collector = []

    class CollectorSeesIt:
        def __deepcopy__(self, memo):
            collector.append(gc.isenabled())
            return self

    was = gc.isenabled()
    config_snapshot({"x": CollectorSeesIt()})
    assert collector == [False] and gc.isenabled() == was

    class AlwaysChanges:
        def __deepcopy__(self, memo):
            config[f"added-{len(config)}"] = 3
            return self

    config = {"c": AlwaysChanges()}
    with pytest.raises(RuntimeError):
        config_snapshot(config, tries=3)
