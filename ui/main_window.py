"""The main window: controls, the chat pane with its legend, the token inspector and the live charts."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QApplication, QDockWidget, QFileDialog, QHBoxLayout, QInputDialog, QMainWindow,
                               QMessageBox, QProgressBar, QProgressDialog, QPushButton, QScrollArea, QSplitter,
                               QVBoxLayout, QWidget)

from engine.events import ContextNotice, DecodeSettings, Fate, PairInfo, PrefillProgress, RoundEvent
from ui.charts import ChartsPanel
from app.chat_store import ChatRecorder, ChatStore, ChatStoreError
from ui.chat_view import CLEAN, TRACE, ChatView, ReplyItem
from ui.compare import comparison_view
from ui.controls import DTYPES, DEVICES, DecodingControls, ModelPicker
from ui.export import ExportError, export_session
from ui.history import HistoryPanel
from ui.inspector import TokenInspector
from ui.legend import Legend
from ui.message_box import MessageBox
from ui.preferences import export_folder, remember_export_folder, restore_preferences, save_preferences
from ui.session import Comparison, Reply, ReplyRequest, Session
from ui.status_bar import ElidedLabel
from ui.timing import StepReference, machine_was_busy

MIN_WIDTH, MIN_HEIGHT = 1000, 700
PANE_MIN_WIDTH = {"side": 235, "chat": 315, "right": 200}  # with the history dock, still under 1000 px
# The splitter's first sizes. QSplitter shares a window's width in proportion to its panes' widths, never below a
# pane's minimum, so at 1000 px the side panes sit at their minimums and the chat gets the rest; a hidden pane
# comes back with its share.
PANE_WIDTH = {"side": 280, "chat": 770, "right": 350}
STATUS_RIGHT_MARGIN = 8  # between the status bar's last widget and the window's right edge
HISTORY_WIDTH = 150  # the history dock's first width: its titles elide, and at 1000 px the chat needs the room


def short_name(name: str) -> str:
    """A model name that fits the status bar: the file or folder name of a local path."""
    return Path(name).name if name.startswith(("/", ".", "~")) else name


def reply_header(settings: DecodeSettings, gammas: tuple[int, ...] = ()) -> str:
    """`gammas`: every γ the reply ran with, in order, when it was changed mid-reply."""
    if settings.mode == "ar":
        return "Assistant · plain AR"
    how = "greedy" if settings.greedy else f"sampling T={settings.temperature:g}"
    gamma = "→".join(map(str, gammas)) if len(gammas) > 1 else str(settings.gamma)
    rounds = f"γ ≤ {gamma}, stop {settings.stop_below:g}" if settings.stop_below else f"γ={gamma}"
    return f"Assistant · speculative, {how}, {rounds}"


UNFAIR = " (machine busy — not a fair number)"


def stats_line(reply: Reply) -> str:
    """The reply's figures; a busy machine's estimate says so beside it, as a measured speedup may contradict it."""
    s = reply.stats
    line = f"{s.n_tokens} tokens in {s.n_rounds} rounds · {s.tokens_per_s:.1f} tok/s"
    if reply.request.settings.mode == "spec":
        line += (f" · α {s.alpha:.2f} · {s.tokens_per_round:.2f} tok/round · est. {reply.estimated_speedup:.2f}× vs AR"
                 + (UNFAIR if reply.machine_busy else ""))
    return line + (" · stopped" if reply.stopped else "")


def unbreakable(line: str) -> str:
    """A ' · '-separated line whose figures never wrap inside themselves ("est. / 0.46× vs AR" at 1000 px); a
    remark in parentheses after a figure still may."""
    def keep_together(part: str) -> str:
        figure, parenthesis, remark = part.partition(" (")
        return figure.replace(" ", "\u00a0") + parenthesis + remark
    return " · ".join(keep_together(part) for part in line.split(" · "))


def comparison_line(comparison: Comparison, reply: Reply) -> str:
    ar_tokens = sum(len(e.emitted) for e in comparison.ar_events)
    if comparison.stopped:  # a few AR tokens against a whole reply would claim a speedup nobody measured
        return f"plain AR stopped after {ar_tokens} tokens: no measured speedup"
    line = (f"plain AR: {ar_tokens} tokens in {comparison.ar_wall_s:.2f} s ({comparison.ar_tokens_per_s:.1f} tok/s) vs "
            f"speculative {reply.stats.n_tokens} in {comparison.spec_wall_s:.2f} s "
            f"({comparison.spec_tokens_per_s:.1f} tok/s) → measured {comparison.speedup:.2f}×"
            + (UNFAIR if comparison.machine_busy else ""))
    if comparison.identical is not None:
        line += " · greedy outputs identical" if comparison.identical else " · greedy outputs differ"
    return line


class MainWindow(QMainWindow):
    load_requested = Signal(str, object, str, str, str)  # target, draft or None, device, dtype, GGUF weights
    prompt_submitted = Signal(object)  # ReplyRequest
    stop_requested = Signal()
    gamma_requested = Signal(int)
    new_chat_requested = Signal()
    models_shown = Signal(object)  # PairInfo, once the window is ready to send
    round_shown = Signal(object)  # RoundEvent, once it is in the chat pane and the chart buffers
    turn_completed = Signal()  # the reply (and its AR comparison, if asked for) is on screen

    def __init__(self, presets: dict, target: str = "embedded", draft: str | None = "embedded-draft",
                 device: str = "auto", dtype: str = "auto", defaults: DecodeSettings = DecodeSettings(),
                 store: ChatStore | None = None, preferences: QSettings | None = None,
                 devices: tuple[str, ...] = DEVICES, dtypes: tuple[str, ...] = DTYPES,
                 offline: dict[str, bool] | None = None):
        """`store` saves every chat as it happens (in memory only when None); `preferences` keeps settings and
        layout from one run to the next (nothing kept when None, as in the tests). `devices`, `dtypes` and
        `offline` (per preset: both models on disk) describe the machine; app/ asks, as this module has no torch."""
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
        self.store = store or ChatStore(":memory:")
        self.recorder = ChatRecorder(self.store, on_failure=self.show_store_failure)
        self.preferences = preferences
        self.system_prompt = ""
        self.editing: int | None = None  # index of the reply whose user message is being edited and resent
        self.after_turn = None  # New chat / opening a chat asked for while a reply ran: done once it has stopped
        self.timing = StepReference()  # recent target-step timings: the reference for speedup estimates
        self.loading = False  # a load was asked for and has not yet succeeded or failed
        self.load_request: tuple | None = None  # (target, draft, device, dtype, weights) of the load in flight
        self.loaded_request: tuple | None = None  # ... and of the pair loaded (None: injected, or none yet)
        self.gammas: list[int] = []  # every γ the current reply ran with, for its header

        self.history = HistoryPanel(self.store, preferences)
        self.continue_button = QPushButton("Continue")
        self.continue_button.setToolTip("The reply was cut at max new tokens: let the model carry on")
        self.picker = ModelPicker(presets, target, draft, device, dtype, devices, dtypes, offline)
        self.controls = DecodingControls(defaults)
        self.legend = Legend()
        self.chat = ChatView()
        self.message_box = MessageBox()
        self.send_button = QPushButton("Send")
        self.stop_button = QPushButton("Stop")
        self.new_chat_button = QPushButton("New chat")
        self.inspector = TokenInspector()
        self.charts = ChartsPanel()
        self.charts.reference = self.timing
        self.pair_label = ElidedLabel("no model loaded")
        self.reply_label = ElidedLabel("")
        self.setCentralWidget(self._layout())
        self.history_dock = self._history_dock()
        self.statusBar().addWidget(self.pair_label)
        self.statusBar().addWidget(self.reply_label, 1)
        self.comparison_progress = QProgressBar()
        self.comparison_progress.setFormat("plain AR: %v of ~%m tokens")
        self.comparison_progress.setToolTip("Compare with AR: the same messages decoded with plain AR, to measure "
                                            "the speedup")
        # The text is drawn over the bar, so the bar is never narrower than it (the labels beside it elide).
        widest = self.comparison_progress.format().replace("%v", "0000").replace("%m", "0000")
        self.comparison_progress.setMinimumWidth(self.comparison_progress.fontMetrics().horizontalAdvance(widest) + 24)
        self.comparison_progress.hide()
        holder = QWidget()  # the bar's room, with a margin: at the window's edge it looked cut off
        holder_layout = QHBoxLayout(holder)
        holder_layout.setContentsMargins(0, 0, STATUS_RIGHT_MARGIN, 0)
        holder_layout.addWidget(self.comparison_progress)
        self.statusBar().addPermanentWidget(holder)
        self._menus()
        self._connect()
        self._set_busy(False)
        self.setMinimumSize(MIN_WIDTH, MIN_HEIGHT)
        self.resize(1400, 900)
        if preferences is not None:
            restore_preferences(preferences, self)
        for name, act in self.pane_actions.items():
            act.setChecked(not self.panes[name].isHidden())

    # -- layout -------------------------------------------------------------------------------------------

    def _layout(self) -> QWidget:
        side = QWidget()
        side_layout = QVBoxLayout(side)
        side_layout.addWidget(self.picker)
        side_layout.addWidget(self.controls)
        side_layout.addStretch(1)
        side_layout.setContentsMargins(4, 4, 4, 4)  # the pane's minimum width is the controls' plus these
        side_scroll = QScrollArea()
        side_scroll.setWidget(side)
        side_scroll.setWidgetResizable(True)
        side_scroll.setMinimumWidth(PANE_MIN_WIDTH["side"])

        chat = QWidget()
        chat_layout = QVBoxLayout(chat)
        chat_layout.addWidget(self.legend)
        chat_layout.addWidget(self.chat, 1)
        chat_layout.addWidget(self.message_box)
        buttons = QHBoxLayout()
        buttons.addWidget(self.new_chat_button)
        buttons.addStretch(1)
        buttons.addWidget(self.continue_button)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.send_button)
        chat_layout.addLayout(buttons)
        chat_layout.setContentsMargins(4, 4, 4, 4)
        chat.setMinimumWidth(PANE_MIN_WIDTH["chat"])

        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(self.inspector)
        right.addWidget(self.charts)
        right.setChildrenCollapsible(False)
        right.setStretchFactor(0, 1)
        right.setStretchFactor(1, 2)
        right.setSizes([280, 600])
        right.setMinimumWidth(PANE_MIN_WIDTH["right"])
        self.inspector.setMinimumHeight(90)

        # Minimum widths sum to less than MIN_WIDTH with the history dock open, so the handles always move.
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.panes = {"side": side_scroll, "chat": chat, "right": right}
        for widget in self.panes.values():
            self.splitter.addWidget(widget)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.setSizes([PANE_WIDTH[name] for name in self.panes])
        return self.splitter

    def _history_dock(self) -> QDockWidget:
        """Past chats on the left, in a dock so it can be closed (View ▸ History) and its width is kept."""
        dock = QDockWidget("History", self)
        dock.setObjectName("history")  # QMainWindow.saveState finds docks by name
        dock.setWidget(self.history)
        dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetClosable)
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, dock)
        self.resizeDocks([dock], [HISTORY_WIDTH], Qt.Orientation.Horizontal)
        return dock

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
        chat_menu.addSeparator()
        self.copy_action = action(chat_menu, "&Copy last reply", "Ctrl+Shift+C", self.copy_reply)
        self.regenerate_action = action(chat_menu, "&Regenerate last reply", "Ctrl+R", self.regenerate)
        self.edit_action = action(chat_menu, "&Edit and resend last message", "Ctrl+Shift+E", self.edit_message)
        self.continue_action = action(chat_menu, "C&ontinue reply", "Ctrl+Shift+Return", self.continue_reply)
        action(chat_menu, "S&ystem prompt…", "", self.ask_system_prompt)
        view_menu = self.menuBar().addMenu("&View")
        history = self.history_dock.toggleViewAction()
        history.setShortcut(QKeySequence("Ctrl+H"))
        view_menu.addAction(history)
        view_menu.addAction(self.legend.trace_action)
        view_menu.addSeparator()
        self.pane_actions = {}
        for name, text, shortcut in (("side", "&Controls pane", "Ctrl+1"), ("right", "&Inspector and charts", "Ctrl+2")):
            act = QAction(text, self, checkable=True, checked=True)
            act.setShortcut(QKeySequence(shortcut))
            act.toggled.connect(lambda shown, pane=name: self.show_pane(pane, shown))
            view_menu.addAction(act)
            self.pane_actions[name] = act

    def _connect(self) -> None:
        self.picker.load_requested.connect(self.request_load)
        self.controls.gamma_changed.connect(self.gamma_requested)
        self.message_box.submitted.connect(self.send)
        self.send_button.clicked.connect(self.message_box.submit)
        self.stop_button.clicked.connect(self.stop)
        self.new_chat_button.clicked.connect(self.new_chat)
        self.continue_button.clicked.connect(self.continue_reply)
        self.chat.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.chat.customContextMenuRequested.connect(self.on_chat_menu_requested)
        self.history.chat_chosen.connect(self.on_chat_chosen)
        self.history.chat_deleted.connect(self.on_chat_deleted)
        self.history.status_posted.connect(lambda message: self.statusBar().showMessage(message, 6000))
        self.legend.trace_action.toggled.connect(self.on_trace_toggled)
        self.controls.gamma_changed.connect(self.on_gamma_changed)
        self.chat.token_hovered.connect(self._inspect)
        self.chat.token_clicked.connect(self.on_token_clicked)
        self.chat.background_clicked.connect(self.on_background_clicked)
        self.chat.example_chosen.connect(self.on_example_chosen)
        self.chat.action_chosen.connect(self.on_reply_action_chosen)

    # -- actions ------------------------------------------------------------------------------------------

    def request_load(self, target: str, draft: str | None, device: str, dtype: str, weights: str) -> None:
        if self.busy:
            self.stop()
        self.ready = False
        self.loading = True
        self.load_request = (target, draft, device, dtype, weights)
        self._set_busy(False)
        self.progress = QProgressDialog(f"Loading {target}" + (f" and {draft}" if draft else "") + "…", "", 0, 0,
                                        self)
        self.progress.setWindowTitle("Loading models")
        self.progress.setCancelButton(None)
        self.progress.setWindowModality(Qt.WindowModality.WindowModal)
        self.progress.setMinimumDuration(0)
        self.progress.show()
        self.load_requested.emit(target, draft, device, dtype, weights)

    def send(self, text: str) -> None:
        if self.busy:
            return
        if not self.ready:
            self.statusBar().showMessage("Load a model pair first", 4000)
            return
        self.message_box.clear()
        if self.editing is not None:  # edit-and-resend: the edited message replaces that turn and what followed
            self._truncate(self.editing)
            self.editing = None
        self.messages.append({"role": "user", "content": text})
        self._start_turn()

    def _start_turn(self) -> None:
        """Send `messages` (ending with the user's message, or with a reply to continue) as the next turn."""
        settings = self.controls.settings()
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt.strip() else []
        self.request = ReplyRequest(tuple(system + [dict(m) for m in self.messages]), settings,
                                    compare_ar=self.controls.compare_ar.isChecked() and settings.mode == "spec")
        self.reply_chars = []
        self._show_request(self.request)
        self.recorder.turn_started(len(self.session.replies), self.request, self.session.pair)
        self.history.refresh(self.recorder.chat_id)
        self._set_busy(True)
        self.prompt_submitted.emit(self.request)

    def stop(self) -> None:
        if self.busy:
            self.stop_requested.emit()
        elif self.editing is not None:  # Esc also leaves edit-and-resend
            self.editing = None
            self.message_box.clear()
            self.statusBar().showMessage("Edit cancelled", 3000)

    def new_chat(self) -> None:
        """Start a fresh chat (saved once its first message is sent); a reply in flight is stopped and kept in
        the chat it belongs to first, so nothing of it lands in the new one."""
        if self._after_stop(self.new_chat):
            return
        self.recorder.new_chat()
        self.system_prompt = self.preferences.value("chat/system_prompt", "", type=str) if self.preferences else ""
        self._clear_chat()
        self.history.refresh(None)
        self.new_chat_requested.emit()

    def on_chat_chosen(self, chat_id: int) -> None:
        """Reopen a saved chat as it was left: text, colours, notes, the last reply's charts, and carry on in it."""
        if self._after_stop(lambda: self.on_chat_chosen(chat_id)):
            return
        try:
            chat = self.store.load_chat(chat_id)
        except ChatStoreError as exc:
            self.statusBar().showMessage(f"Could not open that chat: {exc}", 10000)
            return
        self.recorder.resume(chat_id)
        self.system_prompt = chat.system_prompt
        self._replay(chat.replies, chat.comparisons)
        self.history.refresh(chat_id)

    def on_chat_deleted(self, chat_id: int) -> None:
        if chat_id == self.recorder.chat_id:
            self.new_chat()

    def show_store_failure(self, message: str) -> None:
        """Saving failed mid-session (disk full, file removed): say so once, without interrupting the reply."""
        self.statusBar().showMessage(message)
        self.error_box = QMessageBox(QMessageBox.Icon.Warning, "SpecDec Studio", message,
                                     QMessageBox.StandardButton.Ok, self)
        self.error_box.open()

    def copy_reply(self) -> None:
        if self.session.replies:
            self.copy_turn(len(self.session.replies) - 1)

    def copy_turn(self, turn: int) -> None:
        """A reply's clean text (no rejected drafts, no special tokens) to the clipboard."""
        QApplication.clipboard().setText(self.session.replies[turn].text)
        self.statusBar().showMessage("Copied the reply", 3000)

    def regenerate(self) -> None:
        """Decode the last reply again with the current settings; it replaces the old one here and on disk."""
        if self.busy or not self.session.replies:
            return
        last = self.session.replies[-1]
        self._truncate(len(self.session.replies) - 1)
        self.messages = [dict(m) for m in last.request.messages if m["role"] != "system"]
        self._start_turn()

    def edit_message(self) -> None:
        if self.session.replies:
            self.edit_turn(len(self.session.replies) - 1)

    def edit_turn(self, turn: int) -> None:
        """Put the user message of a turn back in the message box; sending it replaces that turn and all after it.
        A continued reply's message is the one its first part answered."""
        if self.busy:
            return
        while turn > 0 and self.session.replies[turn].request.messages[-1]["role"] != "user":
            turn -= 1
        self.editing = turn
        self.message_box.setPlainText(self.session.replies[turn].request.messages[-1]["content"])
        self.message_box.setFocus()
        self.statusBar().showMessage("Editing a message: Enter resends it in place of its turn and what followed",
                                     6000)

    def on_chat_menu_requested(self, pos) -> None:
        """The chat pane's context menu: the usual copy entries, then actions on the reply under the mouse (a
        click beside the replies means the last one)."""
        menu = self.chat.createStandardContextMenu(pos)
        turn = self._turn_at(pos)
        if turn is not None and not self.busy:
            menu.addSeparator()
            menu.addAction("Copy this reply", lambda: self.copy_turn(turn))
            menu.addAction("Edit and resend its message…", lambda: self.edit_turn(turn))
            if turn == len(self.session.replies) - 1:
                menu.addAction(self.regenerate_action)
                if self._can_continue():
                    menu.addAction(self.continue_action)
        menu.exec(self.chat.viewport().mapToGlobal(pos))

    def on_reply_action_chosen(self, action: str, turn: int) -> None:
        """A link under a reply (Regenerate and Continue are only under the last one). Copying works at any time;
        the others prepare or start a turn, so not while one runs."""
        if action == "copy":
            self.copy_turn(turn)
        elif self.busy:
            self.statusBar().showMessage("A reply is running: wait for it, or stop it (Esc)", 4000)
        elif action == "edit":
            self.edit_turn(turn)
        elif not self.ready:
            self.statusBar().showMessage("Load a model pair first", 4000)
        elif action == "regenerate":
            self.regenerate()
        else:
            self.continue_reply()

    def continue_reply(self) -> None:
        """Let the model carry on the last reply, cut at max new tokens, in the same assistant message."""
        if not self.busy and self._can_continue():
            self._start_turn()

    def ask_system_prompt(self) -> None:
        text, ok = QInputDialog.getMultiLineText(self, "System prompt", "Sent first in every turn of new chats "
                                                 "and of this one (empty: none):", self.system_prompt)
        if ok:
            self.system_prompt = text.strip()
            if self.preferences is not None:
                self.preferences.setValue("chat/system_prompt", self.system_prompt)

    def export_dialog(self) -> None:
        if self.busy:  # the reply on screen is not in the session until it ends: it would be left out silently
            self.statusBar().showMessage("A reply is still running: export (Ctrl+E) once it has finished", 6000)
            return
        if not self.session.replies:
            self.statusBar().showMessage("Nothing to export yet", 4000)
            return
        path, _ = QFileDialog.getSaveFileName(self, "Export session stats",
                                              str(export_folder(self.preferences) / "specdec-session.json"),
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
        remember_export_folder(self.preferences, written[0])
        self.statusBar().showMessage("Wrote " + ", ".join(p.name for p in written), 6000)

    def export_to(self, base: Path) -> list[Path]:
        self.charts.refresh()
        return export_session(self.session, base, self.charts)

    # -- slots for the worker's signals ------------------------------------------------------------------

    def on_models_loaded(self, info: PairInfo) -> None:
        self._close_progress()
        self.timing.clear()  # the last pair's step times are neither this one's median nor its quiet speed
        self.timing.add(info.target_step_s)  # one timing before the first reply's own: a slow one is then caught
        self.session.pair = info
        self.ready = True
        self.loading = False
        self.loaded_request = self.load_request
        draft = short_name(info.draft.name) if info.draft else "no draft (AR only)"
        int4 = " · int4 target" if info.target.weights == "native" else ""
        self.pair_label.setText(f"{short_name(info.target.name)} + {draft} · {info.device} · {info.dtype}{int4}")
        self.pair_label.setToolTip(f"target: {info.target.path}\ndraft: {info.draft.path if info.draft else '—'}")
        self._set_busy(False)
        self.models_shown.emit(info)

    def on_round_finished(self, event: RoundEvent) -> None:
        self.timing.add_round(event)  # live rounds only: a replayed chat's timings are from another moment
        self._show_round(event)
        self.reply_chars.append(event.text_delta)
        self.recorder.round_finished(event)
        self.round_shown.emit(event)

    def _show_round(self, event: RoundEvent) -> None:
        """What a round changes on screen, live or replayed from a saved chat."""
        self.chat.add_round(event, lookup=self.request is not None and self.request.settings.lookup)
        self.charts.on_round_finished(event)

    def on_reply_finished(self, reply: Reply) -> None:
        if reply.request.settings.mode == "spec":  # measured against the recent median, judged by the quiet floor
            reply = dataclasses.replace(reply, reference_s=self.timing.seconds,
                                        machine_busy=machine_was_busy(reply.events, self.timing))
        self._show_reply(reply)
        self.recorder.reply_finished(reply)
        if self.request is not None and self.request.compare_ar and not reply.stopped:
            self.on_comparison_progressed(0)
            return
        self._finish_turn()

    def on_comparison_progressed(self, tokens: int) -> None:
        """The plain AR run behind Compare with AR has produced `tokens`; it aims at the reply's length."""
        expected = self.session.replies[-1].stats.n_tokens if self.session.replies else 1
        self.comparison_progress.setRange(0, max(expected, tokens, 1))
        self.comparison_progress.setValue(tokens)
        self.comparison_progress.show()

    def on_comparison_finished(self, comparison: Comparison) -> None:
        self.comparison_progress.hide()
        for event in comparison.ar_events:
            self.timing.add_round(event)  # every AR step is a fresh single-token timing
        comparison = dataclasses.replace(comparison, machine_busy=machine_was_busy(comparison.ar_events, self.timing))
        self._show_comparison(comparison)
        self.recorder.comparison_finished(comparison)
        self.statusBar().clearMessage()
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
        self.comparison_progress.hide()
        # A failed load leaves the worker's decoder as it was: the previous pair, if any, still answers.
        failed_load, self.loading = self.loading, False
        kept = self.session.pair if failed_load else None
        if kept is not None:
            self.ready = True
            self.picker.show_pair(*(self.loaded_request or (kept.target.name, kept.draft and kept.draft.name)))
        if self.busy and self.messages and self.messages[-1]["role"] == "user" and not self.reply_chars:
            self.messages.pop()  # the turn never happened; let the user send it again
        if self.busy:
            self.recorder.turn_failed()
        self.error_box = QMessageBox(QMessageBox.Icon.Critical, "SpecDec Studio", message,
                                     QMessageBox.StandardButton.Ok, self)
        self.error_box.open()
        self._finish_turn()
        if kept is not None:
            self.statusBar().showMessage(f"Could not load the new pair; still using {self.pair_label.text()}", 15000)

    # -- helpers -----------------------------------------------------------------------------------------

    def _finish_turn(self) -> None:
        self.statusBar().clearMessage()
        self._set_busy(False)
        self.turn_completed.emit()
        if self.after_turn is not None:
            action, self.after_turn = self.after_turn, None
            action()

    def _after_stop(self, action) -> bool:
        """With a reply in flight, stop it and run `action` once its turn has ended (True); else do nothing."""
        if not self.busy:
            return False
        self.after_turn = action
        self.stop()
        return True

    def _show_request(self, request: ReplyRequest) -> None:
        """The user's message (none for a continuation) and the header the reply's tokens will follow."""
        last = request.messages[-1]
        if last["role"] == "user":
            self.chat.add_user_message(last["content"])
        self.reply_span_start = len(self.chat.spans)
        if not self.inspector.pinned:  # the last reply's token would pass for one of this reply
            self.inspector.reset()
        self.gammas = [request.settings.gamma]
        self.chat.begin_reply(self._header(request))
        self.charts.start_reply(request.settings.gamma)

    def _show_reply(self, reply: Reply) -> None:
        self.chat.flush()
        self.charts.refresh()
        self.session.replies.append(reply)
        if reply.request.messages[-1]["role"] == "assistant":  # a continuation extends the reply it continued
            self.messages[-1]["content"] += reply.text
        else:
            self.messages.append({"role": "assistant", "content": reply.text})
        line = stats_line(reply)
        self.chat.add_note(unbreakable(line))
        if reply.machine_busy:
            self.chat.add_note("The machine was busy during this reply (target steps ran far slower than this "
                               "machine's fastest since the model loaded): its timings and speedup estimate are not "
                               "a fair number.", warning=True)
        if self._can_continue():
            # Said as a fact about this part, which stays true after a Continue; the Continue link is the how.
            self.chat.add_note("✂ cut at max new tokens", warning=True)
        self.chat.set_reply_actions(len(self.session.replies) - 1, ("copy", "edit", "regenerate")
                                    + (("continue",) if self._can_continue() else ()))
        self._inspect_first_rejection()
        self.reply_label.setText("last reply: " + line)

    def _show_comparison(self, comparison: Comparison) -> None:
        self.session.comparisons[len(self.session.replies) - 1] = comparison
        reply = self.session.replies[-1]
        self.chat.add_comparison(comparison_view(comparison, reply, comparison_line(comparison, reply),
                                                 self.session.pair))
        if not comparison.stopped:
            self.charts.show_measured_speedup(comparison.speedup)
            self.reply_label.setText(self.reply_label.text() + " · " + f"measured {comparison.speedup:.2f}× vs AR"
                                     + (UNFAIR if comparison.machine_busy else ""))

    def _replay(self, replies: list[Reply], comparisons: dict[int, Comparison]) -> None:
        """Show saved replies as they were streamed: the same calls as live, from the stored round events."""
        self._clear_chat()
        for index, reply in enumerate(replies):
            self.request = reply.request
            self.messages = [dict(m) for m in reply.request.messages if m["role"] != "system"]
            self._show_request(reply.request)
            # Charted against the step time measured with the reply, as its stats line is, not today's median.
            self.charts.reference = StepReference()
            for event in reply.events:
                self.charts.reference.add_round(event)
                self._show_round(event)
            self._show_reply(reply)
            if index in comparisons:
                self._show_comparison(comparisons[index])
        self.charts.reference = self.timing
        self._set_busy(False)

    def _truncate(self, n_replies: int) -> None:
        """Keep the first `n_replies` turns on screen; the store forgets the rest when the next turn starts."""
        replies = self.session.replies[:n_replies]
        comparisons = {i: c for i, c in self.session.comparisons.items() if i < n_replies}
        self._replay(replies, comparisons)

    def _clear_chat(self) -> None:
        self.messages = []
        self.session.replies.clear()
        self.session.comparisons.clear()
        self.editing = None
        self.chat.clear_chat()
        self.charts.start_reply()
        self.inspector.reset()
        self.reply_label.clear()

    def _turn_at(self, pos) -> int | None:
        """Which reply a point of the chat pane is on: its token's span falls in that reply's range."""
        if not self.session.replies:
            return None
        href = self.chat.anchorAt(pos)
        if not href.startswith("token:"):
            return len(self.session.replies) - 1
        span = int(href.split(":", 1)[1])
        replies = [item for item in self.chat.items if isinstance(item, ReplyItem)]
        turn = next((k for k, item in enumerate(replies) if item.first <= span < item.end), None)
        return turn if turn is not None and turn < len(self.session.replies) else None

    def _can_continue(self) -> bool:
        last = self.session.replies[-1] if self.session.replies else None
        return bool(last and last.events and last.events[-1].finish_reason == "length")

    def _set_busy(self, busy: bool) -> None:
        self.busy = busy
        self.send_button.setEnabled(self.ready and not busy)
        self.stop_button.setEnabled(busy)
        self.picker.load_button.setEnabled(not busy)
        idle_with_reply = self.ready and not busy and bool(self.session.replies)
        for act in (self.regenerate_action, self.edit_action):
            act.setEnabled(idle_with_reply)
        self.continue_action.setEnabled(idle_with_reply and self._can_continue())
        self.continue_button.setVisible(idle_with_reply and self._can_continue())

    def _close_progress(self) -> None:
        if self.progress is not None:
            self.progress.close()
            self.progress = None

    def _inspect_first_rejection(self) -> None:
        """Open the inspector on this reply's first rejection, the most telling token to look at: the rejected
        draft in the trace; in the clean view, which leaves drafts out, the token put in its place (its inspector
        shows what the draft proposed too)."""
        for index in range(self.reply_span_start, len(self.chat.spans)):
            span = self.chat.spans[index]
            if (span.fate is Fate.REJECTED or span.replaces is not None) and self.chat.shows(span):
                self._inspect(index)
                return

    def _inspect(self, index: int) -> None:
        self.inspector.show_span(self.chat.spans[index])

    def _header(self, request: ReplyRequest) -> str:
        continued = " · continued" if request.messages[-1]["role"] == "assistant" else ""
        return reply_header(request.settings, tuple(self.gammas)) + continued

    # -- slots for the window's own widgets ----------------------------------------------------------------

    def on_trace_toggled(self, trace: bool) -> None:
        self.chat.set_view(TRACE if trace else CLEAN)
        self.chat.mark_pinned(self._pinned_index())  # the redrawn document lost the outline
        if not self.inspector.pinned:  # what was shown may not be drawn in this view
            self.inspector.reset()
            self._inspect_first_rejection()

    def on_token_clicked(self, index: int) -> None:
        """A click pins a token in the inspector; clicking the pinned token again releases it."""
        if self._pinned_index() == index:
            self.on_background_clicked()
            return
        self.inspector.pin(self.chat.spans[index])
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

    def on_example_chosen(self, text: str) -> None:
        self.message_box.setPlainText(text)
        if self.ready and not self.busy:
            self.message_box.submit()
        else:
            self.message_box.setFocus()

    def on_gamma_changed(self, gamma: int) -> None:
        """γ moved mid-reply: the reply's header shows every γ it ran with."""
        if self.busy and self.request is not None and self.request.settings.mode == "spec" and gamma != self.gammas[-1]:
            self.gammas.append(gamma)
            self.chat.set_reply_header(self._header(self.request))
            self.charts.most_per_round = max(self.charts.most_per_round, gamma + 1.0)

    def show_pane(self, name: str, shown: bool) -> None:
        """Hide a side pane, or bring it back, taking its width from the chat: the share a fresh window of this
        width gives it, so a small window's chat stays the widest pane."""
        pane = self.panes[name]
        if shown == pane.isVisible():
            return
        sizes = dict(zip(self.panes, self.splitter.sizes()))
        if not shown:  # all of its width to the chat (the splitter would share it with the other pane)
            sizes["chat"], sizes[name] = sizes["chat"] + sizes[name], 0
            pane.hide()
            self.splitter.setSizes(list(sizes.values()))
            return
        # The sizes' sum is the splitter's width even before a hide has been laid out; only visible panes keep one.
        total = sum(sizes.values())
        for other in self.panes:
            if other not in (name, "chat") and not self.panes[other].isVisible():
                sizes[other] = 0
        others = sum(size for other, size in sizes.items() if other not in (name, "chat"))
        share = total * PANE_WIDTH[name] // sum(PANE_WIDTH.values())
        sizes[name] = max(PANE_MIN_WIDTH[name], min(share, total - others - PANE_MIN_WIDTH["chat"]))
        sizes["chat"] = total - others - sizes[name]
        pane.show()
        self.splitter.setSizes(list(sizes.values()))

    def closeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        self.stop()
        if self.preferences is not None:
            save_preferences(self.preferences, self)
        super().closeEvent(event)
