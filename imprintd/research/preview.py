"""What a client is shown of a finished tool step: the start of its result, redacted and bounded.

A step's end (ACP's ``tool_call_update`` content, ``imprint/toolStep``'s ``preview``) carries it,
so an editor can show what a call returned without the daemon sending whole files, or megabytes
of an MCP server's answer, over the wire. It is for showing only: what is stored, and what the
model read, are the result itself (``research/loop.py``).

The resources a step names are the URIs of its result a client may open: ``http``, ``https`` and
``file`` only (a server names what it likes, and a ``javascript:`` or ``command:`` URI is not one
to click), redacted (a password or a token in one is hidden).
"""

from __future__ import annotations

from collections.abc import Iterable

from imprintd.redact import redact, redact_head

#: The most characters of a preview, the mark of a cut included.
PREVIEW_CHARS = 2_000
#: What ends a preview of a result that goes on.
CUT = "…"
#: The URI schemes a client is handed as a link.
LINKED_SCHEMES = ("http://", "https://", "file://")


def preview(text: str) -> str:
    """The start of ``text``, redacted, at most ``PREVIEW_CHARS`` characters; a longer one is cut
    at a line's end when one falls in the second half of the preview, and ends with ``CUT``."""
    head = redact_head(text, PREVIEW_CHARS + 1)
    if len(head) <= PREVIEW_CHARS:
        return head
    head = head[: PREVIEW_CHARS - len(CUT) - 1]
    line_end = head.rfind("\n")
    if line_end >= PREVIEW_CHARS // 2:
        return head[:line_end].rstrip() + "\n" + CUT
    return head.rstrip() + CUT


def linkable(uri: str) -> bool:
    """Whether ``uri`` is one a client may be handed as a link."""
    return uri.lower().startswith(LINKED_SCHEMES)


def links(uris: Iterable[str]) -> tuple[str, ...]:
    """Those of ``uris`` a client may open, in order, each once, redacted."""
    return tuple(dict.fromkeys(redact(uri) for uri in uris if linkable(uri)))
