"""Saved chats through the real window and worker: history across a restart, settings kept with QSettings,
regenerate / edit-and-resend / continue / copy / system prompt, New chat during a reply, and a killed app."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QApplication, QInputDialog, QLineEdit, QMessageBox

from app.chat.export import ExportError
from app.chat.store import ChatStore
from tests.tiny import tiny_decoder
from tests.ui.helpers import REPLY_TIMEOUT_MS, expected_colours, send, token_fragments
from ui.chat.history import CHAT_ID, SUBTITLE, when
from ui.chat.view import ACTION_SCHEME, TRACE
from words.wording import speedup_said, stats_line

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def make_window(make_studio, tmp_path):
    """`make_studio` with the chats database and the settings file in tmp_path; each call is one run of the app,
    and closing it (`close`) is a quit: the window saves its settings, the worker thread is joined."""

    def make(decoder, **settings):
        preferences = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
        return make_studio(decoder, store=ChatStore(tmp_path / "chats.sqlite3"), preferences=preferences, **settings)

    def close(studio):
        studio.window.close()
        studio.shutdown()
        studio.chat.store.close()

    make.close = close
    return make


def click_chat(qtbot, window, row: int) -> None:
    history = window.history.list
    rect = history.visualItemRect(history.item(row))
    qtbot.mouseClick(history.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())


def test_history_survives_a_restart_and_restores_text_colours_charts_and_stats(make_window, mixed_decoder, qtbot):
    first = make_window(mixed_decoder, greedy=False, max_new_tokens=24, cost_aware=False, stop_below=0.0)
    replies = [send(qtbot, first, "w3 w7 w11 w5"), send(qtbot, first, "w9 w2")]
    shown = token_fragments(first.window.chat)
    make_window.close(first)

    second = make_window(mixed_decoder, greedy=False, max_new_tokens=24)
    window = second.window
    assert second.chat.replies == []
    assert window.history.list.count() == 1
    assert window.history.list.item(0).text() == "w3 w7 w11 w5"
    assert window.history.list.item(0).data(SUBTITLE).startswith("today ")
    click_chat(qtbot, window, 0)
    assert second.chat.replies == replies  # every round event, the request and the settings came back
    assert token_fragments(window.chat) == shown  # same tokens, colours and strike-outs as when they streamed
    window.legend.trace_action.setChecked(True)  # the trace view: every draft, coloured by its fate
    window.chat.flush()
    trace = {(c, s) for _, c, s in token_fragments(window.chat)}
    assert trace == expected_colours([e for r in replies for e in r.events])
    assert window.reply_label.text() == "last reply: " + stats_line(replies[-1])
    window.charts.refresh()
    for series in ("alpha", "tokens"):  # the charts show the last reply
        assert window.charts.point_count(series) == len(replies[-1].events)
    measured = ~np.isnan(window.charts.buffers.series("speedup_mean")[1])  # its speedup, where plain rounds measured it
    assert window.charts.point_count("speedup_mean") == np.count_nonzero(measured)
    assert [m["role"] for m in second.chat.messages] == ["user", "assistant", "user", "assistant"]

    third = send(qtbot, second, "w4")  # carrying on in the restored chat writes to it, not to a new one
    assert third.request.messages[:4] == tuple(second.chat.messages[:4])
    assert [c.n_replies for c in second.chat.store.list_chats()] == [3]


def test_a_reopened_chat_brings_back_the_settings_its_last_reply_was_decoded_with(make_window, mixed_decoder, qtbot):
    """Sampled at γ 3 with 24 tokens, reopened by a run set to greedy γ 5 and 12 tokens: Regenerate and Continue
    carry on as the chat was decoded, and the status bar says the controls changed. A chat decoded as the
    controls stand changes nothing and says nothing (the control)."""
    first = make_window(mixed_decoder, greedy=False, temperature=0.7, gamma=3, max_new_tokens=24)
    reply = send(qtbot, first, "w3 w7 w11 w5")
    make_window.close(first)

    second = make_window(mixed_decoder)
    window = second.window
    window.controls.greedy.setChecked(True)  # changed since (the settings file kept the first run's)
    window.controls.gamma.setValue(5)
    window.controls.max_new_tokens.setValue(12)
    click_chat(qtbot, window, 0)
    assert window.controls.settings() == reply.request.settings
    assert window.statusBar().currentMessage() == (
        "Decoding as this chat's last reply: speculative, sampling T=0.7, γ ≤ 3, stop 0.3, up to 24 tokens, seed 0")
    window.statusBar().clearMessage()
    click_chat(qtbot, window, 0)
    assert window.statusBar().currentMessage() == ""
    window.new_chat()  # a new chat keeps the restored settings, and says so
    assert window.statusBar().currentMessage() == (
        "New chat, decoding as: speculative, sampling T=0.7, γ ≤ 3, stop 0.3, up to 24 tokens, seed 0")
    make_window.close(second)


def test_settings_and_layout_persist_through_qsettings(make_window, mixed_decoder, qtbot):
    first = make_window(mixed_decoder)
    window = first.window
    controls = window.controls
    controls.sampling.setChecked(True)
    controls.temperature.setValue(0.7)
    controls.gamma.setValue(3)
    controls.max_new_tokens.setValue(77)
    controls.stop_below.setValue(0.5)
    window.picker.target.setText("HuggingFaceTB/SmolLM2-360M-Instruct")
    window.picker.weights.setCurrentText("native")
    window.system_prompt = "w9 w9"
    window.resize(1100, 760)
    window.history_dock.hide()
    window.pane_actions["right"].setChecked(False)  # View ▸ Inspector and charts
    qtbot.keyClick(window.message_box, Qt.Key.Key_T, Qt.KeyboardModifier.ControlModifier)  # the speculative trace
    make_window.close(first)

    window = make_window(mixed_decoder).window
    settings = window.controls.settings()
    assert (settings.greedy, settings.temperature, settings.gamma, settings.max_new_tokens, settings.stop_below) == \
        (False, 0.7, 3, 77, 0.5)
    assert window.controls.sampling_box.isVisibleTo(window)
    assert window.picker.target.text() == "HuggingFaceTB/SmolLM2-360M-Instruct"
    assert window.picker.weights.currentText() == "native"
    assert window.system_prompt == "w9 w9"
    assert window.height() == 760  # (the width is clamped: the offscreen platform's screen is 800 px wide)
    assert window.history_dock.isHidden()
    assert window.panes["right"].isHidden() and not window.pane_actions["right"].isChecked()
    assert not window.panes["side"].isHidden() and window.pane_actions["side"].isChecked()
    assert window.legend.trace_action.isChecked() and window.chat.view == TRACE


def test_regenerate_replaces_the_last_reply_here_and_on_disk(make_window, mixed_decoder, qtbot):
    studio = make_window(mixed_decoder, greedy=False, max_new_tokens=12)
    window = studio.window
    send(qtbot, studio, "w3 w4")
    old = send(qtbot, studio, "w5 w6")
    window.controls.seed.setValue(7)
    with qtbot.waitSignal(window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        window.regenerate_action.trigger()
    new = studio.chat.replies[-1]
    assert len(studio.chat.replies) == 2 and new.request.settings.seed == 7
    assert new.request.messages == old.request.messages and new.text != old.text
    assert window.chat.toPlainText().count("w5 w6") == 1  # the old reply is gone from the pane, not repeated
    saved = studio.chat.store.load_chat(studio.chat.chat_id)
    assert [r.text for r in saved.replies] == [r.text for r in studio.chat.replies]


@pytest.mark.parametrize("greedy", [False, True])
def test_regenerate_draws_a_new_sample_with_the_next_seed_unless_greedy(make_window, mixed_decoder, qtbot, greedy):
    studio = make_window(mixed_decoder, greedy=greedy, max_new_tokens=12)
    window = studio.window
    old = send(qtbot, studio, "w3 w4")
    with qtbot.waitSignal(window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        window.regenerate_action.trigger()
    new = studio.chat.replies[-1]
    seed = old.request.settings.seed
    assert new.request.settings.seed == (seed if greedy else seed + 1) == window.controls.seed.value()
    assert (new.text == old.text) is greedy


def test_edit_and_resend_replaces_that_turn(make_window, mixed_decoder, qtbot):
    studio = make_window(mixed_decoder, greedy=True, max_new_tokens=8)
    window = studio.window
    send(qtbot, studio, "w3 w4")
    send(qtbot, studio, "w5 w6")
    window.edit_action.trigger()
    assert window.message_box.toPlainText() == "w5 w6"
    assert window.cancel_edit_button.isVisible() and window.send_button.text() == "Resend"
    qtbot.keyClick(window.message_box, Qt.Key.Key_Escape)  # Esc leaves the edit
    assert studio.chat.editing is None and window.message_box.toPlainText() == ""
    assert not window.cancel_edit_button.isVisible() and window.send_button.text() == "Send"
    window.edit_action.trigger()
    qtbot.mouseClick(window.cancel_edit_button, Qt.MouseButton.LeftButton)  # and so does its button
    assert studio.chat.editing is None and window.message_box.toPlainText() == ""
    window.edit_action.trigger()
    window.message_box.setPlainText("w7 w8")
    hints = []  # what the status bar says once the resent reply has begun
    studio.chat.turn_started.connect(lambda _started: hints.append((window.statusBar().currentMessage(),
                                                                     window.reply_label.text())))
    with qtbot.waitSignal(window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClick(window.message_box, Qt.Key.Key_Return)
    assert hints[-1] == ("", "")  # the resent reply: neither the edit's hint nor the replaced reply's figures stay up
    assert [r.request.messages[-1]["content"] for r in studio.chat.replies] == ["w3 w4", "w7 w8"]
    assert window.chat.toPlainText().count("w5 w6") == 0
    saved = studio.chat.store.load_chat(studio.chat.chat_id)
    assert [r.request.messages[-1]["content"] for r in saved.replies] == ["w3 w4", "w7 w8"]


def test_continue_carries_on_a_reply_cut_at_max_tokens(make_window, mixed_decoder, qtbot):
    studio = make_window(mixed_decoder, greedy=True, max_new_tokens=6)
    window = studio.window
    cut = send(qtbot, studio, "w3 w4")
    assert cut.events[-1].finish_reason == "length"
    assert window.continue_button.isVisible() and window.continue_action.isEnabled()
    window.edit_action.trigger()  # while its message is being edited, the reply is about to be replaced
    assert not window.continue_button.isVisible() and not window.continue_action.isEnabled()
    window.cancel_edit_button.click()
    assert window.continue_button.isVisible() and window.continue_action.isEnabled()
    with qtbot.waitSignal(window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        qtbot.mouseClick(window.continue_button, Qt.MouseButton.LeftButton)
    more = studio.chat.replies[-1]
    assert more.request.messages[-1] == {"role": "assistant", "content": cut.text}
    assert studio.chat.messages[-1] == {"role": "assistant", "content": cut.text + more.text}
    assert window.chat.toPlainText().count("w3 w4") == 1  # no new user message for a continuation


def continue_link(chat) -> tuple[str, str]:
    """The text and tooltip of the Continue link under the last reply."""
    [(text, tooltip)] = [(fragment.text(), fragment.charFormat().toolTip())
                         for fragment in link_fragments(chat) if fragment.charFormat().anchorHref().startswith(
                             f"{ACTION_SCHEME}:continue:")]
    return text, tooltip


def test_continue_says_it_asks_for_up_to_max_tokens_more(make_window, mixed_decoder, qtbot):
    studio = make_window(mixed_decoder, greedy=True, max_new_tokens=6)
    window = studio.window
    cut = send(qtbot, studio, "w3 w4")
    text, tooltip = continue_link(window.chat)
    assert text == "Continue (up to 6 more tokens)" and "for up to 6 more tokens" in tooltip
    assert "up to 6 more tokens" in window.continue_button.toolTip()
    assert "up to 6 more tokens" in window.continue_action.text()
    window.controls.max_new_tokens.setValue(9)  # the link under the reply follows the setting it will use
    assert continue_link(window.chat)[0] == "Continue (up to 9 more tokens)"
    assert "up to 9 more tokens" in window.continue_button.toolTip()
    with qtbot.waitSignal(window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        window.continue_action.trigger()
    # as it said: the joined reply runs past the max tokens, by up to 9 more
    assert len(cut.tokens) == 6 and len(studio.chat.whole_reply(1).tokens) == 6 + 9


def test_the_history_counts_a_continued_reply_as_the_one_reply_it_shows(make_window, mixed_decoder, qtbot):
    studio = make_window(mixed_decoder, greedy=True, max_new_tokens=6)
    window = studio.window
    send(qtbot, studio, "w3 w4")
    assert window.history.list.item(0).data(SUBTITLE).endswith("· 1 reply")  # as soon as the reply has ended
    with qtbot.waitSignal(window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        window.continue_action.trigger()
    assert window.chat.toPlainText().count("Assistant") == 1
    assert window.history.list.item(0).data(SUBTITLE).endswith("· 1 reply")


def test_a_continuation_carries_on_the_assistant_message_in_the_chat_template():
    decoder = tiny_decoder(draft_seed=None)
    decoder.tokenizer.chat_template = ("{% for m in messages %} {{ m.content }}{% endfor %}"
                                       "{% if add_generation_prompt %} w63{% endif %}")  # w63 opens a reply
    asked = [{"role": "user", "content": "w3 w4"}]
    ids = decoder.tokenizer.convert_tokens_to_ids
    assert decoder.chat_ids(asked) == ids(["w3", "w4", "w63"])
    assert decoder.chat_ids(asked + [{"role": "assistant", "content": "w5 w6"}]) == ids(["w3", "w4", "w5", "w6"])


def test_copy_gives_the_clean_reply_and_the_system_prompt_goes_first(make_window, mixed_decoder, qtbot):
    studio = make_window(mixed_decoder, greedy=False, max_new_tokens=16, cost_aware=False, stop_below=0.0)
    window = studio.window
    window.system_prompt = "w9 w10"
    reply = send(qtbot, studio, "w3 w4")
    assert reply.request.messages[0] == {"role": "system", "content": "w9 w10"}
    assert studio.chat.store.load_chat(studio.chat.chat_id).system_prompt == "w9 w10"
    window.copy_action.trigger()
    assert QApplication.clipboard().text() == reply.text


def test_new_chat_during_a_reply_stops_it_and_keeps_it_in_the_old_chat(make_window, mixed_decoder, qtbot):
    studio = make_window(mixed_decoder, greedy=False, max_new_tokens=600)
    window = studio.window
    with qtbot.waitSignal(window.round_shown, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClicks(window.message_box, "w3 w4")
        qtbot.keyClick(window.message_box, Qt.Key.Key_Return)
    old_chat = studio.chat.chat_id
    with qtbot.waitSignal(studio.chat.reset_requested, timeout=REPLY_TIMEOUT_MS):  # once the reply has stopped
        qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert not studio.chat.busy and studio.chat.replies == [] and studio.chat.messages == []
    assert "w3 w4" not in window.chat.toPlainText() and window.reply_label.text() == ""
    assert window.inspector.span is None
    assert studio.chat.chat_id is None  # the next message starts a new saved chat
    [stopped] = studio.chat.store.load_chat(old_chat).replies
    assert stopped.stopped and 0 < len(stopped.events) < 600


def test_the_title_follows_an_edited_first_message_and_a_right_click_keeps_the_open_chat(make_window, mixed_decoder,
                                                                                        qtbot):
    studio = make_window(mixed_decoder, greedy=True, max_new_tokens=4)
    window = studio.window
    send(qtbot, studio, "w9 w2")  # another chat, below the open one in the history
    window.new_chat()
    send(qtbot, studio, "w3 w4")
    window.edit_action.trigger()
    edited = "w5 w6 " * 12  # longer than a title used to be cut at
    window.message_box.setPlainText(edited)
    with qtbot.waitSignal(window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClick(window.message_box, Qt.Key.Key_Return)
    history = window.history.list
    assert history.item(0).text() == edited.strip()  # never renamed: it follows its first message
    assert history.currentItem().data(CHAT_ID) == studio.chat.chat_id

    qtbot.mouseClick(history.viewport(), Qt.MouseButton.RightButton, pos=history.visualItemRect(
        history.item(1)).center())  # the other chat's menu
    assert history.currentItem().data(CHAT_ID) == studio.chat.chat_id  # still the chat on screen
    menu = window.history.chat_menu(history.item(0))  # what a right-click opens, without its blocking exec()
    next(action for action in menu.actions() if action.text() == "Rename…").trigger()
    dialog = window.history.findChild(QInputDialog)
    assert dialog.textValue() == edited.strip()  # the whole title, no "…"
    dialog.setTextValue("Words")
    dialog.accept()
    window.edit_action.trigger()
    window.message_box.setPlainText("w7 w8")
    hints = []  # what the status bar says once the resent reply has begun
    studio.chat.turn_started.connect(lambda _started: hints.append((window.statusBar().currentMessage(),
                                                                     window.reply_label.text())))
    with qtbot.waitSignal(window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClick(window.message_box, Qt.Key.Key_Return)
    assert hints[-1] == ("", "")  # the resent reply: neither the edit's hint nor the replaced reply's figures stay up
    assert history.item(0).text() == "Words"  # the user's name stays


def test_enter_in_the_delete_question_keeps_the_chat(make_window, mixed_decoder, qtbot):
    """The question's default is No; the control, Y (its Yes), deletes."""
    from PySide6.QtCore import QTimer

    studio = make_window(mixed_decoder, max_new_tokens=4)
    send(qtbot, studio, "w3")
    chat_id = studio.chat.chat_id

    def answer(key) -> None:
        QTimer.singleShot(0, lambda: qtbot.keyClick(QApplication.activeModalWidget(), key))
        studio.window.history._ask_delete(chat_id, "w3")

    answer(Qt.Key.Key_Return)
    assert [c.id for c in studio.chat.store.list_chats()] == [chat_id]
    answer(Qt.Key.Key_Y)
    assert studio.chat.store.list_chats() == []


def test_rename_delete_and_export_a_saved_chat(make_window, mixed_decoder, qtbot, tmp_path):
    studio = make_window(mixed_decoder, greedy=False, max_new_tokens=8)
    window = studio.window
    reply = send(qtbot, studio, "w3 w4")
    chat_id = studio.chat.chat_id
    title = "w3 w4 " * 10  # a title as long as one made from a first message gets
    window.history.rename_chat(chat_id, title)
    window.history._ask_rename(chat_id, title.strip())  # Rename… in the chat's context menu
    dialog = window.history.findChild(QInputDialog)
    qtbot.waitExposed(dialog)
    field = dialog.findChild(QLineEdit)
    assert field.width() >= field.fontMetrics().horizontalAdvance(field.text()) + 8  # the whole title in view
    dialog.setTextValue("Tiny words")
    dialog.accept()
    assert window.history.list.item(0).text() == "Tiny words"
    written = window.history.export_chat(chat_id, tmp_path / "again")
    data = json.loads((tmp_path / "again.json").read_text())
    assert [p.name for p in written] == ["again.json", "again.csv", "again-positions.csv", "again.md"]
    assert data["replies"][0]["text"] == reply.text
    assert data["environment"]["threads"] == studio.chat.runtime.threads  # what ran it, saved with the chat
    (tmp_path / "blocked.csv").mkdir()
    with pytest.raises(ExportError, match="blocked.csv"):
        window.history.export_chat(chat_id, tmp_path / "blocked")
    window.history.delete_chat(chat_id)
    assert studio.chat.replies == []  # the open chat was the one deleted
    empty = window.history.empty  # says what will appear, on as many lines as the dock's width needs
    assert window.history.list.isHidden() and empty.isVisible() and "No saved chats yet" in empty.text()
    assert empty.minimumSizeHint().width() <= empty.width()


APP = textwrap.dedent("""
    import sys
    from PySide6.QtWidgets import QApplication
    from studio.window import build
    from engine.events import DecodeSettings
    from tests.ui.conftest import DRAFT_NOISE, near_copy_decoder
    from app.chat.store import ChatStore

    app = QApplication([])
    studio = build(near_copy_decoder(DRAFT_NOISE["mixed"]), defaults=DecodeSettings(greedy=False, max_new_tokens=8),
                   store=ChatStore(sys.argv[1]))
    window = studio.window
    rounds = []

    def on_round_shown(event):  # the window wrote the round before it announced it
        rounds.append(event)
        print("round", len(rounds), flush=True)

    def on_turn_completed():
        print("turn", len(studio.chat.replies), flush=True)
        if len(studio.chat.replies) == 1:
            window.controls.max_new_tokens.setValue(5000)  # a reply that outlives the kill
            window.send("w5 w6")

    window.models_shown.connect(lambda _info: window.send("w3 w4"))
    window.round_shown.connect(on_round_shown)
    window.turn_completed.connect(on_turn_completed)
    studio.start()
    app.exec()
""")


def test_killing_the_app_mid_reply_keeps_every_earlier_turn(tmp_path):
    db = tmp_path / "chats.sqlite3"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    child = subprocess.Popen([sys.executable, "-c", APP, str(db)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             text=True)
    kinds = []
    watchdog = threading.Timer(120, child.kill)  # a child that hangs fails the test, not hangs it
    watchdog.start()
    try:
        for line in child.stdout:  # kill once the second reply has streamed ten rounds
            kinds.append(line.split()[0])
            if "turn" in kinds and len(kinds) - kinds.index("turn") > 10:
                break
        os.kill(child.pid, signal.SIGKILL)
    finally:
        watchdog.cancel()
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    first_turn_rounds = kinds.index("turn")
    rounds_in_flight = len(kinds) - first_turn_rounds - 1

    store = ChatStore(db)
    assert store.db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    [chat] = store.list_chats()
    finished, killed = store.load_chat(chat.id).replies
    assert not finished.stopped and len(finished.events) == first_turn_rounds
    assert finished.request.messages[-1]["content"] == "w3 w4"
    assert killed.stopped and killed.request.messages[-1]["content"] == "w5 w6"
    assert len(killed.events) >= rounds_in_flight  # at most the round in flight is lost


def test_the_chat_menu_acts_on_the_reply_under_the_mouse(make_window, mixed_decoder, qtbot, monkeypatch):
    asked = []  # editing the first of two messages asks first: the reply after it will be replaced
    monkeypatch.setattr(QMessageBox, "question", lambda *args, **kw: asked.append(args[2]) or answers.pop(0))
    answers = [QMessageBox.StandardButton.Cancel, QMessageBox.StandardButton.Yes]
    studio = make_window(mixed_decoder, greedy=True, max_new_tokens=8)
    window = studio.window
    first, _ = send(qtbot, studio, "w3 w4"), send(qtbot, studio, "w5 w6")
    cursor = token_position(window.chat, first_span=window.chat.items[1].first)
    cursor.movePosition(QTextCursor.MoveOperation.Right)  # inside the token, not on its left edge
    on_first_reply = window.chat.cursorRect(cursor).center()
    assert window.chat.turn_at(on_first_reply) == 0
    standard = [a.objectName() for a in window.chat.createStandardContextMenu(on_first_reply).actions()]
    menu = window.chat_pane.chat_menu(on_first_reply).actions()
    offered = [a.objectName() for a in menu]
    assert "link-copy" in standard and "link-copy" not in offered  # a token's address is nothing to copy
    assert "edit-copy" in offered and "Copy this reply" in [a.text() for a in menu]
    window.chat_pane.copy_turn(0)
    assert QApplication.clipboard().text() == first.text
    window.chat_pane.edit_turn(0)  # cancelled: nothing to edit
    assert window.message_box.toPlainText() == "" and "replaces its reply and the 1 turn after it" in asked[0]
    window.chat_pane.edit_turn(0)
    assert window.message_box.toPlainText() == "w3 w4" and len(asked) == 2
    window.message_box.setPlainText("w9")
    with qtbot.waitSignal(window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClick(window.message_box, Qt.Key.Key_Return)
    assert [r.request.messages[-1]["content"] for r in studio.chat.replies] == ["w9"]


def link_fragments(chat) -> list:
    """Every fragment of the chat pane's document that is a link under a reply, in document order."""
    found = []
    block = chat.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            if it.fragment().charFormat().anchorHref().startswith(f"{ACTION_SCHEME}:"):
                found.append(it.fragment())
            it += 1
        block = block.next()
    return found


def reply_links(chat) -> list[tuple[str, int, int]]:
    """(action, turn, document position) of every link under the replies, in document order."""
    found = []
    for fragment in link_fragments(chat):
        action, _, turn = fragment.charFormat().anchorHref().partition(":")[2].partition(":")
        found.append((action, int(turn), fragment.position()))
    return found


def click_link(qtbot, chat, action: str, turn: int) -> None:
    [position] = [at for name, t, at in reply_links(chat) if (name, t) == (action, turn)]
    cursor = QTextCursor(chat.document())
    cursor.setPosition(position + 1)
    chat.setTextCursor(cursor)
    chat.ensureCursorVisible()
    with qtbot.waitSignal(chat.action_chosen, timeout=2000):
        qtbot.mouseClick(chat.viewport(), Qt.MouseButton.LeftButton, pos=chat.cursorRect(cursor).center())


def test_links_under_each_reply_copy_edit_regenerate_and_continue_it(make_window, mixed_decoder, qtbot, monkeypatch):
    monkeypatch.setattr(QMessageBox, "question", lambda *_a, **_k: QMessageBox.StandardButton.Yes)  # replace later ones
    studio = make_window(mixed_decoder, greedy=True, max_new_tokens=6)  # every reply is cut at max tokens
    window, chat = studio.window, studio.window.chat
    first, second = send(qtbot, studio, "w3 w4"), send(qtbot, studio, "w5 w6")

    def links() -> list[tuple[str, int]]:
        return [(action, turn) for action, turn, _ in reply_links(chat)]

    # Regenerate and Continue only under the last reply
    assert links() == [("copy", 0), ("edit", 0), ("copy", 1), ("edit", 1), ("regenerate", 1), ("continue", 1)]
    click_link(qtbot, chat, "copy", 0)
    assert QApplication.clipboard().text() == first.text
    chat.selectAll()
    assert "Regenerate" not in chat.selected_clean_text()  # the links are not part of the chat's text
    with qtbot.waitSignal(window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        click_link(qtbot, chat, "continue", 1)
    assert studio.chat.messages[-1]["content"] == second.text + studio.chat.replies[-1].text
    # the continued reply is one reply: one set of links, acting on its last part
    assert links()[2:] == [("copy", 2), ("edit", 2), ("regenerate", 2), ("continue", 2)]
    click_link(qtbot, chat, "copy", 2)
    assert QApplication.clipboard().text() == studio.chat.messages[-1]["content"]
    with qtbot.waitSignal(window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        click_link(qtbot, chat, "regenerate", 2)  # all of the continued reply, from its message
    assert len(studio.chat.replies) == 2 and links()[-2:] == [("regenerate", 1), ("continue", 1)]
    click_link(qtbot, chat, "edit", 0)
    assert window.message_box.toPlainText() == "w3 w4" and studio.chat.editing == 0


def token_position(chat, first_span: int) -> QTextCursor:
    """A cursor at the start of the token with this span index in the chat pane's document."""
    block = chat.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.charFormat().anchorHref() == f"token:{first_span}":
                cursor = QTextCursor(chat.document())
                cursor.setPosition(fragment.position())
                return cursor
            it += 1
        block = block.next()
    raise AssertionError(f"token {first_span} is not in the pane")


def test_a_chats_database_that_cannot_be_used_leaves_chats_in_memory_and_says_so(tmp_path):
    from studio.window import open_data_dir

    store, preferences, problem = open_data_dir(tmp_path)
    assert Path(store.path) == tmp_path / "chats.sqlite3" and problem is None
    assert Path(preferences.fileName()) == tmp_path / "settings.ini"
    store.db.execute("PRAGMA user_version = 99")
    store.close()
    store, _, problem = open_data_dir(tmp_path)
    assert store.path == ":memory:"
    assert problem.startswith("Chats will not be saved in this session") and "newer SpecDec Studio" in problem


def test_a_damaged_chats_database_is_replaced_and_the_problem_says_where_it_went(tmp_path):
    from studio.window import open_data_dir

    (tmp_path / "chats.sqlite3").write_bytes(b"not a database" * 100)
    store, _, problem = open_data_dir(tmp_path)
    [aside] = tmp_path.glob("chats.damaged-*.sqlite3")
    assert Path(store.path) == tmp_path / "chats.sqlite3" and f"it was moved to {aside.name}" in problem


def test_a_chats_date_is_as_short_as_it_can_be():
    now = datetime(2026, 11, 30, 18, 0, tzinfo=timezone.utc).astimezone()
    assert when(now - timedelta(hours=1), now) == (now - timedelta(hours=1)).strftime("today %H:%M")
    assert when(now - timedelta(days=40), now) == (now - timedelta(days=40)).strftime("%d %b")
    assert when(now - timedelta(days=400), now).endswith(" 2025")


def test_a_database_failing_mid_session_is_reported_and_the_chat_goes_on(make_window, mixed_decoder, qtbot):
    studio = make_window(mixed_decoder, greedy=False, max_new_tokens=8)
    window = studio.window
    send(qtbot, studio, "w3 w4")
    studio.chat.store.db.close()  # the next write raises, as on a full disk or a removed file
    reply = send(qtbot, studio, "w5 w6")
    assert window.error_box.text().startswith("Chats are no longer being saved")
    assert studio.chat.replies[-1] is reply and reply.text
    send(qtbot, studio, "w7")  # and the chat goes on


def chart_data(charts) -> dict:
    return {name: charts.buffers.series(name)[1].tolist() for name in ("alpha", "alpha_mean", "tokens", "expected",
                                                                          "speedup", "speedup_mean")}


def test_a_reopened_chat_charts_the_points_charted_live_and_ends_on_its_footer(make_window, mixed_decoder, qtbot):
    studio = make_window(mixed_decoder, greedy=False, max_new_tokens=24)
    window = studio.window
    send(qtbot, studio, "w3 w4")
    reply = send(qtbot, studio, "w9 w2")
    live = chart_data(window.charts)
    chat_id = studio.chat.chat_id
    window.new_chat()
    assert chart_data(window.charts)["tokens"] == []
    studio.chat.open_chat(chat_id)
    np.testing.assert_equal(chart_data(window.charts), live)
    assert speedup_said(reply.speedup) in window.reply_label.text()
    np.testing.assert_equal(live["speedup_mean"][-1], np.nan if reply.speedup.value is None else reply.speedup.value)


def test_a_continued_replys_measured_lines_are_the_same_live_reopened_and_in_the_export(make_window, mixed_decoder,
                                                                                       qtbot, monkeypatch):
    """Each part compared: a line over each part's rounds, the same three ways."""
    from ui.why.pane import reply_charts
    from words.records import MEASURED_TOKENS, numbered_replies

    monkeypatch.setattr("app.chat.controller.machine_was_busy", lambda *_: False)  # the tiny models' timings are all noise
    monkeypatch.setattr("app.chat.controller.unequal_loads", lambda *_: False)
    monkeypatch.setattr("words.records.beyond_rounds", lambda *_: False)  # nor can bound a noisy ratio
    studio = make_window(mixed_decoder, greedy=True, max_new_tokens=MEASURED_TOKENS, cost_aware=False,
                         stop_below=0.0)
    window = studio.window
    window.controls.compare_ar.setChecked(True)
    send(qtbot, studio, "w3 w4")
    with qtbot.waitSignal(window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        window.continue_action.trigger()
    window.charts.refresh()
    live = window.charts.measured_spans()
    first = len(studio.chat.replies[0].events)
    assert [(start, end) for start, end, _ in live] == [(0.5, first + 0.5),
                                                        (first + 0.5, len(studio.chat.whole_reply(1).events) + 0.5)]
    exported = reply_charts(numbered_replies(studio.chat.session)[0], window.charts.size()).measured_spans()
    told = window.chat.toPlainText()  # under the reply, each part's comparison, the continuation's named
    assert told.count("→ measured") == 2 and told.count("part 2 (continued): ") == 1
    assert told.count("part 1: both decoded again") == 1  # the first part's, named once the reply went on
    chat_id = studio.chat.chat_id
    window.new_chat()
    studio.chat.open_chat(chat_id)
    window.charts.refresh()
    assert window.charts.measured_spans() == live == exported
    assert window.chat.toPlainText() == told
