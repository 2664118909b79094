"""The judge's line to the learner's kernel: one request at a time, over nbclient's own client.

Each request runs the agent (autograder/sandboxed/wire.py, then autograder/sandboxed/agent.py, sent as text) in an
execute request of its own; the answer is the one display output of type RESPONSE_MIME it
publishes, decoded as data (never a verdict). A timed executable's questions arrive on the
stdin channel and are answered after the delay the judge chose.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty
from typing import TYPE_CHECKING

import zmq
import zmq.asyncio

from autograder.course.errors import GraderError
from autograder.kernel.helpers import sent_text
from autograder.sandboxed.agent import RESPONSE_MIME
from autograder.sandboxed.wire import WireError, loads

if TYPE_CHECKING:
    from jupyter_client.asynchronous import AsyncKernelClient

#: The biggest answer taken from a kernel, in characters.
MAX_ANSWER = 128 << 20
#: The longest a request waits for a message before it checks that the kernel is alive (ms).
POLL_MS = 50

#: What the kernel runs for every request: the agent (wire.py's text, then agent.py's).
AGENT = sent_text("wire.py", "agent.py")
#: Where a kernel keeps the agent between requests (in its own `sys`: nothing there is trusted).
AGENT_SLOT = "_autograder_agent"


def install(native_arrays: str | None = None, operations: tuple[Path, ...] = ()) -> str:
    """The agent put in place (the first request to a kernel, before the request itself), told
    how the assignment's own arrays are made (agent.NATIVE_ARRAYS), with the requests its
    adapter adds (`operations`: Adapter.kernel_operations, run after the agent's text)."""
    agent = AGENT if not operations else AGENT + sent_text(*operations)
    return (
        "_autograder_g = {'__name__': 'autograder_agent'}\n"
        f"exec(compile({agent!r}, '<grader>', 'exec'), _autograder_g)\n"
        f"_autograder_g['NATIVE_ARRAYS'] = {native_arrays!r}\n"
        f"__import__('sys').__dict__[{AGENT_SLOT!r}] = _autograder_g\n"
        "del _autograder_g\n"
    )


#: The agent of an assignment whose arrays are NumPy's.
INSTALL = install()
ASK = f"__import__('sys').__dict__[{AGENT_SLOT!r}]['answer']({{message!r}})\n"


#: Seconds between looks at whether the grader's event loop still runs, while a request waits.
LOOP_LOOK_S = 1.0


class JudgeUnavailable(GraderError, RuntimeError):
    """The kernel can no longer answer the judge (it died, or stopped answering)."""


@dataclass
class KernelChannel:
    """Requests to the learner's kernel over nbclient's own client, from the judge's thread.

    Each request is an execute request of its own (not kept in the kernel's history) that runs
    the agent; the answer is the one display output of type RESPONSE_MIME it publishes. A
    timed executable's questions arrive on the stdin channel and are answered here, after the
    delay the judge chose; the times they were asked and answered are noted on it.
    """

    client: AsyncKernelClient  # nbclient's
    loop: asyncio.AbstractEventLoop
    interrupt: Callable[[], Awaitable[object]]  # interrupt the kernel
    alive: Callable[[], Awaitable[bool]]  # is the kernel alive?
    timed: dict = field(default_factory=dict)  # id -> TimedExecutable (the judge's copy)
    dead: str | None = None
    installed: bool = False  # the agent is in the kernel (sent with the first request)
    native_arrays: str | None = None  # how the assignment's own arrays are made (Adapter.native_arrays)
    operations: tuple[Path, ...] = ()  # the requests the assignment's adapter adds (Adapter.kernel_operations)

    def request(self, message: dict, deadline: float) -> dict:
        if self.dead:
            raise JudgeUnavailable(self.dead)
        future = asyncio.run_coroutine_threadsafe(self._request(message, deadline), self.loop)
        # The request runs on the grader's event loop, which a stopped run (Ctrl-C, SIGTERM) leaves
        # for good: no answer then comes, and this thread (the judge's, in the loop's executor,
        # which the interpreter joins at exit) would hold the stopped run's exit forever.
        while True:
            try:
                return future.result(timeout=LOOP_LOOK_S)
            except TimeoutError:
                if future.done():  # the request's own TimeoutError
                    raise
                if not self.loop.is_running():
                    future.cancel()
                    self.dead = "the grader stopped"
                    raise JudgeUnavailable(self.dead) from None

    async def _request(self, message: dict, deadline: float) -> dict:
        # The agent's text (19 kB) travels with the first request only; later ones call it where the
        # kernel keeps it. A kernel that lost it (its code removed it) gets it again.
        ask, agent = ASK.format(message=json.dumps(message)), install(self.native_arrays, self.operations)
        response, missing = await self._execute(ask if self.installed else agent + ask, deadline)
        if missing and self.installed:
            response, _ = await self._execute(agent + ask, deadline)
        self.installed = "refused" not in response or response.get("refused") != "the kernel gave no answer"
        return response

    async def _execute(self, code: str, deadline: float) -> tuple[dict, bool]:
        """Run one request's code; (the response, whether the kernel had no agent to answer it)."""
        msg_id = self.client.execute(code, silent=False, store_history=False, allow_stdin=True, stop_on_error=False)
        channels = (self.client.stdin_channel, self.client.iopub_channel, self.client.shell_channel)
        # Woken by the first message on any of the three (a timed executable's question is
        # answered as it arrives), and at least every POLL_MS to check the kernel and the deadline.
        waiting = zmq.asyncio.Poller()
        for channel in channels:
            waiting.register(channel.socket, zmq.POLLIN)
        answer, replied, idle, interrupted, missing = None, False, False, False, False
        while not (replied and idle):
            if time.monotonic() > deadline:
                if interrupted or not await self.alive():
                    self.dead = "the kernel stopped answering the grader's checks"
                    raise JudgeUnavailable(self.dead)
                await self.interrupt()
                interrupted = True
                deadline = time.monotonic() + 10
            got = False
            for channel in channels:
                try:
                    msg = await channel.get_msg(timeout=0)
                except Empty:
                    continue
                got = True
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind = msg["msg_type"]
                if kind == "input_request":
                    await self._timed_event(msg)
                elif kind == "execute_reply":
                    replied = True
                    content = msg.get("content", {})
                    missing = content.get("status") == "error" and AGENT_SLOT in str(content.get("evalue", ""))
                elif kind == "status" and msg["content"].get("execution_state") == "idle":
                    idle = True
                elif kind in ("display_data", "execute_result"):
                    data = msg["content"].get("data", {}).get(RESPONSE_MIME)
                    if isinstance(data, str) and answer is None and len(data) <= MAX_ANSWER:
                        answer = data
            if not got:
                if not await self.alive():
                    self.dead = "the kernel died"
                    raise JudgeUnavailable(self.dead)
                await waiting.poll(timeout=max(1, min(POLL_MS, int(1000 * (deadline - time.monotonic())))))
        if interrupted:
            raise TimeoutError("it ran past its time limit and was interrupted")
        for timed in self.timed.values():
            timed.note("end", 0, time.perf_counter())
        if answer is None:
            return {"refused": "the kernel gave no answer"}, missing
        try:
            response = loads(answer)
        except WireError as error:
            return {"refused": str(error)}, False
        return (response if isinstance(response, dict) else {"refused": "the kernel's answer is not a message"}), False

    async def _timed_event(self, msg) -> None:
        """A timed executable's call or wait: answer after the delay the judge chose for it."""
        received = time.perf_counter()
        try:
            event = loads(str(msg["content"].get("prompt", "")))
            timed = self.timed[int(event["timed"])]
            kind, call = str(event["event"]), int(event["call"])
            if kind not in ("call", "wait") or not 1 <= call <= 10_000:
                raise ValueError(kind)
        except (WireError, KeyError, ValueError, TypeError, OverflowError):  # int(Infinity): OverflowError
            self.client.input("")  # not a question the judge asked for: answered at once, noted nowhere
            return
        if kind == "call":
            timed.note("call", call, received)
        await asyncio.sleep(timed.delay(kind, call))
        if kind == "wait":
            timed.note("waited", call, time.perf_counter())
        self.client.input("")
