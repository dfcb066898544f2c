"""The ``conversation_history`` tool: look back through this conversation (docs/decisions.md,
"Conversation history"; the ranking: docs/conversation-search.md).

A ``ConversationHistory`` holds the earlier messages handed to one reply (the user's, the
assistant's and tool results, summarized or not), each numbered by its stored ``seq``, and
the session's index (``store/history_index.py``: kept in the data database, or in memory for a
persist-false session, updated when messages are stored). It quotes nothing else, so the
tool cannot reach another conversation, workspace or user.

- ``search(query)`` is lexical (rarer words weigh more, shared Snowball stems match) over
  700-character windows of each message, ranked as ``docs/conversation-search.md`` explains:
  1. a window scores BM25 (k 1.2, b 0.3) times its *coverage*, the idf share of the query's
     terms it matches (``store/history_score.py``); a message scores its best window;
  2. neighbourhood smoothing in conversation order, S(i) = own(i) + ½·own(i±1) + ¼·own(i±2),
     so an answer that shares no word with the query is found through the question before it;
  3. the 4,000 characters are filled walking down the ranking: a matching message whole if
     short, else up to three places (the place that names a paste and the place asked about);
     a message chosen only through its neighbours whole if short, else its beginning;
  4. consecutive messages print together, each after a ``#12 user (2026-11-29):`` header;
     partial quotes keep their ``[#12 offset a–b]`` line so they can be read exactly.
- ``read(seq, offset)`` returns one message exactly, 4,000 characters at a time, and says
  where to continue.

What it searches is what was said and what tools returned to the model's own calls. The
daemon's first looks (``research/first_look.py``) are left out: their query is the user's own
words, so they would outrank what was said, and they sit between a question and its answer,
whose neighbours they would be. They are never indexed, a search skips them (those an older
index holds too) and counts a question and its answer as neighbours across them; they can still
be read by number. Their hits stay reachable by searching the workspace again
(docs/decisions.md, "The first look leaves no litter").

What a history derives from its messages (their numbering, which are neighbours, which call each
result answers) is kept with the session's view (``session_history``, ``session_view.py``): a
reply's history is the first messages of it, so a reply's build takes in only the messages stored
since the session's last one instead of every earlier message.

``search_by_scan`` (``search_places(query, scan=True)``) re-tokenizes every window per query
instead of using the index and gives the same answer; it is the baseline of
``bench/bench_history_search.py``.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

from imprintd.messages import Message, ToolCall, is_first_look
from imprintd.offload import in_worker
from imprintd.session_view import SessionView
from imprintd.store import history_score
from imprintd.store.history_index import (
    TOOL_NAME,
    HistoryIndex,
    IndexedMessage,
    IndexLookup,
    MemoryHistoryIndex,
    Window,
    call_subject,
    indexed_messages,
    is_lookback,
    scan_lookup,
)
from imprintd.store.history_terms import WORD, date_label, query_terms, stem
from imprintd.tools.base import Quote, ToolError, ToolResult, parse_arguments, tool_spec

OUTPUT_LIMIT = 4_000
READ_CHARS = 4_000
#: A matching message this short is shown whole; a longer one shows up to three places.
WHOLE_MATCH_CHARS = 700
PLACES_PER_MESSAGE = 3
PLACE_CHARS = 500
#: A message chosen only through its neighbours: whole if this short, else its beginning...
WHOLE_NEIGHBOUR_CHARS = 400
#: ...unless it is a long paste, which says nothing about the query where it begins.
NEIGHBOUR_PASTE_CHARS = 2_000
#: Filling stops when less room than this is left; no quote is shortened below MIN_QUOTE.
MIN_ROOM = 120
MIN_QUOTE = 80

STRATEGY_LINE = (
    "When the user refers to something earlier in this conversation that is not shown here, "
    "use conversation_history (not search) to find it, then say what you found, quoting it briefly."
)

DESCRIPTION = (
    "Look back through this conversation's earlier messages, including ones no longer shown "
    "to you. Search by words (query), or read one message by its number (message), 4,000 "
    "characters at a time from a character offset (offset)."
)


class HistoryError(ToolError):
    """A search or read that cannot be done as asked; the message says why."""


# --- what a message is called ---------------------------------------------------------------


def describe_call(call: ToolCall) -> str:
    """A tool call in words: ``search for “billing port”``, ``read_file src/app.py``."""
    subject = call_subject(call)
    if not subject:
        return call.name
    if "query" in call.arguments:
        return f"{call.name} for “{subject}”"
    return f"{call.name} {subject}"


def describe_message(message: Message, calls: Mapping[str, ToolCall]) -> str:
    """``user``, ``assistant``, ``assistant calling search for “x”``, ``tool result: search for “x”``."""
    if message.role == "tool":
        call = calls.get(message.tool_call_id or "")
        return f"tool result: {describe_call(call) if call else message.name or 'tool'}"
    if message.tool_calls:
        return f"{message.role} calling " + "; ".join(describe_call(c) for c in message.tool_calls)
    return message.role


# --- the history ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    """One earlier message as the tool shows it."""

    seq: int
    label: str
    text: str
    searchable: bool


@dataclass(frozen=True)
class Place:
    """A quoted place: ``text == message content[start:end]`` (the whole message when shown whole)."""

    seq: int
    start: int
    end: int


@dataclass(frozen=True)
class SearchResult:
    text: str
    places: tuple[Place, ...]
    #: Each message shown, in the order printed, as ``(seq, its block)`` (numbered by research).
    blocks: tuple[tuple[int, str], ...] = ()
    heading: str = ""


@dataclass(frozen=True)
class _Shown:
    """How one chosen message is printed: whole, or these ``(start, end)`` places."""

    whole: bool
    spans: tuple[tuple[int, int], ...]


@dataclass
class _Ranking:
    """One query's scores: by window, by message (own and smoothed), and the order to show."""

    idf: dict[str, float]
    window_scores: dict[Window, float]
    found: dict[Window, dict[str, int]]
    windows_by_entry: dict[int, list[Window]]
    own: dict[int, float]  # entry position → its best window's score (matching messages only)
    smoothed: dict[int, float]  # entry position → S, for every candidate
    order: list[int]  # entry positions, best first


class _Calls(Mapping[str, ToolCall]):
    """The tool calls made by the first ``bound`` messages of a ``_Derived``, by id: the last one
    made wins, as ``calls_by_id`` over those messages gives (ids can repeat across turns)."""

    def __init__(self, made: Mapping[str, list[tuple[int, ToolCall]]], bound: int) -> None:
        self._made = made
        self._bound = bound

    def __getitem__(self, call_id: str) -> ToolCall:
        # Newest first: a call made after the bound (by a later message) is not this view's.
        for position, call in reversed(self._made.get(call_id, ())):
            if position < self._bound:
                return call
        raise KeyError(call_id)

    def __iter__(self) -> Iterator[str]:
        return (call_id for call_id in self._made if call_id in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _Entries:
    """The first ``count`` messages of ``messages`` as the tool shows them, each described when
    first needed: a long conversation's first query pays for the messages it shows, not for all."""

    def __init__(self, messages: list[Message], count: int, calls: Mapping[str, ToolCall]) -> None:
        self._messages = messages
        self._count = count
        self._described: dict[int, _Entry] = {}
        self._calls = calls

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def searchable(self, position: int) -> bool:
        """Whether the message at ``position`` is searched (not an earlier lookup), cheaply."""
        message = self._messages[position]
        if message.role == "tool" or message.tool_calls:
            return self[position].searchable
        return True

    def __getitem__(self, position: int) -> _Entry:
        position = position + self._count if position < 0 else position
        if not 0 <= position < self._count:
            raise IndexError(position)
        entry = self._described.get(position)
        if entry is None:
            message = self._messages[position]
            assert message.seq is not None  # the history holds stored messages only
            entry = _Entry(
                message.seq,
                describe_message(message, self._calls),
                message.content,
                not is_lookback(message, self._calls),
            )
            self._described[position] = entry
        return entry


class _Derived:
    """What a history derives from its messages, in the order given, extended with new ones only.

    Messages never change once stored, so what was derived from a session's earlier messages
    stays true as it grows: the session's view keeps one (``session_history``), and a reply's
    history is its first messages (``ConversationHistory._view``), built without going over them
    again. ``lock`` guards extending it.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.source: list[Message] = []  # every message taken in, as given
        self.readable: list[Message] = []  # stored ones, each number once (``history_index.numbered``)
        self.readable_by_seq: dict[int, int] = {}
        self.numbered: list[Message] = []  # readable ones but first looks: searched and printed
        self.by_seq: dict[int, int] = {}
        self.numbered_at: list[int] = []  # each numbered message's place in ``readable``
        #: Positions in ``numbered`` whose message directly follows the one before it (first
        #: looks between them do not count): they are neighbours, printed together.
        self.joined: set[int] = set()
        self.calls: dict[str, list[tuple[int, ToolCall]]] = {}  # by id: (readable place, call)
        self.chars = 0

    def extend(self, messages: Iterable[Message]) -> None:
        for message in messages:
            self.source.append(message)
            self.chars += len(message.content) + len(message.model_text or "")
            seq = message.seq
            # The first of a number is kept, as ``history_index.numbered`` keeps it.
            if seq is None or message.role == "system" or seq in self.readable_by_seq:
                continue
            at = len(self.readable)
            self.readable.append(message)
            self.readable_by_seq[seq] = at
            for call in message.tool_calls:
                self.calls.setdefault(call.id, []).append((at, call))
            if is_first_look(message):
                continue
            position = len(self.numbered)
            if position:
                # Only first looks lie between two numbered messages in ``readable``; they are
                # neighbours unless a number is missing between them (as ``_joined`` decides).
                before, previous = self.numbered_at[-1], self.numbered[-1].seq
                assert previous is not None
                if seq - previous == at - before:
                    self.joined.add(position)
            self.numbered.append(message)
            self.by_seq[seq] = position
            self.numbered_at.append(at)


class ConversationHistory:
    """The earlier messages of one conversation, searchable and readable by number.

    ``index`` is the session's index (the store's); without one, an in-memory index of
    ``messages`` is built on the first query.
    """

    def __init__(self, messages: Sequence[Message], index: HistoryIndex | None = None) -> None:
        derived = _Derived()
        derived.extend(messages)
        self._view(derived, index)

    @classmethod
    def _of(cls, derived: _Derived, index: HistoryIndex | None, before: int | None = None) -> ConversationHistory:
        """The history of the messages ``derived`` holds now numbered below ``before`` (later
        ones are not its own)."""
        history = cls.__new__(cls)
        history._view(derived, index, before)
        return history

    def _view(self, derived: _Derived, index: HistoryIndex | None, before: int | None = None) -> None:
        readable, numbered = len(derived.readable), len(derived.numbered)
        if before is not None:
            readable = bisect.bisect_left(derived.readable, before, key=_number)
            numbered = bisect.bisect_left(derived.numbered, before, key=_number)
        self._derived = derived
        self._calls = _Calls(derived.calls, readable)
        # Read by number: every message. Searched, ranked and printed: all but first looks.
        self._readable = _Entries(derived.readable, readable, self._calls)
        self._entries = _Entries(derived.numbered, numbered, self._calls)
        self._joined = derived.joined  # positions past this view's are never asked about
        self._index = index
        self._indexed: list[IndexedMessage] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def _readable_at(self, seq: int) -> int | None:
        at = self._derived.readable_by_seq.get(seq)
        return at if at is not None and at < len(self._readable) else None

    def _position(self, seq: int) -> int | None:
        """Where message ``seq`` is among the searched ones (None if it is not, or not this view's)."""
        position = self._derived.by_seq.get(seq)
        return position if position is not None and position < len(self._entries) else None

    @property
    def _messages(self) -> list[IndexedMessage]:
        """The messages as an index takes them (only to build one here, or to scan)."""
        if self._indexed is None:
            self._indexed = indexed_messages(self._derived.numbered[: len(self._entries)])
        return self._indexed

    # -- reading ------------------------------------------------------------------------
    def read(self, seq: int, offset: int = 0) -> str:
        """Message ``seq`` from character ``offset``, at most 4,000 characters, and where to go on."""
        entry = self._entry(seq)
        if offset < 0:
            raise HistoryError(f"offset must be a whole number of characters, 0 or more (got {offset!r})")
        total = len(entry.text)
        if total == 0:
            if offset:
                raise HistoryError(f"message #{seq} has no text, so offset {offset} is past its end")
            return f"#{seq} {entry.label}: (no text)"
        if offset >= total:
            raise HistoryError(
                f"offset {offset} is past the end of message #{seq}, which has {total:,} characters; "
                f"the last offset is {total - 1}"
            )
        end = min(total, offset + READ_CHARS)
        head = f"#{seq} {entry.label}, characters {offset}–{end} of {total:,}:\n"
        if end < total:
            tail = f"\n… continues: read message {seq} from offset {end}; {total:,} characters in all"
        else:
            tail = f"\n(end of message #{seq})"
        return head + entry.text[offset:end] + tail

    def _entry(self, seq: int) -> _Entry:
        index = self._readable_at(seq)
        if index is None:
            if not self._readable:
                raise HistoryError("there are no earlier messages in this conversation")
            raise HistoryError(
                f"there is no message #{seq} earlier in this conversation; "
                f"its earlier messages are numbered #{self._readable[0].seq} to #{self._readable[-1].seq}"
            )
        return self._readable[index]

    # -- searching ----------------------------------------------------------------------
    def search(self, query: str) -> str:
        """The best matches for ``query`` and their neighbours, within 4,000 characters."""
        return self.search_places(query).text

    def search_places(self, query: str, *, scan: bool = False) -> SearchResult:
        """``search`` with the places it quoted; ``scan=True`` re-tokenizes every window instead."""
        wanted = _check_query(query)
        if not wanted:
            raise HistoryError(f"the query {query!r} has no words to search for")
        lookup = scan_lookup(self._messages, wanted) if scan else self.index.lookup(wanted)
        ranking = self._rank(wanted, lookup)
        if ranking is None:
            return SearchResult(_nothing_found(query.strip(), len(self._entries)), ())
        return self._fill(query.strip(), ranking)

    @property
    def index(self) -> HistoryIndex:
        """The index searched: the store's, or one built from the messages on first use."""
        if self._index is None:
            self._index = MemoryHistoryIndex(self._messages)
        return self._index

    def build_index(self) -> None:
        """Build the in-memory index now (when none was given); otherwise the first query does."""
        _ = self.index

    # -- ranking ------------------------------------------------------------------------
    def _rank(self, wanted: Sequence[str], lookup: IndexLookup) -> _Ranking | None:
        idf = {term: history_score.idf(lookup.windows, lookup.df[term]) for term in wanted if lookup.df.get(term)}
        all_idf = sum(idf.values())
        window_scores: dict[Window, float] = {}
        by_entry: dict[int, list[Window]] = {}
        for window, found in lookup.hits.items():
            position = self._position(window.seq)
            # The index holds the whole session; quote only the messages handed in.
            if position is None or not self._entries.searchable(position):
                continue
            window_scores[window] = history_score.score_window(
                wanted, found, idf, all_idf, window.words, lookup.average_words
            )
            by_entry.setdefault(position, []).append(window)
        if not by_entry:
            return None
        own = {position: max(window_scores[w] for w in windows) for position, windows in by_entry.items()}
        smoothed = {
            i: score
            for i, score in _smooth(own, len(self._entries)).items()
            if score > 0 and self._entries.searchable(i)
        }
        # Ties: the later message first (rounded so index and scan agree to the last digit).
        order = sorted(smoothed, key=lambda i: (-round(smoothed[i], 9), -i))
        return _Ranking(idf, window_scores, lookup.hits, by_entry, own, smoothed, order)

    # -- filling the budget --------------------------------------------------------------
    def _fill(self, query: str, ranking: _Ranking) -> SearchResult:
        shown: dict[int, _Shown] = {}
        rank_of: dict[int, int] = {}
        dates: dict[int, float] = {}
        used = _Layout(self, len(self._heading(query)), dates)
        for rank, position in enumerate(ranking.order):
            if OUTPUT_LIMIT - used.length < MIN_ROOM:
                break
            if rank % 64 == 0:  # dates of the next candidates, in one look-up
                seqs = [self._entries[p].seq for p in ranking.order[rank : rank + 64]]
                dates.update(self.index.dates(seqs))
            choice = self._choose(position, ranking)
            if choice is None:
                continue
            fitted = self._fit(used, position, choice, ranking)
            if fitted is not None:
                shown[position] = fitted
                rank_of[position] = rank
                used.add(position, fitted)
        text, blocks = self._print(query, shown, rank_of, dates)
        if len(text) > OUTPUT_LIMIT:  # not expected: the layout counts exactly what is printed
            text = text[: OUTPUT_LIMIT - 1] + "…"
        places = tuple(
            Place(self._entries[p].seq, start, end)
            for p in sorted(shown, key=rank_of.__getitem__)
            for start, end in shown[p].spans
        )
        return SearchResult(text, places, blocks, self._heading(query.strip()))

    def _choose(self, position: int, ranking: _Ranking) -> _Shown | None:
        """How a candidate is shown if it fits; ``None`` to skip it."""
        text = self._entries[position].text
        if position in ranking.own:
            if len(text) <= WHOLE_MATCH_CHARS:
                return _Shown(True, ((0, len(text)),))
            places = self._places(ranking.windows_by_entry[position], ranking)
            own = ranking.own[position]
            if ranking.smoothed[position] - own > own and len(text) <= NEIGHBOUR_PASTE_CHARS:
                # Chosen mostly through its neighbours, as a reply to the question before it
                # is: where it begins answers that question, so it is shown too.
                head = (0, _cut_end(text, 0, WHOLE_NEIGHBOUR_CHARS))
                rest = [(max(start, head[1]), end) for start, end in places if end > head[1]]
                return _Shown(False, (head, *rest[: PLACES_PER_MESSAGE - 1]))
            return _Shown(False, places)
        # Chosen only through its neighbours.
        if len(text) <= WHOLE_NEIGHBOUR_CHARS:
            return _Shown(True, ((0, len(text)),))
        if len(text) > NEIGHBOUR_PASTE_CHARS:
            return None
        return _Shown(False, ((0, _cut_end(text, 0, WHOLE_NEIGHBOUR_CHARS)),))

    def _fit(self, used: _Layout, position: int, choice: _Shown, ranking: _Ranking) -> _Shown | None:
        """``choice`` if it fits in what is left; else its best place shortened to the room left."""
        if used.with_(position, choice) <= OUTPUT_LIMIT:
            return choice
        # What the message costs with an empty quote, and a margin for its offsets' digits.
        length = OUTPUT_LIMIT - used.with_(position, _Shown(False, ((0, 0),))) - 14
        while length >= MIN_QUOTE:
            fitted = _Shown(False, (self._best_place(position, ranking, length),))
            over = used.with_(position, fitted) - OUTPUT_LIMIT
            if over <= 0:
                return fitted
            length -= over
        return None

    def _best_place(self, position: int, ranking: _Ranking, length: int) -> tuple[int, int]:
        text = self._entries[position].text
        windows = ranking.windows_by_entry.get(position)
        if not windows:  # a neighbour: its beginning
            return 0, _cut_end(text, 0, length)
        best = max(windows, key=lambda w: (ranking.window_scores[w], -w.start))
        return self._excerpt(best, ranking.found[best], ranking.idf, length)

    def _places(self, windows: list[Window], ranking: _Ranking) -> tuple[tuple[int, int], ...]:
        """Up to three places that do not overlap: the best window, then those showing query words
        the earlier ones did not (the place that names a paste, then the place asked about), or
        nearly as good as the best."""
        scores, found, idf = ranking.window_scores, ranking.found, ranking.idf
        best = max(windows, key=lambda w: (scores[w], -w.start))
        picked, seen = [best], set(found[best])
        candidates = sorted(windows, key=lambda w: (-scores[w], w.start))
        while len(picked) < PLACES_PER_MESSAGE:
            free = [w for w in candidates if all(not _overlap(w, p) for p in picked)]
            if not free:
                break

            def gain(w: Window) -> float:
                return sum(idf.get(t, 0.0) for t in found[w] if t not in seen)

            following = max(free, key=lambda w: (gain(w), scores[w], -w.start))
            if gain(following) <= 0 and scores[following] < 0.75 * scores[best]:
                break
            picked.append(following)
            seen.update(found[following])
        spans: list[tuple[int, int]] = []
        previous_end = 0
        for window in sorted(picked, key=lambda w: w.start):
            start, end = self._excerpt(window, found[window], idf, PLACE_CHARS)
            start = max(start, previous_end)  # never quote the same characters twice
            if start < end:
                spans.append((start, end))
                previous_end = end
        return tuple(spans)

    # -- printing -------------------------------------------------------------------------
    @staticmethod
    def _heading(query: str) -> str:
        return (
            f"Earlier in this conversation, for “{_shorten(query)}” (best match first; consecutive "
            "messages together; read a message exactly with message and offset):"
        )

    def _print(
        self, query: str, shown: Mapping[int, _Shown], rank_of: Mapping[int, int], dates: Mapping[int, float]
    ) -> tuple[str, tuple[tuple[int, str], ...]]:
        """Consecutive messages together in conversation order; groups by their best member.

        Returns the text and each message's block with its seq, in the order printed."""
        heading = self._heading(query)
        groups: list[list[int]] = []
        for position in sorted(shown):
            if groups and groups[-1][-1] == position - 1 and position in self._joined:
                groups[-1].append(position)
            else:
                groups.append([position])
        groups.sort(key=lambda group: min(rank_of[p] for p in group))
        printed = tuple((self._entries[p].seq, self._block(p, shown[p], dates)) for group in groups for p in group)
        by_group = ["\n".join(self._block(p, shown[p], dates) for p in group) for group in groups]
        return "\n\n".join([heading, *by_group]), printed

    def _block(self, position: int, shown: _Shown, dates: Mapping[int, float]) -> str:
        entry = self._entries[position]
        date = f" ({date_label(dates[entry.seq])})" if entry.seq in dates else ""
        header = f"#{entry.seq} {_shorten(entry.label)}{date}"
        if shown.whole:
            return f"{header}:\n{entry.text}" if entry.text else f"{header}: (no text)"
        places = "".join(
            f"\n[#{entry.seq} offset {start}–{end}]\n{entry.text[start:end]}" for start, end in shown.spans
        )
        return f"{header}, {len(entry.text):,} characters:{places}"

    def _excerpt(
        self, window: Window, found: Mapping[str, int], idf: Mapping[str, float], length: int
    ) -> tuple[int, int]:
        """``length`` characters around the stretch of the window densest in query words.

        The quote may reach past the window's edges (within the message), so a word near an
        edge is shown with what surrounds it.
        """
        text = self._entries[self._derived.by_seq[window.seq]].text
        if len(text) <= length:
            return 0, len(text)
        hits = [
            (window.start + m.start(), stem(m.group()))
            for m in WORD.finditer(text[window.start : window.end])
            if stem(m.group()) in found
        ]
        if not hits:  # matched only by a tool result's query or the date: quote its beginning
            return window.start, _cut_end(text, window.start, length)
        # The stretch of three quarters of ``length`` showing the most query weight: each
        # distinct word counts once, so "billing" beats nine mentions of "ports" (two pointers).
        span = length * 3 // 4
        inside: Counter[str] = Counter()
        best, first, last, low = (-1.0, 0), hits[0][0], hits[0][0], 0
        for at, term in hits:
            inside[term] += 1
            # Shrink from the left: past the span, and over repeats of a word seen again later.
            while at - hits[low][0] > span or inside[hits[low][1]] > 1:
                inside[hits[low][1]] -= 1
                low += 1
            # Ties go to the tightest stretch, which is then centred in the quote.
            weight = (sum(idf.get(t, 0.0) for t, n in inside.items() if n > 0), hits[low][0] - at)
            if weight > best:
                best, first, last = weight, hits[low][0], at
        # Centre the stretch, then drop the partial line it starts in, so the quote begins at
        # a line as it was written.
        start = max(0, first - max(0, (length - (last - first)) // 2))
        newline = text.find("\n", start, first)
        if newline != -1 and start > 0 and text[start - 1] != "\n":
            start = newline + 1
        start = max(0, min(start, len(text) - length))
        if start > 0 and text[start - 1].isalnum() and text[start].isalnum():
            start = _next_word(text, start, first)  # begin at a word, not inside one
        return start, _cut_end(text, start, length)


def session_history(view: SessionView, before: int, index: HistoryIndex | None = None) -> ConversationHistory:
    """``ConversationHistory`` of the session's messages numbered below ``before``, with ``index``.

    What it derives from them is kept with the session's view (docs/decisions.md, "What a
    session's messages derive"), so a reply's build takes in only the messages stored since the
    session's last one's; a deleted or evicted session takes it along.
    """
    derived = view.derived("conversation_history", _Derived)
    with derived.lock:
        derived.extend(view.since(len(derived.source)))
        return ConversationHistory._of(derived, index, before)


def _number(message: Message) -> int:
    assert message.seq is not None  # a history's readable messages are stored ones
    return message.seq


class _Layout:
    """The printed length of the messages chosen so far, kept as they are added.

    The output is the heading, then groups separated by a blank line, each group's messages
    one a line: heading + Σ blocks + one newline per message + one more per group.
    """

    def __init__(self, history: ConversationHistory, heading: int, dates: Mapping[int, float]) -> None:
        self._history = history
        self._dates = dates
        self._positions: set[int] = set()
        self.length = heading

    def _cost(self, position: int, shown: _Shown) -> int:
        joined = self._history._joined
        # The groups it merges into: the message before it and the one after it, if shown.
        joins = (position in joined and position - 1 in self._positions) + (
            position + 1 in joined and position + 1 in self._positions
        )
        return len(self._history._block(position, shown, self._dates)) + 1 + (1 - joins)

    def with_(self, position: int, shown: _Shown) -> int:
        """The length with ``shown`` added."""
        return self.length + self._cost(position, shown)

    def add(self, position: int, shown: _Shown) -> None:
        self.length += self._cost(position, shown)
        self._positions.add(position)


def search_by_scan(history: ConversationHistory, query: str) -> str:
    """``history.search(query)`` without the index: every window re-tokenized (bench baseline)."""
    return history.search_places(query, scan=True).text


#: Neighbourhood smoothing: the share of a message's own score its neighbours get, by distance.
_NEIGHBOUR_WEIGHTS = ((0, 1.0), (-1, 0.5), (1, 0.5), (-2, 0.25), (2, 0.25))


def _smooth(own: Mapping[int, float], count: int) -> dict[int, float]:
    """S(i) = own(i) + ½·(own(i−1) + own(i+1)) + ¼·(own(i−2) + own(i+2)), in conversation order.

    ``own`` holds the matching positions only; so does the work (not the whole conversation).
    """
    smoothed: dict[int, float] = {}
    # Added in conversation order, so every path (index or scan) sums in the same order.
    for position in sorted(own):
        score = own[position]
        for distance, weight in _NEIGHBOUR_WEIGHTS:
            i = position + distance
            if 0 <= i < count:
                smoothed[i] = smoothed.get(i, 0.0) + weight * score
    return smoothed


def _overlap(a: Window, b: Window) -> bool:
    return a.start < b.end and b.start < a.end


def _cut_end(text: str, start: int, length: int) -> int:
    """Where a quote of ``length`` characters from ``start`` ends: at a line break near the end
    if there is one, else at a space, rather than mid-word."""
    end = min(len(text), start + length)
    if end >= len(text):
        return end
    for mark in ("\n", " "):
        cut = text.rfind(mark, start + length * 3 // 4, end)
        if cut != -1:
            return cut
    return end


def _next_word(text: str, start: int, limit: int) -> int:
    """The start of the first whole word at or after ``start`` (not past ``limit``)."""
    space = text.find(" ", start, limit)
    return space + 1 if space != -1 else start


def _check_query(query: str) -> list[str]:
    if not query.strip():
        raise HistoryError("the query is empty: give the words to look for")
    return query_terms(query)


def _shorten(text: str, limit: int = 160) -> str:
    """A query or label as a heading shows it: long ones end in "…" so quotes keep their room."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _nothing_found(query: str, messages: int) -> str:
    query = _shorten(query)
    if messages == 0:
        return f"Nothing found for “{query}”: there are no earlier messages in this conversation."
    return (
        f"Nothing found for “{query}” in the {messages} earlier messages of this conversation. "
        "Try other words, such as a name or number the message used."
    )


# --- the tool ------------------------------------------------------------------------------


class HistoryArguments(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A search (``query``) or a read (``message`` from ``offset``); which one is checked in ``parse``."""

    query: (
        msgspec.UnsetType
        | Annotated[
            str,
            msgspec.Meta(
                description=(
                    "Words to look for in earlier messages, such as a name, number or phrase they "
                    'used; a month and day ("November 12") also finds that day\'s messages.'
                )
            ),
        ]
    ) = msgspec.UNSET
    message: (
        msgspec.UnsetType
        | Annotated[
            int, msgspec.Meta(ge=1, description="The number of one earlier message to read exactly, such as 12.")
        ]
    ) = msgspec.UNSET
    offset: Annotated[
        int, msgspec.Meta(ge=0, description="With message: the character to start reading from (default 0).")
    ] = 0

    @classmethod
    def parse(cls, arguments: Mapping[str, Any]) -> HistoryArguments:
        """Checked arguments. Leniently first: null means not given, and a number written as
        text ("12", "#12") or as 12.0 is taken as 12, as small models write them."""
        lenient = {name: _lenient(name, value) for name, value in arguments.items() if value is not None}
        parsed = parse_arguments(TOOL_NAME, lenient, cls)
        searching, reading = isinstance(parsed.query, str), isinstance(parsed.message, int)
        if searching and reading:
            raise ToolError(f"{TOOL_NAME}: give either query (to search) or message (to read), not both")
        if not searching and not reading:
            raise ToolError(f"{TOOL_NAME}: give query (words to search for) or message (a number to read)")
        if isinstance(parsed.query, str) and not parsed.query.strip():
            raise ToolError(f"{TOOL_NAME}: query must be the words to look for, not {parsed.query!r}")
        if searching and parsed.offset:
            raise ToolError(f"{TOOL_NAME}: offset goes with message, not with query")
        return parsed


SPEC = tool_spec(TOOL_NAME, DESCRIPTION, HistoryArguments)


class ConversationHistoryTool:
    """``conversation_history`` for one reply: search (query) or read (message, offset)."""

    spec = SPEC

    def __init__(self, history: ConversationHistory | Callable[[], ConversationHistory]) -> None:
        #: Or what builds it, on the first call: most replies never look back, and building
        #: it reads every earlier message, each reply anew (docs/decisions.md, "First look").
        self._history = history

    @property
    def history(self) -> ConversationHistory:
        if not isinstance(self._history, ConversationHistory):
            self._history = self._history()
        return self._history

    def title(self, arguments: Mapping[str, Any]) -> str:
        query = arguments.get("query")
        if isinstance(query, str) and query.strip():
            return f"Searching earlier in this conversation for “{query.strip()}”"
        message = _as_int(arguments.get("message"))
        if message is not None:
            return f"Reading message #{message} from earlier in this conversation"
        return "Looking back through this conversation"

    async def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        parsed = HistoryArguments.parse(arguments)
        if isinstance(parsed.query, str):
            query = parsed.query
            found = await in_worker(lambda: self.history.search_places(query))  # reads the stored index
            return ToolResult(
                text=found.text,
                subject=parsed.query.strip(),
                evidence=tuple(f"history:{p.seq}:{p.start}" for p in found.places),
                quotes=tuple(Quote(message=seq, text=block) for seq, block in found.blocks),
                preface=found.heading,
            )
        message, offset = parsed.message, parsed.offset
        assert isinstance(message, int)  # parse took either a query or a message
        text = await in_worker(lambda: self.history.read(message, offset))
        return ToolResult(
            text=text,
            subject=f"message #{message}",
            evidence=(f"history:{message}:{offset}",),
            quotes=(Quote(message=message, text=text),),
        )


def _lenient(name: str, value: Any) -> Any:
    """A number argument as an int when ``_as_int`` can read it; anything else as it came."""
    number = _as_int(value) if name in ("message", "offset") else None
    return value if number is None else number


def _as_int(value: Any) -> int | None:
    """An integer argument; small models sometimes send "12" or "#12", which are taken as 12."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("#").isdigit():
        return int(value.strip().lstrip("#"))
    return None
