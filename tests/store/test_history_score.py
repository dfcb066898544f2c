"""A window's score, written once: the SQL the user's search runs is the Python the tool computes."""

from __future__ import annotations

import itertools

import apsw

from imprintd.store.history_score import K1, B, Sql, bm25_part, idf, score_window, window_score


def in_sqlite(expression: Sql, **values: float) -> float:
    return apsw.Connection(":memory:").execute(f"SELECT {expression}", values).fetchone()[0]


def test_sqlite_computes_the_parts_and_the_score_as_python_does_to_the_last_bit():
    part = bm25_part(Sql(":weight"), Sql(":count"), Sql(":words"), Sql(":average"), Sql(":k1"), Sql(":b"))
    for weight, count, words, average in itertools.product((0.07, 1.3, 6.9), (1, 2, 7), (1, 40, 133), (11.0, 97.3)):
        expected = bm25_part(weight, count, words, average, K1, B)
        assert in_sqlite(part, weight=weight, count=count, words=words, average=average, k1=K1, b=B) == expected
    score = window_score(Sql(":parts"), Sql(":matched"), Sql(":total"))
    assert in_sqlite(score, parts=3.7, matched=1.9, total=4.1) == window_score(3.7, 1.9, 4.1)


def test_a_window_scores_its_terms_parts_times_the_share_of_the_weight_it_matches():
    weights = {"bill": idf(100, 3), "port": idf(100, 40), "use": idf(100, 90)}
    total = sum(weights.values())
    both = score_window(["bill", "port", "use"], {"bill": 1, "port": 2}, weights, total, 50, 60.0)
    parts = bm25_part(weights["bill"], 1, 50, 60.0, K1, B) + bm25_part(weights["port"], 2, 50, 60.0, K1, B)
    assert both == window_score(parts, weights["bill"] + weights["port"], total)
    # The rarer word weighs more, and a window holding more of the query scores more.
    assert weights["bill"] > weights["port"] > weights["use"]
    assert both > score_window(["bill", "port", "use"], {"bill": 1}, weights, total, 50, 60.0) > 0
    assert score_window(["bill"], {}, weights, total, 50, 60.0) == 0.0
