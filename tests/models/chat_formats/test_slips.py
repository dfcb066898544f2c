"""Each family's slips: its own markup written where it does not belong never reaches the user or
the store.

A reply is streamed as the local provider streams it (``local.py``): three characters at a
time through the template's reasoning splitter and answer filter (``ChatTemplate.
reasoning_splitter`` / ``reply_filter``), with the family's real template (or a reconstruction,
``families.py``). What the user sees is the pieces streamed; what is stored is the parsed answer
and the reasoning kept; what reaches the model is the calls run and the error it is told. The
whole answer is parsed at once too (``parse_syntax``), to the same calls.

The slips: each stray marker of the format (a closer, a channel marker) in the answer and in the
reasoning; each made-up tool result (``<tool_response>…``); a call without its wrapper (parsed
where llama.cpp's parser for the family takes it, Qwen3-Coder's bare ``<function=…>``, else cut
and told); a reasoning marker written again after the thoughts; and the slips the families were
seen to make, written out.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pytest

from imprintd.models.chat_formats.calls import ParsedOutput, parse_syntax
from imprintd.models.chat_formats.deepseek import DEEPSEEK_CALL_END
from imprintd.models.chat_formats.hermes import QWEN_CODER_SYNTAX, QWEN_XML_SYNTAX
from imprintd.models.chat_formats.reasoning import split_reasoning
from imprintd.models.chat_formats.table import BY_NAME
from imprintd.models.templates import ChatTemplate
from tests.models.chat_formats.families import FAMILIES, Family
from tests.models.chat_formats.test_conformance import SAMPLE_TOOLS
from tests.models.chat_formats.test_conformance import template as fresh_template

ANSWER = "It is 8080."
THOUGHT = "The port is in config."
PARIS = (("get_time", {"city": "Paris"}),)
UNWRAPPED = "written without its wrapper"


@dataclass(frozen=True)
class Slip:
    name: str
    #: The answer as the model writes it (after any reasoning).
    reply: str
    #: What the user sees and what is stored as the answer.
    answer: str = ANSWER
    calls: tuple[tuple[str, dict], ...] = ()
    #: A part of the error the model is told (None: told nothing).
    error: str | None = None


def template(family: Family, *, thinking: bool = False) -> ChatTemplate:
    """The family's template, read once (a template holds no state of a reply)."""
    return _read(family.name, thinking)


@functools.cache
def _read(name: str, thinking: bool) -> ChatTemplate:
    return fresh_template(next(f for f in FAMILIES if f.name == name), thinking=thinking)


def stream(chat: ChatTemplate, reply: str, piece: int = 3) -> tuple[str, str, ParsedOutput]:
    """(reasoning kept, text streamed to the user, parsed answer) of ``reply``, as local.py does it."""
    splitter, visible = chat.reasoning_splitter(), chat.reply_filter(SAMPLE_TOOLS)
    thoughts, shown = [], []
    for at in range(0, len(reply), piece):
        thought, text = splitter.feed(reply[at : at + piece])
        thoughts.append(thought)
        shown.append(visible.feed(text))
    thought, text = splitter.finish()
    thoughts.append(thought)
    shown.append(visible.feed(text))
    last, parsed = visible.finish()
    shown.append(last)
    return "".join(thoughts).rstrip(), "".join(shown), parsed


def format_slips(family: Family, chat: ChatTemplate) -> list[Slip]:
    """The slips every family of the format may make, from the format's own markup."""
    syntax = chat.call_format.syntax
    slips = [Slip(f"stray {marker}", f"It is {marker}8080.{marker}") for marker in syntax.stray]
    for slip in syntax.slips:
        if slip.call is None:
            slips.append(Slip(f"made-up result {slip.opening}", f"{slip.opening}port = 8080{slip.close}\n{ANSWER}"))
    return slips


#: The slips the families were seen to make, and the calls without a wrapper, per family.
WRITTEN: dict[str, list[Slip]] = {
    "qwen3.5": [
        Slip(
            "a call inside a made-up result",
            "Let me look.\n<tool_response>\n<function=get_time>\n<parameter=city>\nParis\n</parameter>\n"
            "</function>\n</tool_response>",
            "Let me look.",
            error=UNWRAPPED,
        ),
        Slip(
            "a call without <tool_call>",
            "Let me look.\n<function=get_time>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
            "Let me look.",
            error=UNWRAPPED,
        ),
    ],
    "qwen3-coder": [
        Slip(
            "a call inside a made-up result",
            "Let me look.\n<tool_response>\n<function=get_time>\n<parameter=city>\nParis\n</parameter>\n"
            "</function>\n</tool_response>",
            "Let me look.",
            calls=PARIS,
        ),
        Slip(
            "a call without <tool_call>",
            "Let me look.\n<function=get_time>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
            "Let me look.",
            calls=PARIS,
        ),
    ],
    "qwen3": [
        Slip(
            "a call inside a made-up result",
            '<tool_response>\n<tool_call>\n{"name": "get_time", "arguments": {"city": "Paris"}}\n</tool_call>\n'
            "</tool_response>",
            "",
            calls=PARIS,
        )
    ],
    "lfm2": [
        Slip(
            "the closer where the opener belongs",
            'Checking.<|tool_call_end|>[get_time(city="Paris")]<|tool_call_end|>',
            "Checking.",
            error=UNWRAPPED,
        ),
        Slip("a closer after the answer", "It is 8080.<|tool_call_end|>"),
    ],
    "gemma4": [
        Slip("quote markers around a value", 'It is <|"|>8080<|"|>.'),
        Slip("channel markers around the answer", "<|channel>It is 8080.<channel|>"),
    ],
    "phi4-mini": [
        Slip("functools", 'functools[{"name": "get_time", "arguments": {"city": "Paris"}}]', "", calls=PARIS),
        Slip(
            "<|tool_call|>",
            'Checking. <|tool_call|>{"name": "get_time", "arguments": {"city": "Paris"}}<|/tool_call|>',
            "Checking.",
            calls=PARIS,
        ),
        Slip("the tools block echoed", "<|tool|>It is 8080.<|/tool|>"),
    ],
}
for name in ("lfm2.5", "lfm2.5-instruct"):
    WRITTEN[name] = WRITTEN["lfm2"]


def reasoning_slips(chat: ChatTemplate) -> list[tuple[str, str, str]]:
    """(name, reply, reasoning kept) for a thinking family: the family's stray markers inside
    its thoughts, and its reasoning markers written again after them (the answer is ``ANSWER``)."""
    markers = chat.reasoning
    assert markers is not None
    opening = "" if chat.opens_reasoning else markers.open
    slips = [
        (
            f"{markers.close} again in the answer",
            f"{opening}{THOUGHT}{markers.close}It is{markers.close} 8080.",
            THOUGHT,
        ),
        (f"{markers.open} again in the answer", f"{opening}{THOUGHT}{markers.close}It is {markers.open}8080.", THOUGHT),
        (
            f"{markers.open} inside the thoughts",
            f"{opening}The port {markers.open}is in config.{markers.close}{ANSWER}",
            THOUGHT,
        ),
    ]
    for marker in chat.call_format.syntax.stray:
        if marker == markers.close:
            continue  # there it ends the thoughts
        slips.append(
            (
                f"stray {marker} in the thoughts",
                f"{opening}The port {marker}is in config.{markers.close}{ANSWER}",
                THOUGHT,
            )
        )
    return slips


def answer_cases():
    for family in FAMILIES:
        chat = template(family)
        for slip in [*format_slips(family, chat), *WRITTEN.get(family.name, [])]:
            yield pytest.param(family, slip, id=f"{family.name}: {slip.name}")


def reasoning_cases():
    for family in FAMILIES:
        if family.reasons_on:
            for name, reply, kept in reasoning_slips(template(family, thinking=True)):
                yield pytest.param(family, reply, kept, id=f"{family.name}: {name}")


@pytest.mark.parametrize(("family", "slip"), list(answer_cases()))
def test_the_familys_slip_never_reaches_the_user_or_the_store(family, slip):
    chat = template(family)
    # Where the prompt opened the thoughts (DeepSeek-R1's), the reply closes them first.
    thoughts = f"{THOUGHT}{chat.reasoning.close}" if chat.reasoning is not None and chat.opens_reasoning else ""
    reasoning, shown, parsed = stream(chat, thoughts + slip.reply)
    assert shown == parsed.text == slip.answer
    assert reasoning == (THOUGHT if thoughts else "")
    assert [(c.name, c.arguments) for c in parsed.calls] == list(slip.calls)
    if slip.error is None:
        assert parsed.error is None
    else:
        assert slip.error in (parsed.error or "")
    # The whole reply parsed at once: the same calls, the same text less the stripped whitespace.
    whole = parse_syntax(slip.reply, {t.name: t for t in SAMPLE_TOOLS}, chat.call_format.syntax)
    assert [(c.name, c.arguments) for c in whole.calls] == list(slip.calls)
    assert whole.text.strip() == slip.answer


@pytest.mark.parametrize(("family", "reply", "kept"), list(reasoning_cases()))
def test_stray_and_repeated_markers_stay_out_of_the_stored_reasoning_and_the_answer(family, reply, kept):
    chat = template(family, thinking=True)
    reasoning, shown, parsed = stream(chat, reply)
    assert reasoning == kept
    assert shown == parsed.text == ANSWER
    assert parsed.calls == () and parsed.error is None


def test_deepseek_r1_keeps_a_call_closer_out_of_its_reasoning():
    family = next(f for f in FAMILIES if f.name == "deepseek-r1-qwen")
    chat = template(family, thinking=True)
    reply = f"I will look it up{DEEPSEEK_CALL_END} in the config.\n</think>\n\n{ANSWER}"
    reasoning, shown, parsed = stream(chat, reply, piece=1)
    assert reasoning == "I will look it up in the config."
    assert shown == parsed.text == ANSWER
    stray = chat.call_format.syntax.stray
    assert split_reasoning(reply, chat.reasoning, opened=chat.opens_reasoning, stray=stray)[0] == reasoning


def test_qwen3_coder_takes_a_bare_function_and_qwen3_5_does_not():
    # As llama.cpp's parser (common/parsers/qwen3-coder.cpp): only a template without <think>.
    by_name = {f.name: f for f in FAMILIES}
    assert template(by_name["qwen3-coder"]).call_format.syntax is QWEN_CODER_SYNTAX
    assert template(by_name["qwen3.5"]).call_format.syntax is QWEN_XML_SYNTAX


def test_phi4_minis_own_template_is_detected_as_phi4_mini():
    family = next(f for f in FAMILIES if f.name == "phi4-mini")
    chat = template(family)
    assert chat.format is BY_NAME["phi4-mini"]
    # Its template renders no tool schemas: they are described in the system prompt, and a
    # JSON call is taken besides the family's own forms.
    assert not chat.native and chat.call_format.syntax.json_calls


def test_with_no_tools_offered_a_slip_still_stops_the_text():
    family = next(f for f in FAMILIES if f.name == "qwen3.5")
    chat = template(family)
    visible = chat.reply_filter(())
    reply = "It is 8080.\n<function=get_time>\n<parameter=city>\nParis\n</parameter>\n</function>"
    shown = "".join(visible.feed(reply[at : at + 3]) for at in range(0, len(reply), 3))
    last, parsed = visible.finish()
    assert shown + last == parsed.text == ANSWER
    assert parsed.wrote_call and parsed.calls == ()


def test_qwen3_5_opening_a_call_before_closing_its_thoughts_ends_them_there():
    # llama.cpp's parser for Qwen3.5 ends the reasoning at <tool_call> (common/parsers/qwen3-coder.cpp).
    family = next(f for f in FAMILIES if f.name == "qwen3.5")
    chat = template(family, thinking=True)
    assert chat.opens_reasoning
    reply = (
        f"{THOUGHT}\n<tool_call>\n<function=get_time>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
    )
    reasoning, shown, parsed = stream(chat, reply)
    assert reasoning == THOUGHT
    assert shown == parsed.text == ""
    assert [(c.name, c.arguments) for c in parsed.calls] == list(PARIS) and parsed.error is None


@pytest.mark.parametrize("tools", [SAMPLE_TOOLS, ()], ids=["tools offered", "no tools offered"])
def test_the_answer_after_a_made_up_result_streams_on_before_the_reply_ends(tools):
    family = next(f for f in FAMILIES if f.name == "qwen3")
    visible = template(family).reply_filter(tools)
    reply = "Let me see.\n<tool_response>\nconfig.toml:3: port = 8080\n</tool_response>\nIt is 8080 [1]."
    shown = "".join(visible.feed(reply[at : at + 3]) for at in range(0, len(reply), 3))
    assert shown == "Let me see.\n\nIt is 8080 [1]."  # streamed, not held to the end
    last, parsed = visible.finish()
    assert last == "" and parsed.text == shown
    assert parsed.calls == () and parsed.error is None and not parsed.wrote_call


def test_a_made_up_result_never_closed_is_cut_to_the_end():
    family = next(f for f in FAMILIES if f.name == "qwen3")
    reasoning, shown, parsed = stream(template(family), "It is 8080.\n<tool_response>\nport = 8080\n")
    assert shown == parsed.text == ANSWER and parsed.error is None
