"""The colour legend above the chat pane, and the switch between the clean view and the speculative trace."""
from __future__ import annotations

from PySide6.QtCore import QPoint, QRect, QSize, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLayout, QToolButton, QWidget

from engine.events import Fate
from ui.window.palette import LEGEND_FATES, STYLES

SHORT_LABELS = {fate: STYLES[fate].label.split(" /")[0].split(" (")[0].removesuffix(" draft").removesuffix(" token")
                for fate in LEGEND_FATES}  # "accepted", "rejected", "resampled", "bonus", "target alone"
UNTINTED = "border:1px solid #bdbdbd;"  # a chip for the tokens drawn without a tint
# The blue chip's name and tooltip, by whether the replies it describes were greedy
CORRECTION_NAMES = {True: "corrected", False: "resampled"}
BOTH_CORRECTIONS = "corrected / resampled"
CORRECTION_TIPS = {True: STYLES[Fate.CORRECTED].label,
                   False: "resampled by the target from norm(max(0, p − q)) (sampling)"}
CHIP_SPACING = 4


class FlowLayout(QLayout):
    """Its widgets left to right at their size hints, onto a further row where the width runs out (Qt's flow layout
    example): the chips stay whole in the narrowest chat pane, with a theme's larger font, and with both names on
    the blue chip."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setContentsMargins(0, 0, 0, 0)
        self.setSpacing(CHIP_SPACING)
        self.items = []

    def addItem(self, item) -> None:  # noqa: N802 (Qt's names, here and below)
        self.items.append(item)

    def count(self) -> int:
        return len(self.items)

    def itemAt(self, index: int):  # noqa: N802
        return self.items[index] if 0 <= index < len(self.items) else None

    def takeAt(self, index: int):  # noqa: N802
        return self.items.pop(index) if 0 <= index < len(self.items) else None

    def expandingDirections(self) -> Qt.Orientation:  # noqa: N802
        return Qt.Orientation(0)

    def hasHeightForWidth(self) -> bool:  # noqa: N802
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802
        return self._arrange(QRect(0, 0, width, 0), place=False)

    def setGeometry(self, rect: QRect) -> None:  # noqa: N802
        super().setGeometry(rect)
        self._arrange(rect, place=True)

    def sizeHint(self) -> QSize:  # noqa: N802
        """All on one row."""
        shown = [item.sizeHint() for item in self.items if not item.isEmpty()]
        return QSize(sum(size.width() for size in shown) + self.spacing() * max(0, len(shown) - 1),
                     max((size.height() for size in shown), default=0))

    def minimumSize(self) -> QSize:  # noqa: N802
        """One item a row: the widest one's width."""
        size = QSize()
        for item in self.items:
            if not item.isEmpty():
                size = size.expandedTo(item.sizeHint())
        return size

    def _arrange(self, rect: QRect, place: bool) -> int:
        """Lay the items out in `rect`'s width (moving them when `place`); returns the height they take."""
        x, y, row_height = rect.x(), rect.y(), 0
        for item in self.items:
            if item.isEmpty():  # a hidden widget
                continue
            size = item.sizeHint()
            if x > rect.x() and x + size.width() > rect.x() + rect.width():
                x, y, row_height = rect.x(), y + row_height + self.spacing(), 0
            if place:
                item.setGeometry(QRect(QPoint(x, y), size))
            x += size.width() + self.spacing()
            row_height = max(row_height, size.height())
        return y + row_height - rect.y()


class Legend(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(CHIP_SPACING)
        self.chips: dict[Fate, QLabel] = {}
        self.greedy_modes: set[bool] = set()  # of the replies the blue chip names (True: greedy)
        self.chip_row = QWidget()
        flow = FlowLayout(self.chip_row)
        for fate in LEGEND_FATES:
            style = STYLES[fate]
            chip = QLabel(SHORT_LABELS[fate])
            chip.setToolTip(style.label)
            self.chips[fate] = chip
            strike = "text-decoration: line-through;" if style.strike else ""
            colours = f"background:{style.background}; color:{style.foreground};" if style.background else UNTINTED
            chip.setStyleSheet(f"{colours} {strike} padding:1px 3px; border-radius:3px; font-size:8pt;")
            flow.addWidget(chip)
        row.addWidget(self.chip_row, 1)
        self.remote_note = QLabel("a remote engine's reply: which tokens it drafted is not known, so none is coloured")
        self.remote_note.setStyleSheet("font-size:8pt; color: palette(placeholder-text);")
        self.remote_note.setWordWrap(True)
        self.remote_note.hide()
        row.addWidget(self.remote_note, 1)
        self.trace_action = QAction("Speculative &trace", self)
        self.trace_action.setCheckable(True)
        # The button says its state in words: a checked tool button's sunken frame is barely seen in most styles
        self.trace_action.toggled.connect(self._name_trace_state)
        self._name_trace_state(False)
        self.trace_action.setShortcut(QKeySequence("Ctrl+T"))
        self.trace_action.setToolTip("Show every draft, rejected ones struck through (Ctrl+T); off: the clean "
                                     "answer, tokens in their colour")
        self.trace_button = QToolButton()
        self.trace_button.setDefaultAction(self.trace_action)
        row.addWidget(self.trace_button)

    def _name_trace_state(self, on: bool) -> None:
        self.trace_action.setIconText("Trace: on" if on else "Trace: off")  # the View menu shows the full name

    def set_remote(self, remote: bool) -> None:
        """A remote engine reports counts, not fates: the chips give way to a line saying so, and the trace, which
        would show the same plain text, rests."""
        self.chip_row.setVisible(not remote)
        self.remote_note.setVisible(remote)
        self.trace_action.setEnabled(not remote)
        self.trace_button.setToolTip("A remote engine's reply has no trace: it does not say which tokens were drafts"
                                     if remote else self.trace_action.toolTip())

    def reset(self, greedy: bool) -> None:
        """An empty chat: the blue chip names what the next reply's mode does, until a reply is on screen (a
        reopened chat's replayed replies name theirs only, whatever the controls said before they were restored)."""
        self.greedy_modes.clear()
        self._name({greedy})

    def set_greedy(self, greedy: bool) -> None:
        """Replies in this mode are on screen: the blue chip names what the target does after a rejection in every
        mode of the replies shown (its argmax when greedy, a draw from the residual when sampling), so switching to
        sampling leaves the greedy replies above still named."""
        self.greedy_modes.add(greedy)
        self._name(self.greedy_modes)

    def _name(self, modes: set[bool]) -> None:
        named = [mode for mode in (True, False) if mode in modes]
        chip = self.chips[Fate.RESAMPLED]
        chip.setText(CORRECTION_NAMES[named[0]] if len(named) == 1 else BOTH_CORRECTIONS)
        chip.setToolTip("\n".join(CORRECTION_TIPS[mode] for mode in named))
