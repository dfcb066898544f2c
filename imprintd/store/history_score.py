"""How a window of the history index scores for a query: BM25 times coverage
(docs/conversation-search.md, "Ranking").

Written once for the two searches that rank windows: ``conversation_history``
(``context/history.py``) calls these functions with Python numbers; the user's search of every
conversation (``conversations/search.py``) has SQLite score every window holding a term, and calls
the same functions with ``Sql`` column names and parameters to get the expression it runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TypeVar

#: BM25's term-frequency saturation and length normalization (light: windows are similar sizes).
K1 = 1.2
B = 0.3


class Sql(str):
    """An SQL expression that arithmetic extends: ``Sql("p.count") * 2`` is ``Sql("(p.count * 2)")``.

    Every step is parenthesized, so SQLite evaluates the operations in the order Python does.
    """

    def _join(self, operator: str, left: object, right: object) -> Sql:
        return Sql(f"({left} {operator} {right})")

    def __add__(self, other: object) -> Sql:
        return self._join("+", self, other)

    def __radd__(self, other: object) -> Sql:
        return self._join("+", other, self)

    def __sub__(self, other: object) -> Sql:
        return self._join("-", self, other)

    def __rsub__(self, other: object) -> Sql:
        return self._join("-", other, self)

    def __mul__(self, other: object) -> Sql:
        return self._join("*", self, other)

    def __rmul__(self, other: object) -> Sql:
        return self._join("*", other, self)

    def __truediv__(self, other: object) -> Sql:
        return self._join("/", self, other)

    def __rtruediv__(self, other: object) -> Sql:
        return self._join("/", other, self)


Number = TypeVar("Number", float, Sql)


def idf(windows: int, df: int) -> float:
    """A term's weight: its BM25 idf among ``windows`` windows, ``df`` of which hold it."""
    return math.log(1 + (windows - df + 0.5) / (df + 0.5))


def bm25_part(weight: Number, count: Number, words: Number, average_words: Number, k1: Number, b: Number) -> Number:
    """What a term of ``weight`` found ``count`` times adds to a window ``words`` long: its weight
    times BM25's saturation of the count (``k1``), normalized by the window's length (``b``)
    against ``average_words``."""
    return weight * count * (k1 + 1) / (count + k1 * (1 - b + b * words / average_words))


def window_score(parts: Number, matched: Number, total: Number) -> Number:
    """A window's score: the sum of its terms' ``bm25_part`` times its coverage, the share of the
    query's weight ``total`` that the terms it holds weigh (``matched``)."""
    return parts * matched / total


def score_window(
    wanted: Sequence[str],
    found: Mapping[str, int],
    idf: Mapping[str, float],
    total: float,
    words: int,
    average_words: float,
) -> float:
    """``window_score`` of a window ``words`` long that holds the terms ``found`` (term → count) of
    the query's terms ``wanted``, weighed by ``idf`` (summing to ``total``), in Python numbers."""
    parts = matched = 0.0
    for term in wanted:  # in query order, so every path sums in the same order
        count = found.get(term)
        if count and term in idf:
            parts += bm25_part(idf[term], count, words, average_words or 1.0, K1, B)
            matched += idf[term]
    return window_score(parts, matched, total) if total else 0.0
