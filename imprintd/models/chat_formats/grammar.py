"""The grammar a local model's tool call is finished under (docs/decisions.md, "Tool-call grammar"):
the GBNF pieces every chat format's grammar is made of.

Small models that open a tool call often get it wrong: an unknown tool name, ``parameters``
where ``arguments`` belong, an argument the tool does not take, JSON that does not close. A
local model's sampler can be constrained by a llama.cpp grammar (GBNF), so once a model has
opened a call, the rest of it is generated under a grammar in which the name is one of the
offered tools and the arguments follow that tool's JSON schema, converted by llama-cpp-python's
port of llama.cpp's JSON-schema-to-grammar. What it writes then always parses and validates.

``find_opening`` says where a call opens in the text streamed so far (a family's own opening,
``<tool_call>``, ``[TOOL_CALLS]``, ``<|tool_call_start|>`` …, or ``{"name":`` and its variants
in the JSON form, exactly where ``calls.py`` starts parsing one); each format's entry
(``ChatFormat.grammar``, in its family's module) writes the rest of a call in its syntax from
the rules here (``ArgumentRules``), and ``json_call_rest`` the rest of a JSON one.
``format.CallWatch`` puts them together for the provider (``local.py``), which then drops the
piece that opened the call and generates again from the tokens before it, under a grammar that
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
from imprintd.models.chat_formats.calls import FENCE, CallSyntax, JsonOpening, partial_suffix, scan_opening

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


def find_opening(text: str, syntax: CallSyntax | None, start: int = 0) -> tuple[CallOpening | None, int]:
    """The first call opening in ``text`` written in ``syntax`` (a chat format's) at or after
    ``start``, or None; and where to look from once more text follows (no opening can begin
    before it)."""
    if syntax is None:
        return None, len(text)
    best: CallOpening | None = None
    resume = len(text)
    for marker in syntax.openings:
        found = text.find(marker, start)
        if found >= 0 and (best is None or found < best.start):
            best = CallOpening(start=found, end=found + len(marker), marker=marker)
        resume = min(resume, max(start, len(text) - partial_suffix(text, marker)))
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


def json_call_rest(rules: ArgumentRules, shape: JsonOpening, key: str = "arguments") -> str:
    """The rest of a JSON call that opened as ``shape`` says (``{"name":``, ``{"arguments":``,
    fenced, in a list): the arguments under ``key`` (what the family writes), or under
    ``parameters`` where the model opened with that."""
    key = "parameters" if shape.key == "parameters" else key
    named = rules.named_call(key)
    first = named if shape.key == "name" else rules.arguments_first()
    rest = f"ws {first}"
    if shape.listed:
        rules.add("next-call", f'"," ws "{{" ws "\\"name\\"" ws ":" ws {named}')
        rest += ' (ws next-call)* ws "]"'
    if shape.fenced:
        rest += f" ws {literal(FENCE)}"
    return rest


# Shapes several families' grammars share.


def json_list_body(key: str = "arguments", close: str = "") -> Callable[[ArgumentRules], str]:
    """``[{"name": ..., "arguments": {...}}, ...]`` (Mistral, Granite, Phi-4-mini)."""

    def body(rules: ArgumentRules) -> str:
        named = rules.named_call(key)
        rules.add("one-call", f'"{{" ws "\\"name\\"" ws ":" ws {named}')
        tail = f" ws {literal(close)}" if close else ""
        return f'ws "[" ws one-call (ws "," ws one-call)* ws "]"{tail}'

    return body


def keyword_body(
    rules: ArgumentRules, pair: Callable[[str, str], str], open_: str, close: str, rule_prefix: str
) -> str:
    """One call per tool as ``name`` + ``open_`` + ``pair(name, value rule)`` separated by commas + ``close``."""
    choices = []
    for tool in rules.tools:
        pairs = [pair(name, rules.value_rule(tool, name)) for name in tool.parameters.get("properties", {})]
        rule = f"{rule_prefix}-{rule_name(tool.name)}"
        arguments = f'(({" | ".join(pairs)}) ("," ws ({" | ".join(pairs)}))*)?' if pairs else ""
        rules.add(rule, f"{literal(tool.name)} {literal(open_)} {arguments} {literal(close)}".replace("  ", " "))
        choices.append(rule)
    rules.add(f"{rule_prefix}-call", " | ".join(choices))
    return f"{rule_prefix}-call"


def rule_name(name: str) -> str:
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
        rule = f"value-{rule_name(tool.name)}-{rule_name(name)}"
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
