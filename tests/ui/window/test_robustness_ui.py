"""The app after things go wrong: a failed export, an over-long prompt, a long prefill stopped, Ctrl+C; each
followed by a request that must still work."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, QStandardPaths, Qt, QTimer
from PySide6.QtWidgets import QFileDialog

from app.chat.export import markdown
from engine.decoding.caches import PREFILL_CHUNK_S
from tests.tiny import WORDS
from tests.ui.helpers import REPLY_TIMEOUT_MS, send
from ui.window.preferences import export_folder


def words(n: int) -> str:
    return " ".join(WORDS[2 + i % 62] for i in range(n))


def test_a_failed_export_writes_nothing_says_why_and_the_next_export_works(make_studio, mixed_decoder, qtbot,
                                                                            tmp_path, monkeypatch):
    studio = make_studio(mixed_decoder, max_new_tokens=4)
    send(qtbot, studio)
    window = studio.window
    chosen = []
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(chosen[-1]), "json"))

    chosen.append(tmp_path / "missing-dir" / "session.json")  # nowhere to write
    window.export_dialog()
    assert "Nothing was written: could not write" in window.error_box.text()
    assert "missing-dir" in window.statusBar().currentMessage()
    window.error_box.close()

    (tmp_path / "session.csv").mkdir()  # the JSON could be written, the CSV cannot: neither is
    chosen.append(tmp_path / "session.json")
    window.export_dialog()
    assert "session.csv" in window.error_box.text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["session.csv"]  # no lone JSON, no temporary file
    window.error_box.close()

    chosen.append(tmp_path / "ok.json")
    window.export_dialog()
    assert sorted(p.name for p in tmp_path.glob("ok*")) == ["ok-positions.csv", "ok.csv", "ok.json", "ok.md", "ok.png"]
    assert json.loads((tmp_path / "ok.json").read_text())["replies"]
    assert window.statusBar().currentMessage().endswith(f" in {tmp_path}")  # where the files went


def test_export_during_a_reply_says_it_is_running_and_later_opens_in_documents_then_the_last_folder(
        make_studio, mixed_decoder, qtbot, tmp_path, monkeypatch):
    preferences = QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    studio = make_studio(mixed_decoder, preferences=preferences, max_new_tokens=600)
    window = studio.window
    asked = []  # the folder each save dialog opened in
    answers = iter([tmp_path / "out" / "first.json", None])

    def save_dialog(parent, caption, start, filters):
        asked.append(Path(start).parent)
        answer = next(answers)
        return (str(answer) if answer else "", filters)

    monkeypatch.setattr(QFileDialog, "getSaveFileName", save_dialog)
    with qtbot.waitSignal(window.round_shown, timeout=REPLY_TIMEOUT_MS):
        qtbot.keyClicks(window.message_box, "w3 w4")
        qtbot.keyClick(window.message_box, Qt.Key.Key_Return)
    qtbot.keyClick(window, Qt.Key.Key_E, Qt.KeyboardModifier.ControlModifier)
    assert "still running" in window.statusBar().currentMessage() and asked == []
    with qtbot.waitSignal(window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        window.stop()
    (tmp_path / "out").mkdir()
    window.export_dialog()
    assert asked == [export_folder(None)] and (tmp_path / "out" / "first.json").exists()
    window.export_dialog()  # the next export starts where the last one went
    assert asked[-1] == tmp_path / "out"


def test_an_export_starts_in_documents_or_home_where_there_is_none(monkeypatch, tmp_path):
    documents = tmp_path / "Documents"
    monkeypatch.setattr(QStandardPaths, "writableLocation", lambda _location: str(documents))
    assert export_folder(None) == Path.home()  # Qt names the folder whether or not it exists
    documents.mkdir()
    assert export_folder(None) == documents


def test_a_write_failing_half_way_leaves_nothing_behind(make_studio, mixed_decoder, qtbot, tmp_path, monkeypatch):
    from app.chat import export

    studio = make_studio(mixed_decoder, max_new_tokens=4)
    send(qtbot, studio)

    def full_disk(session, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export, "write_csv", full_disk)
    try:
        studio.chat.export(tmp_path / "s")
    except export.ExportError as exc:
        assert str(exc).endswith("s.csv: No space left on device")
    else:
        raise AssertionError("the export should have failed")
    assert list(tmp_path.iterdir()) == []


def test_an_over_long_prompt_gets_a_dialog_with_the_numbers_and_the_chat_goes_on(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, max_new_tokens=4)
    window = studio.window
    with qtbot.waitSignal(window.turn_completed, timeout=30_000):
        window.message_box.setPlainText(words(1100))
        window.message_box.submit()
    assert "the prompt is 1100 tokens" in window.error_box.text() and "1024 positions" in window.error_box.text()
    window.error_box.close()
    assert send(qtbot, studio).events


def test_a_conversation_cut_to_the_window_says_so_in_the_chat(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, max_new_tokens=300)
    send(qtbot, studio, words(400))
    send(qtbot, studio, words(300))  # 400 + ~300 + 300 + 300 no longer fits 1024 positions
    text = studio.window.chat.toPlainText()
    assert "Context: left out the oldest 2 messages" in text


def test_a_conversation_cut_to_the_window_says_so_in_the_markdown_export(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, max_new_tokens=300)
    send(qtbot, studio, words(400))
    send(qtbot, studio, words(300))
    first, second = markdown(studio.chat.session).split("**Reply 2 ·")
    assert "Context: left out the oldest 2 messages" in second and "Context:" not in first


def test_stop_during_a_long_prefill_takes_effect_within_one_chunk(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, max_new_tokens=4)
    shown, progress = [], []
    bar = studio.window.prefill_progress
    said = lambda: "· reading the prompt: 256 of 899 tokens, about " in studio.window.chat.toPlainText()  # noqa: E731
    studio.chat.prefill_progressed.connect(lambda _p: shown.append((bar.isVisible(), bar.value(), bar.maximum(),
                                                                    said())))

    def stop_at_the_first_chunk(item):
        progress.append(item)
        studio.worker.request_stop()

    studio.worker.prefill_progressed.connect(stop_at_the_first_chunk, Qt.ConnectionType.DirectConnection)
    mixed_decoder.runner.seconds_per_position = PREFILL_CHUNK_S / 300  # earlier chunks read 300 per chunk time
    reply = send(qtbot, studio, words(900))
    assert reply.stopped and reply.events == ()
    assert [(p.done, p.total) for p in progress] == [(256, 899)]
    assert len(mixed_decoder.runner) == 256  # no second chunk was read
    assert shown == [(True, 256, 899, True)]  # the read-in progress is a bar and the reply's header, while it lasts
    assert not bar.isVisible() and not said()
    assert "stopped while reading the prompt: no tokens yet" in studio.window.chat.toPlainText()
    assert "Copy" not in studio.window.chat.toPlainText().rsplit("no tokens yet", 1)[1]  # nothing to copy; Edit stays
    assert "Edit" in studio.window.chat.toPlainText().rsplit("no tokens yet", 1)[1]
    assert not studio.window.copy_action.isEnabled()  # nor in the Chat menu
    studio.worker.prefill_progressed.disconnect(stop_at_the_first_chunk)
    assert send(qtbot, studio).events
    assert studio.window.copy_action.isEnabled()  # the control: a reply with text to copy


def test_a_long_prompt_s_read_in_is_said_after_its_reply_s_header_until_it_is_read(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, max_new_tokens=4)
    seen = []
    studio.chat.prefill_progressed.connect(lambda p: seen.append(
        f"· reading the prompt: {p.done} of {p.total} tokens, about " in studio.window.chat.toPlainText()))
    mixed_decoder.runner.seconds_per_position = PREFILL_CHUNK_S / 300  # the prompt is read in several chunks
    assert send(qtbot, studio, words(900)).events
    assert len(seen) >= 2 and all(seen[:-1]) and not seen[-1]  # after the last chunk the prompt is read
    assert "reading the prompt" not in studio.window.chat.toPlainText()


def test_stop_says_stopping_until_the_worker_has_stopped(make_studio, mixed_decoder, qtbot):
    studio = make_studio(mixed_decoder, max_new_tokens=4)
    window, seen = studio.window, []

    def stop_once(_progress):
        if not seen:
            qtbot.mouseClick(window.stop_button, Qt.MouseButton.LeftButton)
            seen.append((window.stop_button.text(), window.stop_button.isEnabled(), window.statusBar().currentMessage()))

    studio.chat.prefill_progressed.connect(stop_once)
    mixed_decoder.runner.seconds_per_position = PREFILL_CHUNK_S / 300  # the prompt is read in several chunks
    assert send(qtbot, studio, words(900)).stopped
    text, enabled, message = seen[0]
    assert text == "Stopping…" and not enabled and message.startswith("Stopping…")
    assert window.stop_button.text() == "Stop" and window.send_button.isEnabled()


def test_ctrl_c_closes_the_window(make_studio, mixed_decoder, qtbot):
    from studio.window import quit_on_interrupt

    studio = make_studio(mixed_decoder, max_new_tokens=4)
    previous = signal.getsignal(signal.SIGINT)
    try:
        quit_on_interrupt(studio.window)
        os.kill(os.getpid(), signal.SIGINT)
        qtbot.waitUntil(lambda: not studio.window.isVisible(), timeout=3000)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_quitting_while_a_loaded_pair_is_timed_ends_the_timing_where_it_is(make_studio, mixed_decoder, qtbot,
                                                                            monkeypatch):
    from engine.decoding.decoder import Decoder
    from tests.tiny import tiny_decoder

    studio = make_studio(mixed_decoder, max_new_tokens=4)
    monkeypatch.setattr(Decoder, "load", classmethod(lambda cls, *a, **k: tiny_decoder()))
    steps = []

    def first_step_waits_for_the_quit(done: int, total: int) -> None:  # on the worker's thread, mid-timing
        steps.append((done, total))
        if len(steps) == 1:
            studio.worker._quit.wait(10)  # set by the shutdown below; without it the timing goes on after 10 s

    studio.worker.timing_progressed.connect(first_step_waits_for_the_quit, Qt.ConnectionType.DirectConnection)
    loaded = []
    studio.worker.models_loaded.connect(lambda *info: loaded.append(info), Qt.ConnectionType.DirectConnection)
    studio.chat.load_pair("tiny", None, "cpu", "float32", "auto")
    qtbot.waitUntil(lambda: bool(steps), timeout=10_000)
    studio.shutdown()
    assert studio.thread.isFinished()
    assert len(steps) == 1 and steps[0][1] > 1  # the timing's other steps never ran
    assert loaded == [] and studio.worker.decoder is mixed_decoder  # the half-timed pair was dropped


def test_shutting_down_mid_reply_saves_it_as_stopped_before_returning(make_studio, mixed_decoder, qtbot):
    from app.chat.store import ChatStore

    store = ChatStore(":memory:")
    studio = make_studio(mixed_decoder, store=store, max_new_tokens=900)
    saved = []

    def quit_now():  # as the app quits: no event loop runs after the shutdown
        studio.shutdown()
        saved.extend(store.db.execute("SELECT stopped, text IS NOT NULL FROM turns").fetchall())

    def on_round_shown(event):
        if event.index == 2:
            QTimer.singleShot(0, quit_now)

    studio.window.round_shown.connect(on_round_shown)
    studio.window.send("w3 w4")
    qtbot.waitUntil(lambda: bool(saved), timeout=REPLY_TIMEOUT_MS)
    assert saved == [(1, 1)] and studio.chat.replies[-1].stopped


STUDIO = textwrap.dedent("""
    import sys
    import studio.launch
    import studio.window

    built = studio.window.build

    def build(*args, **kwargs):  # the real app, announcing each round on stdout for the test to act on
        studio = built(*args, **kwargs)
        studio.window.round_shown.connect(lambda event: print("round", event.index, flush=True))
        return studio

    studio.window.build = build
    sys.exit(studio.launch.main(sys.argv[1:]))  # as `specdec-studio` starts: its splash first
""")


def never_ending_model(folder: Path) -> Path:
    """A tiny model saved with no end-of-sequence token: its replies run to max new tokens."""
    from tests.tiny import tiny_model

    loaded = tiny_model(0)
    loaded.model.generation_config.eos_token_id = loaded.model.config.eos_token_id = None
    loaded.tokenizer.eos_token = None
    loaded.model.save_pretrained(folder)
    loaded.tokenizer.save_pretrained(folder)
    return folder


def run_studio(model: Path, data: Path, prompt: str, max_new_tokens: int, interrupt_at_round: int | None = None,
               interrupt: int = signal.SIGINT):
    """`specdec-studio --prompt ... --quit-after-reply` in a subprocess; optionally Ctrl+C (or another signal)
    once a round is shown."""
    child = subprocess.Popen([sys.executable, "-c", STUDIO, "--target", str(model), "--draft", "none", "--dtype",
                              "float32", "--device", "cpu", "--prompt", prompt, "--max-new-tokens", str(max_new_tokens),
                              "--quit-after-reply", "--data-dir", str(data)],
                             cwd=Path(__file__).resolve().parents[3], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    watchdog = threading.Timer(120, child.kill)  # a child that hangs fails the test, not hangs it
    watchdog.start()
    try:
        for line in child.stdout:
            if interrupt_at_round is not None and line == f"round {interrupt_at_round}\n":
                child.send_signal(interrupt)
        child.wait(timeout=60)
    finally:
        watchdog.cancel()
    return child.returncode, child.stderr.read()


def test_specdec_studio_help_prints_its_options():
    child = subprocess.run([sys.executable, "-c", "import sys, studio.launch; sys.exit(studio.launch.main(['--help']))"],
                           cwd=Path(__file__).resolve().parents[3], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert child.returncode == 0 and child.stdout.startswith("usage: specdec-studio"), child.stderr


@pytest.mark.parametrize("interrupt", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_during_a_reply_stores_it_as_stopped_keeps_the_settings_and_exits_128_plus_it(
        tmp_path, interrupt):
    from app.chat.store import ChatStore

    model, data = never_ending_model(tmp_path / "model"), tmp_path / "data"
    code, stderr = run_studio(model, data, "w3 w4", max_new_tokens=900, interrupt_at_round=3, interrupt=interrupt)
    assert code == 128 + interrupt, stderr
    assert "geometry" in (data / "settings.ini").read_text()  # closed as the window closes: settings and layout kept
    store = ChatStore(data / "chats.sqlite3")
    [summary] = store.list_chats()
    [reply] = store.load_chat(summary.id).replies
    # saved by the reply's own end, not read back from the rounds of a turn that never finished
    assert store.db.execute("SELECT stopped, text IS NOT NULL FROM turns").fetchall() == [(1, 1)]
    assert reply.stopped and 4 <= len(reply.events) < 900 and reply.text == "".join(e.text_delta for e in reply.events)
    store.close()

    code, stderr = run_studio(model, data, "w5 w6", max_new_tokens=3)  # the next start answers, and keeps both
    assert code == 0, stderr
    store = ChatStore(data / "chats.sqlite3")
    assert sorted(len(store.load_chat(c.id).replies) for c in store.list_chats()) == [1, 1]
    assert store.db.execute("SELECT stopped FROM turns ORDER BY id").fetchall() == [(1,), (0,)]


def test_an_export_holds_only_the_current_chat(make_studio, mixed_decoder, qtbot, tmp_path):
    studio = make_studio(mixed_decoder, max_new_tokens=3)
    send(qtbot, studio, "w3 w4")
    studio.window.new_chat()
    second = send(qtbot, studio, "w5 w6")
    studio.chat.export(tmp_path / "chat")
    replies = json.loads((tmp_path / "chat.json").read_text())["replies"]
    assert [r["messages"][-1]["content"] for r in replies] == ["w5 w6"] and replies[0]["text"] == second.text


def test_a_seed_the_seed_box_cannot_hold_is_refused_by_the_argument_parser(capsys):
    from studio.window import parse_args
    from ui.pair.controls import SEED_LIMIT

    with pytest.raises(SystemExit) as exit_:
        parse_args(["--seed", str(SEED_LIMIT)])
    assert exit_.value.code == 2
    assert f"argument --seed: must be from 0 to 2**31 - 1, not {SEED_LIMIT}" in capsys.readouterr().err
    assert parse_args(["--seed", str(SEED_LIMIT - 1)]).seed == SEED_LIMIT - 1


def test_the_export_dialog_proposes_the_chats_title(make_studio, mixed_decoder, qtbot, monkeypatch):
    studio = make_studio(mixed_decoder, max_new_tokens=3)
    send(qtbot, studio, "w3 w4: a/b?")
    proposed = []

    def save_dialog(_parent, _caption, start, filters):
        proposed.append(Path(start).name)
        return "", filters  # cancelled

    monkeypatch.setattr(QFileDialog, "getSaveFileName", save_dialog)
    studio.window.export_dialog()
    assert proposed == ["w3 w4 a b.json"]


def test_the_markdown_transcript_reads_as_the_chat(make_studio, mixed_decoder, qtbot, tmp_path):
    studio = make_studio(mixed_decoder, max_new_tokens=6)
    first = send(qtbot, studio, "w3 w4")
    with qtbot.waitSignal(studio.window.turn_completed, timeout=REPLY_TIMEOUT_MS):
        studio.window.continue_action.trigger()  # a continued reply reads as one
    second = send(qtbot, studio, "w5 w6")
    studio.chat.export(tmp_path / "chat")
    text = (tmp_path / "chat.md").read_text()
    assert text.startswith("# w3 w4\n") and text.count("**You**") == 2
    assert (first.text + studio.chat.replies[1].text).strip() in text and second.text.strip() in text
    assert text.count(" tokens in ") == 2


def test_the_chart_image_holds_every_reply(make_studio, mixed_decoder, qtbot, tmp_path):
    from PySide6.QtGui import QImage

    from ui.why.pane import EXPORT_TITLE_HEIGHT

    studio = make_studio(mixed_decoder, max_new_tokens=4)
    send(qtbot, studio, "w3 w4")
    studio.chat.export(tmp_path / "one")
    send(qtbot, studio, "w5 w6")
    studio.chat.export(tmp_path / "two")
    one, two = QImage(str(tmp_path / "one.png")), QImage(str(tmp_path / "two.png"))
    # a column per reply, then the why this γ tab's, as wide in both; as tall as the taller of the charts and the why
    # tab, whose text wraps to the figures measured on this machine
    charts = studio.window.charts
    assert two.width() - one.width() == charts.width()
    assert min(one.height(), two.height()) >= charts.height() + EXPORT_TITLE_HEIGHT


def test_a_long_title_makes_a_file_name_of_whole_words():
    from app.chat.export import STEM_MAX, file_stem

    title = "Write a Python function that checks whether a word is a palindrome, then test it"
    stem = file_stem(title)
    assert len(stem) <= STEM_MAX and title.startswith(stem + " ")  # ends on a whole word
    assert file_stem("a" * 100) == "a" * STEM_MAX and file_stem("…") == "specdec-chat"
    assert file_stem("Name three fruits: apple, banana,…") == "Name three fruits apple, banana"  # a title cut short


def test_a_decode_the_machines_load_stalls_goes_on_with_one_thread_and_the_same_tokens(make_studio, qtbot,
                                                                                        monkeypatch):
    import torch

    monkeypatch.setattr("app.chat.worker.went_faster", lambda *_: True)  # one thread then ran faster: it is kept

    from app.chat.worker import LOADED_ROUNDS
    from engine.decoding.costs import CostModel
    from tests.tiny import tiny_decoder

    replies, threads, after, notes = {}, {}, {}, {}
    # priced at 0.1 µs a block, every round reads as stalled; at 10 s (the control) none does. Drafting γ with the
    # draft model every round (stop below 0, no copying), both decode the same rounds, and no round without a model
    # draft re-times the control's blocks at the machine's speed (then a suite's load beside it could stall it too)
    for block_s in (1e-7, 10.0):
        decoder = tiny_decoder()
        decoder.set_costs(CostModel([block_s * (1 + k / 10) for k in range(9)], draft_step_s=block_s / 10,
                                    copy_s=1e-9, overhead_s=1e-8))
        studio = make_studio(decoder, greedy=True, max_new_tokens=60, stop_below=0.0, lookup=False)
        studio.worker.threads = 2
        seen = threads[block_s] = []
        studio.worker.round_finished.connect(lambda _event, seen=seen: seen.append(torch.get_num_threads()),
                                             Qt.ConnectionType.DirectConnection)
        studio.worker.reply_finished.connect(lambda _reply, b=block_s: after.setdefault(b, torch.get_num_threads()),
                                             Qt.ConnectionType.DirectConnection)
        replies[block_s] = send(qtbot, studio)
        notes[block_s] = "went on with one thread from round" in studio.window.chat.toPlainText()
        studio.shutdown()
    stalled, quiet = threads[1e-7], threads[10.0]
    assert len(stalled) > LOADED_ROUNDS
    assert stalled == [2] * (LOADED_ROUNDS - 1) + [1] * (len(stalled) - LOADED_ROUNDS + 1)
    assert quiet == [2] * len(quiet)
    assert after == {1e-7: 2, 10.0: 2}  # once the reply ends, a load or a timing has every thread again
    # each round says what it ran on (the switch comes after the eighth), and the note under the reply says so
    assert [e.threads for e in replies[1e-7].events] == [2] * LOADED_ROUNDS + [1] * (len(stalled) - LOADED_ROUNDS)
    assert notes == {1e-7: True, 10.0: False}
    assert [t.token_id for t in replies[1e-7].tokens] == [t.token_id for t in replies[10.0].tokens]


def stalled_studio(make_studio, monkeypatch, faster: bool, max_new_tokens: int):
    """A studio on two threads whose every round reads as stalled (blocks priced at 0.1 µs), drafting with the
    draft model every round; `faster`: whether one thread is then judged to make the tokens faster."""
    from engine.decoding.costs import CostModel
    from tests.tiny import tiny_decoder

    monkeypatch.setattr("app.chat.worker.went_faster", lambda *_: faster)
    decoder = tiny_decoder()
    decoder.set_costs(CostModel([1e-7 * (1 + k / 10) for k in range(9)], draft_step_s=1e-8, copy_s=1e-9,
                                overhead_s=1e-8))
    studio = make_studio(decoder, greedy=True, max_new_tokens=max_new_tokens, stop_below=0.0, lookup=False)
    studio.worker.threads = 2
    return studio


def test_compare_with_ars_runs_keep_all_their_threads_where_the_reply_went_on_with_one(make_studio, qtbot,
                                                                                    monkeypatch):
    """Every round reads as stalled: the drawn reply goes on with one thread (the control), and both undrawn runs
    measured against each other keep their two, so their ratio is no thread switch's."""
    from app.chat.worker import LOADED_ROUNDS

    studio = stalled_studio(make_studio, monkeypatch, faster=True, max_new_tokens=40)
    studio.window.controls.compare_ar.setChecked(True)
    reply = send(qtbot, studio)
    comparison = studio.chat.session.comparisons[0]
    assert len(reply.events) > LOADED_ROUNDS and reply.events[-1].threads == 1
    assert len(comparison.ar_events) > LOADED_ROUNDS and len(comparison.spec_events) > LOADED_ROUNDS
    assert {e.threads for e in comparison.ar_events + comparison.spec_events} == {2}


def test_a_decode_whose_one_thread_ran_no_faster_goes_back_to_all_its_threads(make_studio, qtbot, monkeypatch):
    """Every round reads as stalled; after eight rounds on one thread that made their tokens no faster, the decode
    goes back to its two and stays there (judged once), and the note names the rounds on one."""
    import torch

    from app.chat.worker import LOADED_ROUNDS

    studio = stalled_studio(make_studio, monkeypatch, faster=False, max_new_tokens=160)
    seen = []
    studio.worker.round_finished.connect(lambda _event: seen.append(torch.get_num_threads()),
                                         Qt.ConnectionType.DirectConnection)
    reply = send(qtbot, studio)
    assert len(seen) > 2 * LOADED_ROUNDS
    assert seen == [2] * (LOADED_ROUNDS - 1) + [1] * LOADED_ROUNDS + [2] * (len(seen) - 2 * LOADED_ROUNDS + 1)
    assert [e.threads for e in reply.events] == ([2] * LOADED_ROUNDS + [1] * LOADED_ROUNDS
                                                 + [2] * (len(seen) - 2 * LOADED_ROUNDS))
    rounds = f"rounds {LOADED_ROUNDS + 1}–{2 * LOADED_ROUNDS}"
    line = studio.window.chat.document().find(f"tried one thread in {rounds}, then went back to 2 threads")
    assert not line.isNull() and line.charFormat().toolTip().startswith(f"Decoded on one thread in {rounds}:")


@pytest.mark.parametrize("handshake", [True, False])
def test_compare_with_ar_starts_once_the_window_has_drawn_the_reply(make_studio, mixed_decoder, qtbot, monkeypatch,
                                                                    handshake):
    """As the window's slot drawing the finished reply ends, plain AR's run has not started. The control: a worker
    that does not wait has started it while that slot still runs (the slot waits for it, up to 5 s)."""
    if not handshake:
        monkeypatch.setattr("app.chat.worker.DRAWN_WAIT_S", 0.0)
    studio = make_studio(mixed_decoder, greedy=True, max_new_tokens=8)
    studio.window.controls.compare_ar.setChecked(True)
    started, seen = threading.Event(), []
    draw = studio.window.on_reply_finished

    def drawing(shown):
        draw(shown)
        seen.append(started.is_set() if handshake else started.wait(5))

    studio.chat.reply_finished.disconnect(studio.window.on_reply_finished)
    studio.chat.reply_finished.connect(drawing)
    decode = studio.worker._decode

    def undrawn_decode(request, emit, *args, **kwargs):
        if not emit:
            started.set()
        return decode(request, emit, *args, **kwargs)

    monkeypatch.setattr(studio.worker, "_decode", undrawn_decode)
    send(qtbot, studio)
    assert seen == [not handshake] and started.is_set()


def test_compare_with_ar_shows_its_runs_reading_a_long_prompt_in_again(make_studio, mixed_decoder, qtbot,
                                                                        monkeypatch):
    """A 900-word prompt read in chunks of 256: each run of the comparison reports the chunks before its last, and
    the bar says it is reading, then counts tokens again. The control: the reply's own read-in is not reported so."""
    monkeypatch.setattr("app.chat.worker.PROGRESS_EVERY_S", 0.0)  # the tiny pair reads a chunk in far less
    monkeypatch.setattr("engine.decoding.caches.chunk_size", lambda _seconds: 256)  # as a slower machine would
    studio = make_studio(mixed_decoder, greedy=True, max_new_tokens=4)
    studio.window.controls.compare_ar.setChecked(True)
    bar, reading, formats = studio.window.comparison_progress, [], []
    studio.chat.comparison_reading.connect(lambda read: reading.append((read.done, read.total, bar.format(),
                                                                        bar.value(), bar.maximum())))
    studio.chat.comparison_progressed.connect(lambda *_: formats.append(bar.format()))
    send(qtbot, studio, words(900))
    from ui.window.status import COMPARISON_DECODING
    assert [(done, total) for done, total, *_ in reading] == [(256, 899), (512, 899), (768, 899)] * 2  # AR, rerun
    assert all(form.startswith(f"Compare with AR reading: {done} of {total} tokens, about ")
               and form.endswith(" left") and value == done and most == total
               for done, total, form, value, most in reading)
    assert formats and formats[-1] == COMPARISON_DECODING
