"""The status bar and its labels: one line each that gives up width before the widgets beside it do, and notices
that take the place of the normal labels instead of being drawn over them."""
from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel, QStatusBar, QStyle, QStyleOption, QWidget


class ElidedLabel(QLabel):
    """Plain text that shrinks to any width, ending in … where it is cut; the whole text is its tooltip. A QLabel
    is never narrower than its text, so a long one pushed the AR comparison's progress bar under its own text."""

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        super().setText(text)
        self.setToolTip(text)

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
    """A ' · '-separated line of figures that gives up whole parts from its middle, nearest the end first, so that
    its first part and its last (the reply's size and its measured speedup) stay whole; "…" marks the gap."""

    SEPARATOR = " · "

    def shown_text(self) -> str:
        parts = self.text().split(self.SEPARATOR)
        if len(parts) == 1:
            return super().shown_text()
        width, metrics = self.contentsRect().width(), self.fontMetrics()
        for kept in range(len(parts) - 1, 0, -1):  # how many parts are shown before the last one
            shown = self.SEPARATOR.join(parts[:kept] + (["…"] if kept < len(parts) - 1 else []) + parts[-1:])
            if metrics.horizontalAdvance(shown) <= width:
                return shown
        return metrics.elidedText(shown, Qt.TextElideMode.ElideRight, width)  # even first · … · last is too wide


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
