"""Tool calls written in a model's text: parsing, the prompt that asks for them, and a stream filter.

Two forms are understood (docs/architecture.md, "models/: one interface, two providers"):

* **Hermes / Qwen** (``native``): templates that render tool schemas teach the model to write
  ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one block per call.
* **JSON in text** (``json``): for templates without tool support the tools are described in
  the system prompt (``tools_prompt``) and the model answers with a bare or fenced JSON object
  ``{"name": ..., "arguments": {...}}`` (or a list of them) somewhere in its reply.

A malformed call is never run: parsing returns it as an error naming what was wrong (bad JSON,
unknown tool, arguments not an object), which the caller shows the model. Visible text excludes
call markup. ``VisibleTextFilter`` applies the same rules while tokens stream in, holding back
only what may still turn out to be markup, so the text shown as it streams is exactly the text
of the finished completion.

A model offered no tools (the final answer from notes, ADR 0127) may still write a call. Nothing
is parsed then, but the filter stops the text where the markup starts and reports that it was
written (``ParsedOutput.wrote_call``), so callers never look for markup themselves.

Everything here is pure: no model, no I/O.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from imprintd.messages import ToolCall, ToolSpec

Mode = Literal["native", "json", "none"]

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
class _Collector:
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
            value = json.loads(body)
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


def _snippet(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def bad_json(body: str, error: json.JSONDecodeError) -> str:
    return f"the tool call is not valid JSON ({error.msg} at character {error.pos}): {_snippet(body)!r}"


def call_from_object(value: Any, tool_names: Collection[str], new_id: IdFactory = new_call_id) -> ToolCall | str:
    """A ToolCall from a decoded ``{"name": ..., "arguments": {...}}``, or the reason it is not one.

    ``arguments`` may also be called ``parameters``, may be missing (no arguments), or may be a
    JSON string holding an object (the OpenAI wire form); anything else is refused.
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
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as error:
            return f"the arguments of the {name!r} call are not valid JSON ({error.msg}): {_snippet(str(arguments))!r}"
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return f"the arguments of the {name!r} call must be a JSON object, not {_kind(arguments)}"
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


# -- the Hermes / Qwen form ------------------------------------------------------------------


def parse_hermes(text: str, tool_names: Collection[str], new_id: IdFactory = new_call_id) -> ParsedOutput:
    """Calls written as ``<tool_call>{json}</tool_call>`` blocks; a final unclosed block counts too."""
    collected = _Collector(tool_names, new_id)
    visible: list[str] = []
    position = 0
    while True:
        start = text.find(HERMES_OPEN, position)
        if start < 0:
            visible.append(text[position:])
            break
        visible.append(text[position:start])
        body_start = start + len(HERMES_OPEN)
        end = text.find(HERMES_CLOSE, body_start)
        # A reply cut off (length, or an end-of-turn before the closing tag) leaves the last
        # block open; its body is still the model's call.
        body = text[body_start:] if end < 0 else text[body_start:end]
        collected.add_json(body.strip(), allow_list=False)
        if end < 0:
            break
        position = end + len(HERMES_CLOSE)
    return collected.result("".join(visible))


# -- the JSON-in-text form -------------------------------------------------------------------

OpeningState = Literal["yes", "maybe", "no"]


def _skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index].isspace():
        index += 1
    return index


@dataclass(frozen=True)
class JsonOpening:
    """How a JSON call opened: ``text[:end]`` is the opening, up to the colon after ``key``."""

    end: int
    key: str
    fenced: bool
    listed: bool


def opening_state(text: str) -> OpeningState:
    """Whether ``text`` starts a JSON call: ``yes``, ``no``, or ``maybe`` (too short to tell).

    A call opens with an optional fence (three backticks and an optional ``json`` info string,
    then a newline), an optional ``[``, then ``{"name":`` (or ``"arguments"`` /
    ``"parameters"``), with any whitespace between those parts.
    """
    return scan_opening(text)[0]


def scan_opening(text: str) -> tuple[OpeningState, JsonOpening | None]:
    """``opening_state`` of ``text``, and for ``yes`` where the opening ends and what it holds."""
    if not text:
        return "maybe", None
    index = 0
    fenced = text[0] == "`"
    if fenced:
        if not text.startswith(FENCE):
            return ("maybe" if FENCE.startswith(text) else "no"), None
        newline = text.find("\n", len(FENCE))
        info = text[len(FENCE) : newline if newline >= 0 else len(text)].strip().lower()
        if newline < 0:
            return ("maybe" if "json".startswith(info) else "no"), None
        if info not in ("", "json"):
            return "no", None
        index = newline + 1
    elif text[0] not in "{[":
        return "no", None
    index = _skip_space(text, index)
    listed = index < len(text) and text[index] == "["
    if listed:
        index = _skip_space(text, index + 1)
    if index == len(text):
        return "maybe", None
    if text[index] != "{":
        return "no", None
    index = _skip_space(text, index + 1)
    if index == len(text):
        return "maybe", None
    if text[index] != '"':
        return "no", None
    rest = text[index + 1 :]
    for key in CALL_KEYS:
        quoted = key + '"'
        if rest.startswith(quoted):
            colon = _skip_space(text, index + 1 + len(quoted))
            if colon == len(text):
                return "maybe", None
            if text[colon] != ":":
                return "no", None
            return "yes", JsonOpening(end=colon + 1, key=key, fenced=fenced, listed=listed)
        if quoted.startswith(rest):
            return "maybe", None
    return "no", None


def _candidates(text: str, start: int = 0):
    """Indexes where a JSON call could open: each ``{``, ``[`` and backtick."""
    for index in range(start, len(text)):
        if text[index] in "{[`":
            yield index


def parse_json_calls(text: str, tool_names: Collection[str], new_id: IdFactory = new_call_id) -> ParsedOutput:
    """Calls written as a bare or fenced JSON object (or list of objects) anywhere in ``text``.

    Only JSON that opens like a call (``opening_state == "yes"``) is taken; other JSON and code
    stay visible. A call whose JSON does not parse takes the rest of the reply with it, since
    where it was meant to end cannot be known.
    """
    collected = _Collector(tool_names, new_id)
    visible: list[str] = []
    position = 0
    decoder = json.JSONDecoder()
    index = position
    while index < len(text):
        found = next((i for i in _candidates(text, index) if opening_state(text[i:]) == "yes"), None)
        if found is None:
            break
        visible.append(text[position:found])
        if text.startswith(FENCE, found):
            body_start = text.index("\n", found) + 1
            close = text.find(FENCE, body_start)
            body = text[body_start:] if close < 0 else text[body_start:close]
            collected.add_json(body.strip(), allow_list=True)
            position = len(text) if close < 0 else close + len(FENCE)
        else:
            try:
                value, end = decoder.raw_decode(text, found)
            except json.JSONDecodeError as error:
                collected.errors.append(
                    bad_json(text[found:], json.JSONDecodeError(error.msg, error.doc, error.pos - found))
                )
                position = len(text)
            else:
                if isinstance(value, list):
                    for item in value:
                        collected.add_object(item)
                else:
                    collected.add_object(value)
                position = end
        index = position
    visible.append(text[position:])
    return collected.result("".join(visible))


def parse_tool_calls(text: str, tools: Sequence[ToolSpec], mode: Mode, new_id: IdFactory = new_call_id) -> ParsedOutput:
    """Split a finished reply by ``mode``; with no tools offered, nothing is a call."""
    names = {tool.name for tool in tools}
    if mode == "none" or not tools:
        return ParsedOutput(text=text)
    if mode == "native":
        return parse_hermes(text, names, new_id)
    return parse_json_calls(text, names, new_id)


# -- asking for calls when the template cannot -----------------------------------------------


def format_call(call: ToolCall) -> str:
    """A past call as the JSON-in-text form writes it (so the model sees its own calls)."""
    return json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)


def tools_prompt(tools: Sequence[ToolSpec]) -> str:
    """The system-prompt block describing ``tools`` for a template that does not render them.

    Deterministic for the same tools (ADR 0157: a byte-stable prefix is reused).
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


class VisibleTextFilter:
    """Feeds streamed text through, holding back whatever may still be tool-call markup.

    ``feed`` returns the text that is safe to show now; ``finish`` returns the rest (the visible
    part of what was held back, as ``parse_tool_calls`` splits it) and the parsed output. The
    pieces returned, joined, equal ``finish()[1].text``: what streamed is what is stored.
    Leading and trailing whitespace of the reply is dropped.
    """

    def __init__(self, tools: Sequence[ToolSpec], mode: Mode, new_id: IdFactory = new_call_id) -> None:
        self._tools = tuple(tools)
        self._mode: Mode = mode if tools else "none"
        #: With no tools offered, calls in ``mode`` are not parsed but still cut off the text.
        self._unoffered: Mode = "none" if tools else mode
        self._new_id = new_id
        self._pending = ""
        self._shown: list[str] = []
        self._started = False
        self._locked = False  # markup has certainly begun: hold everything to the end
        self._wrote_call = False

    def feed(self, piece: str) -> str:
        self._pending += piece
        if self._locked:
            return ""
        if not self._started:
            self._pending = self._pending.lstrip()
            if not self._pending:
                return ""
            self._started = True
        cut = self._safe_length()
        out, self._pending = self._pending[:cut], self._pending[cut:]
        if out:
            self._shown.append(out)
        return out

    def finish(self) -> tuple[str, ParsedOutput]:
        """The last visible piece and the whole reply's parsed output."""
        if self._unoffered != "none":
            start = unoffered_call_start(self._pending, self._unoffered, final=True)[0]
            if start is not None:
                self._wrote_call = True
                self._pending = self._pending[:start]
        held = parse_tool_calls(self._pending, self._tools, self._mode, self._new_id)
        shown = "".join(self._shown)
        last = held.text
        if not shown:
            last = last.lstrip()
        last = last.rstrip()
        self._shown.append(last)
        self._pending = ""
        return last, ParsedOutput(text=shown + last, calls=held.calls, error=held.error, wrote_call=self._wrote_call)

    def _safe_length(self) -> int:
        """How much of the pending text cannot be (the start of) call markup."""
        pending = self._pending
        if self._unoffered != "none":
            start, safe = unoffered_call_start(pending, self._unoffered, final=False)
            if start is not None:
                self._locked = self._wrote_call = True
                return _rstrip_length(pending, start)
            return _rstrip_length(pending, safe)
        if self._mode == "native":
            start = pending.find(HERMES_OPEN)
            if start >= 0:
                self._locked = True
                return _rstrip_length(pending, start)
            return _rstrip_length(pending, len(pending) - _partial_suffix(pending, HERMES_OPEN))
        if self._mode == "json":
            for index in _candidates(pending):
                state = opening_state(pending[index:])
                if state == "yes":
                    self._locked = True
                    return _rstrip_length(pending, index)
                if state == "maybe":
                    return _rstrip_length(pending, index)
        return _rstrip_length(pending, len(pending))


def unoffered_call_start(text: str, mode: Mode, *, final: bool) -> tuple[int | None, int]:
    """Where call markup starts in text written with no tools offered (None: nowhere), and how
    much of ``text`` surely is not markup.

    Either mode looks for ``<tool_call>``: a template without tool support may still have been
    trained on it. In ``json`` mode a bare or fenced ``{"name": …}`` object (``opening_state``)
    counts too. Unless ``final``, a tail that may still become markup is not yet safe.
    """
    start = text.find(HERMES_OPEN)
    found = start if start >= 0 else None
    safe = len(text) if final else len(text) - _partial_suffix(text, HERMES_OPEN)
    if mode == "json":
        for index in _candidates(text):
            if found is not None and index >= found:
                break
            state = opening_state(text[index:])
            if state == "yes":
                found = index
                break
            if state == "maybe" and not final:
                safe = min(safe, index)
                break
    return found, safe


def _rstrip_length(text: str, end: int) -> int:
    """``end`` moved back over whitespace: trailing whitespace waits until text follows it."""
    while end > 0 and text[end - 1].isspace():
        end -= 1
    return end


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``."""
    for length in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-length:]):
            return length
    return 0
