"""One session's stored messages, appended to and never changed, and what is derived from them
(docs/decisions.md, "What a session's messages derive").

A stored message never changes, and only the session's deletion removes it, so what is derived
from a session's messages stays true while the session grows. A store hands out one
``SessionView`` per session (``ConversationStore.view``): its messages in order, extended on
read with those stored since (nothing before is read or decoded again), and the derivations
that hang on it (``SessionView.derived``), each extended with the view's new messages only:

- the ``conversation_history`` tool's numbering of the messages (``context/history.py``);
- fitting's per-message counts, drop points and pieces for the model in use
  (``context/fitting.py``), found by the messages' numbers;
- the listable messages of a summary's range (the store's ``listable``).

``SessionViews`` keeps a store's views, keyed by session id and checked against the session's
identity (a session made again under the same id gets a new view), within
``SESSION_VIEW_BYTES`` in all: the least recently read go first, and a view larger than the
whole bound alone is not kept (each read builds it anew, as a store without views would).
Deleting a session drops its view, and with it everything derived from it.
"""

from __future__ import annotations

import bisect
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar, cast

from imprintd.messages import Message

__all__ = ["SESSION_VIEW_BYTES", "SessionView", "SessionViews", "message_bytes"]

#: Bytes of messages, and of what is derived from them, a store's views hold in all (the least
#: recently read sessions go first past it; docs/decisions.md, "What a session's messages derive").
SESSION_VIEW_BYTES = 16 << 20
#: What a message is counted as besides its strings: the object and its fields, and its share of
#: each derivation (a count and two places in fitting's lists, an entry in the history's dicts,
#: a place in the listable ones), as ``tracemalloc`` measured them on ``bench_session_memory.py``.
MESSAGE_OVERHEAD_BYTES = 1_000

_T = TypeVar("_T")


def message_bytes(message: Message) -> int:
    """Bytes ``message`` is counted as in ``SESSION_VIEW_BYTES``: its strings as Python holds them
    (one to four bytes a character), and ``MESSAGE_OVERHEAD_BYTES``."""
    calls = sum(sys.getsizeof(call.id) + 100 * (1 + len(call.arguments)) for call in message.tool_calls)
    return (
        MESSAGE_OVERHEAD_BYTES
        + sys.getsizeof(message.content)
        + sys.getsizeof(message.model_text or "")
        + sys.getsizeof(message.reasoning or "")
        + calls
    )


def _seq(message: Message) -> int:
    assert message.seq is not None, "a view holds stored messages only"
    return message.seq


class SessionView:
    """One session's stored messages in order (``messages``), only ever appended to, and the
    derivations kept with them (``derived``). Threads share it: appends and look-ups take its
    lock; a derivation guards its own extension."""

    def __init__(self, session_id: str, identity: Hashable = None) -> None:
        self.session_id = session_id
        #: What tells this session from one made again under its id (the store's; None in memory).
        self.identity = identity
        self._lock = threading.Lock()
        self._messages: list[Message] = []
        self._derived: dict[Hashable, object] = {}
        #: ``message_bytes`` of every message held.
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._messages)

    @property
    def last_seq(self) -> int:
        """The number of the last message held; 0 when there is none."""
        with self._lock:
            return _seq(self._messages[-1]) if self._messages else 0

    @property
    def first_seq(self) -> int | None:
        with self._lock:
            return _seq(self._messages[0]) if self._messages else None

    def extend(self, messages: Iterable[Message]) -> None:
        """Append those of ``messages`` numbered after the last one held (two readers that read the
        same new rows append them once)."""
        with self._lock:
            last = _seq(self._messages[-1]) if self._messages else 0
            for message in messages:
                if _seq(message) > last:
                    self._messages.append(message)
                    self.bytes += message_bytes(message)
                    last = _seq(message)

    def messages(self, *, after: int = 0) -> list[Message]:
        """The messages numbered above ``after``, in order (a new list)."""
        with self._lock:
            return self._messages[bisect.bisect_right(self._messages, after, key=_seq) :]

    def since(self, position: int) -> list[Message]:
        """The messages from the ``position``-th held on: what a derivation that took in
        ``position`` of them has not seen."""
        with self._lock:
            return self._messages[position:]

    def derived(self, name: Hashable, make: Callable[[], _T]) -> _T:
        """The derivation kept under ``name``, made by ``make`` the first time. It lives as long
        as the view: a deleted or evicted session takes it along."""
        with self._lock:
            found = self._derived.get(name)
            if found is None:
                found = self._derived[name] = make()
            return cast(_T, found)


class SessionViews:
    """A store's ``SessionView``s by session id, within ``limit`` bytes in all (least
    recently read go first)."""

    def __init__(self, limit: int | None = None) -> None:
        self._limit = SESSION_VIEW_BYTES if limit is None else limit
        self._lock = threading.Lock()
        self._views: OrderedDict[str, SessionView] = OrderedDict()
        self._counted: dict[str, int] = {}  # the bytes each view was counted with
        self._bytes = 0

    def get(self, session_id: str, identity: Hashable = None) -> SessionView:
        """The session's kept view, or a new empty one when none is kept for this identity."""
        with self._lock:
            view = self._views.get(session_id)
            if view is not None and view.identity == identity:
                self._views.move_to_end(session_id)
                return view
        return SessionView(session_id, identity)

    def keep(self, view: SessionView) -> None:
        """Keep ``view`` (after it was extended), its size counted anew, unless it alone is larger
        than the limit; evict the least recently read past the limit."""
        with self._lock:
            session_id = view.session_id
            kept = self._views.get(session_id)
            if kept is not None and kept is not view:
                if kept.identity == view.identity and len(kept) >= len(view):
                    return  # a read that went further is kept already
                self._drop(session_id)
            if view.bytes > self._limit:
                self._drop(session_id)
                return
            self._bytes += view.bytes - self._counted.get(session_id, 0)
            self._counted[session_id] = view.bytes
            self._views[session_id] = view
            self._views.move_to_end(session_id)
            while self._bytes > self._limit and len(self._views) > 1:
                self._drop(next(iter(self._views)))

    def forget(self, session_id: str) -> None:
        """Drop the session's view and everything derived from it."""
        with self._lock:
            self._drop(session_id)

    def _drop(self, session_id: str) -> None:
        if self._views.pop(session_id, None) is not None:
            self._bytes -= self._counted.pop(session_id)
