"""Text safe to show: control characters out of titles and of what the CLI prints.

A title, a snippet or an answer is text a person reads, and a terminal takes some characters as
commands: ESC starts a sequence that can clear the screen or move the cursor, BEL rings, BS and
CR overwrite what was printed. C0 (U+0000-U+001F), DEL and C1 (U+0080-U+009F) have no place in a
title; the CLI prints stored text without them (SECURITY.md, "Text shown in a terminal").
"""

from __future__ import annotations

import re
import unicodedata

_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROLS_BUT_LINES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def without_controls(text: str, *, keep_lines: bool = False) -> str:
    """``text`` with every C0, DEL and C1 character removed; a tab becomes a space.

    ``keep_lines`` keeps line feeds (and tabs): for an answer or a document printed whole.
    """
    if keep_lines:
        return _CONTROLS_BUT_LINES.sub("", text)
    return _CONTROLS.sub("", text.replace("\t", " "))


def is_invisible(text: str) -> bool:
    """Whether ``text`` shows nothing: only white space and format characters (zero-width space,
    joiners, the byte-order mark, bidirectional marks: Unicode's Cf)."""
    return all(char.isspace() or unicodedata.category(char) == "Cf" for char in text)
