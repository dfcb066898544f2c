"""Mistral's calls: ``[TOOL_CALLS][{"name": …, "arguments": {…}}]`` (``mistral``: Mistral 7B v0.3,
Nemo) and ``[TOOL_CALLS]name[ARGS]{…}`` (``mistral-args``: Ministral 3, Mistral Small 3.2,
Devstral), which one block parser reads; thoughts between ``[THINK]`` and ``[/THINK]``.

Everything here is pure: no model, no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from imprintd.messages import ToolCall
from imprintd.models.chat_formats.calls import (
    CallSyntax,
    Collector,
    Slip,
    json_after,
    json_list_after,
    raw_decode_json,
    skip_space,
    snippet,
)
from imprintd.models.chat_formats.format import ChatFormat
from imprintd.models.chat_formats.grammar import ArgumentRules, json_list_body
from imprintd.models.chat_formats.reasoning import MISTRAL_THINK

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"


def mistral_id(call_id: str) -> str:
    """A call id as Mistral's templates demand it: exactly 9 letters and digits, the same for the
    same id (a call and its result must agree, and a prompt must stay byte-stable)."""
    if len(call_id) == 9 and call_id.isascii() and call_id.isalnum():
        return call_id
    return hashlib.sha256(call_id.encode("utf-8")).hexdigest()[:9]


def _block(text: str, start: int, opening: str, collected: Collector) -> int:
    """``[TOOL_CALLS][{…}]`` (Mistral 7B v0.3, Nemo) or ``[TOOL_CALLS]name[ARGS]{…}`` (Ministral 3)."""
    at = skip_space(text, start + len(opening))
    if text[at : at + 1] in ("[", "{"):
        return json_after()(text, at, "", collected)
    args = text.find(ARGS, at)
    if args < 0:
        collected.errors.append(f"the tool call has no [ARGS] after its name: {snippet(text[at:])!r}")
        return len(text)
    name = text[at:args].split("[CALL_ID]")[0].strip()
    at = skip_space(text, args + len(ARGS))
    try:
        arguments, end = raw_decode_json(text, at)
    except json.JSONDecodeError as error:
        collected.errors.append(
            f"the arguments of the {name!r} call are not valid JSON ({error.msg}): {snippet(text[at:])!r}"
        )
        return len(text)
    collected.add_object({"name": name, "arguments": arguments})
    return end


_SLIPS = (Slip("[TOOL_RESULTS]", "[/TOOL_RESULTS]"),)
_STRAY = ("[/TOOL_RESULTS]", ARGS, "[CALL_ID]", "[/TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]")


def _write_args(calls: Sequence[ToolCall]) -> str:
    return "".join(f"{TOOL_CALLS}{c.name}{ARGS}{json.dumps(c.arguments, ensure_ascii=False)}" for c in calls)


def _args_grammar(rules: ArgumentRules) -> str:
    """``[TOOL_CALLS]name[ARGS]{...}``."""
    return rules.per_tool("args-call", '{bare} "[ARGS]" {arguments}')


MISTRAL = ChatFormat(
    name="mistral",
    families="Mistral 7B v0.3, Mistral Nemo",
    markers=(TOOL_CALLS,),
    syntax=CallSyntax("mistral", (TOOL_CALLS,), _block, slips=_SLIPS, stray=_STRAY),
    write_calls=json_list_after(TOOL_CALLS),
    template_id=mistral_id,
    grammar=json_list_body(),
    grammar_opening=TOOL_CALLS,
    reasoning=MISTRAL_THINK,
)
MISTRAL_ARGS = ChatFormat(
    name="mistral-args",
    families="Ministral 3, Mistral Small 3.2, Devstral",
    markers=(TOOL_CALLS, ARGS),
    syntax=CallSyntax("mistral-args", (TOOL_CALLS,), _block, slips=_SLIPS, stray=_STRAY),
    write_calls=_write_args,
    template_id=mistral_id,
    grammar=_args_grammar,
    grammar_opening=TOOL_CALLS,
    reasoning=MISTRAL_THINK,
)
