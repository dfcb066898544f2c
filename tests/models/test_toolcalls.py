"""Tool-call parsing and the streaming filter (imprintd/models/chat_formats/calls.py), in Hermes'
syntax and JSON in text."""

from __future__ import annotations

import itertools

import pytest

from imprintd.messages import ToolSpec
from imprintd.models.chat_formats.calls import (
    ParsedOutput,
    VisibleTextFilter,
    call_from_object,
    format_call,
    opening_state,
    parse_syntax,
    parse_tool_calls,
    tools_prompt,
)
from imprintd.models.chat_formats.hermes import HERMES
from imprintd.models.chat_formats.json_fallback import JSON_FALLBACK

SEARCH = ToolSpec(
    name="search",
    description="Search the workspace.",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}},
)
READ = ToolSpec(
    name="read", description="Read a file.", parameters={"type": "object", "properties": {"path": {"type": "string"}}}
)
TOOLS = (SEARCH, READ)
NAMES = {"search", "read"}
#: The syntaxes: a native template's (Hermes), JSON in text, and none (nothing is a call).
NATIVE, JSON, NONE = HERMES.syntax, JSON_FALLBACK.syntax, None


def parse_hermes(text, names, new_id):
    return parse_syntax(text, names, NATIVE, new_id)


def parse_json_calls(text, names, new_id):
    return parse_syntax(text, names, JSON, new_id)


def ids():
    counter = itertools.count(1)
    return lambda: f"call_{next(counter)}"


# -- Hermes ------------------------------------------------------------------------------------


def test_hermes_single_call():
    out = parse_hermes(
        'Let me look.\n<tool_call>\n{"name": "search", "arguments": {"query": "port"}}\n</tool_call>', NAMES, ids()
    )
    assert out.text == "Let me look.\n"
    assert [(c.id, c.name, c.arguments) for c in out.calls] == [("call_1", "search", {"query": "port"})]
    assert out.error is None


def test_hermes_multiple_calls():
    text = (
        '<tool_call>{"name": "search", "arguments": {"query": "a"}}</tool_call>\n'
        '<tool_call>{"name": "read", "arguments": {"path": "x.py"}}</tool_call>'
    )
    out = parse_hermes(text, NAMES, ids())
    assert [(c.name, c.arguments) for c in out.calls] == [("search", {"query": "a"}), ("read", {"path": "x.py"})]
    assert out.text.strip() == ""
    assert [c.id for c in out.calls] == ["call_1", "call_2"]


def test_hermes_unclosed_final_block_still_counts():
    out = parse_hermes('<tool_call>{"name": "search", "arguments": {"query": "a"}}', NAMES, ids())
    assert [c.name for c in out.calls] == ["search"] and out.error is None


def test_hermes_bad_json():
    out = parse_hermes('<tool_call>{"name": "search", "arguments": {"query": }</tool_call>', NAMES, ids())
    assert out.calls == ()
    assert "not valid JSON" in out.error


def test_hermes_unknown_tool():
    out = parse_hermes('<tool_call>{"name": "delete", "arguments": {}}</tool_call>', NAMES, ids())
    assert out.calls == ()
    assert "unknown tool 'delete'" in out.error and "read, search" in out.error


def test_hermes_arguments_not_an_object():
    out = parse_hermes('<tool_call>{"name": "search", "arguments": ["a"]}</tool_call>', NAMES, ids())
    assert out.calls == ()
    assert "must be a JSON object, not a list" in out.error


def test_hermes_good_and_bad_calls_together():
    text = (
        '<tool_call>{"name": "search", "arguments": {"query": "a"}}</tool_call><tool_call>{"name": "nope"}</tool_call>'
    )
    out = parse_hermes(text, NAMES, ids())
    assert [c.name for c in out.calls] == ["search"]
    assert "unknown tool 'nope'" in out.error


def test_hermes_no_calls_keeps_text():
    out = parse_hermes("Just an answer with {braces}.", NAMES, ids())
    assert out == type(out)(text="Just an answer with {braces}.")


# -- call objects ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"name": "search", "arguments": '{"query": "a"}'}, {"query": "a"}),  # OpenAI string form
        ({"name": "search", "parameters": {"query": "a"}}, {"query": "a"}),  # Llama-3 form
        ({"name": "search"}, {}),  # no arguments
        ({"name": "search", "arguments": None}, {}),
    ],
)
def test_call_object_forms(value, expected):
    call = call_from_object(value, NAMES, ids())
    assert call.name == "search" and call.arguments == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1], "must be a JSON object"),
        ({"arguments": {}}, 'no "name"'),
        ({"name": 3}, 'no "name"'),
        ({"name": "search", "arguments": "{oops"}, "arguments of the 'search' call are not valid JSON"),
        ({"name": "search", "arguments": 5}, "must be a JSON object, not a number"),
        ({"name": "search", "arguments": "x"}, "not valid JSON"),
    ],
)
def test_call_object_errors(value, message):
    error = call_from_object(value, NAMES, ids())
    assert isinstance(error, str) and message in error


# -- JSON in text ------------------------------------------------------------------------------


def test_json_bare_call():
    out = parse_json_calls('{"name": "search", "arguments": {"query": "port"}}', NAMES, ids())
    assert [(c.name, c.arguments) for c in out.calls] == [("search", {"query": "port"})]
    assert out.text == "" and out.error is None


def test_json_call_after_prose():
    out = parse_json_calls('I will search.\n{"name": "search", "arguments": {"query": "x"}}\n', NAMES, ids())
    assert out.text == "I will search.\n\n"
    assert [c.name for c in out.calls] == ["search"]


@pytest.mark.parametrize("fence", ["```json\n", "```\n", "``` JSON \n"])
def test_json_fenced_call(fence):
    out = parse_json_calls(
        f'Sure.\n{fence}{{"name": "read", "arguments": {{"path": "a.py"}}}}\n```\nDone.', NAMES, ids()
    )
    assert [(c.name, c.arguments) for c in out.calls] == [("read", {"path": "a.py"})]
    assert out.text == "Sure.\n\nDone."


def test_json_list_of_calls():
    out = parse_json_calls(
        '[{"name": "search", "arguments": {"query": "a"}}, {"name": "read", "arguments": {}}]', NAMES, ids()
    )
    assert [c.name for c in out.calls] == ["search", "read"]


def test_json_arguments_first_still_a_call():
    out = parse_json_calls('{"arguments": {"query": "a"}, "name": "search"}', NAMES, ids())
    assert [c.name for c in out.calls] == ["search"]


def test_json_other_json_and_code_stay_visible():
    text = 'Config:\n```json\n{"port": 8080}\n```\nand {not json} and ```python\nx = {"name": 1}\n```'
    out = parse_json_calls(text, NAMES, ids())
    # The python fence is not a call; the dict inside it opens with "name" but sits mid-line in code:
    # it is still taken as a call attempt only if it parses as one, which it does not (unknown tool).
    assert out.calls == ()
    assert out.text.startswith('Config:\n```json\n{"port": 8080}\n```\nand {not json} and ```python\nx = ')


def test_json_malformed_call_bad_json_hides_rest():
    out = parse_json_calls('Here: {"name": "search", "arguments": {"query": "a"', NAMES, ids())
    assert out.calls == () and out.text == "Here: "
    assert "not valid JSON" in out.error


def test_json_fenced_malformed():
    out = parse_json_calls('```json\n{"name": "search", "arguments": [1, 2]}\n```', NAMES, ids())
    assert out.calls == () and "must be a JSON object, not a list" in out.error


def test_json_unknown_tool():
    out = parse_json_calls('{"name": "rm", "arguments": {}}', NAMES, ids())
    assert out.calls == () and "unknown tool 'rm'" in out.error


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("", "maybe"),
        ("{", "maybe"),
        ('{"', "maybe"),
        ('{"na', "maybe"),
        ('{"name"', "maybe"),
        ('{"name":', "yes"),
        ('{ \n "name" :', "yes"),
        ('[{"name":', "yes"),
        ('{"query":', "no"),
        ("{x", "no"),
        ("`", "maybe"),
        ("``", "maybe"),
        ("```", "maybe"),
        ("```js", "maybe"),
        ("```python", "no"),
        ("```json\n", "maybe"),
        ('```json\n{"name":', "yes"),
        ("```\nx", "no"),
        ("`x`", "no"),
        ("hello", "no"),
        ('{"nam":', "no"),
    ],
)
def test_opening_state(text, state):
    assert opening_state(text) == state


def test_parse_tool_calls_syntaxes():
    hermes = '<tool_call>{"name": "search", "arguments": {}}</tool_call>'
    assert parse_tool_calls(hermes, TOOLS, NATIVE).calls[0].name == "search"
    # The JSON form takes Hermes tags too (a model trained on them may write them): never shown.
    json_text = parse_tool_calls(hermes, TOOLS, JSON)
    assert json_text.calls[0].name == "search" and json_text.text == ""
    assert parse_tool_calls(hermes, (), NATIVE).text == hermes  # no tools offered: nothing is a call
    assert parse_tool_calls('{"name": "search"}', TOOLS, JSON).calls[0].name == "search"
    assert parse_tool_calls('{"name": "search"}', TOOLS, NONE).calls == ()


# -- prompt --------------------------------------------------------------------------------------


def test_tools_prompt_is_deterministic_and_names_tools():
    first, second = tools_prompt(TOOLS), tools_prompt(TOOLS)
    assert first == second
    assert "- search: Search the workspace." in first and "- read: Read a file." in first
    assert '{"name": "search", "arguments": {}}' in first


def test_format_call_round_trips():
    call = call_from_object({"name": "read", "arguments": {"path": "é.py"}}, NAMES, ids())
    assert format_call(call) == '{"name": "read", "arguments": {"path": "é.py"}}'
    assert parse_json_calls(format_call(call), NAMES, ids()).calls[0].arguments == {"path": "é.py"}


# -- streaming filter --------------------------------------------------------------------------


def stream(text: str, syntax, pieces: int = 1):
    """Feed ``text`` in chunks of ``pieces`` characters; return what streamed and the result."""
    filt = VisibleTextFilter(TOOLS, syntax, ids())
    shown = [filt.feed(text[i : i + pieces]) for i in range(0, len(text), pieces)]
    last, parsed = filt.finish()
    shown.append(last)
    return shown, parsed


SAMPLES = [
    (NATIVE, "Hello there, world."),
    (NATIVE, 'Let me check.\n<tool_call>\n{"name": "search", "arguments": {"query": "a"}}\n</tool_call>'),
    (NATIVE, "a < b and <tool is not a call"),
    (NATIVE, '<tool_call>{"name": "nope"}</tool_call> after'),
    (JSON, 'I will search.\n{"name": "search", "arguments": {"query": "x"}}'),
    (JSON, 'Sure.\n```json\n{"name": "read", "arguments": {"path": "a.py"}}\n```\nDone.'),
    (JSON, "Code: ```python\nprint({1: 2})\n```\nand a {set} and [list] `tick`."),
    (JSON, 'Broken {"name": "search", "arguments": {'),
    (JSON, "  \n Leading and trailing space.  \n"),
    (NONE, '{"name": "search"}'),
]


@pytest.mark.parametrize(("syntax", "text"), SAMPLES)
@pytest.mark.parametrize("size", [1, 3, 1000])
def test_filter_streams_exactly_the_final_text(syntax, text, size):
    shown, parsed = stream(text, syntax, size)
    expected = parse_tool_calls(text, TOOLS, syntax, ids())
    assert "".join(shown) == parsed.text == expected.text.strip()
    assert [(c.name, c.arguments) for c in parsed.calls] == [(c.name, c.arguments) for c in expected.calls]
    assert parsed.error == expected.error


def test_filter_never_shows_markup():
    shown, parsed = stream('Checking.\n<tool_call>{"name": "search", "arguments": {"query": "q"}}</tool_call>', NATIVE)
    assert "<" not in "".join(shown) and parsed.text == "Checking."
    shown, parsed = stream('{"name": "search", "arguments": {"query": "q"}}', JSON)
    assert "".join(shown) == "" and parsed.calls[0].arguments == {"query": "q"}


def test_filter_releases_plain_text_promptly():
    filt = VisibleTextFilter(TOOLS, JSON, ids())
    assert filt.feed("Hello") == "Hello"
    assert filt.feed(" {") == ""  # could open a call: held
    assert filt.feed("x") == " {x"  # cannot: released
    filt = VisibleTextFilter(TOOLS, NATIVE, ids())
    assert filt.feed("a <tool") == "a"
    assert filt.feed("s") == " <tools"


# -- no tools offered: markup is not parsed, but it stops the text and is reported ------------


def stream_unoffered(text: str, syntax, pieces: int = 1):
    """``stream`` for a request that offers no tools."""
    filt = VisibleTextFilter((), syntax, ids())
    shown = [filt.feed(text[i : i + pieces]) for i in range(0, len(text), pieces)]
    last, parsed = filt.finish()
    shown.append(last)
    return "".join(shown), parsed


UNOFFERED_CALLS = [
    (NATIVE, 'Billing runs two replicas [1]. \n<tool_call>\n{"name": "search", "arguments": {}}\n</tool_call>'),
    (NATIVE, 'Billing runs two replicas [1].<tool_call>{"name": "search"'),  # cut off inside the call
    (JSON, 'Billing runs two replicas [1]. {"name": "search", "arguments": {"query": "billing owner"}}'),
    (
        JSON,
        'Billing runs two replicas [1]. ```json\n{"name": "search", "arguments": {"query": "billing owner"}}\n```',
    ),
    (JSON, 'Billing runs two replicas [1].\n[ {"arguments": {"query": "billing owner"}, "name": "search"}]'),
    # A template without tool support may still have learnt the Hermes form.
    (JSON, 'Billing runs two replicas [1]. <tool_call>{"name": "search"}</tool_call>'),
]


@pytest.mark.parametrize(("syntax", "text"), UNOFFERED_CALLS)
@pytest.mark.parametrize("size", [1, 3, 1000])
def test_markup_written_with_no_tools_offered_stops_the_text_and_is_reported(syntax, text, size):
    shown, parsed = stream_unoffered(text, syntax, size)
    assert shown == parsed.text == "Billing runs two replicas [1]."  # the space before the markup too
    assert parsed.wrote_call and parsed.calls == () and parsed.error is None


@pytest.mark.parametrize(
    ("syntax", "text"),
    [
        (NATIVE, "a < b and <tool is not a call"),
        (NATIVE, "It ends in <tool_"),  # the reply ended: a marker's start is text
        (NATIVE, '{"name": "search", "arguments": {}}'),  # JSON is a call only in JSON in text
        (JSON, 'Set it like this: {"port": 8101} [1].'),
        (JSON, "Code: ```python\nprint({1: 2})\n```\nand a {set} and [list] `tick`."),
        (JSON, 'It ends in {"na'),
        (NONE, '<tool_call>{"name": "search"}</tool_call> {"name": "search"}'),  # no syntax looks for nothing
    ],
)
@pytest.mark.parametrize("size", [1, 3, 1000])
def test_text_that_is_not_markup_streams_whole_with_no_tools_offered(syntax, text, size):
    shown, parsed = stream_unoffered(text, syntax, size)
    assert shown == parsed.text == text
    assert not parsed.wrote_call


def test_with_no_tools_offered_text_is_held_only_while_it_may_become_markup():
    filt = VisibleTextFilter((), NATIVE, ids())
    assert filt.feed("Port 8101. <tool") == "Port 8101."  # the space may precede the marker
    assert filt.feed("s") == " <tools"
    assert filt.feed(" <tool_call>{") == ""
    assert filt.feed(' "name": "search"}') == ""  # everything after the marker is held
    assert filt.finish() == ("", ParsedOutput(text="Port 8101. <tools", wrote_call=True))
    filt = VisibleTextFilter((), JSON, ids())
    assert filt.feed("Port 8101. {") == "Port 8101."
    assert filt.feed('"port"') == ' {"port"'


def test_with_no_tools_offered_a_marker_split_across_pieces_is_held_back():
    filt = VisibleTextFilter((), NATIVE, ids())
    shown = [filt.feed(piece) for piece in ["It is 8101", ".", "\n<tool", "_call>", '{"name": "search"}']]
    last, parsed = filt.finish()
    assert "".join(shown) + last == parsed.text == "It is 8101." and parsed.wrote_call
    filt = VisibleTextFilter((), NATIVE, ids())
    shown = [filt.feed(piece) for piece in ["a <", "b", " <tool", "s"]]
    last, parsed = filt.finish()
    assert "".join(shown) + last == parsed.text == "a <b <tools" and not parsed.wrote_call


def test_tools_offered_parse_calls_and_report_no_markup_written():
    _, parsed = stream('Checking.\n<tool_call>{"name": "search", "arguments": {}}</tool_call>', NATIVE)
    assert parsed.calls and not parsed.wrote_call
