"""The chat pane: the legend, the system prompt's line, the chat itself, the message box and its buttons, and the
actions on a reply (copy, edit and resend, regenerate, continue), offered in the Chat menu, in the chat's context
menu and as links under a reply. Commands that start a turn go out as signals: the window adds the controls'
settings and passes them on to the chat controller."""
from __future__ import annotations

from html import escape

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (QApplication, QHBoxLayout, QInputDialog, QLabel, QMenu, QMessageBox, QPushButton,
                               QSizePolicy, QVBoxLayout, QWidget)

from engine.events import ContextNotice, Mode, PairInfo
from ui.chat.legend import Legend
from ui.chat.message_box import MessageBox
from ui.chat.view import CLEAN, TRACE, ChatView
from ui.window.palette import NOTE_COLOUR
from words.compare import comparison_view
from words.links import continue_reach
from words.records import ChatStatus, ComparisonShown, Reply, ReplyShown, TurnStarted, TurnState, same_models
from words.transcript import CONTEXT, reply_notes
from words.wording import comparison_line, pair_said, part_label, remote_header, unbreakable

EDITING = "Editing a message: Enter resends it in place of its turn and what followed"
BUSY = "A reply is running: wait for it, or stop it (Esc)"


class SystemPromptLine(QLabel):
    """'System prompt (change): “…”' above the chat, the prompt on one line cut with … at the label's width (the
    whole in its tooltip); the link comes first, so it is never what is cut. Hidden while there is none."""

    LEAD, END = "System prompt (change): “", "”"

    def __init__(self):
        super().__init__()
        self.prompt = ""
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # it never widens the pane
        self.hide()

    def show_prompt(self, text: str) -> None:
        self.prompt = text
        self.setToolTip(text)
        self.setVisible(bool(text))
        self._fit()

    def resizeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        metrics = self.fontMetrics()
        room = self.contentsRect().width() - metrics.horizontalAdvance(self.LEAD + self.END) - 2 * self.margin()
        shown = metrics.elidedText(" ".join(self.prompt.split()), Qt.TextElideMode.ElideRight, max(0, room))
        self.setText(f"<span style='color:{NOTE_COLOUR}'>System prompt (<a href='change'>change</a>): "
                     f"“{escape(shown)}”</span>")


class ChatPane(QWidget):
    """`preferences` keeps the system prompt for new chats (nothing kept when None)."""

    regenerate_chosen = Signal()
    continue_chosen = Signal()
    edit_requested = Signal(int)  # the turn whose message to edit and resend, once the user agreed
    status_posted = Signal(str, int)  # a line for the status bar, and for how many ms

    def __init__(self, preferences: QSettings | None = None):
        super().__init__()
        self.preferences = preferences
        self.status = ChatStatus(TurnState.IDLE, ready=False, n_turns=0, can_continue=False, editing=None)
        self.pick_running = False  # Find the best draft is measuring: Send waits (set_pick_running)
        # the chat's system prompt, named above the chat while one is set: nothing else there says it is sent
        self.system_prompt_line = SystemPromptLine()
        self.system_prompt_line.linkActivated.connect(lambda _link: self.ask_system_prompt())
        self.system_prompt = ""
        self.default_system_prompt = ""  # what the target's chat template sends where the chat sets none
        # The local pair of each reply drawn, as the chat numbers replies (None: a remote engine's): a reply of
        # another pair than the one before it says so under it
        self.reply_pairs: list[PairInfo | None] = []
        self.legend = Legend()
        self.chat = ChatView()
        self.message_box = MessageBox()
        self.new_chat_button = QPushButton("New chat")
        self.continue_button = QPushButton("Continue")  # its tooltip says how far (show_continue_reach)
        self.stop_button = QPushButton("Stop")
        self.cancel_edit_button = QPushButton("Cancel edit")  # shown while a message is back in the box for editing
        self.cancel_edit_button.setToolTip("Leave the message as it was, and its replies (Esc)")
        self.cancel_edit_button.hide()
        self.send_button = QPushButton("Send")
        layout = QVBoxLayout(self)
        layout.addWidget(self.legend)
        layout.addWidget(self.system_prompt_line)
        layout.addWidget(self.chat, 1)
        layout.addWidget(self.message_box)
        buttons = QHBoxLayout()
        buttons.addWidget(self.new_chat_button)
        buttons.addStretch(1)
        for button in (self.continue_button, self.stop_button, self.cancel_edit_button, self.send_button):
            buttons.addWidget(button)
        layout.addLayout(buttons)
        layout.setContentsMargins(4, 4, 4, 4)
        # the Chat menu's entries for a reply (the window puts them in its menu)
        self.copy_action = self._action("&Copy last reply", "Ctrl+Shift+C", self.copy_reply)
        self.regenerate_action = self._action("&Regenerate last reply", "Ctrl+R", self.regenerate_chosen)
        self.edit_action = self._action("&Edit and resend last message", "Ctrl+Shift+E", self.edit_message)
        self.continue_action = self._action("C&ontinue reply", "Ctrl+Shift+Return", self.continue_chosen)
        self.send_button.clicked.connect(self.message_box.submit)
        self.continue_button.clicked.connect(self.continue_chosen)
        self.chat.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.chat.customContextMenuRequested.connect(self.on_chat_menu_requested)
        self.legend.trace_action.toggled.connect(lambda trace: self.chat.set_view(TRACE if trace else CLEAN))
        self.chat.example_chosen.connect(self.on_example_chosen)
        self.chat.action_chosen.connect(self.on_reply_action_chosen)
        self.chat.code_copied.connect(self.on_code_copied)

    def _action(self, text: str, shortcut: str, slot) -> QAction:
        act = QAction(text, self)
        act.setShortcut(QKeySequence(shortcut))
        act.triggered.connect(slot)
        return act

    # -- the system prompt ------------------------------------------------------------------------------------

    @property
    def system_prompt(self) -> str:
        return self._system_prompt

    @system_prompt.setter
    def system_prompt(self, text: str) -> None:
        self._system_prompt = text
        self.system_prompt_line.show_prompt(text)

    def ask_system_prompt(self) -> None:
        default = (f"the model's own: “{self.default_system_prompt}”" if self.default_system_prompt
                   else "none")
        text, ok = QInputDialog.getMultiLineText(self, "System prompt", "Sent first in every turn of new chats "
                                                 f"and of this one (empty: {default}):", self.system_prompt)
        if ok:
            self.system_prompt = text.strip()
            if self.preferences is not None:
                self.preferences.setValue("chat/system_prompt", self.system_prompt)

    # -- actions on a reply -----------------------------------------------------------------------------------

    def copy_reply(self) -> None:
        if self.status.n_turns:
            self.copy_turn(self.status.n_turns - 1)

    def copy_turn(self, turn: int) -> None:
        """A reply's text (no rejected drafts) to the clipboard."""
        QApplication.clipboard().setText(self.chat.reply_text(turn))
        self.status_posted.emit("Copied the reply", 3000)

    def on_code_copied(self, code: str) -> None:
        QApplication.clipboard().setText(code)
        self.status_posted.emit("Copied the code", 3000)

    def edit_message(self) -> None:
        if self.status.n_turns:
            self.edit_turn(self.status.n_turns - 1)

    def edit_turn(self, turn: int) -> None:
        """Edit and resend turn `turn`'s message; an earlier one replaces every reply after it, so that is asked."""
        later = self.status.replies_after(turn)
        if later > 0:
            answer = QMessageBox.question(
                self, "Edit and resend", f"Resending this message replaces its reply and the {later} "
                f"{'turn' if later == 1 else 'turns'} after it in this chat. Edit it?",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel, QMessageBox.StandardButton.Yes)
            if answer != QMessageBox.StandardButton.Yes:
                return
        self.edit_requested.emit(turn)

    def show_continue_reach(self, max_new_tokens: int) -> None:
        """Continue asks for max tokens again: its button's tooltip, its menu entry and its link say so, so that a
        joined reply longer than max tokens is no surprise."""
        reach = continue_reach(max_new_tokens)
        self.continue_button.setToolTip(f"Let the model carry on the last reply where it stopped, for {reach} "
                                        "(Ctrl+Shift+Enter)")
        self.continue_action.setText(f"C&ontinue reply ({reach})")
        self.chat.set_continue_reach(max_new_tokens)

    def on_chat_menu_requested(self, pos) -> None:
        self.chat_menu(pos).exec(self.chat.viewport().mapToGlobal(pos))

    def chat_menu(self, pos) -> QMenu:
        """The chat pane's context menu: the usual copy entries, then actions on the reply under the mouse (a
        click beside the replies means the last one). A token is a link inside the view, whose address
        ("token:50") is nothing to copy: Qt's Copy Link Location goes."""
        menu = self.chat.createStandardContextMenu(pos)
        for action in menu.actions():
            if action.objectName() == "link-copy":
                menu.removeAction(action)
        turn = self.chat.turn_at(pos)
        if turn is not None and not self.status.busy:
            menu.addSeparator()
            menu.addAction("Copy this reply", lambda: self.copy_turn(turn))
            menu.addAction("Edit and resend its message…", lambda: self.edit_turn(turn))
            if turn == self.status.n_turns - 1:
                menu.addAction(self.regenerate_action)
                if self.status.can_continue:
                    menu.addAction(self.continue_action)
        return menu

    def on_reply_action_chosen(self, action: str, turn: int) -> None:
        """A link under a reply (Regenerate and Continue are only under the last one). Copying works at any time;
        the others prepare or start a turn, so not while one runs."""
        if action == "copy":
            self.copy_turn(turn)
        elif self.status.busy:
            self.status_posted.emit(BUSY, 4000)
        elif action == "edit":
            self.edit_turn(turn)
        elif not self.status.ready:
            self.status_posted.emit("Load a model pair first", 4000)
        elif action == "regenerate":
            self.regenerate_chosen.emit()
        else:
            self.continue_chosen.emit()

    def on_example_chosen(self, text: str) -> None:
        self.message_box.setPlainText(text)
        if self.status.ready and not self.status.busy:
            self.message_box.submit()
        else:
            self.message_box.setFocus()

    # -- the controller's reports -----------------------------------------------------------------------------

    def set_pick_running(self, running: bool) -> None:
        """Find the best draft measures the CPU: Send waits for it (greyed, as Load pair), so a reply cannot slow
        the measurement nor look ignored."""
        self.pick_running = running
        self.on_status_changed(self.status)

    def on_status_changed(self, status: ChatStatus) -> None:
        """The buttons and the reply's actions that can be used now."""
        self.status = status
        busy, ready = status.busy, status.ready
        self.send_button.setEnabled(ready and not busy and not self.pick_running)
        editing = status.editing is not None and not busy
        self.send_button.setText("Resend" if editing else "Send")
        self.cancel_edit_button.setVisible(editing)
        stopping = status.state is TurnState.STOPPING
        self.stop_button.setEnabled(busy and not stopping)
        self.stop_button.setText("Stopping…" if stopping else "Stop")
        if stopping:  # the worker stops between rounds or prompt chunks
            self.chat.show_reading("")
        idle_with_reply = ready and not busy and bool(status.n_turns)
        self.regenerate_action.setEnabled(idle_with_reply)
        self.edit_action.setEnabled(idle_with_reply)
        self.copy_action.setEnabled(idle_with_reply and bool(self.chat.reply_text(status.n_turns - 1)))
        continuable = idle_with_reply and status.can_continue and not editing  # a resend replaces the reply
        self.continue_action.setEnabled(continuable)
        self.continue_button.setVisible(continuable)

    def on_conversation_cleared(self, greedy: bool) -> None:
        self.reply_pairs = []
        self.chat.clear_chat()
        self.legend.reset(greedy)

    def on_turn_started(self, started: TurnStarted, header: str) -> None:
        """The user's message and `header`, which the reply's tokens will follow; a continuation goes on in the
        reply it continues."""
        request = started.request
        settings = request.settings
        if request.continues:
            self.chat.continue_reply(header, lookup=settings.lookup)
            return
        self.chat.add_user_message(request.messages[-1]["content"])
        self.chat.begin_reply(header, lookup=settings.lookup)
        if settings.mode is Mode.SPEC:  # the legend names what this reply shows; a plain AR one corrects nothing
            self.legend.set_greedy(settings.greedy)

    def on_reply_finished(self, shown: ReplyShown) -> None:
        """The reply's last tokens, its notes and the links under it; a remote engine's is plain text (a reopened
        one is drawn now) under the engine's header."""
        reply, source = shown.whole, shown.whole.remote
        if source is None:
            self.chat.show_reading("")  # a reply stopped while its prompt was read
        else:
            if not shown.live:
                self.chat.add_text(shown.reply.text)
            self.chat.set_reply_header(remote_header(source.model, source.url, reply.request.settings))
        self.chat.flush()
        self._add_reply_notes(reply)
        if shown.reply.request.continues and self.reply_pairs:  # the same reply, drawn again with its notes
            self.reply_pairs.pop()
        before = next((pair for pair in reversed(self.reply_pairs) if pair is not None), None)
        if shown.pair is not None and before is not None and not same_models(shown.pair, before):
            self.chat.add_note(f"Decoded by {pair_said(shown.pair, short=True)}, not the pair of the reply above")
        self.reply_pairs.append(shown.pair)
        self.chat.set_reply_actions(shown.index, reply_actions(reply.text, shown.can_continue), text=reply.text)

    def _add_reply_notes(self, reply: Reply) -> None:
        """The lines under a finished reply: its figures (which the status bar repeats), then its warnings."""
        figures, *warnings = reply_notes(reply)
        self.chat.add_note(unbreakable(figures.text))
        for note in warnings:
            self.chat.add_note(note.text, warning=note.warning, details=note.details)

    def on_comparison_finished(self, shown: ComparisonShown) -> None:
        comparison, reply = shown.comparison, shown.reply
        self.chat.add_comparison(comparison_view(comparison, reply, comparison_line(comparison, reply), shown.pair,
                                                 part_label(shown.part, continued=shown.part > 1)))

    def on_edit_started(self, _turn: int, text: str) -> None:
        self.message_box.setPlainText(text)
        self.message_box.setFocus()
        self.status_posted.emit(EDITING, 6000)

    def on_edit_cancelled(self) -> None:
        self.message_box.clear()
        self.status_posted.emit("Edit cancelled", 3000)

    def on_context_fitted(self, notice: ContextNotice) -> None:
        """Never silent: a note under the reply it applies to."""
        self.chat.add_note(CONTEXT + notice.message)

    def on_system_prompt_restored(self, text: str) -> None:
        self.system_prompt = text


def reply_actions(text: str, can_continue: bool) -> tuple[str, ...]:
    """The links under a finished reply: Copy only where it has text (one stopped while the prompt was read has
    none), Continue only where it can go on."""
    return ((("copy",) if text else ()) + ("edit", "regenerate") + (("continue",) if can_continue else ()))
