"""JSON in text (``json-fallback``): the format of a template that renders no tools.

The tools are described in the system prompt (``calls.tools_prompt``) and the model answers with
a bare or fenced JSON object ``{"name": ..., "arguments": {...}}`` (or a list of them) somewhere
in its reply; a model trained on Hermes may still wrap its call in ``<tool_call>`` tags, which
are read as Hermes' blocks are, and finished under Hermes' grammar. Gemma 2 and 3, Phi-3.5 and
SmolLM2 write it, and any template whose markers no other format matches.

Everything here is pure: no model, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from imprintd.messages import ToolCall
from imprintd.models.chat_formats.calls import HERMES_CLOSE, HERMES_OPEN, CallSyntax, format_call
from imprintd.models.chat_formats.format import ChatFormat
from imprintd.models.chat_formats.hermes import hermes_block, hermes_grammar


def _write_json(calls: Sequence[ToolCall]) -> str:
    return "\n".join(format_call(c) for c in calls)


JSON_FALLBACK = ChatFormat(
    name="json-fallback",
    families="any template that renders no tools (Gemma 3, Phi-3.5, …)",
    syntax=CallSyntax("json-fallback", (HERMES_OPEN,), hermes_block, json_calls=True, stray=(HERMES_CLOSE,)),
    write_calls=_write_json,
    grammar=hermes_grammar,
)
