"""Conversations kept in SQLite, and ephemeral ones kept in memory (docs/architecture.md, "Storage").

- ``database.py``: ``Store``, the SQLite database of the data dir (apsw);
- ``memory.py``: ``MemoryStore``, sessions with persistence off;
- ``sessions.py``: what both hold and hand out, and ``ConversationStore``, all the reply path needs;
- ``migrations.py``: the schema, moved forward by numbered functions;
- ``history_index.py`` and ``history_score.py``: the conversation history index, written with the
  messages it indexes, and how its windows score;
- ``sqlite.py``: the SQLite helpers the store and the workspace index share.

What callers use is re-exported here.
"""

from imprintd.store.database import DB_NAME, ReadStopped, Store
from imprintd.store.memory import MEMORY_MESSAGE_LIMIT, MEMORY_TOOL_RESULT_LIMIT, MemoryStore, clip_tool_result
from imprintd.store.migrations import MIGRATIONS
from imprintd.store.sessions import (
    TITLE_LIMIT,
    ConversationStore,
    ListRule,
    SessionInfo,
    SessionNotFound,
    StoredSummary,
    new_session_id,
    title_from,
)
from imprintd.store.sqlite import DatabaseBusy, DatabaseDamaged, StoreError, database_problem

__all__ = [
    "DB_NAME",
    "MEMORY_MESSAGE_LIMIT",
    "MEMORY_TOOL_RESULT_LIMIT",
    "MIGRATIONS",
    "TITLE_LIMIT",
    "ConversationStore",
    "DatabaseBusy",
    "DatabaseDamaged",
    "ListRule",
    "MemoryStore",
    "ReadStopped",
    "SessionInfo",
    "SessionNotFound",
    "Store",
    "StoreError",
    "StoredSummary",
    "clip_tool_result",
    "database_problem",
    "new_session_id",
    "title_from",
]
