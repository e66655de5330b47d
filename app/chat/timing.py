"""When are a reply's timings fair: a robust reference for one target step, and the judgement of a busy machine.

Rounds that carry the pair's cost model (`RoundEvent.ar_equivalent_s`) say how much slower than quiet their
target pass ran (`RoundEvent.load`, the cached positions it attended to reckoned in): a reply is flagged when
many of its rounds ran far slower. Without a cost model (a pair announced without one, chats saved before), the
reference is the median of recent single-token target steps (the fresh measurement before each speculative
reply, and every step of a plain AR run); a machine that stays busy makes that median slow too, so the check
compares against the fastest step seen since the pair was loaded. The speedup figure is measured against the
reply's own plain rounds (engine.stats.SpeedupMeter); the flag says that the reply's tokens/s, and any comparison
run after it, met a machine far slower than its quiet speed. The cost model itself is judged when
the pair loads, against the pair's last quiet timing on this machine (`QuietTimings`).
"""
from __future__ import annotations

import hashlib
import json
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from statistics import median

import psutil
from PySide6.QtCore import QAbstractEventDispatcher, QObject, QSettings, Qt, QTimer, Signal

from engine.events import PairInfo, RoundEvent
from engine.stats import BUSY_FACTOR, BUSY_SHARE, typical_load
from words.records import OTHERS_IDLE_CORES, Runtime

RECENT = 32  # samples kept: enough for a stable median, few enough to follow a change of machine load
# A reply and its AR comparison whose rounds' typical loads differ by more than this factor met different machines:
# one of them ran beside the window's drawing or another program and the other did not.
LOAD_MISMATCH = 1.25


class OtherPrograms:
    """How much CPU the machine's other programs used since `start`, and how much a virtual machine's host
    withheld (steal time), from the system's and this process's CPU times: what tells a machine busy with other
    work from this window slowing its own decode."""

    def __init__(self):
        self._process = psutil.Process()
        self._since: tuple[float, float, float, float | None] | None = None

    def _sample(self) -> tuple[float, float, float, float | None]:
        times = psutil.cpu_times()
        # Guest time is counted in user time already. Steal (what the host gave other virtual machines) is apart:
        # it grows with this process's own work (1.4 s of 6 while it kept 2 virtual cores busy, 0.02 of a core's
        # share on a quieter day), and only Linux reports it.
        busy = sum(getattr(times, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq"))
        own = self._process.cpu_times()
        return time.monotonic(), busy, own.user + own.system, getattr(times, "steal", None)

    def start(self) -> None:
        self._since = self._sample()

    def cpu_s(self) -> tuple[float, float] | None:
        """(their CPU seconds, the seconds passed) since `start` (None: not started)."""
        if self._since is None:
            return None
        (began, busy, own, _), (now, busy_now, own_now, _) = self._since, self._sample()
        return max(0.0, (busy_now - busy) - (own_now - own)), now - began

    def cores(self) -> float | None:
        """Their CPU use since `start`, in cores on average (None: not started, or no time passed)."""
        used = self.cpu_s()
        return used[0] / used[1] if used and used[1] > 0 else None

    def host_cores(self) -> float | None:
        """The cores the host withheld since `start`, on average (None: not started, no time passed, or a
        system that does not report steal time)."""
        if self._since is None:
            return None
        (began, _, _, steal), (now, _, _, steal_now) = self._since, self._sample()
        return None if steal is None or steal_now is None or now <= began else (steal_now - steal) / (now - began)


class StepReference:
    """Recent single-token target-step timings; their median is the reference for speedup estimates, and the
    fastest of all of them is the floor a busy machine is judged against."""

    def __init__(self, size: int = RECENT):
        self.samples: deque[float] = deque(maxlen=size)
        self.fastest = 0.0

    def add(self, seconds: float) -> None:
        if seconds > 0:
            self.samples.append(seconds)
            self.fastest = min(self.fastest, seconds) if self.fastest else seconds

    def clear(self) -> None:
        """Forget every timing: another pair (or device, or dtype) has its own speed."""
        self.samples.clear()
        self.fastest = 0.0

    def add_round(self, event: RoundEvent) -> None:
        """A plain AR step is itself a single-token step; a speculative reply brings the engine's fresh
        measurement once, on its first round."""
        if event.gamma == 0 and not event.drafted:
            self.add(event.verify_s)
        elif event.index == 0:
            self.add(event.target_step_s)

    @property
    def seconds(self) -> float:
        return median(self.samples) if self.samples else 0.0


def stalled(event: RoundEvent, reference_s: float) -> bool:
    """A round whose target pass took far longer than on a quiet machine: by the cost model's reckoning where the
    round carries it, else than scoring its tokens one by one at `reference_s`."""
    if event.ar_equivalent_s:
        return event.load > BUSY_FACTOR
    return reference_s > 0 and event.verify_s > BUSY_FACTOR * (len(event.drafted) + 1) * reference_s


def unequal_loads(reply: Sequence[RoundEvent], ar: Sequence[RoundEvent]) -> bool:
    """Whether a reply and its plain AR run ran at such different loads (where both carry the cost model) that
    their measured ratio says more about the machine than about speculation."""
    if not reply or not ar or not all(e.ar_equivalent_s for e in (*reply, *ar)):
        return False
    ratio = typical_load(reply) / typical_load(ar)
    return not 1 / LOAD_MISMATCH <= ratio <= LOAD_MISMATCH


def machine_was_busy(events: Sequence[RoundEvent], reference: StepReference) -> bool:
    """Whether these timings are unfair: over BUSY_SHARE of the rounds' time went to rounds far slower than on a
    quiet machine (by time, not by count: one round stalled 830 ms of a 1.26 s reply that ran at a third of its
    quiet speed), or, without a cost model, the recent median or this reply's fresh step measurement was."""
    with_costs = bool(events) and all(e.ar_equivalent_s for e in events)
    floor = 0.0 if with_costs else reference.fastest
    if not with_costs:
        if not events or floor <= 0:
            return False
        if reference.samples and reference.seconds > BUSY_FACTOR * floor:
            return True
        if events[0].gamma and events[0].target_step_s > BUSY_FACTOR * floor:
            return True
    stalled_s = sum(e.round_s for e in events if stalled(e, floor))
    return stalled_s > BUSY_SHARE * sum(e.round_s for e in events)


@dataclass(frozen=True)
class TimingAtLoad:
    """How a pair's timing at load compares with its last quiet one on this machine."""

    costs: dict  # the cost model to plan and judge on: this timing's, or the quiet one it was far slower than
    busy_step_ms: float = 0.0  # this timing's single-row block, where it was far slower (0: it was not)
    quiet_step_ms: float = 0.0  # ... and the quiet one's
    quiet_at: str = ""  # when the quiet one was timed (ISO date and time)

    @property
    def busy(self) -> bool:
        return self.busy_step_ms > 0

    @property
    def note(self) -> str:
        """Why the pair's costs are the earlier, quiet timing's ("" where they are this one's)."""
        if not self.busy:
            return ""
        return (f"The machine was busy while the pair was timed (a target step took {self.busy_step_ms:.1f} ms, "
                f"{self.quiet_step_ms:.1f} ms when timed here on {self.quiet_at.replace('T', ' ')}): rounds, "
                f"predictions and busy flags use that quiet timing")


class QuietTimings:
    """The last quiet timing at load of each pair on this machine, kept between sessions in `settings` (nothing
    is kept without). Every cost of a timing is the fastest of several, yet a machine busy with other programs all
    through the timing makes even the fastest slow, and the cost model, the predictions and the judgement of busy
    replies would all rest on it: a timing whose single-row block is BUSY_FACTOR times the quiet one's is set aside
    for the quiet one. A second such timing in a row is taken as the machine's speed now (a slower power mode)."""

    GROUP = "quiet_timings"

    def __init__(self, settings: QSettings | None):
        self.settings = settings

    @staticmethod
    def key(info: PairInfo, runtime: Runtime) -> str:
        """What the pair's speed depends on: its weights as they run, and the machine's kernels and threads."""
        parts = [info.target.path, info.target.weights, info.draft and info.draft.path,
                 info.draft and info.draft.weights, info.device, info.dtype, runtime.cpu_capability, runtime.threads,
                 runtime.target_kernel, runtime.draft_weights]
        return hashlib.sha1(json.dumps(parts).encode()).hexdigest()[:16]

    def judge(self, key: str, costs: dict, now: datetime) -> TimingAtLoad:
        if self.settings is None or not costs.get("target_block_ms"):
            return TimingAtLoad(costs)
        name = f"{self.GROUP}/{key}"
        try:
            kept = json.loads(str(self.settings.value(name, "")))
            quiet, step_ms = kept["costs"], float(kept["costs"]["target_block_ms"][0])
            if not set(costs) <= set(quiet):  # kept by another version: not a cost model this one can plan on
                raise KeyError(sorted(set(costs) - set(quiet)))
        except (ValueError, KeyError, IndexError, TypeError):
            kept, step_ms = None, 0.0
        measured_ms = costs["target_block_ms"][0]
        if kept is not None and measured_ms > BUSY_FACTOR * step_ms > 0 and not kept.get("busy_since"):
            self.settings.setValue(name, json.dumps({**kept, "busy_since": now.isoformat(timespec="minutes")}))
            return TimingAtLoad(quiet, measured_ms, step_ms, kept.get("at", ""))
        self.settings.setValue(name, json.dumps({"costs": costs, "at": now.isoformat(timespec="minutes")}))
        return TimingAtLoad(costs)


class QuietLoop(QObject):
    """Emits `quiet`, once after each `watch`, when this thread's event loop has waited QUIET_S with nothing to do.
    A loop's first wait is too early a sign that what was posted has run: the window paints a few milliseconds after
    its layout (the platform schedules the update), and Compare with AR's plain run, started at that first wait, met
    20-35 ms of chart and status bar painting in its first step (38-47 ms against 10)."""

    quiet = Signal()
    QUIET_S = 0.05

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._waiting_since: float | None = None
        self._wake = QTimer(self)  # wakes a loop with nothing else to do, so that a quiet wait ends
        self._wake.setTimerType(Qt.TimerType.PreciseTimer)
        self._wake.setInterval(round(self.QUIET_S * 1000))

    def watch(self) -> None:
        dispatcher = QAbstractEventDispatcher.instance()
        dispatcher.aboutToBlock.connect(self._on_about_to_block, Qt.ConnectionType.UniqueConnection)
        dispatcher.awake.connect(self._on_awake, Qt.ConnectionType.UniqueConnection)
        self._waiting_since = None
        self._wake.start()

    def _on_about_to_block(self) -> None:
        self._waiting_since = time.monotonic()

    def _on_awake(self) -> None:
        if self._waiting_since is not None and time.monotonic() - self._waiting_since >= self.QUIET_S * 0.9:
            dispatcher = QAbstractEventDispatcher.instance()
            dispatcher.aboutToBlock.disconnect(self._on_about_to_block)
            dispatcher.awake.disconnect(self._on_awake)
            self._wake.stop()
            self.quiet.emit()
        self._waiting_since = None


def others_took_cores(others: float | None, host: float | None) -> bool:
    """Whether other programs, or a virtual machine's host, took the cores (OtherPrograms' cores and host_cores;
    None: the system does not tell): slow steps beside idle ones were this app's own doing, no busy machine."""
    return others is None or others + (host or 0.0) > OTHERS_IDLE_CORES
