"""The chats database on its own: round trips, schema versions, and a writer killed with SIGKILL mid-reply."""
from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

import pytest

from app.chat.store import MIGRATIONS, SCHEMA_VERSION, SQLITE_MAGIC, ChatRecorder, ChatStore, ChatStoreError
from engine.events import DecodeSettings, DraftedToken, EmittedToken, Fate, ModelInfo, PairInfo, RoundEvent, TokenProb
from words.records import Comparison, Reply, ReplyRequest

ROOT = Path(__file__).resolve().parents[3]
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
    reply = Reply(ask, events, "ababab", stopped=False, reference_s=0.027, machine_busy=True, others_cores=1.25,
                  host_cores=0.4)
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


def test_each_reply_keeps_the_pair_that_decoded_it(tmp_path):
    """A chat decoded by two pairs: each reply reopens with its own, the chat with the last one."""
    other = PairInfo(ModelInfo("qwen2.5-coder-1.5b", "/m/q", 1544, 151936), None, "cpu", "bfloat16")
    store = ChatStore(tmp_path / "chats.sqlite3")
    recorder = ChatRecorder(store)
    for position, (ask, pair) in enumerate([(request("one"), PAIR), (request("one", "1", "two"), other)]):
        recorder.turn_started(position, ask, pair)
        recorder.reply_finished(Reply(ask, (round_event(0),), "ab", False))
    store.close()
    chat = ChatStore(tmp_path / "chats.sqlite3").load_chat(recorder.chat_id)
    assert chat.reply_pairs == {0: PAIR, 1: other} and chat.pair == other


def test_replies_saved_before_their_pairs_were_have_none_of_their_own(tmp_path):
    """A database of the schema before: its replies have no pair, and the chat's stands for theirs."""
    path = tmp_path / "chats.sqlite3"
    store = ChatStore(path)
    recorder = ChatRecorder(store)
    recorder.turn_started(0, request("one"), PAIR)
    recorder.reply_finished(Reply(request("one"), (round_event(0),), "ab", False))
    with store.db:
        store.db.execute("ALTER TABLE turns DROP COLUMN pair")
        store.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION - 1}")
    store.close()
    chat = ChatStore(path).load_chat(recorder.chat_id)
    assert chat.reply_pairs == {} and chat.pair == PAIR


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


def test_a_continued_reply_counts_as_one_reply_in_the_chat_list():
    store = ChatStore(":memory:")
    recorder = ChatRecorder(store)
    story = request("Write a story.")
    continuation = request("Write a story.", "Once upon")  # ends with the assistant message it extends
    for position, ask in enumerate([story, continuation, request("Write a story.", "Once upon a time", "Thanks")]):
        recorder.turn_started(position, ask, PAIR)
        recorder.reply_finished(Reply(ask, (round_event(0),), "ab", False))
    [summary] = store.list_chats()
    assert summary.n_replies == 2
    assert len(store.load_chat(summary.id).replies) == 3  # the parts are still saved one turn each


def test_a_reply_stopped_while_its_prompt_was_read_in_counts_as_none():
    """Stopped before its first round, the turn is kept (the chat shows the message) but holds no reply."""
    store = ChatStore(":memory:")
    recorder = ChatRecorder(store)
    long_prompt = request("Summarise: " + "word " * 3000)
    recorder.turn_started(0, long_prompt, PAIR)
    recorder.reply_finished(Reply(long_prompt, (), "", stopped=True))
    [summary] = store.list_chats()
    assert summary.n_replies == 0
    asked_again = request("Summarise briefly.")
    recorder.turn_started(0, asked_again, PAIR)
    recorder.reply_finished(Reply(asked_again, (round_event(0),), "ab", False))
    assert [c.n_replies for c in store.list_chats()] == [1]


def test_rename_and_delete(tmp_path):
    store = ChatStore(":memory:")
    recorder = ChatRecorder(store)
    recorder.turn_started(0, request("hello"), None)
    store.rename_chat(recorder.chat_id, "  Greetings ")
    assert [c.title for c in store.list_chats()] == ["Greetings"]
    store.delete_chat(recorder.chat_id)
    assert store.list_chats() == []
    assert store.db.execute("SELECT COUNT(*) FROM turns").fetchone() == (0,)  # cascaded


def test_a_deleted_chats_text_is_gone_from_the_files_on_disk(tmp_path):
    """The control: before the delete its text is in the database or its write-ahead log."""
    path = tmp_path / "chats.sqlite3"
    store = ChatStore(path)
    recorder = ChatRecorder(store)
    secret = "my-bank-pin-is-48213"
    recorder.turn_started(0, request(secret), PAIR)
    recorder.reply_finished(Reply(request(secret), (round_event(0, text=secret),), secret, False))

    def on_disk() -> bytes:
        return b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith(path.name))

    assert secret.encode() in on_disk()
    store.delete_chat(recorder.chat_id)
    assert secret.encode() not in on_disk()
    store.close()
    assert secret.encode() not in on_disk()


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


def test_a_newer_schema_is_refused_with_every_byte_of_the_file_unchanged(tmp_path):
    path = tmp_path / "chats.sqlite3"
    ChatStore(path).close()
    with sqlite3.connect(path) as db:  # as a later release might leave it: a rollback journal, version + 1
        db.execute("PRAGMA journal_mode = DELETE")
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = path.read_bytes()
    assert before[18:20] == b"\x01\x01"  # the header's "not WAL" bytes, which switching to WAL would change
    with pytest.raises(ChatStoreError, match="newer SpecDec Studio.*left untouched"):
        ChatStore(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chats.sqlite3"]  # no journal files either


def test_a_newer_schema_in_wal_mode_is_refused_without_journal_files_appearing(tmp_path):
    """The fault probe's case: our own WAL database stamped one version ahead; before, the read-only look at it
    left chats.sqlite3-wal and -shm beside the file it said it left untouched."""
    path = tmp_path / "chats.sqlite3"
    ChatStore(path).close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    before = path.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chats.sqlite3"]
    with pytest.raises(ChatStoreError, match="newer SpecDec Studio.*left untouched"):
        ChatStore(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chats.sqlite3"]


def disk_full() -> sqlite3.OperationalError:
    """SQLite's own full-disk error: a database limited to one page, asked for a second."""
    db = sqlite3.connect(":memory:")
    db.execute("PRAGMA max_page_count = 1")
    try:
        db.execute("CREATE TABLE t (x)")
        db.execute("INSERT INTO t VALUES (zeroblob(8192))")
    except sqlite3.OperationalError as exc:
        return exc
    raise AssertionError("one page held 8 KB")


def test_a_start_on_a_full_disk_says_so_and_leaves_no_file_behind(tmp_path, monkeypatch):
    path = tmp_path / "chats.sqlite3"
    full = disk_full()
    assert full.sqlite_errorname == "SQLITE_FULL"

    def upgrade(store):  # the header is written (WAL mode), the tables are not
        raise full

    monkeypatch.setattr(ChatStore, "_upgrade", upgrade)
    with pytest.raises(ChatStoreError, match="disk holding .* is full: chats are kept in memory"):
        ChatStore(path)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()  # room again: the next start makes the database
    ChatStore(path).close()
    assert path.stat().st_size > 0


def test_a_failed_start_leaves_a_database_that_was_there_alone(tmp_path, monkeypatch):
    """The control: only a file this start made is removed."""
    path = tmp_path / "chats.sqlite3"
    ChatStore(path).close()
    before = path.read_bytes()
    full = disk_full()
    monkeypatch.setattr(ChatStore, "_upgrade", lambda store: (_ for _ in ()).throw(full))
    with pytest.raises(ChatStoreError, match="is full"):
        ChatStore(path)
    assert path.read_bytes() == before


def test_a_data_folder_that_is_a_file_is_named_as_one(tmp_path):
    (tmp_path / "data").write_text("not a folder")
    with pytest.raises(ChatStoreError, match=r"data is a file, not a folder"):
        ChatStore(tmp_path / "data" / "chats.sqlite3")


def test_an_empty_file_is_upgraded(tmp_path):
    empty = tmp_path / "empty.sqlite3"
    empty.touch()
    store = ChatStore(empty)
    assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.notice is None


def test_a_damaged_database_is_moved_aside_and_a_fresh_one_started(tmp_path):
    path = tmp_path / "chats.sqlite3"
    damaged = b"this is not a database" * 100
    path.write_bytes(damaged)
    store = ChatStore(path)
    [aside] = tmp_path.glob("chats.damaged-*.sqlite3")
    assert aside.read_bytes() == damaged  # the old file whole, where the notice says
    assert store.notice == (f"{path} was damaged (file is not a database): it was moved to {aside.name} and a new "
                            "chat database started with the chats that could still be read from it (0)")
    recorder = ChatRecorder(store)  # the next chat is saved
    recorder.turn_started(0, request("hi"), None)
    store.close()
    reopened = ChatStore(path)
    assert reopened.notice is None and [c.title for c in reopened.list_chats()] == ["hi"]


def database_of_20_chats(path: Path) -> dict[int, object]:
    """A chats database of 20 one-reply chats, each a few pages long; each chat as it loads, by id."""
    store = ChatStore(path)
    recorder = ChatRecorder(store)
    for i in range(20):
        recorder.new_chat()
        ask = request(f"chat {i} " + "x" * 2000)
        recorder.turn_started(0, ask, PAIR)
        events = tuple(round_event(r) for r in range(3))
        for event in events:
            recorder.round_finished(event)
        recorder.reply_finished(Reply(ask, events, "ababab", False))
    chats = {c.id: store.load_chat(c.id) for c in store.list_chats()}
    store.close()
    return chats


def damage_page(path: Path, at: float, header: bytes | None = None) -> bytes:
    """Overwrite the page `at` (0 to 1) of the way into the file with 0xff, and the header's first 100 bytes with
    `header` if given; the file's new bytes."""
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    n = int(len(data) // page * at)
    data[n * page:(n + 1) * page] = b"\xff" * page
    if header is not None:
        data[:100] = header
    path.write_bytes(bytes(data))
    return bytes(data)


def assert_moved_aside_with_the_readable_chats(path: Path, damaged: bytes, chats: dict[int, object]) -> None:
    store = ChatStore(path)
    [aside] = path.parent.glob("chats.damaged-*.sqlite3")
    assert aside.read_bytes() == damaged  # kept as it was, where the notice says
    assert "was damaged" in store.notice and f"it was moved to {aside.name}" in store.notice
    recovered = {c.id: store.load_chat(c.id) for c in store.list_chats()}
    assert 10 <= len(recovered) < len(chats)  # the page lost a chat or two, not the rest
    assert store.notice.endswith(f"with the chats that could still be read from it ({len(recovered)})")
    assert all(chat == chats[i] for i, chat in recovered.items())  # each one whole, ids kept
    recorder = ChatRecorder(store)  # the fresh database saves the next chat beside them
    recorder.turn_started(0, request("after the damage"), None)
    store.close()
    reopened = ChatStore(path)
    assert reopened.notice is None and len(reopened.list_chats()) == len(recovered) + 1


def test_a_database_with_a_malformed_page_is_moved_aside_with_its_readable_chats(tmp_path):
    path = tmp_path / "chats.sqlite3"
    chats = database_of_20_chats(path)
    damaged = damage_page(path, 0.5)
    assert damaged[60:64] == SCHEMA_VERSION.to_bytes(4, "big")  # the header kept
    assert_moved_aside_with_the_readable_chats(path, damaged, chats)


def test_a_damaged_database_whose_header_claims_a_newer_schema_is_moved_aside(tmp_path):
    """Damage reaching the header's user_version makes any number of it: the pages are checked before it is
    believed."""
    path = tmp_path / "chats.sqlite3"
    chats = database_of_20_chats(path)
    header = bytearray(path.read_bytes()[:100])
    header[60:64] = (1469548517).to_bytes(4, "big")
    damaged = damage_page(path, 0.5, bytes(header))
    assert_moved_aside_with_the_readable_chats(path, damaged, chats)


def test_the_sqlite_magic_followed_by_noise_is_moved_aside_not_taken_for_a_newer_schema(tmp_path):
    path = tmp_path / "chats.sqlite3"
    noise = SQLITE_MAGIC + random.Random(1).randbytes(64 * 1024)
    assert int.from_bytes(noise[60:64], "big") > SCHEMA_VERSION
    path.write_bytes(noise)
    store = ChatStore(path)
    [aside] = tmp_path.glob("chats.damaged-*.sqlite3")
    assert aside.read_bytes() == noise
    assert "was damaged (file is not a database)" in store.notice
    ChatRecorder(store).turn_started(0, request("hi"), None)
    assert [c.title for c in store.list_chats()] == ["hi"]


def test_a_database_stamped_newer_without_the_chat_tables_is_moved_aside(tmp_path):
    """Whole pages, but not a chats database: its number is no newer release's."""
    path = tmp_path / "chats.sqlite3"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE notes (x)")
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    store = ChatStore(path)
    assert f"was damaged (schema {SCHEMA_VERSION + 1} but missing tables: chats, turns, rounds)" in store.notice
    assert len(list(tmp_path.glob("chats.damaged-*.sqlite3"))) == 1


READ_ONLY = textwrap.dedent("""
    import json, sys
    from tests.ui.chat.test_chat_store import request, round_event
    from app.chat.store import ChatRecorder, ChatStore, ChatStoreError
    from words.records import Reply

    store = ChatStore(sys.argv[1])
    failures = []
    recorder = ChatRecorder(store, on_failure=failures.append)
    titles = [c.title for c in store.list_chats()]
    ask = request("a new chat")  # the next request: the recorder takes it without writing or complaining
    recorder.turn_started(0, ask, None)
    recorder.round_finished(round_event(0))
    recorder.reply_finished(Reply(ask, (round_event(0),), "ab", False))
    try:
        store.rename_chat(1, "renamed")
        renamed = "no error"
    except ChatStoreError as exc:
        renamed = str(exc)
    print(json.dumps({"read_only": store.read_only, "notice": store.notice, "titles": titles,
                      "failures": failures, "renamed": renamed}))
""")


@contextlib.contextmanager
def reachable_by_others(root: Path):
    """`root` readable and the folders above it traversable by any user for a while: a checkout in `mktemp -d`
    (mode 700) is out of an unprivileged child's reach, its Python and the project's code included (Python lists
    the folder it imports from, so `root` needs reading too)."""
    wanted = {root: stat.S_IROTH | stat.S_IXOTH, **{folder: stat.S_IXOTH for folder in root.parents}}
    modes = {folder: folder.stat().st_mode for folder in wanted}
    for folder, bits in wanted.items():
        folder.chmod(modes[folder] | bits)
    try:
        yield
    finally:
        for folder, mode in modes.items():
            folder.chmod(mode)


def test_a_read_only_database_shows_its_chats_and_saves_nothing():
    # The child runs as an unprivileged user: root may write to any file whatever its mode.
    as_user = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "data"
        path = folder / "chats.sqlite3"
        recorder = ChatRecorder(ChatStore(path))
        for i in range(4):
            recorder.new_chat()
            recorder.turn_started(0, request(f"chat {i}"), None)
            recorder.reply_finished(Reply(request(f"chat {i}"), (round_event(0),), "ab", False))
        recorder.store.close()
        before = path.read_bytes()
        path.chmod(0o444)
        folder.chmod(0o555)
        Path(scratch).chmod(0o755)
        try:
            with reachable_by_others(ROOT) if as_user else contextlib.nullcontext():
                result = subprocess.run([*as_user, sys.executable, "-c", READ_ONLY, str(path)], cwd=ROOT,
                                        capture_output=True, text=True, timeout=60)
        finally:
            folder.chmod(0o755)
        assert result.returncode == 0, result.stderr
        seen = json.loads(result.stdout)
        assert path.read_bytes() == before and sorted(p.name for p in folder.iterdir()) == ["chats.sqlite3"]
    notice = (f"{path} is read-only: your saved chats are shown, but new ones will not be saved (make the file "
              "and its folder writable, then restart)")
    assert seen == {"read_only": True, "notice": notice, "titles": [f"chat {i}" for i in (3, 2, 1, 0)],
                    "failures": [], "renamed": notice}


WRITER = textwrap.dedent("""
    import sys
    from tests.ui.chat.test_chat_store import request, round_event
    from app.chat.store import ChatRecorder, ChatStore
    from words.records import Reply

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


REPLIES = textwrap.dedent("""
    import sys
    from tests.ui.chat.test_chat_store import request, round_event
    from app.chat.store import ChatRecorder, ChatStore
    from words.records import Reply

    store = ChatStore(sys.argv[1])
    recorder = ChatRecorder(store)
    chats = store.list_chats()
    if chats:  # a restart after a kill carries on in the same chat, after its finished replies
        recorder.resume(chats[0].id)
    position = sum(not r.stopped for r in store.load_chat(chats[0].id).replies) if chats else 0
    while position < int(sys.argv[2]):
        ask = request(*[f"turn {position}"] * (2 * position + 1))
        recorder.turn_started(position, ask, None)
        events = tuple(round_event(i, finish="eos" if i == 3 else None) for i in range(4))
        for event in events:
            recorder.round_finished(event)
            print("round", flush=True)
        recorder.reply_finished(Reply(ask, events, "ab" * 4, False))
        print("finished", position, flush=True)  # only after the reply's transaction committed
        position += 1
""")


def test_kill_9_at_random_points_during_50_replies_keeps_every_finished_one(tmp_path):
    path = tmp_path / "chats.sqlite3"
    rng = random.Random(27)
    finished, kills = -1, 0
    while True:
        child = subprocess.Popen([sys.executable, "-c", REPLIES, str(path), "50"], cwd=ROOT, stdout=subprocess.PIPE,
                                 text=True)
        watchdog = threading.Timer(120, child.kill)  # a child that hangs fails the test, not hangs it
        watchdog.start()
        try:
            lines_until_kill = rng.randrange(1, 40)
            for n, line in enumerate(child.stdout, 1):
                if line.startswith("finished"):
                    finished = int(line.split()[1])
                if n == lines_until_kill:
                    os.kill(child.pid, signal.SIGKILL)  # the child runs on meanwhile: it dies wherever it got to
                    kills += 1
                    break
        finally:
            watchdog.cancel()
            child.wait(timeout=30)
        store = ChatStore(path)
        try:
            assert store.db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            replies = store.load_chat(store.list_chats()[0].id).replies
        finally:
            store.close()
        done = [r for r in replies if not r.stopped]
        assert len(done) >= finished + 1  # every reply reported finished before the kill
        assert [r.request.messages[-1]["content"] for r in done] == [f"turn {i}" for i in range(len(done))]
        assert all(r.text == "abababab" and len(r.events) == 4 for r in done)
        if child.returncode == 0:
            break
    assert len(done) == 50 and kills >= 5


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
