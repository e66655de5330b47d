"""When are a reply's timings fair: a robust reference for one target step, and the judgement of a busy machine.

The reference is the median of recent single-token target steps (the fresh measurement before each speculative
reply, and every step of a plain AR run). A machine that stays busy makes that median slow too, so the busy
check compares against the machine's quiet speed: the pair's cost model where the rounds carry it
(`RoundEvent.ar_equivalent_s`: what one AR step costs on this machine when it is quiet), else the fastest step
seen since the pair was loaded. The speedup estimate (ui/timing.py) charges plain AR the load each round's
forward ran under; the flag says that the reply's tokens/s, and any comparison run after it, met a machine far
slower than its quiet speed.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from statistics import median

from engine.events import RoundEvent

RECENT = 32  # samples kept: enough for a stable median, few enough to follow a change of machine load
BUSY_FACTOR = 2.0  # a timing this many times the reference is a stall, not the model's speed
BUSY_SHARE = 0.2  # the share of stalled rounds above which a reply's numbers are flagged


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
    """A round whose target pass took far longer than scoring its tokens one by one would on a quiet machine."""
    return reference_s > 0 and event.verify_s > BUSY_FACTOR * (len(event.drafted) + 1) * reference_s


def quiet_step(events: Sequence[RoundEvent], reference: StepReference) -> float:
    """One AR step on a quiet machine: the cost model's, where these rounds carry it, else the fastest seen."""
    modelled = [e.ar_equivalent_s / len(e.emitted) for e in events if e.ar_equivalent_s and e.emitted]
    return median(modelled) if modelled else reference.fastest


def machine_was_busy(events: Sequence[RoundEvent], reference: StepReference) -> bool:
    """Whether these timings are unfair: the recent median, this reply's fresh step measurement or many of its
    rounds ran far slower than a quiet step (see `quiet_step`)."""
    floor = quiet_step(events, reference)
    if not events or floor <= 0:
        return False
    if reference.samples and reference.seconds > BUSY_FACTOR * floor:
        return True
    if events[0].gamma and events[0].target_step_s > BUSY_FACTOR * floor:
        return True
    return sum(stalled(e, floor) for e in events) > BUSY_SHARE * len(events)
