"""A lock file that goes with its holder: what keeps two grading runs on one host apart (one OUT,
one reference run of a key).

The file is removed while still held, as its holder leaves: nothing of a run stays behind it. A
run that was waiting on the file then holds one no longer there, sees so, and takes the lock of
the file now at that path instead (`held`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from autograder.course.errors import ExitCode, GraderError

#: Tries at taking a lock file that other runs keep removing (or whose folder a failed run
#: removes) before giving up, instead of looping.
TRIES = 100


class Taken(GraderError, RuntimeError):
    """The lock is held by another run (`held(..., wait=False)`): this run is not to go on."""

    exit_code = ExitCode.USAGE

    def __init__(self, path: Path):
        super().__init__(f"{path} is held by another run")
        self.path = path


@contextlib.contextmanager
def held(path: Path, *, wait: bool, waiting=None):
    """Hold the lock file `path` (its folder made if missing) while in the block. Held by another
    run: wait for it (after calling `waiting()`, once) where `wait`, else raise Taken."""
    path = Path(path)
    told = False
    for attempt in range(1, TRIES + 1):
        try:
            # Again on each try: a run that failed removes the folders it made, when empty, and
            # Path.mkdir is not safe against that (FileExistsError as the folder goes meanwhile).
            path.parent.mkdir(parents=True, exist_ok=True)
            lock = _opened(path)
        except (FileExistsError, FileNotFoundError):
            if attempt == TRIES:
                raise
            continue
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait:
                    raise Taken(path) from None
                if waiting is not None and not told:
                    waiting()
                    told = True
                fcntl.flock(lock, fcntl.LOCK_EX)
            if _is_the_file_at(lock, path):
                break
        except BaseException:
            lock.close()
            raise
        lock.close()  # removed by the run that held it: lock the one now at the path
    else:
        raise OSError(f"{path}: removed under this run {TRIES} times in a row")
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        lock.close()


def _opened(path: Path):
    """The lock file, made where missing; opened for reading where another user made it (a lock
    needs no write access, and two users of one folder must take the same file)."""
    try:
        return open(path, "a")
    except PermissionError:
        if not path.is_file():
            raise
        return open(path)


def held_by_another(path: Path) -> bool:
    """Whether another process holds the lock file `path` now (a missing file is held by nobody).
    Tested by taking it shared for a moment: a run taking it at that very moment is refused."""
    try:
        handle = open(path)
    except OSError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def _is_the_file_at(handle, path: Path) -> bool:
    """Whether the open file `handle` is still the file at `path` (not removed, not replaced)."""
    try:
        there = os.stat(path)
    except FileNotFoundError:
        return False
    here = os.fstat(handle.fileno())
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)
