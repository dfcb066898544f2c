"""The data database's schema, moved forward by ``PRAGMA user_version`` through the numbered
functions in ``MIGRATIONS``; a database written by a newer imprintd is refused rather than guessed at.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import apsw

from imprintd.store import history_index
from imprintd.store.sqlite import StoreError, immediate

Migration = Callable[[apsw.Connection], None]


def _migration_1_conversations(db: apsw.Connection) -> None:
    """Sessions, their messages, and their running summaries."""
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


def refuse_newer(db: apsw.Connection, path: Path) -> None:
    """Refuse a database written by a newer imprintd, before anything writes to it."""
    _refuse_newer(path, _user_version(db), len(MIGRATIONS))
