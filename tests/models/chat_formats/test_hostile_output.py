"""What a model's output can cost, whatever it writes: call arguments nested thousands deep are a
malformed call (the model is told, the reply goes on), and the stream filters do work linear in
the reply, however much whitespace it holds.

Linearity is checked by counting the characters the filters scan, not by timing (the timings,
as ratios, are in ``bench/bench_hostile_text.py``).
"""

from __future__ import annotations

import pytest

from imprintd import wellformed
from imprintd.models.chat_formats import calls, reasoning
from imprintd.models.chat_formats.calls import VisibleTextFilter, parse_syntax
from imprintd.models.chat_formats.deepseek import (
    DEEPSEEK_CALL_BEGIN,
    DEEPSEEK_CALL_END,
    DEEPSEEK_CALLS_BEGIN,
    DEEPSEEK_CALLS_END,
    DEEPSEEK_SEP,
)
from imprintd.models.chat_formats.reasoning import THINK, ReasoningSplitter
from imprintd.models.chat_formats.table import BY_NAME
from imprintd.models.remote_reply import _ThinkSplitter
from tests.models.chat_formats.test_conformance import SAMPLE_TOOLS

TOOLS = {t.name: t for t in SAMPLE_TOOLS}


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


#: A ``special_function`` call whose ``arg1`` is ``value``, as each format writes it.
CALLS = {
    "hermes": lambda v: f'<tool_call>\n{{"name": "special_function", "arguments": {{"arg1": {v}}}}}\n</tool_call>',
    "qwen-xml": lambda v: (
        f"<tool_call>\n<function=special_function>\n<parameter=arg1>\n{v}\n</parameter>\n</function>\n</tool_call>"
    ),
    "llama3-json": lambda v: f'<|python_tag|>{{"name": "special_function", "parameters": {{"arg1": {v}}}}}',
    "mistral": lambda v: f'[TOOL_CALLS][{{"name": "special_function", "arguments": {{"arg1": {v}}}}}]',
    "mistral-args": lambda v: f'[TOOL_CALLS]special_function[ARGS]{{"arg1": {v}}}',
    "granite": lambda v: f'<|tool_call|>[{{"name": "special_function", "arguments": {{"arg1": {v}}}}}]',
    "phi4-mini": lambda v: f'functools[{{"name": "special_function", "arguments": {{"arg1": {v}}}}}]',
    "lfm2": lambda v: f"<|tool_call_start|>[special_function(arg1={v})]<|tool_call_end|>",
    "gemma4": lambda v: f"<|tool_call>call:special_function{{arg1:{v}}}<tool_call|>",
    "deepseek-r1": lambda v: (
        f"{DEEPSEEK_CALLS_BEGIN}{DEEPSEEK_CALL_BEGIN}function{DEEPSEEK_SEP}special_function\n"
        f'```json\n{{"arg1": {v}}}\n```{DEEPSEEK_CALL_END}{DEEPSEEK_CALLS_END}'
    ),
    "json-fallback": lambda v: f'{{"name": "special_function", "arguments": {{"arg1": {v}}}}}',
}


def test_every_format_is_covered():
    assert set(CALLS) == set(BY_NAME)


def stream(syntax: calls.CallSyntax, text: str, piece: int = 4096):
    visible = VisibleTextFilter(SAMPLE_TOOLS, syntax)
    shown = "".join(visible.feed(text[at : at + piece]) for at in range(0, len(text), piece))
    last, parsed = visible.finish()
    return shown + last, parsed


@pytest.mark.parametrize("depth", [100, 3_000, 200_000])
@pytest.mark.parametrize("name", sorted(CALLS))
def test_arguments_nested_too_deep_are_a_malformed_call(name, depth):
    syntax = BY_NAME[name].syntax
    text = "Checking. " + CALLS[name](nested(depth))
    for parsed in (parse_syntax(text, TOOLS, syntax), stream(syntax, text)[1]):
        assert parsed.calls == ()
        assert parsed.error is not None and "nested" in parsed.error, parsed.error
        assert parsed.text.strip() == "Checking."


@pytest.mark.parametrize("name", sorted(CALLS))
def test_arguments_nested_within_the_bound_are_a_call(name):
    # The arguments object is one level; its value may nest to the bound less one.
    depth = wellformed.MAX_NESTING - 1
    parsed = parse_syntax(CALLS[name](nested(depth)), TOOLS, BY_NAME[name].syntax)
    assert parsed.error is None, parsed.error
    assert [c.name for c in parsed.calls] == ["special_function"]


def test_one_level_past_the_bound_is_refused_and_named():
    parsed = parse_syntax(CALLS["hermes"](nested(wellformed.MAX_NESTING)), TOOLS, BY_NAME["hermes"].syntax)
    assert parsed.calls == ()
    assert f"nested more than {wellformed.MAX_NESTING} levels deep" in parsed.error
    assert "special_function" in parsed.error


def test_semicolon_chained_calls_do_not_recurse():
    # Llama 3.x chains calls with semicolons; thousands of them are read in a loop.
    one = '{"name": "special_function", "parameters": {"arg1": 1}}'
    parsed = parse_syntax("<|python_tag|>" + "; ".join([one] * 5_000), TOOLS, BY_NAME["llama3-json"].syntax)
    assert parsed.error is None and len(parsed.calls) == 5_000


# -- linear work ---------------------------------------------------------------------------------

RUN = 60_000  # the remote answer of 60,000 spaces that once took a minute


def counting(monkeypatch, module, name: str) -> list[int]:
    """Count the characters of the texts ``module.name`` is called with, in total."""
    count = [0]
    wrapped = getattr(module, name)

    def scan(text, *args, **kwargs):
        count[0] += len(text)
        return wrapped(text, *args, **kwargs)

    monkeypatch.setattr(module, name, scan)
    return count


@pytest.fixture
def scanned(monkeypatch):
    """Characters the answer filter looks at for markup, in total."""
    return counting(monkeypatch, calls, "_markup_start")


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("hermes", "a" + " " * RUN),
        ("hermes", "It is" + " \n" * (RUN // 2) + "8080."),
        ("json-fallback", "[" + " " * RUN),
        ("json-fallback", "```" + " " * RUN),
        ("json-fallback", "[ " * (RUN // 2)),
        ("mistral", "a" + " " * RUN),
        ("gemma4", "a" + " " * RUN + "<|"),
    ],
    ids=["spaces", "spaces and newlines", "[ then spaces", "a fence then spaces", "[ [ [", "mistral", "gemma4"],
)
def test_the_answer_filter_scans_each_character_a_bounded_number_of_times(scanned, name, text):
    visible = VisibleTextFilter(SAMPLE_TOOLS, BY_NAME[name].syntax)
    shown = "".join(visible.feed(character) for character in text)
    last, parsed = visible.finish()
    assert shown + last == parsed.text == text.strip()
    assert scanned[0] <= 4 * len(text)


def test_the_reasoning_splitter_scans_each_character_a_bounded_number_of_times(monkeypatch):
    scanned = counting(monkeypatch, reasoning, "partial_suffix")  # what it looks at for its closer
    splitter = ReasoningSplitter(THINK, opened=True)
    text = "Thinking" + " " * RUN + "more</think>It is 8080."
    pieces = [splitter.feed(character) for character in text]
    thought, answer = splitter.finish()
    assert "".join(p[0] for p in pieces) + thought == "Thinking" + " " * RUN + "more"
    assert "".join(p[1] for p in pieces) + answer == "It is 8080."
    assert scanned[0] <= 4 * len(text)


def test_the_remote_think_splitter_holds_no_run_of_leading_spaces():
    splitter = _ThinkSplitter()
    for _ in range(RUN):
        assert splitter.feed(" ") == ("", "")
        assert splitter.pending == ""
    assert splitter.feed("<think>x</think>It") == ("x", "It")
