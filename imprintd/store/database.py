"""``Store``: sessions, their messages and running summaries in the one SQLite database of the data
dir, opened with apsw (docs/architecture.md, "Storage").

Sessions, their messages (numbered by a per-session ``seq``; an answer keeps its sources), ADR
0141's ``chat_summaries`` (the running summary's text, the messages it covers and the retry point
after a failed attempt) and the ``conversation_history`` index (``store/history_index.py``),
written in the same transaction as the messages it indexes. The schema moves forward through the
numbered functions of ``store/migrations.py``.

Each store hands out a session's messages through its ``SessionView`` (``view``,
``session_view.py``): messages are never changed once stored, so a reply decodes only those
stored since the last read, and its cost does not grow with the session; what is derived from
them hangs on the view and goes with it when the session is deleted.

SQLite's errors about the file itself (busy past the busy timeout, damaged, disk full, not
writable) become a ``StoreError`` naming the file and what to do about that cause
(``sqlite.database_problem``), the same at start-up as on any later read or write.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import apsw
import msgspec

from imprintd.messages import Message, SourceRef, ToolCall, calls_by_id
from imprintd.private import private_database, private_folder
from imprintd.session_view import SessionView, SessionViews
from imprintd.settings import data_dir
from imprintd.store import history_index, migrations
from imprintd.store.history_index import HistoryIndex, IndexedMessage, SqliteHistoryIndex, indexed_messages
from imprintd.store.sessions import (
    Clock,
    ListRule,
    SessionInfo,
    SessionNotFound,
    StoredSummary,
    check_summary,
    listed_in_view,
    new_session_id,
    title_from,
)
from imprintd.store.sqlite import BUSY_TIMEOUT_MS, StoreError, immediate, naming_problems, switch_to_wal

DB_NAME = "imprint.sqlite3"
#: SQLite virtual-machine steps between looks at a read's stop flag (``Store.stopped_by``): some
#: thousandths of a second of work, and the look itself costs a Python call.
STOP_CHECK_STEPS = 10_000
#: Every commit waits for the disk (``_configure_connection``), but for what ``transaction`` is
#: told need not.
SYNCHRONOUS = "FULL"


class ReadStopped(StoreError):
    """A read ended by its stop flag: whoever asked no longer waits for the answer (``stopped_by``)."""


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
                migrations.migrate(db, path)
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
    def transaction(self, *, wait_for_disk: bool = True) -> Iterator[apsw.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction on this thread's connection; commit on success.

        ``wait_for_disk=False``: the commit returns once SQLite has written it to the log, without
        waiting for the disk to confirm it (``synchronous = NORMAL`` for this one commit). It is
        durable once a later commit has waited for the disk, or ``make_durable`` has: the log is
        one file, and syncing it syncs every commit in it.
        """
        with self._connection() as db, naming_problems(self._path):
            if wait_for_disk:
                with immediate(db):
                    yield db
                return
            db.pragma("synchronous", "NORMAL")
            try:
                with immediate(db):
                    yield db
            finally:
                db.pragma("synchronous", SYNCHRONOUS)

    def make_durable(self) -> None:
        """Return once every commit so far is on disk, those made without waiting for it included.

        Their pages are in the write-ahead log, or were copied from it by a checkpoint, which syncs
        the log first and the database after: syncing the log is what is left to do.
        """
        log = self._path.with_name(self._path.name + "-wal")
        try:
            handle = os.open(log, os.O_RDONLY)
            try:
                os.fsync(handle)
            finally:
                os.close(handle)
        except FileNotFoundError:
            return  # no log: nothing was committed since the database was closed
        except OSError as error:
            raise StoreError(f"the database's log {log} cannot be synced: {error.strerror or error}") from None

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
            _insert_session(db, session_id, title, workspace, now)
        return SessionInfo(
            id=session_id,
            title=title,
            workspace=workspace,
            created_at=now,
            updated_at=now,
            message_count=0,
            persist=True,
        )

    def start_session(
        self,
        first: Message,
        *,
        workspace: str | None = None,
        session_id: str | None = None,
        wait_for_disk: bool = True,
    ) -> tuple[SessionInfo, Message]:
        """A new session and its first message, stored in one transaction: one commit (and its
        fsync) where ``create_session`` then ``append`` take two, and never a session without it.
        ``wait_for_disk``: see ``transaction``."""
        now = self._clock()
        session_id = session_id or new_session_id()
        with self.transaction(wait_for_disk=wait_for_disk) as db:
            _insert_session(db, session_id, "", workspace, now)
            [stored] = self._extend_in(db, session_id, [first], now)
        info = SessionInfo(
            id=session_id,
            title=title_from(first.content) if first.role == "user" else "",
            workspace=workspace,
            created_at=now,
            updated_at=now,
            message_count=1,
            persist=True,
        )
        return info, stored

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

    def append(self, session_id: str, message: Message, *, wait_for_disk: bool = True) -> Message:
        """Store ``message`` as the session's next one; returns it with its ``seq``.

        Any ``seq`` the message carries is replaced: the store numbers messages.
        ``wait_for_disk``: see ``transaction``.
        """
        with self.transaction(wait_for_disk=wait_for_disk) as db:
            return self._extend_in(db, session_id, [message], self._clock())[0]

    def extend(self, session_id: str, messages: Sequence[Message]) -> list[Message]:
        """Store ``messages`` as the session's next ones in one transaction: all or none."""
        with self.transaction() as db:
            return self._extend_in(db, session_id, messages, self._clock())

    def _extend_in(
        self, db: apsw.Connection, session_id: str, messages: Sequence[Message], now: float
    ) -> list[Message]:
        """``extend`` inside the caller's transaction."""
        stored: list[Message] = []
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

    def listable(self, session_id: str, first: int, last: int, *, rule: ListRule) -> list[Message]:
        """Messages ``first..last`` a summary's covered material can name, by its ``rule``, in order;
        found among those new since the last call (per rule), so a reply's cost does not grow with
        what the summary covers."""
        return listed_in_view(self.view(session_id), first, last, rule)

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
        check_summary(summary)
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

    def history_index(self, session_id: str) -> HistoryIndex:
        """The session's conversation_history index, kept in this database."""
        with self.reading():
            self._require(session_id)
        return SqliteHistoryIndex(self, session_id, _to_index)

    def index_every_session(self) -> None:
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


def _insert_session(db: apsw.Connection, session_id: str, title: str, workspace: str | None, now: float) -> None:
    db.execute(
        "INSERT INTO sessions (id, title, workspace, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
        (session_id, title, workspace, now, now),
    )


def _to_index(db: apsw.Connection, session_id: str, after_seq: int) -> list[IndexedMessage]:
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
    migrations.refuse_newer(db, path)
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
    # (A reply's question is committed without waiting, its answer's commit waiting for both:
    # ``transaction``.)
    db.pragma("synchronous", SYNCHRONOUS)
    db.pragma("foreign_keys", True)
