"""A session's title as the user names it (``imprint/renameSession``).

A session is titled from its first question when it is stored (``store.title_from``: its first
line that shows something, at most ``TITLE_LIMIT`` characters, no model call); the user may rename
it to any one line of text within the same limit. Either way a title is text: control characters
are removed (``printable``), and one of only white space or zero-width characters is empty.
"""

from __future__ import annotations

import re

from imprintd.printable import is_invisible, without_controls
from imprintd.store import TITLE_LIMIT


class TitleError(ValueError):
    """A title that cannot be given; the message names the field and what is accepted."""


def clean_title(title: str) -> str:
    """``title`` on one line (runs of white space, line breaks included, become one space), without
    control characters, trimmed.

    TitleError when nothing visible is left (white space, zero-width characters) or it is longer
    than ``TITLE_LIMIT`` characters.
    """
    # Line breaks are white space (one space), other controls go: "a \x07 b" is "a b".
    cleaned = re.sub(r" {2,}", " ", without_controls(re.sub(r"\s+", " ", title))).strip()
    if is_invisible(cleaned):
        raise TitleError("title: it is empty; give the session a name of 1 to 80 characters")
    if len(cleaned) > TITLE_LIMIT:
        raise TitleError(f"title: it has {len(cleaned):,} characters; a title has at most {TITLE_LIMIT}")
    return cleaned
