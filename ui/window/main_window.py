"""The main window: the frame, the menus, and the wiring of its panes to the chat controller
(app/chat/controller.py). The panes draw: the pair and the decoding controls (ui/pair/pane.py), the chat
(ui/chat/pane.py), the inspector and charts (ui/why/pane.py), side by side (ui/window/pane_splitter.py); the status
bar (ui/window/status.py) and the history dock. The menu bar is built in ui/window/menu_bar.py, the window's size
fitted to the screen in ui/window/fit.py; Compare drafters' table and the Help menu's windows are dialogs of their
own (ui/compare/drafters_dialog.py, ui/window/guide.py)."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, QSize, Qt, Signal
from PySide6.QtWidgets import QDialog, QDockWidget, QFileDialog, QMainWindow, QMessageBox

from app.chat.export import file_stem, written_said
from app.why import WhyGamma
from engine.choices import DEVICES, DTYPES
from engine.events import DecodeSettings, PairInfo, PrefillProgress
from engine.remote_records import TextDelta
from ui.chat.history import HistoryPanel
from ui.chat.pane import BUSY, EDITING, ChatPane
from ui.compare.drafters_dialog import DraftersDialog
from ui.pair.controls import DecodingControls, ModelPicker
from ui.pair.pane import PairPane
from ui.why.pane import AnalysisPane
from ui.window.fit import MIN_HEIGHT, MIN_WIDTH, ScreenFit
from ui.window.menu_bar import WindowMenus
from ui.window.pane_splitter import PANE_MIN_WIDTH, PaneSplitter
from ui.window.preferences import export_folder, remember_export_folder, restore_preferences, save_preferences
from ui.window.status import WindowStatusBar
from words.records import (ChatStatus, ComparisonShown, DraftersShown, EngineTarget, ReplyShown, RoundShown,
                           TurnOptions, TurnStarted, TurnState)
from words.wording import read_in_said, remote_header, reply_header, settings_said

HISTORY_WIDTH = 140  # the history dock's first width: its titles elide, and a small window's chat needs the room
# short enough to be read whole at 1000×700 beside a progress bar
INT4_NOTE = "The target runs on its GGUF's 4-bit blocks, as llama.cpp does; set weights to dtype to de-quantise it"


class MainWindow(QMainWindow):
    """The frame, the menus and the wiring. The conversation, its turn state and its saving are the chat
    controller's (app/chat/controller.py): the window asks it through the `*_requested` signals and passes what it
    reports on to the panes that draw it."""

    load_requested = Signal(str, object, str, str, str)  # target, draft or None, device, dtype, GGUF weights
    send_requested = Signal(str, object)  # the message, TurnOptions
    stop_requested = Signal()
    regenerate_requested = Signal(object)  # TurnOptions
    continue_requested = Signal(object)  # TurnOptions
    edit_requested = Signal(int)  # the turn whose message to edit and resend
    gamma_requested = Signal(int)
    new_chat_requested = Signal()
    export_requested = Signal(object)  # Path: the chat on screen, as app.chat.export.export_paths names its files
    compare_drafters_requested = Signal(object)  # TurnOptions: the last prompt with each drafting choice
    serve_requested = Signal()  # Model ▸ Serve the embedded pair on vLLM
    local_requested = Signal()  # Model ▸ Back to the local pair
    models_shown = Signal(object)  # PairInfo, once the window is ready to send
    round_shown = Signal(object)  # RoundEvent, once it is in the chat pane and the chart buffers
    turn_completed = Signal()  # the reply (and its AR comparison, if asked for) is on screen

    def __init__(self, presets: dict, target: str = "embedded", draft: str | None = "embedded-draft",
                 device: str = "auto", dtype: str = "auto", defaults: DecodeSettings = DecodeSettings(),
                 preferences: QSettings | None = None, devices: tuple[str, ...] = DEVICES,
                 dtypes: tuple[str, ...] = DTYPES, offline: dict[str, bool] | None = None,
                 vllm_missing: str | None = "vLLM is not installed: make serving-peer"):
        """`preferences` keeps settings and layout from one run to the next (nothing kept when None, as in the
        tests). `devices`, `dtypes` and `offline` (per preset: both models on disk) describe the machine; app/
        asks, as this module has no torch. `vllm_missing`: why the embedded pair cannot be served on vLLM here
        (None: it can)."""
        super().__init__()
        self.setWindowTitle("SpecDec Studio")
        self.status = ChatStatus(TurnState.IDLE, ready=False, n_turns=0, can_continue=False, editing=None)
        self.error_box: QMessageBox | None = None
        self.drafters_dialog: QDialog | None = None
        self.preferences = preferences
        self.remote: EngineTarget | None = None  # the engine replies come from; None: the local pair
        self.vllm_missing = vllm_missing

        self.history = HistoryPanel(preferences)
        self.picker = ModelPicker(presets, target, draft, device, dtype, devices, dtypes, offline)
        self.controls = DecodingControls(defaults)
        self.pair_pane = PairPane(self.picker, self.controls, PANE_MIN_WIDTH["side"])
        self.chat_pane = ChatPane(preferences)
        self.analysis = AnalysisPane(self.chat_pane.chat)
        self.status_bar = WindowStatusBar()
        # The panes' widgets under the names the window has always given them
        pane = self.chat_pane
        self.chat, self.message_box, self.legend = pane.chat, pane.message_box, pane.legend
        self.system_prompt_line = pane.system_prompt_line
        self.new_chat_button, self.continue_button, self.stop_button = (pane.new_chat_button, pane.continue_button,
                                                                       pane.stop_button)
        self.cancel_edit_button, self.send_button = pane.cancel_edit_button, pane.send_button
        self.copy_action, self.regenerate_action = pane.copy_action, pane.regenerate_action
        self.edit_action, self.continue_action = pane.edit_action, pane.continue_action
        self.inspector, self.charts = self.analysis.inspector, self.analysis.charts
        self.why_charts, self.engine_report = self.analysis.why_charts, self.analysis.engine_report
        self.chart_tabs, self.engine_tab = self.analysis.chart_tabs, self.analysis.engine_tab
        self.pair_label, self.reply_label = self.status_bar.pair_label, self.status_bar.reply_label
        self.load_progress = self.status_bar.load_progress
        self.comparison_progress = self.status_bar.comparison_progress
        self.prefill_progress = self.status_bar.prefill_progress

        self.splitter = PaneSplitter({"side": self.pair_pane, "chat": self.chat_pane, "right": self.analysis})
        self.panes, self.pane_actions = self.splitter.panes, self.splitter.pane_actions
        self.setCentralWidget(self.splitter)
        self.history_dock = self._history_dock()
        self.setStatusBar(self.status_bar)
        self.menus = WindowMenus(self)
        self._connect()
        self.on_status_changed(self.status)
        # The layout's own minimum where a font needs more room: a smaller one would cut panes off
        self.setMinimumSize(self.minimumSizeHint().expandedTo(QSize(MIN_WIDTH, MIN_HEIGHT)))
        self.resize(1400, 900)
        if preferences is not None:
            restore_preferences(preferences, self)
        self.screen_fit = ScreenFit(self)
        for name, act in self.pane_actions.items():
            act.setChecked(not self.panes[name].isHidden())

    # -- frame ------------------------------------------------------------------------------------------------

    def _history_dock(self) -> QDockWidget:
        """Past chats on the left, in a dock so it can be closed (View ▸ History) and its width is kept."""
        dock = QDockWidget("History", self)
        dock.setObjectName("history")  # QMainWindow.saveState finds docks by name
        dock.setWidget(self.history)
        dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetClosable)
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, dock)
        self.resizeDocks([dock], [HISTORY_WIDTH], Qt.Orientation.Horizontal)
        return dock

    def _connect(self) -> None:
        self.picker.load_requested.connect(self.load_requested)
        self.controls.gamma_changed.connect(self.gamma_requested)
        self.message_box.submitted.connect(self.send)
        self.stop_button.clicked.connect(self.stop)
        self.cancel_edit_button.clicked.connect(self.stop)  # the controller's stop leaves an edit when idle
        self.new_chat_button.clicked.connect(self.new_chat)
        self.chat_pane.regenerate_chosen.connect(self.regenerate)
        self.chat_pane.continue_chosen.connect(self.continue_reply)
        self.chat_pane.edit_requested.connect(self.edit_requested)
        self.chat_pane.status_posted.connect(self.statusBar().showMessage)
        self.history.status_posted.connect(lambda message: self.statusBar().showMessage(message, 6000))
        self.legend.trace_action.toggled.connect(self.analysis.on_view_changed)
        self.legend.reset(self.controls.greedy.isChecked())
        self.controls.max_new_tokens.valueChanged.connect(self.chat_pane.show_continue_reach)
        self.chat_pane.show_continue_reach(self.controls.max_new_tokens.value())

    # -- commands, passed on to the chat controller ----------------------------------------------------------

    @property
    def system_prompt(self) -> str:
        return self.chat_pane.system_prompt

    @system_prompt.setter
    def system_prompt(self, text: str) -> None:
        self.chat_pane.system_prompt = text

    def options(self) -> TurnOptions:
        """How the next turn is decoded: the controls' settings, Compare with AR and the system prompt."""
        return TurnOptions(self.controls.settings(), self.controls.compare_ar.isChecked(), self.system_prompt)

    def send(self, text: str) -> None:
        if self.status.busy:
            return
        if self.picker.picking:
            self.statusBar().showMessage("Find the best draft is measuring this CPU: send once it ends (or stop it)",
                                         6000)
            return
        if self.status.ready:
            self.message_box.clear()
        self.statusBar().clearMessage()  # "New chat, decoding as: …" would outlive settings changed before this send
        self.send_requested.emit(text, self.options())
        if self.preferences is not None:  # the settings a reply was sent with outlast a killed app, not only a quit
            save_preferences(self.preferences, self)

    def stop(self) -> None:
        self.stop_requested.emit()

    def new_chat(self) -> None:
        if self.preferences is not None:
            self.system_prompt = self.preferences.value("chat/system_prompt", "", type=str)
        else:
            self.system_prompt = ""
        self.new_chat_requested.emit()
        # the controls stay as they are, a reopened chat's restored settings too: the line says what they are
        self.statusBar().showMessage(f"New chat, decoding as: {settings_said(self.controls.settings())}", 8000)

    def regenerate(self) -> None:
        self.regenerate_requested.emit(self.options())

    def continue_reply(self) -> None:
        self.continue_requested.emit(self.options())

    def compare_drafters(self) -> None:
        if self.status.busy:
            self.statusBar().showMessage(BUSY, 4000)
            return
        self.statusBar().showMessage("Compare drafters: the last prompt with each drafting choice…")
        self.compare_drafters_requested.emit(self.options())

    def export_dialog(self) -> None:
        if self.status.busy:  # the reply on screen is not in the conversation until it ends
            self.statusBar().showMessage("A reply is still running: export (Ctrl+E) once it has finished", 6000)
            return
        if not self.status.n_turns:
            self.statusBar().showMessage("Nothing to export yet", 4000)
            return
        suggested = export_folder(self.preferences) / f"{file_stem(self.status.title)}.json"
        path, _ = QFileDialog.getSaveFileName(self, "Export chat", str(suggested),
                                              "Chat: NAME.json and NAME.csv (every round), NAME-positions.csv "
                                              "(acceptance by draft position), NAME.md (transcript) and NAME.png "
                                              "(charts, why this γ) (*.json)")
        if path:
            self.export_requested.emit(Path(path))

    # -- slots for the chat controller's signals -------------------------------------------------------------

    def on_status_changed(self, status: ChatStatus) -> None:
        self.status = status
        busy = status.busy
        self.chat_pane.on_status_changed(status)
        if status.state is TurnState.STOPPING:  # the worker stops between rounds or prompt chunks: say it was heard
            self.prefill_progress.hide()
            self.statusBar().showMessage("Stopping… (the round or prompt chunk in progress finishes first)")
        self.picker.set_busy(busy)
        self.menus.compare_drafters_action.setEnabled(status.ready and not busy and bool(status.n_turns)
                                                and not status.remote)
        serving = self.status_bar.serving_timer.isActive()
        self.menus.serve_action.setEnabled(self.vllm_missing is None and not busy and not serving)
        self.menus.local_action.setEnabled(status.remote and not busy)
        if status.state is TurnState.LOADING:
            self.status_bar.open_progress()
        else:
            self.status_bar.close_progress()

    def on_pair_loaded(self, info: PairInfo) -> None:
        self.status_bar.show_pair(info)
        if info.target.weights == "native":  # said where it is seen, not only in a tooltip
            self.statusBar().showMessage(INT4_NOTE, 20000)
        self.pair_pane.on_pair_loaded(info)
        self.chat_pane.default_system_prompt = info.default_system_prompt
        self.models_shown.emit(info)

    def on_load_failed(self, kept: PairInfo, loaded_request: tuple | None) -> None:
        """A new pair could not be loaded; `kept` still answers: the controls show it again."""
        self.pair_pane.on_load_failed(kept, loaded_request)
        self.statusBar().showMessage(f"Could not load the new pair; still using {self.pair_label.text()}", 15000)

    def on_conversation_cleared(self) -> None:
        self.chat_pane.on_conversation_cleared(self.controls.greedy.isChecked())
        self.analysis.on_conversation_cleared()
        self.reply_label.clear()

    def on_turn_started(self, started: TurnStarted) -> None:
        settings = started.request.settings
        self.analysis.on_turn_started(started)
        if started.live:  # the figures and the edit's hint were of the reply this one follows or replaces
            self.reply_label.clear()
            if self.statusBar().currentMessage() == EDITING:
                self.statusBar().clearMessage()
        self.chat_pane.on_turn_started(started, remote_header(self.remote.model, self.remote.url, settings)
                                       if self.remote is not None else reply_header(settings, (settings.gamma,)))

    def on_gammas_changed(self, settings: DecodeSettings, gammas: tuple[int, ...]) -> None:
        """γ moved mid-reply: the reply's header shows every γ it ran with."""
        self.chat.set_reply_header(reply_header(settings, gammas))
        self.analysis.on_gammas_changed(gammas)

    def on_round_received(self, shown: RoundShown) -> None:
        self.chat.add_round(shown.event)
        self.analysis.on_round_received(shown)
        if shown.live:
            self.round_shown.emit(shown.event)

    def on_reply_finished(self, shown: ReplyShown) -> None:
        self.chat_pane.on_reply_finished(shown)
        self.analysis.on_reply_finished(shown)
        self.status_bar.show_reply(shown.whole)
        if self.statusBar().currentMessage() == INT4_NOTE:  # the load's notice gives way to the reply's figures
            self.statusBar().clearMessage()

    def on_remote_connected(self, target: EngineTarget) -> None:
        """Replies come from `target` now: the Engine tab shows its counts, the legend and inspector say that no
        token's fate is known, and the local pair's own controls rest."""
        self.remote = target
        self.status_bar.show_engine(target)
        self.pair_pane.on_remote_connected(target)
        self.legend.set_remote(True)
        self.analysis.on_remote_connected(target)
        self.statusBar().showMessage(f"Connected to {target.model} at {target.url}", 8000)

    def on_remote_left(self, local_request: tuple | None) -> None:
        """Back to the local pair (or a connection that failed): the picker shows the pair that answers."""
        if self.remote is not None:  # the local pair's pair_loaded names it again
            self.pair_label.setText("no model loaded")
        self.remote = None
        self.pair_pane.on_remote_left(local_request)
        self.legend.set_remote(False)
        self.analysis.on_remote_left()

    def on_remote_failed(self, message: str) -> None:
        """One line in the status bar (and in the Engine tab): the chat goes on."""
        self.status_bar.close_progress()
        self.statusBar().showMessage(message, 20000)
        self.engine_report.on_failed(message)

    def on_remote_text_received(self, piece: TextDelta) -> None:
        self.chat.add_text(piece.text)
        self.engine_report.on_text_received(piece)

    def on_serving_requested(self) -> None:
        self.status_bar.start_serving()
        self.menus.serve_action.setEnabled(False)

    def on_serving_finished(self, _url: str = "") -> None:
        self.status_bar.stop_serving()
        self.menus.serve_action.setEnabled(self.vllm_missing is None and not self.status.busy)

    def on_serving_failed(self, message: str) -> None:
        self.on_serving_finished()
        self.statusBar().showMessage(message, 30000)

    def on_comparison_finished(self, shown: ComparisonShown) -> None:
        self.comparison_progress.hide()
        self.chat_pane.on_comparison_finished(shown)
        comparison = shown.comparison
        if not comparison.stopped:
            if comparison.fair:  # a busy or unequal comparison is no line to read the estimate against
                self.charts.show_measured_speedup(comparison.speedup, shown.reply, shown.part)
            self.status_bar.add_measured(comparison, shown.part, shown.chat_measured)
        self.statusBar().clearMessage()

    def on_why_changed(self, why: WhyGamma) -> None:
        """After each reply (and for a reopened chat): the cost model, the prediction and the slider's label."""
        self.analysis.on_why_changed(why)
        self.pair_pane.on_why_changed(why)

    def on_seed_advanced(self, old: int, new: int) -> None:
        self.controls.seed.setValue(new)
        self.statusBar().showMessage(
            f"Regenerating with seed {new}, a new sample (seed {old} gives the last one again)", 6000)

    def on_drafters_compared(self, shown: DraftersShown) -> None:
        """The table, in a dialog that stays open beside the chat."""
        self.statusBar().clearMessage()
        if self.drafters_dialog is not None:
            self.drafters_dialog.close()
        self.drafters_dialog = DraftersDialog(shown.comparison, self, shown.previous, shown.drawn_ar_tokens_per_s)
        self.drafters_dialog.show()

    def on_prefill_progressed(self, progress: PrefillProgress) -> None:
        """How far a long prompt has been read in: in the status bar, and after the header of the reply that waits
        for it (where the eye is)."""
        reading = progress.done < progress.total and self.status.state is not TurnState.STOPPING
        self.status_bar.show_prefill(progress, reading)
        self.chat.show_reading(f"reading the prompt: {read_in_said(progress)}…" if reading else "")

    def on_settings_restored(self, settings: DecodeSettings) -> None:
        """A reopened chat's decoding settings in the controls, and a line that says they changed (when they did)."""
        if self.pair_pane.restore_settings(settings):
            self.statusBar().showMessage(f"Decoding as this chat's last reply: {settings_said(settings)}", 8000)

    def on_exported(self, written: list) -> None:
        remember_export_folder(self.preferences, written[0])
        self.statusBar().showMessage(written_said(written), 8000)

    def on_export_failed(self, message: str) -> None:
        self.statusBar().showMessage(f"Export failed, nothing written: {message}", 10000)
        self._show_error(QMessageBox.Icon.Warning, "Export failed", f"Nothing was written: {message}")

    def on_failed(self, message: str) -> None:
        self.status_bar.close_progress()
        self.comparison_progress.hide()
        self._show_error(QMessageBox.Icon.Critical, "SpecDec Studio", message)

    def on_store_failed(self, message: str) -> None:
        """Saving failed mid-session (disk full, file removed): say so once, without interrupting the reply."""
        self.statusBar().showMessage(message)
        self._show_error(QMessageBox.Icon.Warning, "SpecDec Studio", message)

    def _show_error(self, icon: QMessageBox.Icon, title: str, message: str) -> None:
        """A message box that waits beside the window, not blocking it."""
        self.error_box = QMessageBox(icon, title, message, QMessageBox.StandardButton.Ok, self)
        self.error_box.open()

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self.status_bar.fit_pair_label()

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        self.stop()
        if self.preferences is not None:
            save_preferences(self.preferences, self)
        super().closeEvent(event)
