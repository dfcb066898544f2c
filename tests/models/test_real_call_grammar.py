"""Tool calls on the real embedded model: llama.cpp takes every call grammar, the grammar lets
through exactly the calls the tools accept, and a call the model opens always parses and validates
(left free, the same model writes one that does not)."""

from __future__ import annotations

import pytest

from imprintd.context.history import SPEC as HISTORY
from imprintd.context.history import HistoryArguments
from imprintd.context.originals import READ_CHAT_SECTION_SPEC, ReadChatSectionArguments
from imprintd.messages import system, user
from imprintd.models.chat_formats.format import ChatFormat
from imprintd.models.chat_formats.grammar import find_opening
from imprintd.models.chat_formats.hermes import HERMES
from imprintd.models.chat_formats.json_fallback import JSON_FALLBACK
from imprintd.tools.base import parse_arguments
from imprintd.tools.workspace import ReadFileArguments, ReadFileTool, SearchArguments, SearchTool
from tests.models.real_model import Sampler, needs_real_model

TOOLS = [SearchTool.spec, ReadFileTool.spec, HISTORY, READ_CHAT_SECTION_SPEC]
ARGUMENTS = {
    "search": SearchArguments,
    "read_file": ReadFileArguments,
    "conversation_history": HistoryArguments,
    "read_chat_section": ReadChatSectionArguments,
}
#: Each way a call can open, with what the model wrote of it before the grammar took over.
OPENINGS = [
    ("<tool_call>", HERMES, "<tool_call>"),
    ('{"name":', JSON_FALLBACK, '{"name":'),
    ('{"arguments":', JSON_FALLBACK, '{"arguments":'),
    ('```json\n[{"parameters":', JSON_FALLBACK, '[{"parameters":'),
]


def grammar_for(text: str, chat_format: ChatFormat, written: str) -> str:
    opening, _ = find_opening(text, chat_format.syntax)
    assert opening is not None
    return chat_format.call_grammar(TOOLS, opening, written)


@needs_real_model
@pytest.mark.parametrize(("text", "chat_format", "written"), OPENINGS)
def test_llama_cpp_takes_the_grammar_of_every_opening(local_model, text, chat_format, written):
    sampler = Sampler(local_model, grammar_for(text, chat_format, written))
    assert sampler.pointer, "llama.cpp did not parse the grammar"
    sampler.close()


VALID = [
    ' "search", "arguments": {"query": "retry limit"}}',
    ' "read_file", "arguments": {"path": "src/app.py", "start_line": 3, "end_line": 40}}',
    ' "read_file", "arguments": {"path": "a \\"quoted\\"\\n name.py"}}',
    ' "conversation_history", "arguments": {"message": 12, "offset": 0}}',
    ' "read_chat_section", "arguments": {"source_id": "paste-1", "start": 0, "length": 4000}}',
]
INVALID = {
    "an unknown tool": ' "serch", "arguments": {"query": "x"}}',
    "parameters for arguments": ' "search", "parameters": {"query": "x"}}',
    "an argument the tool lacks": ' "search", "arguments": {"q": "x"}}',
    "a required argument missing": ' "read_file", "arguments": {"start_line": 3}}',
    "below the minimum": ' "read_file", "arguments": {"path": "a.py", "start_line": 0}}',
    "above the maximum": ' "read_chat_section", "arguments": {"source_id": "s", "start": 0, "length": 4001}}',
    "a string for a number": ' "conversation_history", "arguments": {"message": "12"}}',
    "a raw newline in a string": ' "search", "arguments": {"query": "a\nb"}}',
    "a call not closed": ' "search", "arguments": {"query": "x"}',
    "text after the call": ' "search", "arguments": {"query": "x"}} Done.',
}


@needs_real_model
def test_the_grammar_lets_through_exactly_the_calls_the_tools_accept(local_model):
    from imprintd.models.chat_formats.calls import parse_tool_calls

    grammar = grammar_for('{"name":', JSON_FALLBACK, '{"name":')
    for rest in VALID:
        sampler = Sampler(local_model, grammar)
        assert sampler.accepts('{"name":' + rest), rest
        sampler.close()
        (call,) = parse_tool_calls('{"name":' + rest, TOOLS, JSON_FALLBACK.syntax).calls
        parse_arguments(call.name, call.arguments, ARGUMENTS[call.name])  # raises if not valid
    for what, rest in INVALID.items():
        sampler = Sampler(local_model, grammar)
        assert not sampler.accepts('{"name":' + rest), what
        sampler.close()


#: A question on which the embedded model, offered the workspace tools, opens a call it gets wrong.
ASKED = [system("You answer questions about the user's workspace. Use the tools."), user("Read the file src/app.py.")]


@needs_real_model
async def test_a_call_the_embedded_model_opens_parses_and_validates(local_model, monkeypatch):
    tools = [SearchTool.spec, ReadFileTool.spec]
    streamed: list[str] = []
    finished = await local_model.complete(ASKED, tools, max_tokens=160, on_text=streamed.append)
    assert finished.finish_reason == "tool_calls" and finished.tool_call_error is None
    for call in finished.tool_calls:
        parse_arguments(call.name, call.arguments, ARGUMENTS[call.name])
    assert "".join(streamed) == finished.text and "{" not in finished.text

    monkeypatch.setattr(local_model, "_tool_call_grammar", False)  # LocalModel(tool_call_grammar=False)
    unconstrained = await local_model.complete(ASKED, tools, max_tokens=160)
    assert unconstrained.tool_calls == () and unconstrained.tool_call_error  # the same model, left free
