"""A reproducible background load: one process copying a large array in a loop on one core, as another program on
a user's desktop does (a browser, a build, a second model app), so "never slower than plain decoding" can be
measured on any machine (`specdec bench --background-load MB`).

It is a plain child process (numpy's copy: memory traffic and one core's time), pinned to the last core where the
platform allows it, started before the timed runs and ended with them.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

COPY_LOOP = """
import sys, numpy as np
source = np.ones(int(sys.argv[1]) * (1 << 20) // 8)
target = np.empty_like(source)
sys.stdout.write("copying\\n"); sys.stdout.flush()
while True:
    np.copyto(target, source)
"""


def last_core() -> int | None:
    """The highest-numbered core this process may run on (None: the platform does not say)."""
    try:
        return max(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


@contextmanager
def background_load(megabytes: int) -> Iterator[subprocess.Popen | None]:
    """Run a process copying a `megabytes` array in a loop on one core while the block runs (0: none)."""
    if megabytes <= 0:
        yield None
        return
    core = last_core()
    preexec = (lambda: os.sched_setaffinity(0, {core})) if core is not None else None
    load = subprocess.Popen([sys.executable, "-c", COPY_LOOP, str(megabytes)], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, preexec_fn=preexec,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
    try:
        if load.stdout.readline().strip() != b"copying":  # its array is allocated and the loop has begun
            raise RuntimeError(f"the background load did not start (exit {load.wait()})")
        yield load
    finally:
        load.kill()
        load.wait()
        load.stdout.close()
