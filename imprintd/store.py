"""Conversations kept in SQLite, and ephemeral ones kept in memory (docs/architecture.md, "Storage").

``Store`` is the one database in the data dir, opened with apsw: sessions, their messages
(numbered by a per-session ``seq``; an answer keeps its sources), ADR 0141's ``chat_summaries`` (the running summary's
text, the messages it covers and the retry point after a failed attempt) and the
``conversation_history`` index (``context/history_index.py``), written in the same
transaction as the messages it indexes. The schema moves
forward by ``PRAGMA user_version`` through the numbered functions in ``MIGRATIONS``; a
database written by a newer imprintd is refused rather than guessed at.

Each store hands out a session's messages through its ``SessionView`` (``view``,
``session_view.py``): messages are never changed once stored, so a reply decodes only those
stored since the last read, and its cost does not grow with the session; what is derived from
them hangs on the view and goes with it when the session is deleted.

``MemoryStore`` holds sessions created with persistence off (ADR 0141's voice case): the
same API, nothing on disk, at most 400 messages a session and 4,000 characters a tool
result, and an in-memory history index per session.

Both implement ``ConversationStore``, which is all the reply path needs.

SQLite's errors about the file itself (busy past the busy timeout, damaged, disk full, not
writable) become a ``StoreError`` naming the file and what to do about that cause
(``database_problem``), the same at start-up as on any later read or write.
"""

from __future__ import annotations

import bisect
import itertools
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import apsw
import msgspec

from imprintd.context import history_index
from imprintd.context.history import calls_by_id, indexed_messages
from imprintd.context.history_index import HistoryIndex, MemoryHistoryIndex, SqliteHistoryIndex
from imprintd.messages import Message, SourceRef, ToolCall
from imprintd.printable import is_invisible, without_controls
from imprintd.private import private_database, private_folder
from imprintd.session_view import SessionView, SessionViews
from imprintd.settings import data_dir

DB_NAME = "imprint.sqlite3"
BUSY_TIMEOUT_MS = 5_000
#: SQLite virtual-machine steps between looks at a read's stop flag (``Store.stopped_by``): some
#: thousandths of a second of work, and the look itself costs a Python call.
STOP_CHECK_STEPS = 10_000
#: Pause between tries of a new database's switch to write-ahead logging (``switch_to_wal``).
WAL_SWITCH_PAUSE_S = 0.01
TITLE_LIMIT = 80
#: A conversation search of up to this many terms merges the terms' postings in window order
#: (``Store.search``); a longer one groups them (a compound SELECT takes at most 500 parts).
MERGED_TERMS = 64

# ADR 0141, voice: "at most 400 messages, 4,000 characters a result".
MEMORY_MESSAGE_LIMIT = 400
MEMORY_TOOL_RESULT_LIMIT = 4_000

Clock = Callable[[], float]


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    title: str
    workspace: str | None
    created_at: float
    updated_at: float
    message_count: int
    persist: bool


class StoredSummary(msgspec.Struct, frozen=True, kw_only=True):
    """ADR 0141's running summary of a session: covers messages ``first_seq..last_seq``.

    ``retry_at``: after a failed attempt, no new one until the session has this many
    messages (six more than at the failure); ``None`` when the last attempt succeeded.
    """

    text: str
    first_seq: int
    last_seq: int
    retry_at: int | None = None


class FoundMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A message found by ``Store.search``: its best window (``start:end`` of ``content``) and score."""

    session_id: str
    title: str
    workspace: str | None
    seq: int
    role: str
    content: str
    created_at: float
    start: int
    end: int
    score: float


class StoreError(Exception):
    """The store cannot do what was asked; the message says why and what to do."""


class DatabaseBusy(StoreError):
    """Another connection kept the database locked for longer than the busy timeout."""


class DatabaseDamaged(StoreError):
    """The database file is not a readable SQLite database (any more)."""


class ReadStopped(StoreError):
    """A read ended by its stop flag: whoever asked no longer waits for the answer (``stopped_by``)."""


class SessionNotFound(StoreError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session with id {session_id!r}")
        self.session_id = session_id


@runtime_checkable
class ConversationStore(Protocol):
    """What the reply path needs from a store; ``Store`` and ``MemoryStore`` both provide it.

    A reply reads only what its prompt can use: ``messages(after=...)`` the messages the
    running summary does not cover, ``listable`` what the summary's covered material names of
    the rest (``context/summary.covered_material``), ``oldest_seq`` where its numbers start
    (numbers run without a gap from there: nothing stored is ever removed but the oldest).

    ``create_session`` stores a session under ``session_id`` when given (a front door that
    named the session before its first question), else under a new random id.
    """

    def create_session(
        self, *, title: str = "", workspace: str | None = None, session_id: str | None = None
    ) -> SessionInfo: ...
    def session(self, session_id: str) -> SessionInfo: ...
    def sessions(self) -> list[SessionInfo]: ...
    def delete_session(self, session_id: str) -> None: ...
    def append(self, session_id: str, message: Message) -> Message: ...
    def extend(self, session_id: str, messages: Sequence[Message]) -> list[Message]: ...
    def messages(self, session_id: str, *, after: int = 0) -> list[Message]: ...
    def listable(
        self, session_id: str, first: int, last: int, *, longer_than: int, unlisted_calls: str
    ) -> list[Message]: ...
    def oldest_seq(self, session_id: str) -> int | None: ...
    def summary(self, session_id: str) -> StoredSummary | None: ...
    def save_summary(self, session_id: str, summary: StoredSummary) -> None: ...
    def history_index(self, session_id: str) -> HistoryIndex: ...
    def view(self, session_id: str) -> SessionView: ...
    def rename_session(self, session_id: str, title: str) -> SessionInfo: ...
    def stopped_by(self, stop: threading.Event | None) -> AbstractContextManager[None]: ...


# --- helpers shared by both stores -------------------------------------------------------


def new_session_id() -> str:
    # Random rather than sequential: ids travel to editors and must not be guessable
    # or collide between the persistent and the in-memory store.
    return secrets.token_hex(16)


def title_from(content: str) -> str:
    """The first line of ``content`` that shows something, without control characters, clipped to
    ``TITLE_LIMIT`` characters; "" when no line does."""
    lines = (without_controls(line).strip() for line in content.splitlines())
    line = next((line for line in lines if not is_invisible(line)), "")
    return line if len(line) <= TITLE_LIMIT else line[: TITLE_LIMIT - 1].rstrip() + "…"


def _check_summary(summary: StoredSummary) -> None:
    if not 1 <= summary.first_seq <= summary.last_seq:
        raise ValueError(
            f"summary covers #{summary.first_seq}..#{summary.last_seq}; expected 1 <= first_seq <= last_seq"
        )


def database_problem(path: Path, error: apsw.Error) -> StoreError | None:
    """What SQLite's ``error`` on the database ``path`` means and what to do, or None when it
    says nothing about the file (a bug's error stays as it is).

    The advice fits the cause: a busy database is another process at work (waiting longer
    helps, moving the file away does not); a damaged one must be moved away or restored.
    """
    if isinstance(error, apsw.BusyError | apsw.LockedError):
        return DatabaseBusy(
            f"the database {path} is busy: another process kept it locked for more than "
            f"{BUSY_TIMEOUT_MS / 1000:g} s (another imprintd using the same data folder?). Try again."
        )
    if isinstance(error, apsw.CorruptError | apsw.NotADBError):
        return DatabaseDamaged(
            f"the database {path} is damaged or not an SQLite database ({error}). Stop imprintd and move "
            "it away with its -wal and -shm files (imprintd then starts an empty one), or restore it "
            "from a backup; or set IMPRINT_DATA_DIR to another folder."
        )
    if isinstance(error, apsw.FullError):
        return StoreError(f"the disk holding the database {path} is full ({error}); free some space and try again.")
    if isinstance(error, apsw.ReadOnlyError | apsw.PermissionsError | apsw.CantOpenError):
        return StoreError(
            f"the database {path} cannot be written ({error}): check that this user may write it "
            "and its folder, or set IMPRINT_DATA_DIR to a folder this user can write."
        )
    if isinstance(error, apsw.IOError):
        return StoreError(f"reading or writing the database {path} failed: the disk or file system reported {error}.")
    return None


@contextmanager
def naming_problems(path: Path) -> Iterator[None]:
    """Raise SQLite's errors about the file ``path`` as ``database_problem`` words them."""
    try:
        yield
    except apsw.Error as error:
        problem = database_problem(path, error)
        if problem is None:
            raise
        raise problem from error


# --- migrations ---------------------------------------------------------------------------

Migration = Callable[[apsw.Connection], None]


def _migration_1_conversations(db: apsw.Connection) -> None:
    """Sessions, their messages, and ADR 0141's running summaries."""
    db.execute(
        """
        CREATE TABLE sessions (
            id         TEXT PRIMARY KEY NOT NULL,
            title      TEXT NOT NULL DEFAULT '',
            workspace  TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL
        ) STRICT;
        CREATE INDEX sessions_by_updated ON sessions (updated_at);

        CREATE TABLE messages (
            session_id   TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            seq          INTEGER NOT NULL CHECK (seq >= 1),
            role         TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
            content      TEXT NOT NULL,
            tool_calls   TEXT NOT NULL DEFAULT '[]',  -- JSON list of ToolCall (msgspec)
            tool_call_id TEXT,
            name         TEXT,
            created_at   REAL NOT NULL,
            PRIMARY KEY (session_id, seq)
        ) STRICT;

        CREATE TABLE chat_summaries (
            session_id TEXT PRIMARY KEY NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            text       TEXT NOT NULL,
            first_seq  INTEGER NOT NULL CHECK (first_seq >= 1),
            last_seq   INTEGER NOT NULL CHECK (last_seq >= first_seq),
            retry_at   INTEGER,
            updated_at REAL NOT NULL
        ) STRICT;
        """
    )


# Migration N (1-based) takes the schema from version N-1 to N; user_version is the number
# applied. Append only, never reorder or edit a released entry. A migration runs its DDL on
# ``db`` and does not commit (the caller does, once for all pending ones).
def _migration_2_history_index(db: apsw.Connection) -> None:
    """The conversation_history index (docs/conversation-search.md). Sessions stored before it are indexed the
    first time they are extended or searched, not here, so upgrading stays quick."""
    history_index.create_tables(db)


def _migration_3_sources(db: apsw.Connection) -> None:
    """An answer's sources, stored with it (a JSON list of SourceRef); '[]' for every earlier message."""
    db.execute("ALTER TABLE messages ADD COLUMN sources TEXT NOT NULL DEFAULT '[]'")


def _migration_4_model_text_and_reasoning(db: apsw.Connection) -> None:
    """A message as the model saw it, where that differs from what is shown (NULL: the same), and a
    reasoning model's thoughts ('' for every earlier message)."""
    db.execute(
        "ALTER TABLE messages ADD COLUMN model_text TEXT;"
        " ALTER TABLE messages ADD COLUMN reasoning TEXT NOT NULL DEFAULT ''"
    )


def _migration_5_search_every_session(db: apsw.Connection) -> None:
    """The history index's postings by term, so one query reads every session's windows holding a
    word (``imprint/searchConversations``) instead of scanning the postings of every session. It
    covers the count too (and, as the table has no rowid, the session and window), so a search
    reads the index alone."""
    db.execute("CREATE INDEX history_postings_by_term ON history_postings (term, history_id, window, count)")


def _migration_6_window_length_in_postings(db: apsw.Connection) -> None:
    """Each posting carries its window's length, so a search scores every window holding a word
    from the postings index alone and reads ``history_windows`` only for the best few (scoring
    joined every candidate's window row before: half of a search's time). The by-term index is
    made again to cover it."""
    db.execute(
        "ALTER TABLE history_postings ADD COLUMN words INTEGER NOT NULL DEFAULT 0;"
        " UPDATE history_postings AS p SET words = w.words FROM history_windows w"
        "  WHERE w.history_id = p.history_id AND w.window = p.window;"
        " DROP INDEX history_postings_by_term;"
        " CREATE INDEX history_postings_by_term ON history_postings (term, history_id, window, count, words)"
    )


def _migration_7_session_incarnation(db: apsw.Connection) -> None:
    """A random number SQLite draws when a session's row is made (0 for every earlier session): a
    session deleted and made again under the same id, in the same clock tick, may get the old
    rowid too, and only this tells the new one from what another connection decoded of the old one."""
    db.execute(
        "ALTER TABLE sessions ADD COLUMN incarnation INTEGER NOT NULL DEFAULT 0;"
        " CREATE TRIGGER sessions_incarnation AFTER INSERT ON sessions"
        " BEGIN UPDATE sessions SET incarnation = random() WHERE rowid = NEW.rowid; END"
    )


MIGRATIONS: list[Migration] = [
    _migration_1_conversations,
    _migration_2_history_index,
    _migration_3_sources,
    _migration_4_model_text_and_reasoning,
    _migration_5_search_every_session,
    _migration_6_window_length_in_postings,
    _migration_7_session_incarnation,
]


def _user_version(db: apsw.Connection) -> int:
    return int(db.pragma("user_version"))


def _refuse_newer(path: Path, found: int, known: int) -> None:
    if found > known:
        raise StoreError(
            f"{path} has schema version {found}, but this imprintd knows versions up to "
            f"{known}: it was written by a newer imprintd. Upgrade imprintd, or set "
            "IMPRINT_DATA_DIR to another directory to use a separate database."
        )


@contextmanager
def immediate(db: apsw.Connection) -> Iterator[apsw.Connection]:
    """A ``BEGIN IMMEDIATE`` transaction on ``db``: committed on success, else rolled back."""
    # IMMEDIATE takes the write lock up front (waiting up to the busy timeout), so what the
    # transaction reads cannot change under it before it writes.
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:  # some errors (disk full, I/O) have rolled back already
            db.execute("ROLLBACK")
        raise


def migrate(db: apsw.Connection, path: Path) -> int:
    """Apply every pending migration in one transaction; return the schema version."""
    known = len(MIGRATIONS)
    with immediate(db):
        # Re-read inside the write lock: another process may have migrated meanwhile.
        current = _user_version(db)
        _refuse_newer(path, current, known)
        for number in range(current + 1, known + 1):
            MIGRATIONS[number - 1](db)
        if current != known:
            db.pragma("user_version", known)
    return known


# --- the SQLite store ----------------------------------------------------------------------

_SESSION_COLUMNS = """
    s.id, s.title, s.workspace, s.created_at, s.updated_at,
    (SELECT count(*) FROM messages m WHERE m.session_id = s.id)
"""

_decode_tool_calls = msgspec.json.Decoder(tuple[ToolCall, ...]).decode
_decode_sources = msgspec.json.Decoder(tuple[SourceRef, ...]).decode
#: A message row as ``_message_from_row`` reads it.
_MESSAGE_COLUMNS = "seq, role, content, tool_calls, tool_call_id, name, sources, model_text, reasoning"


def _session_from_row(row: tuple) -> SessionInfo:
    id_, title, workspace, created_at, updated_at, count = row
    return SessionInfo(
        id=id_,
        title=title,
        workspace=workspace,
        created_at=created_at,
        updated_at=updated_at,
        message_count=count,
        persist=True,
    )


def _message_from_row(row: tuple) -> Message:
    seq, role, content, tool_calls, tool_call_id, name, sources, model_text, reasoning = row
    return Message(
        role=role,
        content=content,
        tool_calls=_decode_tool_calls(tool_calls) if tool_calls != "[]" else (),  # most messages call none
        tool_call_id=tool_call_id,
        name=name,
        seq=seq,
        sources=_decode_sources(sources) if sources != "[]" else (),
        model_text=model_text,
        reasoning=reasoning,
    )


class Store:
    """Sessions, messages and summaries in one SQLite database (apsw).

    Every write runs in its own ``BEGIN IMMEDIATE`` transaction and is committed before the
    method returns. The daemon calls it from worker threads (``offload.in_worker``), several at
    once, so it keeps a pool of connections: a thread takes one for its call (the same one again
    for calls nested in it) and gives it back after, so no connection is used by two threads at
    once and SQLite's own locking orders their transactions. A read never waits behind a write that
    waits on the file: with write-ahead logging it reads on its own connection meanwhile.
    """

    def __init__(self, connection: apsw.Connection, path: Path, *, clock: Clock = time.time) -> None:
        self._path = path
        self._clock = clock
        self._pool_lock = threading.Lock()
        self._idle: list[apsw.Connection] = [connection]
        self._open_connections = 1
        self._held = threading.local()
        self._closed = False
        self._all_indexed = False
        self._views = SessionViews()

    @classmethod
    def open(cls, path: Path | None = None, *, clock: Clock = time.time) -> Store:
        """Open (creating if needed) the database; default ``data_dir()/imprint.sqlite3``."""
        path = data_dir() / DB_NAME if path is None else path
        try:
            # Only this user reads the conversations: folders made 0700, the database (and so
            # its -wal and -shm, which SQLite creates with its mode) 0600.
            private_folder(path.parent)
            private_database(path)
        except OSError as error:  # IMPRINT_DATA_DIR=/dev/null, a read-only or unreadable folder
            raise StoreError(
                f"the data folder {path.parent} cannot be used: {error.strerror or error}. "
                "Set IMPRINT_DATA_DIR to a folder this user can write."
            ) from None
        with naming_problems(path):
            db = apsw.Connection(str(path))
        try:
            with naming_problems(path):
                _configure(db, path)
                migrate(db, path)
        except apsw.Error as error:
            db.close()
            raise StoreError(f"cannot use the database {path}: {error}") from error
        except BaseException:
            db.close()
            raise
        return cls(db, path, clock=clock)

    # -- plumbing for other modules --

    @property
    def path(self) -> Path:
        return self._path

    @contextmanager
    def _connection(self) -> Iterator[apsw.Connection]:
        """This thread's connection for one call: the one it holds already, else an idle one or a new one."""
        held: apsw.Connection | None = getattr(self._held, "db", None)
        if held is not None:
            yield held  # a call nested in another on this thread shares its connection (and transaction)
            return
        with self._pool_lock:
            if self._closed:
                raise StoreError(f"the database {self._path} is closed: imprintd is stopping.")
            db = self._idle.pop() if self._idle else None
            if db is None:
                self._open_connections += 1
        if db is None:
            try:
                db = self._connect()
            except BaseException:
                with self._pool_lock:
                    self._open_connections -= 1
                raise
        self._held.db = db
        try:
            yield db
        finally:
            self._held.db = None
            with self._pool_lock:
                if self._closed:
                    self._open_connections -= 1
                    db.close()  # closed while this call ran (an abandoned wait, say): last out closes
                else:
                    self._idle.append(db)

    def _connect(self) -> apsw.Connection:
        """One more connection to the database ``open`` set up (WAL is kept in the file)."""
        with naming_problems(self._path):
            db = apsw.Connection(str(self._path))
            try:
                _configure_connection(db)
            except BaseException:
                db.close()
                raise
        return db

    @contextmanager
    def reading(self) -> Iterator[apsw.Connection]:
        """A connection of this thread's own to read several statements from (other modules'
        tables, such as the history index's); write through ``transaction()``.

        A problem with the file (busy past the timeout, damaged, disk full) is raised as a
        StoreError naming it and the way out (``database_problem``), here as at start-up.
        """
        with self._connection() as db, naming_problems(self._path):
            yield db

    @contextmanager
    def transaction(self) -> Iterator[apsw.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction on this thread's connection; commit on success."""
        with self._connection() as db, naming_problems(self._path), immediate(db):
            yield db

    @contextmanager
    def stopped_by(self, stop: threading.Event | None) -> Iterator[None]:
        """Statements this thread runs inside end soon after ``stop`` is set, raising ReadStopped:
        a search whose request was cancelled stops instead of holding its thread to the end.

        SQLite looks at the flag every ``STOP_CHECK_STEPS`` steps of its virtual machine (its
        progress handler); a write ended so is rolled back whole, as any failed transaction.
        """
        if stop is None:
            yield
            return
        if stop.is_set():
            raise ReadStopped("the read was stopped before it began: its request was cancelled")
        with self._connection() as db:
            db.set_progress_handler(stop.is_set, STOP_CHECK_STEPS)
            try:
                yield
            except apsw.InterruptError as error:
                raise ReadStopped("the read was stopped: its request was cancelled") from error
            finally:
                db.set_progress_handler(None)

    def close(self) -> None:
        """Close every idle connection now, and each one in use when its call ends."""
        with self._pool_lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._open_connections -= len(idle)
        for db in idle:
            db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- ConversationStore --

    def create_session(
        self, *, title: str = "", workspace: str | None = None, session_id: str | None = None
    ) -> SessionInfo:
        now = self._clock()
        session_id = session_id or new_session_id()
        with self.transaction() as db:
            db.execute(
                "INSERT INTO sessions (id, title, workspace, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
                (session_id, title, workspace, now, now),
            )
        return SessionInfo(
            id=session_id,
            title=title,
            workspace=workspace,
            created_at=now,
            updated_at=now,
            message_count=0,
            persist=True,
        )

    def session(self, session_id: str) -> SessionInfo:
        with self.reading() as db:
            row = db.execute(f"SELECT {_SESSION_COLUMNS} FROM sessions s WHERE s.id = ?", (session_id,)).fetchone()
        if row is None:
            raise SessionNotFound(session_id)
        return _session_from_row(row)

    def sessions(self) -> list[SessionInfo]:
        # rowid breaks ties between equal timestamps: the later-created session first.
        with self.reading() as db:
            rows = db.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions s ORDER BY s.updated_at DESC, s.rowid DESC"
            ).fetchall()
        return [_session_from_row(row) for row in rows]

    def delete_session(self, session_id: str) -> None:
        # Messages and the summary go with it (ON DELETE CASCADE).
        with self.transaction() as db:
            db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
            if db.changes() == 0:
                raise SessionNotFound(session_id)
        self._views.forget(session_id)

    def append(self, session_id: str, message: Message) -> Message:
        """Store ``message`` as the session's next one; returns it with its ``seq``.

        Any ``seq`` the message carries is replaced: the store numbers messages.
        """
        return self.extend(session_id, [message])[0]

    def extend(self, session_id: str, messages: Sequence[Message]) -> list[Message]:
        """Store ``messages`` as the session's next ones in one transaction: all or none."""
        now = self._clock()
        stored: list[Message] = []
        with self.transaction() as db:
            title = db.execute("SELECT title FROM sessions WHERE id = ?", (session_id,)).fetchone()
            if title is None:
                raise SessionNotFound(session_id)
            seq = (
                db.execute(  # an aggregate: always one row
                    "SELECT coalesce(max(seq), 0) FROM messages WHERE session_id = ?", (session_id,)
                ).fetchone()
                or (0,)
            )[0]
            new_title = title[0]
            for message in messages:
                seq += 1
                db.execute(
                    "INSERT INTO messages"
                    " (session_id, seq, role, content, tool_calls, tool_call_id, name, sources,"
                    " model_text, reasoning, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        session_id,
                        seq,
                        message.role,
                        message.content,
                        msgspec.json.encode(message.tool_calls).decode(),
                        message.tool_call_id,
                        message.name,
                        msgspec.json.encode(message.sources).decode(),
                        message.model_text,
                        message.reasoning,
                        now,
                    ),
                )
                new_title = new_title or (title_from(message.content) if message.role == "user" else "")
                stored.append(msgspec.structs.replace(message, seq=seq))
            db.execute("UPDATE sessions SET updated_at = ?, title = ? WHERE id = ?", (now, new_title, session_id))
            # Indexed in the same transaction: the index never lags what is stored.
            history_index.catch_up(db, session_id, _to_index)
        return stored

    def messages(self, session_id: str, *, after: int = 0) -> list[Message]:
        """The session's messages in order; with ``after``, only those numbered above it."""
        return self.view(session_id).messages(after=after)

    def view(self, session_id: str) -> SessionView:
        """The session's ``SessionView``, extended with the messages stored since it was last read.

        Raises SessionNotFound like a read. The session's identity (rowid, creation time, the
        random incarnation drawn when its row was made) is checked on each call: a session
        deleted by another imprintd on the same database and made again under the same id gets
        a new view, not what the old one held (SQLite may give it the old rowid, and the clock
        the same time).
        """
        with self.reading() as db:
            found = db.execute(
                "SELECT rowid, created_at, incarnation FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            if found is None:
                raise SessionNotFound(session_id)
            view = self._views.get(session_id, tuple(found))
            rows = db.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE session_id = ? AND seq > ? ORDER BY seq",
                (session_id, view.last_seq),
            ).fetchall()
        view.extend(map(_message_from_row, rows))
        self._views.keep(view)
        return view

    def listable(
        self, session_id: str, first: int, last: int, *, longer_than: int, unlisted_calls: str
    ) -> list[Message]:
        """Messages ``first..last`` a summary's covered material can name, in order: user messages
        over ``longer_than`` characters, tool results but those whose call id starts with
        ``unlisted_calls`` (first looks), and the calls that made them (not the looks' own); the
        rest are not looked at again, so a reply's cost does not grow with what the summary covers."""
        return _listed(self.view(session_id), first, last, longer_than, unlisted_calls)

    def oldest_seq(self, session_id: str) -> int | None:
        with self.reading() as db:
            self._require(session_id)
            row = db.execute("SELECT min(seq) FROM messages WHERE session_id = ?", (session_id,)).fetchone()
        return row[0] if row else None

    def summary(self, session_id: str) -> StoredSummary | None:
        with self.reading() as db:
            self._require(session_id)
            row = db.execute(
                "SELECT text, first_seq, last_seq, retry_at FROM chat_summaries WHERE session_id = ?",
                (session_id,),
            ).fetchone()
        if row is None:
            return None
        text, first_seq, last_seq, retry_at = row
        return StoredSummary(text=text, first_seq=first_seq, last_seq=last_seq, retry_at=retry_at)

    def save_summary(self, session_id: str, summary: StoredSummary) -> None:
        """Store ``summary`` for the session, replacing any earlier one."""
        _check_summary(summary)
        with self.transaction() as db:
            self._require(session_id)
            db.execute(
                "INSERT INTO chat_summaries (session_id, text, first_seq, last_seq, retry_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (session_id) DO UPDATE SET text = excluded.text,"
                " first_seq = excluded.first_seq, last_seq = excluded.last_seq,"
                " retry_at = excluded.retry_at, updated_at = excluded.updated_at",
                (session_id, summary.text, summary.first_seq, summary.last_seq, summary.retry_at, self._clock()),
            )

    def rename_session(self, session_id: str, title: str) -> SessionInfo:
        """Give the session ``title``; its updated time stays (renaming is not a new message)."""
        with self.transaction() as db:
            db.execute("UPDATE sessions SET title = ? WHERE id = ?", (title, session_id))
            if db.changes() == 0:
                raise SessionNotFound(session_id)
        return self.session(session_id)

    def search_statistics(self, terms: Sequence[str]) -> tuple[int, float, dict[str, int]]:
        """Over every stored session's index: the searchable windows, their average length in words,
        and how many windows hold each of ``terms`` (what ``search``'s weights are made from)."""
        self._index_every_session()
        terms = list(dict.fromkeys(terms))
        with self.reading() as db:
            totals: tuple[Any, ...] = db.execute(  # an aggregate: always one row
                "SELECT coalesce(sum(windows), 0), coalesce(sum(words), 0) FROM history_sessions"
            ).fetchone() or (0, 0)
            windows, words = totals
            counts = dict.fromkeys(terms, 0)
            if terms:
                found: list[tuple[Any, ...]] = db.execute(
                    "SELECT term, count(*) FROM history_postings"
                    f" WHERE term IN ({', '.join('?' * len(terms))}) GROUP BY term",
                    terms,
                ).fetchall()
                counts.update(found)
        return windows, words / windows if windows else 0.0, counts

    def search(
        self,
        weights: dict[str, float],
        *,
        average_words: float,
        k1: float,
        b: float,
        workspace: str | None = None,
        after: float | None = None,
        before: float | None = None,
        limit: int = 20,
        offset: int = 0,
        holding: Sequence[str] = (),
    ) -> tuple[list[FoundMessage], bool]:
        """Messages ``offset`` .. ``offset + limit`` of every stored session holding any term of
        ``weights`` (term → idf), best first, and whether more follow.

        With ``holding``, only windows holding one of those terms are scored (still with every term
        of ``weights``): the caller's pruning of windows that hold only common words, whose postings
        are most of a search's reading; the caller checks that no such window could have ranked.

        A window scores BM25 (``k1``, ``b``, windows ``average_words`` long) times the share of the
        weight it matches; a message its best window. ``workspace`` keeps sessions of that folder or
        one inside it; ``after`` and ``before`` (Unix seconds) bound when the message was stored.
        SQLite scores every window holding a term, from the postings by term (migrations 5 and 6),
        and keeps only the best ones (a bounded sort); the best window of each message is picked here.
        """
        self._index_every_session()
        total_weight = sum(weights.values())
        if not weights or total_weight <= 0:
            return [], False
        params: dict[str, Any] = {
            "weights": msgspec.json.encode(weights).decode(),
            "k1": k1,
            "b": b,
            "total_weight": total_weight,
            "average": average_words or 1.0,
        }
        # Filters join only when asked: reading every candidate's message row costs more than the
        # scoring (a message's row holds its text). Scoring reads the postings index alone (each
        # posting carries its window's length, migration 6); the best windows' rows are read after.
        joins, filters = "", []
        if workspace is not None:
            under = workspace.rstrip("/") + "/"
            joins += (
                " JOIN history_sessions h ON h.id = p.history_id JOIN sessions s ON s.id = h.session_id"
                " AND (s.workspace = :workspace OR substr(s.workspace, 1, :under_length) = :under)"
            )
            params |= {"workspace": workspace, "under": under, "under_length": len(under)}
        if after is not None or before is not None:
            joins += (
                " JOIN history_windows w ON w.history_id = p.history_id AND w.window = p.window"
                " JOIN messages m ON m.session_id = (SELECT session_id FROM history_sessions WHERE id = p.history_id)"
                " AND m.seq = w.seq"
            )
            if after is not None:
                filters.append("m.created_at >= :after")
                params["after"] = after
            if before is not None:
                filters.append("m.created_at < :before")
                params["before"] = before
        where = " AND ".join(filters) or "1"
        part = "p.count * (:k1 + 1) / (p.count + :k1 * (1 - :b + :b * p.words / :average))"
        if holding:
            # The windows holding one of ``holding`` are found first, and each looks up its postings
            # of every term (the CROSS JOINs keep SQLite from reading a whole session's postings per window).
            params["holding"] = msgspec.json.encode(list(holding)).decode()
            postings = (
                f"SELECT p.history_id AS history_id, p.window AS window, q.weight * {part} AS part, q.weight AS weight"
                " FROM (SELECT DISTINCT history_id, window FROM history_postings"
                "  WHERE term IN (SELECT value FROM json_each(:holding))) c"
                " CROSS JOIN q CROSS JOIN history_postings p"
                f" ON p.term = q.term AND p.history_id = c.history_id AND p.window = c.window{joins} WHERE {where}"
            )
        elif len(weights) <= MERGED_TERMS:
            # Each term's postings come from the by-term index in window order, so SQLite merges the
            # terms' lists (UNION ALL … ORDER BY) and sums each window's as they pass: grouping them
            # all in a temporary B-tree first was half of a search's time.
            branches = []
            for n, (term, weight) in enumerate(weights.items()):
                params |= {f"term{n}": term, f"weight{n}": weight}
                branches.append(
                    f"SELECT p.history_id AS history_id, p.window AS window, :weight{n} * {part} AS part,"
                    f" :weight{n} AS weight FROM history_postings p{joins} WHERE p.term = :term{n} AND {where}"
                )
            postings = " UNION ALL ".join(branches) + " ORDER BY 1, 2"
        else:
            postings = (
                f"SELECT p.history_id AS history_id, p.window AS window, q.weight * {part} AS part, q.weight AS weight"
                f" FROM q JOIN history_postings p ON p.term = q.term{joins} WHERE {where}"
            )
        # Equal scores: the newer session, then the later message, goes first (a window's number
        # grows with its message's seq; within a message the earlier window is the hit).
        scored = f"""
                SELECT history_id, window, sum(part) * sum(weight) / :total_weight
                FROM ({postings})
                GROUP BY history_id, window"""
        if len(weights) == 1 and not holding:
            # One term: a window has one posting, so no grouping (half a one-word search's time);
            # the same arithmetic as the sums of one value, so the same scores to the last bit.
            scored = f"SELECT history_id, window, part * weight / :total_weight FROM ({postings})"
        sql = f"""
            WITH q(term, weight) AS (SELECT key, value FROM json_each(:weights)),
            best(history_id, window, score) AS (
                {scored}
                ORDER BY 3 DESC, history_id DESC, window DESC
                LIMIT :windows
            )
            SELECT b.history_id, w.seq, w.start_char, w.end_char, b.score
            FROM best b JOIN history_windows w ON w.history_id = b.history_id AND w.window = b.window
            ORDER BY b.score DESC, b.history_id DESC, w.seq DESC, w.start_char
        """
        wanted = offset + limit + 1  # one more than the page tells whether another follows
        windows = wanted * 3  # a long message has several windows among the best
        with self.reading() as db:
            while True:
                rows: list[tuple[Any, ...]] = db.execute(sql, params | {"windows": windows}).fetchall()
                best: dict[tuple[int, int], tuple[Any, ...]] = {}
                for row in rows:
                    best.setdefault((row[0], row[1]), row)
                if len(best) >= wanted or len(rows) < windows:
                    break
                windows *= 4
            page = list(best.values())[offset : offset + limit]
            found = self._found(db, page)
        return found, len(best) > offset + limit

    def history_index(self, session_id: str) -> HistoryIndex:
        """The session's conversation_history index, kept in this database."""
        with self.reading():
            self._require(session_id)
        return SqliteHistoryIndex(self, session_id, _to_index)

    def _found(self, db: apsw.Connection, page: list[tuple[Any, ...]]) -> list[FoundMessage]:
        """The messages of ``page`` (history id, seq, window start and end, score), in its order,
        read in one statement (one each was a fifth of a one-word search)."""
        keys = msgspec.json.encode([[history_id, seq] for history_id, seq, *_ in page]).decode()
        rows: list[tuple[Any, ...]] = db.execute(
            "SELECT h.id, m.seq, s.id, s.title, s.workspace, m.role, m.content, m.created_at FROM json_each(?) j"
            " JOIN history_sessions h ON h.id = j.value ->> 0 JOIN sessions s ON s.id = h.session_id"
            " JOIN messages m ON m.session_id = s.id AND m.seq = j.value ->> 1",
            (keys,),
        ).fetchall()
        messages = {(row[0], row[1]): row[2:] for row in rows}
        found = []
        for history_id, seq, start, end, score in page:
            assert (history_id, seq) in messages, "a window's message is stored with it"
            session_id, title, workspace, role, content, created_at = messages[history_id, seq]
            found.append(
                FoundMessage(
                    session_id=session_id,
                    title=title,
                    workspace=workspace,
                    seq=seq,
                    role=role,
                    content=content,
                    created_at=created_at,
                    start=start,
                    end=end,
                    score=score,
                )
            )
        return found

    def _index_every_session(self) -> None:
        """Index the sessions stored before the history index existed (once per open store: every
        later write indexes what it stores)."""
        if self._all_indexed:
            return
        with self.reading() as db:
            behind = [
                str(session_id)
                for (session_id,) in db.execute(
                    "SELECT s.id FROM sessions s LEFT JOIN history_sessions h ON h.session_id = s.id"
                    " WHERE coalesce(h.last_seq, 0)"
                    " < (SELECT coalesce(max(seq), 0) FROM messages m WHERE m.session_id = s.id)"
                ).fetchall()
            ]
        for session_id in behind:
            with self.transaction() as db:
                history_index.catch_up(db, session_id, _to_index)
        self._all_indexed = True

    def _require(self, session_id: str) -> None:
        with self.reading() as db:
            found = db.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if found is None:
            raise SessionNotFound(session_id)


def _seq(message: Message) -> int:
    """A stored message's number (set on every message a store holds)."""
    assert message.seq is not None, "only stored messages are numbered"
    return message.seq


def _listable(
    messages: Iterable[Message], first: int, last: int, longer_than: int, unlisted_calls: str
) -> list[Message]:
    """What ``listable`` returns of ``messages`` (see ``ConversationStore``)."""
    return [
        m
        for m in messages
        if first <= _seq(m) <= last
        and (
            # A call names a listed result only if some of its calls are not unlisted ones: a
            # first look's call, one a reply, would otherwise be read with every summary block.
            any(not call.id.startswith(unlisted_calls) for call in m.tool_calls)
            or (m.role == "tool" and not (m.tool_call_id or "").startswith(unlisted_calls))
            or (m.role == "user" and len(m.content) > longer_than)
        )
    ]


def _listed(view: SessionView, first: int, last: int, longer_than: int, unlisted_calls: str) -> list[Message]:
    """``listable`` of the view's messages: the listable ones are kept with the view, found among
    those new since the last call (the range is the summary's, which grows with the session)."""
    listed = view.derived(("listable", longer_than, unlisted_calls), _Listed)
    with listed.lock:
        new = view.since(listed.scanned)
        if new:
            listed.messages.extend(_listable(new, 0, _seq(new[-1]), longer_than, unlisted_calls))
            listed.scanned += len(new)
        found = listed.messages
        return found[bisect.bisect_left(found, first, key=_seq) : bisect.bisect_right(found, last, key=_seq)]


@dataclass
class _Listed:
    """A view's listable messages by one rule: how many of its messages were looked at, and the
    listable ones among them."""

    scanned: int = 0
    messages: list[Message] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _to_index(db: apsw.Connection, session_id: str, after_seq: int) -> list[history_index.IndexedMessage]:
    """The session's stored messages after ``after_seq``, as the history index takes them."""
    rows: list[tuple[Any, ...]] = db.execute(
        f"SELECT {_MESSAGE_COLUMNS}, created_at FROM messages WHERE session_id = ? AND seq > ? ORDER BY seq",
        (session_id, after_seq),
    ).fetchall()
    messages = [_message_from_row(row[:-1]) for row in rows]
    created_at = {row[0]: row[-1] for row in rows}
    known = calls_by_id(messages)
    if any(m.role == "tool" and m.tool_call_id not in known for m in messages):
        # A result whose call was stored earlier: its query is found through that call.
        earlier: list[tuple[Any, ...]] = db.execute(
            "SELECT tool_calls FROM messages WHERE session_id = ? AND seq <= ? AND tool_calls != '[]'"
            " ORDER BY seq DESC LIMIT 50",
            (session_id, after_seq),
        ).fetchall()
        known = {call.id: call for (calls,) in earlier for call in _decode_tool_calls(calls)} | known
    return indexed_messages(messages, known, created_at)


def _configure(db: apsw.Connection, path: Path) -> None:
    """Connection settings; run before migrating (journal_mode cannot change inside a transaction)."""
    db.set_busy_timeout(BUSY_TIMEOUT_MS)
    # Refuse a newer database before anything writes to it (switching it to WAL would).
    _refuse_newer(path, _user_version(db), len(MIGRATIONS))
    mode = switch_to_wal(db, BUSY_TIMEOUT_MS)
    if mode.lower() != "wal":
        raise StoreError(
            f"cannot use write-ahead logging for {path} (journal mode stays {mode!r}); "
            "set IMPRINT_DATA_DIR to a directory on a local disk."
        )
    _configure_connection(db)


def _configure_connection(db: apsw.Connection) -> None:
    """What each connection sets for itself (the journal mode is the file's)."""
    db.set_busy_timeout(BUSY_TIMEOUT_MS)
    # FULL rather than NORMAL: with WAL, NORMAL keeps the database consistent but may lose
    # the last commits on power loss or an OS crash, and a message counts as acknowledged
    # once committed. FULL's one fsync per commit costs milliseconds; a reply costs seconds.
    db.pragma("synchronous", "FULL")
    db.pragma("foreign_keys", True)


def switch_to_wal(db: apsw.Connection, timeout_ms: int) -> str:
    """Put the database in write-ahead logging; returns the journal mode SQLite reports.

    A new file's first switch needs its write lock, and SQLite refuses it at once, without
    waiting the busy timeout, while another connection holds that lock: two imprintd opening
    a new database together (two editors starting) would leave one with "busy". So the
    switch is tried again for ``timeout_ms``, the busy timeout. A file already in WAL stays
    so (the mode is kept in the file): nothing to switch, nothing to wait for.
    """
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        try:
            return str(db.pragma("journal_mode", "wal"))
        except apsw.BusyError:
            if time.monotonic() >= deadline:
                raise
            _pause_before_retry()


def _pause_before_retry() -> None:
    time.sleep(WAL_SWITCH_PAUSE_S)


# --- the in-memory store -------------------------------------------------------------------


@dataclass
class _MemorySession:
    info: SessionInfo
    order: int  # creation order, to break ties between equal timestamps
    messages: deque[Message] = field(default_factory=lambda: deque(maxlen=MEMORY_MESSAGE_LIMIT))
    next_seq: int = 1
    summary: StoredSummary | None = None
    index: MemoryHistoryIndex = field(default_factory=MemoryHistoryIndex)


def clip_tool_result(content: str, limit: int = MEMORY_TOOL_RESULT_LIMIT) -> str:
    """``content`` cut to at most ``limit`` characters, ending with a note that it was cut."""
    if len(content) <= limit:
        return content
    # The note tells the model the result is incomplete rather than letting it trust the cut.
    note = f"\n[clipped: the result had {len(content):,} characters]"
    keep = max(limit - len(note), 0)
    return (content[:keep] + note)[:limit]


class MemoryStore:
    """Sessions with persistence off (ADR 0141's voice case): kept in memory, never on disk.

    A session keeps its newest ``MEMORY_MESSAGE_LIMIT`` messages (the oldest drop out, seq
    numbers keep counting) and tool results clipped to ``MEMORY_TOOL_RESULT_LIMIT``
    characters; its history index follows, dropping what drops out. Everything is gone when
    the object is.
    """

    def __init__(self, *, clock: Clock = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[str, _MemorySession] = {}
        self._created = 0
        self._views = SessionViews()

    def create_session(
        self, *, title: str = "", workspace: str | None = None, session_id: str | None = None
    ) -> SessionInfo:
        now = self._clock()
        info = SessionInfo(
            id=session_id or new_session_id(),
            title=title,
            workspace=workspace,
            created_at=now,
            updated_at=now,
            message_count=0,
            persist=False,
        )
        with self._lock:
            self._created += 1
            self._sessions[info.id] = _MemorySession(info=info, order=self._created)
        return info

    def session(self, session_id: str) -> SessionInfo:
        with self._lock:
            return self._get(session_id).info

    def sessions(self) -> list[SessionInfo]:
        with self._lock:
            held = sorted(self._sessions.values(), key=lambda s: (s.info.updated_at, s.order), reverse=True)
            return [s.info for s in held]

    def delete_session(self, session_id: str) -> None:
        with self._lock:
            self._get(session_id)
            del self._sessions[session_id]
        self._views.forget(session_id)

    def append(self, session_id: str, message: Message) -> Message:
        return self.extend(session_id, [message])[0]

    def extend(self, session_id: str, messages: Sequence[Message]) -> list[Message]:
        now = self._clock()
        stored: list[Message] = []
        with self._lock:
            held = self._get(session_id)
            calls = calls_by_id(held.messages)
            for message in messages:
                content = clip_tool_result(message.content) if message.role == "tool" else message.content
                stored.append(msgspec.structs.replace(message, content=content, seq=held.next_seq))
                held.next_seq += 1
                if len(held.messages) == held.messages.maxlen:
                    held.index.remove(_seq(held.messages[0]))
                held.messages.append(stored[-1])  # the deque drops the oldest past the limit
                title = held.info.title or (title_from(content) if message.role == "user" else "")
                held.info = msgspec.structs.replace(held.info, title=title)
            kept = [m for m in stored if _seq(m) >= _seq(held.messages[0])]
            held.index.add(indexed_messages(kept, calls, dict.fromkeys((_seq(m) for m in kept), now)))
            held.info = msgspec.structs.replace(held.info, updated_at=now, message_count=len(held.messages))
        return stored

    def messages(self, session_id: str, *, after: int = 0) -> list[Message]:
        with self._lock:
            held = self._get(session_id).messages
            # Numbers run without a gap: the messages after ``after`` are the deque's tail.
            skip = max(0, min(len(held), after - _seq(held[0]) + 1)) if held else 0
            return list(itertools.islice(held, skip, None))

    def listable(
        self, session_id: str, first: int, last: int, *, longer_than: int, unlisted_calls: str
    ) -> list[Message]:
        return _listed(self.view(session_id), first, last, longer_than, unlisted_calls)

    def view(self, session_id: str) -> SessionView:
        """The session's ``SessionView``, extended with what was stored since. Once its oldest
        messages drop out (past ``MEMORY_MESSAGE_LIMIT``), the session gets a new view beginning
        with what it keeps."""
        with self._lock:
            held = list(self._get(session_id).messages)
        view = self._views.get(session_id)
        if held and view.first_seq not in (None, _seq(held[0])):
            self._views.forget(session_id)
            view = self._views.get(session_id)
        view.extend(held[max(0, len(held) - (_seq(held[-1]) - view.last_seq)) :] if held else ())
        self._views.keep(view)
        return view

    def oldest_seq(self, session_id: str) -> int | None:
        with self._lock:
            held = self._get(session_id).messages
            return _seq(held[0]) if held else None

    def summary(self, session_id: str) -> StoredSummary | None:
        with self._lock:
            return self._get(session_id).summary

    def save_summary(self, session_id: str, summary: StoredSummary) -> None:
        _check_summary(summary)
        with self._lock:
            self._get(session_id).summary = summary

    @contextmanager
    def stopped_by(self, stop: threading.Event | None) -> Iterator[None]:
        """Nothing to stop: a search of memory is bounded by its terms and one session's messages."""
        yield

    def history_index(self, session_id: str) -> HistoryIndex:
        with self._lock:
            return self._get(session_id).index

    def rename_session(self, session_id: str, title: str) -> SessionInfo:
        with self._lock:
            held = self._get(session_id)
            held.info = msgspec.structs.replace(held.info, title=title)
            return held.info

    def _get(self, session_id: str) -> _MemorySession:
        held = self._sessions.get(session_id)
        if held is None:
            raise SessionNotFound(session_id)
        return held
