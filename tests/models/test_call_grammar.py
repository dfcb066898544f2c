"""The grammar a local model's tool call is finished under: where calls open, and the GBNF.

Whether llama.cpp takes these grammars, and what they let a model write, is checked on the real
model in ``test_real_call_grammar.py``; here the pieces are checked without one.
"""

from __future__ import annotations

import re

import pytest

from imprintd.messages import ToolSpec
from imprintd.models.chat_formats.format import CallWatch
from imprintd.models.chat_formats.grammar import find_opening, integer_range, literal
from imprintd.models.chat_formats.hermes import HERMES
from imprintd.models.chat_formats.json_fallback import JSON_FALLBACK

#: The syntaxes: a native template's (Hermes), JSON in text, and none (nothing is a call).
NATIVE, JSON, NONE = HERMES.syntax, JSON_FALLBACK.syntax, None

SEARCH = ToolSpec(
    name="search",
    description="Search.",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)
READ = ToolSpec(
    name="read_file",
    description="Read.",
    parameters={
        "type": "object",
        "properties": {"path": {"type": "string"}, "start_line": {"type": "integer", "minimum": 1}},
        "required": ["path"],
    },
)
TOOLS = [SEARCH, READ]


def as_regex(expression: str) -> str:
    """An ``integer_range`` expression as a Python regex: its literals are digits, its classes digit ranges."""
    return expression.replace('"', "").replace(" ", "")


@pytest.mark.parametrize(
    ("low", "high"),
    [(0, 0), (0, 9), (1, 9), (0, 10), (1, 4000), (7, 123), (10, 99), (100, 100), (95, 1005), (0, 99999), (1, 10**6)],
)
def test_integer_range_matches_exactly_the_numbers_in_range(low, high):
    pattern = re.compile(as_regex(integer_range(low, high)))
    for number in range(0, min(high, 20_000) + 200):
        assert bool(pattern.fullmatch(str(number))) == (low <= number <= high), number
    assert not pattern.fullmatch("0" + str(max(low, 1)))  # no leading zeros
    assert not pattern.fullmatch(f"-{max(low, 1)}")


def test_integer_range_without_an_upper_bound_is_one_short_rule():
    assert integer_range(1, 10**15 - 1) == "[1-9] [0-9]{0,14}"
    assert integer_range(0, 10**15 - 1) == "[0-9] | [1-9] [0-9]{1,14}"
    with pytest.raises(ValueError):
        integer_range(5, 4)


def test_literal_escapes_what_gbnf_would_read_otherwise():
    assert literal('say "hi"\\\n\t\x01') == '"say \\"hi\\"\\\\\\n\\t\\x01"'


@pytest.mark.parametrize(
    ("text", "syntax", "span", "key", "fenced", "listed"),
    [
        ('Let me look. {"name": "search"', JSON, (13, 21), "name", False, False),
        ('{ "arguments" :', JSON, (0, 15), "arguments", False, False),
        ('[{"parameters":', JSON, (0, 15), "parameters", False, True),
        ('```json\n{"name":', JSON, (0, 16), "name", True, False),
        ('Here: <tool_call>\n{"name"', NATIVE, (6, 17), None, None, None),
    ],
)
def test_find_opening_finds_where_the_parser_starts_a_call(text, syntax, span, key, fenced, listed):
    opening, _ = find_opening(text, syntax)
    assert opening is not None and (opening.start, opening.end) == span
    if key is None:
        assert opening.shape is None
    else:
        assert (opening.shape.key, opening.shape.fenced, opening.shape.listed) == (key, fenced, listed)


@pytest.mark.parametrize(
    ("text", "syntax"),
    [
        ('{"port": 8101}', JSON),
        ("```python\nprint({'name': 1})\n```", JSON),
        ('{"name": "x"}', NATIVE),  # a native template's calls are <tool_call> blocks only
        ('<tool_call>{"name":', NONE),
    ],
)
def test_text_that_opens_no_call(text, syntax):
    assert find_opening(text, syntax)[0] is None


def test_the_watch_sees_an_opening_split_across_pieces_and_starts_the_grammar_with_its_last_piece():
    watch = CallWatch(TOOLS, JSON_FALLBACK)
    assert watch.feed("Checking. {") is None
    assert watch.feed('"na') is None
    grammar = watch.feed('me": "serch", "x"')
    assert grammar is not None and watch.done
    assert 'root ::= "me\\":" ws named-call' in grammar.splitlines()
    assert watch.feed('{"name":') is None  # one call a round: the watch is done


def test_the_watch_looks_only_at_text_that_may_still_open_a_call():
    watch = CallWatch(TOOLS, JSON_FALLBACK)
    pieces = ['{"port": 1} ', "and `code` ", "[1, 2] "] * 50
    for piece in pieces:
        assert watch.feed(piece) is None
    # Nothing before the end can open a call now: the next look starts there.
    assert find_opening("".join(pieces), JSON) == (None, len("".join(pieces)))
    assert watch.feed('{"name":') is not None


def test_no_tools_no_watch():
    watch = CallWatch([], JSON_FALLBACK)
    assert watch.done and watch.feed('{"name":') is None


def rules(grammar: str) -> dict[str, str]:
    return dict(line.split(" ::= ", 1) for line in grammar.splitlines())


def test_the_name_is_one_of_the_offered_tools_and_the_arguments_follow_its_schema():
    opening, _ = find_opening('{"name":', JSON)
    grammar = rules(JSON_FALLBACK.call_grammar(TOOLS, opening, '{"name":'))
    assert grammar["root"] == '"{\\"name\\":" ws named-call'
    assert grammar["named-call"] == (
        '"\\"search\\"" ws "," ws "\\"arguments\\"" ws ":" ws args-search ws "}" | '
        '"\\"read_file\\"" ws "," ws "\\"arguments\\"" ws ":" ws args-read-file ws "}"'
    )
    # start_line keeps its minimum of 1; strings cannot hold raw control characters.
    assert grammar["args-read-file-start-line"] == "([1-9] [0-9]{0,14}) space"
    assert "\\x00-\\x1F" in grammar["char"]


def test_arguments_written_first_are_followed_by_the_name_of_the_tool_they_fit():
    opening, _ = find_opening('{"arguments":', JSON)
    grammar = rules(JSON_FALLBACK.call_grammar(TOOLS, opening, '{"arguments":'))
    assert grammar["root"] == '"{\\"arguments\\":" ws arguments-first'
    assert 'args-search ws "," ws "\\"name\\"" ws ":" ws "\\"search\\"" ws "}"' in grammar["arguments-first"]


def test_a_fenced_list_of_calls_closes_the_list_then_the_fence():
    opening, _ = find_opening('```json\n[{"name":', JSON)
    grammar = rules(JSON_FALLBACK.call_grammar(TOOLS, opening, '[{"name":'))
    assert grammar["root"] == '"[{\\"name\\":" ws named-call (ws next-call)* ws "]" ws "```"'
    assert grammar["next-call"] == '"," ws "{" ws "\\"name\\"" ws ":" ws named-call'


def test_a_native_call_block_ends_with_its_closing_tag_and_may_be_followed_by_more():
    opening, _ = find_opening("<tool_call>", NATIVE)
    grammar = rules(HERMES.call_grammar(TOOLS, opening, "call>"))
    assert grammar["root"] == '"call>" call-block ("\\n"? "<tool_call>" call-block)*'
    assert grammar["call-block"] == 'ws "{" ws "\\"name\\"" ws ":" ws named-call ws "</tool_call>"'
