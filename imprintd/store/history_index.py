"""The index behind ``conversation_history`` and the user's search of every conversation
(docs/conversation-search.md): kept once per session, not per reply.

A message is indexed as 700-character windows (a new one every 350 characters, so a passage
is never split between two), each with the Snowball stems of its words and their counts, and
the window's length in words (BM25's document length). A tool result's query and a tool
call's arguments count as words of the message's first window; so does the local date it
was stored, as ``date:11-29`` (month and day) and ``date:2026-11`` (year and month), which no
word of a text can be (":" splits words), so they match only a query that names a month and a
number (``history_terms.py``). ``indexed_messages`` says how a stored message is indexed: earlier
``conversation_history`` exchanges and the daemon's first looks are kept out of the search.

Two indexes give the same answers:

- ``MemoryHistoryIndex``: in memory, for persist-false sessions (the ``MemoryStore`` keeps one
  per session and drops a message's windows when the message drops out) and for a history
  built directly from messages.
- ``SqliteHistoryIndex``: in the data database (``Store``'s migration 2), written in the same
  transaction that stores the messages, so a reply reads it and never rebuilds it. A session
  stored before the index existed is indexed once, the first time it is extended or searched.

A query asks ``lookup(terms)`` for the windows holding its terms (a very common term only where
``COMMON_WINDOWS`` says), with the document frequencies, the number of windows and their
average length; a window's score is ``history_score.py``'s, the ranking ``context/history.py``'s.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import apsw

from imprintd.messages import Message, ToolCall, calls_by_id, is_first_look
from imprintd.store.history_terms import date_terms, stems

#: The tool that looks back through a conversation (``context/history.py``): its calls and results
#: only quote other messages, so they are not searched.
TOOL_NAME = "conversation_history"
#: A term in more windows than this is *common*: it is looked up only in the windows the
#: query's other terms found, or, when every term is that common, in the newest this many
#: windows holding it. Its weight is small anyway (BM25's idf), and a query's cost then stays
#: flat as the conversation grows instead of growing with every window that says "service".
COMMON_WINDOWS = 1_000

WINDOW_CHARS = 700
WINDOW_STEP = 350
#: How far a window edge moves to avoid cutting a word in two (long unbroken runs, such as
#: base64, are cut anyway rather than growing a window without bound).
SNAP_LIMIT = 40

# --- windows -----------------------------------------------------------------------------------


def window_spans(text: str) -> list[tuple[int, int]]:
    """700-character windows every 350 characters, widened to whole words, covering all of ``text``."""
    length = len(text)
    if length <= WINDOW_CHARS:
        return [(0, length)]
    return [
        (_snap_back(text, start), _snap_forward(text, min(length, start + WINDOW_CHARS)))
        for start in range(0, length - WINDOW_STEP, WINDOW_STEP)
    ]


def _is_word(char: str) -> bool:
    return char.isalnum()


def _snap_back(text: str, start: int) -> int:
    limit = max(0, start - SNAP_LIMIT)
    while start > limit and _is_word(text[start - 1]) and _is_word(text[start]):
        start -= 1
    return start


def _snap_forward(text: str, end: int) -> int:
    limit = min(len(text), end + SNAP_LIMIT)
    while end < limit and _is_word(text[end - 1]) and _is_word(text[end]):
        end += 1
    return end


@dataclass(frozen=True)
class IndexedMessage:
    """A message as the index sees it (built by ``indexed_messages``)."""

    seq: int
    text: str
    #: Words the message is found by besides its text: a tool result's query, a call's arguments.
    extra: str = ""
    #: False for earlier conversation_history calls and results: they only quote other
    #: messages, and would outrank the originals for the same words. They can still be read.
    searchable: bool = True
    created_at: float | None = None


class Window(NamedTuple):
    """A window of message ``seq``: characters ``start:end``, ``words`` words long."""

    # A tuple rather than a dataclass: a query hashes thousands of them.
    seq: int
    start: int
    end: int
    words: int


def count_window(message: IndexedMessage, start: int, end: int) -> Counter[str]:
    """The terms of one window and how often each occurs."""
    counts = Counter(stems(message.text[start:end]))
    if start == 0:
        # A tool result is found by its query, a call by its arguments: they count as words
        # of the message's first window, and so does the date the message was stored.
        if message.extra:
            counts.update(stems(message.extra))
        if message.created_at is not None:
            counts.update(date_terms(message.created_at))
    return counts


def windows_of(message: IndexedMessage) -> list[tuple[Window, Counter[str]]]:
    """Every window of a searchable message with its term counts (none for an unsearchable one)."""
    if not message.searchable:
        return []
    out = []
    for start, end in window_spans(message.text):
        counts = count_window(message, start, end)
        words = sum(n for term, n in counts.items() if not term.startswith("date:"))
        out.append((Window(message.seq, start, end, words), counts))
    return out


# --- stored messages as the index takes them ---------------------------------------------------

_SUBJECT_KEYS = ("query", "path", "message", "url", "name")


def call_subject(call: ToolCall) -> str:
    """What a tool call was about: its query, path or message number, else its arguments."""
    for key in _SUBJECT_KEYS:
        value = call.arguments.get(key)
        if value not in (None, ""):
            return f"#{value}" if key == "message" else str(value)
    return ", ".join(f"{key}={value}" for key, value in call.arguments.items())


def is_lookback(message: Message, calls: Mapping[str, ToolCall]) -> bool:
    """Whether ``message`` is a ``conversation_history`` call or result (``calls``: the calls by id)."""
    if message.role == "tool":
        call = calls.get(message.tool_call_id or "")
        return (call.name if call else message.name) == TOOL_NAME
    return bool(message.tool_calls) and all(c.name == TOOL_NAME for c in message.tool_calls)


def indexed_messages(
    messages: Sequence[Message],
    calls: Mapping[str, ToolCall] | None = None,
    created_at: Mapping[int, float] | None = None,
) -> list[IndexedMessage]:
    """The stored messages of ``messages`` as the index takes them (system and unnumbered left out).

    ``calls``: tool calls made before ``messages`` (a tool result's query is found in its call);
    ``created_at``: when each was stored, by seq, for its date.
    """
    calls = {**(calls or {}), **calls_by_id(messages)}
    out = []
    for message in numbered(messages):
        extra = ""
        if message.role == "tool" and message.tool_call_id in calls:
            call = calls[message.tool_call_id]
            extra = f"{call.name} {call_subject(call)}"
        elif message.tool_calls:
            extra = " ".join(f"{c.name} {call_subject(c)}" for c in message.tool_calls)
        seq = message.seq
        assert seq is not None  # ``kept`` holds stored messages only
        searchable = not is_lookback(message, calls) and not is_first_look(message)
        out.append(IndexedMessage(seq, message.content, extra, searchable, (created_at or {}).get(seq)))
    return out


def numbered(messages: Sequence[Message]) -> list[Message]:
    """The messages ``indexed_messages`` keeps (stored ones, each number once), in the same order."""
    kept = [m for m in messages if m.seq is not None and m.role != "system"]
    if all(a.seq < b.seq for a, b in itertools.pairwise(kept)):  # type: ignore[operator]
        return kept  # as the store returns them: no number twice
    seen: set[int] = set()
    out = []
    for message in kept:
        if message.seq not in seen:
            seen.add(message.seq)  # type: ignore[arg-type]
            out.append(message)
    return out


# --- what a query gets back ----------------------------------------------------------------------


@dataclass
class IndexLookup:
    """The windows holding any of a query's terms, and the statistics to weigh them."""

    windows: int  # N: searchable windows in the conversation
    average_words: float  # their average length in words
    df: dict[str, int] = field(default_factory=dict)  # windows holding each term
    #: window → {term: count} for every window holding at least one term.
    hits: dict[Window, dict[str, int]] = field(default_factory=dict)


def restrict_common(lookup: IndexLookup, terms: Sequence[str]) -> IndexLookup:
    """``lookup`` with common terms kept only where ``COMMON_WINDOWS`` says (the reference rule:
    the in-memory index and the scan apply it to a full lookup, SQLite's index while reading)."""
    common = {term for term in terms if lookup.df.get(term, 0) > COMMON_WINDOWS}
    if not common:
        return lookup
    rare = {w for w, found in lookup.hits.items() if any(term not in common for term in found)}
    if rare:
        keep = {term: rare for term in common}
    else:
        keep = {
            term: set(sorted((w for w, found in lookup.hits.items() if term in found), reverse=True)[:COMMON_WINDOWS])
            for term in common
        }
    hits: dict[Window, dict[str, int]] = {}
    for window, found in lookup.hits.items():
        kept = {term: n for term, n in found.items() if term not in common or window in keep[term]}
        if kept:
            hits[window] = kept
    lookup.hits = hits
    return lookup


def scan_lookup(messages: Iterable[IndexedMessage], wanted: Sequence[str]) -> IndexLookup:
    """What an index of ``messages`` would return for ``wanted``, by tokenizing every window of
    every message anew (``history.search_by_scan``, the baseline of ``bench/bench_history_search.py``)."""
    windows = words = 0
    df = dict.fromkeys(wanted, 0)
    hits: dict[Window, dict[str, int]] = {}
    for message in messages:
        for window, counts in windows_of(message):
            windows += 1
            words += window.words
            found = {term: counts[term] for term in wanted if counts[term]}
            if found:
                hits[window] = found
                for term in found:
                    df[term] += 1
    return restrict_common(IndexLookup(windows, words / windows if windows else 0.0, df, hits), wanted)


class HistoryIndex(Protocol):
    """What ``ConversationHistory`` needs from an index."""

    def lookup(self, terms: Sequence[str]) -> IndexLookup: ...
    def dates(self, seqs: Iterable[int]) -> dict[int, float]: ...


# --- in memory ---------------------------------------------------------------------------------


class MemoryHistoryIndex:
    """An index held in memory; messages can be added and removed (thread-safe)."""

    def __init__(self, messages: Iterable[IndexedMessage] = ()) -> None:
        self._lock = threading.Lock()
        self._postings: dict[str, dict[Window, int]] = {}
        self._by_seq: dict[int, list[tuple[Window, tuple[str, ...]]]] = {}
        self._dates: dict[int, float] = {}
        self._windows = 0
        self._words = 0
        self.add(messages)

    def add(self, messages: Iterable[IndexedMessage]) -> None:
        for message in messages:
            indexed = windows_of(message)  # tokenized outside the lock
            with self._lock:
                self._remove(message.seq)
                if message.created_at is not None:
                    self._dates[message.seq] = message.created_at
                self._by_seq[message.seq] = [(window, tuple(counts)) for window, counts in indexed]
                for window, counts in indexed:
                    self._windows += 1
                    self._words += window.words
                    for term, count in counts.items():
                        self._postings.setdefault(term, {})[window] = count

    def remove(self, seq: int) -> None:
        """Forget message ``seq`` (a persist-false session's oldest message dropping out)."""
        with self._lock:
            self._remove(seq)

    def _remove(self, seq: int) -> None:
        self._dates.pop(seq, None)
        for window, terms in self._by_seq.pop(seq, ()):
            self._windows -= 1
            self._words -= window.words
            for term in terms:
                postings = self._postings[term]
                del postings[window]
                if not postings:
                    del self._postings[term]

    def lookup(self, terms: Sequence[str]) -> IndexLookup:
        with self._lock:
            found = IndexLookup(self._windows, self._words / self._windows if self._windows else 0.0)
            for term in terms:
                postings = self._postings.get(term, {})
                found.df[term] = len(postings)
                for window, count in postings.items():
                    found.hits.setdefault(window, {})[term] = count
        return restrict_common(found, terms)

    def dates(self, seqs: Iterable[int]) -> dict[int, float]:
        with self._lock:
            return {seq: self._dates[seq] for seq in seqs if seq in self._dates}


# --- in the data database ------------------------------------------------------------------------

SCHEMA = """
CREATE TABLE history_sessions (
    id          INTEGER PRIMARY KEY,
    session_id  TEXT NOT NULL UNIQUE REFERENCES sessions (id) ON DELETE CASCADE,
    last_seq    INTEGER NOT NULL DEFAULT 0,  -- every message up to this one is indexed
    windows     INTEGER NOT NULL DEFAULT 0,  -- searchable windows
    words       INTEGER NOT NULL DEFAULT 0,  -- their total length in words
    next_window INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE TABLE history_windows (
    history_id INTEGER NOT NULL REFERENCES history_sessions (id) ON DELETE CASCADE,
    window     INTEGER NOT NULL,
    seq        INTEGER NOT NULL,
    start_char INTEGER NOT NULL,
    end_char   INTEGER NOT NULL,
    words      INTEGER NOT NULL,
    PRIMARY KEY (history_id, window)
) STRICT, WITHOUT ROWID;

CREATE TABLE history_postings (
    history_id INTEGER NOT NULL REFERENCES history_sessions (id) ON DELETE CASCADE,
    term       TEXT NOT NULL,
    window     INTEGER NOT NULL,
    count      INTEGER NOT NULL,
    PRIMARY KEY (history_id, term, window)
) STRICT, WITHOUT ROWID;
"""
# Later migrations (store/migrations.py) add to this schema: migration 5 indexes the postings by
# term, migration 6 copies each window's length into its postings (``words``).

#: ``to_index(db, session_id, after_seq)``: the session's stored messages after ``after_seq``, in
#: order, as ``IndexedMessage``s (the store supplies it: it knows its messages table).
Indexer = Callable[[apsw.Connection, str, int], list[IndexedMessage]]


def create_tables(db: apsw.Connection) -> None:
    """The index's tables (migration 2, ``store/migrations.py``)."""
    db.execute(SCHEMA)


def catch_up(db: apsw.Connection, session_id: str, to_index: Indexer) -> None:
    """Index every stored message of the session not yet indexed; run inside a write transaction.

    ``to_index(db, session_id, after_seq)`` returns those messages as ``IndexedMessage``s.
    """
    row = db.execute(
        "SELECT id, last_seq, windows, words, next_window FROM history_sessions WHERE session_id = ?",
        (session_id,),
    ).fetchone()
    if row is None:
        db.execute("INSERT INTO history_sessions (session_id) VALUES (?)", (session_id,))
        row = (db.last_insert_rowid(), 0, 0, 0, 0)
    history_id, last_seq, windows, words, next_window = row
    messages = to_index(db, session_id, last_seq)
    if not messages:
        return
    window_rows: list[tuple] = []
    posting_rows: list[tuple] = []
    for message in messages:
        for window, counts in windows_of(message):
            window_rows.append((history_id, next_window, window.seq, window.start, window.end, window.words))
            posting_rows.extend((history_id, term, next_window, count, window.words) for term, count in counts.items())
            windows += 1
            words += window.words
            next_window += 1
    db.executemany("INSERT INTO history_windows VALUES (?, ?, ?, ?, ?, ?)", window_rows)
    db.executemany(
        "INSERT INTO history_postings (history_id, term, window, count, words) VALUES (?, ?, ?, ?, ?)", posting_rows
    )
    db.execute(
        "UPDATE history_sessions SET last_seq = ?, windows = ?, words = ?, next_window = ? WHERE id = ?",
        (max(m.seq for m in messages), windows, words, next_window, history_id),
    )


def _marks(values: Sequence[object]) -> str:
    return ", ".join("?" * len(values))


class SqliteHistoryIndex:
    """One stored session's index, read from the data database through its store."""

    def __init__(self, store: Any, session_id: str, to_index: Indexer) -> None:
        # ``store``: an ``imprintd.store.Store`` (not imported: the store imports this module).
        self._store = store
        self._session_id = session_id
        self._to_index = to_index

    def lookup(self, terms: Sequence[str]) -> IndexLookup:
        self._ensure_current()
        terms = list(dict.fromkeys(terms))
        with self._store.reading() as db:
            row = db.execute(
                "SELECT id, windows, words FROM history_sessions WHERE session_id = ?", (self._session_id,)
            ).fetchone()
            if row is None:  # the session was deleted meanwhile: nothing to find
                return IndexLookup(0, 0.0, dict.fromkeys(terms, 0))
            history_id, windows, words = row
            found = IndexLookup(windows, words / windows if windows else 0.0, df=dict.fromkeys(terms, 0))
            if not terms:
                return found
            found.df.update(
                db.execute(
                    "SELECT term, count(*) FROM history_postings"
                    f" WHERE history_id = ? AND term IN ({_marks(terms)}) GROUP BY term",
                    (history_id, *terms),
                ).fetchall()
            )
            rare = [t for t in terms if 0 < found.df[t] <= COMMON_WINDOWS]
            common = [t for t in terms if found.df[t] > COMMON_WINDOWS]
            seen: set[int] = set()
            if rare:
                seen = self._read(db, found, f"p.term IN ({_marks(rare)})", (history_id, *rare))
            if common and seen:
                self._read(
                    db,
                    found,
                    f"p.term IN ({_marks(common)}) AND p.window IN (SELECT value FROM json_each(?))",
                    (history_id, *common, json.dumps(sorted(seen))),
                )
            elif common:
                for term in common:
                    self._read(
                        db, found, "p.term = ? ORDER BY p.window DESC LIMIT ?", (history_id, term, COMMON_WINDOWS)
                    )
        return found

    @staticmethod
    def _read(db: apsw.Connection, found: IndexLookup, where: str, params: tuple) -> set[int]:
        """Add the postings matching ``where`` to ``found``; returns their window numbers."""
        numbers: set[int] = set()
        rows = db.execute(
            "SELECT p.window, p.term, p.count, w.seq, w.start_char, w.end_char, w.words"
            " FROM history_postings p JOIN history_windows w ON w.history_id = p.history_id AND w.window = p.window"
            f" WHERE p.history_id = ? AND {where}",
            params,
        )
        for number, term, count, seq, start, end, length in rows:
            numbers.add(number)
            found.hits.setdefault(Window(seq, start, end, length), {})[term] = count
        return numbers

    def dates(self, seqs: Iterable[int]) -> dict[int, float]:
        wanted = list(seqs)
        if not wanted:
            return {}
        with self._store.reading() as db:
            rows = db.execute(
                f"SELECT seq, created_at FROM messages WHERE session_id = ? AND seq IN ({_marks(wanted)})",
                (self._session_id, *wanted),
            ).fetchall()
        return dict(rows)

    def _ensure_current(self) -> None:
        """Index what a session stored before the index existed (once; later writes keep it current)."""
        with self._store.reading() as db:
            stored = db.execute(
                "SELECT coalesce(max(seq), 0) FROM messages WHERE session_id = ?", (self._session_id,)
            ).fetchone()[0]
            indexed = db.execute(
                "SELECT last_seq FROM history_sessions WHERE session_id = ?", (self._session_id,)
            ).fetchone()
        if indexed is None or indexed[0] < stored:
            with self._store.transaction() as db:
                catch_up(db, self._session_id, self._to_index)
