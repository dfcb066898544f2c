"""The grammar a local model's tool call is finished under (docs/decisions.md, "Tool-call grammar").

Small models that open a tool call often get it wrong: an unknown tool name, ``parameters``
where ``arguments`` belong, an argument the tool does not take, JSON that does not close. A
local model's sampler can be constrained by a llama.cpp grammar (GBNF), so once a model has
opened a call, the rest of it is generated under a grammar in which the name is one of the
offered tools and the arguments follow that tool's JSON schema, converted by llama-cpp-python's
port of llama.cpp's JSON-schema-to-grammar. What it writes then always parses and validates.

The provider (``local.py``) watches the text as it streams; ``CallWatch.feed`` says when the
piece just decoded opens a call (``<tool_call>`` in the native form, ``{"name":`` and its
variants in the JSON form, exactly where ``toolcalls.py`` starts parsing one). The provider then
drops that piece's token and generates again from the tokens before it, under a grammar that
starts with the piece's text up to the end of the opening, so what was written stays written and
the call goes on from there. The grammar ends where the call (or the block of calls) ends: the
model can only end its turn after it, as a call round does anyway.

Two things are tightened beyond the converter: strings cannot hold raw control characters
(``json.loads`` refuses them) and integers keep their schema's ``minimum`` and ``maximum``.

Everything here is pure: no model, no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from imprintd.messages import ToolSpec
from imprintd.models.toolcalls import FENCE, HERMES_CLOSE, HERMES_OPEN, JsonOpening, Mode, scan_opening

#: JSON strings as the grammar writes them: no raw control characters, escapes as JSON has them.
CHAR_RULE = r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})'
#: The largest integer an argument without a ``maximum`` may have (15 digits, as the converter allows).
INTEGER_LIMIT = 10**15 - 1
#: Whitespace between the parts of a call: none, one space, or a newline and up to this many
#: spaces of indentation; bounded so that a model cannot run away in it.
WS_INDENT = 8
WS_RULE = f'| " " | "\\n" [ ]{{0,{WS_INDENT}}}'


@dataclass(frozen=True)
class CallOpening:
    """Where a call opened in the text written so far: ``text[start:end]`` is the opening."""

    start: int
    end: int
    #: For the JSON form: the key it opened with, and whether a fence or a list came first.
    shape: JsonOpening | None = None


def find_opening(text: str, mode: Mode, start: int = 0) -> tuple[CallOpening | None, int]:
    """The first call opening in ``text`` written in ``mode`` at or after ``start``, or None;
    and where to look from once more text follows (no opening can begin before it)."""
    if mode == "native":
        found = text.find(HERMES_OPEN, start)
        if found >= 0:
            return CallOpening(start=found, end=found + len(HERMES_OPEN)), found
        return None, max(start, len(text) - len(HERMES_OPEN) + 1)
    if mode == "json":
        resume = len(text)
        for index in range(start, len(text)):
            if text[index] in "{[`":
                state, opening = scan_opening(text[index:])
                if state == "yes" and opening is not None:
                    return CallOpening(start=index, end=index + opening.end, shape=opening), index
                if state == "maybe":
                    resume = min(resume, index)
        return None, resume
    return None, len(text)


class CallWatch:
    """Watches a reply's text, piece by piece, for the moment it opens a tool call."""

    def __init__(self, tools: Sequence[ToolSpec], mode: Mode) -> None:
        self._tools = tuple(tools)
        self._mode: Mode = mode if tools else "none"
        self._written = ""
        self._resume = 0

    def feed(self, piece: str) -> str | None:
        """The grammar to generate ``piece`` again under, when ``piece`` opens a call; else None.

        The grammar starts with the part of ``piece`` up to the opening's end, then the rest of
        the call. Once a call opened the watch is done: later pieces are not looked at.
        """
        if self.done:
            return None
        before = len(self._written)
        self._written += piece
        opening, self._resume = find_opening(self._written, self._mode, self._resume)
        if opening is None:
            return None
        written = self._written[before : opening.end]
        self._mode = "none"
        return call_grammar(self._tools, opening, written)

    @property
    def done(self) -> bool:
        return self._mode == "none"


def call_grammar(tools: Sequence[ToolSpec], opening: CallOpening, written: str) -> str:
    """GBNF for ``written`` followed by the rest of the call ``opening`` began."""
    rules = ArgumentRules(tools)
    named = rules.named_call()
    if opening.shape is None:  # <tool_call> {"name": ...} </tool_call>, maybe more of them
        block = f'ws "{{" ws "\\"name\\"" ws ":" ws {named} ws {literal(HERMES_CLOSE)}'
        rules.add("call-block", block)
        root = f'{literal(written)} call-block ("\\n"? {literal(HERMES_OPEN)} call-block)*'
    else:
        shape = opening.shape
        first = named if shape.key == "name" else rules.arguments_first()
        rest = f"ws {first}"
        if shape.listed:
            rules.add("next-call", f'"," ws "{{" ws "\\"name\\"" ws ":" ws {named}')
            rest += ' (ws next-call)* ws "]"'
        if shape.fenced:
            rest += f" ws {literal(FENCE)}"
        root = f"{literal(written)} {rest}"
    rules.add("root", root)
    return rules.grammar()


class ArgumentRules:
    """The rules of one call grammar: each tool's arguments, the call shapes, and ``ws``."""

    def __init__(self, tools: Sequence[ToolSpec]) -> None:
        self._tools = tuple(tools)
        self._converter = _converter_class()(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
        self._arguments = {tool.name: self._converter.visit(tool.parameters, f"args-{tool.name}") for tool in tools}
        self._converter._rules["char"] = CHAR_RULE
        self.add("ws", WS_RULE)

    def add(self, name: str, rule: str) -> None:
        self._converter._rules[name] = rule

    def named_call(self) -> str:
        """The rule for ``"<tool>", "arguments": {...}}``: what follows ``{"name":``."""
        return self._per_tool("named-call", '{name} ws "," ws "\\"arguments\\"" ws ":" ws {arguments} ws "}}"')

    def arguments_first(self) -> str:
        """The rule for ``{...}, "name": "<tool>"}``: what follows ``{"arguments":``."""
        return self._per_tool("arguments-first", '{arguments} ws "," ws "\\"name\\"" ws ":" ws {name} ws "}}"')

    def _per_tool(self, rule: str, shape: str) -> str:
        """Add ``rule``: one choice per tool, ``shape`` filled with its quoted name and its arguments' rule."""
        choices = [shape.format(name=literal(_quoted(t.name)), arguments=self._arguments[t.name]) for t in self._tools]
        self.add(rule, " | ".join(choices))
        return rule

    def grammar(self) -> str:
        return self._converter.format_grammar()


@cache
def _converter_class() -> type:
    """llama-cpp-python's converter, with integers kept within their ``minimum`` and ``maximum``.

    Made on first use: importing llama_cpp loads the llama.cpp library.
    """
    from llama_cpp.llama_grammar import SchemaConverter

    class Converter(SchemaConverter):
        def visit(self, schema: dict[str, Any], name: str) -> str:
            low, high = schema.get("minimum"), schema.get("maximum")
            if schema.get("type") == "integer" and isinstance(low, int) and low >= 0:
                top = high if isinstance(high, int) else INTEGER_LIMIT
                return self._add_rule(name, f"({integer_range(low, top)}) space")
            return super().visit(schema, name)

    return Converter


def integer_range(low: int, high: int) -> str:
    """A GBNF expression matching the decimal integers ``low``…``high`` (0 ≤ low ≤ high), no leading zeros."""
    if not 0 <= low <= high:
        raise ValueError(f"integer_range needs 0 <= low <= high, not {low}..{high}")
    choices = []
    # Lengths whose every number is in range (all but the shortest and longest, mostly) share
    # one choice, "[1-9] [0-9]{a,b}".
    whole: list[int] = []
    for digits in range(len(str(low)), len(str(high)) + 1):
        first = max(low, 10 ** (digits - 1) if digits > 1 else 0)
        last = min(high, 10**digits - 1)
        if first == max(1, 10 ** (digits - 1)) and last == 10**digits - 1:
            whole.append(digits - 1)
            continue
        if whole:
            choices.append(_nonzero_then_digits(whole[0], whole[-1]))
            whole = []
        choices.append(_same_length_range(str(first), str(last)))
    if whole:
        choices.append(_nonzero_then_digits(whole[0], whole[-1]))
    return " | ".join(choices)


def _nonzero_then_digits(fewest: int, most: int) -> str:
    if most == 0:
        return "[1-9]"
    return f"[1-9] [0-9]{{{fewest}}}" if fewest == most else f"[1-9] [0-9]{{{fewest},{most}}}"


def _same_length_range(low: str, high: str) -> str:
    """Digit strings of one length from ``low`` to ``high``, leading zeros allowed."""
    if low == high:
        return f'"{low}"'
    if len(low) == 1:
        return f"[{low}-{high}]"
    rest = len(low) - 1
    if low[0] == high[0]:
        return f'"{low[0]}" ({_same_length_range(low[1:], high[1:])})'
    choices = []
    first, last = int(low[0]), int(high[0])
    if low[1:] != "0" * rest:
        choices.append(f'"{low[0]}" ({_same_length_range(low[1:], "9" * rest)})')
        first += 1
    tail = None
    if high[1:] != "9" * rest:
        tail = f'"{high[0]}" ({_same_length_range("0" * rest, high[1:])})'
        last -= 1
    if first <= last:
        digit = f"[{first}-{last}]" if first < last else f'"{first}"'
        choices.append(f"{digit} [0-9]{{{rest}}}")
    if tail:
        choices.append(tail)
    return " | ".join(choices)


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def literal(text: str) -> str:
    """``text`` as a GBNF string literal (control characters as ``\\xNN``)."""
    return '"' + re.sub(r'[\\"\x00-\x1f\x7f]', lambda m: _ESCAPES.get(m[0], f"\\x{ord(m[0]):02X}"), text) + '"'


def _quoted(name: str) -> str:
    """A tool's name as a JSON string."""
    return json.dumps(name, ensure_ascii=False)
