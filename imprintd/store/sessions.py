"""What both stores hold and hand out: sessions, running summaries, and ``ConversationStore``, the
protocol ``Store`` (``store/database.py``) and ``MemoryStore`` (``store/memory.py``) implement and
the reply path needs; with the helpers both use.
"""

from __future__ import annotations

import bisect
import secrets
import threading
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import msgspec

from imprintd.messages import Message
from imprintd.printable import is_invisible, without_controls
from imprintd.session_view import SessionView
from imprintd.store.history_index import HistoryIndex
from imprintd.store.sqlite import StoreError

TITLE_LIMIT = 80

#: Where a store reads the time it stamps on sessions and messages (Unix seconds).
Clock = Callable[[], float]

#: Which of a summary's covered messages its covered material can name (``context/summary.listable``).
ListRule = Callable[[Message], bool]


class SessionInfo(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    title: str
    workspace: str | None
    created_at: float
    updated_at: float
    message_count: int
    persist: bool


class StoredSummary(msgspec.Struct, frozen=True, kw_only=True):
    """A session's running summary (docs/decisions.md, "Running summary"): covers messages ``first_seq..last_seq``.

    ``retry_at``: after a failed attempt, no new one until the session has this many
    messages (six more than at the failure); ``None`` when the last attempt succeeded.
    """

    text: str
    first_seq: int
    last_seq: int
    retry_at: int | None = None


class SessionNotFound(StoreError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session with id {session_id!r}")
        self.session_id = session_id


@runtime_checkable
class ConversationStore(Protocol):
    """What the reply path needs from a store; ``Store`` and ``MemoryStore`` both provide it.

    A reply reads only what its prompt can use: ``messages(after=...)`` the messages the
    running summary does not cover, ``listable`` what the summary's covered material names of
    the rest (by the ``rule`` the summary hands in: ``context/summary.listable``), ``oldest_seq``
    where its numbers start (numbers run without a gap from there: nothing stored is ever removed
    but the oldest).

    ``create_session`` stores a session under ``session_id`` when given (a front door that
    named the session before its first question), else under a new random id; ``start_session``
    stores one with its first message, together (a new reply's question).

    A reply's question is stored with ``wait_for_disk=False``: its commit does not wait for the
    disk, and the answer's commit, which does, makes both durable; a reply that ends without an
    answer calls ``make_durable`` before it is answered. So a reply waits for the disk once.
    """

    def create_session(
        self, *, title: str = "", workspace: str | None = None, session_id: str | None = None
    ) -> SessionInfo: ...
    def start_session(
        self,
        first: Message,
        *,
        workspace: str | None = None,
        session_id: str | None = None,
        wait_for_disk: bool = True,
    ) -> tuple[SessionInfo, Message]: ...
    def session(self, session_id: str) -> SessionInfo: ...
    def sessions(self) -> list[SessionInfo]: ...
    def delete_session(self, session_id: str) -> None: ...
    def append(self, session_id: str, message: Message, *, wait_for_disk: bool = True) -> Message: ...
    def make_durable(self) -> None: ...
    def extend(self, session_id: str, messages: Sequence[Message]) -> list[Message]: ...
    def messages(self, session_id: str, *, after: int = 0) -> list[Message]: ...
    def listable(self, session_id: str, first: int, last: int, *, rule: ListRule) -> list[Message]: ...
    def oldest_seq(self, session_id: str) -> int | None: ...
    def summary(self, session_id: str) -> StoredSummary | None: ...
    def save_summary(self, session_id: str, summary: StoredSummary) -> None: ...
    def history_index(self, session_id: str) -> HistoryIndex: ...
    def view(self, session_id: str) -> SessionView: ...
    def rename_session(self, session_id: str, title: str) -> SessionInfo: ...
    def stopped_by(self, stop: threading.Event | None) -> AbstractContextManager[None]: ...


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


def check_summary(summary: StoredSummary) -> None:
    if not 1 <= summary.first_seq <= summary.last_seq:
        raise ValueError(
            f"summary covers #{summary.first_seq}..#{summary.last_seq}; expected 1 <= first_seq <= last_seq"
        )


def seq_of(message: Message) -> int:
    """A stored message's number (set on every message a store holds)."""
    assert message.seq is not None, "only stored messages are numbered"
    return message.seq


def listed(messages: Iterable[Message], first: int, last: int, rule: ListRule) -> list[Message]:
    """What ``listable`` returns of ``messages``: those numbered ``first..last`` that ``rule`` keeps."""
    return [m for m in messages if first <= seq_of(m) <= last and rule(m)]


def listed_in_view(view: SessionView, first: int, last: int, rule: ListRule) -> list[Message]:
    """``listed`` of the view's messages: the listable ones are kept with the view, per rule, found
    among those new since the last call (the range is the summary's, which grows with the session)."""
    found = view.derived(("listable", rule), _Listed)
    with found.lock:
        new = view.since(found.scanned)
        if new:
            found.messages.extend(listed(new, 0, seq_of(new[-1]), rule))
            found.scanned += len(new)
        kept = found.messages
        return kept[bisect.bisect_left(kept, first, key=seq_of) : bisect.bisect_right(kept, last, key=seq_of)]


@dataclass
class _Listed:
    """A view's listable messages by one rule: how many of its messages were looked at, and the
    listable ones among them."""

    scanned: int = 0
    messages: list[Message] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
