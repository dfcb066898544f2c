"""Numbered results and the sources of an answer (docs/decisions.md, "Numbered results and
sources").

Every result the coordinator sees in a reply carries a number, given once and kept for the
whole reply: each search hit, each file range read, each earlier message quoted or read, each
section worker's notes and each reread of an analyzed original. A repeated call, or the same
place returned again, keeps its first number; the notes of the final answer written from notes
use the same numbers, so ``[n]`` means one thing on both paths. Numbers are given when a result
arrives and never change, so earlier messages of the prompt stay byte-stable between rounds.

After the answer, Imprint (not the model) turns the numbers it cites into sources. The answer
is read as Markdown by one scanner (``_Scanner``): code (fenced blocks, inline spans, indented
blocks) passes through byte for byte and holds no citation; in prose only a marker in citation
position is one (``[n]``, ``[n, m]``, ``[n-m]`` after a word or a clause's end, numbers from 1).
A cited number that names no result of this reply is removed from the text, also while it
streams, holding back at most ``MAX_HELD_CHARS`` characters, each character read at most twice.
An answer that cites nothing after reading lists the places it read, marked as not cited. Each
citation binds to the claim it closes (its sentence since the citation before it; on the next
line, the sentence before), and each cited source is checked against those claims (``check``):
one that shares none of their numbers, identifiers, quoted strings (or, for a claim with none of
those, longer words), or that sets a name the claim names to another value than the claim
states, is unsupported, with the reason; one cited only where no claim stands ("See [2].") gets
no verdict. The check is lexical and deterministic.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import msgspec

from imprintd.messages import SourceKind, SourceRef, Style, ToolCall, ToolOrigin
from imprintd.tools.base import ToolResult

if TYPE_CHECKING:
    from imprintd.context.sections import Analysis

#: Characters of the citing sentence quoted in an unsupported source's reason.
REASON_QUOTE_CHARS = 80
#: A sentence with no number, identifier or quoted string is checked by its words this long or longer.
MIN_WORD_CHARS = 4


class Passage(msgspec.Struct, frozen=True, kw_only=True):
    """One numbered result of this reply: what ``[number]`` names, and the text the model read of it."""

    number: int
    kind: SourceKind
    label: str
    text: str
    path: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    message: int | None = None
    #: The place was read (a file range, a message), not only found by a search.
    read: bool = False
    #: An MCP tool's result: its server, tool, arguments and the URI it names.
    origin: ToolOrigin | None = None


def _span(path: str, start: int, end: int) -> str:
    return f"{path}:{start}" if start == end else f"{path}:{start}–{end}"


#: Characters of a tool call's arguments its label shows; the whole call is in ``origin``.
ARGUMENTS_LABEL_CHARS = 80


def origin_label(origin: ToolOrigin) -> str:
    """An MCP result as a source line names it: ``git: git_log {"max_count": 5}`` and its URI."""
    shown = json.dumps(origin.arguments, ensure_ascii=False, sort_keys=True) if origin.arguments else ""
    if len(shown) > ARGUMENTS_LABEL_CHARS:
        shown = shown[: ARGUMENTS_LABEL_CHARS - 1] + "…"
    label = f"{origin.server}: {origin.tool}" + (f" {shown}" if shown else "")
    return f"{label} ({origin.uri})" if origin.uri else label


class Numbering:
    """The numbers of one reply's results: the first time a place is seen it gets the next number."""

    def __init__(self) -> None:
        self._by_key: dict[str, Passage] = {}
        self._by_number: dict[int, Passage] = {}
        #: Analyzed sources: source id → what it is in words, and its message's seq (the user's).
        self._sources: dict[str, tuple[str, int | None]] = {}

    def __len__(self) -> int:
        return len(self._by_number)

    def get(self, number: int) -> Passage | None:
        return self._by_number.get(number)

    @property
    def passages(self) -> list[Passage]:
        return list(self._by_number.values())

    def _number(self, key: str, **fields) -> Passage:
        known = self._by_key.get(key)
        if known is not None:
            text, read = fields["text"], fields.get("read", False)
            if (text and text not in known.text) or (read and not known.read):
                # The same place shown again with other words (a message quoted at another
                # offset, then read): its number stays, and the check reads both.
                joined = known.text if text in known.text else f"{known.text}\n{text}"
                known = msgspec.structs.replace(known, text=joined, read=known.read or read)
                self._by_key[key] = self._by_number[known.number] = known
            return known
        passage = Passage(number=len(self._by_number) + 1, **fields)
        self._by_key[key] = self._by_number[passage.number] = passage
        return passage

    def by_number(self) -> dict[int, Passage]:
        return dict(self._by_number)

    def preview(self) -> Numbering:
        """A copy to number a result in without giving its numbers away (it may be analyzed instead)."""
        copy = Numbering()
        copy._by_key, copy._by_number = dict(self._by_key), dict(self._by_number)
        copy._sources = dict(self._sources)
        return copy

    # -- numbering results ---------------------------------------------------------------------
    def result(self, call: ToolCall, result: ToolResult) -> tuple[str, list[Passage]]:
        """The result as the coordinator reads it, each place after its number, and those places.

        Failed and empty results have no number and are shown as they are.
        """
        if not result.ok or not result.text.strip():
            return result.text, []
        if result.hits:
            shown, passages = [], []
            for hit in result.hits:
                label = _span(hit.path, hit.start_line, hit.end_line)
                passage = self._number(
                    f"hit:{hit.id}",
                    kind="file",
                    label=label,
                    text=hit.excerpt,
                    path=hit.path,
                    start_line=hit.start_line,
                    end_line=hit.end_line,
                )
                passages.append(passage)
                shown.append(f"[{passage.number}] {label}\n{hit.excerpt}")
            if result.footer:
                shown.append(result.footer)
            return "\n\n".join(shown), passages
        if result.quotes:
            shown, passages = [result.preface] if result.preface else [], []
            for quote in result.quotes:
                passage = self._number(
                    f"message:{quote.message}",
                    kind="message",
                    label=f"message #{quote.message}",
                    text=quote.text,
                    message=quote.message,
                    read=not result.preface,  # a read of one message; a search has a heading
                )
                passages.append(passage)
                shown.append(f"[{passage.number}] {quote.text}")
            return "\n\n".join(shown), passages
        if result.sources and len(result.sources) == 1 and result.content.strip():
            source = result.sources[0]
            label = _span(source.path, source.start_line, source.end_line)
            passage = self._number(
                f"read:{source.path}:{source.start_line}-{source.end_line}",
                kind="file",
                label=label,
                text=result.content,
                path=source.path,
                start_line=source.start_line,
                end_line=source.end_line,
                read=True,
            )
            return f"[{passage.number}] {label}\n{result.text}", [passage]
        if result.origin is not None:
            # An MCP tool's whole result is one source: what the server said for these arguments.
            origin = result.origin
            key = f"tool:{origin.server}:{origin.tool}:{json.dumps(origin.arguments, sort_keys=True)}"
            label = origin_label(origin)
            passage = self._number(key, kind="tool", label=label, text=result.content, read=True, origin=origin)
            return f"[{passage.number}] {label}\n{result.text}", [passage]
        if call.name == "read_chat_section" and result.evidence:
            # Its evidence key is "section:<source id>:<start>:<end>" (``context/sections.py``).
            _, source_id, start, end = result.evidence[0].split(":")
            where, message = self._sources.get(source_id, ("an analyzed source", None))
            label = f"characters {start}–{end} of {where}"
            passage = self._number(
                f"reread:{result.evidence[0]}",
                kind="section",
                label=label,
                text=result.text,
                message=message,
                read=True,
            )
            return f"[{passage.number}] {label}\n{result.text}", [passage]
        return result.text, []

    def analysis(
        self, analysis: Analysis, *, message: int | None = None, result: ToolResult | None = None
    ) -> list[Passage]:
        """One number per worker's notes on an analyzed source (the user's message ``message``,
        or a tool ``result``, whose place the notes point at)."""
        place = result.sources[0] if result is not None and len(result.sources) == 1 else None
        if message is not None:
            where = f"message #{message}"
        elif place is not None:
            where = _span(place.path, place.start_line, place.end_line)
        elif result is not None and result.origin is not None:
            where = origin_label(result.origin)
        else:
            where = "a long tool result"
        self._sources[analysis.source_id] = (where, message)
        passages = []
        for worker in analysis.workers:
            first, last = worker.sections[0], worker.sections[-1]
            sections = f"section {first}" if first == last else f"sections {first}–{last}"
            passages.append(
                self._number(
                    f"section:{analysis.source_id}:{worker.worker}",
                    kind="section",
                    label=f"notes on {sections} of {analysis.needed} of {where}",
                    text=worker.notes,
                    path=place.path if place else None,
                    start_line=place.start_line if place else None,
                    end_line=place.end_line if place else None,
                    message=message,
                    origin=result.origin if result is not None else None,
                )
            )
        return passages


# --- citations in the answer -----------------------------------------------------------------
#
# One scanner reads an answer as Markdown, character by character, in linear time: fenced code
# blocks (``` or ~~~, any info string), inline code spans and indented code blocks pass through
# untouched, and in prose only a marker in citation position is a citation (docs/decisions.md,
# "Numbered results and sources"). The stream filter, ``keep_valid``, ``cited_numbers`` and the
# sentences a citation binds to all come from it, so they agree whatever the chunks.

#: The most digits of a cited number: a reply never numbers 10,000 results.
MAX_CITED_DIGITS = 4
#: The longest citation marker, brackets included; a longer bracket is text.
MAX_MARKER_CHARS = 32
#: The most numbers a range ``[n-m]`` may span; a wider one is text.
MAX_RANGE = 20
#: Spaces and tabs held back before a possible marker (an invalid citation takes them with it).
MAX_HELD_SPACES = 8
#: The most the stream filter ever holds back: those spaces and an unfinished marker.
MAX_HELD_CHARS = MAX_HELD_SPACES + MAX_MARKER_CHARS

#: What a marker may follow directly, with no space: a sentence's end ("3.[1]").
_BEFORE_TIGHT = frozenset(".!?")
#: What a marker never follows, even after spaces: an operator, an opening bracket, a separator
#: (``PORTS = [80, 443]``, ``{"retries": [3]}``, ``[[1], [2]]``). A word, a number, a closing
#: bracket or quote, or a clause's end may come before a citation.
_NOT_BEFORE_SPACED = frozenset("=:,([{<>+-/|&^~@#$\\")
#: What may follow a marker: a space, a line's end, a clause's end, another marker.
_AFTER = frozenset(" \t\n.,;:!?)*_[")
_DIGITS = frozenset("0123456789")

_PROSE, _PREFIX, _RUN, _FENCE_RUN, _CODE = range(5)


class Citation(msgspec.Struct, frozen=True):
    """A marker in citation position: the spaces before it, its text, and the numbers it names
    (each ``(first, last)``: a single number, or a range)."""

    spaces: str
    marker: str
    items: tuple[tuple[int, int], ...]

    @property
    def numbers(self) -> list[int]:
        return [number for first, last in self.items for number in range(first, last + 1)]


def _items(marker: str) -> tuple[tuple[int, int], ...] | None:
    """The numbers of a well-formed marker (``[1]``, ``[2, 5]``, ``[3-6]``), or None."""
    items = []
    for part in marker[1:-1].split(","):
        ends = part.strip().replace("–", "-").split("-")
        if len(ends) > 2 or not all(ends):
            return None
        first, last = int(ends[0]), int(ends[-1])
        if last < first or last - first >= MAX_RANGE:
            return None
        items.append((first, last))
    return tuple(items)


class _Scanner:
    """Markdown read one character at a time; calls ``text(piece, kind)`` (kind: "prose", "span"
    for inline code, "block" for a code block's lines, "run" for a run of ````` or ``~`` at a
    line's start: a fence when "block" follows) and ``cite(citation)``. What it holds back
    is at most ``MAX_HELD_CHARS`` characters: spaces and a marker not yet decided."""

    def __init__(self, text: Callable[[str, str], None], cite: Callable[[Citation], None]) -> None:
        self._text, self._cite = text, cite
        self._mode = _PREFIX
        self._indent = 0  # columns of the line's leading whitespace
        #: The line before was no paragraph's (blank, code, or none): an indented line is code.
        self._may_indent = True
        self._fence: tuple[str, int] | None = None  # the open fence's character and length
        self._run_char, self._run = "", 0  # a run of ` or ~ at a line's start
        self._span = 0  # an open inline code span's backticks
        self._ticks = 0  # a run of backticks in prose, not yet ended
        self._prev = "\n"  # the last prose character; a line's start reads as "\n"
        self._after_cite = False
        self._spaces = ""  # held: spaces that may go with a marker
        self._marker = ""  # held: "[…" that may be a citation
        self._marker_at_line_start = False

    @property
    def held(self) -> int:
        return len(self._spaces) + len(self._marker)

    def feed(self, chunk: str) -> None:
        step = self._step
        for char in chunk:
            step(char)

    def close(self) -> None:
        if self._marker and self._marker.endswith("]"):
            self._finish_marker(None)
        else:
            self._fail_marker()
        self._flush_spaces()

    # -- held spaces and markers ------------------------------------------------------------------
    def _flush_spaces(self) -> None:
        if self._spaces:
            self._text(self._spaces, "prose")
            self._prev, self._spaces = self._spaces[-1], ""

    def _fail_marker(self) -> None:
        """The held marker is text: its ``[`` goes out, the rest is read again as prose."""
        if not self._marker:
            return
        rest, self._marker = self._marker[1:], ""
        self._flush_spaces()
        self._text("[", "prose")
        self._prev, self._after_cite = "[", False
        for char in rest:  # no "[" among them: bounded, and nothing here holds a marker again
            self._step(char)

    def _finish_marker(self, after: str | None) -> None:
        marker = self._marker
        items = _items(marker)
        at_line_start = self._marker_at_line_start
        if items is None or (after is not None and (after not in _AFTER or (at_line_start and after == ":"))):
            self._fail_marker()
            return
        self._marker = ""
        spaces, self._spaces = self._spaces, ""
        self._cite(Citation(spaces, marker, items))
        self._prev, self._after_cite = "]", True

    def _grow_marker(self, char: str) -> bool:
        """Whether ``char`` continues the held marker's grammar: ``[`` digits (``,`` or ``-``
        digits)* ``]``, numbers from 1, at most ``MAX_CITED_DIGITS`` digits each."""
        marker = self._marker
        last = marker[-1]
        if len(marker) >= MAX_MARKER_CHARS:
            return False
        if char in _DIGITS:
            if last in _DIGITS:
                digits = len(marker) - len(marker.rstrip("0123456789"))
                return digits < MAX_CITED_DIGITS
            return char != "0"
        if char in ",-–]":
            return last in _DIGITS
        if char in " \t":
            return last == "," or (last in " \t" and marker.rstrip(" \t").endswith(","))
        return False

    # -- one character -----------------------------------------------------------------------------
    def _step(self, char: str) -> None:
        if self._marker:
            if self._marker[-1] == "]":
                self._finish_marker(char)
            elif self._grow_marker(char):
                self._marker += char
                return
            else:
                self._fail_marker()
        if self._spaces:
            if char in " \t":
                self._spaces += char
                if len(self._spaces) > MAX_HELD_SPACES:
                    self._text(self._spaces[0], "prose")
                    self._spaces = self._spaces[1:]
                return
            if char == "[" and self._mode == _PROSE and not self._span and self._may_cite(spaced=True):
                self._marker, self._marker_at_line_start = "[", False
                return
            self._flush_spaces()
        if char == "\n":
            self._end_line()
            return
        mode = self._mode
        if mode == _PREFIX:
            self._prefix(char)
        elif mode == _PROSE:
            self._prose(char)
        elif mode == _RUN:
            if char == self._run_char:
                self._run += 1
                self._text(char, "run")
            else:
                self._end_run()
                self._step(char)
        elif mode == _FENCE_RUN:
            fence_char, length = self._fence or ("", 0)
            if char == fence_char and self._run >= 0:
                self._run += 1
            elif char in " \t" and self._run >= length:
                self._run = length  # only spaces may follow a closing fence
            else:
                self._run = -1  # not a closing fence: the line is code
            self._text(char, "block")
        else:
            self._text(char, "block")

    def _prefix(self, char: str) -> None:
        if char in " \t":
            self._indent += 4 - self._indent % 4 if char == "\t" else 1
            self._text(char, "block" if self._fence else "prose")
            return
        if self._fence:
            if self._indent <= 3 and char == self._fence[0]:
                self._mode, self._run = _FENCE_RUN, 1
            else:
                self._mode = _CODE
            self._text(char, "block")
            return
        if self._indent >= 4 and self._may_indent:
            self._mode = _CODE
            self._text(char, "block")
            return
        if self._indent <= 3 and char in "`~":
            self._mode, self._run_char, self._run = _RUN, char, 1
            self._text(char, "run")  # a fence or not, decided when the run ends; never altered
            return
        self._mode, self._prev = _PROSE, "\n"
        self._prose(char)

    def _end_run(self) -> None:
        """A run of ` or ~ at a line's start ended: three or more open a fence, else prose."""
        char, run = self._run_char, self._run
        if run >= 3:
            self._fence, self._span, self._mode = (char, run), 0, _CODE
            return
        self._mode = _PROSE
        if char == "`":
            self._ticks = run
            self._end_ticks()
        else:
            self._prev, self._after_cite = char, False

    def _end_ticks(self) -> None:
        if self._span == 0:
            self._span = self._ticks
        elif self._span == self._ticks:
            self._span = 0
        self._ticks, self._prev, self._after_cite = 0, "`", False

    def _prose(self, char: str) -> None:
        if char == "`":
            self._ticks += 1
            self._text(char, "span")
            return
        if self._ticks:
            self._end_ticks()
        if self._span:
            self._text(char, "span")
            return
        if char in " \t":
            self._spaces = char
            return
        if char == "[" and self._may_cite(spaced=False):
            self._marker, self._marker_at_line_start = "[", self._prev == "\n"
            return
        self._text(char, "prose")
        self._after_cite = self._after_cite and char == ","
        self._prev = char

    def _may_cite(self, *, spaced: bool) -> bool:
        prev = self._prev
        if self._after_cite or prev == "\n":
            return True
        if spaced:
            return prev not in _NOT_BEFORE_SPACED
        return prev in _BEFORE_TIGHT

    def _end_line(self) -> None:
        mode = self._mode
        if mode == _RUN:
            self._end_run()
            mode = self._mode
        if self._ticks:
            self._end_ticks()
        blank = mode == _PREFIX
        if mode == _FENCE_RUN and self._fence and self._run >= self._fence[1]:
            self._fence = None
            self._text("\n", "block")
        else:
            self._text("\n", "block" if mode == _CODE or self._fence else "prose")
        if blank:
            self._span = 0  # a code span never crosses a paragraph
        self._may_indent = mode in (_PREFIX, _CODE, _FENCE_RUN)
        self._mode, self._indent, self._prev, self._after_cite = _PREFIX, 0, "\n", False


def _rewrite(citation: Citation, valid: Callable[[int], bool]) -> str:
    """The citation with every number that is not ``valid`` removed; with none left, nothing
    (its spaces go too)."""
    parts, changed = [], False
    for first, last in citation.items:
        if all(valid(number) for number in range(first, last + 1)):
            parts.append(str(first) if first == last else f"{first}-{last}")
        else:
            changed = True
            parts.extend(str(number) for number in range(first, last + 1) if valid(number))
    if not changed:
        return citation.spaces + citation.marker
    return f"{citation.spaces}[{', '.join(parts)}]" if parts else ""


class CitationFilter:
    """Streamed text with invalid citations removed as it goes: what it emits, joined, is
    ``keep_valid`` of everything fed, whatever the chunks. Holds back at most
    ``MAX_HELD_CHARS`` characters (``held``), and reads each character once."""

    def __init__(self, valid: Callable[[int], bool], emit: Callable[[str], None]) -> None:
        self._valid, self._emit, self._out = valid, emit, list[str]()
        self._scanner = _Scanner(lambda piece, kind: self._out.append(piece), self._cite)

    def _cite(self, citation: Citation) -> None:
        self._out.append(_rewrite(citation, self._valid))

    @property
    def held(self) -> int:
        """Characters fed and not yet emitted."""
        return self._scanner.held

    def __call__(self, chunk: str) -> None:
        self._scanner.feed(chunk)
        self._flush()

    def close(self) -> None:
        self._scanner.close()
        self._flush()

    def _flush(self) -> None:
        if self._out:
            text = "".join(self._out)
            self._out.clear()
            if text:
                self._emit(text)


def keep_valid(text: str, valid: Callable[[int], bool]) -> str:
    """``text`` with every cited number that is not ``valid`` removed (a citation left empty
    goes whole); code and brackets out of citation position are left as written."""
    out: list[str] = []
    stream = CitationFilter(valid, out.append)
    stream(text)
    stream.close()
    return "".join(out)


def citations_in(text: str) -> list[Citation]:
    """Every citation of ``text``, in order."""
    found: list[Citation] = []
    scanner = _Scanner(lambda piece, kind: None, found.append)
    scanner.feed(text)
    scanner.close()
    return found


def cited_numbers(text: str) -> list[int]:
    """Every number ``text`` cites, in order of first citation."""
    return list(dict.fromkeys(number for citation in citations_in(text) for number in citation.numbers))


def strip_citations(text: str) -> str:
    """``text`` with no citations at all (a spoken answer is read aloud)."""
    return keep_valid(text, lambda number: False)


# --- which claim a citation closes -----------------------------------------------------------


def _has_content(text: str) -> bool:
    return any(char.isalnum() for char in text)


class _Claims:
    """Each citation with the claim it closes: the text of its sentence since the citation
    before it in that sentence; a citation with nothing before it in its sentence (on the line
    after, or right after another) closes the claim before it. A code block is one claim."""

    def __init__(self) -> None:
        self.bound: list[tuple[Citation, str]] = []
        self._sentence: list[str] = []
        self._claimed = 0  # pieces of the open sentence an earlier citation closed
        self._last = ""  # the last claim closed or ended
        self._block: list[str] = []
        self._run: list[str] = []  # backticks or tildes at a line's start: a fence or prose
        self._ends = False  # the sentence's last prose character ends a sentence (".", "!", "?")

    def text(self, piece: str, kind: str) -> None:
        if kind == "run":
            self._run.append(piece)
            return
        if kind == "block":
            if self._sentence:
                self._end_sentence()
            self._block.extend(self._run)
            self._run.clear()
            self._block.append(piece)
            return
        self._end_block()
        if self._run:
            piece, kind = "".join(self._run) + piece, "span"
            self._run.clear()
        for char in piece:
            if kind == "prose" and (char == "\n" or (char in " \t" and self._ends)):
                self._end_sentence()
                continue
            self._sentence.append(char)
            self._ends = kind == "prose" and char in ".!?"

    def _end_sentence(self) -> None:
        rest = "".join(self._sentence[self._claimed :])
        if _has_content(rest):
            self._last = rest.strip()
        self._sentence.clear()
        self._claimed, self._ends = 0, False

    def _end_block(self) -> None:
        if self._block:
            block = "".join(self._block).strip()
            self._block.clear()
            if _has_content(block):
                self._last = block

    def cite(self, citation: Citation) -> None:
        self._end_block()
        # Only what came since the last claim is joined: many citations in one sentence stay linear.
        claim = "".join(self._sentence[self._claimed :])
        if _has_content(claim):
            self._last, self._claimed = claim.strip(), len(self._sentence)
        self.bound.append((citation, self._last))


def claims(text: str) -> list[tuple[Citation, str]]:
    """Each citation of ``text`` with the claim it closes ("" when there is none)."""
    sink = _Claims()
    scanner = _Scanner(sink.text, sink.cite)
    scanner.feed(text)
    scanner.close()
    return sink.bound


def citing_sentences(text: str) -> dict[int, list[str]]:
    """Each cited number's claims, in order (a claim citing a number twice counts once)."""
    found: dict[int, dict[str, None]] = {}
    for citation, claim in claims(text):
        for number in citation.numbers:
            found.setdefault(number, {})[claim] = None
    return {number: list(claims_of) for number, claims_of in found.items()}


# --- checking a citation against its source --------------------------------------------------

_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?![\w])")
_SNAKE = re.compile(r"\b[A-Za-z_][A-Za-z0-9]*_[A-Za-z0-9_]+\b")
_CAMEL = re.compile(r"\b(?:[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*|[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*)\b")
_DOTTED = re.compile(r"\b[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)+\b")
_QUOTED = re.compile(r"`([^`\n]+)`|\"([^\"\n]+)\"|“([^”\n]+)”|'([^'\n]{2,})'")
_WORD = re.compile(r"[A-Za-z][A-Za-z']+")
_BOOLEAN = re.compile(r"\b(true|false|none|null)\b", re.IGNORECASE)
#: A name's value where the source sets it: ``NAME = 5.0``, ``name: int = 3``, ``name=100``,
#: ``"name": "x"``, ``NAME = Timeout(timeout=5.0)`` (the first literal of a call).
_ASSIGNED = re.compile(
    r"(?<![\w./:-])(?P<name>[A-Za-z_][A-Za-z0-9_]*)[\"']?[ \t]*(?::[ \t]*[\w\[\]., |]{1,40}?[ \t]*)?"
    r"(?:=|:(?=[ \t]))[ \t]*"
    r"(?:[A-Za-z_][\w.]*\()?(?:[A-Za-z_]\w*[ \t]*=[ \t]*)?"
    r"(?P<value>-?\d+(?:\.\d+)?(?![\w.])|\"[^\"\n]*\"|'[^'\n]*'|True\b|False\b|None\b|true\b|false\b|null\b)"
)
#: Common words that say nothing about a source.
STOPWORDS = frozenset(
    """
    about above after again also because been before being below between both cannot could does doing
    down during each from further have having here into itself just more most much must only other over
    same should some such than that their them then there these they this those through under until very
    were what when where which while will with would your yours answer file files line lines note notes
    says said shows set sets used uses using value values
    show shown according mentioned described stated refer refers reference listed noted details example
    """.split()  # noqa: SIM905 (a word list reads better as words)
)


def _normal_number(text: str) -> str:
    text = text.replace(",", "")
    try:
        return repr(float(text)) if len(text) < 20 else text  # 5 and 5.0 are one value
    except ValueError:
        return text


def _normal_value(text: str) -> tuple[str, str]:
    """A literal as (kind, value): numbers by value, strings without quotes, booleans lowered."""
    if text[0] in "\"'`“":
        return "string", text[1:-1]
    lowered = text.lower()
    if lowered in ("true", "false", "none", "null"):
        return "constant", "none" if lowered == "null" else lowered
    return "number", _normal_number(text)


class Terms(msgspec.Struct, frozen=True):
    """What a claim says that a source can be checked for."""

    numbers: frozenset[str]
    names: frozenset[str]  # identifiers and quoted strings, matched as written
    words: frozenset[str]  # only used when there are no numbers and names
    #: The literals the claim states, as ``_normal_value`` gives them.
    values: frozenset[tuple[str, str]] = frozenset()

    @property
    def specific(self) -> bool:
        return bool(self.numbers or self.names)

    @property
    def empty(self) -> bool:
        return not (self.numbers or self.names or self.words)


def terms_of(claim: str) -> Terms:
    quoted = {next(group for group in match.groups() if group).strip() for match in _QUOTED.finditer(claim)}
    names = {m.group() for pattern in (_SNAKE, _CAMEL, _DOTTED) for m in pattern.finditer(claim)}
    names |= {q for q in quoted if q}
    numbers = {_normal_number(m.group()) for m in _NUMBER.finditer(claim)}
    words = {
        w.lower().strip("'") for w in _WORD.findall(claim) if len(w) >= MIN_WORD_CHARS and w.lower() not in STOPWORDS
    }
    values = {("number", number) for number in numbers} | {("string", q) for q in quoted if q}
    values |= {_normal_value(m.group()) for m in _BOOLEAN.finditer(claim)}
    return Terms(frozenset(numbers), frozenset(names), frozenset(words), frozenset(values))


def shares(terms: Terms, source: str) -> bool:
    """Whether ``source`` holds any of ``terms`` (numbers and names when there are any, else words)."""
    if terms.specific:
        if terms.numbers & {_normal_number(m.group()) for m in _NUMBER.finditer(source)}:
            return True
        lowered = source.lower()
        return any(name.lower() in lowered for name in terms.names)
    found = {w.lower().strip("'") for w in _WORD.findall(source)}
    return bool(terms.words & found)


def contradiction(claim: str, terms: Terms, source: str) -> tuple[str, str] | None:
    """(name, the source's value) where the claim names something the source sets and states a
    value of that kind, none of them the source's: "DEFAULT_TIMEOUT_CONFIG, which is 60 seconds"
    against ``DEFAULT_TIMEOUT_CONFIG = Timeout(timeout=5.0)``. None when nothing contradicts."""
    if not terms.values:
        return None
    named = {m.group() for pattern in (_SNAKE, _CAMEL, _DOTTED) for m in pattern.finditer(claim)}
    named |= {name.split(".")[-1] for name in named}
    named |= {word for word in terms.words if word.isidentifier()}  # "the timeout is 60"
    assigned: dict[str, dict[tuple[str, str], str]] = {}
    for match in _ASSIGNED.finditer(source):
        name = match.group("name")
        if name in named or (name.islower() and name in terms.words):
            value = match.group("value")
            assigned.setdefault(name, {})[_normal_value(value)] = value
    for name, values in assigned.items():
        kinds = {kind for kind, _ in values}
        stated = {value for value in terms.values if value[0] in kinds}
        if stated and not stated & values.keys():
            return name, next(iter(values.values()))
    return None


def _quote(claim: str) -> str:
    quote = " ".join(claim.split())
    if len(quote) > REASON_QUOTE_CHARS:
        quote = quote[: REASON_QUOTE_CHARS - 1].rstrip() + "…"
    return quote


#: The reason of a source cited only where no claim stands beside the citation.
NO_CLAIM = "No claim stands beside the citation to check it against (a bare “See [n]”)."


def check(passage: Passage, citing: Sequence[str]) -> tuple[bool | None, str]:
    """(supported, reason) for ``passage`` against the claims citing it: False when one claim
    shares nothing with its text, or states a value its text contradicts for the same name;
    None when no claim says anything to check; True otherwise."""
    checked = False
    for claim in citing:
        claim = strip_citations(claim)  # as a sentence is written; ``claims`` gives them without
        terms = terms_of(claim)
        if terms.empty:
            continue
        checked = True
        contradicted = contradiction(claim, terms, passage.text)
        if contradicted is not None:
            name, value = contradicted
            return False, (
                f"The cited text sets {name} to {value}, which the sentence citing it does not say: “{_quote(claim)}”"
            )
        if not shares(terms, passage.text):
            return False, (
                f"The cited text shares no number, name, quoted text or word with the sentence citing it: "
                f"“{_quote(claim)}”"
            )
    return (True, "") if checked else (None, NO_CLAIM)


# --- sources ---------------------------------------------------------------------------------


def source_ref(passage: Passage, *, cited: bool, supported: bool | None, reason: str = "") -> SourceRef:
    return SourceRef(
        number=passage.number,
        kind=passage.kind,
        label=passage.label,
        path=passage.path,
        start_line=passage.start_line,
        end_line=passage.end_line,
        message=passage.message,
        cited=cited,
        supported=supported,
        reason=reason,
        origin=passage.origin,
    )


def sources(answer: str, passages: Mapping[int, Passage], read: Iterable[Passage] = ()) -> list[SourceRef]:
    """The sources of ``answer`` (its text before invalid numbers were removed): each cited
    passage, checked; with no valid citation, the places ``read`` as not cited."""
    citing = citing_sentences(answer)
    cited = [passages[number] for number in cited_numbers(answer) if number in passages]
    if cited:
        refs = []
        for passage in cited:
            supported, reason = check(passage, citing.get(passage.number, ()))
            refs.append(source_ref(passage, cited=True, supported=supported, reason=reason))
        return refs
    unique = {passage.number: passage for passage in read if passage.read}
    return [source_ref(passage, cited=False, supported=None) for passage in unique.values()]


def _where(source: SourceRef) -> str:
    if source.path is not None and source.start_line is not None and source.end_line is not None:
        if source.kind == "file":
            lines = str(source.start_line)
            if source.end_line != source.start_line:
                lines += f"-{source.end_line}"
            return f"{source.path}:{lines}"
    return source.label


def sources_block(refs: Sequence[SourceRef]) -> str:
    """ "Sources:" and one line per source, written by Imprint, not the model: ``[n] place``, and
    "(read, not cited)" or "(unsupported)" where that is so."""
    if not refs:
        return ""
    lines = ["Sources:"]
    for ref in refs:
        mark = " (read, not cited)" if not ref.cited else " (unsupported)" if ref.supported is False else ""
        lines.append(f"[{ref.number}] {_where(ref)}{mark}")
    return "\n".join(lines)


def plain(raw: str, passages: Mapping[int, Passage], style: Style) -> str:
    """The answer's text as it streamed: invalid citations out; every citation out when spoken."""
    return strip_citations(raw) if style == "spoken" else keep_valid(raw, passages.__contains__)


def valid_for(passages: Mapping[int, Passage], style: Style) -> Callable[[int], bool]:
    """Which cited numbers stay in the text: this reply's, and none in a spoken answer."""
    if style == "spoken":
        return lambda number: False
    return lambda number: number in passages
