"""The speedup vs plain AR that a reply's records show: what plain AR would take for its tokens / Σ its round
time, never above γ + 1 (the most tokens a round can yield). What plain AR would take comes from the pair's cost
model (`RoundEvent.ar_equivalent_s`: quiet-machine figures) at the load the rounds typically ran under
(`engine.stats.ArTime`): plain AR would have met the same machine, the window's own drawing included. Where
there is no cost model, tokens × a reference single-token step stands in. The live chart, the stats line, a
reopened chat and the export all use this. Whether the timings were fair is judged in app/timing.py, by the chat
controller.
"""
from __future__ import annotations

from collections.abc import Sequence

from engine.events import RoundEvent
from engine.stats import ArTime

# Other programs' CPU use while a reply was decoded, in cores on average, at or under which its slow steps were
# this window's own (its drawing and the display server's, beside the decode on few cores): the estimate prices
# plain AR at the load the reply met, drawing included, so it stands, and the machine was not busy.
OTHERS_IDLE_CORES = 0.5
# Steal time at or above this, in cores on average, is named among a slow reply's causes: a quiet decode on 2
# virtual cores saw 0.04 (and once 0.23), the twenty-first walk's slowed replies about 0.46.
HOST_NOTABLE_CORES = 0.3


def estimated_speedup(events: Sequence[RoundEvent], reference_s: float, gamma: int) -> float:
    """Speedup vs plain AR over these rounds, at most γ + 1; 0 when there is nothing to measure it by."""
    ar, rounds_s = ArTime(events), sum(e.round_s for e in events)
    if rounds_s <= 0 or (ar.unmodelled_tokens and reference_s <= 0):
        return 0.0
    return min(gamma + 1.0, ar.seconds(reference_s) / rounds_s)
