"""Phi-4-mini's calls (``phi4-mini``): ``functools[{…}]``, or ``<|tool_call|>{…}<|/tool_call|>``.

Everything here is pure: no model, no I/O.
"""

from __future__ import annotations

from imprintd.models.chat_formats.calls import CallSyntax, json_after, json_list_after
from imprintd.models.chat_formats.format import ChatFormat
from imprintd.models.chat_formats.grammar import json_list_body

FUNCTOOLS = "functools"


PHI4_MINI = ChatFormat(
    name="phi4-mini",
    families="Phi-4-mini",
    # llama.cpp's template writes the calls' markers; the model's own (Hugging Face) template
    # only ``<|tool|>…<|/tool|>`` around the offered tools.
    any_markers=(FUNCTOOLS, "<|/tool_call|>", "<|/tool|>"),
    syntax=CallSyntax(
        "phi4-mini",
        (FUNCTOOLS, "<|tool_call|>"),
        json_after("<|/tool_call|>"),
        stray=("<|/tool_call|>", "<|tool|>", "<|/tool|>"),
    ),
    write_calls=json_list_after(FUNCTOOLS),
    grammar=json_list_body(),
    grammar_opening=FUNCTOOLS,
)
