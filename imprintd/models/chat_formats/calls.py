"""What every chat format shares: the call parser its syntax plugs into, the stream filter, and
the prompt that asks for calls where a template cannot.

A format (``format.ChatFormat``, one module per family beside this one) says how its model
writes calls as a ``CallSyntax``: the openings a call starts with and the parser of the block
that follows, its slips (markup written where it does not belong, ``Slip``) and its stray
markers. ``parse_syntax`` reads every call of a finished reply in one syntax; a syntax with
``json_calls`` also takes a bare or fenced ``{"name": ..., "arguments": {...}}`` object (or a
list of them) anywhere in the text (``opening_state``), as a template without tools is asked
to write one (``tools_prompt``).

A malformed call is never run: parsing returns it as an error naming what was wrong (bad JSON,
unknown tool, arguments not an object), which the caller shows the model. Visible text excludes
call markup. ``VisibleTextFilter`` applies the same rules while tokens stream in, holding back
only what may still turn out to be markup, so the text shown as it streams is exactly the text
of the finished completion. A family's slips (a tool result it made up, a call without its
wrapper) are cut like calls, and its stray markers removed where they stand; the filter's work
is linear in the reply whatever it holds.

Decoded arguments nested deeper than ``wellformed.MAX_NESTING`` make a malformed call, as does
nesting too deep to decode: never a ``RecursionError``.

A model offered no tools (the final answer from notes) may still write a call. Nothing
is parsed then, but the filter stops the text where the markup starts and reports that it was
written (``ParsedOutput.wrote_call``), so callers never look for markup themselves.

Everything here is pure: no model, no I/O.
"""

from __future__ import annotations

import dataclasses
import json
import re
import secrets
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from imprintd import wellformed
from imprintd.messages import ToolCall, ToolSpec

#: Hermes' call tags: any syntax's filter looks for ``<tool_call>`` where no tools were offered
#: (a template without tool support may still have been trained on it).
HERMES_OPEN = "<tool_call>"
HERMES_CLOSE = "</tool_call>"
FENCE = "```"
#: Keys that may open a JSON call object; "parameters" is what Llama-3-style models write.
CALL_KEYS = ("name", "arguments", "parameters")

IdFactory = Callable[[], str]


def new_call_id() -> str:
    """A fresh id for a parsed call (the text forms carry none)."""
    return "call_" + secrets.token_hex(6)


@dataclass(frozen=True)
class ParsedOutput:
    """A reply split into what the user sees, the calls to run, and what was wrong with the rest."""

    text: str
    calls: tuple[ToolCall, ...] = ()
    error: str | None = None
    #: No tools were offered, yet the model wrote call markup; ``text`` stops before it.
    wrote_call: bool = False


@dataclass
class Collector:
    """Accumulates calls and errors while one reply is parsed."""

    tool_names: Collection[str]
    new_id: IdFactory
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add_object(self, value: Any) -> None:
        """Add one decoded call object, or the reason it cannot be run."""
        call_or_error = call_from_object(value, self.tool_names, self.new_id)
        if isinstance(call_or_error, ToolCall):
            self.calls.append(call_or_error)
        else:
            self.errors.append(call_or_error)

    def add_json(self, body: str, *, allow_list: bool) -> None:
        """Decode ``body`` (one call, or a list of calls when ``allow_list``) and add it."""
        try:
            value = loads_json(body)
        except json.JSONDecodeError as error:
            self.errors.append(bad_json(body, error))
            return
        if allow_list and isinstance(value, list):
            for item in value:
                self.add_object(item)
        else:
            self.add_object(value)

    def result(self, text: str) -> ParsedOutput:
        return ParsedOutput(text=text, calls=tuple(self.calls), error="; ".join(self.errors) if self.errors else None)


def snippet(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


#: What a JSON value nested past the decoder's recursion limit is reported as (a call's
#: arguments are refused past ``wellformed.MAX_NESTING`` levels in any case).
TOO_DEEP = f"arrays and objects nested more than {wellformed.MAX_NESTING} levels deep"


def raw_decode_json(text: str, at: int = 0) -> tuple[Any, int]:
    """``json.JSONDecoder().raw_decode``, with nesting too deep to decode a ``JSONDecodeError``
    (the decoder recurses: thousands of ``[`` would raise ``RecursionError``)."""
    try:
        return json.JSONDecoder().raw_decode(text, at)
    except RecursionError:
        raise json.JSONDecodeError(TOO_DEEP, text, at) from None


def loads_json(text: str) -> Any:
    """``json.loads`` with nesting too deep to decode a ``JSONDecodeError``."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError(TOO_DEEP, text, 0) from None


def bad_json(body: str, error: json.JSONDecodeError) -> str:
    if error.msg == TOO_DEEP:
        return f"the tool call holds {TOO_DEEP}"
    return f"the tool call is not valid JSON ({error.msg} at character {error.pos}): {snippet(body)!r}"


def call_from_object(value: Any, tool_names: Collection[str], new_id: IdFactory = new_call_id) -> ToolCall | str:
    """A ToolCall from a decoded ``{"name": ..., "arguments": {...}}``, or the reason it is not one.

    ``arguments`` may also be called ``parameters``, may be missing (no arguments), or may be a
    JSON string holding an object (the OpenAI wire form); anything else is refused, and so are
    arguments nested deeper than ``wellformed.MAX_NESTING`` or holding a lone surrogate (nothing
    after the parser could take them: the call is malformed, and the model is told).
    """
    if not isinstance(value, dict):
        return f'a tool call must be a JSON object with "name" and "arguments", not {_kind(value)}'
    name = value.get("name")
    if not isinstance(name, str) or not name:
        return 'the tool call has no "name" naming the tool to run'
    if name not in tool_names:
        available = ", ".join(sorted(tool_names)) or "none"
        return f"the tool call names an unknown tool {name!r} (available: {available})"
    arguments = value.get("arguments", value.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = loads_json(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as error:
            if error.msg == TOO_DEEP:
                return f"the arguments of the {name!r} call hold {TOO_DEEP}"
            return f"the arguments of the {name!r} call are not valid JSON ({error.msg}): {snippet(str(arguments))!r}"
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return f"the arguments of the {name!r} call must be a JSON object, not {_kind(arguments)}"
    try:
        wellformed.check(arguments, "arguments")
    except wellformed.Malformed as error:
        if error.too_deep:
            return f"the arguments of the {name!r} call hold {TOO_DEEP}"
        return f"the arguments of the {name!r} call cannot be used: {error}"
    return ToolCall(id=new_id(), name=name, arguments=arguments)


def _kind(value: Any) -> str:
    kinds = {
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
        dict: "an object",
    }
    return kinds.get(type(value), type(value).__name__)


# -- call syntaxes -----------------------------------------------------------------------------

#: Parses the call block that opens at ``start`` (with ``opening``) into the collector and
#: returns where the block ends (``len(text)`` when it never closes).
BlockParser = Callable[[str, int, str, "Collector"], int]


@dataclass(frozen=True)
class Slip:
    """Markup a model wrote where it does not belong: it never shows.

    Without ``call`` it is a tool result the model made up (``<tool_response>…``, which only
    the daemon writes): cut from ``opening`` to ``close``, and the calls written inside it count
    as if written outside. With ``call`` it is a call without its wrapper (``<function=f>…``
    bare): ``call`` parses the text from ``opening`` up to ``close`` where the family's own
    parser (llama.cpp's) takes it (``accepted``); otherwise it is a malformed call, cut, and the
    model is told to write it as ``wrapped``.
    """

    opening: str
    close: str
    call: Callable[[str, Collector], None] | None = None
    accepted: bool = False
    wrapped: str = ""


@dataclass(frozen=True)
class CallSyntax:
    """How one family writes tool calls in its text (each ``format.ChatFormat`` has one).

    ``openings`` are the strings a call block starts with; ``block`` parses the block from there.
    With ``json_calls`` a bare or fenced JSON call object (``opening_state``) opens a call too.
    ``slips`` open markup the model should not have written where it did (``Slip``); ``stray``
    are the family's markers that mean nothing outside a block (closers, channel markers):
    wherever they stand in the visible text they are removed.
    """

    name: str
    openings: tuple[str, ...] = ()
    block: BlockParser | None = None
    json_calls: bool = False
    slips: tuple[Slip, ...] = ()
    stray: tuple[str, ...] = ()

    @property
    def markup(self) -> tuple[str, ...]:
        """Every string that starts markup: the openings, then the slips'."""
        return (*self.openings, *(slip.opening for slip in self.slips))


def _slip_block(text: str, start: int, slip: Slip, syntax: CallSyntax, collected: Collector) -> int:
    """Cut the slip opening at ``start``; return where it ends (``Slip`` says what counts in it)."""
    body_start = start + len(slip.opening)
    close = text.find(slip.close, body_start) if slip.close else -1
    body_end = len(text) if close < 0 else close
    end = len(text) if close < 0 else close + len(slip.close)
    if slip.call is None:
        # Calls in a made-up result: parsed by the syntax less this slip (so nesting is bounded).
        inner = dataclasses.replace(syntax, slips=tuple(s for s in syntax.slips if s != slip))
        _parse_into(text[body_start:body_end], inner, collected)
    elif slip.accepted:
        slip.call(text[start:body_end], collected)
    else:
        written = snippet(text[start:end])
        collected.errors.append(f"the tool call was written without its wrapper ({written!r}); write {slip.wrapped}")
    return end


class _Finder:
    """The first of some markers in one text at or after a position, each text searched once:
    where a marker was found (or not) is remembered, so a reply of many blocks costs one pass."""

    def __init__(self, text: str, markers: Sequence[str]) -> None:
        self._text = text
        self._next = {marker: -2 for marker in dict.fromkeys(markers)}  # -2: not searched yet

    def first(self, start: int) -> tuple[int, str] | None:
        best: tuple[int, str] | None = None
        for marker, at in self._next.items():
            if at == -2 or (at != -1 and at < start):
                at = self._next[marker] = self._text.find(marker, start)
            if at >= 0 and (best is None or at < best[0]):
                best = (at, marker)
        return best


def _first_opening(text: str, syntax: CallSyntax, start: int, finder: _Finder) -> tuple[int, str] | None:
    """Where the first call opens in ``text`` at or after ``start``, and with what ("" for JSON)."""
    best = finder.first(start)
    if syntax.json_calls:
        limit = best[0] if best is not None else len(text)
        json_start = next((i for i in _candidates(text, start, limit) if opening_state(text, i) == "yes"), None)
        if json_start is not None:
            best = (json_start, "")
    return best


def parse_syntax(
    text: str, tool_names: Collection[str], syntax: CallSyntax, new_id: IdFactory = new_call_id
) -> ParsedOutput:
    """Calls written in ``syntax`` anywhere in ``text``; the text between and around them stays
    visible, less the syntax's stray markers."""
    parsed = _parse_blocks(text, tool_names, syntax, new_id)
    return dataclasses.replace(parsed, text=erase_markers(parsed.text, syntax.stray))


def _parse_blocks(
    text: str, tool_names: Collection[str], syntax: CallSyntax, new_id: IdFactory = new_call_id
) -> ParsedOutput:
    collected = Collector(tool_names, new_id)
    return collected.result(_parse_into(text, syntax, collected))


def _parse_into(text: str, syntax: CallSyntax, collected: Collector) -> str:
    """Parse the calls in ``text`` into ``collected``; return the text around them."""
    visible: list[str] = []
    position = 0
    finder = _Finder(text, syntax.markup)
    slips = {slip.opening: slip for slip in syntax.slips}
    while position < len(text):
        found = _first_opening(text, syntax, position, finder)
        if found is None:
            break
        start, opening = found
        visible.append(text[position:start])
        if opening in slips:
            position = max(start + 1, _slip_block(text, start, slips[opening], syntax, collected))
        elif opening:
            assert syntax.block is not None
            position = max(start + 1, syntax.block(text, start, opening, collected))
        else:
            position = _json_block(text, start, collected)
    visible.append(text[position:])
    return "".join(visible)


# -- block parsers the families share ------------------------------------------------------------


def skip_space(text: str, at: int) -> int:
    """``at`` moved past whitespace."""
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def json_after(close: str = "") -> BlockParser:
    """A block that is one JSON value (a call, or a list of calls) after the opening, then ``close``."""

    def block(text: str, start: int, opening: str, collected: Collector) -> int:
        at = skip_space(text, start + len(opening))
        while True:
            try:
                value, end = raw_decode_json(text, at)
            except json.JSONDecodeError as error:
                collected.errors.append(
                    f"the tool call is not valid JSON ({error.msg} at character {error.pos - at}): "
                    f"{snippet(text[at:])!r}"
                )
                return len(text)
            for item in value if isinstance(value, list) else [value]:
                collected.add_object(item)
            end = skip_space(text, end)
            if not text.startswith(";", end):  # Llama 3.x may chain calls with semicolons
                break
            at = skip_space(text, end + 1)
        if close and text.startswith(close, end):
            end += len(close)
        return end

    return block


def between(close: str, parse: Callable[[str, Collector], None]) -> BlockParser:
    """A block running from its opening to ``close`` (or the end), its body read by ``parse``."""

    def block(text: str, start: int, opening: str, collected: Collector) -> int:
        body_start = start + len(opening)
        end = text.find(close, body_start)
        parse(text[body_start:] if end < 0 else text[body_start:end], collected)
        return len(text) if end < 0 else end + len(close)

    return block


# -- the JSON-in-text form -------------------------------------------------------------------

OpeningState = Literal["yes", "maybe", "no"]

#: The most whitespace a JSON call's opening may hold between two of its parts, and the longest
#: info string after its fence. Past it the text is not a call: a run of spaces after ``[`` is
#: shown, not held back waiting for a ``{`` (what keeps the stream filter linear).
MAX_OPENING_GAP = 64
#: Where a JSON call could open: each ``{``, ``[`` and backtick.
_CANDIDATE = re.compile(r"[{\[`]")


def _gap(text: str, index: int) -> int:
    """``index`` moved past whitespace; -1 when more than ``MAX_OPENING_GAP`` of it follows."""
    limit = min(len(text), index + MAX_OPENING_GAP + 1)
    end = index
    while end < limit and text[end].isspace():
        end += 1
    return -1 if end - index > MAX_OPENING_GAP else end


@dataclass(frozen=True)
class JsonOpening:
    """How a JSON call opened: ``text[:end]`` is the opening, up to the colon after ``key``."""

    end: int
    key: str
    fenced: bool
    listed: bool


def opening_state(text: str, start: int = 0) -> OpeningState:
    """Whether ``text`` starts a JSON call at ``start``: ``yes``, ``no``, or ``maybe`` (too short to tell).

    A call opens with an optional fence (three backticks and an optional ``json`` info string,
    then a newline), an optional ``[``, then ``{"name":`` (or ``"arguments"`` /
    ``"parameters"``), with whitespace between those parts (at most ``MAX_OPENING_GAP`` each).
    """
    return scan_opening(text, start)[0]


def scan_opening(text: str, start: int = 0) -> tuple[OpeningState, JsonOpening | None]:
    """``opening_state`` of ``text`` at ``start``, and for ``yes`` where the opening ends (counted
    from ``start``) and what it holds. Looks at no more than the opening's bounded length."""
    if start >= len(text):
        return "maybe", None
    index = start
    fenced = text[start] == "`"
    if fenced:
        if not text.startswith(FENCE, start):
            return ("maybe" if FENCE.startswith(text[start : start + len(FENCE)]) else "no"), None
        info_start = start + len(FENCE)
        newline = text.find("\n", info_start, info_start + MAX_OPENING_GAP + 1)
        info = text[info_start : newline if newline >= 0 else info_start + MAX_OPENING_GAP + 1]
        if newline < 0:
            short = len(text) - info_start <= MAX_OPENING_GAP
            return ("maybe" if short and "json".startswith(info.strip().lower()) else "no"), None
        if info.strip().lower() not in ("", "json"):
            return "no", None
        index = newline + 1
    elif text[start] not in "{[":
        return "no", None
    index = _gap(text, index)
    listed = index >= 0 and index < len(text) and text[index] == "["
    if listed:
        index = _gap(text, index + 1)
    if index < 0:
        return "no", None
    if index == len(text):
        return "maybe", None
    if text[index] != "{":
        return "no", None
    index = _gap(text, index + 1)
    if index < 0:
        return "no", None
    if index == len(text):
        return "maybe", None
    if text[index] != '"':
        return "no", None
    rest = text[index + 1 : index + 1 + max(len(key) for key in CALL_KEYS) + 1]
    for key in CALL_KEYS:
        quoted = key + '"'
        if rest.startswith(quoted):
            colon = _gap(text, index + 1 + len(quoted))
            if colon < 0:
                return "no", None
            if colon == len(text):
                return "maybe", None
            if text[colon] != ":":
                return "no", None
            return "yes", JsonOpening(end=colon + 1 - start, key=key, fenced=fenced, listed=listed)
        if quoted.startswith(rest):
            return "maybe", None
    return "no", None


def _candidates(text: str, start: int = 0, end: int | None = None) -> Iterator[int]:
    """Indexes where a JSON call could open: each ``{``, ``[`` and backtick."""
    for match in _CANDIDATE.finditer(text, start, len(text) if end is None else end):
        yield match.start()


def _json_block(text: str, found: int, collected: Collector) -> int:
    """Parse the JSON call opening at ``found``; return where it ends."""
    if text.startswith(FENCE, found):
        body_start = text.index("\n", found) + 1
        close = text.find(FENCE, body_start)
        body = text[body_start:] if close < 0 else text[body_start:close]
        collected.add_json(body.strip(), allow_list=True)
        return len(text) if close < 0 else close + len(FENCE)
    try:
        value, end = raw_decode_json(text, found)
    except json.JSONDecodeError as error:
        collected.errors.append(bad_json(text[found:], json.JSONDecodeError(error.msg, error.doc, error.pos - found)))
        return len(text)
    for item in value if isinstance(value, list) else [value]:
        collected.add_object(item)
    return end


def parse_tool_calls(
    text: str, tools: Sequence[ToolSpec], syntax: CallSyntax | None, new_id: IdFactory = new_call_id
) -> ParsedOutput:
    """Split a finished reply by a family's ``syntax``; with no tools offered (or no syntax),
    nothing is a call."""
    if syntax is None or not tools:
        return ParsedOutput(text=text)
    return parse_syntax(text, {tool.name for tool in tools}, syntax, new_id)


# -- asking for calls when the template cannot -----------------------------------------------


def format_call(call: ToolCall) -> str:
    """A past call as the JSON-in-text form writes it (so the model sees its own calls)."""
    return json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)


def json_list_after(marker: str) -> Callable[[Sequence[ToolCall]], str]:
    """Writes calls as ``marker`` then one JSON list of ``{"name": …, "arguments": {…}}``
    (Mistral, Granite, Phi-4-mini)."""

    def write(calls: Sequence[ToolCall]) -> str:
        return marker + json.dumps([{"name": c.name, "arguments": c.arguments} for c in calls], ensure_ascii=False)

    return write


def tools_prompt(tools: Sequence[ToolSpec]) -> str:
    """The system-prompt block describing ``tools`` for a template that does not render them.

    Deterministic for the same tools (a byte-stable prefix is reused: docs/decisions.md, "A prompt that stays put").
    """
    lines = [
        "# Tools",
        "",
        "You can call these tools to look things up before you answer:",
    ]
    for tool in tools:
        schema = json.dumps(tool.parameters, ensure_ascii=False, separators=(", ", ": "))
        lines.append(f"- {tool.name}: {tool.description} Arguments (JSON schema): {schema}")
    lines += [
        "",
        "To call a tool, reply with only one JSON object and nothing else, for example:",
        format_call(ToolCall(id="", name=tools[0].name, arguments={})) if tools else "",
        'Fill "arguments" as the tool\'s schema says. When you need no tool, answer in plain text.',
    ]
    return "\n".join(lines)


# -- keeping markup out of streamed text ----------------------------------------------------


def erase_markers(text: str, markers: Sequence[str]) -> str:
    """``text`` without any of ``markers`` (``MarkerEraser`` at once)."""
    eraser = MarkerEraser(markers)
    return eraser.feed(text) + eraser.finish()


class MarkerEraser:
    """Removes markers from text streamed in pieces, even split across them: a tail that may
    still become a marker is held until the next piece (shorter than the longest marker)."""

    def __init__(self, markers: Sequence[str]) -> None:
        self._markers = tuple(sorted({m for m in markers if m}, key=len, reverse=True))
        self._pattern = re.compile("|".join(map(re.escape, self._markers))) if self._markers else None
        self._held = ""

    def feed(self, text: str) -> str:
        if self._pattern is None:
            return text
        text = self._held + text
        # Held: a tail that is the start of a marker, even a whole marker that is the start of a
        # longer one (Gemma's ``<|channel>`` of ``<|channel>thought``).
        keep = max(partial_suffix(text, marker) for marker in self._markers)
        self._held = text[len(text) - keep :]
        return self._pattern.sub("", text[: len(text) - keep])

    def finish(self) -> str:
        held, self._held = self._held, ""
        return self._pattern.sub("", held) if self._pattern is not None else held


class SpaceTrimmer:
    """Drops the leading whitespace of text streamed in pieces and holds its trailing whitespace
    until more text follows (``finish`` drops it): the held run is kept as pieces, so a reply of
    nothing but spaces costs its length, not its square."""

    def __init__(self) -> None:
        self._started = False
        self._space: list[str] = []

    def __copy__(self) -> SpaceTrimmer:
        clone = SpaceTrimmer()
        clone._started, clone._space = self._started, list(self._space)
        return clone

    def feed(self, text: str) -> str:
        if not self._started:
            text = text.lstrip()
            if not text:
                return ""
            self._started = True
        body = text.rstrip()
        if not body:
            self._space.append(text)
            return ""
        out = "".join(self._space) + body if self._space else body
        self._space = [text[len(body) :]] if len(body) < len(text) else []
        return out

    def finish(self, text: str = "") -> str:
        out = self.feed(text)
        self._space = []
        return out


class VisibleTextFilter:
    """Feeds streamed text through, holding back whatever may still be tool-call markup.

    ``feed`` returns the text that is safe to show now; ``finish`` returns the rest (the visible
    part of what was held back, as ``parse_tool_calls`` splits it) and the parsed output. The
    pieces returned, joined, equal ``finish()[1].text``: what streamed is what is stored.
    Leading and trailing whitespace of the reply is dropped, and so are the syntax's stray
    markers and ``markers`` (a family's reasoning markers, where they stand in the answer).

    A call holds back everything after it (what follows is parsed with it). A tool result the
    model made up (a ``Slip`` without a call) is held only to its end: it is cut, the calls in
    it are parsed at the finish, and the text after it streams on.

    Each piece is looked at once, with at most a bounded tail held from before (a marker's
    start, a JSON opening of ``MAX_OPENING_GAP``-bounded gaps) and the trailing whitespace kept
    as pieces: the work is linear in the reply, whatever it holds.
    """

    def __init__(
        self,
        tools: Sequence[ToolSpec],
        syntax: CallSyntax | None,
        new_id: IdFactory = new_call_id,
        *,
        markers: Sequence[str] = (),
    ) -> None:
        self._tools = tuple(tools)
        self._syntax = syntax if tools else None
        #: With no tools offered, calls in the syntax are not parsed but still cut off the text.
        self._unoffered = None if tools else syntax
        self._results = {slip.opening: slip for slip in syntax.slips if slip.call is None} if syntax else {}
        self._new_id = new_id
        self._held = ""  # raw text that may still become markup
        self._locked: list[str] | None = None  # markup has certainly begun: everything from it on
        #: Inside a made-up tool result: the slip, its text so far, and the tail its close may start in.
        self._result: Slip | None = None
        self._result_parts: list[str] = []
        self._result_tail = ""
        self._cut_results: list[str] = []  # the made-up results cut, whole (their calls count)
        self._erase = MarkerEraser((*(syntax.stray if syntax is not None else ()), *markers))
        self._space = SpaceTrimmer()
        self._shown: list[str] = []
        self._wrote_call = False

    def feed(self, piece: str) -> str:
        out: list[str] = []
        text = piece
        while text:
            if self._locked is not None:
                self._locked.append(text)
                break
            if self._result is not None:
                text = self._in_result(text)
                continue
            pending, text = self._held + text, ""
            cut, result = self._safe_length(pending)
            self._held = ""
            if self._locked is not None:
                self._locked.append(pending[cut:])
            elif result is not None:
                self._result, self._result_parts, self._result_tail = result, [result.opening], ""
                text = pending[cut + len(result.opening) :]
            else:
                self._held = pending[cut:]
            out.append(self._space.feed(self._erase.feed(pending[:cut])))
        return self._show("".join(out))

    def _in_result(self, text: str) -> str:
        """Take ``text`` into the made-up result being cut; return what follows its close."""
        assert self._result is not None
        close = self._result.close
        window = self._result_tail + text
        at = window.find(close)
        if at < 0:
            self._result_parts.append(text)
            self._result_tail = window[max(0, len(window) - len(close) + 1) :]
            return ""
        end = at + len(close) - len(self._result_tail)  # in ``text``; the tail cannot hold a whole close
        self._result_parts.append(text[:end])
        self._end_result()
        return text[end:]

    def _end_result(self) -> None:
        self._cut_results.append("".join(self._result_parts))
        self._result, self._result_parts, self._result_tail = None, [], ""

    def _show(self, out: str) -> str:
        if out:
            self._shown.append(out)
        return out

    def finish(self) -> tuple[str, ParsedOutput]:
        """The last visible piece and the whole reply's parsed output."""
        if self._result is not None:  # a made-up result the reply never closed: cut to the end
            self._end_result()
        pending = self._held if self._locked is None else "".join(self._locked)
        self._held, self._locked = "", None
        if self._unoffered is not None:
            start = unoffered_call_start(pending, self._unoffered, final=True)[0]
            if start is not None:
                self._wrote_call = True
                pending = pending[:start]
        held = ParsedOutput(text=pending)
        if self._syntax is not None:
            collected = Collector({t.name for t in self._tools}, self._new_id)
            for result in self._cut_results:  # before the rest, as they came
                _parse_into(result, self._syntax, collected)
            held = collected.result(_parse_into(pending, self._syntax, collected))
        shown = "".join(self._shown)
        last = self._show(self._space.finish(self._erase.feed(held.text) + self._erase.finish()))
        return last, ParsedOutput(text=shown + last, calls=held.calls, error=held.error, wrote_call=self._wrote_call)

    def _safe_length(self, pending: str) -> tuple[int, Slip | None]:
        """How much of ``pending`` cannot be (the start of) call markup; where markup certainly
        starts, that is where it starts: with a made-up result's slip, else the filter locks."""
        if self._unoffered is not None:
            start, opening, safe = _markup_start(
                pending, self._unoffered, _unoffered_openings(self._unoffered), final=False
            )
        elif self._syntax is not None:
            start, opening, safe = _markup_start(pending, self._syntax, self._syntax.markup, final=False)
        else:
            return len(pending), None
        if start is None:
            return safe, None
        if opening in self._results:
            return start, self._results[opening]
        self._locked = []
        self._wrote_call = self._unoffered is not None
        return start, None


def _markup_start(
    text: str, syntax: CallSyntax, openings: Sequence[str], *, final: bool
) -> tuple[int | None, str, int]:
    """Where the first of ``openings`` (or a JSON call, for a syntax with ``json_calls``) starts
    in ``text`` (None: nowhere) and with which ("" for a JSON call), and how much of ``text``
    surely is not markup."""
    found: int | None = None
    opened = ""
    for opening in openings:
        at = text.find(opening)
        if at >= 0 and (found is None or at < found):
            found, opened = at, opening
    safe = len(text)
    if not final:
        safe -= max((partial_suffix(text, opening) for opening in openings), default=0)
    if syntax.json_calls:
        for index in _candidates(text, 0, len(text) if found is None else found):
            state = opening_state(text, index)
            if state == "yes":
                found, opened = index, ""
                break
            if state == "maybe" and not final:
                safe = min(safe, index)
                break
    return found, opened, safe


def _unoffered_openings(syntax: CallSyntax) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*syntax.markup, HERMES_OPEN)))


def unoffered_call_start(text: str, syntax: CallSyntax | None, *, final: bool) -> tuple[int | None, int]:
    """Where call markup starts in text written with no tools offered (None: nowhere), and how
    much of ``text`` surely is not markup.

    Any syntax looks for ``<tool_call>`` besides its own openings and slips: a template without
    tool support may still have been trained on it. With JSON calls a bare or fenced
    ``{"name": …}`` object (``opening_state``) counts too. Unless ``final``, a tail that may
    still become markup is not yet safe.
    """
    if syntax is None:
        return None, len(text)
    start, _, safe = _markup_start(text, syntax, _unoffered_openings(syntax), final=final)
    return start, safe


def partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``."""
    for length in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-length:]):
            return length
    return 0
