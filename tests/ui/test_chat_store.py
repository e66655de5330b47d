"""The chats database on its own: round trips, schema versions, and a writer killed with SIGKILL mid-reply."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from engine.events import (DecodeSettings, DraftedToken, EmittedToken, Fate, ModelInfo, PairInfo, RoundEvent,
                           TokenProb)
from app.chat_store import MIGRATIONS, SCHEMA_VERSION, ChatRecorder, ChatStore, ChatStoreError
from ui.session import Comparison, Reply, ReplyRequest

ROOT = Path(__file__).resolve().parents[2]
PAIR = PairInfo(ModelInfo("embedded", "/m/t", 135, 49152), ModelInfo("embedded-draft", "/m/d", 20, 49152), "cpu",
                "float32")


def round_event(index: int, text: str = "ab", finish: str | None = None) -> RoundEvent:
    top = (TokenProb(7, "x", 0.6), TokenProb(8, "y", 0.3))
    drafted = (DraftedToken(1, "a", 0.9, 0.8, 0.1, True), DraftedToken(2, "z", 0.1, 0.7, 0.5, False, top, top))
    emitted = (EmittedToken(1, "a", Fate.ACCEPTED, 0.9), EmittedToken(3, "b", Fate.RESAMPLED, 0.4))
    return RoundEvent(index, 2, drafted, emitted, text, 0.01, 0.02, 0.035, prefill_s=0.1 if index == 0 else 0.0,
                      target_step_s=0.03, finish_reason=finish)


def request(*messages: str, settings: DecodeSettings = DecodeSettings(greedy=False)) -> ReplyRequest:
    roles = ("user", "assistant")
    return ReplyRequest(tuple({"role": roles[i % 2], "content": m} for i, m in enumerate(messages)), settings)


def test_a_chat_round_trips_with_its_events_settings_pair_and_comparison(tmp_path):
    store = ChatStore(tmp_path / "chats.sqlite3")
    recorder = ChatRecorder(store)
    ask = request("What is a hash table?", settings=DecodeSettings(greedy=False, temperature=0.7, gamma=3))
    recorder.turn_started(0, ask, PAIR)
    events = tuple(round_event(i, finish="length" if i == 2 else None) for i in range(3))
    for event in events:
        recorder.round_finished(event)
    # what the window judged while it streamed: its reference step and a busy machine
    reply = Reply(ask, events, "ababab", stopped=False, reference_s=0.027, machine_busy=True)
    recorder.reply_finished(reply)
    comparison = Comparison(events[:1], "ab", 0.2, 0.3, 30.0, 20.0, None, machine_busy=True)
    recorder.comparison_finished(comparison)
    store.close()

    store = ChatStore(tmp_path / "chats.sqlite3")
    [summary] = store.list_chats()
    assert summary.title == "What is a hash table?" and summary.n_replies == 1
    chat = store.load_chat(summary.id)
    assert chat.pair == PAIR
    assert chat.replies == [reply]  # frozen dataclasses compare field by field
    assert chat.replies[0].events[0].drafted[1].top_q[0] == TokenProb(7, "x", 0.6)
    assert chat.replies[0].events[0].emitted[1].fate is Fate.RESAMPLED
    assert chat.comparisons == {0: comparison}


def test_a_new_turn_at_an_earlier_position_replaces_what_followed(tmp_path):
    store = ChatStore(tmp_path / "chats.sqlite3")
    recorder = ChatRecorder(store)
    for position, ask in enumerate([request("one"), request("one", "1", "two")]):
        recorder.turn_started(position, ask, PAIR)
        recorder.reply_finished(Reply(ask, (round_event(0),), "ab", False))
    edited = request("one", "1", "second, edited")
    recorder.turn_started(1, edited, PAIR)
    recorder.reply_finished(Reply(edited, (round_event(0),), "ab", False))
    chat = store.load_chat(recorder.chat_id)
    assert [r.request.messages[-1]["content"] for r in chat.replies] == ["one", "second, edited"]


def test_rename_and_delete(tmp_path):
    store = ChatStore(":memory:")
    recorder = ChatRecorder(store)
    recorder.turn_started(0, request("hello"), None)
    store.rename_chat(recorder.chat_id, "  Greetings ")
    assert [c.title for c in store.list_chats()] == ["Greetings"]
    store.delete_chat(recorder.chat_id)
    assert store.list_chats() == []
    assert store.db.execute("SELECT COUNT(*) FROM turns").fetchone() == (0,)  # cascaded


def test_a_title_is_the_whole_first_message_and_follows_its_edits_until_renamed():
    store = ChatStore(":memory:")
    recorder = ChatRecorder(store)
    first = "Write a Python function that checks whether a string is a palindrome"  # 68 characters
    recorder.turn_started(0, request(first), None)
    recorder.turn_started(1, request(first, "ok", "and now in C"), None)
    assert [c.title for c in store.list_chats()] == [first]  # later turns do not rename it
    recorder.turn_started(0, request("Name three colours."), None)  # Edit message on the first one
    assert [c.title for c in store.list_chats()] == ["Name three colours."]
    store.rename_chat(recorder.chat_id, "Colours")
    recorder.turn_started(0, request("Name four colours."), None)
    assert [c.title for c in store.list_chats()] == ["Colours"]


def test_unknown_fields_from_another_release_are_ignored_when_loading(tmp_path):
    store = ChatStore(tmp_path / "chats.sqlite3")
    recorder = ChatRecorder(store)
    recorder.turn_started(0, request("hi"), None)
    recorder.round_finished(round_event(0))
    store.db.execute("UPDATE rounds SET event = json_set(event, '$.field_from_the_future', 1)")
    store.db.commit()
    assert store.load_chat(recorder.chat_id).replies[0].events == (round_event(0),)


def test_a_newer_schema_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "chats.sqlite3"
    ChatStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(ChatStoreError, match="newer SpecDec Studio"):
        ChatStore(path)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1


def test_an_empty_file_is_upgraded_and_a_foreign_file_refused(tmp_path):
    empty = tmp_path / "empty.sqlite3"
    empty.touch()
    store = ChatStore(empty)
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"this is not a database" * 100)
    with pytest.raises(ChatStoreError, match="not a readable chat database"):
        ChatStore(garbage)


WRITER = textwrap.dedent("""
    import sys
    from tests.ui.test_chat_store import request, round_event
    from app.chat_store import ChatRecorder, ChatStore
    from ui.session import Reply

    recorder = ChatRecorder(ChatStore(sys.argv[1]))
    for position in range(2):  # two complete turns
        ask = request(*["earlier"] * (2 * position + 1))
        recorder.turn_started(position, ask, None)
        events = (round_event(0), round_event(1, finish="eos"))
        for event in events:
            recorder.round_finished(event)
        recorder.reply_finished(Reply(ask, events, "abab", False))
    recorder.turn_started(2, request(*["in flight"] * 5), None)
    index = 0
    while True:  # a reply that never ends; the parent kills us mid-stream
        recorder.round_finished(round_event(index))
        print(index, flush=True)
        index += 1
""")


def test_sigkill_mid_reply_keeps_every_committed_turn_and_round(tmp_path):
    path = tmp_path / "chats.sqlite3"
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    watchdog = threading.Timer(120, child.kill)  # a child that hangs fails the test, not hangs it
    watchdog.start()
    try:
        for line in child.stdout:  # a line is printed only after its round's transaction committed
            if int(line) >= 20:
                break
        os.kill(child.pid, signal.SIGKILL)
    finally:
        watchdog.cancel()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL

    store = ChatStore(path)
    assert store.db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    [summary] = store.list_chats()
    chat = store.load_chat(summary.id)
    earlier, in_flight = chat.replies[:2], chat.replies[2]
    assert [(r.text, r.stopped, len(r.events)) for r in earlier] == [("abab", False, 2)] * 2
    assert len(in_flight.events) >= 21 and in_flight.stopped  # every round printed before the kill is there
    assert [e.index for e in in_flight.events] == list(range(len(in_flight.events)))
    assert in_flight.text == "ab" * len(in_flight.events)


def test_a_failing_write_stops_saving_once_and_says_so(tmp_path):
    store = ChatStore(tmp_path / "chats.sqlite3")
    reported = []
    recorder = ChatRecorder(store, on_failure=reported.append)
    recorder.turn_started(0, request("hi"), None)
    store.db.close()  # as if the file went away: every later write raises sqlite3.Error
    recorder.round_finished(round_event(0))
    recorder.round_finished(round_event(1))
    recorder.reply_finished(Reply(request("hi"), (round_event(0),), "ab", False))
    recorder.turn_started(1, request("hi", "ab", "more"), None)
    assert len(reported) == 1 and reported[0].startswith("Chats are no longer being saved")
    assert recorder.turn_id is None


def test_an_upgrade_that_fails_half_way_leaves_the_previous_version_whole(tmp_path, monkeypatch):
    path = tmp_path / "chats.sqlite3"
    monkeypatch.setitem(MIGRATIONS, 1, ("CREATE TABLE chats (id INTEGER PRIMARY KEY)", "NOT SQL AT ALL"))
    with pytest.raises(ChatStoreError):
        ChatStore(path)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 0
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == []  # the first CREATE was rolled back
    monkeypatch.undo()
    store = ChatStore(path)  # the real upgrade then runs from version 0
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION and store.list_chats() == []
