"""Lines that name a long phase of work (loading, preparing a file, timing a pair) on stderr, for a person at a
terminal: where stderr is not one (a pipe, a test, the app's own dialog) they are left out, so a failure still
reads as its one line."""
from __future__ import annotations

import sys


def announce(message: str, end: str = "\n") -> None:
    if sys.stderr.isatty():
        print(message, end=end, file=sys.stderr, flush=True)
