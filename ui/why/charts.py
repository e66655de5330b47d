"""Live charts of the current reply: α, tokens per round against the seed's E, and the speedup vs plain AR.

Slots only append numbers into preallocated numpy buffers; a ~100 ms timer pushes them to plot items that
were created once, so a fast decoder cannot flood the GUI thread. Each chart's title and legend are a label
above its plot: a legend inside the plot ran through the curves and had to hide in a narrow pane.
"""
from __future__ import annotations

from collections import Counter
from html import escape

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt, QTimer
from PySide6.QtGui import QPen
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from engine.events import RoundEvent
from engine.stats import SpeedupMeter, expected_tokens_per_round, round_alpha
from words.records import Reply

REFRESH_MS = 250  # charts redraw at most 4 times a second while a reply streams (why: chat_view.FLUSH_MS)
X_STEP = 20  # the x axis grows in steps of this many rounds
MIN_CHART_HEIGHT = 112
AXIS_END_ROOM = 16  # pixels right of the x axis: half of a four-digit tick label
AXIS_TOP_ROOM = 7  # pixels above the y axis: half of a tick label's height, for the label at its top
CHART_INK = "#333"  # titles and legends on the charts' white background
COLUMNS = ("alpha", "alpha_mean", "tokens", "tokens_mean", "expected", "speedup", "speedup_mean")


class RoundBuffers:
    """Per-round series of one reply; running sums make each append O(1). The speedup series are the reply's
    measured figure as it stood after each round (engine.stats.SpeedupMeter): each round's own, and the whole
    reply's so far; none before the reply's plain rounds measure plain AR."""

    def __init__(self, capacity: int = 1024, speculative: bool = True):
        self.speculative = speculative  # a speculative reply: each round has a figure, zero-draft rounds too
        self.n = 0
        self.x = np.arange(1, capacity + 1, dtype=float)
        self.y = {name: np.full(capacity, np.nan) for name in COLUMNS}
        self.accepted = self.verified = self.tokens = 0
        self.drafts_made: Counter[int] = Counter()  # rounds by their number of drafts, for the seed's E
        self.meter = SpeedupMeter()

    def clear(self, speculative: bool = True) -> None:
        self.__init__(len(self.x), speculative)

    def append(self, event: RoundEvent) -> None:
        """A plain AR reply has no speedup to chart: it is the baseline."""
        if self.n == len(self.x):  # rare: grow by doubling, still no per-round allocation
            self.x = np.arange(1, 2 * self.n + 1, dtype=float)
            self.y = {k: np.concatenate([v, np.full(self.n, np.nan)]) for k, v in self.y.items()}
        i, n_tokens = self.n, len(event.emitted)
        self.accepted += event.n_accepted
        self.verified += len(event.drafted)
        self.tokens += n_tokens
        alpha = round_alpha(event)
        running_alpha = self.accepted / self.verified if self.verified else None
        self.y["alpha"][i] = np.nan if alpha is None else alpha
        self.y["alpha_mean"][i] = np.nan if running_alpha is None else running_alpha
        self.y["tokens"][i] = n_tokens
        self.y["tokens_mean"][i] = self.tokens / (i + 1)
        # the why tab's "seed's E" of the rounds so far: E at their α, averaged over each round's own drafts
        self.drafts_made[event.gamma] += 1
        self.y["expected"][i] = (sum(n * expected_tokens_per_round(running_alpha, g)
                                     for g, n in self.drafts_made.items()) / (i + 1)
                                 if running_alpha is not None else 1.0)
        self.n += 1
        if self.speculative:
            self.meter.add(event)
            figure = self.meter.figure
            self.y["speedup"][i] = self.meter.round_speedup(event) or np.nan
            self.y["speedup_mean"][i] = np.nan if figure.value is None else figure.value

    def series(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        return self.x[: self.n], self.y[name][: self.n]


class Chart(pg.PlotWidget):
    """A chart that neither pans nor zooms: the mouse wheel over it scrolls what holds it (the why tab)."""

    def wheelEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        event.ignore()


def _plot(tooltip: str, y_label: str) -> pg.PlotWidget:
    plot = Chart()
    plot.setToolTip(tooltip)
    # The chart is a white page (its legend's too): its titles keep dark ink under a dark theme's light text colour
    plot.setLabel("bottom", "round", **{"font-size": "8pt", "color": CHART_INK})
    plot.setLabel("left", y_label, **{"font-size": "8pt", "color": CHART_INK})
    # The last x tick sits at the plot's right edge; pyqtgraph hides a label that leaves the axis' rectangle, so
    # leave room for half of one and let the label use it.
    plot.plotItem.layout.setContentsMargins(1, AXIS_TOP_ROOM, AXIS_END_ROOM, 1)
    plot.getAxis("bottom").setStyle(hideOverlappingLabels=AXIS_END_ROOM)
    plot.getAxis("left").setStyle(hideOverlappingLabels=AXIS_TOP_ROOM)
    plot.setMouseEnabled(x=False, y=False)
    plot.hideButtons()  # its auto-range button: nothing here pans or zooms
    # Three charts of this height leave the inspector the rest of the right pane at 1000×700 (ten lines or so, its
    # minimum is nine: ui/chat/inspector.py); a plot's curves and legend still read at it, and taller windows give the
    # charts more.
    plot.setMinimumHeight(MIN_CHART_HEIGHT)
    # Fixed ranges, widened in steps by `refresh`: re-ticking axes on every refresh costs more than the curves.
    plot.disableAutoRange()
    plot.setXRange(0, X_STEP, padding=0)
    return plot


def curve_entries(plot: pg.PlotWidget) -> list[tuple[QPen, str]]:
    return [(item.opts["pen"], item.name()) for item in plot.plotItem.listDataItems() if item.name()]


def legend_entry(pen: QPen, name: str) -> str:
    """A short stroke in the line's colour, thin, thick or dashed like it, and the line's name, never split."""
    dashed = pen.style() == Qt.PenStyle.DashLine
    stroke = "┅┅" if dashed else "━━" if pen.width() > 1 else "──"
    return (f"<span style='color:{pen.color().name()}'>{stroke}</span>&nbsp;"
            + escape(name).replace(" ", "&nbsp;"))


class ChartHeader(QLabel):
    """A chart's title and, under it, its legend: entries wrap between each other when the pane is narrow."""

    def __init__(self, title: str):
        super().__init__()
        self.title = title
        self.note = ""  # said instead of the legend when the chart has nothing to show
        self.setWordWrap(True)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setAlignment(Qt.AlignmentFlag.AlignHCenter)
        # Room at the sides: a legend line that ended at the pane's very edge lost its last glyph in some windows
        self.setStyleSheet(f"background: white; color: {CHART_INK}; padding: 0px 4px;")

    def show_entries(self, entries: list[tuple[QPen, str]], extra: str = "") -> None:
        """The legend's entries, and `extra` (HTML) on a line of its own under them."""
        legend = escape(self.note) if self.note else " &nbsp; ".join(legend_entry(pen, name) for pen, name in entries)
        self.show_legend(legend + (f"<br>{extra}" if extra and not self.note else ""))

    def show_legend(self, legend: str) -> None:
        self.setText(f"<span style='font-size:9pt'>{escape(self.title)}</span><br>"
                     f"<span style='font-size:7pt'>{legend}</span>")


def measured_said(parts: list[tuple[int, int, float, int]]) -> str:
    """The measured lines' one legend entry (one line however many parts were compared): the whole reply's figure,
    a continued part's with its number and rounds, or the range of several parts' with their numbers (those whose
    comparison was fair; another part's was not drawn); "" for none."""
    if not parts:
        return ""
    speedups = [speedup for _, _, speedup, _ in parts]
    if len(parts) > 1:
        low, high = min(speedups), max(speedups)
        figure = f"{low:.2f}×" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}–{high:.2f}×"
        *earlier, last = [str(number) for _, _, _, number in parts]
        return f"measured {figure} undrawn, parts {', '.join(earlier)} and {last}"
    [(first, last, speedup, number)] = parts
    return f"measured {speedup:.2f}× undrawn" + (f" (part {number}, continued: rounds {first}–{last})"
                                                  if number > 1 else "")


class ChartsPanel(QWidget):
    def __init__(self, parent=None):
        super().__init__(parent)
        pg.setConfigOptions(background="w", foreground="#333", antialias=False)
        self.buffers = RoundBuffers()
        self.most_per_round = 2.0  # γ + 1 of the reply being drawn
        self._dirty = False
        self.alpha_plot = _plot("α = accepted drafts / drafts the target verified (the accepted prefix plus the "
                                "first rejection), per round and running mean", "α")
        self.alpha_plot.setYRange(0, 1.05, padding=0)
        self.tokens_plot = _plot("tokens emitted per round (accepted drafts + the correction or bonus token) beside "
                                 "the seed's E = (1 − α^(γ+1)) / (1 − α) at the running α, averaged over the rounds' own γ (the why "
                                 "tab's seed's E)", "tokens")
        self.speedup_plot = _plot("measured speedup = what the reply's own plain rounds (rounds that drafted nothing, "
                                  "run now and then to measure plain AR under the load of now) say plain AR takes "
                                  "for a round's tokens / the round's time, for each round (thin) and for the whole "
                                  "reply so far (thick: all its tokens over all its time); none until two plain "
                                  "rounds are measured. The red dashed line is the AR comparison run undrawn, the grey "
                                  "line plain AR (1×)", "×")
        thin = dict(width=1)
        self.curves = {
            # dotted too: a drafting round between rounds that drafted nothing has no neighbour to draw a line to
            "alpha": self.alpha_plot.plot(pen=pg.mkPen("#7cb342", **thin), name="round α", connect="finite",
                                          symbol="o", symbolSize=3, symbolPen=None, symbolBrush="#7cb342"),
            "alpha_mean": self.alpha_plot.plot(pen=pg.mkPen("#1b5e20", width=2), name="running mean",
                                               connect="finite"),
            "tokens": self.tokens_plot.plot(pen=pg.mkPen("#90a4ae", **thin), name="per round"),
            "tokens_mean": self.tokens_plot.plot(pen=pg.mkPen("#263238", width=2), name="running mean"),
            "expected": self.tokens_plot.plot(pen=pg.mkPen("#ef6c00", width=2, style=Qt.PenStyle.DashLine),
                                              name="seed's E"),
            "speedup": self.speedup_plot.plot(pen=pg.mkPen("#9fa8da", **thin), name="round",
                                              connect="finite"),
            "speedup_mean": self.speedup_plot.plot(pen=pg.mkPen("#1a237e", width=2),
                                                   name="whole reply so far", connect="finite"),
        }
        self.baseline = pg.InfiniteLine(pos=1.0, angle=0, pen=pg.mkPen("#9e9e9e", width=1))
        # Named in the legend, not by a label on the line: the live curves ran through that label. Over the
        # rounds the comparison decoded again: the whole reply's, or a continued part's only.
        self.measured = self.speedup_plot.plot(pen=pg.mkPen("#c62828", width=2, style=Qt.PenStyle.DashLine),
                                               connect="finite")
        # (first round, last round, speedup, the part's number) of each part measured fairly
        self.measured_parts: list[tuple[int, int, float, int]] = []
        self.speedup_plot.addItem(self.baseline)
        titles = {self.alpha_plot: "α per round", self.tokens_plot: "tokens per round",
                  self.speedup_plot: "speedup vs plain AR"}
        self.headers = {plot: ChartHeader(title) for plot, title in titles.items()}
        for plot, header in self.headers.items():
            header.show_entries(curve_entries(plot))
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)  # a header sits on its plot; a gap separates one chart from the next
        for index, (plot, header) in enumerate(self.headers.items()):
            if index:
                layout.addSpacing(6)
            layout.addWidget(header)
            layout.addWidget(plot)
        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self.refresh)
        self.timer.start()

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt's name)
        """The headers as they wrap at this width, not at their own widest: a legend wrapped to one more line than
        the layout reckoned pushed the last chart's axis out of a small pane."""
        hint = super().minimumSizeHint()
        wrapped = sum(max(0, header.heightForWidth(self.width()) - header.minimumSizeHint().height())
                      for header in self.headers.values())
        return QSize(hint.width(), hint.height() + wrapped)

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        if event.size().width() != event.oldSize().width():
            self.updateGeometry()  # the headers wrap anew: the pane holding the charts asks their minimum again

    def start_reply(self, gamma: int = 1, speculative: bool = True) -> None:
        """A plain AR reply is the baseline itself: its speedup chart says so and stays empty."""
        self.most_per_round = gamma + 1.0
        self.buffers.clear(speculative)
        self.headers[self.speedup_plot].note = "" if speculative else "none: this reply is plain AR"
        self.measured_parts = []
        self._show_measured()

    def add_round(self, event: RoundEvent) -> None:
        self.buffers.append(event)
        self._dirty = True

    def show_measured_speedup(self, speedup: float, part: Reply | None = None, number: int = 1) -> None:
        """A fair comparison of `part`, the part of the reply drawn last (None: the whole reply), its `number` in
        the reply. Its line runs over that part's rounds only, a continuation's the last ones drawn, beside any
        earlier part's."""
        last = self.buffers.n
        first = last - len(part.events) + 1 if part is not None and part.request.continues else 1
        self.measured_parts.append((first, last, speedup, number))
        self._show_measured()

    def _show_measured(self) -> None:
        """The measured lines and their legend entries come and go together."""
        said = measured_said(self.measured_parts)
        self.headers[self.speedup_plot].show_entries(curve_entries(self.speedup_plot)
                                                     + ([(self.measured.opts["pen"], said)] if said else []))
        self.updateGeometry()  # the legend may wrap to another line: the pane asks this panel's minimum again
        self._dirty = True

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
        x, y = [], []
        for first, last, speedup, _ in self.measured_parts:  # a gap (NaN) between one part's line and the next
            x += [first - 0.5, last + 0.5, np.nan]
            y += [speedup, speedup, np.nan]
        self.measured.setData(np.array(x, dtype=float), np.array(y, dtype=float))

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

    def measured_spans(self) -> list[tuple[float, float, float]]:
        """Each measured line as drawn: (from, to, speedup)."""
        x, y = self.measured.getData()
        if x is None:
            return []
        return [(float(x[i]), float(x[i + 1]), float(y[i])) for i in range(0, len(x) - 1, 3)]

    def point_count(self, name: str) -> int:
        """How many points the plot item of a series holds (what is drawn, not what is buffered)."""
        x, _ = self.curves[name].getData()
        return 0 if x is None else len(x)
