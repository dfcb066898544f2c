"""The grammar a local model's tool call is finished under (docs/decisions.md, "Tool-call grammar").

Small models that open a tool call often get it wrong: an unknown tool name, ``parameters``
where ``arguments`` belong, an argument the tool does not take, JSON that does not close. A
local model's sampler can be constrained by a llama.cpp grammar (GBNF), so once a model has
opened a call, the rest of it is generated under a grammar in which the name is one of the
offered tools and the arguments follow that tool's JSON schema, converted by llama-cpp-python's
port of llama.cpp's JSON-schema-to-grammar. What it writes then always parses and validates.

The provider (``local.py``) watches the text as it streams; ``CallWatch.feed`` says when the
piece just decoded opens a call (the family's own opening, ``<tool_call>``, ``[TOOL_CALLS]``,
``<|tool_call_start|>`` …, or ``{"name":`` and its variants in the JSON form, exactly where
``toolcalls.py`` starts parsing one); the grammar then writes the rest in the family's syntax
(``chat_formats.py``). The provider then
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from imprintd.messages import ToolSpec
from imprintd.models.chat_formats import (
    DEEPSEEK_CALL_BEGIN,
    DEEPSEEK_CALL_END,
    DEEPSEEK_CALLS_END,
    DEEPSEEK_SEP,
    HERMES_FORMAT,
    JSON_FALLBACK,
    ChatFormat,
)
from imprintd.models.toolcalls import (
    FENCE,
    HERMES_CLOSE,
    HERMES_OPEN,
    JsonOpening,
    Mode,
    _partial_suffix,
    scan_opening,
    syntax_of,
)

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
    #: For a family's own opening (``<tool_call>``, ``[TOOL_CALLS]``, …): which one.
    marker: str | None = None


def find_opening(text: str, mode: Mode | ChatFormat, start: int = 0) -> tuple[CallOpening | None, int]:
    """The first call opening in ``text`` written in ``mode`` (or a chat format) at or after
    ``start``, or None; and where to look from once more text follows (no opening can begin
    before it)."""
    syntax = mode.syntax if isinstance(mode, ChatFormat) else syntax_of(mode)
    if syntax is None:
        return None, len(text)
    best: CallOpening | None = None
    resume = len(text)
    for marker in syntax.openings:
        found = text.find(marker, start)
        if found >= 0 and (best is None or found < best.start):
            best = CallOpening(start=found, end=found + len(marker), marker=marker)
        resume = min(resume, max(start, len(text) - _partial_suffix(text, marker)))
    if syntax.json_calls:
        for index in range(start, best.start if best is not None else len(text)):
            if text[index] in "{[`":
                state, shape = scan_opening(text, index)
                if state == "yes" and shape is not None:
                    return CallOpening(start=index, end=index + shape.end, shape=shape), index
                if state == "maybe":
                    resume = min(resume, index)
                    break
    if best is not None:
        return best, best.start
    return None, resume


class CallWatch:
    """Watches a reply's text, piece by piece, for the moment it opens a tool call."""

    def __init__(self, tools: Sequence[ToolSpec], mode: Mode | ChatFormat) -> None:
        self._tools = tuple(tools)
        self._format = (
            mode if isinstance(mode, ChatFormat) else {"native": HERMES_FORMAT, "json": JSON_FALLBACK}.get(mode)
        )
        if not tools:
            self._format = None
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
        assert self._format is not None
        chat_format = self._format
        opening, self._resume = find_opening(self._written, chat_format, self._resume)
        if opening is None:
            return None
        written = self._written[before : opening.end]
        self._format = None
        return call_grammar(self._tools, opening, written, chat_format)

    @property
    def done(self) -> bool:
        return self._format is None


def call_grammar(
    tools: Sequence[ToolSpec], opening: CallOpening, written: str, chat_format: ChatFormat = HERMES_FORMAT
) -> str:
    """GBNF for ``written`` followed by the rest of the call ``opening`` began, in the syntax of
    ``chat_format`` (for an opening with a ``marker``; a JSON opening has its own shape)."""
    rules = ArgumentRules(tools)
    if opening.shape is not None:
        shape = opening.shape
        key = "parameters" if chat_format.name == "llama3-json" or shape.key == "parameters" else "arguments"
        named = rules.named_call(key)
        first = named if shape.key == "name" else rules.arguments_first()
        rest = f"ws {first}"
        if shape.listed:
            rules.add("next-call", f'"," ws "{{" ws "\\"name\\"" ws ":" ws {named}')
            rest += ' (ws next-call)* ws "]"'
        if shape.fenced:
            rest += f" ws {literal(FENCE)}"
        root = f"{literal(written)} {rest}"
    else:
        root = f"{literal(written)} {_FAMILY_BODIES.get(chat_format.name, _hermes_body)(rules)}"
    rules.add("root", root)
    return rules.grammar()


# What follows each family's opening marker: the call (or calls) in its own syntax.


def _hermes_body(rules: ArgumentRules) -> str:
    """``<tool_call> {"name": ...} </tool_call>``, maybe more of them."""
    block = f'ws "{{" ws "\\"name\\"" ws ":" ws {rules.named_call()} ws {literal(HERMES_CLOSE)}'
    rules.add("call-block", block)
    return f'call-block ("\\n"? {literal(HERMES_OPEN)} call-block)*'


def _json_list_body(key: str = "arguments", close: str = "") -> Callable[[ArgumentRules], str]:
    """``[{"name": ..., "arguments": {...}}, ...]`` (Mistral, Granite, Phi-4-mini)."""

    def body(rules: ArgumentRules) -> str:
        named = rules.named_call(key)
        rules.add("one-call", f'"{{" ws "\\"name\\"" ws ":" ws {named}')
        tail = f" ws {literal(close)}" if close else ""
        return f'ws "[" ws one-call (ws "," ws one-call)* ws "]"{tail}'

    return body


def _python_tag_body(rules: ArgumentRules) -> str:
    """``<|python_tag|>{"name": ..., "parameters": {...}}`` (Llama 3.x)."""
    return f'ws "{{" ws "\\"name\\"" ws ":" ws {rules.named_call("parameters")}'


def _mistral_args_body(rules: ArgumentRules) -> str:
    """``[TOOL_CALLS]name[ARGS]{...}`` (Ministral 3)."""
    return rules.per_tool("args-call", '{bare} "[ARGS]" {arguments}')


def _qwen_xml_body(rules: ArgumentRules) -> str:
    """``<tool_call><function=name><parameter=x>value</parameter></function></tool_call>``."""
    rules.add("xml-value", "[^<]+")
    choices = []
    for tool in rules.tools:
        names = list(tool.parameters.get("properties", {}))
        parameters = " | ".join(
            f'"<parameter=" {literal(name)} ">\\n" xml-value "\\n</parameter>\\n"' for name in names
        )
        rule = f"xml-{_rule_name(tool.name)}"
        rules.add(rule, f'"<function=" {literal(tool.name)} ">\\n" ({parameters or chr(34) * 2})* "</function>"')
        choices.append(rule)
    rules.add("xml-call", " | ".join(choices))
    return f'"\\n"? xml-call "\\n"? {literal(HERMES_CLOSE)}'


def _keyword_body(
    rules: ArgumentRules, pair: Callable[[str, str], str], open_: str, close: str, rule_prefix: str
) -> str:
    """One call per tool as ``name`` + ``open_`` + ``pair(name, value rule)`` separated by commas + ``close``."""
    choices = []
    for tool in rules.tools:
        pairs = [pair(name, rules.value_rule(tool, name)) for name in tool.parameters.get("properties", {})]
        rule = f"{rule_prefix}-{_rule_name(tool.name)}"
        arguments = f'(({" | ".join(pairs)}) ("," ws ({" | ".join(pairs)}))*)?' if pairs else ""
        rules.add(rule, f"{literal(tool.name)} {literal(open_)} {arguments} {literal(close)}".replace("  ", " "))
        choices.append(rule)
    rules.add(f"{rule_prefix}-call", " | ".join(choices))
    return f"{rule_prefix}-call"


def _lfm2_body(rules: ArgumentRules) -> str:
    """``<|tool_call_start|>[name(a="v", n=1)]<|tool_call_end|>`` (LFM2, LFM2.5)."""
    call = _keyword_body(rules, lambda name, value: f'"{name}=" {value}', "(", ")", "py")
    return f'"[" {call} (", " {call})* "]" "<|tool_call_end|>"'


def _gemma4_body(rules: ArgumentRules) -> str:
    """``<|tool_call>call:name{a:<|"|>v<|"|>,n:1}<tool_call|>`` (Gemma 4)."""
    rules.add("gemma-string", '"<|\\"|>" [^<]* "<|\\"|>"')

    def pair(name: str, value: str) -> str:
        return f'"{name}:" {"gemma-string" if value.endswith("-string") else value}'

    call = _keyword_body(rules, pair, "{", "}", "gemma")
    return f'"call:" {call} "<tool_call|>"'


def _deepseek_body(rules: ArgumentRules) -> str:
    """``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name`` + fenced JSON arguments."""
    one = rules.per_tool(
        "deepseek-call",
        f'{literal(DEEPSEEK_CALL_BEGIN + "function" + DEEPSEEK_SEP)} {{bare}} "\\n```json\\n" {{arguments}} '
        f'"\\n```" {literal(DEEPSEEK_CALL_END)}',
    )
    return f"{one}+ {literal(DEEPSEEK_CALLS_END)}"


_FAMILY_BODIES: dict[str, Callable[[ArgumentRules], str]] = {
    "hermes": _hermes_body,
    "qwen-xml": _qwen_xml_body,
    "llama3-json": _python_tag_body,
    "mistral": _json_list_body(),
    "mistral-args": _mistral_args_body,
    "granite": _json_list_body(),
    "phi4-mini": _json_list_body(),
    "lfm2": _lfm2_body,
    "gemma4": _gemma4_body,
    "deepseek-r1": _deepseek_body,
}


def _rule_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9-]+", "-", name)


class ArgumentRules:
    """The rules of one call grammar: each tool's arguments, the call shapes, and ``ws``."""

    def __init__(self, tools: Sequence[ToolSpec]) -> None:
        self._tools = tuple(tools)
        self._converter = _converter_class()(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
        self._arguments = {
            tool.name: self._converter.visit(tool.grammar or tool.parameters, f"args-{tool.name}") for tool in tools
        }
        self._converter._rules["char"] = CHAR_RULE
        self.add("ws", WS_RULE)

    def add(self, name: str, rule: str) -> None:
        self._converter._rules[name] = rule

    def named_call(self, key: str = "arguments") -> str:
        """The rule for ``"<tool>", "arguments": {...}}``: what follows ``{"name":``."""
        rule = "named-call" if key == "arguments" else f"named-call-{key}"
        return self.per_tool(rule, '{name} ws "," ws "\\"' + key + '\\"" ws ":" ws {arguments} ws "}}"')

    def arguments_first(self) -> str:
        """The rule for ``{...}, "name": "<tool>"}``: what follows ``{"arguments":``."""
        return self.per_tool("arguments-first", '{arguments} ws "," ws "\\"name\\"" ws ":" ws {name} ws "}}"')

    def per_tool(self, rule: str, shape: str) -> str:
        """Add ``rule``: one choice per tool, ``shape`` filled with its quoted name (``name``),
        its bare name (``bare``) and its arguments' rule (``arguments``)."""
        choices = [
            shape.format(name=literal(_quoted(t.name)), bare=literal(t.name), arguments=self._arguments[t.name])
            for t in self._tools
        ]
        self.add(rule, " | ".join(choices))
        return rule

    @property
    def tools(self) -> tuple[ToolSpec, ...]:
        return self._tools

    def value_rule(self, tool: ToolSpec, name: str) -> str:
        """The rule for one argument of ``tool`` (a JSON value of its schema)."""
        schema = tool.parameters.get("properties", {}).get(name, {})
        rule = f"value-{_rule_name(tool.name)}-{_rule_name(name)}"
        if schema.get("type") == "string":
            rule += "-string"
        if rule not in self._converter._rules:
            self.add(rule, self._converter.visit(schema, rule + "-json"))
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
