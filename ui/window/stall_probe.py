"""A 10 ms timer that records how late the GUI event loop runs it: the worst gap is the worst stall."""
from __future__ import annotations

import time

from PySide6.QtCore import QObject, Qt, QTimer


class StallProbe(QObject):
    def __init__(self, interval_ms: int = 10, parent=None):
        super().__init__(parent)
        self.interval_s = interval_ms / 1000
        self.gaps: list[float] = []
        self._last = 0.0
        self.timer = QTimer(self)
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self._on_tick)

    def start(self) -> None:
        self.gaps.clear()
        self._last = time.perf_counter()
        self.timer.start()

    def stop(self) -> None:
        self.timer.stop()

    def _on_tick(self) -> None:
        now = time.perf_counter()
        self.gaps.append(now - self._last)
        self._last = now

    @property
    def worst_stall_s(self) -> float:
        """The longest the loop was busy beyond the timer interval."""
        return max(self.gaps, default=self.interval_s) - self.interval_s
