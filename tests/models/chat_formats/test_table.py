"""The chat-format table is built checked: every entry has its own call grammar, one name each
(imprintd/models/chat_formats/format.py, table.py)."""

from __future__ import annotations

import dataclasses

import pytest

from imprintd.messages import ToolSpec
from imprintd.models.chat_formats.format import build_table
from imprintd.models.chat_formats.grammar import find_opening
from imprintd.models.chat_formats.hermes import HERMES
from imprintd.models.chat_formats.reasoning import GEMMA_THOUGHT, MISTRAL_THINK, THINK
from imprintd.models.chat_formats.table import BY_NAME, FORMATS

SEARCH = ToolSpec(
    name="search",
    description="Search.",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)


def test_an_entry_without_a_call_grammar_fails_the_table_naming_it():
    no_grammar = dataclasses.replace(BY_NAME["granite"], name="granite-5", grammar=None)
    with pytest.raises(ValueError, match=r"the chat format 'granite-5' has no call grammar"):
        build_table((*FORMATS, no_grammar))


def test_two_entries_of_one_name_fail_the_table():
    with pytest.raises(ValueError, match=r"two chat formats are named 'hermes'"):
        build_table((HERMES, dataclasses.replace(HERMES, families="another")))


def test_an_entry_without_a_grammar_has_none_to_give_rather_than_another_familys():
    opening, _ = find_opening("<|tool_call|>", BY_NAME["granite"].syntax)
    assert opening is not None
    with pytest.raises(ValueError, match="has no call grammar"):
        dataclasses.replace(BY_NAME["granite"], grammar=None).call_grammar((SEARCH,), opening, "<|tool_call|>")


@pytest.mark.parametrize(
    ("template", "name", "reasoning"),
    [
        ("[AVAILABLE_TOOLS][TOOL_CALLS]name[ARGS]{…}[THINK]<think>", "mistral-args", MISTRAL_THINK),
        ("<|tool_call>call:f{}<tool_call|><|channel>thought<think>", "gemma4", GEMMA_THOUGHT),
        ("<tool_call><function=f><parameter=x></tool_call><think>", "qwen-xml", THINK),
        # Another family's markers in the template too: the format's own come first.
        ("<tool_call><function=f><parameter=x></tool_call>[THINK]<think>", "qwen-xml", THINK),
        # A template of no known tool syntax may still think in any family's markers.
        ("<|im_start|>[THINK]", "json-fallback", MISTRAL_THINK),
        ("<|im_start|>{{ m }}", "json-fallback", None),
    ],
)
def test_a_format_looks_for_its_own_reasoning_markers_first(template, name, reasoning):
    chat_format = BY_NAME[name]
    assert chat_format.matches(template) or name == "json-fallback"
    assert chat_format.reasoning_in(template) == reasoning
