"""Hostile text costs bounded time in the scans over user text (issue 35, SECURITY.md): the
first look's query building. Redaction: tests/test_redact.py; citations:
tests/research/test_citations_code.py; the repetition guard: tests/models/test_repetition_shapes.py."""

from __future__ import annotations

import random
import re
import time

import pytest

from imprintd.research import first_look


@pytest.mark.parametrize("text", ["a" * 1_000_000, "keep-alive" + "a" * 500_000, ("ab-" * 200_000) + "x"])
def test_the_first_look_s_query_from_a_megabyte_question_costs_linear_time(text: str) -> None:
    # A word of 40,000 letters took 27 s CPU (every letter started a compound); a question
    # may hold 1,000,000 characters. A regression guard, generous for a loaded machine.
    start = time.process_time()
    first_look.query(text, [])
    assert time.process_time() - start < 3.0


def test_hyphenated_words_are_found_as_before() -> None:
    before = re.compile(r"[^\W_]+(?:-[^\W_]+)+")
    rng = random.Random(35)
    alphabet = "ab1-_ .é"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        assert first_look._COMPOUND.findall(text) == before.findall(text), text
    assert first_look.content_words("use keep-alive and re-try") == [
        "use",
        "keep",
        "alive",
        "re",
        "try",
        "keepalive",
        "retry",
    ]
