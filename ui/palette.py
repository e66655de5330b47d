"""Colours and labels of token fates (the seed's figure 19-6), shared by the chat pane, legend and inspector."""
from __future__ import annotations

from dataclasses import dataclass

from engine.events import Fate


@dataclass(frozen=True)
class FateStyle:
    label: str
    foreground: str  # text colour, '#rrggbb'
    background: str  # tint behind the token; '' for none
    strike: bool = False


STYLES = {
    Fate.ACCEPTED: FateStyle("accepted draft", "#1b5e20", "#c8efcf"),
    Fate.REJECTED: FateStyle("rejected draft", "#b71c1c", "#fbd0d0", strike=True),
    Fate.RESAMPLED: FateStyle("resampled / corrected by target", "#0d47a1", "#cfe0fb"),
    Fate.CORRECTED: FateStyle("corrected by target (greedy)", "#0d47a1", "#cfe0fb"),
    Fate.BONUS: FateStyle("bonus token", "#7a4a00", "#ffe2a8"),
    Fate.TARGET: FateStyle("target (plain AR)", "", ""),  # AR replies stay uncoloured
}

LEGEND_FATES = (Fate.ACCEPTED, Fate.REJECTED, Fate.RESAMPLED, Fate.BONUS)
