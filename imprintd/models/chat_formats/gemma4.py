"""Gemma 4's calls (``gemma4``): ``<|tool_call>call:f{a:<|"|>v<|"|>}<tool_call|>``, its strings
quoted with ``<|"|>``; thoughts in a ``<|channel>thought`` … ``<channel|>`` channel.

Everything here is pure: no model, no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from imprintd.messages import ToolCall
from imprintd.models.chat_formats.calls import CallSyntax, Collector, Slip, between, loads_json, snippet
from imprintd.models.chat_formats.format import ChatFormat
from imprintd.models.chat_formats.grammar import ArgumentRules, keyword_body
from imprintd.models.chat_formats.reasoning import GEMMA_THOUGHT

CALL_OPEN = "<|tool_call>"
CALL_CLOSE = "<tool_call|>"
GEMMA_QUOTE = '<|"|>'
_GEMMA_KEY = re.compile(r"([{,]\s*)([A-Za-z_][\w.-]*)\s*:")


def gemma_to_json(body: str) -> str:
    """Gemma 4's argument object as JSON: ``{a:<|"|>v<|"|>,n:1}`` → ``{"a": "v", "n": 1}``."""
    out: list[str] = []
    position = 0
    while True:
        start = body.find(GEMMA_QUOTE, position)
        if start < 0:
            out.append(_GEMMA_KEY.sub(r'\1"\2":', body[position:]))
            return "".join(out)
        end = body.find(GEMMA_QUOTE, start + len(GEMMA_QUOTE))
        end = len(body) if end < 0 else end
        out.append(_GEMMA_KEY.sub(r'\1"\2":', body[position:start]))
        out.append(json.dumps(body[start + len(GEMMA_QUOTE) : end], ensure_ascii=False))
        position = end + len(GEMMA_QUOTE)


def _call(body: str, collected: Collector) -> None:
    """``call:name{…}``."""
    body = body.strip()
    brace = body.find("{")
    if not body.startswith("call:") or brace < 0:
        collected.errors.append(f"the tool call must read call:name{{…}}: {snippet(body)!r}")
        return
    name = body[len("call:") : brace].strip()
    try:
        arguments = loads_json(gemma_to_json(body[brace:]))
    except json.JSONDecodeError as error:
        collected.errors.append(f"the arguments of the {name!r} call cannot be read ({error.msg}): {snippet(body)!r}")
        return
    collected.add_object({"name": name, "arguments": arguments})


def _gemma_value(value: Any) -> str:
    if isinstance(value, str):
        return GEMMA_QUOTE + value + GEMMA_QUOTE
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_gemma_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_gemma_value(v) for v in value) + "]"
    return json.dumps(value)


def _write_calls(calls: Sequence[ToolCall]) -> str:
    return "".join(f"{CALL_OPEN}call:{c.name}{_gemma_value(c.arguments)}{CALL_CLOSE}" for c in calls)


def _grammar(rules: ArgumentRules) -> str:
    """``<|tool_call>call:name{a:<|"|>v<|"|>,n:1}<tool_call|>``."""
    rules.add("gemma-string", '"<|\\"|>" [^<]* "<|\\"|>"')

    def pair(name: str, value: str) -> str:
        return f'"{name}:" {"gemma-string" if value.endswith("-string") else value}'

    call = keyword_body(rules, pair, "{", "}", "gemma")
    return f'"call:" {call} "{CALL_CLOSE}"'


GEMMA4 = ChatFormat(
    name="gemma4",
    families="Gemma 4",
    markers=(CALL_OPEN, "call:"),
    syntax=CallSyntax(
        "gemma4",
        (CALL_OPEN,),
        between(CALL_CLOSE, _call),
        slips=(Slip("<|tool_response>", "<tool_response|>"),),
        stray=(
            GEMMA_QUOTE,
            CALL_CLOSE,
            "<tool_response|>",
            "<|channel>",
            "<channel|>",
            "<|tool>",
            "<tool|>",
            "<|think|>",
            "<|turn>",
            "<turn|>",
        ),
    ),
    write_calls=_write_calls,
    grammar=_grammar,
    grammar_opening=CALL_OPEN,
    reasoning=GEMMA_THOUGHT,
)
