"""The colour legend above the chat pane, and the switch between the clean view and the speculative trace."""
from __future__ import annotations

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QWidget

from engine.events import Fate
from ui.palette import LEGEND_FATES, STYLES

SHORT_LABELS = {fate: STYLES[fate].label.split(" /")[0].split(" (")[0].removesuffix(" draft").removesuffix(" token")
                for fate in LEGEND_FATES}  # "accepted", "rejected", "resampled", "bonus", "target alone": fits 1000 px
UNTINTED = "border:1px solid #bdbdbd;"  # a chip for the tokens drawn without a tint
# The blue chip's name and tooltip, by whether the replies it describes were greedy
CORRECTION_NAMES = {True: "corrected", False: "resampled"}
# Both names on two small lines: at 1000 px the row has no room for "corrected / resampled" on one
BOTH_CORRECTIONS = "<div style='font-size:7pt; line-height:75%'>corrected<br>resampled</div>"
CORRECTION_TIPS = {True: STYLES[Fate.CORRECTED].label,
                   False: "resampled by the target from norm(max(0, p − q)) (sampling)"}


class Legend(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(4)
        self.chips: dict[Fate, QLabel] = {}
        self.greedy_modes: set[bool] = set()  # of the replies the blue chip names (True: greedy)
        for fate in LEGEND_FATES:
            style = STYLES[fate]
            chip = QLabel(SHORT_LABELS[fate])
            chip.setToolTip(style.label)
            self.chips[fate] = chip
            strike = "text-decoration: line-through;" if style.strike else ""
            colours = f"background:{style.background}; color:{style.foreground};" if style.background else UNTINTED
            chip.setStyleSheet(f"{colours} {strike} padding:1px 3px; border-radius:3px; font-size:8pt;")
            row.addWidget(chip)
        self.remote_note = QLabel("a remote engine's reply: which tokens it drafted is not known, so none is coloured")
        self.remote_note.setStyleSheet("font-size:8pt; color: palette(placeholder-text);")
        self.remote_note.hide()
        row.addWidget(self.remote_note)
        row.addStretch(1)
        self.trace_action = QAction("Speculative &trace", self)
        self.trace_action.setIconText("Trace")  # the button's text; the View menu shows the full name
        self.trace_action.setCheckable(True)
        self.trace_action.setShortcut(QKeySequence("Ctrl+T"))
        self.trace_action.setToolTip("Show every draft, rejected ones struck through (Ctrl+T); off: the clean "
                                     "answer, tokens in their colour")
        self.trace_button = QToolButton()
        self.trace_button.setDefaultAction(self.trace_action)
        row.addWidget(self.trace_button)

    def set_remote(self, remote: bool) -> None:
        """A remote engine reports counts, not fates: the chips give way to a line saying so, and the trace, which
        would show the same plain text, rests."""
        for chip in self.chips.values():
            chip.setVisible(not remote)
        self.remote_note.setVisible(remote)
        self.trace_action.setEnabled(not remote)
        self.trace_button.setToolTip("A remote engine's reply has no trace: it does not say which tokens were drafts"
                                     if remote else self.trace_action.toolTip())

    def reset(self, greedy: bool) -> None:
        """An empty chat: the blue chip names what the next reply's mode does."""
        self.greedy_modes.clear()
        self.set_greedy(greedy)

    def set_greedy(self, greedy: bool) -> None:
        """Replies in this mode are on screen, or the next one will be: the blue chip names what the target does
        after a rejection in every mode it has been told of (its argmax when greedy, a draw from the residual when
        sampling), so switching to sampling leaves the greedy replies above still named."""
        self.greedy_modes.add(greedy)
        named = [mode for mode in (True, False) if mode in self.greedy_modes]
        chip = self.chips[Fate.RESAMPLED]
        chip.setText(CORRECTION_NAMES[named[0]] if len(named) == 1 else BOTH_CORRECTIONS)
        chip.setToolTip("\n".join(CORRECTION_TIPS[mode] for mode in named))
