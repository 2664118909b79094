"""The grader's private line to a process it starts in a sandbox: one answer per request, tied to it.

Every sandboxed process of the grader (a student's kernel host, the judge's helpers) is started
the same way (`start`):

- its standard input, output and error are /dev/null: nothing of the grader's sits on them, for
  that process or for anything that inherits them;
- its program (and its configuration) comes on a descriptor of its own, read by `BOOTSTRAP`
  and closed before the program runs, so its command line names nothing of the grader's (and
  the program writes zeros over even that: autograder/sandboxed/confine.py);
- the line is two pipes passed as descriptors that only that process holds (confine.private_line
  takes them, closed on exec; what it forks closes them before running anything of a learner's).

Each request carries a fresh nonce and its answer must carry the same one, as one JSON object on
one line (`ControlLine.request`). A line the grader did not ask for (one waiting before a request
is sent, a second line after an answer, an answer with another nonce or in another form) is
refused: `LineViolation`, never read as the answer to a later request.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import subprocess
import threading
import time

from autograder.course.errors import GraderError
from autograder.kernel.sandbox import launch

#: What a sandboxed process runs first (`python -c BOOTSTRAP FD`): its program, read from the
#: descriptor FD, which it closes before running the program.
BOOTSTRAP = (
    "import os, sys\n"
    "_fd = int(sys.argv.pop(1))\n"
    "_text = b''.join(iter(lambda: os.read(_fd, 1 << 20), b''))\n"
    "os.close(_fd)\n"
    "exec(compile(_text, '<grader>', 'exec'))\n"
)
#: In an argv, where `start` puts the descriptor of the program.
PROGRAM_PLACEHOLDER = "{program-fd}"
#: Bytes written at a time (a pipe holds 64 kB): the deadline is checked between them.
WRITE_CHUNK = 1 << 16


class LineError(GraderError, RuntimeError):
    """The process did not answer as asked; the message says how (for the feedback)."""


class LineTimeout(LineError):
    """The process did not take the request, or did not answer it, in time."""


class LineClosed(LineError):
    """The process ended (or closed its end of the line)."""


class LineViolation(LineError):
    """A line the grader did not ask for: refused, and the process is not asked again."""


def nonce() -> str:
    return secrets.token_hex(16)


def program_text(program: str, config: dict) -> str:
    """A program followed by its call on the configuration: `main(config)`."""
    return f"{program}\nimport json as _json\nmain(_json.loads({json.dumps(config)!r}))\n"


class ControlLine:
    """The grader's end of one process's private line (see the module docstring).

    `config()` is what the process's configuration carries of it (the descriptors' numbers and
    the nonce of the process's first line, its "ready"); `pass_fds` the descriptors to pass.
    asker: who asks, as the messages name it ("the judge" for its helpers)."""

    def __init__(self, max_line: int, asker: str = "the grader"):
        self.max_line, self.asker = max_line, asker
        self._requests_in, self._requests_out = os.pipe()  # the process reads, the grader writes
        self._answers_in, self._answers_out = os.pipe()  # the process writes, the grader reads
        self._start = nonce()
        self._buffer = b""
        self._open = [self._requests_in, self._requests_out, self._answers_in, self._answers_out]
        # Set by close(), which another thread may call while this one waits (a run stopped by
        # Ctrl-C ends its students' sandboxes): a descriptor closed under a wait never becomes
        # ready, so each wait of at most a second looks here rather than sitting out its deadline.
        self._closed = False
        # Held by close() and around each look at _closed with the read, write or close that
        # follows it: a number close() freed may be another file's at once (another thread's
        # pipe, a folder rmtree opened), and is then neither read, written nor closed here.
        self._lock = threading.Lock()

    @property
    def pass_fds(self) -> tuple[int, int]:
        return (self._requests_in, self._answers_out)

    def config(self) -> dict:
        return {"line": list(self.pass_fds), "start": self._start}

    def started(self) -> None:
        """The process holds its ends now: the grader closes its copies, and writes without
        blocking (a process that stops reading cannot hold the grader past a deadline).
        LineClosed when another thread closed the line while the process started: its numbers,
        closed then, are not closed again (they may be another file's now)."""
        with self._lock:
            self._check_open()
            for fd in self.pass_fds:
                os.close(fd)
                self._open.remove(fd)  # its number may be another descriptor's from now on
            os.set_blocking(self._requests_out, False)

    # -- one request, one answer ------------------------------------------------------------------
    def await_ready(self, deadline: float) -> dict:
        """The process's first line, the answer to its start."""
        return self._answer(self._start, deadline)

    def request(self, message: dict, deadline: float) -> dict:
        """message sent with a fresh nonce; its answer (without the nonce), read by the deadline."""
        if self._waiting():
            raise LineViolation(f"it sent {self.asker} a line it did not ask for")
        ident = nonce()
        self._write((json.dumps({"nonce": ident, **message}, allow_nan=True) + "\n").encode(), deadline)
        return self._answer(ident, deadline)

    def _answer(self, ident: str, deadline: float) -> dict:
        line = self._read_line(deadline)
        try:
            answer = json.loads(line)
        except (ValueError, RecursionError):
            raise LineViolation(f"its answer was not of {self.asker}'s form") from None
        if not isinstance(answer, dict) or answer.pop("nonce", None) != ident:
            raise LineViolation(f"it sent {self.asker} a line it did not ask for (not the answer to its request)")
        if self._buffer:
            raise LineViolation(f"it sent {self.asker} more than the one line it asked for")
        return answer

    def _waiting(self) -> bool:
        """Whether anything came that nobody asked for (bytes kept, or waiting in the pipe)."""
        if self._buffer:
            return True
        with self._selector(self._answers_in, selectors.EVENT_READ) as selector:
            return bool(selector.select(0))

    def _write(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        with self._selector(self._requests_out, selectors.EVENT_WRITE) as selector:
            while view:
                self._check_open()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LineTimeout(f"it stopped taking {self.asker}'s requests")
                if not selector.select(min(left, 1.0)):
                    continue
                try:
                    with self._lock:  # (its number may be another file's once closed)
                        self._check_open()
                        view = view[os.write(self._requests_out, view[:WRITE_CHUNK]) :]
                except BlockingIOError:
                    continue
                except OSError as error:  # a broken pipe: the process is gone
                    raise LineClosed(f"the process is gone ({error})") from None

    def _read_line(self, deadline: float) -> bytes:
        with self._selector(self._answers_in, selectors.EVENT_READ) as selector:
            while b"\n" not in self._buffer:
                self._check_open()
                left = deadline - time.monotonic()
                # What has come is read even past the deadline (a process started ahead said it was
                # ready long before anyone asked); only a wait ends there.
                if not selector.select(max(0.0, min(left, 1.0))):
                    if left <= 0:
                        raise LineTimeout("it ran past its time limit")
                    continue
                with self._lock:  # (its number may be another file's once closed)
                    self._check_open()
                    chunk = os.read(self._answers_in, 1 << 20)  # ready: it does not block
                if not chunk:
                    raise LineClosed("the process ended (it crashed, or ran into a limit)")
                self._buffer += chunk
                if len(self._buffer) > self.max_line:
                    raise LineViolation(f"its answer was larger than {self.asker} takes")
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _check_open(self) -> None:
        if self._closed:
            raise LineClosed(f"{self.asker} closed the line (it ended the process)")

    def _selector(self, fd: int, events: int) -> selectors.BaseSelector:
        selector = selectors.DefaultSelector()
        try:
            with self._lock:
                self._check_open()
                selector.register(fd, events)
        except BaseException:
            selector.close()
            raise
        return selector

    def close(self) -> None:
        """Close the grader's descriptors of the line (each once: a closed number may be reused).
        A wait on the line in another thread ends within a second, LineClosed."""
        with self._lock:
            self._closed = True
            while self._open:
                os.close(self._open.pop())


def start(argv: list[str], program: str, line: ControlLine, **popen_kwargs) -> subprocess.Popen:
    """Start a sandboxed process (argv from Sandbox.argv, with PROGRAM_PLACEHOLDER where its
    program's descriptor goes): nothing on its standard streams, its program on a descriptor of
    its own, its line on two more."""
    fd = os.memfd_create("program", 0)
    try:
        view = memoryview(program.encode())
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
        argv = [str(fd) if part == PROGRAM_PLACEHOLDER else part for part in argv]
        for stream in ("stdin", "stdout", "stderr"):
            popen_kwargs[stream] = subprocess.DEVNULL
        try:
            process = launch(argv, pass_fds=(fd, *line.pass_fds), **popen_kwargs)
        except BaseException:
            line.close()
            raise
    finally:
        os.close(fd)
    try:
        line.started()
    except LineClosed:  # closed by another thread while it started (a stopped run): nobody will ask it
        process.kill()
        process.wait()
        raise
    return process
