"""Llama 3.x's calls (``llama3-json``): ``{"name": …, "parameters": {…}}``, maybe after
``<|python_tag|>``, several chained with semicolons (Llama 3.1, 3.2, 3.3).

Everything here is pure: no model, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from imprintd.messages import ToolCall
from imprintd.models.chat_formats.calls import CallSyntax, json_after
from imprintd.models.chat_formats.format import ChatFormat
from imprintd.models.chat_formats.grammar import ArgumentRules

PYTHON_TAG = "<|python_tag|>"


def _write_calls(calls: Sequence[ToolCall]) -> str:
    return "; ".join(json.dumps({"name": c.name, "parameters": c.arguments}, ensure_ascii=False) for c in calls)


def _grammar(rules: ArgumentRules) -> str:
    """``<|python_tag|>{"name": ..., "parameters": {...}}``."""
    return f'ws "{{" ws "\\"name\\"" ws ":" ws {rules.named_call("parameters")}'


LLAMA3_JSON = ChatFormat(
    name="llama3-json",
    families="Llama 3.1, 3.2, 3.3",
    markers=("<|start_header_id|>", '"parameters"'),
    any_markers=(PYTHON_TAG,),
    syntax=CallSyntax(
        "llama3-json",
        (PYTHON_TAG,),
        json_after("<|eom_id|>"),
        json_calls=True,
        stray=("<|eom_id|>", "<|eot_id|>"),
    ),
    write_calls=_write_calls,
    grammar=_grammar,
    arguments_key="parameters",
)
