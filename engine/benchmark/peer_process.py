"""What the bench's peers share: each runs in a process of its own, so one that crashes, exits or hangs costs its
own rows only. A failure is a PeerError whose one-line message says which peer, how it ended and what it was doing.

PeerProcess is the bench's end of a long-lived peer that answers one JSON line for each JSON line it is sent.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import tempfile
import time

TIMEOUT_S = 600.0  # the longest one step of a peer may take: starting and loading its model, or one reply
STOP_WAIT_S = 10.0


class PeerError(RuntimeError):
    """A peer could not run or failed; the message says which and why, in one line."""


def ended(returncode: int) -> str:
    """How a process ended, from its return code: "died of SIGILL (illegal instruction)", "exited with code 1"."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            return f"died of signal {-returncode}"
        described = signal.strsignal(-returncode) or ""
        return f"died of {name}" + (f" ({described[0].lower()}{described[1:]})" if described else "")
    return f"exited with code {returncode}"


class PeerProcess:
    """A peer's own process, started at once: `read` takes its next JSON line within TIMEOUT_S, `ask` sends one
    and reads the answer. Once it has failed (died, exited, hung, garbled) it is stopped and every later call
    raises the same PeerError."""

    def __init__(self, name: str, command: list[str], env: dict[str, str] | None = None):
        self.name = name
        self.failure: str | None = None
        self._stderr = tempfile.TemporaryFile()  # a file, not a pipe: a chatty peer cannot block on it
        self._buffer = b""
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                        env=env, start_new_session=True)

    def ask(self, request: dict, doing: str) -> dict:
        """Send `request` and return the answer; `doing` ("while replying to …") goes into a failure's message."""
        if self.failure is None:
            try:
                self.process.stdin.write(json.dumps(request).encode() + b"\n")
                self.process.stdin.flush()
            except BrokenPipeError:
                pass  # it has ended: read() finds out how
        return self.read(doing)

    def read(self, doing: str) -> dict:
        if self.failure is not None:
            raise PeerError(self.failure)
        deadline = time.monotonic() + TIMEOUT_S
        out = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([out], [], [], remaining)[0]:
                self._fail(f"did not answer within {TIMEOUT_S:g} s {doing} (stopped)")
            chunk = os.read(out, 1 << 16)
            if not chunk:
                self._fail(f"{ended(self._wait())} {doing}")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            answer = json.loads(line)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            self._fail(f"answered {line[:80]!r}, not a JSON object, {doing}")
        return answer

    def stop(self) -> None:
        """End the process: its input closed, then killed (its process group) if it has not left."""
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                pipe.close()  # its input at end: the worker leaves
            except BrokenPipeError:
                pass
        self._wait()

    def _wait(self) -> int:
        try:
            return self.process.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self._kill()
            return self.process.wait()

    def _kill(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # start_new_session made it its group's leader
        except ProcessLookupError:
            pass

    def _fail(self, how: str) -> None:
        if self.process.poll() is None:
            self._kill()
        self.stop()
        self._stderr.seek(0)
        last = [line for line in self._stderr.read().decode(errors="replace").splitlines() if line.strip()]
        self.failure = f"{self.name} {how}" + (f": {last[-1].strip()[-300:]}" if last else "")
        raise PeerError(self.failure)
