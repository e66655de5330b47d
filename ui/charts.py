"""Live charts of the current reply: α, tokens per round against the seed's E, and the speedup vs plain AR.

Slots only append numbers into preallocated numpy buffers; a ~100 ms timer pushes them to plot items that
were created once, so a fast decoder cannot flood the GUI thread.
"""
from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QVBoxLayout, QWidget

from engine.events import RoundEvent
from engine.stats import expected_tokens_per_round, round_alpha
from ui.timing import StepReference

REFRESH_MS = 100
BOTTOM_RIGHT, TOP_RIGHT = (-6, -6), (-6, 6)  # legend corners, away from where each chart's data usually sits
X_STEP = 20  # the x axis grows in steps of this many rounds
MIN_CHART_HEIGHT = 105
LEGEND_MIN_WIDTH = 320  # below this a chart's legend would hide its data
AXIS_END_ROOM = 16  # pixels right of the x axis: half of a four-digit tick label
COLUMNS = ("alpha", "alpha_mean", "tokens", "tokens_mean", "expected", "speedup", "speedup_mean")


class RoundBuffers:
    """Per-round series of one reply; running sums make each append O(1)."""

    def __init__(self, capacity: int = 1024):
        self.n = 0
        self.x = np.arange(1, capacity + 1, dtype=float)
        self.y = {name: np.full(capacity, np.nan) for name in COLUMNS}
        self.accepted = self.verified = self.tokens = 0
        self.rounds_s = 0.0

    def clear(self) -> None:
        self.__init__(len(self.x))

    def append(self, event: RoundEvent, reference_s: float, most_per_round: float) -> None:
        """`reference_s` is the robust single-token step time; no estimate exceeds `most_per_round` (γ + 1)."""
        if self.n == len(self.x):  # rare: grow by doubling, still no per-round allocation
            self.x = np.arange(1, 2 * self.n + 1, dtype=float)
            self.y = {k: np.concatenate([v, np.full(self.n, np.nan)]) for k, v in self.y.items()}
        i, n_tokens = self.n, len(event.emitted)
        self.accepted += event.n_accepted
        self.verified += len(event.drafted)
        self.tokens += n_tokens
        self.rounds_s += event.round_s
        alpha = round_alpha(event)
        running_alpha = self.accepted / self.verified if self.verified else None
        self.y["alpha"][i] = np.nan if alpha is None else alpha
        self.y["alpha_mean"][i] = np.nan if running_alpha is None else running_alpha
        self.y["tokens"][i] = n_tokens
        self.y["tokens_mean"][i] = self.tokens / (i + 1)
        self.y["expected"][i] = (expected_tokens_per_round(running_alpha, event.gamma)
                                 if running_alpha is not None and event.gamma else 1.0)
        self.y["speedup"][i] = (min(most_per_round, n_tokens * reference_s / event.round_s)
                                if event.round_s > 0 and reference_s > 0 else np.nan)
        self.y["speedup_mean"][i] = (min(most_per_round, self.tokens * reference_s / self.rounds_s)
                                     if self.rounds_s > 0 and reference_s > 0 else np.nan)
        self.n += 1

    def series(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        return self.x[: self.n], self.y[name][: self.n]


def _plot(title: str, tooltip: str, y_label: str, legend_at: tuple[int, int]) -> pg.PlotWidget:
    plot = pg.PlotWidget()
    plot.setTitle(title, size="9pt")  # short: its width is a floor for the plot's, and the pane can be 200 px
    plot.setToolTip(tooltip)
    plot.setLabel("bottom", "round", **{"font-size": "8pt"})
    plot.setLabel("left", y_label, **{"font-size": "8pt"})
    # The last x tick sits at the plot's right edge; pyqtgraph hides a label that leaves the axis' rectangle, so
    # leave room for half of one and let the label use it.
    plot.plotItem.layout.setContentsMargins(1, 1, AXIS_END_ROOM, 1)
    plot.getAxis("bottom").setStyle(hideOverlappingLabels=AXIS_END_ROOM)
    plot.setMouseEnabled(x=False, y=False)
    plot.addLegend(offset=legend_at, labelTextSize="7pt", brush=pg.mkBrush(255, 255, 255, 170),
                   verSpacing=-6)
    # Three charts fit the right pane at 1000×700 with room for the inspector; below this they stop being legible.
    plot.setMinimumHeight(MIN_CHART_HEIGHT)
    # Fixed ranges, widened in steps by `refresh`: re-ticking axes on every refresh costs more than the curves.
    plot.disableAutoRange()
    plot.setXRange(0, X_STEP, padding=0)
    return plot


class ChartsPanel(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        pg.setConfigOptions(background="w", foreground="#333", antialias=False)
        self.buffers = RoundBuffers()
        self.reference = StepReference()  # the window's; it adds samples as rounds arrive
        self.most_per_round = 2.0  # γ + 1 of the reply being drawn
        self._dirty = False
        self.alpha_plot = _plot("α per round", "α = accepted drafts / drafts the target verified "
                                "(the accepted prefix plus the first rejection), per round and running mean", "α", BOTTOM_RIGHT)
        self.alpha_plot.setYRange(0, 1.05, padding=0)
        self.tokens_plot = _plot("tokens per round", "tokens emitted per round (accepted drafts + the correction "
                                 "or bonus token) beside the seed's E = (1 − α^(γ+1)) / (1 − α) at the running α "
                                 "and current γ", "tokens", BOTTOM_RIGHT)
        self.speedup_plot = _plot("speedup vs plain AR", "estimated speedup = tokens × single-token target step "
                                  "(median of recent measurements) / round time, at most γ + 1; the dashed line "
                                  "is the measured AR comparison", "×", TOP_RIGHT)
        thin = dict(width=1)
        self.curves = {
            "alpha": self.alpha_plot.plot(pen=pg.mkPen("#7cb342", **thin), name="round α", connect="finite"),
            "alpha_mean": self.alpha_plot.plot(pen=pg.mkPen("#1b5e20", width=2), name="running mean",
                                               connect="finite"),
            "tokens": self.tokens_plot.plot(pen=pg.mkPen("#90a4ae", **thin), name="measured"),
            "tokens_mean": self.tokens_plot.plot(pen=pg.mkPen("#263238", width=2), name="running mean"),
            "expected": self.tokens_plot.plot(pen=pg.mkPen("#ef6c00", width=2, style=pg.QtCore.Qt.PenStyle.DashLine),
                                              name="E(α, γ)"),
            "speedup": self.speedup_plot.plot(pen=pg.mkPen("#9fa8da", **thin), name="round estimate",
                                              connect="finite"),
            "speedup_mean": self.speedup_plot.plot(pen=pg.mkPen("#1a237e", width=2), name="running estimate",
                                                   connect="finite"),
        }
        self.baseline = pg.InfiniteLine(pos=1.0, angle=0, pen=pg.mkPen("#9e9e9e", width=1))
        self.measured = pg.InfiniteLine(pos=1.0, angle=0, pen=pg.mkPen("#c62828", width=2,
                                                                       style=pg.QtCore.Qt.PenStyle.DashLine),
                                        label="measured", labelOpts={"position": 0.15, "color": "#c62828"})
        self.measured.setVisible(False)
        self.speedup_plot.addItem(self.baseline)
        self.speedup_plot.addItem(self.measured)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for plot in (self.alpha_plot, self.tokens_plot, self.speedup_plot):
            layout.addWidget(plot)
        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self.refresh)
        self.timer.start()

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        """In a narrow pane the legends would cover the curves; the charts' tooltips still name them."""
        super().resizeEvent(event)
        for plot in (self.alpha_plot, self.tokens_plot, self.speedup_plot):
            plot.plotItem.legend.setVisible(self.width() >= LEGEND_MIN_WIDTH)

    def start_reply(self, gamma: int = 1) -> None:
        self.most_per_round = gamma + 1.0
        self.buffers.clear()
        self.measured.setVisible(False)
        self._dirty = True

    def on_round_finished(self, event: RoundEvent) -> None:
        self.buffers.append(event, self.reference.seconds, self.most_per_round)
        self._dirty = True

    def show_measured_speedup(self, speedup: float) -> None:
        self.measured.setVisible(True)  # first: a hidden line's label does not update its text
        self.measured.setValue(speedup)
        self.measured.label.setFormat(f"measured {speedup:.2f}×")

    def refresh(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        for name, curve in self.curves.items():
            x, y = self.buffers.series(name)
            if np.isnan(y).all():  # AR replies have no α: an empty series, not a plot of NaNs
                x, y = x[:0], y[:0]
            curve.setData(x, y)
        self._fit_ranges()

    def _fit_ranges(self) -> None:
        """Widen (never shrink mid-reply) the x range in steps and the y ranges to whole units."""
        n = self.buffers.n
        x_max = max(X_STEP, -(-n // X_STEP) * X_STEP)
        tokens_max = float(np.nanmax(self.buffers.y["tokens"][:n], initial=4.0))
        speedup_max = float(np.nanmax(self.buffers.y["speedup"][:n], initial=1.0))
        wanted = {self.alpha_plot: (x_max, 1.05), self.tokens_plot: (x_max, np.ceil(tokens_max) + 1),
                  self.speedup_plot: (x_max, min(self.most_per_round,
                                                 max(2.0, np.ceil(speedup_max * 2) / 2 + 0.5)))}
        for plot, (x_max, y_max) in wanted.items():
            if plot.viewRange()[0][1] != x_max or plot.viewRange()[1][1] != y_max:
                plot.setRange(xRange=(0, x_max), yRange=(0, y_max), padding=0)

    def point_count(self, name: str) -> int:
        """How many points the plot item of a series holds (what is drawn, not what is buffered)."""
        x, _ = self.curves[name].getData()
        return 0 if x is None else len(x)
