"""The main window: controls, the chat pane with its legend, the token inspector and the live charts."""
from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QFileDialog, QHBoxLayout, QLabel, QMainWindow, QMessageBox, QProgressDialog,
                               QPushButton, QScrollArea, QSplitter, QVBoxLayout, QWidget)

from engine.events import ContextNotice, DecodeSettings, Fate, PairInfo, PrefillProgress, RoundEvent
from ui.charts import ChartsPanel
from ui.chat_view import ChatView
from ui.controls import DecodingControls, ModelPicker
from ui.export import ExportError, export_session
from ui.inspector import TokenInspector
from ui.legend import Legend
from ui.message_box import MessageBox
from ui.session import Comparison, Reply, ReplyRequest, Session


def short_name(name: str) -> str:
    """A model name that fits the status bar: the file or folder name of a local path."""
    return Path(name).name if name.startswith(("/", ".", "~")) else name


def reply_header(settings: DecodeSettings) -> str:
    if settings.mode == "ar":
        return "Assistant · plain AR"
    how = "greedy" if settings.greedy else f"sampling T={settings.temperature:g}"
    rounds = f"γ ≤ {settings.gamma}, stop {settings.stop_below:g}" if settings.stop_below else f"γ={settings.gamma}"
    return f"Assistant · speculative, {how}, {rounds}"


def stats_line(reply: Reply) -> str:
    s = reply.stats
    line = f"{s.n_tokens} tokens in {s.n_rounds} rounds · {s.tokens_per_s:.1f} tok/s"
    if reply.request.settings.mode == "spec":
        line += f" · α {s.alpha:.2f} · {s.tokens_per_round:.2f} tok/round · est. {s.estimated_speedup:.2f}× vs AR"
    return line + (" · stopped" if reply.stopped else "")


def comparison_line(comparison: Comparison, reply: Reply) -> str:
    ar_tokens = sum(len(e.emitted) for e in comparison.ar_events)
    line = (f"plain AR: {ar_tokens} tokens in {comparison.ar_wall_s:.2f} s ({comparison.ar_tokens_per_s:.1f} tok/s) vs "
            f"speculative {reply.stats.n_tokens} in {comparison.spec_wall_s:.2f} s "
            f"({comparison.spec_tokens_per_s:.1f} tok/s) → measured {comparison.speedup:.2f}×")
    if comparison.identical is not None:
        line += " · greedy outputs identical" if comparison.identical else " · greedy outputs DIFFER"
    return line


class MainWindow(QMainWindow):
    load_requested = Signal(str, object, str, str)  # target, draft or None, device, dtype
    prompt_submitted = Signal(object)  # ReplyRequest
    stop_requested = Signal()
    gamma_requested = Signal(int)
    new_chat_requested = Signal()
    models_shown = Signal(object)  # PairInfo, once the window is ready to send
    round_shown = Signal(object)  # RoundEvent, once it is in the chat pane and the chart buffers
    turn_completed = Signal()  # the reply (and its AR comparison, if asked for) is on screen

    def __init__(self, presets: dict, target: str = "embedded", draft: str | None = "embedded-draft",
                 device: str = "auto", dtype: str = "auto", defaults: DecodeSettings = DecodeSettings()):
        super().__init__()
        self.setWindowTitle("SpecDec Studio")
        self.session = Session()
        self.messages: list[dict] = []
        self.request: ReplyRequest | None = None
        self.reply_chars: list[str] = []
        self.reply_span_start = 0  # index of the current reply's first token span
        self.busy = False
        self.ready = False
        self.progress: QProgressDialog | None = None
        self.error_box: QMessageBox | None = None

        self.picker = ModelPicker(presets, target, draft, device, dtype)
        self.controls = DecodingControls(defaults)
        self.legend = Legend()
        self.chat = ChatView()
        self.message_box = MessageBox()
        self.send_button = QPushButton("Send")
        self.stop_button = QPushButton("Stop")
        self.new_chat_button = QPushButton("New chat")
        self.inspector = TokenInspector()
        self.charts = ChartsPanel()
        self.pair_label = QLabel("no model loaded")
        self.reply_label = QLabel("")
        self.setCentralWidget(self._layout())
        self.statusBar().addWidget(self.pair_label)
        self.statusBar().addWidget(self.reply_label, 1)
        self._menus()
        self._connect()
        self._set_busy(False)
        self.resize(1400, 900)

    # -- layout -------------------------------------------------------------------------------------------

    def _layout(self) -> QWidget:
        side = QWidget()
        side_layout = QVBoxLayout(side)
        side_layout.addWidget(self.picker)
        side_layout.addWidget(self.controls)
        side_layout.addStretch(1)
        side_scroll = QScrollArea()
        side_scroll.setWidget(side)
        side_scroll.setWidgetResizable(True)
        side_scroll.setMinimumWidth(290)

        chat = QWidget()
        chat_layout = QVBoxLayout(chat)
        chat_layout.addWidget(self.legend)
        chat_layout.addWidget(self.chat, 1)
        chat_layout.addWidget(self.message_box)
        buttons = QHBoxLayout()
        buttons.addWidget(self.new_chat_button)
        buttons.addStretch(1)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.send_button)
        chat_layout.addLayout(buttons)

        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(self.inspector)
        right.addWidget(self.charts)
        right.setSizes([280, 600])

        splitter = QSplitter(Qt.Orientation.Horizontal)
        for widget in (side_scroll, chat, right):
            splitter.addWidget(widget)
        splitter.setSizes([300, 600, 500])
        splitter.setStretchFactor(1, 1)
        return splitter

    def _menus(self) -> None:
        def action(menu, text: str, shortcut, slot) -> QAction:
            act = QAction(text, self)
            act.setShortcut(QKeySequence(shortcut))
            act.triggered.connect(slot)
            menu.addAction(act)
            return act

        file_menu = self.menuBar().addMenu("&File")
        self.export_action = action(file_menu, "&Export session stats…", "Ctrl+E", self.export_dialog)
        file_menu.addSeparator()
        action(file_menu, "&Quit", "Ctrl+Q", self.close)
        chat_menu = self.menuBar().addMenu("&Chat")
        self.send_action = action(chat_menu, "&Send", "Ctrl+Return", self.message_box.submit)
        self.stop_action = action(chat_menu, "S&top", "Esc", self.stop)
        action(chat_menu, "&New chat", "Ctrl+N", self.new_chat)
        view_menu = self.menuBar().addMenu("&View")
        view_menu.addAction(self.legend.hide_rejected.text(), self.legend.hide_rejected.toggle)

    def _connect(self) -> None:
        self.picker.load_requested.connect(self.request_load)
        self.controls.gamma_changed.connect(self.gamma_requested)
        self.message_box.submitted.connect(self.send)
        self.send_button.clicked.connect(self.message_box.submit)
        self.stop_button.clicked.connect(self.stop)
        self.new_chat_button.clicked.connect(self.new_chat)
        self.legend.hide_rejected.toggled.connect(self.chat.set_hide_rejected)
        self.chat.token_hovered.connect(self._inspect)
        self.chat.token_clicked.connect(self._inspect)

    # -- actions ------------------------------------------------------------------------------------------

    def request_load(self, target: str, draft: str | None, device: str, dtype: str) -> None:
        if self.busy:
            self.stop()
        self.ready = False
        self._set_busy(False)
        self.progress = QProgressDialog(f"Loading {target}" + (f" and {draft}" if draft else "") + "…", "", 0, 0,
                                        self)
        self.progress.setWindowTitle("Loading models")
        self.progress.setCancelButton(None)
        self.progress.setWindowModality(Qt.WindowModality.WindowModal)
        self.progress.setMinimumDuration(0)
        self.progress.show()
        self.load_requested.emit(target, draft, device, dtype)

    def send(self, text: str) -> None:
        if self.busy:
            return
        if not self.ready:
            self.statusBar().showMessage("Load a model pair first", 4000)
            return
        self.message_box.clear()
        self.messages.append({"role": "user", "content": text})
        settings = self.controls.settings()
        self.request = ReplyRequest(tuple(dict(m) for m in self.messages), settings,
                                    compare_ar=self.controls.compare_ar.isChecked() and settings.mode == "spec")
        self.reply_chars = []
        self.reply_span_start = len(self.chat.spans)
        self.chat.add_user_message(text)
        self.chat.begin_reply(reply_header(settings))
        self.charts.start_reply()
        self._set_busy(True)
        self.prompt_submitted.emit(self.request)

    def stop(self) -> None:
        if self.busy:
            self.stop_requested.emit()

    def new_chat(self) -> None:
        self.stop()
        self.messages.clear()
        self.chat.clear_chat()
        self.charts.start_reply()
        self.new_chat_requested.emit()

    def export_dialog(self) -> None:
        if not self.session.replies:
            self.statusBar().showMessage("Nothing to export yet", 4000)
            return
        path, _ = QFileDialog.getSaveFileName(self, "Export session stats", "specdec-session.json",
                                              "Session stats: NAME.json, NAME.csv and NAME.png charts (*.json)")
        if not path:
            return
        try:
            written = self.export_to(Path(path))
        except ExportError as exc:
            self.statusBar().showMessage(f"Export failed, nothing written: {exc}", 10000)
            self.error_box = QMessageBox(QMessageBox.Icon.Warning, "Export failed", f"Nothing was written: {exc}",
                                         QMessageBox.StandardButton.Ok, self)
            self.error_box.open()
            return
        self.statusBar().showMessage("Wrote " + ", ".join(p.name for p in written), 6000)

    def export_to(self, base: Path) -> list[Path]:
        self.charts.refresh()
        return export_session(self.session, base, self.charts)

    # -- slots for the worker's signals ------------------------------------------------------------------

    def on_models_loaded(self, info: PairInfo) -> None:
        self._close_progress()
        self.session.pair = info
        self.ready = True
        draft = short_name(info.draft.name) if info.draft else "no draft (AR only)"
        self.pair_label.setText(f"{short_name(info.target.name)} + {draft} · {info.device} · {info.dtype}")
        self.pair_label.setToolTip(f"target: {info.target.path}\ndraft: {info.draft.path if info.draft else '—'}")
        self._set_busy(False)
        self.models_shown.emit(info)

    def on_round_finished(self, event: RoundEvent) -> None:
        self.chat.add_round(event)
        self.charts.on_round_finished(event)
        self.reply_chars.append(event.text_delta)
        self.round_shown.emit(event)

    def on_reply_finished(self, reply: Reply) -> None:
        self.chat.flush()
        self.charts.refresh()
        self.session.replies.append(reply)
        self.messages.append({"role": "assistant", "content": reply.text})
        self.chat.add_note(stats_line(reply))
        self._inspect_first_rejection()
        self.reply_label.setText("last reply: " + stats_line(reply))
        if self.request is not None and self.request.compare_ar and not reply.stopped:
            self.statusBar().showMessage("Decoding the same messages with plain AR for comparison…")
            return
        self._finish_turn()

    def on_comparison_finished(self, comparison: Comparison) -> None:
        self.session.comparisons[len(self.session.replies) - 1] = comparison
        self.chat.add_note(comparison_line(comparison, self.session.replies[-1]))
        self.charts.show_measured_speedup(comparison.speedup)
        self.statusBar().clearMessage()
        self.reply_label.setText(self.reply_label.text() + " · " + f"measured {comparison.speedup:.2f}× vs AR")
        self._finish_turn()

    def on_context_fitted(self, notice: ContextNotice) -> None:
        """Never silent: a note under the reply it applies to, once that is on screen (a note drawn now would end
        the reply's live drawing)."""
        self.turn_completed.connect(lambda: self.chat.add_note("Context: " + notice.message),
                                    Qt.ConnectionType.SingleShotConnection)

    def on_prefill_progressed(self, progress: PrefillProgress) -> None:
        if progress.done < progress.total:
            self.statusBar().showMessage(f"Reading the prompt: {progress.done} of {progress.total} tokens…")
        else:
            self.statusBar().clearMessage()

    def on_failed(self, message: str) -> None:
        self._close_progress()
        if self.busy and self.messages and self.messages[-1]["role"] == "user" and not self.reply_chars:
            self.messages.pop()  # the turn never happened; let the user send it again
        self.error_box = QMessageBox(QMessageBox.Icon.Critical, "SpecDec Studio", message,
                                     QMessageBox.StandardButton.Ok, self)
        self.error_box.open()
        self._finish_turn()

    # -- helpers -----------------------------------------------------------------------------------------

    def _finish_turn(self) -> None:
        self.statusBar().clearMessage()
        self._set_busy(False)
        self.turn_completed.emit()

    def _set_busy(self, busy: bool) -> None:
        self.busy = busy
        self.send_button.setEnabled(self.ready and not busy)
        self.stop_button.setEnabled(busy)
        self.picker.load_button.setEnabled(not busy)

    def _close_progress(self) -> None:
        if self.progress is not None:
            self.progress.close()
            self.progress = None

    def _inspect_first_rejection(self) -> None:
        """Open the inspector on this reply's first rejected draft, the most telling token to look at."""
        for index in range(self.reply_span_start, len(self.chat.spans)):
            if self.chat.spans[index].fate is Fate.REJECTED:
                self._inspect(index)
                return

    def _inspect(self, index: int) -> None:
        self.inspector.show_span(self.chat.spans[index])

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        self.stop()
        super().closeEvent(event)
