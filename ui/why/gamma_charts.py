"""The "why this γ" charts: acceptance by draft position (this reply and the session), under it where the chat
copied drafts how copies fare by their place in a run of them, what a round costs on this machine, and the predicted
speedup as a function of γ under the session's acceptance, with the replies measured.

Acceptance counts are appended per round into preallocated arrays and drawn by the same ~100 ms timer as the live
charts; the cost model and the prediction change once per reply (app.why.WhyGamma from the chat controller).
Titles and legends sit above the plots, as in ui.why.charts.
"""
from __future__ import annotations

from html import escape

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt, QTimer
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import QLabel, QSizePolicy, QVBoxLayout, QWidget

from app.why import (WhyGamma, confidence_note, copy_run_line, copy_run_tip, estimate_note, machine_line,
                     measured_short_note)
from engine.decoding.costs import MEASURED_ROWS
from engine.decoding.recommend import MAX_GAMMA
from engine.events import Drafting, RoundEvent
from engine.stats import expected_tokens_per_round
from ui.why.charts import AXIS_END_ROOM, CHART_INK, REFRESH_MS, ChartHeader, _plot, legend_entry
from words.records import Session
from words.wording import pair_said

MIN_WHY_HEIGHT = 170  # the least at which a plot shows its x ticks and axis title whole; at 1000×700 the tab scrolls
EXPORT_WHY_SIZE = QSize(420, 200)  # in the export's image: the tab's least width, and each plot's least height
CHART_GAP = 6  # between one chart and the next chart's header
MAX_POSITIONS = 64  # DecodeSettings' largest γ
BAR_WIDTH = 0.36
# Runs drafted by the confidence stop: drawn apart from the cost-aware rounds the lines predict, and said so
CONFIDENCE_SYMBOL = "t1"  # a triangle pointing up
CONFIDENCE_SAID = "drafted by the confidence stop, not the cost-aware rounds the lines predict"
DOTS_SPREAD = 0.8  # the most of a γ step that dots at one γ are spread over, side by side instead of on each other
DOT_STEP = 0.15  # between dots at one γ, where they have room
COLOURS = {"reply": "#1e88e5", "session": "#90a4ae", Drafting.MODEL: "#1565c0", Drafting.LOOKUP: "#2e7d32",
           Drafting.BOTH: "#6a1b9a"}
DRAFTING_NAMES = {Drafting.MODEL: "draft model", Drafting.LOOKUP: "copying", Drafting.BOTH: "both"}


class PositionCounts:
    """Acceptance along the draft of some rounds, as engine.stats.position_acceptance counts it, in O(γ) per round."""

    def __init__(self):
        self.rounds = 0
        self.drafted = np.zeros(MAX_POSITIONS)  # [i]: rounds that made an (i+1)-th draft
        self.kept = np.zeros(MAX_POSITIONS)  # [i]: rounds whose (i+1)-th draft was kept
        self.gammas = np.zeros(MAX_POSITIONS + 1)  # [g]: rounds that made g drafts (for the seed's E)
        self.accepted = self.verified = self.tokens = 0

    def clear(self) -> None:
        self.__init__()

    def add(self, event: RoundEvent) -> None:
        gamma = min(event.gamma, MAX_POSITIONS)
        self.rounds += 1
        self.drafted[:gamma] += 1
        self.kept[:min(event.n_accepted, MAX_POSITIONS)] += 1
        self.gammas[gamma] += 1
        self.accepted += event.n_accepted
        self.verified += len(event.drafted)
        self.tokens += len(event.emitted)

    @property
    def longest(self) -> int:
        """The most drafts any of these rounds made."""
        made = np.nonzero(self.drafted)[0]
        return int(made[-1]) + 1 if len(made) else 0

    def kept_share(self) -> np.ndarray:
        """[i]: the share of rounds whose (i+1)-th draft was kept, for i < longest."""
        return self.kept[: self.longest] / self.rounds if self.rounds else np.zeros(0)

    @property
    def alpha(self) -> float:
        return self.accepted / self.verified if self.verified else 0.0

    @property
    def mean_accepted(self) -> float:
        return self.accepted / self.rounds if self.rounds else 0.0

    @property
    def mean_verified(self) -> float:
        """Drafts the target checked a round: mean_accepted over it is α."""
        return self.verified / self.rounds if self.rounds else 0.0

    @property
    def tokens_per_round(self) -> float:
        return self.tokens / self.rounds if self.rounds else 0.0

    @property
    def seed_tokens_per_round(self) -> float:
        """The seed's E = (1 − α^(γ+1)) / (1 − α) at these rounds' α, averaged over their own γ."""
        if not self.rounds:
            return 0.0
        alpha = self.alpha
        return sum(n * expected_tokens_per_round(alpha, g) for g, n in enumerate(self.gammas) if n) / self.rounds


# (cost-aware, measured, the legend's dot, what it says after the drafting's name)
DOT_KINDS = ((True, True, "●", "measured"), (True, False, "○", "live"),
             (False, True, "▲", "by the confidence stop, measured"),
             (False, False, "△", "by the confidence stop, live"))


def dot_positions(points) -> list[float]:
    """Each point's x: its γ, or, where several share a γ, side by side around it in the order they ran."""
    at: dict[int, list[int]] = {}
    for index, point in enumerate(points):
        at.setdefault(point.gamma, []).append(index)
    xs = [float(point.gamma) for point in points]
    for gamma, indices in at.items():
        step = min(DOT_STEP, DOTS_SPREAD / (len(indices) - 1)) if len(indices) > 1 else 0.0
        for k, index in enumerate(indices):
            xs[index] = gamma + (k - (len(indices) - 1) / 2) * step
    return xs


def swatch_entry(colour: str, name: str) -> str:
    return f"<span style='color:{colour}'>■</span>&nbsp;" + escape(name).replace(" ", "&nbsp;")


def figures(counts: PositionCounts) -> str:
    """Drafts kept a round, a count, out of those the target checked, with their ratio α beside it so the count is
    not read as α; then measured tokens per round beside the seed's E."""
    rate = f"{counts.tokens_per_round:.2f} tokens/round (seed's E {counts.seed_tokens_per_round:.2f})"
    if not counts.verified:  # "0.00 of 0.00 … (α 0.00)" would read as every draft rejected
        return f"no drafts checked, {rate}"
    return (f"{counts.mean_accepted:.2f} of {counts.mean_verified:.2f} checked drafts kept a round "
            f"(α {counts.alpha:.2f}), {rate}")


FIGURES_TIP = ("drafts kept a round: of the drafts the target checked each round, how many it accepted, on average "
               "over every round (the mean acceptance length; a round that drafted nothing checks none). The target "
               "checks a round's drafts in order up to the first it rejects and leaves the rest unchecked. Kept "
               "over checked is α, a share: 1.25 of 1.75 drafts kept a round is α 0.71, and a high α can go with "
               "few drafts kept a round where most rounds draft nothing.\n"
               "tokens/round: those kept drafts plus the target's own token each round (a correction or a bonus).\n"
               "seed's E: the tokens a round of γ drafts would give if each were kept with chance α, "
               "(1 − α^(γ+1)) / (1 − α).")


class WholeNumberAxis(pg.AxisItem):
    """An axis of counts (draft positions, block rows, γ): ticks at whole numbers only, however few it spans."""

    def tickSpacing(self, minVal, maxVal, size):  # noqa: N802, N803 (pyqtgraph's names)
        levels = [(round(spacing), offset) for spacing, offset in super().tickSpacing(minVal, maxVal, size)
                  if spacing >= 1 and abs(spacing - round(spacing)) < 1e-9]
        return levels or [(1, 0)]


def count_axis(plot: pg.PlotWidget, label: str) -> None:
    """Give `plot` a whole-number x axis titled `label`, styled as ui.why.charts styles its axes."""
    axis = WholeNumberAxis("bottom")
    plot.setAxisItems({"bottom": axis})
    axis.setStyle(hideOverlappingLabels=AXIS_END_ROOM)
    plot.setLabel("bottom", label, **{"font-size": "8pt", "color": CHART_INK})


class WhyGammaPanel(QWidget):
    """The second tab of the charts pane."""

    def __init__(self, parent=None):
        super().__init__(parent)
        pg.setConfigOptions(background="w", foreground="#333", antialias=False)  # as ui.why.charts, drawn alone too
        self.reply = PositionCounts()
        self.reply_speculative = True
        self.reply_left_out = False  # the last reply is another pair's than the one loaded: no bars of its own
        self.session = PositionCounts()
        self.why: WhyGamma | None = None
        self._dirty = False
        self.acceptance_plot = _plot("share of rounds whose i-th draft was kept (the first i drafts all accepted), "
                                     "for this reply and for every speculative reply of this chat (a new or reopened "
                                     "chat starts over); their sum is "
                                     "the mean acceptance length, and 1 + it the tokens per round", "share")
        count_axis(self.acceptance_plot, "draft position i")
        self.acceptance_plot.setYRange(0, 1.05, padding=0)
        self.bars = {name: pg.BarGraphItem(x=[], height=[], width=BAR_WIDTH, brush=COLOURS[name], pen=pg.mkPen(None),
                                           name=name) for name in ("reply", "session")}
        for bar in self.bars.values():
            self.acceptance_plot.addItem(bar)

        self.costs_plot = _plot("the pair's measured costs on this machine: the target's forward over a block of "
                                "k rows (a round of k − 1 drafts), one draft-model step and one copied token "
                                "(prompt lookup); each the fastest timing seen", "ms")
        count_axis(self.costs_plot, "rows in the target's block")
        dashed = dict(width=2, style=Qt.PenStyle.DashLine)
        self.cost_curves = {
            "block": self.costs_plot.plot(pen=pg.mkPen("#263238", width=2), symbol="o", symbolSize=5,
                                          symbolBrush="#263238", name="target block"),
            "draft": self.costs_plot.plot(pen=pg.mkPen(COLOURS[Drafting.MODEL], **dashed), name="draft step"),
            "copy": self.costs_plot.plot(pen=pg.mkPen(COLOURS[Drafting.LOOKUP], **dashed), name="copy"),
        }

        self.speedup_plot = _plot("predicted speedup over plain AR for rounds capped at γ drafts, from the cost "
                                  "model and this chat's acceptance by position with each drafting, scaled to pass "
                                  "through what was measured with that drafting; the dots are this chat's replies "
                                  "and Compare drafters runs (filled: measured by a fair Compare with AR or by "
                                  "Compare drafters, hollow: the reply's own live figure, measured against its plain "
                                  "rounds, where no Compare ran or it met a busy machine); grey: plain AR (1×)", "×")
        count_axis(self.speedup_plot, "γ (most drafts per round)")
        self.predicted = {d: self.speedup_plot.plot(pen=pg.mkPen(COLOURS[d], width=2), name=f"{DRAFTING_NAMES[d]}")
                          for d in DRAFTING_NAMES}
        # hovering a dot says what ran it (pyqtgraph's tooltip on the view, from each spot's MeasuredPoint)
        self.measured = {d: pg.ScatterPlotItem(size=7, pen=COLOURS[d], brush=COLOURS[d], hoverable=True,
                                               tip=lambda x, y, data: data.said(), name=f"{DRAFTING_NAMES[d]} replies")
                         for d in DRAFTING_NAMES}
        for dots in self.measured.values():
            self.speedup_plot.addItem(dots)
        self.speedup_plot.addItem(pg.InfiniteLine(pos=1.0, angle=0, pen=pg.mkPen("#9e9e9e", width=1)))
        self.speedup_plot.setXRange(0.5, MAX_GAMMA + 0.5, padding=0)

        self.explanation = QLabel("")
        self.explanation.setWordWrap(True)
        self.explanation.setStyleSheet(f"background: white; color: {CHART_INK}; font-size: 8pt; padding: 2px;")
        self.explanation.setToolTip("What the cost-aware rounds decide, and from which of this machine's costs. A "
                                    "draft's cost all told is its step (the cost chart's line), its bookkeeping "
                                    "and its row in the target's block.")

        self.headers = {self.acceptance_plot: ChartHeader("acceptance by draft position"),
                        self.costs_plot: ChartHeader("cost model (this machine)"),
                        self.speedup_plot: ChartHeader("predicted speedup by γ")}
        self.headers[self.acceptance_plot].setToolTip(FIGURES_TIP)
        for plot in self.headers:
            plot.setMinimumHeight(MIN_WHY_HEIGHT)
            # not a view's own size hint (480 px): the pane's height is shared, and below this minimum the tab scrolls
            plot.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.MinimumExpanding)
            plot.sizeHint = lambda: QSize(0, MIN_WHY_HEIGHT)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        # under the acceptance chart, where the chat's rounds copied: a copied run is kept or lost at its start
        self.copy_runs = QLabel("")
        self.copy_runs.setWordWrap(True)
        self.copy_runs.setTextFormat(Qt.TextFormat.PlainText)
        self.copy_runs.setStyleSheet(self.explanation.styleSheet())
        layout.addWidget(self.explanation)  # the conclusion first: in view where the tab scrolls to its plots
        for plot, header in self.headers.items():
            layout.addSpacing(CHART_GAP)
            layout.addWidget(header)
            layout.addWidget(plot, 1)  # the pane's height beyond the text goes to the plots
            if plot is self.acceptance_plot:
                layout.addWidget(self.copy_runs)
        self.show_why(None)
        self._show_acceptance()
        self.timer = QTimer(self)
        self.timer.setInterval(REFRESH_MS)
        self.timer.timeout.connect(self.refresh)
        self.timer.start()

    # -- slots: acceptance appends per round ----------------------------------------------------------------

    def clear(self) -> None:
        """A conversation cleared (new chat, reopened or replayed): the session starts over."""
        self.reply.clear()
        self.session.clear()
        self._dirty = True

    def start_reply(self, speculative: bool = True) -> None:
        self.reply.clear()
        self.reply_speculative = speculative  # a plain AR reply has no acceptance: its line says so
        self.reply_left_out = False
        self._dirty = True

    def add_round(self, event: RoundEvent, speculative: bool = True) -> None:
        """Plain AR replies are the baseline: their rounds draft nothing and stay out of the session's count."""
        if speculative:
            self.reply.add(event)
            self.session.add(event)
            self._dirty = True

    def refresh(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        self._show_acceptance()

    def bar_heights(self, name: str) -> list[float]:
        """What the bars of "reply" or "session" show, position by position (drawn, not buffered)."""
        return [float(h) for h in self.bars[name].opts["height"]]

    def _show_acceptance(self) -> None:
        for name, counts, offset in (("reply", self.reply, -BAR_WIDTH / 2), ("session", self.session, BAR_WIDTH / 2)):
            share = counts.kept_share()
            self.bars[name].setOpts(x=np.arange(1, len(share) + 1) + offset, height=share, width=BAR_WIDTH)
        longest = max(self.session.longest, self.reply.longest, 1)
        if self.acceptance_plot.viewRange()[0] != [0.5, longest + 0.5]:
            self.acceptance_plot.setXRange(0.5, longest + 0.5, padding=0)
        header = self.headers[self.acceptance_plot]
        if not self.session.rounds:
            header.note = "none yet: a speculative reply fills it"
            header.show_entries([])
            return
        header.note = ""
        mine = ("another pair's, left out (the chat's figures are the loaded pair's)" if self.reply_left_out
                else figures(self.reply) if self.reply.rounds else "no rounds yet" if self.reply_speculative
                else "plain AR, no drafts (the chat's figures leave it out)")
        header.show_legend(swatch_entry(COLOURS["reply"], "this reply") + ": " + escape(mine)
                           + "<br>" + swatch_entry(COLOURS["session"], "this chat") + ": "
                           + escape(figures(self.session)))

    # -- once per reply: the cost model and the prediction ----------------------------------------------------

    def show_why(self, why: WhyGamma | None) -> None:
        self.why = why
        if why is not None:  # the chat's acceptance as the controller counts it: the loaded pair's replies only
            self.session.clear()
            for event in why.rounds:
                self.session.add(event)
            if why.last_left_out:
                self.reply.clear()
                self.reply_left_out = True
            self._dirty = True
        costs = why.costs if why is not None else {}
        blocks = costs.get("target_block_ms", [])[:MEASURED_ROWS]
        rows = np.arange(1, len(blocks) + 1, dtype=float)
        self.cost_curves["block"].setData(rows, np.array(blocks, dtype=float))
        for name, key in (("draft", "draft_step_ms"), ("copy", "copy_ms")):
            ms = costs.get(key, 0.0)
            shown = bool(blocks) and ms > 0
            self.cost_curves[name].setData([1.0, float(len(blocks))] if shown else [], [ms, ms] if shown else [])
        top = max([*blocks, costs.get("draft_step_ms", 0.0), 1.0])
        self.costs_plot.setRange(xRange=(0.5, max(len(blocks), 1) + 0.5), yRange=(0, top * 1.15), padding=0)
        cost_header = self.headers[self.costs_plot]
        cost_header.note = "" if blocks else "not measured yet: the pair is timed when it loads"
        entries = [(self.cost_curves["block"].opts["pen"], "target block")]
        for name, key, label in (("draft", "draft_step_ms", "draft step"), ("copy", "copy_ms", "copy")):
            if costs.get(key, 0.0) > 0:
                entries.append((self.cost_curves[name].opts["pen"], f"{label} {costs[key]:.3g} ms"))  # 203, not 2e+02
        # what decides drafting on this CPU, beside where the costs come from
        said = " ".join(note for note in (why.costs_note, machine_line(why)) if note) if why is not None else ""
        cost_header.show_entries(entries, escape(said))

        recommendation = why.recommendation if why is not None else None
        speedups = recommendation.speedups if recommendation is not None else {}
        top = 2.0
        for drafting, curve in self.predicted.items():
            values = speedups.get(drafting, [])
            curve.setData(np.arange(1, len(values) + 1, dtype=float), np.array(values, dtype=float))
            top = max(top, *values) if values else top
        points = why.points if why is not None else ()
        xs = dot_positions(points)
        for drafting, dots in self.measured.items():
            mine = [(x, p) for x, p in zip(xs, points) if p.drafting is drafting]
            dots.setData(x=[x for x, _ in mine], y=[p.speedup for _, p in mine], data=[p for _, p in mine],
                         symbol=[CONFIDENCE_SYMBOL if not p.cost_aware else "o" for _, p in mine],
                         brush=[COLOURS[drafting] if p.measured else "w" for _, p in mine])
            top = max([top] + [p.speedup for _, p in mine])
        widest = max([MAX_GAMMA] + [p.gamma for p in points])
        self.speedup_plot.setRange(xRange=(0.5, widest + 0.5), yRange=(0, np.ceil(top * 2) / 2 + 0.25), padding=0)
        header = self.headers[self.speedup_plot]
        header.note = "" if recommendation is not None else "none yet: needs the cost model and a speculative reply"
        entries = [legend_entry(self.predicted[d].opts["pen"], self.predicted[d].name())
                   for d in DRAFTING_NAMES if d in speedups]
        if speedups:  # the slider goes further than the timing at load; breakable: it is wider than a narrow pane
            entries.append(f"lines end at γ = {MAX_GAMMA}: longer blocks not timed")
        # a dot's fill says where its figure comes from, its shape which rule drafted: the legend says each way
        for drafting in DRAFTING_NAMES:
            for cost_aware, measured, dot, said in DOT_KINDS:
                if any(p.drafting is drafting and p.measured is measured and p.cost_aware is cost_aware
                       for p in points):
                    # breakable after the drafting's name: a narrow pane must not be widened by one entry
                    entries.append(f"<span style='color:{COLOURS[drafting]}'>{dot}</span>&nbsp;"
                                   + DRAFTING_NAMES[drafting].replace(" ", "&nbsp;") + f"&nbsp;{said}")
        if any(not p.cost_aware for p in points):
            entries.append(f"▲&nbsp;△&nbsp;{escape(CONFIDENCE_SAID)}")
        header.show_legend(escape(header.note) if header.note else " &nbsp; ".join(entries))
        self.explanation.setText(self.explanation_text())
        line = copy_run_line(why) if why is not None else ""
        self.copy_runs.setText(line)
        self.copy_runs.setToolTip(copy_run_tip(why) if line else "")
        self.copy_runs.setVisible(bool(line))

    def explanation_text(self) -> str:
        """One line: what the rounds chose and why (the recommendation's own explanation)."""
        recommendation = self.why.recommendation if self.why is not None else None
        if recommendation is None and self.why is not None and self.why.only_another_pairs:
            return (f"Why this γ: this chat's replies were decoded by {pair_said(self.why.left_out, short=True)}, "
                    "not the pair loaded now: load that pair to see what its rounds chose and why.")
        if recommendation is None:
            return "Why this γ: after a speculative reply, what the rounds chose and why."
        notes = "".join(f" {note}" for note in (measured_short_note(self.why), confidence_note(self.why),
                                                   estimate_note(self.why)) if note)
        if recommendation.drafting is Drafting.NONE:
            return f"Best here: plain AR; {recommendation.explanation}.{notes}"
        return (f"Best here: {DRAFTING_NAMES[recommendation.drafting]}, γ ≤ {recommendation.gamma} "
                f"(predicted {recommendation.speedup:.2f}×); {recommendation.explanation}.{notes}")


def why_panel(session: Session, why: WhyGamma, size: QSize) -> WhyGammaPanel:
    """The tab built and laid out off-screen, as the window draws it whether or not it is shown: every speculative
    round of the session, the last reply's as "this reply", and `why`'s costs, prediction and line. At least
    `size`, and wide and tall enough that each plot gets EXPORT_WHY_SIZE's height under its wrapped header."""
    panel = WhyGammaPanel()
    panel.timer.stop()  # drawn once, here
    for reply, _ in session.shown_replies():
        speculative = reply.speculative
        panel.start_reply(speculative)
        for event in reply.events:
            panel.add_round(event, speculative)
    panel.show_why(why)
    panel.refresh()
    width = max(size.width(), EXPORT_WHY_SIZE.width())
    labels = (*panel.headers.values(), panel.explanation, *([panel.copy_runs] if copy_run_line(why) else []))
    text = sum(label.heightForWidth(width) for label in labels)
    spacing = CHART_GAP * len(panel.headers)
    panel.resize(width, max(size.height(), text + spacing + len(panel.headers) * EXPORT_WHY_SIZE.height()))
    panel.layout().activate()  # a widget never shown is laid out only when asked
    return panel


def why_image(session: Session, why: WhyGamma, size: QSize) -> QPixmap:
    """`why_panel`, drawn: the export's picture of the tab."""
    panel = why_panel(session, why, size)
    image = panel.grab()
    panel.deleteLater()
    return image
