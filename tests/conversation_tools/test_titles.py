"""A title is text (imprintd/conversations/titles.py, store.title_from): control characters out,
invisible-only titles empty."""

from __future__ import annotations

import pytest

from imprintd.conversations.titles import TitleError, clean_title
from imprintd.store import title_from


@pytest.mark.parametrize(
    ("given", "title"),
    [
        ("\x00\x07\x1b[2J\b\x7fBilling\tport\x9b", "[2JBilling port"),
        ("Billing\r\nport  notes", "Billing port notes"),
        ("a \x07 b", "a b"),
        ("\u200bBilling\u200d port", "\u200bBilling\u200d port"),  # invisible characters beside text stay
    ],
)
def test_a_renamed_title_loses_its_control_characters(given, title):
    assert clean_title(given) == title


@pytest.mark.parametrize("given", ["", " \n ", "\u200b\u200c\u200d\u2060\ufeff", "\x07\x1b\x00", "\u200e\t\u200f"])
def test_a_title_showing_nothing_is_refused_as_empty(given):
    with pytest.raises(TitleError, match="title: it is empty"):
        clean_title(given)


def test_a_title_made_from_a_question_is_its_first_line_that_shows_something_as_text():
    assert title_from("\u200b\ufeff\n\x07\n\tWhich\tport does\x1b[2J billing use?\x9b\nmore") == (
        "Which port does[2J billing use?"
    )
    assert title_from("\u200b\n\x00") == ""
    assert title_from("x" * 100) == "x" * 79 + "…"
