"""Lines on stderr that name a long phase of work (loading, preparing a file, timing a pair) and say how far it is.

At a terminal a phase's progress redraws one line. A command that does long work on its own (`specdec install-pair`,
`specdec prepare`) runs inside `logged`: there, where stderr is a log (nohup, cron, `2>file`), every phase is a line
of its own and its progress a line every few percent or seconds, never `\r` redraws. Anywhere else (a test, the
app's own dialog, `specdec generate` piped) they are left out, so a failure still reads as its one line.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

LOG_EVERY_PERCENT = 5  # a log's progress line at least this often
LOG_EVERY_S = 30.0  # ... and at least this often, for a phase whose steps are few and slow
QUIET_S = 1.0  # a phase done within this (a kept pair's costs read back) says nothing

_LOGGED: ContextVar[bool] = ContextVar("logged", default=False)


@contextmanager
def logged() -> Iterator[None]:
    """Phases and their progress as lines of their own where stderr is not a terminal, until the block ends."""
    token = _LOGGED.set(True)
    try:
        yield
    finally:
        _LOGGED.reset(token)


def announce(message: str, end: str = "\n") -> None:
    if sys.stderr.isatty():
        print(message, end=end, file=sys.stderr, flush=True)
    elif _LOGGED.get():
        print(message.lstrip("\r"), file=sys.stderr, flush=True)


class Progress:
    """A phase's `progress(done, total)` callback that shows `what` and how far: at a terminal one line redrawn in
    place; inside `logged` a line of its own each LOG_EVERY_PERCENT of the way or LOG_EVERY_S seconds, whichever
    comes first, and at the end. A phase done within QUIET_S says nothing."""

    def __init__(self, what: str, clock: Callable[[], float] = time.monotonic):
        self.what, self.clock = what, clock
        self.started: float | None = None
        self.said: tuple[int, float] | None = None  # the percent and time of the last line a log was given

    def line(self, done: int, total: int) -> str:
        return f"{self.what}: {done}/{total} ({100 * done // total if total else 100}%)"

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if self.started is None:
            self.started = now
        if now - self.started < QUIET_S:
            return
        finished = done >= total
        if sys.stderr.isatty():
            print(f"\r{self.line(done, total)}\033[K", end="\n" if finished else "", file=sys.stderr, flush=True)
            return
        if not _LOGGED.get():
            return
        percent = 100 * done // total if total else 100
        if self.said is None or finished or percent >= self.said[0] + LOG_EVERY_PERCENT or \
                now - self.said[1] >= LOG_EVERY_S:
            print(self.line(done, total), file=sys.stderr, flush=True)
            self.said = (percent, now)
