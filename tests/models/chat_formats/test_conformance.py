"""The chat-format conformance suite: each vendored family template renders every prompt
the daemon makes, its model's own tool calls parse, its reasoning is kept apart, and the call
grammar writes its syntax.

The templates are the models' own (``templates/``, see its README for source and licences); the
rendering is ``models/templates.py``'s, the parsing ``models/chat_formats/``'s. The grammar
checks run llama.cpp's grammar sampler on the embedded model's vocabulary; the end-to-end
``imprintd ask`` per family is in ``test_ask.py``.
"""

from __future__ import annotations

import re

import pytest

from imprintd.messages import Message, ToolCall, ToolSpec
from imprintd.models.base import ModelError
from imprintd.models.chat_formats.calls import VisibleTextFilter, parse_syntax, tools_prompt
from imprintd.models.chat_formats.grammar import CallOpening, find_opening
from imprintd.models.chat_formats.reasoning import ReasoningSplitter, split_reasoning
from imprintd.models.chat_formats.table import BY_NAME
from imprintd.models.templates import EMPTY_REPLY, ChatTemplate
from tests.models.chat_formats.families import FAMILIES, Family
from tests.models.real_model import needs_real_model

SEARCH = ToolSpec(
    name="search",
    description="Search the workspace.",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)
#: The tools the families' native samples call (llama.cpp's test tools, and ours).
SAMPLE_TOOLS = (
    SEARCH,
    ToolSpec(
        name="get_time",
        description="The time in a city.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}},
    ),
    ToolSpec(
        name="special_function",
        description="A function.",
        parameters={"type": "object", "properties": {"arg1": {"type": "integer"}}},
    ),
)
CALL = ToolCall(id="call_0a1b2c3d4e5f", name="search", arguments={"query": "listen port"})
SYSTEM = Message(role="system", content="You answer questions about the user's workspace.")
QUESTION = Message(role="user", content="Which port does the server listen on?")
CALLING = Message(role="assistant", content="Let me search for it.", tool_calls=(CALL,))
RESULT = Message(role="tool", content="config.toml:3: port = 8080", tool_call_id=CALL.id, name="search")
ANSWER = Message(role="assistant", content="It listens on 8080 [1].", model_text="It listens on 8080 [1].")
FOLLOW_UP = Message(role="user", content="And which host?")

#: Every kind of prompt the daemon makes, as message lists (tools offered or not).
PROMPTS: dict[str, tuple[list[Message], tuple[ToolSpec, ...]]] = {
    "first research round": ([SYSTEM, QUESTION], (SEARCH,)),
    "research round after a call": ([SYSTEM, QUESTION, CALLING, RESULT], (SEARCH,)),
    "final answer from notes": ([SYSTEM, QUESTION, CALLING, RESULT, Message(role="user", content="Answer now.")], ()),
    "follow-up": ([SYSTEM, QUESTION, ANSWER, FOLLOW_UP], (SEARCH,)),
    "follow-up after an empty answer": ([SYSTEM, QUESTION, Message(role="assistant", content=""), FOLLOW_UP], ()),
    "fitting dropped the first question": ([SYSTEM, ANSWER, FOLLOW_UP], (SEARCH,)),
    "summary": ([SYSTEM, Message(role="user", content="Summarize this conversation: …")], ()),
    "section worker": ([Message(role="system", content="Take notes."), Message(role="user", content="Section 1")], ()),
    "two user turns in a row": ([SYSTEM, QUESTION, FOLLOW_UP], ()),
}
IDS = [family.name for family in FAMILIES]


def template(family: Family, *, thinking: bool = False) -> ChatTemplate:
    return ChatTemplate(family.source, model_name=family.template, bos_token="<s>", eos_token="</s>", thinking=thinking)


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_the_format_and_reasoning_are_detected_from_the_template(family):
    on, off = template(family, thinking=True), template(family, thinking=False)
    assert on.format.name == off.format.name == family.format
    assert (on.reasons, off.reasons) == (family.reasons_on, family.reasons_off)


@pytest.mark.parametrize("kind", list(PROMPTS))
@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_every_prompt_kind_renders(family, kind):
    messages, tools = PROMPTS[kind]
    chat = template(family)
    prompt = chat.render(messages, tools)
    for message in messages:
        if message.role == "system" and not message.content.startswith("Take"):
            continue  # templates may rewrite a system prompt (Granite, SmolLM3 keep it; all show it)
        if message.prompt_content:
            assert message.prompt_content in prompt, (kind, message.role)
    if tools:
        # The schemas reach the model: through the template, or described in the system prompt.
        assert SEARCH.description in prompt
        assert (tools_prompt(tools) in prompt) != chat.native
    if CALLING in messages:
        # The earlier call, its arguments and the text beside it are all in the prompt.
        assert "search" in prompt and "listen port" in prompt and CALLING.content in prompt


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_every_message_is_counted_by_a_render_the_template_accepts(family):
    chat = template(family)
    for message in (SYSTEM, QUESTION, CALLING, RESULT, ANSWER, FOLLOW_UP, Message(role="assistant", content="")):
        base, full = chat.count_renders(message)
        assert len(full) > len(base), message.role


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_no_empty_assistant_message_reaches_the_template(family):
    chat = template(family)
    handed = chat.template_messages([SYSTEM, QUESTION, Message(role="assistant", content=""), FOLLOW_UP])
    assert [m["content"] for m in handed if m["role"] == "assistant"] == [EMPTY_REPLY]


@pytest.mark.parametrize("family", [f for f in FAMILIES if f.format.startswith("mistral")], ids=lambda f: f.name)
def test_mistral_templates_get_call_ids_of_nine_alphanumerics(family):
    prompt = template(family).render([SYSTEM, QUESTION, CALLING, RESULT], (SEARCH,))
    ids = set(re.findall(r'"id": "([^"]*)"|\[CALL_ID\]([^\[]*)|"call_id": "([^"]*)"', prompt))
    written = {part for found in ids for part in found if part}
    assert CALL.id not in prompt
    assert all(len(i) == 9 and i.isalnum() for i in written)


def test_tools_are_absent_not_none_when_there_are_none():
    # llama.cpp's Phi-4-mini template loops over ``tools`` whenever it is defined.
    chat = ChatTemplate(
        "{% if tools is defined %}{% for t in tools %}{{ t.function.name }}{% endfor %}{% endif %}"
        "{% for m in messages %}{{ m.content }}{% endfor %}",
        model_name="phi.gguf",
    )
    assert chat.render([QUESTION]) == QUESTION.content
    assert chat.render([QUESTION], (SEARCH,)).startswith("search")


def test_a_template_that_cannot_render_names_the_model_its_message_and_the_setting():
    chat = ChatTemplate(
        "{% for m in messages %}{% if 'port' in m.content %}{{ raise_exception('No ports here') }}{% endif %}"
        "{{ m.content }}{% endfor %}",
        model_name="strict-7b.gguf",
    )
    with pytest.raises(ModelError) as raised:
        chat.render([SYSTEM, QUESTION])
    message = str(raised.value)
    assert "strict-7b.gguf" in message and "No ports here" in message and "chat.model" in message


# -- the families' own tool calls --------------------------------------------------------------

NATIVE = [f for f in FAMILIES if f.sample]


@pytest.mark.parametrize("family", NATIVE, ids=lambda f: f.name)
def test_the_familys_own_call_parses(family):
    syntax = template(family).call_format.syntax
    for text, visible in ((family.sample, ""), (f"Let me check. {family.sample}", "Let me check. ")):
        parsed = parse_syntax(text, {t.name: t for t in SAMPLE_TOOLS}, syntax)
        assert parsed.error is None, parsed.error
        assert [(c.name, c.arguments) for c in parsed.calls] == [family.call]
        assert parsed.text == visible


@pytest.mark.parametrize("family", NATIVE, ids=lambda f: f.name)
def test_call_markup_never_streams_as_text(family):
    syntax = template(family).call_format.syntax
    text = f"Checking the time. {family.sample}"
    shown: list[str] = []
    visible = VisibleTextFilter(SAMPLE_TOOLS, syntax)
    for character in text:
        shown.append(visible.feed(character))
    last, parsed = visible.finish()
    assert "".join(shown) + last == "Checking the time." == parsed.text
    assert [(c.name, c.arguments) for c in parsed.calls] == [family.call]


@pytest.mark.parametrize("family", NATIVE, ids=lambda f: f.name)
def test_an_earlier_call_is_written_back_as_the_family_writes_it(family):
    chat_format = BY_NAME[family.format]
    call = ToolCall(id="call_1", name=family.call[0], arguments=family.call[1])
    parsed = parse_syntax(chat_format.write_calls((call,)), {t.name: t for t in SAMPLE_TOOLS}, chat_format.syntax)
    assert [(c.name, c.arguments) for c in parsed.calls] == [family.call] and parsed.text.strip() == ""


# -- reasoning -----------------------------------------------------------------------------------

THINKERS = [f for f in FAMILIES if f.thinking]


@pytest.mark.parametrize("family", THINKERS, ids=lambda f: f.name)
def test_reasoning_is_kept_apart_as_it_streams(family):
    chat = template(family, thinking=True)
    splitter = ReasoningSplitter(chat.reasoning, opened=chat.opens_reasoning)
    thoughts, answer = [], []
    for character in family.thinking:
        thought, text = splitter.feed(character)
        thoughts.append(thought)
        answer.append(text)
    thought, text = splitter.finish()
    assert ("".join(thoughts) + thought).strip() == "The port is in config."
    assert ("".join(answer) + text).strip() == "It is 8080."


@pytest.mark.parametrize("family", [f for f in THINKERS if f.reasons_off is False], ids=lambda f: f.name)
def test_reasoning_switched_off_is_not_looked_for(family):
    chat = template(family, thinking=False)
    assert not chat.reasons
    assert split_reasoning("It is 8080.", chat.reasoning, opened=chat.opens_reasoning) == ("", "It is 8080.")


# -- the call grammar writes each family's syntax -----------------------------------------------

GRAMMAR_FAMILIES = [f for f in FAMILIES if f.format != "json-fallback"]


def family_grammar(family: Family) -> tuple[str, str]:
    """The grammar of a call the family's model opened with its own opening, and that opening."""
    chat_format = BY_NAME[family.format]
    opening_text = chat_format.grammar_opening or '{"name":'
    opening, _ = find_opening(opening_text, template(family).call_format.syntax)
    assert isinstance(opening, CallOpening), family.name
    return chat_format.call_grammar((SEARCH,), opening, opening_text), opening_text


@needs_real_model
@pytest.mark.parametrize("family", GRAMMAR_FAMILIES, ids=lambda f: f.name)
def test_the_call_grammar_writes_the_familys_syntax(local_model, family):
    from tests.models.test_real_call_grammar import Sampler

    grammar, opening = family_grammar(family)
    chat_format = BY_NAME[family.format]
    own = chat_format.write_calls((CALL,))
    sampler = Sampler(local_model, grammar)
    assert sampler.pointer, "llama.cpp did not parse the grammar"
    assert sampler.accepts(own if own.startswith(opening) else opening + own.split(opening, 1)[-1]), own
    sampler.close()
    if family.format != "hermes":  # another family's syntax is refused
        sampler = Sampler(local_model, grammar)
        assert not sampler.accepts(opening + '{"name": "search", "arguments": {"query": "listen port"}}</tool_call>')
        sampler.close()
