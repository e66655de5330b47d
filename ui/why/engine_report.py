"""What a remote engine reports about a reply, drawn: our tokens/s, its acceptance rate and mean acceptance length,
and its acceptance by draft position, with a line saying that per-token fates are not known.

It receives plain records (engine.remote's TextDelta and RemoteReply) and never imports torch. The bars are
created once and refreshed with setOpts.
"""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from engine.remote_records import RemoteReply, TextDelta

FATES_NOTE = ("A remote engine reports counts, not tokens: which ones it drafted, accepted or rejected is not "
              "known, so the reply is not coloured.")
MAX_POSITIONS = 16


class EngineReport(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.summary = QLabel("No reply from the engine yet.")
        self.summary.setWordWrap(True)
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.note = QLabel(FATES_NOTE)
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: palette(placeholder-text);")
        self.title = QLabel("<b>Acceptance by draft position</b> (P(accepted | the drafts before it accepted))")
        self.title.setWordWrap(True)
        self.plot = pg.PlotWidget()
        self.plot.setMinimumHeight(120)
        self.plot.setYRange(0, 1.05)
        self.plot.setMouseEnabled(False, False)
        self.plot.hideButtons()
        self.plot.getAxis("bottom").setLabel("draft position")
        self.bars = pg.BarGraphItem(x=np.arange(1, 5), height=np.zeros(4), width=0.6, brush="#3a9a5b")
        self.plot.addItem(self.bars)
        self.show_positions(4)
        self.streamed_tokens = 0
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for widget in (self.summary, self.title, self.plot, self.note):
            layout.addWidget(widget)

    def show_positions(self, n: int) -> None:
        """Bars for draft positions 1..n, each tick a whole position."""
        self.bars.setOpts(x=np.arange(1, n + 1), height=np.zeros(n))
        self.plot.getAxis("bottom").setTicks([[(i, str(i)) for i in range(1, n + 1)]])
        self.plot.setXRange(0.4, n + 0.6)

    @Slot(object)
    def on_text_received(self, piece: TextDelta) -> None:
        self.streamed_tokens += piece.n_tokens or 0

    @Slot(object)
    def on_reply_finished(self, reply: RemoteReply) -> None:
        self.streamed_tokens = 0
        self.summary.setText(summary_text(reply))
        per_position = reply.spec.per_position_acceptance[:MAX_POSITIONS] if reply.spec else []
        self.title.setVisible(bool(per_position))
        self.plot.setVisible(bool(per_position))
        if per_position:
            self.show_positions(len(per_position))
            self.bars.setOpts(height=np.array(per_position))

    @Slot(str)
    def on_failed(self, message: str) -> None:
        self.summary.setText(message)


def summary_text(reply: RemoteReply) -> str:
    """The report's lines: ours first (measured here), then the engine's own counts, then any note."""
    lines = [f"{reply.n_tokens} tokens, {reply.tokens_per_s:.1f} tokens/s (measured here)"]
    spec = reply.spec
    if spec is not None and spec.draft_tokens:
        lines.append(f"acceptance rate {spec.acceptance_rate:.2f} ({spec.accepted} of {spec.draft_tokens} drafts)")
        if spec.mean_acceptance_length is not None:
            lines.append(f"mean acceptance length {spec.mean_acceptance_length:.2f} tokens per drafting step")
        lines.append(f"from {spec.source}")
    elif spec is not None:
        lines.append(f"nothing was drafted ({spec.source})")
    if reply.note:
        lines.append(reply.note)
    return "\n".join(lines)
