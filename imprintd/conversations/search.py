"""Searching every stored conversation for the user (``imprint/searchConversations``).

It reads the history index that ``conversation_history`` reads (``store/history_index.py``,
docs/conversation-search.md): the same windows, stems, stop words and date terms, and the same
window score (``store/history_score.py``: BM25 with k 1.2, b 0.3, times the idf share of the query
the window matches), which SQLite computes here for every window holding a term. What differs,
because a person reads the result rather than a model:

- every stored session is searched, not one; persist-false sessions are never searched (they are
  the user's "keep this off the disk" conversations, and live only in memory);
- idf and the average window length are taken over all sessions together;
- a message scores its best window, without neighbourhood smoothing: a hit must show the words
  asked for, so a reply that only follows a matching question is not a hit;
- the result is a ranked, paged list of messages, each with a short snippet around the match with
  the matched words marked, not a 4,000-character quote block;
- windows holding only a query's common words are scored only when one of them could reach the
  page (``_without_common_only_windows``): the same page, at a fraction of the reading;
- the corpus statistics (windows, their average length, each term's window count) are kept per
  connection while nothing is written (``_statistics``): counting a common term's windows reads
  all its postings (a sixth to a quarter of a search), and a search typed word by word asks again.

Its cost is bounded whatever is asked (SECURITY.md, "Bounds"): a query's terms are its first
``MAX_QUERY_STEMS`` stems and ``MAX_DATE_TERMS`` dates (``history_terms.query_terms``), a page starts at
most ``MAX_OFFSET`` messages in, and a search whose ``stop`` is set (its request was cancelled)
ends in the store (``Store.stopped_by``) instead of running on.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

import apsw
import msgspec

from imprintd.store import Store
from imprintd.store.history_score import K1, B, Sql, bm25_part, idf, window_score
from imprintd.store.history_terms import query_terms, stem

#: Results per page, by default and at most.
DEFAULT_LIMIT = 20
MAX_LIMIT = 100
#: The furthest page starts here: a search ranks ``offset + limit`` messages to show a page.
MAX_OFFSET = 10_000
#: The dates ``since`` and ``until`` may name (nothing is stored before 1970; the calendar's end).
FIRST_DAY, LAST_DAY = date(1970, 1, 1), date(9999, 12, 30)
#: About this many characters of a message around its first match make a snippet.
SNIPPET_CHARS = 160
#: A query's term in this many times the windows of its rarest term is common: windows holding
#: only common terms are not scored when none of them could reach the page (``_without_common_only_windows``).
COMMON_TIMES_RAREST = 4
#: Terms whose window counts one connection keeps, at most (past it the cache starts again).
CACHED_TERMS = 4_096
#: A search of up to this many terms merges the terms' postings in window order (``_best``); a
#: longer one groups them (a compound SELECT takes at most 500 parts).
MERGED_TERMS = 64

_ISO_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


class SearchError(ValueError):
    """A search that cannot be run as asked; the message names the field and what is accepted."""


class FoundMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A message found by ``_best``: its best window (``start:end`` of ``content``) and score."""

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


@dataclass(frozen=True)
class SnippetPart:
    text: str
    match: bool


@dataclass(frozen=True)
class Hit:
    session_id: str
    title: str
    workspace: str | None
    seq: int
    role: str
    created_at: float
    score: float
    snippet: tuple[SnippetPart, ...]


@dataclass(frozen=True)
class SearchPage:
    hits: tuple[Hit, ...]
    #: The ``offset`` of the next page; None on the last.
    next_offset: int | None


def day_start(day: str, field: str) -> float:
    """The local midnight starting ``day`` (``YYYY-MM-DD``) in Unix seconds; SearchError naming ``field``."""
    try:
        if not _ISO_DAY.fullmatch(day):
            raise ValueError
        parsed = date.fromisoformat(day)
    except ValueError:
        raise SearchError(f"{field}: {day!r} is not a date; expected YYYY-MM-DD, e.g. 2026-11-29") from None
    if not FIRST_DAY <= parsed <= LAST_DAY:
        raise SearchError(f"{field}: {day} is out of range; expected a date from {FIRST_DAY} to {LAST_DAY}")
    return datetime(parsed.year, parsed.month, parsed.day).timestamp()


def _folder(workspace: str) -> str:
    """``workspace`` as sessions store theirs (absolute, symbolic links resolved); it need not exist
    any more, as the sessions researching it outlive it."""
    try:
        if not workspace.strip() or "\0" in workspace:
            raise ValueError
        return str(Path(workspace).expanduser().resolve())
    except (OSError, ValueError, RuntimeError):
        raise SearchError(f"workspace: {workspace[:120]!r} is not a folder path") from None


def search(
    store: Store,
    query: str,
    *,
    workspace: str | None = None,
    since: str | None = None,
    until: str | None = None,
    limit: int = DEFAULT_LIMIT,
    offset: int = 0,
    stop: threading.Event | None = None,
) -> SearchPage:
    """The stored messages matching ``query``, best first: page ``offset`` .. ``offset + limit``.

    ``workspace`` keeps sessions of that folder (or one inside it); ``since`` and ``until`` are
    local dates (``YYYY-MM-DD``), both days included. Once ``stop`` is set (the request was
    cancelled) the search ends with ``store.ReadStopped`` instead of running on.
    """
    terms = query_terms(query)
    if not query.strip() or not terms:
        raise SearchError(f"query: {query!r} has no word to search for; give at least one word (letters or digits)")
    if not 1 <= limit <= MAX_LIMIT:
        raise SearchError(f"limit: {limit} is out of range; expected 1 to {MAX_LIMIT}")
    if not 0 <= offset <= MAX_OFFSET:
        raise SearchError(f"offset: {offset} is out of range; expected 0 to {MAX_OFFSET:,}")
    folder = _folder(workspace) if workspace is not None else None
    after = day_start(since, "since") if since is not None else None
    before = day_start(until, "until") + 86_400 if until is not None else None
    if after is not None and before is not None and before <= after:
        raise SearchError(f"until: {until} is before since: {since}")
    with store.stopped_by(stop):
        windows, average_words, counts = _statistics(store, terms)
        weights = {term: idf(windows, df) for term, df in counts.items() if df}
        asked: dict[str, Any] = dict(average_words=average_words, workspace=folder, after=after, before=before)
        found, more = _without_common_only_windows(store, weights, counts, asked, limit, offset) or _best(
            store, weights, **asked, limit=limit, offset=offset
        )
    wanted = _wanted_words({term for term in terms if not term.startswith("date:")})
    hits = tuple(_hit(message, wanted) for message in found)
    return SearchPage(hits=hits, next_offset=offset + len(hits) if more else None)


@dataclass
class _Statistics:
    """What ``_window_counts`` told one connection at ``generation``."""

    generation: tuple[int, int]
    windows: int
    average_words: float
    counts: dict[str, int] = field(default_factory=dict)


_cached: weakref.WeakKeyDictionary[apsw.Connection, _Statistics] = weakref.WeakKeyDictionary()
_cached_lock = threading.Lock()


def _generation(db: apsw.Connection) -> tuple[int, int]:
    """Changes whenever the database may have: ``data_version`` moves with every commit of another
    connection (of this process or another), ``total_changes`` with every row this one writes."""
    return int(db.pragma("data_version")), db.total_changes()


def _statistics(store: Store, terms: Sequence[str]) -> tuple[int, float, dict[str, int]]:
    """``_window_counts(store, terms)``, from what this thread's connection was told before while
    the database is unchanged since.

    An answer is kept only when the generation is the same before and after it was read: a write
    landing in between (or the store's first search indexing old sessions) leaves it uncached, and
    the next search reads again.
    """
    with store.reading() as db:  # the store's calls below share this connection
        before = _generation(db)
        with _cached_lock:
            known = _cached.get(db)
        if known is None or known.generation != before:
            known = None
        counted = {term: known.counts[term] for term in terms if term in known.counts} if known else {}
        asked = [term for term in terms if term not in counted]
        if known is not None and not asked:
            return known.windows, known.average_words, counted
        windows, average_words, counts = _window_counts(store, asked)
        if _generation(db) != before:
            # Written meanwhile: nothing kept, and every term counted again in one reading.
            return _window_counts(store, terms) if counted else (windows, average_words, counts)
        counted.update(counts)
        if known is None or len(known.counts) > CACHED_TERMS:
            known = _Statistics(before, windows, average_words)
        known.counts.update(counted)
        with _cached_lock:
            _cached[db] = known
        return windows, average_words, {term: counted[term] for term in terms}


def _without_common_only_windows(
    store: Store, weights: dict[str, float], counts: dict[str, int], asked: dict[str, Any], limit: int, offset: int
) -> tuple[list[FoundMessage], bool] | None:
    """The page as ``_best`` ranks it, reading only the windows that hold a rare term of the
    query; None where that cannot be shown to be the same page (the caller then scores every window).

    A query such as "deployment region eu-west" matches most stored windows through its common
    words, and scoring those is most of a search's time, yet such a window can never rank: a window
    without a rare term scores under ``(k1 + 1) · W · W / total``, W the common terms' weight (each
    term's BM25 part stays under ``(k1 + 1)`` times its weight, and its coverage is at most
    ``W / total``). So the rare terms' windows are scored first (max-score pruning); when the page
    is full and its last hit scores above that bound, no other window could have entered it, and
    the one that follows it is a rare-term window too.
    """
    rarest = min(counts[term] for term in weights) if weights else 0
    common = [term for term in weights if counts[term] >= COMMON_TIMES_RAREST * rarest]
    rare = [term for term in weights if term not in common]
    if not common or not rare:
        return None
    total = sum(weights.values())
    common_weight = sum(weights[term] for term in common)
    bound = window_score((K1 + 1) * common_weight, common_weight, total)
    found, more = _best(store, weights, **asked, limit=limit, offset=offset, holding=rare)
    if len(found) < limit or not more or found[-1].score <= bound:
        return None
    return found, more


def _window_counts(store: Store, terms: Sequence[str]) -> tuple[int, float, dict[str, int]]:
    """Over every stored session's index: the searchable windows, their average length in words,
    and how many windows hold each of ``terms`` (what the terms' weights are made from)."""
    store.index_every_session()
    terms = list(dict.fromkeys(terms))
    with store.reading() as db:
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


def _best(
    store: Store,
    weights: dict[str, float],
    *,
    average_words: float,
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

    A window scores ``history_score.window_score`` (BM25 of windows ``average_words`` long, times
    the share of the weight it matches); a message its best window. ``workspace`` keeps sessions of
    that folder or one inside it; ``after`` and ``before`` (Unix seconds) bound when the message was
    stored.
    SQLite scores every window holding a term, from the postings by term (migrations 5 and 6),
    and keeps only the best ones (a bounded sort); the best window of each message is picked here.
    """
    store.index_every_session()
    total_weight = sum(weights.values())
    if not weights or total_weight <= 0:
        return [], False
    params: dict[str, Any] = {
        "weights": msgspec.json.encode(weights).decode(),
        "k1": K1,
        "b": B,
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
    if holding:
        # The windows holding one of ``holding`` are found first, and each looks up its postings
        # of every term (the CROSS JOINs keep SQLite from reading a whole session's postings per window).
        params["holding"] = msgspec.json.encode(list(holding)).decode()
        postings = (
            f"SELECT p.history_id AS history_id, p.window AS window, {_part('q.weight')} AS part, q.weight AS weight"
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
                f"SELECT p.history_id AS history_id, p.window AS window, {_part(f':weight{n}')} AS part,"
                f" :weight{n} AS weight FROM history_postings p{joins} WHERE p.term = :term{n} AND {where}"
            )
        postings = " UNION ALL ".join(branches) + " ORDER BY 1, 2"
    else:
        postings = (
            f"SELECT p.history_id AS history_id, p.window AS window, {_part('q.weight')} AS part, q.weight AS weight"
            f" FROM q JOIN history_postings p ON p.term = q.term{joins} WHERE {where}"
        )
    # Equal scores: the newer session, then the later message, goes first (a window's number
    # grows with its message's seq; within a message the earlier window is the hit).
    scored = f"""
            SELECT history_id, window, {window_score(Sql("sum(part)"), Sql("sum(weight)"), Sql(":total_weight"))}
            FROM ({postings})
            GROUP BY history_id, window"""
    if len(weights) == 1 and not holding:
        # One term: a window has one posting, so no grouping (half a one-word search's time);
        # the same arithmetic as the sums of one value, so the same scores to the last bit.
        scored = (
            f"SELECT history_id, window, {window_score(Sql('part'), Sql('weight'), Sql(':total_weight'))}"
            f" FROM ({postings})"
        )
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
    with store.reading() as db:
        while True:
            rows: list[tuple[Any, ...]] = db.execute(sql, params | {"windows": windows}).fetchall()
            best: dict[tuple[int, int], tuple[Any, ...]] = {}
            for row in rows:
                best.setdefault((row[0], row[1]), row)
            if len(best) >= wanted or len(rows) < windows:
                break
            windows *= 4
        page = list(best.values())[offset : offset + limit]
        found = _found(db, page)
    return found, len(best) > offset + limit


def _found(db: apsw.Connection, page: list[tuple[Any, ...]]) -> list[FoundMessage]:
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


def _part(weight: str) -> Sql:
    """A posting's ``history_score.bm25_part`` as SQL: its term's ``weight`` (a column or parameter),
    its ``count`` and its window's length in ``words`` (``_best``'s parameters give the rest)."""
    return bm25_part(Sql(weight), Sql("p.count"), Sql("p.words"), Sql(":average"), Sql(":k1"), Sql(":b"))


def _hit(message: FoundMessage, wanted: _WordFinder) -> Hit:
    return Hit(
        session_id=message.session_id,
        title=message.title,
        workspace=message.workspace,
        seq=message.seq,
        role=message.role,
        created_at=message.created_at,
        score=message.score,
        snippet=_snippet(message.content, message.start, message.end, wanted),
    )


def snippet(text: str, start: int, end: int, wanted: set[str], width: int = SNIPPET_CHARS) -> tuple[SnippetPart, ...]:
    """About ``width`` characters of ``text`` around the first word of ``start:end`` whose stem is
    ``wanted``, cut at word edges, on one line, with every such word marked.

    A message found only by its date or a tool call's arguments starts at the window's start.
    """
    return _snippet(text, start, end, _wanted_words(wanted), width)


def _snippet(
    text: str, start: int, end: int, wanted_words: _WordFinder, width: int = SNIPPET_CHARS
) -> tuple[SnippetPart, ...]:
    first = next(wanted_words(text, start, end), None)
    focus = first.start() if first else start
    begin = max(0, focus - width // 3)
    finish = min(len(text), begin + width)
    begin = max(0, min(begin, finish - width))
    while 0 < begin < focus and text[begin - 1].isalnum():
        begin += 1
    while finish < len(text) and finish > focus and text[finish].isalnum() and text[finish - 1].isalnum():
        finish -= 1
    parts: list[SnippetPart] = []
    cursor = begin
    for match in wanted_words(text, begin, finish):
        if match.start() > cursor:
            parts.append(SnippetPart(_one_line(text[cursor : match.start()]), False))
        parts.append(SnippetPart(match.group(), True))
        cursor = match.end()
    if cursor < finish:
        parts.append(SnippetPart(_one_line(text[cursor:finish]), False))
    if begin > 0:
        parts.insert(0, SnippetPart("…", False))
    if finish < len(text):
        parts.append(SnippetPart("…", False))
    return tuple(parts)


_WordFinder = Callable[[str, int, int], Iterator[re.Match[str]]]


def _wanted_words(wanted: set[str]) -> _WordFinder:
    """The words (as the index splits them) of ``text[start:end]`` whose stem is ``wanted``. Stemming is the slow
    part of a snippet, and a stem keeps its word's first two letters (Snowball changes endings
    only), so one regex finds the words starting so and only those are stemmed."""
    if not wanted:
        return lambda text, start, end: iter(())
    starts = "|".join(sorted({re.escape(term[:2]) for term in wanted}))
    candidate = re.compile(rf"(?<![^\W_])(?:{starts})[^\W_]*", re.IGNORECASE)

    def found(text: str, start: int, end: int) -> Iterator[re.Match[str]]:
        return (m for m in candidate.finditer(text, start, end) if stem(m.group()) in wanted)

    return found


_SPACES = re.compile(r"\s+")


def _one_line(text: str) -> str:
    # Every whitespace character but the space is unprintable: most snippets have nothing to join.
    if text.isprintable() and "  " not in text:
        return text
    return _SPACES.sub(" ", text)


def plain(parts: tuple[SnippetPart, ...], mark: tuple[str, str] = ("[", "]")) -> str:
    """A snippet as one string, matches between ``mark``'s two strings (what the CLI prints)."""
    return "".join(f"{mark[0]}{p.text}{mark[1]}" if p.match else p.text for p in parts)
