"""Colours and labels of token fates (the seed's figure 19-6), shared by the chat pane, legend and inspector, and
the paper those two documents are drawn on."""
from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QColor, QPalette

from engine.events import Fate


@dataclass(frozen=True)
class FateStyle:
    label: str
    foreground: str  # text colour in the trace, '#rrggbb'
    background: str  # tint behind the token in the trace; '' for none
    strike: bool = False
    reading: str = ""  # text colour in the clean view: the fate stays visible without tints between the words


STYLES = {
    Fate.ACCEPTED: FateStyle("accepted draft", "#1b5e20", "#c8efcf", reading="#2e7d32"),
    Fate.REJECTED: FateStyle("rejected draft", "#b71c1c", "#fbd0d0", strike=True),
    Fate.RESAMPLED: FateStyle("resampled / corrected by target", "#0d47a1", "#cfe0fb", reading="#1565c0"),
    Fate.CORRECTED: FateStyle("corrected by target (greedy)", "#0d47a1", "#cfe0fb", reading="#1565c0"),
    Fate.BONUS: FateStyle("bonus token", "#7a4a00", "#ffe2a8", reading="#9a5b00"),
    Fate.TARGET: FateStyle("target alone (no draft)", "", ""),  # a round that drafted nothing, or plain AR
    Fate.UNKNOWN: FateStyle("not known (a remote engine's text)", "", ""),  # nor does a remote engine's
}

LEGEND_FATES = (Fate.ACCEPTED, Fate.REJECTED, Fate.RESAMPLED, Fate.BONUS, Fate.TARGET)

CODE_BACKGROUND = "#f3f4f6"
NOTE_COLOUR = "#6b6b6b"
WARNING_COLOUR = "#a64d00"  # the cut-at-max-tokens mark and the busy-machine warning
DIFFERENCE_BACKGROUND = "#ffe066"  # the first token where a reply and its plain AR run part
PAPER, INK, LINK = "#ffffff", "#1f1f1f", "#0b57d0"


def paper(palette: QPalette) -> QPalette:
    """`palette` for a document surface (the chat, the inspector): dark ink on white paper whatever the desktop
    theme, as a document viewer shows a page. The fate colours, tints and grey notes are chosen for dark text on a
    light page; on a dark theme's background half of them could not be read."""
    page = QPalette(palette)
    for role, colour in ((QPalette.ColorRole.Base, PAPER), (QPalette.ColorRole.Window, PAPER),
                         (QPalette.ColorRole.Text, INK), (QPalette.ColorRole.WindowText, INK),
                         (QPalette.ColorRole.Link, LINK), (QPalette.ColorRole.LinkVisited, LINK),
                         (QPalette.ColorRole.PlaceholderText, NOTE_COLOUR)):
        page.setColor(role, QColor(colour))
    return page
