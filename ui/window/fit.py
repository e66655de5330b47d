"""Fitting the main window to its screen: the least size its panes need, and a size and place on the screen's free
area, both before the window manager frames the window and again once its title bar and borders are known."""
from __future__ import annotations

from PySide6.QtCore import QEvent, QMargins, QObject, QRect, QSize
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QWidget

# The least client area: a 1000×700 screen holds it with a window manager's title bar and borders.
MIN_WIDTH, MIN_HEIGHT = 995, 620


def fitted_frame(frame: QRect, margins: QMargins, free: QRect, minimum: QSize) -> QRect:
    """Where a window's frame goes on a screen's free area: as large as it is, or as the free area holds it with
    `margins` (the title bar and borders around the client area), never with a client area under `minimum`; moved
    to the free area's corner if it begins off that area or runs past its bottom."""
    client = frame.size().shrunkBy(margins).boundedTo(free.size().shrunkBy(margins)).expandedTo(minimum)
    fitted = QRect(frame.topLeft(), client.grownBy(margins))
    if not free.contains(fitted.topLeft()) or fitted.bottom() > free.bottom():
        fitted.moveTopLeft(free.topLeft())
    return fitted


class ScreenFit(QObject):
    """Fits `window` to its screen now, and once more when the window manager has framed it."""

    def __init__(self, window: QWidget):
        super().__init__(window)
        self.window = window
        self.framed = False  # whether the window manager's frame has been fitted to the screen too
        window.installEventFilter(self)
        self.fit()

    def fit(self) -> None:
        """The default size, or one saved on a larger screen, shrinks to the screen's free area with the window's
        frame (never below the window's minimum), and a window saved off this screen comes back onto it."""
        window = self.window
        screen = window.screen() or QGuiApplication.primaryScreen()
        if screen is None or window.isMaximized() or window.isFullScreen():
            return
        frame, client = window.frameGeometry(), window.geometry()
        margins = QMargins(client.left() - frame.left(), client.top() - frame.top(), frame.right() - client.right(),
                           frame.bottom() - client.bottom())
        fitted = fitted_frame(frame, margins, screen.availableGeometry(), window.minimumSize())
        window.resize(fitted.size().shrunkBy(margins))
        # A top-level window's position is its frame's; before the window manager frames it, the frame Qt reports
        # is the client area, so moving it there anyway would shift a restored window down by its title bar.
        if fitted.topLeft() != frame.topLeft():
            window.move(fitted.topLeft())

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 (Qt's name)
        """The window manager frames the window after it is first shown, moving its client area: only then do the
        title bar and borders count in what fits on the screen."""
        if (watched is self.window and event.type() == QEvent.Type.Move and not self.framed
                and self.window.frameGeometry() != self.window.geometry()):
            self.framed = True
            self.fit()
        return False
