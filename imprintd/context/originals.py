"""The originals a reply analyzed in sections, and the rereads of them.

Section analysis (``imprintd.context.sections``) shows the coordinator notes instead of an
oversized source; the source itself is kept here, exactly, so that its characters can be
read again: in memory only, under random ids, per reply (``ReplySections``); a bounded
process-wide ``SectionArchive`` keeps recent replies' registries for the client's
``imprint/read_chat_section``; and ``ReadChatSectionTool`` is the coordinator's
``read_chat_section`` tool over its own reply's originals. A read that cannot be served
raises ``SectionError``, naming the limit or the unknown id.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Mapping
from typing import Annotated, Any

import msgspec

from imprintd.tools.base import ToolError, ToolResult, parse_arguments, tool_spec

#: The most characters one reread returns.
READ_MAX_CHARS = 4000
#: Recent replies whose originals ``imprint/read_chat_section`` can still read.
ARCHIVE_REPLIES = 64
#: ...and at most about this many characters of originals across them (the newest is always kept).
ARCHIVE_MAX_CHARS = 16_000_000


class SectionError(ValueError):
    """A reread that cannot be served; the message names the limit or the unknown id."""


class _Original(msgspec.Struct, frozen=True):
    text: str
    label: str


class ReplySections:
    """One reply's analyzed originals, in memory under random ids, and its section count."""

    def __init__(self, reply_id: str | None = None) -> None:
        self.reply_id = reply_id
        self._originals: dict[str, _Original] = {}
        #: Sections analyzed in this reply so far, all analyses together (``sections.MAX_SECTIONS``).
        self.sections_used = 0

    def register(self, text: str, label: str) -> str:
        """Keep ``text`` and return its new random id."""
        source_id = secrets.token_urlsafe(9)
        while source_id in self._originals:
            source_id = secrets.token_urlsafe(9)
        self._originals[source_id] = _Original(text, label)
        return source_id

    @property
    def chars(self) -> int:
        """Characters of all originals kept."""
        return sum(len(original.text) for original in self._originals.values())

    def label(self, source_id: str) -> str:
        return self._original(source_id).label

    def length(self, source_id: str) -> int:
        return len(self._original(source_id).text)

    def read(self, source_id: str, start: int, length: int) -> str:
        """Exactly ``text[start:start + length]`` of source ``source_id``, or SectionError."""
        original = self._original(source_id)
        size = len(original.text)
        if start < 0:
            raise SectionError(f"start must be 0 or more, not {start}")
        if start >= size:
            raise SectionError(
                f"start {start} is past the end of the {original.label}, which has {size} characters "
                f"(the last start is {size - 1})"
            )
        if length <= 0:
            raise SectionError(f"length must be at least 1, not {length}")
        if length > READ_MAX_CHARS:
            raise SectionError(f"length {length} is too long: at most {READ_MAX_CHARS} characters per read")
        return original.text[start : start + length]

    def count_section(self) -> None:
        """Count one section as analyzed (a worker request that ran, whatever its outcome)."""
        self.sections_used += 1

    def _original(self, source_id: str) -> _Original:
        original = self._originals.get(source_id)
        if original is None:
            raise SectionError(f"unknown source id {source_id!r}: this reply analyzed no source with that id")
        return original


class SectionArchive:
    """The ``ReplySections`` of recent replies, by reply id, for ``imprint/read_chat_section``.

    Bounded: at most ``max_replies`` replies and about ``max_chars`` characters of originals;
    the oldest replies are evicted first (the newest is always kept) and then read as expired.
    """

    #: How many evicted reply ids are remembered, to say "expired" rather than "unknown".
    _EXPIRED_MEMORY = 4096

    def __init__(self, max_replies: int = ARCHIVE_REPLIES, max_chars: int = ARCHIVE_MAX_CHARS) -> None:
        self.max_replies = max_replies
        self.max_chars = max_chars
        self._replies: OrderedDict[str, ReplySections] = OrderedDict()
        self._expired: OrderedDict[str, None] = OrderedDict()

    def open(self, reply_id: str) -> ReplySections:
        """The registry of reply ``reply_id``, created (and the oldest evicted) if it is new."""
        existing = self._replies.get(reply_id)
        if existing is not None:
            return existing
        sections = ReplySections(reply_id)
        self._replies[reply_id] = sections
        self._expired.pop(reply_id, None)
        self._evict()
        return sections

    def get(self, reply_id: str) -> ReplySections:
        """The registry of reply ``reply_id``; SectionError when it is unknown or expired."""
        sections = self._replies.get(reply_id)
        if sections is not None:
            return sections
        if reply_id in self._expired:
            raise SectionError(
                f"reply {reply_id!r} has expired: only the sources of the last {self.max_replies} replies are kept"
            )
        raise SectionError(f"unknown reply id {reply_id!r}: no reply with that id analyzed a source")

    def read(self, reply_id: str, source_id: str, start: int, length: int) -> str:
        """Exact characters of a source analyzed in reply ``reply_id``, or SectionError."""
        return self.get(reply_id).read(source_id, start, length)

    def __len__(self) -> int:
        return len(self._replies)

    def _evict(self) -> None:
        total = sum(sections.chars for sections in self._replies.values())
        while len(self._replies) > 1 and (len(self._replies) > self.max_replies or total > self.max_chars):
            reply_id, sections = self._replies.popitem(last=False)
            total -= sections.chars
            self._expired[reply_id] = None
            while len(self._expired) > self._EXPIRED_MEMORY:
                self._expired.popitem(last=False)


# -- the coordinator's tool ----------------------------------------------------------------------------
class ReadChatSectionArguments(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    source_id: Annotated[str, msgspec.Meta(description="The source id named in the analysis notes.")]
    start: Annotated[int, msgspec.Meta(ge=0, description="First character to read (0-based).")]
    length: Annotated[
        int, msgspec.Meta(ge=1, le=READ_MAX_CHARS, description=f"How many characters to read, 1 to {READ_MAX_CHARS}.")
    ]


READ_CHAT_SECTION_SPEC = tool_spec(
    "read_chat_section",
    "Reread exact characters of a source that was too long to show whole and was analyzed in "
    "sections (its notes name the source id). Returns the original text of characters "
    f"start to start+length, at most {READ_MAX_CHARS} characters per read. Use it to check a "
    "detail the notes mention before relying on it.",
    ReadChatSectionArguments,
)


class ReadChatSectionTool:
    """``read_chat_section`` for one reply: it reads only that reply's analyzed originals."""

    spec = READ_CHAT_SECTION_SPEC

    def __init__(self, sections: ReplySections) -> None:
        self._sections = sections

    def title(self, arguments: Mapping[str, Any]) -> str:
        try:
            source_id, start, length = (arguments[name] for name in ("source_id", "start", "length"))
            label = self._sections.label(source_id)
            end = min(int(start) + int(length), self._sections.length(source_id))
            return f"Rereading characters {int(start)}–{end} of the analyzed {label}"
        except (KeyError, TypeError, ValueError):
            return "Rereading part of an analyzed source"

    async def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        parsed = parse_arguments(READ_CHAT_SECTION_SPEC.name, arguments, ReadChatSectionArguments)
        source_id, start, length = parsed.source_id, parsed.start, parsed.length
        try:
            text = self._sections.read(source_id, start, length)
            label = self._sections.label(source_id)
        except SectionError as error:
            raise ToolError(str(error)) from None
        end = start + len(text)
        # The text is exactly the original characters (never more than READ_MAX_CHARS, so a
        # later clip leaves it whole); the range goes in the structure, not the text.
        return ToolResult(
            text=text,
            subject=f"characters {start}–{end} of the analyzed {label}",
            evidence=(f"section:{source_id}:{start}:{end}",),
        )
