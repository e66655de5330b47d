"""The status bar's labels: one line each that gives up width before the widgets beside it do."""
from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel


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

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt's name)
        rect = self.contentsRect()
        text = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, rect.width())
        QPainter(self).drawText(rect, int(self.alignment()), text)
