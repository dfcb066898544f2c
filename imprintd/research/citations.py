"""Numbered results and the sources of an answer (docs/decisions.md, "Numbered results and
sources").

Every result the coordinator sees in a reply carries a number, given once and kept for the
whole reply: each search hit, each file range read, each earlier message quoted or read, each
section worker's notes and each reread of an analyzed original. A repeated call, or the same
place returned again, keeps its first number; the notes of the final answer written from notes
use the same numbers, so ``[n]`` means one thing on both paths. Numbers are given when a result
arrives and never change, so earlier messages of the prompt stay byte-stable between rounds.

After the answer, Imprint (not the model) turns the numbers it cites into sources: a number
that names no result of this reply is removed from the text (also while it streams); an
answer that cites nothing after reading lists the places it read, marked as not cited; each
cited source is checked against the sentences that cite it (``check``): one that shares none
of their numbers, identifiers, quoted strings (or, for a sentence with none of those, longer
words) is reported unsupported, with the reason. The check is lexical and deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import msgspec

from imprintd.messages import SourceKind, SourceRef, Style, ToolCall
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


def _span(path: str, start: int, end: int) -> str:
    return f"{path}:{start}" if start == end else f"{path}:{start}–{end}"


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
                )
            )
        return passages


# --- citations in the answer -----------------------------------------------------------------

#: ``[3]`` or ``[2, 5]``, with the spaces before it, and not right after a word or ")":
#: ``items[0]`` and ``f(x)[1]`` are code, not citations.
_CITATION = re.compile(r"(?P<space>[ \t]*)(?<![\w)])\[(?P<numbers>\d+(?:[ \t]*,[ \t]*\d+)*)\]")
#: The end of a chunk that may still become a citation: spaces, then perhaps an open bracket.
_PENDING = re.compile(r"[ \t]*(?:\[[\d, \t]*)?\Z")
#: What a citation's bracket never follows.
_NOT_BEFORE = re.compile(r"[\w)]")


def cited_numbers(text: str) -> list[int]:
    """Every number ``text`` cites, in order of first citation."""
    seen: list[int] = []
    for match in _CITATION.finditer(text):
        for part in match.group("numbers").split(","):
            number = int(part)
            if number not in seen:
                seen.append(number)
    return seen


def keep_valid(text: str, valid: Callable[[int], bool]) -> str:
    """``text`` with every cited number that is not ``valid`` removed (a citation left empty goes whole)."""

    def rewrite(match: re.Match[str]) -> str:
        numbers = [part.strip() for part in match.group("numbers").split(",")]
        kept = [number for number in numbers if valid(int(number))]
        if len(kept) == len(numbers):
            return match.group(0)
        return f"{match.group('space')}[{', '.join(kept)}]" if kept else ""

    return _CITATION.sub(rewrite, text)


class CitationFilter:
    """Streamed text with invalid citations removed as it goes: what it emits, joined, is
    ``keep_valid`` of everything fed. Holds back at most a run of spaces and an open citation."""

    def __init__(self, valid: Callable[[int], bool], emit: Callable[[str], None]) -> None:
        self._valid, self._emit, self._pending = valid, emit, ""
        self._last = ""  # the last character emitted: what a held-back bracket follows

    def __call__(self, chunk: str) -> None:
        text = self._pending + chunk
        match = _PENDING.search(text)
        cut = match.start() if match else len(text)
        before = text[cut - 1] if cut else self._last
        if cut < len(text) and text[cut] == "[" and _NOT_BEFORE.match(before):
            cut = len(text)  # "items[…": indexing, never a citation, whatever follows
        self._pending = text[cut:]
        if cut:
            self._emit(self._clean(text[:cut]))
            self._last = text[cut - 1]

    def _clean(self, part: str) -> str:
        # With the character before it, so "f(x)" then "[8]" is still indexing, not a citation.
        cleaned = keep_valid(self._last + part, self._valid)
        return cleaned[len(self._last) :] if cleaned.startswith(self._last) else keep_valid(part, self._valid)

    def close(self) -> None:
        if self._pending:
            pending, self._pending = self._pending, ""
            self._emit(self._clean(pending))


def strip_citations(text: str) -> str:
    """``text`` with no citations at all (a spoken answer is read aloud)."""
    return keep_valid(text, lambda number: False)


# --- checking a citation against its source --------------------------------------------------

#: Sentence ends: terminal punctuation and the citations that follow it, then space; or a line break.
_SENTENCE_END = re.compile(r"(?<=[.!?])(?:[ \t]*\[\d+(?:[ \t]*,[ \t]*\d+)*\])*[ \t]+|\n+")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?![\w])")
_SNAKE = re.compile(r"\b[A-Za-z_][A-Za-z0-9]*_[A-Za-z0-9_]+\b")
_CAMEL = re.compile(r"\b(?:[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*|[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*)\b")
_DOTTED = re.compile(r"\b[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)+\b")
_QUOTED = re.compile(r"`([^`\n]+)`|\"([^\"\n]+)\"|“([^”\n]+)”|'([^'\n]{2,})'")
_WORD = re.compile(r"[A-Za-z][A-Za-z']+")
#: Common words that say nothing about a source.
STOPWORDS = frozenset(
    """
    about above after again also because been before being below between both cannot could does doing
    down during each from further have having here into itself just more most much must only other over
    same should some such than that their them then there these they this those through under until very
    were what when where which while will with would your yours answer file files line lines note notes
    says said shows set sets used uses using value values
    """.split()  # noqa: SIM905 (a word list reads better as words)
)


def _normal_number(text: str) -> str:
    return text.replace(",", "")


def sentences(text: str) -> list[str]:
    """``text`` cut into sentences and lines; a citation after a sentence's end stays with it."""
    parts, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        parts.append(text[start : match.end()])
        start = match.end()
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


class Terms(msgspec.Struct, frozen=True):
    """What a sentence says that a source can be checked for."""

    numbers: frozenset[str]
    names: frozenset[str]  # identifiers and quoted strings, matched as written
    words: frozenset[str]  # only used when there are no numbers and names

    @property
    def specific(self) -> bool:
        return bool(self.numbers or self.names)


def terms_of(sentence: str) -> Terms:
    plain = _CITATION.sub("", sentence)
    quoted = {next(group for group in match.groups() if group).strip() for match in _QUOTED.finditer(plain)}
    names = {m.group() for pattern in (_SNAKE, _CAMEL, _DOTTED) for m in pattern.finditer(plain)}
    names |= {q for q in quoted if q}
    numbers = {_normal_number(m.group()) for m in _NUMBER.finditer(plain)}
    words = {
        w.lower().strip("'") for w in _WORD.findall(plain) if len(w) >= MIN_WORD_CHARS and w.lower() not in STOPWORDS
    }
    return Terms(frozenset(numbers), frozenset(names), frozenset(words))


def shares(terms: Terms, source: str) -> bool:
    """Whether ``source`` holds any of ``terms`` (numbers and names when there are any, else words)."""
    if terms.specific:
        if terms.numbers & {_normal_number(m.group()) for m in _NUMBER.finditer(source)}:
            return True
        lowered = source.lower()
        return any(name.lower() in lowered for name in terms.names)
    if not terms.words:
        return True  # nothing to check: a bare "[2]" or "See [2]." cannot be contradicted
    found = {w.lower().strip("'") for w in _WORD.findall(source)}
    return bool(terms.words & found)


def check(passage: Passage, citing: Sequence[str]) -> tuple[bool, str]:
    """(supported, reason): every sentence citing ``passage`` must share something with its text."""
    for sentence in citing:
        if not shares(terms_of(sentence), passage.text):
            quote = " ".join(_CITATION.sub("", sentence).split())
            if len(quote) > REASON_QUOTE_CHARS:
                quote = quote[: REASON_QUOTE_CHARS - 1].rstrip() + "…"
            return False, (
                f"The cited text shares no number, name, quoted text or word with the sentence citing it: “{quote}”"
            )
    return True, ""


def citing_sentences(text: str) -> dict[int, list[str]]:
    """Each cited number's sentences."""
    found: dict[int, list[str]] = {}
    for sentence in sentences(text):
        for number in cited_numbers(sentence):
            found.setdefault(number, []).append(sentence)
    return found


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
