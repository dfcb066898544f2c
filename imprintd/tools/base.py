"""What every tool is: a schema, a title for the client, and a run that returns structure.

Tools are built for one reply from that reply's session and workspace; nothing here is a
global registry (ADR 0093: "No global tool registry is mutated"). Results carry structure
(hits, sources) so research notes (ADR 0127) are built from it, never parsed from text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import msgspec

from imprintd.messages import ToolSpec


class Source(msgspec.Struct, frozen=True, kw_only=True):
    """A place in the workspace an editor can open: relative path and 1-based line range."""

    path: str
    start_line: int
    end_line: int


class Hit(msgspec.Struct, frozen=True, kw_only=True):
    """One workspace search hit. ``id`` is stable for the same passage across searches."""

    id: str
    path: str
    start_line: int
    end_line: int
    score: float
    excerpt: str
    kind: str = "file"

    @property
    def source(self) -> Source:
        return Source(path=self.path, start_line=self.start_line, end_line=self.end_line)


class ToolResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a tool call produced.

    ``text`` is what the model sees. ``subject`` names what the call was about (a query, a
    path) for notes and the client. ``evidence`` holds keys of what was seen (hit ids, read
    ranges) so research can tell whether a round found anything new. ``hits`` and
    ``sources`` are the structure notes are built from. ``ok=False`` marks a failed or
    refused call, whose ``text`` says why; it adds no notes.
    """

    text: str
    ok: bool = True
    subject: str = ""
    evidence: tuple[str, ...] = ()
    hits: tuple[Hit, ...] = ()
    sources: tuple[Source, ...] = ()


class ToolError(Exception):
    """A call that cannot be run as asked; the message is shown to the model and the client."""


class Tool(Protocol):
    spec: ToolSpec

    def title(self, arguments: Mapping[str, Any]) -> str:
        """What the client shows while the call runs, e.g. "Searching the workspace for “port”"."""
        ...

    async def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        """Run the call; raise ToolError for a call that cannot be run as asked."""
        ...
