"""The colour legend above the chat pane, and the switch that hides rejected drafts."""
from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QWidget

from ui.palette import LEGEND_FATES, STYLES


class Legend(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        for fate in LEGEND_FATES:
            style = STYLES[fate]
            chip = QLabel(style.label)
            strike = "text-decoration: line-through;" if style.strike else ""
            chip.setStyleSheet(f"background:{style.background}; color:{style.foreground}; {strike}"
                               "padding:1px 5px; border-radius:3px;")
            row.addWidget(chip)
        row.addStretch(1)
        self.hide_rejected = QCheckBox("hide rejected drafts")
        self.hide_rejected.setToolTip("A clean reading view: only the tokens that joined the reply")
        row.addWidget(self.hide_rejected)
