"""``MemoryStore``: sessions created with persistence off (a voice client's, say), kept in memory.

The same API as ``Store`` (both are a ``ConversationStore``), nothing on disk, at most 400 messages
a session and 4,000 characters a tool result, and an in-memory history index per session.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import msgspec

from imprintd.messages import Message, calls_by_id
from imprintd.session_view import SessionView, SessionViews
from imprintd.store.history_index import HistoryIndex, MemoryHistoryIndex, indexed_messages
from imprintd.store.sessions import (
    Clock,
    ListRule,
    SessionInfo,
    SessionNotFound,
    StoredSummary,
    check_summary,
    listed_in_view,
    new_session_id,
    seq_of,
    title_from,
)

# At most 400 messages, 4,000 characters a result (docs/architecture.md, "Storage").
MEMORY_MESSAGE_LIMIT = 400
MEMORY_TOOL_RESULT_LIMIT = 4_000


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
    """Sessions with persistence off (a voice client's, say): kept in memory, never on disk.

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

    def start_session(
        self,
        first: Message,
        *,
        workspace: str | None = None,
        session_id: str | None = None,
        wait_for_disk: bool = True,  # nothing here waits for a disk
    ) -> tuple[SessionInfo, Message]:
        info = self.create_session(workspace=workspace, session_id=session_id)
        [stored] = self.extend(info.id, [first])
        return self.session(info.id), stored

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

    def append(self, session_id: str, message: Message, *, wait_for_disk: bool = True) -> Message:
        return self.extend(session_id, [message])[0]

    def make_durable(self) -> None:
        """Nothing to do: nothing of it reaches a disk."""

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
                    held.index.remove(seq_of(held.messages[0]))
                held.messages.append(stored[-1])  # the deque drops the oldest past the limit
                title = held.info.title or (title_from(content) if message.role == "user" else "")
                held.info = msgspec.structs.replace(held.info, title=title)
            kept = [m for m in stored if seq_of(m) >= seq_of(held.messages[0])]
            held.index.add(indexed_messages(kept, calls, dict.fromkeys((seq_of(m) for m in kept), now)))
            held.info = msgspec.structs.replace(held.info, updated_at=now, message_count=len(held.messages))
        return stored

    def messages(self, session_id: str, *, after: int = 0) -> list[Message]:
        with self._lock:
            held = self._get(session_id).messages
            # Numbers run without a gap: the messages after ``after`` are the deque's tail.
            skip = max(0, min(len(held), after - seq_of(held[0]) + 1)) if held else 0
            return list(itertools.islice(held, skip, None))

    def listable(self, session_id: str, first: int, last: int, *, rule: ListRule) -> list[Message]:
        return listed_in_view(self.view(session_id), first, last, rule)

    def view(self, session_id: str) -> SessionView:
        """The session's ``SessionView``, extended with what was stored since. Once its oldest
        messages drop out (past ``MEMORY_MESSAGE_LIMIT``), the session gets a new view beginning
        with what it keeps."""
        with self._lock:
            held = list(self._get(session_id).messages)
        view = self._views.get(session_id)
        if held and view.first_seq not in (None, seq_of(held[0])):
            self._views.forget(session_id)
            view = self._views.get(session_id)
        view.extend(held[max(0, len(held) - (seq_of(held[-1]) - view.last_seq)) :] if held else ())
        self._views.keep(view)
        return view

    def oldest_seq(self, session_id: str) -> int | None:
        with self._lock:
            held = self._get(session_id).messages
            return seq_of(held[0]) if held else None

    def summary(self, session_id: str) -> StoredSummary | None:
        with self._lock:
            return self._get(session_id).summary

    def save_summary(self, session_id: str, summary: StoredSummary) -> None:
        check_summary(summary)
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
