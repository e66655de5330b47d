"""Saved conversations: every chat, turn and round in an SQLite database, written as it happens.

Imports neither Qt nor torch, so the window, the tests and a crash-test subprocess can all use it. Each round is
its own small transaction in a WAL journal: a process killed mid-reply loses at most the round in flight, and
the reply it was writing comes back as a stopped reply with every round that was committed.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import sqlite3
import types
import typing
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path

from engine.events import DecodeSettings, PairInfo, RoundEvent
from words.records import Comparison, DrafterComparison, RemoteSource, Reply, ReplyRequest, Runtime

# `PRAGMA user_version` holds the schema version. Opening an older database runs the steps from its version up;
# a newer one (written by a later release) is refused untouched rather than misread.
SCHEMA_VERSION = 7
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE chats (
            id INTEGER PRIMARY KEY,
            title TEXT NOT NULL DEFAULT '',
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            pair TEXT,  -- PairInfo as JSON; NULL until a pair is loaded
            system_prompt TEXT NOT NULL DEFAULT ''
        )""",
        """CREATE TABLE turns (
            id INTEGER PRIMARY KEY,
            chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
            position INTEGER NOT NULL,  -- 0, 1, ... in the order the replies appear
            request TEXT NOT NULL,  -- ReplyRequest as JSON: the messages sent, the settings, compare_ar
            text TEXT,  -- NULL while the reply is in flight (or when its process died)
            stopped INTEGER NOT NULL DEFAULT 0,
            comparison TEXT,  -- the AR comparison as JSON, if one was asked for and finished
            UNIQUE (chat_id, position)
        )""",
        """CREATE TABLE rounds (
            turn_id INTEGER NOT NULL REFERENCES turns(id) ON DELETE CASCADE,
            idx INTEGER NOT NULL,
            event TEXT NOT NULL,  -- RoundEvent as JSON (dataclasses.asdict)
            PRIMARY KEY (turn_id, idx)
        )""",
        "CREATE INDEX turns_by_chat ON turns (chat_id, position)",
    ),
    2: (
        # The reference step the window measured a live reply's speedup against, and whether the machine was busy:
        # a reopened chat and its export show the numbers the live window showed.
        "ALTER TABLE turns ADD COLUMN reference_s REAL NOT NULL DEFAULT 0",
        "ALTER TABLE turns ADD COLUMN machine_busy INTEGER NOT NULL DEFAULT 0",
        # 1: the user named the chat; else its title follows its first message, through edits of that message
        "ALTER TABLE chats ADD COLUMN renamed INTEGER NOT NULL DEFAULT 0",
    ),
    3: (
        # A reply written by a remote engine: its URL (no credentials), served model and what it reported
        # (words.records.RemoteSource as JSON); NULL for the local pair's replies
        "ALTER TABLE turns ADD COLUMN remote TEXT",
    ),
    4: (
        # What ran the local pair (words.records.Runtime as JSON: CPU capability, threads, kernels), for the export of
        # a saved chat; NULL where it was not known, and in chats saved before
        "ALTER TABLE chats ADD COLUMN runtime TEXT",
    ),
    5: (
        # The chat's last Compare drafters of each draft-length rule (a JSON list of words.records.DrafterComparison;
        # one object, not in a list, in chats saved before): their runs are measured points of the why-γ tab and
        # scale its predictions, so a reopened chat shows what the live one did
        "ALTER TABLE chats ADD COLUMN drafters TEXT",
    ),
    6: (
        # Other programs' CPU use while the reply decoded and the cores a virtual machine's host withheld, in cores
        # on average (NULL: not measured, and in replies saved before): its notes say what slowed it
        "ALTER TABLE turns ADD COLUMN others_cores REAL",
        "ALTER TABLE turns ADD COLUMN host_cores REAL",
    ),
    7: (
        # The local pair that decoded the reply (PairInfo as JSON; NULL: a remote engine's, or saved before, when
        # the chat's pair stands for it): a chat decoded by two pairs says which decoded which when reopened
        "ALTER TABLE turns ADD COLUMN pair TEXT",
    ),
}


SQLITE_MAGIC = b"SQLite format 3\x00"
CHAT_TABLES = ("chats", "turns", "rounds")  # every schema from version 1 on has them
# Ids past the last chat a scan of a damaged file read are looked up one by one up to its largest id, at most this
# many (a lookup is a few microseconds): a largest id read from a damaged page may be any number.
RECOVERY_LOOKUPS = 1_000_000


class ChatStoreError(Exception):
    """The database cannot be used: written by a newer version, or not a chat database at all."""


class DamagedFile(Exception):
    """SQLite found the file's contents broken: not an SQLite file, or malformed pages."""


@dataclass(frozen=True)
class ChatSummary:
    id: int
    title: str
    created_at: datetime
    updated_at: datetime
    n_replies: int  # as the chat shows them: a continued reply is one


@dataclass
class StoredChat:
    """One chat as saved: what the window needs to show it again and to carry on from it."""

    id: int
    title: str
    pair: PairInfo | None
    system_prompt: str
    replies: list[Reply]
    comparisons: dict[int, Comparison]  # reply index -> AR comparison
    runtime: Runtime | None = None  # what ran the local pair, as last recorded
    drafters: tuple[DrafterComparison, ...] = ()  # the chat's last Compare drafters of each draft-length rule
    reply_pairs: dict[int, PairInfo] = field(default_factory=dict)  # reply index -> its pair, where saved


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def to_json(value) -> str:
    """A dataclass (nested dataclasses, tuples and str-enums included) as JSON text."""
    return json.dumps(dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value, ensure_ascii=False)


def _json_or_null(value) -> str | None:
    return None if value is None else to_json(value)


def from_plain(kind, data):
    """Rebuild a value of type `kind` from JSON-ready builtins, following the dataclasses' type hints.

    Keys a dataclass no longer has are skipped and fields it gained take their defaults, so rows written by an
    older release still load after the event records grow a field.
    """
    if data is None:
        return None
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        kind = next(arg for arg in typing.get_args(kind) if arg is not type(None))
        return from_plain(kind, data)
    if origin is tuple:
        item = typing.get_args(kind)[0]
        return tuple(from_plain(item, v) for v in data)
    if dataclasses.is_dataclass(kind):
        hints = typing.get_type_hints(kind)
        names = {f.name for f in dataclasses.fields(kind) if f.init}
        return kind(**{k: from_plain(hints[k], v) for k, v in data.items() if k in names})
    if isinstance(kind, type) and issubclass(kind, Enum):
        return kind(data)
    return data


def stored_drafters(data: list | dict) -> tuple[DrafterComparison, ...]:
    """The `drafters` column's comparisons: a list, or the single one of a chat saved before chats kept one of
    each draft-length rule."""
    return tuple(from_plain(DrafterComparison, c) for c in (data if isinstance(data, list) else [data]))


def request_json(request: ReplyRequest) -> str:
    return json.dumps({"messages": list(request.messages), "settings": dataclasses.asdict(request.settings),
                       "compare_ar": request.compare_ar}, ensure_ascii=False)


def request_from_json(text: str) -> ReplyRequest:
    data = json.loads(text)
    return ReplyRequest(tuple(data["messages"]), from_plain(DecodeSettings, data["settings"]), data["compare_ar"])


TITLE_MAX = 200  # the history elides a title to its width; only a pasted document is cut here


def title_for(request: ReplyRequest) -> str:
    """A chat is named after its first user message, on one line, whole: Rename starts from the full title."""
    first = next((m["content"] for m in request.messages if m["role"] == "user"), "")
    line = " ".join(first.split())
    return line if len(line) <= TITLE_MAX else line[:TITLE_MAX - 1] + "…"


def connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that cannot change the file. A WAL database in a folder that cannot be written has no
    shared-memory file to read through, so it is then read as immutable (nothing else can write there either)."""
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        db.execute("PRAGMA user_version")
        return db
    except sqlite3.OperationalError as exc:
        db.close()
        if not cannot_write(exc):
            raise
        return connect_immutable(path)


def connect_immutable(path: Path) -> sqlite3.Connection:
    """A connection that reads the file alone, as it is: no lock, no -wal or -shm file made or read."""
    return sqlite3.connect(f"{path.resolve().as_uri()}?immutable=1", uri=True)


def intact_version(db: sqlite3.Connection) -> int:
    """The schema version of a database whose pages SQLite finds whole and which has the chat tables its version
    promises; raises DamagedFile otherwise."""
    # quick_check reads every page: damage deep in the file is found now, not on a later read
    if (result := db.execute("PRAGMA quick_check").fetchone()[0]) != "ok":
        raise DamagedFile(result)
    version = db.execute("PRAGMA user_version").fetchone()[0]
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if version and (missing := [table for table in CHAT_TABLES if table not in tables]):
        raise DamagedFile(f"schema {version} but missing tables: {', '.join(missing)}")
    return version


def chat_ids(source: sqlite3.Connection):
    """The ids of a damaged database's chats worth looking up: those a scan reads before it meets the damage, then
    every id up to the largest (a lookup by id walks only the pages on its own path)."""
    ids = []
    try:
        ids.extend(chat_id for (chat_id,) in source.execute("SELECT id FROM chats ORDER BY id"))
        return ids
    except sqlite3.DatabaseError:
        pass
    try:
        last = source.execute("SELECT max(id) FROM chats").fetchone()[0] or 0
    except sqlite3.DatabaseError:
        return ids
    first = ids[-1] + 1 if ids else 1
    return itertools.chain(ids, range(first, min(last, first + RECOVERY_LOOKUPS) + 1))


def cannot_write(exc: sqlite3.Error) -> bool:
    """Whether SQLite was refused write access to the file, its journal or its folder."""
    return getattr(exc, "sqlite_errorname", "").startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN"))


class ChatStore:
    """The chats database. One connection, used from one thread (the GUI thread in the app)."""

    def __init__(self, path: Path | str):
        """Open (or create) the database at `path`. Nothing in an existing file changes before its schema version
        is known to be readable. A damaged file is moved aside and a fresh one started; a file that cannot be
        written is opened read-only. Either way `notice` says so in one line (None when all is well)."""
        self.path = path
        self.read_only = False
        self.notice: str | None = None
        if path == ":memory:":
            self._open_writable()
            return
        folder = Path(path).parent
        if folder.exists() and not folder.is_dir():
            raise ChatStoreError(f"{folder} is a file, not a folder: chats are kept in memory (give a folder)")
        folder.mkdir(parents=True, exist_ok=True)
        damaged: tuple[Path, DamagedFile] | None = None
        try:
            version = self._version_on_disk()
        except DamagedFile as exc:
            damaged = self._move_aside(exc), exc
            version = 0
        except sqlite3.Error as exc:
            raise ChatStoreError(f"{path} is not a readable chat database ({exc})") from exc
        if version > SCHEMA_VERSION:
            raise ChatStoreError(f"{path} was written by a newer SpecDec Studio (schema {version}; this one "
                                 f"reads up to {SCHEMA_VERSION}); it was left untouched")
        started = not Path(path).exists()
        try:
            self._open_writable()
        except sqlite3.OperationalError as exc:
            if started:  # a file this start made and could not set up (a full disk leaves a 4 KB header): gone
                for suffix in ("", "-wal", "-shm"):
                    Path(f"{path}{suffix}").unlink(missing_ok=True)
            if getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL":
                raise ChatStoreError(f"the disk holding {path} is full: chats are kept in memory (free some space, "
                                     "then restart)") from exc
            if not cannot_write(exc) or version == 0:
                raise ChatStoreError(f"{path} cannot be opened ({exc}): chats are kept in memory") from exc
            self._open_read_only(version)
        except sqlite3.DatabaseError as exc:
            raise ChatStoreError(f"{path} is not a readable chat database ({exc})") from exc
        if damaged is not None:
            aside, exc = damaged
            self.notice = (f"{path} was damaged ({exc}): it was moved to {aside.name} and a new chat database "
                           f"started with the chats that could still be read from it ({self._recover(aside)})")

    def _version_on_disk(self) -> int:
        """The file's schema version, read without writing anything (0: no file yet, or an empty one); raises
        DamagedFile where its contents are broken."""
        path = Path(self.path)
        if not path.is_file() or path.stat().st_size == 0:
            return 0
        with path.open("rb") as f:
            header = f.read(100)
        # A file whose header (user_version: 4 bytes at 60) says it is newer is read alone, as it is: even a
        # read-only connection to a WAL database leaves -wal and -shm files beside it. Its pages are checked before
        # its number is believed: damage that reaches the header makes any number of those 4 bytes.
        newer = (header.startswith(SQLITE_MAGIC) and len(header) == 100
                 and int.from_bytes(header[60:64], "big") > SCHEMA_VERSION)
        try:
            db = connect_immutable(path) if newer else connect_read_only(path)
            try:
                return intact_version(db)
            finally:
                db.close()
        except sqlite3.DatabaseError as exc:
            if getattr(exc, "sqlite_errorname", "").startswith(("SQLITE_NOTADB", "SQLITE_CORRUPT")):
                raise DamagedFile(str(exc)) from exc
            raise

    def _move_aside(self, exc: DamagedFile) -> Path:
        """Rename a damaged database (and its journal files) to a dated name beside it, to start afresh; the
        name it has now."""
        path = Path(self.path)
        aside = path.with_name(f"{path.stem}.damaged-{datetime.now():%Y%m%d-%H%M%S}{path.suffix}")
        try:
            for suffix in ("-wal", "-shm", ""):  # the database last: a failure leaves it where it was
                journal = path.with_name(path.name + suffix)
                if journal.exists():
                    journal.rename(aside.with_name(aside.name + suffix))
        except OSError as error:
            raise ChatStoreError(f"{path} is damaged ({exc}) and could not be moved aside ({error.strerror}): "
                                 "chats are kept in memory") from exc
        return aside

    def _recover(self, damaged: Path) -> int:
        """Copy each chat of the damaged database that still reads whole (its row, turns and rounds, and the
        records they make) into this fresh one, with its ids; the number copied. A chat any part of which cannot
        be read is left in the damaged file only."""
        try:
            source = connect_read_only(damaged)
        except sqlite3.DatabaseError:
            return 0
        recovered = 0
        try:
            columns = {table: self._shared_columns(source, table) for table in CHAT_TABLES}
            if not all(columns.values()):
                return 0
            chats, turns, rounds = (", ".join(columns[table]) for table in CHAT_TABLES)
            for chat_id in chat_ids(source):
                try:
                    chat = source.execute(f"SELECT {chats} FROM chats WHERE id = ?", (chat_id,)).fetchall()
                    chat_turns = source.execute(f"SELECT {turns} FROM turns WHERE chat_id = ?", (chat_id,)).fetchall()
                    chat_rounds = source.execute(f"SELECT {rounds} FROM rounds WHERE turn_id IN "
                                                 "(SELECT id FROM turns WHERE chat_id = ?)", (chat_id,)).fetchall()
                except sqlite3.DatabaseError:
                    continue
                if not chat:
                    continue
                try:
                    with self.db:
                        for table, rows in zip(CHAT_TABLES, (chat, chat_turns, chat_rounds)):
                            marks = ", ".join("?" * len(columns[table]))
                            self.db.executemany(f"INSERT INTO {table} ({', '.join(columns[table])}) VALUES ({marks})",
                                                rows)
                        self._load_chat(chat_id)  # rolled back unless it reads back as a chat
                    recovered += 1
                except (sqlite3.DatabaseError, ValueError, KeyError, TypeError):
                    continue
        except sqlite3.DatabaseError:
            pass  # the damaged file's schema cannot be read: nothing in it can be
        finally:
            source.close()
        return recovered

    def _shared_columns(self, source: sqlite3.Connection, table: str) -> list[str]:
        """The columns of `table` that both the damaged database and this one have (it may be older, or newer)."""
        ours = {row[1] for row in self.db.execute(f"PRAGMA table_info({table})")}
        return [row[1] for row in source.execute(f"PRAGMA table_info({table})") if row[1] in ours]

    def _open_writable(self) -> None:
        db = sqlite3.connect(str(self.path))
        try:
            db.execute("PRAGMA foreign_keys = ON")
            db.execute("PRAGMA journal_mode = WAL")
            # NORMAL in WAL mode: a committed round survives the process being killed (only a power cut may
            # lose the last commits), without an fsync per round.
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("PRAGMA secure_delete = ON")  # a deleted chat's text does not stay in the file's free pages
            # A file that cannot be written may still open: SQLite falls back to reading it. Take the write lock
            # once, so that shows now and not at the first round saved.
            db.execute("BEGIN IMMEDIATE")
            db.rollback()
            self.db = db
            self._upgrade()
        except sqlite3.Error:
            db.close()
            raise

    def _open_read_only(self, version: int) -> None:
        """The file or its folder cannot be written: show the saved chats, save nothing new."""
        if version < SCHEMA_VERSION:
            raise ChatStoreError(f"{self.path} is read-only and from an older SpecDec Studio, so it cannot be "
                                 "upgraded: make it and its folder writable, then restart")
        self.db = connect_read_only(Path(self.path))
        self.read_only = True
        self.notice = (f"{self.path} is read-only: your saved chats are shown, but new ones will not be saved "
                       "(make the file and its folder writable, then restart)")

    def _upgrade(self) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        for step in range(version + 1, SCHEMA_VERSION + 1):
            # One explicit transaction per step: sqlite3 would commit DDL statement by statement, and a crash
            # mid-upgrade must leave the previous version whole.
            self.db.execute("BEGIN")
            try:
                for statement in MIGRATIONS[step]:
                    self.db.execute(statement)
                self.db.execute(f"PRAGMA user_version = {step}")
            except sqlite3.Error:
                self.db.rollback()
                raise
            self.db.commit()

    def close(self) -> None:
        self.db.close()

    # -- writing, as a chat happens ----------------------------------------------------------------------

    def create_chat(self, pair: PairInfo | None = None, system_prompt: str = "",
                    runtime: Runtime | None = None) -> int:
        stamp = now()
        with self.db:
            cursor = self.db.execute(
                "INSERT INTO chats (created_at, updated_at, pair, system_prompt, runtime) VALUES (?, ?, ?, ?, ?)",
                (stamp, stamp, _json_or_null(pair), system_prompt, _json_or_null(runtime)))
        return cursor.lastrowid

    def begin_turn(self, chat_id: int, position: int, request: ReplyRequest, pair: PairInfo | None = None,
                   system_prompt: str = "", runtime: Runtime | None = None) -> int:
        """Save a request before its first round. Turns at `position` and later are replaced: that is how a
        regenerated reply or an edited message forgets what followed it."""
        with self.db:
            self.db.execute("DELETE FROM turns WHERE chat_id = ? AND position >= ?", (chat_id, position))
            cursor = self.db.execute("INSERT INTO turns (chat_id, position, request, pair) VALUES (?, ?, ?, ?)",
                                     (chat_id, position, request_json(request), _json_or_null(pair)))
            # The first turn names the chat, and so does an edit of its first message unless the user renamed it.
            self.db.execute("UPDATE chats SET title = CASE WHEN title = '' OR (? = 0 AND NOT renamed) THEN ? "
                            "ELSE title END, updated_at = ?, pair = COALESCE(?, pair), system_prompt = ?, "
                            "runtime = COALESCE(?, runtime) WHERE id = ?",
                            (position, title_for(request), now(), _json_or_null(pair), system_prompt,
                             _json_or_null(runtime), chat_id))
        return cursor.lastrowid

    def add_round(self, turn_id: int, event: RoundEvent) -> None:
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO rounds (turn_id, idx, event) VALUES (?, ?, ?)",
                            (turn_id, event.index, to_json(event)))

    def finish_turn(self, turn_id: int, reply: Reply) -> None:
        """Mark the reply complete. Its rounds were written one by one; any the window missed are added."""
        with self.db:
            self.db.executemany("INSERT OR IGNORE INTO rounds (turn_id, idx, event) VALUES (?, ?, ?)",
                                [(turn_id, e.index, to_json(e)) for e in reply.events])
            self.db.execute("UPDATE turns SET text = ?, stopped = ?, reference_s = ?, machine_busy = ?, remote = ?, "
                            "others_cores = ?, host_cores = ? WHERE id = ?",
                            (reply.text, int(reply.stopped), reply.reference_s, int(reply.machine_busy),
                             _json_or_null(reply.remote), reply.others_cores, reply.host_cores, turn_id))

    def add_comparison(self, turn_id: int, comparison: Comparison) -> None:
        with self.db:
            self.db.execute("UPDATE turns SET comparison = ? WHERE id = ?", (to_json(comparison), turn_id))

    def set_pair(self, chat_id: int, pair: PairInfo) -> None:
        """The chat's pair with its costs as its last reply left them, which a reopened chat's why tab is drawn by."""
        with self.db:
            self.db.execute("UPDATE chats SET pair = ? WHERE id = ?", (to_json(pair), chat_id))

    def set_drafters(self, chat_id: int, comparisons: tuple[DrafterComparison, ...]) -> None:
        with self.db:
            self.db.execute("UPDATE chats SET drafters = ? WHERE id = ?",
                            (to_json([dataclasses.asdict(c) for c in comparisons]) if comparisons else None, chat_id))

    def delete_turn(self, turn_id: int) -> None:
        with self.db:
            self.db.execute("DELETE FROM turns WHERE id = ?", (turn_id,))

    def given_title(self, chat_id: int) -> str | None:
        """The title the user gave the chat, or None where its title follows its first message."""
        with self._reading():
            row = self.db.execute("SELECT title FROM chats WHERE id = ? AND renamed", (chat_id,)).fetchone()
        return row[0] if row else None

    def rename_chat(self, chat_id: int, title: str) -> None:
        with self._writing(), self.db:
            self.db.execute("UPDATE chats SET title = ?, renamed = 1 WHERE id = ?", (title.strip(), chat_id))

    def delete_chat(self, chat_id: int) -> None:
        """The chat and its replies, gone from the disk too: secure_delete zeroes the freed pages, and the
        checkpoint empties the write-ahead log that still held the chat's pages as they were written."""
        with self._writing():
            with self.db:
                self.db.execute("DELETE FROM chats WHERE id = ?", (chat_id,))
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    @contextmanager
    def _writing(self):
        """A change the user asked for in the history that fails raises ChatStoreError, for the window to show."""
        try:
            yield
        except sqlite3.Error as exc:
            raise ChatStoreError(self.notice if self.read_only else f"could not change {self.path}: {exc}") from exc

    # -- reading --------------------------------------------------------------------------------------------

    @contextmanager
    def _reading(self):
        """A read that fails (the file removed, the disk failing) raises ChatStoreError, for the window to show."""
        try:
            yield
        except sqlite3.Error as exc:
            raise ChatStoreError(f"could not read {self.path}: {exc}") from exc

    def list_chats(self) -> list[ChatSummary]:
        """Chats with at least one turn, most recently used first. A continuation (a turn whose request ends with
        the reply it extends) is part of that reply, as the chat shows it, so it adds no reply to the count; nor
        does a turn stopped while its prompt was read in (no round: the chat shows no reply)."""
        with self._reading():
            rows = self.db.execute(
                "SELECT c.id, c.title, c.created_at, c.updated_at, "
                "SUM(json_extract(t.request, '$.messages[#-1].role') IS NOT 'assistant' "
                "AND EXISTS (SELECT 1 FROM rounds r WHERE r.turn_id = t.id)) FROM chats c "
                "JOIN turns t ON t.chat_id = c.id GROUP BY c.id ORDER BY c.updated_at DESC, c.id DESC").fetchall()
        return [ChatSummary(i, title, datetime.fromisoformat(created), datetime.fromisoformat(updated), n)
                for i, title, created, updated, n in rows]

    def load_chat(self, chat_id: int) -> StoredChat:
        with self._reading():
            return self._load_chat(chat_id)

    def _load_chat(self, chat_id: int) -> StoredChat:
        row = self.db.execute("SELECT title, pair, system_prompt, runtime, drafters FROM chats WHERE id = ?",
                              (chat_id,)).fetchone()
        if row is None:
            raise KeyError(chat_id)
        title, pair, system_prompt, runtime, drafters = row
        replies, comparisons, reply_pairs = [], {}, {}
        turns = self.db.execute("SELECT id, request, text, stopped, comparison, reference_s, machine_busy, remote, "
                                "others_cores, host_cores, pair FROM turns WHERE chat_id = ? ORDER BY position",
                                (chat_id,)).fetchall()
        for (turn_id, request, text, stopped, comparison, reference_s, machine_busy, remote, others, host,
             turn_pair) in turns:
            events = tuple(from_plain(RoundEvent, json.loads(e)) for (e,) in self.db.execute(
                "SELECT event FROM rounds WHERE turn_id = ? ORDER BY idx", (turn_id,)))
            if text is None:  # the process died mid-reply: keep what was committed, as a stopped reply
                text, stopped = "".join(e.text_delta for e in events), True
            if comparison is not None:
                comparisons[len(replies)] = from_plain(Comparison, json.loads(comparison))
            if turn_pair is not None:
                reply_pairs[len(replies)] = from_plain(PairInfo, json.loads(turn_pair))
            replies.append(Reply(request_from_json(request), events, text, bool(stopped), reference_s,
                                 bool(machine_busy), from_plain(RemoteSource, json.loads(remote) if remote else None),
                                 others, host))
        return StoredChat(chat_id, title, from_plain(PairInfo, json.loads(pair) if pair else None), system_prompt,
                          replies, comparisons, from_plain(Runtime, json.loads(runtime) if runtime else None),
                          stored_drafters(json.loads(drafters) if drafters else []), reply_pairs)


class ChatRecorder:
    """Follows the chat on screen and writes it to the store: which chat is current and which turn is in flight.

    A chat row is created lazily on its first request, so opening the app and pressing New chat leaves no empty
    chats behind. A write that fails (disk full, the file removed) stops the saving for the rest of the session,
    reported once through `on_failure`: the chat on screen goes on. A read-only store is never written to (its
    notice was shown when it opened).
    """

    def __init__(self, store: ChatStore, on_failure: Callable[[str], None] | None = None):
        self.store = store
        self.on_failure = on_failure
        self.failure: str | None = store.notice if store.read_only else None
        self.chat_id: int | None = None
        self.turn_id: int | None = None

    def new_chat(self) -> None:
        self.chat_id = self.turn_id = None

    def resume(self, chat_id: int) -> None:
        """Carry on writing to a restored chat."""
        self.chat_id, self.turn_id = chat_id, None

    def turn_started(self, position: int, request: ReplyRequest, pair: PairInfo | None,
                     runtime: Runtime | None = None) -> None:
        system = next((m["content"] for m in request.messages if m["role"] == "system"), "")
        self.turn_id = None
        if self.chat_id is None:
            self.chat_id = self._write(self.store.create_chat, pair, system, runtime)
        if self.chat_id is not None:
            self.turn_id = self._write(self.store.begin_turn, self.chat_id, position, request, pair, system, runtime)

    def round_finished(self, event: RoundEvent) -> None:
        if self.turn_id is not None:
            self._write(self.store.add_round, self.turn_id, event)

    def reply_finished(self, reply: Reply) -> None:
        if self.turn_id is not None:
            self._write(self.store.finish_turn, self.turn_id, reply)

    def comparison_finished(self, comparison: Comparison) -> None:
        if self.turn_id is not None:
            self._write(self.store.add_comparison, self.turn_id, comparison)

    def pair_timed(self, pair: PairInfo) -> None:
        if self.chat_id is not None:
            self._write(self.store.set_pair, self.chat_id, pair)

    def drafters_compared(self, comparisons: tuple[DrafterComparison, ...]) -> None:
        """The Compare drafters runs the chat keeps."""
        if self.chat_id is not None:
            self._write(self.store.set_drafters, self.chat_id, comparisons)

    def turn_failed(self) -> None:
        """The worker failed before finishing the reply: the window drops the turn, so the store does too."""
        if self.turn_id is not None:
            self._write(self.store.delete_turn, self.turn_id)
            self.turn_id = None

    def _write(self, write, *args):
        if self.failure is not None:
            return None
        try:
            return write(*args)
        except sqlite3.Error as exc:
            self.failure = f"Chats are no longer being saved ({exc}); this one stays on screen until you close it"
            self.turn_id = None
            if self.on_failure is not None:
                self.on_failure(self.failure)
            return None
