"""Granite 3.x's calls (``granite``): ``<|tool_call|>[{"name": …, "arguments": {…}}]``.

Granite 4 writes Hermes' ``<tool_call>`` blocks instead (``hermes.py``).

Everything here is pure: no model, no I/O.
"""

from __future__ import annotations

from imprintd.models.chat_formats.calls import CallSyntax, json_after, json_list_after
from imprintd.models.chat_formats.format import ChatFormat
from imprintd.models.chat_formats.grammar import json_list_body

TOOL_CALL = "<|tool_call|>"


GRANITE = ChatFormat(
    name="granite",
    families="Granite 3.x",
    markers=(TOOL_CALL,),
    syntax=CallSyntax("granite", (TOOL_CALL,), json_after()),
    write_calls=json_list_after(TOOL_CALL),
    grammar=json_list_body(),
    grammar_opening=TOOL_CALL,
)
