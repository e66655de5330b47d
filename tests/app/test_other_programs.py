"""Other programs' CPU use, told apart from this process's own: what tells a busy machine from the window slowing
its own decode."""
from __future__ import annotations

import subprocess
import sys
import time
from collections import namedtuple

from app.chat.timing import OtherPrograms

WORK_S = 0.4  # CPU seconds of work, far above the clock's tick


def burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_another_programs_work_is_counted():
    others = OtherPrograms()
    others.start()
    child = subprocess.run([sys.executable, "-c", f"import time\nend = time.process_time() + {WORK_S}\n"
                            "while time.process_time() < end: pass"], check=True)
    assert child.returncode == 0
    used, _ = others.cpu_s()
    assert used >= 0.8 * WORK_S


def test_this_processs_own_work_is_not():
    """The control: the same work in this process (its threads: the decode, the window's drawing)."""
    others = OtherPrograms()
    others.start()
    burn(WORK_S)
    used, _ = others.cpu_s()
    assert used < 0.5 * WORK_S


def test_nothing_is_known_before_it_starts():
    assert OtherPrograms().cpu_s() is None and OtherPrograms().cores() is None


def test_the_hosts_steal_time_is_counted_apart(monkeypatch):
    """1.5 s of steal over 3 s: half a core withheld, while the other programs' count leaves it out; the control, a
    system that does not report steal: unknown, not zero."""
    import psutil

    reported, unreported_times = namedtuple("scputimes", "user system steal"), namedtuple("scputimes", "user system")
    times = iter([(10.0, 5.0), (10.0, 6.5)])
    clock = iter([100.0, 103.0])

    def cpu_times():
        user, steal = next(times)
        return reported(user, 0.0, steal)

    monkeypatch.setattr(psutil, "cpu_times", cpu_times)
    monkeypatch.setattr(time, "monotonic", lambda: next(clock))
    others = OtherPrograms()
    others.start()
    assert others.host_cores() == 0.5
    monkeypatch.setattr(psutil, "cpu_times", lambda: unreported_times(10.0, 0.0))
    clock = iter([100.0, 103.0])
    unreported = OtherPrograms()
    unreported.start()
    assert unreported.host_cores() is None and OtherPrograms().host_cores() is None
