"""Unit tests of autograder/kernel/kernel_channel.py: KernelChannel.request against a fake kernel
client that answers each execute request with scripted messages, on a fake clock (no kernel, no
real waiting: the poller's wait moves the clock on)."""

from __future__ import annotations

import asyncio
import json
import threading
from queue import Empty
from types import SimpleNamespace

import pytest

from autograder.kernel import kernel_channel
from autograder.kernel.kernel_channel import ASK, INSTALL, JudgeUnavailable, KernelChannel
from autograder.sandboxed.agent import RESPONSE_MIME
from autograder.sandboxed.wire import dumps

START = 1000.0


class Clock:
    """time.monotonic and time.perf_counter, moved on only by the poller's waits."""

    def __init__(self):
        self.now = START

    def monotonic(self) -> float:
        return self.now

    perf_counter = monotonic

    def advance(self, seconds: float) -> None:
        self.now += seconds
        if self.now > START + 600:  # a request that never ends: fail the test instead of hanging it
            raise RuntimeError("the request waited 600 s of fake time")


class Channel:
    """One of the kernel client's channels: messages that become readable at a time of the clock."""

    def __init__(self, clock: Clock, name: str):
        self.clock, self.socket, self.queue = clock, f"{name}-socket", []

    async def get_msg(self, timeout=None):
        assert timeout == 0
        for index, (due, msg) in enumerate(self.queue):
            if due <= self.clock.now:
                del self.queue[index]
                return msg
        raise Empty


class Kernel:
    """An AsyncKernelClient whose kernel answers each execute request with `script(code, msg_id)`:
    (delay in seconds, channel name, message) each."""

    def __init__(self, clock: Clock, script):
        self.clock, self.script = clock, script
        self.channels = {name: Channel(clock, name) for name in ("stdin", "iopub", "shell")}
        self.stdin_channel, self.iopub_channel, self.shell_channel = self.channels.values()
        self.codes: list[str] = []
        self.options: list[dict] = []
        self.inputs: list[tuple[float, str]] = []

    def send(self, msg_id: str, messages) -> None:
        for delay, channel, msg in messages:
            self.channels[channel].queue.append((self.clock.now + delay, msg))

    def execute(self, code: str, **options) -> str:
        self.codes.append(code)
        self.options.append(options)
        msg_id = f"msg-{len(self.codes)}"
        self.send(msg_id, self.script(code, msg_id))
        return msg_id

    def input(self, text: str) -> None:
        self.inputs.append((self.clock.now, text))


def _msg(msg_id: str, msg_type: str, **content) -> dict:
    return {"parent_header": {"msg_id": msg_id}, "msg_type": msg_type, "content": content}


def reply(msg_id: str, delay: float = 0.0, **content) -> list:
    """The end of an execute request: its reply on shell, then the kernel idle on iopub."""
    content.setdefault("status", "ok")
    return [
        (delay, "shell", _msg(msg_id, "execute_reply", **content)),
        (delay, "iopub", _msg(msg_id, "status", execution_state="idle")),
    ]


def shown(msg_id: str, data, delay: float = 0.0, msg_type: str = "display_data") -> tuple:
    return (delay, "iopub", _msg(msg_id, msg_type, data={RESPONSE_MIME: data}))


def answering(response, delay: float = 0.0):
    """A kernel whose agent publishes `response` (encoded) and finishes after `delay` seconds."""
    return lambda code, msg_id: [shown(msg_id, dumps(response), delay), *reply(msg_id, delay)]


class Timed:
    """The judge's copy of a TimedExecutable: what was noted on it, and no delay."""

    def __init__(self):
        self.notes: list[tuple] = []
        self.delays: list[tuple] = []

    def note(self, kind: str, call: int, at: float) -> None:
        self.notes.append((kind, call, at))

    def delay(self, kind: str, call: int) -> float:
        self.delays.append((kind, call))
        return 0.0


@pytest.fixture
def clock(monkeypatch) -> Clock:
    clock = Clock()

    class Poller:
        def __init__(self):
            self.sockets = []

        def register(self, socket, flags) -> None:
            self.sockets.append(socket)

        async def poll(self, timeout: int):
            assert 1 <= timeout <= kernel_channel.POLL_MS
            clock.advance(timeout / 1000)
            return []

    monkeypatch.setattr(kernel_channel, "time", clock)
    monkeypatch.setattr(kernel_channel, "zmq", SimpleNamespace(POLLIN=1, asyncio=SimpleNamespace(Poller=Poller)))
    return clock


@pytest.fixture(scope="module")
def loop():
    """The event loop the kernel client lives on, in a thread of its own (as nbclient's is to the judge)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


class Lifeline:
    """The kernel manager's interrupt and is_alive, noting when they were called."""

    def __init__(self, clock: Clock, kernel: Kernel, alive: bool = True, obeys: bool = True):
        self.clock, self.kernel, self.is_alive, self.obeys = clock, kernel, alive, obeys
        self.interrupts: list[float] = []
        self.checks = 0

    async def interrupt(self) -> None:
        self.interrupts.append(self.clock.now)
        if self.obeys:  # the running code stops: the request ends with an error
            msg_id = f"msg-{len(self.kernel.codes)}"
            self.kernel.send(msg_id, reply(msg_id, status="error", ename="KeyboardInterrupt", evalue=""))

    async def alive(self) -> bool:
        self.checks += 1
        return self.is_alive


def _channel(clock, loop, script, **lifeline) -> tuple[KernelChannel, Kernel, Lifeline]:
    kernel = Kernel(clock, script)
    life = Lifeline(clock, kernel, **lifeline)
    return KernelChannel(kernel, loop, life.interrupt, life.alive), kernel, life


def _ask(message: dict) -> str:
    return ASK.format(message=json.dumps(message))


def test_request_returns_kernels_answer(clock, loop):
    """A request installs the agent with its first execute request and returns the answer the kernel published."""
    channel, kernel, _ = _channel(clock, loop, answering({"result": [1, 2]}))
    assert channel.request({"op": "ping"}, deadline=START + 5) == {"result": [1, 2]}
    assert kernel.codes == [INSTALL + _ask({"op": "ping"})]
    assert kernel.options == [dict(silent=False, store_history=False, allow_stdin=True, stop_on_error=False)]
    assert channel.installed and channel.dead is None


def test_request_after_install_sends_question(clock, loop):
    """Once the agent is installed, a request sends only the call to it."""
    channel, kernel, _ = _channel(clock, loop, answering({"result": 1}))
    channel.request({"n": 1}, deadline=START + 5)
    channel.request({"n": 2}, deadline=START + 5)
    assert kernel.codes[1] == _ask({"n": 2})


def test_request_reinstalls_agent_the_kernel_lost(clock, loop):
    """A kernel whose agent was removed gets it again and the request is answered."""

    def script(code, msg_id):
        if code.startswith(INSTALL):
            return answering({"result": "again"})(code, msg_id)
        return reply(msg_id, status="error", ename="KeyError", evalue=repr(kernel_channel.AGENT_SLOT))

    channel, kernel, _ = _channel(clock, loop, script)
    channel.installed = True
    assert channel.request({"n": 1}, deadline=START + 5) == {"result": "again"}
    assert kernel.codes == [_ask({"n": 1}), INSTALL + _ask({"n": 1})]
    assert channel.installed


def test_request_waits_for_reply_and_idle(clock, loop):
    """A request returns only once the kernel both replied and went idle, the answer taken from before."""

    def script(code, msg_id):
        (end_reply, end_idle) = reply(msg_id)
        return [shown(msg_id, dumps({"result": "late"}), 0.5), (1.0, *end_reply[1:]), (3.0, *end_idle[1:])]

    channel, _, life = _channel(clock, loop, script)
    assert channel.request({}, deadline=START + 5) == {"result": "late"}
    assert START + 3.0 <= clock.now < START + 3.1
    assert life.interrupts == []


def test_request_takes_its_first_answer(clock, loop):
    """Messages of another request are ignored, and of two answers only the first counts."""

    def script(code, msg_id):
        return [
            shown("someone-else", dumps({"result": "not mine"})),
            shown(msg_id, dumps({"result": "first"}), 0.1, msg_type="execute_result"),
            shown(msg_id, dumps({"result": "second"}), 0.2),
            *reply("someone-else"),
            *reply(msg_id, 0.3),
        ]

    channel, _, _ = _channel(clock, loop, script)
    assert channel.request({}, deadline=START + 5) == {"result": "first"}


def test_request_without_answer_reinstalls(clock, loop):
    """A kernel that publishes no answer gives a refusal, and the next request sends the agent again."""
    channel, kernel, _ = _channel(clock, loop, lambda code, msg_id: reply(msg_id))
    assert channel.request({}, deadline=START + 5) == {"refused": "the kernel gave no answer"}
    assert not channel.installed
    channel.request({}, deadline=START + 5)
    assert kernel.codes[1].startswith(INSTALL)


@pytest.mark.parametrize(
    "data, refused",
    [
        ("{not json", "a message that is not JSON (JSONDecodeError)"),
        ("[1, 2]", "the kernel's answer is not a message"),
        ({"result": 1}, "the kernel gave no answer"),  # not text: no answer
        ("x" * 65, "the kernel gave no answer"),  # past MAX_ANSWER: no answer
    ],
)
def test_request_malformed_answer_is_refused(clock, loop, monkeypatch, data, refused):
    """An answer that is not JSON, not a message, not text, or too long comes back as a refusal, never raised."""
    monkeypatch.setattr(kernel_channel, "MAX_ANSWER", 64)
    channel, _, _ = _channel(clock, loop, lambda code, msg_id: [shown(msg_id, data), *reply(msg_id)])
    assert channel.request({}, deadline=START + 5) == {"refused": refused}


def test_request_past_deadline_times_out(clock, loop):
    """A request still running at its deadline interrupts the kernel once and raises TimeoutError."""
    channel, kernel, life = _channel(clock, loop, answering({"result": 1}, delay=60))
    with pytest.raises(TimeoutError, match="interrupted"):
        channel.request({}, deadline=START + 5)
    assert len(life.interrupts) == 1
    assert START + 5 < life.interrupts[0] < START + 5.1
    assert channel.dead is None


def test_request_expired_deadline_interrupts(clock, loop):
    """A request whose deadline has already passed interrupts the kernel before reading any answer."""
    channel, _, life = _channel(clock, loop, answering({"result": 1}))
    with pytest.raises(TimeoutError):
        channel.request({}, deadline=START - 1)
    assert life.interrupts == [START]


def test_request_ignored_interrupt_unavailable(clock, loop):
    """A kernel still silent 10 s after its interrupt makes the judge unavailable, then and for every later request."""
    channel, kernel, life = _channel(clock, loop, lambda code, msg_id: [], obeys=False)
    with pytest.raises(JudgeUnavailable, match="stopped answering"):
        channel.request({}, deadline=START + 2)
    assert len(life.interrupts) == 1
    assert START + 12 < clock.now < START + 12.1
    with pytest.raises(JudgeUnavailable, match="stopped answering"):
        channel.request({}, deadline=START + 100)
    assert len(kernel.codes) == 1


def test_request_dead_kernel_is_unavailable(clock, loop):
    """A kernel that died while the request waits makes the judge unavailable at once."""
    channel, kernel, life = _channel(clock, loop, lambda code, msg_id: [], alive=False)
    with pytest.raises(JudgeUnavailable, match="the kernel died"):
        channel.request({}, deadline=START + 5)
    assert channel.dead == "the kernel died" and life.interrupts == [] and clock.now == START


def test_request_on_dead_channel_sends_nothing(clock, loop):
    """A channel already known dead raises JudgeUnavailable without sending the kernel anything."""
    channel, kernel, _ = _channel(clock, loop, answering({"result": 1}))
    channel.dead = "gone"
    with pytest.raises(JudgeUnavailable, match="gone"):
        channel.request({}, deadline=START + 5)
    assert kernel.codes == []


def test_request_answers_timed_questions(clock, loop):
    """A timed executable's call and wait are answered on stdin after their delay and noted, and its end noted."""

    def script(code, msg_id):
        ask = lambda event, call: (
            0.2 * call,
            "stdin",
            _msg(msg_id, "input_request", prompt=dumps({"timed": 7, "event": event, "call": call})),
        )
        return [ask("call", 1), ask("wait", 2), *answering({"result": 1}, delay=1)(code, msg_id)]

    channel, kernel, _ = _channel(clock, loop, script)
    timed = channel.timed[7] = Timed()
    assert channel.request({}, deadline=START + 5) == {"result": 1}
    assert timed.delays == [("call", 1), ("wait", 2)]
    assert [(kind, call) for kind, call, _ in timed.notes] == [("call", 1), ("waited", 2), ("end", 0)]
    assert [text for _, text in kernel.inputs] == ["", ""]
    assert [round(at - START, 1) for at in (timed.notes[0][2], timed.notes[1][2])] == [0.2, 0.4]


@pytest.mark.parametrize(
    "prompt",
    [
        "not json",
        dumps({"timed": 8, "event": "call", "call": 1}),  # no such timed executable
        dumps({"timed": 7, "event": "run", "call": 1}),
        dumps({"timed": 7, "event": "call", "call": 0}),
        dumps({"timed": 7, "event": "call", "call": 10_001}),
        dumps({"timed": 7, "event": "call"}),
    ],
)
def test_request_answers_unknown_stdin(clock, loop, prompt):
    """A question on stdin the judge did not ask for is answered at once and noted nowhere."""

    def script(code, msg_id):
        return [
            (0.0, "stdin", _msg(msg_id, "input_request", prompt=prompt)),
            *answering({"result": 1}, 0.5)(code, msg_id),
        ]

    channel, kernel, _ = _channel(clock, loop, script)
    timed = channel.timed[7] = Timed()
    assert channel.request({}, deadline=START + 5) == {"result": 1}
    assert kernel.inputs == [(START, "")]
    assert timed.delays == [] and [note[0] for note in timed.notes] == ["end"]


@pytest.mark.parametrize("field", ["timed", "call"])
def test_request_answers_infinite_stdin(clock, loop, field):
    """A question on stdin with an infinite number is answered at once like any other question the judge did not ask for."""

    def script(code, msg_id):
        question = {"timed": 7, "event": "call", "call": 1} | {field: float("inf")}
        return [
            (0.0, "stdin", _msg(msg_id, "input_request", prompt=dumps(question))),
            *answering({"result": 1})(code, msg_id),
        ]

    channel, kernel, _ = _channel(clock, loop, script)
    channel.timed[7] = Timed()
    assert channel.request({}, deadline=START + 5) == {"result": 1}
    assert kernel.inputs == [(START, "")]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the request's coroutine never runs: that is the point
def test_a_request_on_a_loop_that_stopped_for_good_ends():
    """A run stopped by Ctrl-C or SIGTERM leaves its event loop for good while the judge's thread
    (in the loop's executor, which the interpreter joins at exit) waits for the kernel's answer:
    the wait ends, JudgeUnavailable, instead of holding the stopped run's exit forever."""
    import time

    stopped = asyncio.new_event_loop()  # as a stopped run leaves it: never run again
    channel = KernelChannel(SimpleNamespace(), stopped, None, None)
    raised: list[BaseException] = []

    def ask() -> None:
        try:
            channel.request({"op": "describe", "names": []}, time.monotonic() + 600)
        except BaseException as error:  # noqa: BLE001 - handed to the test
            raised.append(error)

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    thread.join(30)
    try:
        assert not thread.is_alive(), "the request went on waiting for a loop that no longer runs"
        assert len(raised) == 1 and isinstance(raised[0], JudgeUnavailable), raised
        assert channel.dead == "the grader stopped"
    finally:
        stopped.close()
