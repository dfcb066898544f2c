"""Hostile text in the scans over user text (SECURITY.md, "Bounds"): the first look's query
building, at the sizes a question may have; what it costs is bench/bench_hostile_text.py's. Redaction: tests/test_redact.py; citations:
tests/research/test_citations_code.py; the repetition guard: tests/models/test_repetition_shapes.py."""

from __future__ import annotations

import random
import re

import pytest

from imprintd.research import first_look


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a" * 1_000_000, ["a" * 1_000_000]),
        ("keep-alive" + "a" * 500_000, ["keep", "alive" + "a" * 500_000, "keepalive" + "a" * 500_000]),
        (("ab-" * 200_000) + "x", ["ab", "ab" * 200_000 + "x"]),
    ],
    ids=["one long word", "a compound of a long word", "a compound of 200,001 parts"],
)
def test_the_first_look_s_query_from_a_megabyte_question_is_its_words(text: str, words: list[str]) -> None:
    # A word of 40,000 letters took 27 s CPU (every letter started a compound); a question may
    # hold 1,000,000 characters. What these cost at a size and four times it (linear):
    # bench/bench_hostile_text.py.
    assert first_look.query(text, []) == " ".join(words)


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
