"""The chat controller with a running engine as its target, without a widget: the real remote worker on its thread
against a local server playing an OpenAI-compatible engine (tests/fake_engine.py), and a fake local worker beside
it, so switching back to the local pair can be checked too."""
from __future__ import annotations

import json

import pytest

from app.chat.controller import ChatController
from app.chat.store import ChatStore
from engine.remote import API_KEY_ENV
from studio.window import wire_remote_worker
from tests.app.test_chat import PAIR, SPEC, FakeWorker, two_rounds
from tests.fake_engine import FakeEngine, closed_port, serving
from words.records import TurnState

TIMEOUT_MS = 15_000


@pytest.fixture
def remote_chat(qtbot):
    """A controller with the local pair loaded (answered by a FakeWorker) and the remote worker on its thread."""
    chat = ChatController(ChatStore(":memory:"))
    chat.on_models_loaded(PAIR)
    local = FakeWorker(chat)
    _, thread = wire_remote_worker(chat, timeout_s=5.0)
    thread.start()
    yield chat, local
    thread.quit()
    thread.wait(5000)


def connect(qtbot, chat: ChatController, url: str, model: str | None = None):
    with qtbot.waitSignal(chat.remote_connected, timeout=TIMEOUT_MS) as connected:
        chat.load_pair(url, model, "auto", "auto", "auto")
    return connected.args[0]


def send(qtbot, chat: ChatController, text: str = "hi"):
    with qtbot.waitSignal(chat.turn_completed, timeout=TIMEOUT_MS):
        chat.send(text, SPEC)
    return chat.replies[-1]


def test_a_url_target_connects_to_the_served_model(qtbot, remote_chat):
    chat, _ = remote_chat
    with serving(FakeEngine()) as url:
        target = connect(qtbot, chat, url)
    assert (target.url, target.model) == (url, "fake-model")
    assert chat.status.remote and chat.ready and chat.state is TurnState.IDLE


def test_a_remote_reply_streams_into_the_conversation_as_plain_text(qtbot, remote_chat):
    chat, local = remote_chat
    pieces = []
    chat.remote_text_received.connect(lambda piece: pieces.append(piece.text))
    with serving(FakeEngine()) as url:
        connect(qtbot, chat, url)
        reply = send(qtbot, chat)
    assert pieces == ["Hello", " there, friend", "!"]
    assert reply.text == "Hello there, friend!" and reply.events == () and not reply.stopped
    assert chat.messages[-1] == {"role": "assistant", "content": "Hello there, friend!"}
    assert local.requests == []  # the local pair was not asked


def test_a_remote_reply_carries_the_engines_metrics_deltas(qtbot, remote_chat):
    chat, _ = remote_chat
    engine = FakeEngine()
    engine.counters.update(drafts=7, draft_tokens=28, accepted=9, done=2)  # traffic before this reply
    with serving(engine) as url:
        connect(qtbot, chat, url)
        spec = send(qtbot, chat).remote.reply.spec
    assert (spec.drafts, spec.draft_tokens, spec.accepted, spec.accepted_per_position) == (1, 4, 2, (1, 1, 0, 0))
    assert spec.acceptance_rate == pytest.approx(0.5) and spec.mean_acceptance_length == pytest.approx(3.0)


def test_a_remote_reply_is_saved_with_its_engine_and_model(qtbot, remote_chat):
    chat, _ = remote_chat
    with serving(FakeEngine()) as url:
        connect(qtbot, chat, url)
        send(qtbot, chat)
    saved = chat.store.load_chat(chat.chat_id).replies[0]
    assert (saved.remote.url, saved.remote.model) == (url, "fake-model")
    assert saved.text == "Hello there, friend!" and saved.remote.reply.spec.accepted == 2


def test_the_api_key_is_never_written_to_the_chat_database(qtbot, remote_chat, monkeypatch):
    chat, _ = remote_chat
    monkeypatch.setenv(API_KEY_ENV, "sk-env-s3cret")
    with serving(FakeEngine(api_key="sk-env-s3cret")) as url:
        # a key in the URL's user info is not sent (the engine takes it from the environment) nor kept
        with_credentials = url.replace("http://", "http://user:sk-url-s3cret@")
        target = connect(qtbot, chat, with_credentials)
        assert send(qtbot, chat).text == "Hello there, friend!"
    dump = "\n".join(chat.store.db.iterdump())
    assert "s3cret" not in dump and url in dump
    assert target.url == url


def test_an_export_names_the_engine_and_its_counts_and_holds_no_key(qtbot, remote_chat, monkeypatch, tmp_path):
    chat, _ = remote_chat
    monkeypatch.setenv(API_KEY_ENV, "sk-env-s3cret")
    with serving(FakeEngine(api_key="sk-env-s3cret")) as url:
        connect(qtbot, chat, url.replace("http://", "http://user:sk-url-s3cret@"))
        send(qtbot, chat)
    paths = chat.export(tmp_path / "chat")
    written = "\n".join(p.read_text(encoding="utf-8") for p in paths if p.suffix in (".json", ".csv", ".md"))
    assert "s3cret" not in written
    remote = json.loads((tmp_path / "chat.json").read_text(encoding="utf-8"))["replies"][0]["remote"]
    assert (remote["url"], remote["model"]) == (url, "fake-model")
    assert remote["engine"]["spec"]["accepted"] == 2 and remote["engine"]["n_tokens"] > 0
    transcript = (tmp_path / "chat.md").read_text(encoding="utf-8")
    assert f"fake-model at {url}" in transcript and "acceptance 0.50" in transcript


def test_stop_keeps_the_streamed_text_as_a_stopped_reply(qtbot, remote_chat):
    chat, _ = remote_chat
    with serving(FakeEngine(piece_delay_s=0.4)) as url:
        connect(qtbot, chat, url)
        with qtbot.waitSignal(chat.remote_text_received, timeout=TIMEOUT_MS):
            chat.send("hi", SPEC)
        with qtbot.waitSignal(chat.turn_completed, timeout=TIMEOUT_MS):
            chat.stop()
    reply = chat.replies[-1]
    assert reply.stopped and reply.text.startswith("Hello") and reply.text != "Hello there, friend!"
    assert reply.remote.reply is None and chat.can_continue


def test_an_engine_that_is_down_is_one_line_and_the_local_pair_still_replies(qtbot, remote_chat):
    chat, local = remote_chat
    with qtbot.waitSignal(chat.remote_failed, timeout=TIMEOUT_MS) as failure:
        chat.load_pair(f"http://127.0.0.1:{closed_port()}/v1", None, "auto", "auto", "auto")
    message = failure.args[0]
    assert "connection refused" in message and "still using the local pair t" in message and "\n" not in message
    assert not chat.status.remote and chat.ready
    local.replies.append(two_rounds())
    assert send(qtbot, chat).text == "Hello world" and len(local.requests) == 1


def test_an_engine_that_is_down_at_the_start_says_how_to_go_on_locally(qtbot):
    """Started with a URL that nothing answers, no pair is loaded at all: the line says what to do next."""
    chat = ChatController(ChatStore(":memory:"))
    _, thread = wire_remote_worker(chat, timeout_s=5.0)
    thread.start()
    try:
        with qtbot.waitSignal(chat.remote_failed, timeout=TIMEOUT_MS) as failure:
            chat.load_pair(f"http://127.0.0.1:{closed_port()}/v1", None, "auto", "auto", "auto")
    finally:
        thread.quit()
        thread.wait(5000)
    message = failure.args[0]
    assert "connection refused" in message and "press Load pair" in message and "\n" not in message
    assert not chat.ready


def test_a_model_name_the_engine_does_not_serve_is_one_line(qtbot, remote_chat):
    chat, _ = remote_chat
    with serving(FakeEngine()) as url:
        with qtbot.waitSignal(chat.remote_failed, timeout=TIMEOUT_MS) as failure:
            chat.load_pair(url, "llama-70b", "auto", "auto", "auto")
    assert "serves 'fake-model', not 'llama-70b'" in failure.args[0] and not chat.status.remote


def test_a_reply_the_engine_fails_is_dropped_and_the_engine_kept(qtbot, remote_chat):
    chat, _ = remote_chat
    with serving(FakeEngine()) as url:
        connect(qtbot, chat, url)
    # the server is gone now
    with qtbot.waitSignal(chat.remote_failed, timeout=TIMEOUT_MS) as failure:
        chat.send("hi", SPEC)
    qtbot.waitUntil(lambda: chat.state is TurnState.IDLE, timeout=TIMEOUT_MS)
    assert "connection refused" in failure.args[0] and chat.turns == [] and chat.status.remote


def test_an_engine_without_speculative_metrics_replies_with_a_note(qtbot, remote_chat):
    chat, _ = remote_chat
    with serving(FakeEngine(spec_metrics=False)) as url:
        connect(qtbot, chat, url)
        reply = send(qtbot, chat)
    assert reply.text == "Hello there, friend!" and reply.remote.reply.spec is None
    assert "no speculative-decoding metrics" in reply.remote.reply.note


def test_back_to_the_local_pair_the_conversation_goes_on_there(qtbot, remote_chat):
    chat, local = remote_chat
    left = []
    chat.remote_left.connect(left.append)
    with serving(FakeEngine()) as url:
        connect(qtbot, chat, url)
        send(qtbot, chat)
    chat.use_local()
    assert left == [("t", "d")] and not chat.status.remote  # the pair was injected: nothing to load again
    local.replies.append(two_rounds())
    send(qtbot, chat, "and you?")
    assert [m["content"] for m in local.requests[0].messages] == ["hi", "Hello there, friend!", "and you?"]


def test_continue_asks_the_engine_to_carry_on_the_last_message(qtbot, remote_chat):
    chat, _ = remote_chat
    engine = FakeEngine(piece_delay_s=0.4)
    with serving(engine) as url:
        connect(qtbot, chat, url)
        with qtbot.waitSignal(chat.remote_text_received, timeout=TIMEOUT_MS):
            chat.send("hi", SPEC)
        with qtbot.waitSignal(chat.turn_completed, timeout=TIMEOUT_MS):
            chat.stop()
        engine.piece_delay_s = 0.0
        with qtbot.waitSignal(chat.turn_completed, timeout=TIMEOUT_MS):
            chat.continue_reply(SPEC)
    request = engine.requests[-1]
    assert request["messages"][-1]["role"] == "assistant" and request["continue_final_message"] is True
    assert chat.whole_reply(1).text.startswith("HelloHello")
