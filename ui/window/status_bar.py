"""The status bar and its labels: one line each that gives up width before the widgets beside it do, and notices
that take the place of the normal labels instead of being drawn over them."""
from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel, QStatusBar, QStyle, QStyleOption, QWidget


class ElidedLabel(QLabel):
    """Plain text that shrinks to any width, ending in … where it is cut; the whole text is its tooltip. A QLabel
    is never narrower than its text, so a long one pushed the AR comparison's progress bar under its own text."""

    text_set = Signal(str)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        super().setText(text)
        self.setToolTip(text)
        self.text_set.emit(text)

    def clear(self) -> None:
        self.setText("")

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        return QSize(0, super().minimumSizeHint().height())

    def shown_text(self) -> str:
        """What the label draws at its width."""
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width())

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt's name)
        QPainter(self).drawText(self.contentsRect(), int(self.alignment()), self.shown_text())


class PartsLabel(ElidedLabel):
    """A ' · '-separated line of figures that gives up whole parts, "…" marking each gap, until it fits. Parts set
    with `set_parts` go in the order of their rank, the highest first; a line set as text gives up parts from its
    middle, nearest the end first, so that its first part and its last stay whole. The part that goes last is
    elided at its end once even it alone is too wide."""

    SEPARATOR = " · "

    def __init__(self, text: str = "", parent: QWidget | None = None):
        super().__init__(parent)
        self.parts: list[tuple[str, int]] = []  # (text, rank) of each part, in the line's order
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        texts = text.split(self.SEPARATOR) if text else []
        last = len(texts) - 1
        self.set_parts([(part, 0 if i in (0, last) else i) for i, part in enumerate(texts)])

    def set_parts(self, parts: Sequence[tuple[str, int]]) -> None:
        """(text, rank) of each part in the line's order; where the width is short, the highest rank goes first
        (of equal ranks, the later part)."""
        self.parts = list(parts)
        super().setText(self.SEPARATOR.join(text for text, _ in self.parts))

    def shown_text(self) -> str:
        if len(self.parts) < 2:
            return super().shown_text()
        width, metrics = self.contentsRect().width(), self.fontMetrics()
        kept = [True] * len(self.parts)
        giving_up = sorted(range(len(self.parts)), key=lambda i: (self.parts[i][1], i), reverse=True)
        for index in giving_up:
            shown = self._joined(kept)
            if metrics.horizontalAdvance(shown) <= width or kept.count(True) == 1:
                break
            kept[index] = False
        return metrics.elidedText(self._joined(kept), Qt.TextElideMode.ElideRight, width)

    def _joined(self, kept: list[bool]) -> str:
        """The kept parts, one "…" in place of each run of parts given up."""
        return self.SEPARATOR.join(text if keep else "…" for (text, _), keep, kept_before
                                   in zip(self.parts, kept, [True, *kept]) if keep or kept_before)


class StatusBar(QStatusBar):
    """QStatusBar's messages (showMessage, status tips, their timeouts), shown by an eliding label that takes the
    place of the normal widgets while a message lasts.

    QStatusBar draws a message itself, cut where the permanent widgets begin, and hides its normal widgets only
    until it lays itself out again: a progress bar shown beside a message brought them back under its text."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.notice = ElidedLabel("")
        self._normal: list[QWidget] = []
        self._permanent: list[QWidget] = []
        super().addWidget(self.notice, 1)
        self.notice.hide()
        self.messageChanged.connect(self.on_message_changed)

    def addWidget(self, widget: QWidget, stretch: int = 0) -> None:  # noqa: N802 (Qt's name)
        super().addWidget(widget, stretch)
        self._normal.append(widget)
        widget.setVisible(not self.currentMessage())

    def addPermanentWidget(self, widget: QWidget, stretch: int = 0) -> None:  # noqa: N802 (Qt's name)
        super().addPermanentWidget(widget, stretch)
        self._permanent.append(widget)

    def on_message_changed(self, message: str) -> None:
        # Hidden and shown explicitly: a relayout re-shows only the widgets QStatusBar itself hid.
        self.notice.setText(message)
        self.notice.setVisible(bool(message))
        for widget in self._normal:
            widget.setVisible(not message)

    def paintEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        """QStatusBar's panel and item frames, without its own drawing of the message (the notice shows it)."""
        painter = QPainter(self)
        option = QStyleOption()
        option.initFrom(self)
        self.style().drawPrimitive(QStyle.PrimitiveElement.PE_PanelStatusBar, option, painter, self)
        for widget in [self.notice, *self._normal, *self._permanent]:
            frame = widget.geometry().adjusted(-2, -1, 2, 1)
            if widget.isVisible() and event.rect().intersects(frame):
                item = QStyleOption()
                item.rect = frame
                item.palette = self.palette()
                self.style().drawPrimitive(QStyle.PrimitiveElement.PE_FrameStatusBarItem, item, painter, widget)
