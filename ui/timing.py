"""The speedup vs plain AR that a reply's records show: estimated from its rounds and a reference single-token
target step, never above γ + 1 (the most tokens a round can yield). Whether the timings were fair is judged in
app/timing.py, by the chat controller.
"""
from __future__ import annotations

from collections.abc import Sequence

from engine.events import RoundEvent


def estimated_speedup(events: Sequence[RoundEvent], reference_s: float, gamma: int) -> float:
    """Speedup vs plain AR: tokens × reference step / time in rounds, at most γ + 1 (a round's most tokens)."""
    rounds_s = sum(e.round_s for e in events)
    if rounds_s <= 0 or reference_s <= 0:
        return 0.0
    return min(gamma + 1.0, sum(len(e.emitted) for e in events) * reference_s / rounds_s)
