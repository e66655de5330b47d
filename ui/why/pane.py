"""The right-hand pane: the token inspector above the tabs of the last reply's live charts, why this γ and a remote
engine's report; and the exported image of every reply's charts, drawn as the live ones draw them."""
from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtGui import QImage, QPainter
from PySide6.QtWidgets import QScrollArea, QSplitter, QTabWidget

from app.why import WhyGamma, why_gamma
from engine.events import Fate, Mode
from ui.chat.inspector import TokenInspector, first_rejection_note
from ui.chat.view import ChatView
from ui.why.charts import ChartsPanel
from ui.why.engine_report import FATES_NOTE, EngineReport
from ui.why.gamma_charts import WhyGammaPanel, why_image
from words.records import EngineTarget, NumberedReply, ReplyShown, RoundShown, Session, TurnStarted, numbered_replies

EXPORT_TITLE_HEIGHT = 20  # the exported chart image's row naming each reply and the why tab


class AnalysisPane(QSplitter):
    """The inspector shows the token under the mouse in `chat`, or the one a click pinned; the charts follow the
    reply being drawn, round by round."""

    def __init__(self, chat: ChatView):
        super().__init__(Qt.Orientation.Vertical)
        self.chat = chat
        self.inspector = TokenInspector()
        self.charts = ChartsPanel()
        self.why_charts = WhyGammaPanel()
        self.engine_report = EngineReport()
        self._speculative = True  # the reply being drawn is speculative (its rounds count in the acceptance)
        # The live charts of the reply, and beside them why its γ: the pane at the smallest size holds three charts
        self.chart_tabs = QTabWidget()
        self.chart_tabs.setDocumentMode(True)
        # Named for what it shows: a token pinned in an earlier reply leaves the charts on the last one
        self.chart_tabs.addTab(self.charts, "last reply")
        self.chart_tabs.setTabToolTip(0, "The last reply's α, tokens per round and estimated speedup, round by round "
                                         "(live while it runs; an earlier reply's are in the PNG export)")
        # Scrolls rather than holding a small window taller where the legends wrap to many lines
        why_scroll = QScrollArea()
        why_scroll.setWidget(self.why_charts)
        why_scroll.setWidgetResizable(True)
        why_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        why_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.why_tab = self.chart_tabs.addTab(why_scroll, "why this γ")
        self.chart_tabs.setTabToolTip(self.why_tab, "Acceptance by draft position, this machine's costs, and the "
                                                    "speedup the cost model predicts for each γ")
        # What a remote engine reports about each reply; shown while one answers
        self.engine_tab = self.chart_tabs.addTab(self.engine_report, "Engine")
        self.chart_tabs.setTabToolTip(self.engine_tab, "The remote engine's acceptance counts for the last reply, "
                                                       "and our tokens/s")
        self.chart_tabs.setTabVisible(self.engine_tab, False)
        self.addWidget(self.inspector)
        self.addWidget(self.chart_tabs)
        self.setChildrenCollapsible(False)
        self.setStretchFactor(0, 1)
        self.setStretchFactor(1, 2)
        self.setSizes([290, 600])
        chat.token_hovered.connect(self.inspect)
        chat.token_clicked.connect(self.on_token_clicked)
        chat.background_clicked.connect(self.on_background_clicked)

    # -- the controller's reports ----------------------------------------------------------------------------

    def on_conversation_cleared(self) -> None:
        self.charts.start_reply()
        self.why_charts.clear()
        self.inspector.reset()

    def on_turn_started(self, started: TurnStarted) -> None:
        """A continuation goes on on the same chart."""
        settings = started.request.settings
        if not self.inspector.pinned:  # the last reply's token would pass for one of this reply
            self.inspector.reset()
        self._speculative = settings.mode is Mode.SPEC
        if started.request.continues:
            self.charts.most_per_round = max(self.charts.most_per_round, settings.gamma + 1.0)
            return
        self.charts.start_reply(settings.gamma, speculative=self._speculative)
        self.why_charts.start_reply(speculative=self._speculative)

    def on_gammas_changed(self, gammas: tuple[int, ...]) -> None:
        self.charts.most_per_round = max(self.charts.most_per_round, gammas[-1] + 1.0)

    def on_round_received(self, shown: RoundShown) -> None:
        self.charts.add_round(shown.event)
        self.why_charts.add_round(shown.event, self._speculative)

    def on_reply_finished(self, shown: ReplyShown) -> None:
        """A local reply is in the chat: the charts draw its last round, the inspector its first rejection. A
        remote engine's: the Engine tab its counts."""
        source = shown.whole.remote
        if source is not None:
            if source.reply is not None:
                self.engine_report.on_reply_finished(source.reply)
            return
        self.charts.refresh()
        self.inspect_first_rejection(len(shown.reply.events) if shown.reply.request.continues else None)

    def on_why_changed(self, why: WhyGamma) -> None:
        self.why_charts.show_why(why)

    def on_remote_connected(self, target: EngineTarget) -> None:
        """The Engine tab shows the engine's counts, and the inspector says that no token's fate is known."""
        self.chart_tabs.setTabVisible(self.engine_tab, True)
        self.chart_tabs.setCurrentIndex(self.engine_tab)
        self.engine_report.summary.setText(f"Connected to {target.model} at {target.url}; no reply yet.")
        self.inspector.reset()
        self.inspector.label.setText(FATES_NOTE)

    def on_remote_left(self) -> None:
        self.chart_tabs.setTabVisible(self.engine_tab, False)
        self.chart_tabs.setCurrentIndex(0)
        self.inspector.reset()

    # -- the inspector ---------------------------------------------------------------------------------------

    def on_view_changed(self) -> None:
        """The chat switched between the clean view and the trace."""
        if not self.inspector.pinned:  # what was shown may not be drawn in this view
            self.inspector.reset()
            self.inspect_first_rejection()

    def inspect_first_rejection(self, part_rounds: int | None = None) -> None:
        """Open the inspector on the last reply's first rejection, the most telling token to look at: the rejected
        draft in the trace; in the clean view, which leaves drafts out, the token put in its place (its inspector
        shows what the draft proposed too). `part_rounds`: a continuation's, whose last rounds it looks in."""
        item = self.chat.transcript.last_reply()
        from_round = item.rounds - part_rounds if item is not None and part_rounds is not None else 0
        for index in range(item.first, item.end) if item is not None else ():
            span = self.chat.spans[index]
            if (span.round_index >= from_round and (span.fate is Fate.REJECTED or span.replaces is not None)
                    and self.chat.shows(span)):
                self.inspector.show_span(span, first_rejection_note(span, continued=part_rounds is not None),
                                         self.chat.transcript.copy_origin(index))
                return

    def inspect(self, index: int) -> None:
        span = self.chat.spans[index]
        if span.fate is Fate.UNKNOWN:  # a remote engine's text: nothing to show but why
            if not self.inspector.pinned:
                self.inspector.reset()
                self.inspector.label.setText(FATES_NOTE)
            return
        self.inspector.show_span(span, origin=self.chat.transcript.copy_origin(index))

    def on_token_clicked(self, index: int) -> None:
        """A click pins a token in the inspector; clicking the pinned token again releases it."""
        if self._pinned_index() == index:
            self.on_background_clicked()
            return
        if self.chat.spans[index].fate is Fate.UNKNOWN:
            self.inspect(index)
            return
        self.inspector.pin(self.chat.spans[index], self.chat.transcript.copy_origin(index))
        self.chat.mark_pinned(index)

    def on_background_clicked(self) -> None:
        if self.inspector.pinned:
            self.inspector.unpin()
            self.chat.mark_pinned(None)

    def _pinned_index(self) -> int | None:
        """Where the inspector's pinned token is in the chat (None when nothing is pinned, or after New chat)."""
        if not self.inspector.pinned:
            return None
        return next((i for i, span in enumerate(self.chat.spans) if span is self.inspector.span), None)

    # -- the export ------------------------------------------------------------------------------------------

    def chart_image(self, session: Session) -> QImage:
        """Every reply's charts side by side, each drawn as the live charts draw it, at the charts pane's width and
        the image's height, and after them the why this γ tab as it reads now (drawn afresh: the tab may never have
        been shown)."""
        size = self.charts.size() if self.charts.width() > 50 else QSize(350, 600)
        shown = numbered_replies(session)
        why = why_image(session, self.why_charts.why or why_gamma(session), size)
        why_size = why.deviceIndependentSize().toSize()  # the charts' columns are in the same logical pixels
        replies_width = size.width() * max(1, len(shown))
        # The why tab grows past the pane's height to give its plots room under their wrapped headers: each reply's
        # charts are drawn as tall, so that no column ends above the image's bottom.
        height = max(size.height(), why_size.height())
        image = QImage(replies_width + why_size.width(), height + EXPORT_TITLE_HEIGHT, QImage.Format.Format_RGB32)
        image.fill(Qt.GlobalColor.white)
        painter = QPainter(image)
        for column, numbered in enumerate(shown):
            charts = reply_charts(numbered, QSize(size.width(), height))
            x = column * size.width()
            painter.drawText(QRect(x, 0, size.width(), EXPORT_TITLE_HEIGHT), Qt.AlignmentFlag.AlignCenter,
                             f"reply {column + 1}")
            painter.drawPixmap(x, EXPORT_TITLE_HEIGHT, charts.grab())
            charts.deleteLater()
        painter.drawText(QRect(replies_width, 0, why_size.width(), EXPORT_TITLE_HEIGHT), Qt.AlignmentFlag.AlignCenter,
                         "why this γ")
        painter.drawPixmap(replies_width, EXPORT_TITLE_HEIGHT, why)
        painter.end()
        return image


def reply_charts(numbered: NumberedReply, size: QSize) -> ChartsPanel:
    """A reply's charts as the live ones drew it, part by part (each part's fair comparison over its rounds)."""
    reply = numbered.whole
    charts = ChartsPanel()
    charts.resize(size)
    charts.start_reply(reply.gamma, speculative=reply.speculative)
    for number, (part, comparison) in enumerate(zip(numbered.parts, numbered.comparisons), start=1):
        for event in part.events:
            charts.add_round(event)
        if comparison is not None and comparison.fair:
            charts.show_measured_speedup(comparison.speedup, part, number)
    charts.refresh()
    return charts
