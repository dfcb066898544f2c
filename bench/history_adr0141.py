"""The first conversation_history search (the best two messages) as it was before the ranking of docs/conversation-search.md, kept verbatim up to its
   tool section (left out) as the baseline of ``bench/bench_history_recall.py``: the best two messages, up to
   three places each, raw term counts (1 + ln tf) times idf, an index built once per reply.

Copied from ``imprintd/context/history.py`` at commit 6b9a705. Not used by imprintd."""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import snowballstemmer

from imprintd.messages import Message, ToolCall
from imprintd.tools.base import ToolError

TOOL_NAME = "conversation_history"

WINDOW_CHARS = 700
WINDOW_STEP = 350
OUTPUT_LIMIT = 4_000
READ_CHARS = 4_000
TOP_MESSAGES = 2
PLACES_PER_MESSAGE = 3
#: How far a window edge moves to avoid cutting a word in two (long unbroken runs, such as
#: base64, are cut anyway rather than growing a window without bound).
SNAP_LIMIT = 40

STRATEGY_LINE = (
    "When the user refers to something earlier in this conversation that is not shown here, "
    "use conversation_history (not search) to find it, then say what you found, quoting it briefly."
)

DESCRIPTION = (
    "Look back through this conversation's earlier messages, including ones no longer shown "
    "to you. Search by words (query), or read one message by its number (message), 4,000 "
    "characters at a time from a character offset (offset)."
)

# Letters and digits; "_", "-", "." and ":" split identifiers, so "BILLING_PORT" matches
# "billing port".
_WORD = re.compile(r"[^\W_]+")

# Dropped from a query (unless nothing else is left): they match everywhere and would let a
# window full of "the" outrank the one with the word asked about.
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "us",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "about",
        "earlier",
        "said",
        "say",
        "told",
        "tell",
        "paste",
        "pasted",
        "message",
        "messages",
    ]
)


class HistoryError(ToolError):
    """A search or read that cannot be done as asked; the message says why."""


# --- words and stems -----------------------------------------------------------------------

_local = threading.local()


def _stemmer() -> Any:
    # Snowball stemmers keep state while stemming a word: one per thread.
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = snowballstemmer.stemmer("english")
    return stemmer


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """The Snowball English stem of ``word``, lower-cased ("billed" and "billing" → "bill")."""
    word = word.lower()
    if word.isdigit() or len(word) > 30:
        return word  # numbers and long identifiers match exactly
    return _stemmer().stemWord(word)


def stems(text: str) -> list[str]:
    """The stem of every word of ``text``, in order."""
    return [stem(match.group()) for match in _WORD.finditer(text)]


def query_stems(query: str) -> list[str]:
    """The distinct stems a query searches for, stop words left out unless nothing else is left."""
    words = [match.group().lower() for match in _WORD.finditer(query)]
    content = [word for word in words if word not in _STOPWORDS] or words
    return list(dict.fromkeys(stem(word) for word in content))


# --- what a message is called ---------------------------------------------------------------

_SUBJECT_KEYS = ("query", "path", "message", "url", "name")


def call_subject(call: ToolCall) -> str:
    """What a tool call was about: its query, path or message number, else its arguments."""
    for key in _SUBJECT_KEYS:
        value = call.arguments.get(key)
        if value not in (None, ""):
            return f"#{value}" if key == "message" else str(value)
    return ", ".join(f"{key}={value}" for key, value in call.arguments.items())


def describe_call(call: ToolCall) -> str:
    """A tool call in words: ``search for “billing port”``, ``read_file src/app.py``."""
    subject = call_subject(call)
    if not subject:
        return call.name
    if "query" in call.arguments:
        return f"{call.name} for “{subject}”"
    return f"{call.name} {subject}"


def calls_by_id(messages: Iterable[Message]) -> dict[str, ToolCall]:
    """Every tool call the assistant messages made, by id (to name the results that answer them)."""
    return {call.id: call for message in messages for call in message.tool_calls}


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
    """One earlier message as the tool sees it."""

    seq: int
    label: str
    text: str
    #: Words the message is found by besides its text: a tool result's query, a call's arguments.
    extra: str
    #: False for earlier conversation_history calls and results: they only quote other
    #: messages, and would outrank the originals for the same words. They can still be read.
    searchable: bool = True


@dataclass(frozen=True)
class _Window:
    entry: int
    start: int
    end: int


@dataclass(frozen=True)
class Place:
    """A quoted place: ``text == message content[start:end]``."""

    seq: int
    start: int
    end: int


@dataclass(frozen=True)
class SearchResult:
    text: str
    places: tuple[Place, ...]


# window id → {query stem: term frequency}, plus document frequencies and the window count.
_Matches = dict[int, dict[str, int]]


class ConversationHistory:
    """The earlier messages of one conversation, searchable and readable by number."""

    def __init__(self, messages: Sequence[Message]) -> None:
        calls = calls_by_id(messages)
        self._entries: list[_Entry] = []
        self._by_seq: dict[int, int] = {}
        for message in messages:
            # Only stored messages have a number to quote and read back.
            if message.seq is None or message.role == "system" or message.seq in self._by_seq:
                continue
            extra = ""
            if message.role == "tool" and message.tool_call_id in calls:
                extra = f"{calls[message.tool_call_id].name} {call_subject(calls[message.tool_call_id])}"
            elif message.tool_calls:
                extra = " ".join(f"{c.name} {call_subject(c)}" for c in message.tool_calls)
            self._by_seq[message.seq] = len(self._entries)
            self._entries.append(
                _Entry(
                    message.seq,
                    describe_message(message, calls),
                    message.content,
                    extra,
                    searchable=not _is_lookback(message, calls),
                )
            )
        self._windows: list[_Window] = [
            _Window(index, start, end)
            for index, entry in enumerate(self._entries)
            if entry.searchable
            for start, end in _window_spans(entry.text)
        ]
        self._index: tuple[dict[str, dict[int, int]], int] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def seqs(self) -> list[int]:
        return [entry.seq for entry in self._entries]

    # -- reading ------------------------------------------------------------------------
    def read(self, seq: int, offset: int = 0) -> str:
        """Message ``seq`` from character ``offset``, at most 4,000 characters, and where to go on."""
        entry = self._entry(seq)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
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
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise HistoryError(f"a message is read by its number, such as 12 (got {seq!r})")
        index = self._by_seq.get(seq)
        if index is None:
            if not self._entries:
                raise HistoryError("there are no earlier messages in this conversation")
            raise HistoryError(
                f"there is no message #{seq} earlier in this conversation; "
                f"its earlier messages are numbered #{self._entries[0].seq} to #{self._entries[-1].seq}"
            )
        return self._entries[index]

    # -- searching ----------------------------------------------------------------------
    def search(self, query: str) -> str:
        """The best two messages for ``query``, up to three quoted places each (indexed)."""
        return self.search_places(query).text

    def search_places(self, query: str, *, scan: bool = False) -> SearchResult:
        """``search`` with the places it quoted; ``scan=True`` re-tokenizes every window instead."""
        wanted = _check_query(query)
        if not wanted:
            raise HistoryError(f"the query {query!r} has no words to search for")
        matches, df, total = self._scan(wanted) if scan else self._lookup(wanted)
        return self._render(query.strip(), wanted, matches, df, total)

    def build_index(self) -> None:
        """Build the inverted index (stem → {window: frequency}); done once, on the first query."""
        postings: dict[str, dict[int, int]] = {}
        for window_id, window in enumerate(self._windows):
            for term, count in self._count(window).items():
                postings.setdefault(term, {})[window_id] = count
        self._index = (postings, len(self._windows))

    def _count(self, window: _Window) -> Counter[str]:
        entry = self._entries[window.entry]
        counts = Counter(stems(entry.text[window.start : window.end]))
        if entry.extra and window.start == 0:
            # A tool result is found by its query, a call by its arguments: they count as
            # words of the message's first window.
            counts.update(stems(entry.extra))
        return counts

    def _lookup(self, wanted: Sequence[str]) -> tuple[_Matches, dict[str, int], int]:
        if self._index is None:
            self.build_index()
        assert self._index is not None
        postings, total = self._index
        matches: _Matches = {}
        df: dict[str, int] = {}
        for term in wanted:
            windows = postings.get(term, {})
            df[term] = len(windows)
            for window_id, count in windows.items():
                matches.setdefault(window_id, {})[term] = count
        return matches, df, total

    def _scan(self, wanted: Sequence[str]) -> tuple[_Matches, dict[str, int], int]:
        matches: _Matches = {}
        df = dict.fromkeys(wanted, 0)
        for window_id, window in enumerate(self._windows):
            counts = self._count(window)
            found = {term: counts[term] for term in wanted if counts[term]}
            if found:
                matches[window_id] = found
                for term in found:
                    df[term] += 1
        return matches, df, len(self._windows)

    # -- ranking and quoting ------------------------------------------------------------
    def _render(
        self, query: str, wanted: Sequence[str], matches: _Matches, df: Mapping[str, int], total: int
    ) -> SearchResult:
        idf = {term: math.log(1 + total / df[term]) for term in wanted if df.get(term)}
        scores = {window_id: _score(found, idf) for window_id, found in matches.items()}
        by_entry: dict[int, list[int]] = {}
        for window_id in scores:
            by_entry.setdefault(self._windows[window_id].entry, []).append(window_id)
        if not by_entry:
            return SearchResult(_nothing_found(query, len(self._entries)), ())

        def rank(entry: int) -> tuple[float, float, int]:
            best = sorted((scores[w] for w in by_entry[entry]), reverse=True)
            return (round(best[0], 9), round(sum(best[:PLACES_PER_MESSAGE]), 9), self._entries[entry].seq)

        chosen = sorted(by_entry, key=rank, reverse=True)[:TOP_MESSAGES]
        picks = [(entry, self._places(by_entry[entry], matches, scores, idf)) for entry in chosen]
        return self._quote(query, picks, matches, idf)

    def _places(
        self, window_ids: list[int], matches: _Matches, scores: Mapping[int, float], idf: Mapping[str, float]
    ) -> list[int]:
        """Up to three windows that do not overlap: the best, then those showing query words
        the earlier ones did not (the place that names a paste, then the place asked about),
        or nearly as good as the best."""
        best = max(window_ids, key=lambda w: (scores[w], -w))
        picked, shown = [best], set(matches[best])
        candidates = sorted(window_ids, key=lambda w: (-scores[w], w))
        while len(picked) < PLACES_PER_MESSAGE:
            free = [w for w in candidates if all(not self._overlap(w, p) for p in picked)]
            if not free:
                break

            def gain(w: int) -> float:
                return sum(idf[t] for t in matches[w] if t not in shown)

            following = max(free, key=lambda w: (gain(w), scores[w], -w))
            if gain(following) <= 0 and scores[following] < 0.75 * scores[best]:
                break
            picked.append(following)
            shown.update(matches[following])
        return sorted(picked, key=lambda w: self._windows[w].start)

    def _overlap(self, a: int, b: int) -> bool:
        wa, wb = self._windows[a], self._windows[b]
        return wa.start < wb.end and wb.start < wa.end

    def _quote(
        self, query: str, picks: list[tuple[int, list[int]]], matches: _Matches, idf: Mapping[str, float]
    ) -> SearchResult:
        heading = (
            f"Earlier in this conversation, for “{_shorten(query)}” (best match first; read a message "
            "exactly with message and offset):\n"
        )
        headers = [
            f"\n#{self._entries[e].seq} {_shorten(self._entries[e].label)}, {len(self._entries[e].text):,} characters"
            for e, _ in picks
        ]
        count = sum(len(windows) for _, windows in picks)
        # Each place: "\n[#12 offset 1234–5678]\n" + quote. Offsets have at most 7 digits each.
        place_overhead = len("\n[#0000000 offset 0000000–0000000]\n")
        fixed = len(heading) + sum(len(h) for h in headers) + count * place_overhead
        length = min(WINDOW_CHARS, max(80, (OUTPUT_LIMIT - fixed) // max(1, count)))
        parts = [heading]
        places: list[Place] = []
        for (entry_index, windows), header in zip(picks, headers, strict=True):
            entry = self._entries[entry_index]
            parts.append(header)
            previous_end = 0
            for window_id in windows:
                start, end = self._excerpt(window_id, matches[window_id], idf, length)
                start = max(start, previous_end)  # never quote the same characters twice
                if start >= end:
                    continue
                previous_end = end
                parts.append(f"\n[#{entry.seq} offset {start}–{end}]\n{entry.text[start:end]}")
                places.append(Place(entry.seq, start, end))
        text = "".join(parts)
        if len(text) > OUTPUT_LIMIT:  # not expected: headings are shortened, offsets have few digits
            text = text[: OUTPUT_LIMIT - 1] + "…"
        return SearchResult(text, tuple(places))

    def _excerpt(
        self, window_id: int, found: Mapping[str, int], idf: Mapping[str, float], length: int
    ) -> tuple[int, int]:
        """``length`` characters around the stretch of the window densest in query words.

        The quote may reach past the window's edges (within the message), so a word near an
        edge is shown with what surrounds it.
        """
        window = self._windows[window_id]
        text = self._entries[window.entry].text
        if len(text) <= length:
            return 0, len(text)
        hits = [
            (window.start + m.start(), stem(m.group()))
            for m in _WORD.finditer(text[window.start : window.end])
            if stem(m.group()) in found
        ]
        if not hits:  # matched only by a tool result's query: quote its beginning
            return window.start, min(len(text), window.start + length)
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
        end = start + length
        # End at a line break when one is near the end, rather than mid-word.
        cut = text.rfind("\n", start + length * 3 // 4, end)
        return start, (cut if cut != -1 and end < len(text) else end)


def search_by_scan(history: ConversationHistory, query: str) -> str:
    """``history.search(query)`` without the index: every window re-tokenized (bench baseline)."""
    return history.search_places(query, scan=True).text


def _is_lookback(message: Message, calls: Mapping[str, ToolCall]) -> bool:
    if message.role == "tool":
        call = calls.get(message.tool_call_id or "")
        return (call.name if call else message.name) == TOOL_NAME
    return bool(message.tool_calls) and all(c.name == TOOL_NAME for c in message.tool_calls)


def _check_query(query: Any) -> list[str]:
    if not isinstance(query, str) or not query.strip():
        raise HistoryError("the query is empty: give the words to look for")
    return query_stems(query)


def _score(found: Mapping[str, int], idf: Mapping[str, float]) -> float:
    # Rarer words weigh more; repeats add less and less.
    return sum(idf[term] * (1.0 + math.log(count)) for term, count in found.items())


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


def _window_spans(text: str) -> list[tuple[int, int]]:
    """700-character windows every 350 characters, widened to whole words, covering all of ``text``."""
    length = len(text)
    if length <= WINDOW_CHARS:
        return [(0, length)]
    spans = []
    for start in range(0, length - WINDOW_STEP, WINDOW_STEP):
        spans.append((_snap_back(text, start), _snap_forward(text, min(length, start + WINDOW_CHARS))))
    return spans


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
