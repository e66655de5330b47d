"""The side pane: the model pair to load above the decoding controls, in a scroll area that a short window scrolls,
and what the chat controller reports about them (a pair loaded or kept, a remote engine, a reopened chat's
settings, γ's recommendation)."""
from __future__ import annotations

from PySide6.QtWidgets import QScrollArea, QVBoxLayout, QWidget

from app.why import WhyGamma, recommendation_text
from engine.benchmark.ranking import LOOKUP, NONE, Ranking
from engine.events import DecodeSettings, PairInfo
from ui.pair.controls import DecodingControls, ModelPicker
from ui.pair.draft_ranking import RankingDialog
from ui.window.preferences import apply_settings
from words.records import EngineTarget

SIDE_MAX_WIDTH = 320


class PairPane(QScrollArea):
    """`picker` and `controls` one above the other; never narrower than `least_width`, nor than they need."""

    def __init__(self, picker: ModelPicker, controls: DecodingControls, least_width: int):
        super().__init__()
        self.picker, self.controls = picker, controls
        self.ranking_dialog: RankingDialog | None = None
        self.loaded: tuple[str, str] | None = None  # the loaded pair: its target's path, its draft's (LOOKUP, NONE)
        side = QWidget()
        layout = QVBoxLayout(side)
        layout.addWidget(picker)
        layout.addWidget(controls)
        layout.addStretch(1)
        layout.setContentsMargins(4, 4, 4, 4)  # the pane's minimum width is the controls' plus these
        self.setWidget(side)
        self.setWidgetResizable(True)
        # A theme's larger font (GTK's) widens the controls: the pane then needs more than its usual least width
        room = side.minimumSizeHint().width() + self.verticalScrollBar().sizeHint().width()
        self.setMinimumWidth(max(least_width, room + 2 * self.frameWidth()))
        # A form needs no more: a wider window's room goes to the chat (the splitter shares a resize in proportion
        # to the panes' widths, the controls included).
        self.setMaximumWidth(SIDE_MAX_WIDTH)

    def showEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        """The library is scanned again each time the pane opens (the window's first showing included)."""
        super().showEvent(event)
        self.picker.refresh_requested.emit()

    def on_pair_loaded(self, info: PairInfo) -> None:
        self.controls.set_draft_available(info.draft is not None or self.picker.requested_draft == LOOKUP)
        draft = info.draft.path if info.draft else LOOKUP if self.picker.requested_draft == LOOKUP else NONE
        self.loaded = (info.target.path, draft)

    def on_pick_finished(self, ranking: Ranking) -> None:
        """The ranking, in a dialog beside the window; its figures beside the drafts in the list."""
        self.picker.on_pick_ended()
        if self.ranking_dialog is not None:
            self.ranking_dialog.close()
        self.ranking_dialog = RankingDialog(ranking, self.window(), self.loaded)
        self.ranking_dialog.use_requested.connect(self.picker.use_draft)
        self.ranking_dialog.show()

    def on_load_failed(self, kept: PairInfo, loaded_request: tuple | None) -> None:
        """A new pair could not be loaded; `kept` still answers: the picker shows it again."""
        self.picker.show_pair(*(loaded_request or (kept.target.name, kept.draft and kept.draft.name)))

    def on_remote_connected(self, target: EngineTarget) -> None:
        """Replies come from `target`: the picker names it, and the local pair's own controls rest."""
        self.picker.show_pair(target.url, target.model)
        self.controls.set_remote(True)

    def on_remote_left(self, local_request: tuple | None) -> None:
        """Back to the local pair (or a connection that failed): the picker shows the pair that answers."""
        self.controls.set_remote(False)
        if local_request is not None:
            self.picker.show_pair(*local_request)

    def on_why_changed(self, why: WhyGamma) -> None:
        """The γ slider's label says which γ the cost model recommends, and why."""
        recommendation = why.recommendation
        self.controls.show_recommendation(recommendation_text(why),
                                          recommendation.explanation if recommendation is not None else "")

    def restore_settings(self, settings: DecodeSettings) -> bool:
        """A reopened chat's decoding settings in the controls; whether they changed."""
        if settings == self.controls.settings():
            return False
        apply_settings(self.controls, settings)
        return True
