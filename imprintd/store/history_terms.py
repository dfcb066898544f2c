"""The words of the conversation history index (``history_index.py``, docs/conversation-search.md):
a text's Snowball stems, a stored message's dates as terms, and the terms a query searches for
(its stems without stop words, and the dates it names).
"""

from __future__ import annotations

import re
import threading
import time
from functools import lru_cache
from typing import Any

# Letters and digits; "_", "-", "." and ":" split identifiers, so "BILLING_PORT" matches
# "billing port".
WORD = re.compile(r"[^\W_]+")

# --- words and stems -----------------------------------------------------------------------

_local = threading.local()


def _stemmer() -> Any:
    # Snowball stemmers keep state while stemming a word: one per thread.
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        import snowballstemmer  # on the first search, not when the daemon starts

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
    return [stem(match.group()) for match in WORD.finditer(text)]


# --- dates -----------------------------------------------------------------------------------

_MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")


def local_date(created_at: float) -> time.struct_time:
    """A stored time as the user's local calendar date."""
    return time.localtime(created_at)


def date_label(created_at: float) -> str:
    """``2026-11-29``: the local date a message was stored."""
    return time.strftime("%Y-%m-%d", local_date(created_at))


def date_terms(created_at: float) -> list[str]:
    """A message's date as index terms: its month and day (``date:11-29``), its year and month
    (``date:2026-11``)."""
    day = local_date(created_at)
    return [f"date:{day.tm_mon}-{day.tm_mday}", f"date:{day.tm_year}-{day.tm_mon}"]


#: Date terms one query asks for at most: "jan 1 feb 2 …" pasted from a log names hundreds of
#: dates, and each is one more term to look up (the first ones are kept).
MAX_DATE_TERMS = 16


def query_date_terms(query: str) -> list[str]:
    """Date terms a query asks for: only when it names a month and a number, or an ISO date.

    "what did I say on November 12" → the 12th of November of any year; "in November 2026" →
    that month; a bare "12" matches text only, so a port or a count is never taken for a day.
    At most ``MAX_DATE_TERMS``, in the order the query names them; the months and numbers are
    told apart once each before they are paired, so a query of thousands of them costs a pass
    over its words, not their product.
    """
    terms: dict[str, None] = {}
    for year, month, day in _ISO_DATE.findall(query):
        terms |= dict.fromkeys((f"date:{int(month)}-{int(day)}", f"date:{int(year)}-{int(month)}"))
        if len(terms) >= MAX_DATE_TERMS:
            return list(terms)[:MAX_DATE_TERMS]
    words = [match.group().lower() for match in WORD.finditer(query)]
    months = dict.fromkeys(_MONTHS[word] for word in words if word in _MONTHS)
    numbers = dict.fromkeys(int(word) for word in words if word.isdigit() and len(word) <= 4)
    days = [n for n in numbers if 1 <= n <= 31]
    years = [n for n in numbers if 1970 <= n <= 2199]
    for month in months:
        for term in [*(f"date:{month}-{n}" for n in days), *(f"date:{n}-{month}" for n in years)]:
            terms[term] = None
            if len(terms) >= MAX_DATE_TERMS:
                return list(terms)
    return list(terms)


# --- a query's terms -----------------------------------------------------------------------------

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


def is_stopword(word: str) -> bool:
    """A lower-case word too common to search for (the workspace's first look drops them too)."""
    return word in _STOPWORDS


#: Distinct stems one query searches for at most (the first ones): each is one more list of
#: postings to read and score, and a pasted log of thousands of words held a worker thread for
#: minutes (SECURITY.md, "Bounds").
MAX_QUERY_STEMS = 64


def query_stems(query: str) -> list[str]:
    """The distinct stems a query searches for, stop words left out unless nothing else is left;
    the first ``MAX_QUERY_STEMS`` of them."""
    words = list(dict.fromkeys(match.group().lower() for match in WORD.finditer(query)))
    content = [word for word in words if word not in _STOPWORDS] or words
    found: dict[str, None] = {}
    for word in content:
        found[stem(word)] = None
        if len(found) == MAX_QUERY_STEMS:
            break
    return list(found)


def query_terms(query: str) -> list[str]:
    """The query's stems, and its date terms when it names a month and a number."""
    return query_stems(query) + query_date_terms(query)
