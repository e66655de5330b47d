"""The speedup vs plain AR that a reply's records show: Σ AR time of its tokens / Σ its round time, never above
γ + 1 (the most tokens a round can yield). A round brings the AR time of its tokens from the pair's cost model
(`RoundEvent.ar_equivalent_s`), times how much slower than quiet the machine ran the round's target forward
(`RoundEvent.load`): plain AR would have run under the same load, the window's own drawing included. Where there
is no cost model, tokens × a reference single-token step stands in. The live chart, the stats line, a reopened chat and the export all use these two functions. Whether the
timings were fair is judged in app/timing.py, by the chat controller.
"""
from __future__ import annotations

from collections.abc import Sequence

from engine.events import RoundEvent


def ar_seconds(event: RoundEvent, reference_s: float) -> float:
    """What plain AR would take for this round's tokens as the machine ran the round: the cost model's figure
    under the round's load, or tokens × the reference."""
    return event.ar_equivalent_s * event.load or len(event.emitted) * reference_s


def estimated_speedup(events: Sequence[RoundEvent], reference_s: float, gamma: int) -> float:
    """Speedup vs plain AR over these rounds, at most γ + 1; 0 when there is nothing to measure it by."""
    rounds_s = sum(e.round_s for e in events)
    if rounds_s <= 0 or any(not e.ar_equivalent_s and reference_s <= 0 for e in events):
        return 0.0
    return min(gamma + 1.0, sum(ar_seconds(e, reference_s) for e in events) / rounds_s)
