"""The local provider's generation loop and template handling, on a scripted llama.

These need no weights: a fake llama yields scripted tokens whose bytes split UTF-8 sequences
and write tool calls, so decoding, stopping and call parsing are checked exactly.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from imprintd.messages import ToolSpec
from imprintd.models.local import (
    LocalModel,
    _Run,
    read_gguf_string,
    template_renders_tools,
    thinking_for,
)
from imprintd.models.templates import ChatTemplate
from tests.models.real_model import needs_real_model

SEARCH = ToolSpec(name="search", description="Search.", parameters={"type": "object", "properties": {}})
QUERY_SEARCH = ToolSpec(
    name="search", description="Search.", parameters={"type": "object", "properties": {"query": {"type": "string"}}}
)
END = -1


PROMPT = [1, 2, 3]
#: Token ids of what the fake writes under a grammar start here.
CONSTRAINED = 1000


@dataclass
class FakeLlama:
    """Yields token ids 0..n-1, each detokenizing to ``pieces[i]`` bytes; ``END`` ends the turn.

    Asked again with the first prompt and some of its ids, it goes on after them.
    Under a grammar it writes ``constrained`` instead (ids from ``CONSTRAINED``). ``requests``
    keeps the tokens and the grammar of each generation asked for.
    """

    pieces: list[bytes]
    constrained: list[bytes] = field(default_factory=list)
    requests: list[tuple[list[int], object]] = field(default_factory=list)

    def generate(self, tokens, **kwargs):
        grammar = kwargs.get("grammar")
        self.requests.append((list(tokens), grammar))
        if grammar is not None and self.constrained:
            yield from range(CONSTRAINED, CONSTRAINED + len(self.constrained))
        else:
            yield from range(len(tokens) - len(self.requests[0][0]), len(self.pieces))
        yield END

    def detokenize(self, tokens, prev_tokens=None, special=False) -> bytes:
        if tokens[0] >= CONSTRAINED:
            return self.constrained[tokens[0] - CONSTRAINED]
        return self.pieces[tokens[0]]


#: A template without tool support (calls are JSON in text) and one that writes Hermes calls.
PLAIN_TEMPLATE = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
NATIVE_TEMPLATE = (
    "{% if tools %}{% for t in tools %}{{ t | tojson }}{% endfor %}{% endif %}"
    "{% for m in messages %}{{ m.role }}: {{ m.content }}<tool_call>{% endfor %}"
)


#: Templates of a reasoning model: one whose generation prompt opens the thoughts, one written by
#: the model itself, one that closes them when thinking is off (Qwen3's switch).
THINKING_TEMPLATE = "{% for m in messages %}{{ m.content }}\n{% endfor %}<think>\n"
THINKS_ITSELF_TEMPLATE = "{% for m in messages %}{{ m.content }}\n{% endfor %}{# <think> #}"
SWITCHED_TEMPLATE = (
    "{% for m in messages %}{{ m.content }}\n{% endfor %}"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
)
#: A Mistral template: calls open with [TOOL_CALLS], a special token.
MISTRAL_TEMPLATE = (
    "{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}"
    "{% for m in messages %}[INST]{{ m.content }}[/INST]{% endfor %}{# [TOOL_CALLS] #}"
)
TEMPLATES = {"native": NATIVE_TEMPLATE, "json": PLAIN_TEMPLATE, "think": THINKING_TEMPLATE}


@dataclass
class FakeLoaded:
    llama: FakeLlama
    mode: str = "json"
    active: object = None
    generation_lock: threading.Lock = field(default_factory=threading.Lock)
    template: str = ""
    thinking: bool = True

    def __post_init__(self) -> None:
        source = self.template or TEMPLATES.get(self.mode, PLAIN_TEMPLATE)
        self.chat = ChatTemplate(source, model_name="fake.gguf", thinking=self.thinking)
        self.native_tools = self.chat.native

    def is_end(self, token: int) -> bool:
        return token == END

    def detokenize(self, token: int) -> bytes:
        return self.llama.detokenize([token], special=True)


def run(pieces: list[bytes], tools=(), mode="json", max_tokens=100, llama: FakeLlama | None = None, **options):
    model = LocalModel("/unused.gguf", **options)
    shown: list[str] = []
    llama = llama or FakeLlama(pieces)
    result = model._generate(
        FakeLoaded(llama, mode), _Run(deadline=float("inf")), list(PROMPT), tools, max_tokens, shown.append
    )
    return result, shown


def test_utf8_split_across_tokens_is_delivered_whole():
    text = "café 日本 🚀!".encode()
    # One byte per token: every multi-byte character arrives in pieces.
    result, shown = run([bytes([b]) for b in text])
    assert result.parsed.text == "café 日本 🚀!"
    assert "".join(shown) == "café 日本 🚀!"
    assert all("\ufffd" not in piece for piece in shown)
    assert result.finish == "stop" and result.generated == len(text)


def test_invalid_bytes_become_replacement_characters():
    result, _ = run([b"ok ", b"\xff", b" end"])
    assert result.parsed.text == "ok \ufffd end"


def test_max_tokens_stops_with_length():
    result, shown = run([b"a", b"b", b"c", b"d"], max_tokens=2)
    assert result.finish == "length" and result.generated == 2 and result.parsed.text == "ab"


def test_json_tool_call_is_parsed_and_hidden():
    call = b'{"name": "search", "arguments": {"query": "port"}}'
    result, shown = run([b"Let me check.\n"] + [call[i : i + 3] for i in range(0, len(call), 3)], tools=[SEARCH])
    assert "".join(shown) == result.parsed.text == "Let me check."
    assert [(c.name, c.arguments) for c in result.parsed.calls] == [("search", {"query": "port"})]


def test_hermes_tool_call_in_native_mode():
    result, shown = run(
        [b"<tool_", b'call>{"name": "search", "arguments": {}}', b"</tool_call>"], tools=[SEARCH], mode="native"
    )
    assert "".join(shown) == "" and result.parsed.calls[0].name == "search"


# -- reasoning and special-token markers (chat_formats/) ---------------------------------------


def generate(loaded: FakeLoaded, tools=()):
    shown: list[str] = []
    thought: list[str] = []
    result = LocalModel("/unused.gguf")._generate(
        loaded, _Run(deadline=float("inf")), list(PROMPT), tools, 100, shown.append, thought.append
    )
    return result, "".join(shown), "".join(thought)


def test_reasoning_the_prompt_opened_streams_apart_from_the_answer():
    llama = FakeLlama([b"The port ", b"is in config", b".\n</th", b"ink>\n\n", b"It is ", b"8080."])
    result, shown, thought = generate(FakeLoaded(llama, template=THINKING_TEMPLATE))
    assert thought == result.reasoning == "The port is in config."
    assert shown == result.parsed.text == "It is 8080."


def test_reasoning_the_model_opens_itself_streams_apart_and_a_later_marker_is_kept_from_the_answer():
    # Only the first block is thoughts; a marker written again after it is the family's markup,
    # which never reaches the user (docs/decisions.md, "Chat formats").
    llama = FakeLlama([b"<thi", b"nk>Let me see.</think>", b"It is </th", b"ink><think>8080."])
    result, shown, thought = generate(FakeLoaded(llama, template=THINKS_ITSELF_TEMPLATE))
    assert (thought, shown) == ("Let me see.", "It is 8080.")
    assert (result.reasoning, result.parsed.text) == ("Let me see.", "It is 8080.")


def family_template(name: str) -> str:
    from tests.models.chat_formats.families import FAMILIES

    return next(f for f in FAMILIES if f.name == name).source


def test_a_call_qwen3_5_writes_in_a_made_up_tool_result_is_neither_shown_nor_stored_nor_run():
    # The slip seen with Qwen3.5's real template: a <function=…> block in <tool_response> tags.
    llama = FakeLlama(
        [b"The port is in config.\n</think>\n\nLet me look.\n<tool_", b"response>\n<function=search>\n"]
        + [b"<parameter=query>\nport\n</parameter>\n</function>\n</tool_response>"]
    )
    loaded = FakeLoaded(llama, template=family_template("qwen3.5"), thinking=True)
    result, shown, thought = generate(loaded, tools=[SEARCH])
    assert (thought, shown) == ("The port is in config.", "Let me look.")
    assert (result.reasoning, result.parsed.text) == ("The port is in config.", "Let me look.")
    assert result.parsed.calls == () and "without its wrapper" in result.parsed.error


def test_stray_markers_of_deepseek_r1_stay_out_of_its_stored_reasoning_and_answer():
    llama = FakeLlama(
        [
            "I will look it up<｜tool▁call▁end｜> in config.\n</think>\n\n".encode(),
            "It is 8080.<｜tool▁calls▁end｜>".encode(),
        ]
    )
    loaded = FakeLoaded(llama, template=family_template("deepseek-r1-qwen"), thinking=True)
    result, shown, thought = generate(loaded, tools=[SEARCH])
    assert thought == result.reasoning == "I will look it up in config."
    assert shown == result.parsed.text == "It is 8080."


def test_with_thinking_switched_off_a_reply_is_all_answer():
    loaded = FakeLoaded(FakeLlama([b"It is 8080."]), template=SWITCHED_TEMPLATE, thinking=False)
    assert not loaded.chat.reasons
    result, shown, thought = generate(loaded)
    assert (thought, shown, result.reasoning) == ("", "It is 8080.", "")


class SpecialLlama(FakeLlama):
    """Its first token is a special token: it reads as text only when asked with ``special``."""

    def detokenize(self, tokens, prev_tokens=None, special=False) -> bytes:
        if tokens[0] == 0 and not special:
            return b""
        return super().detokenize(tokens, prev_tokens, special)


def test_a_call_opened_by_a_special_token_is_seen_and_never_shown():
    llama = SpecialLlama([b"[TOOL_CALLS]", b'search[ARGS]{"query"', b': "port"}'])
    loaded = FakeLoaded(llama, template=MISTRAL_TEMPLATE + "[ARGS]")
    assert loaded.chat.format.name == "mistral-args"
    result, shown, _ = generate(loaded, tools=[QUERY_SEARCH])
    assert shown == "" and [(c.name, c.arguments) for c in result.parsed.calls] == [("search", {"query": "port"})]


@pytest.mark.parametrize(
    ("setting", "n_ctx", "thinking"),
    [("auto", 8192, False), ("auto", 32768, True), ("on", 8192, True), ("off", 65536, False)],
)
def test_chat_reasoning_decides_the_templates_switch(setting, n_ctx, thinking):
    assert thinking_for(setting, n_ctx) is thinking


def test_malformed_call_is_an_error_not_a_call():
    result, _ = run([b'{"name": "search", "arguments": "oops"}'], tools=[SEARCH], tool_call_grammar=False)
    assert result.parsed.calls == () and "not valid JSON" in result.parsed.error


# -- a call the model opens is finished under the tools' grammar (chat_formats/grammar.py) ----

#: A model writing a call it gets wrong: a misspelt tool, "parameters", an argument search lacks.
WRONG_CALL = [b"Let me check.", b' {"na', b'me": "serch", "parameters": {"q": 1}}']


def test_the_token_that_opens_a_call_is_generated_again_under_the_grammar():
    # The fake writes under the grammar what a constrained model would: the opening's end, then a valid call.
    llama = FakeLlama(WRONG_CALL, constrained=[b'me":', b' "search", "arguments": {"query": "port"}}'])
    result, shown = run([], tools=[SEARCH], llama=llama)
    (first, _), (again, grammar) = llama.requests
    assert first == PROMPT
    # From the tokens before the one that completed the opening; the grammar starts with what it wrote of it.
    assert again == PROMPT + [0, 1]
    assert 'root ::= "me\\":" ws named-call' in grammar._grammar.splitlines()
    assert '"\\"search\\""' in grammar._grammar and "serch" not in grammar._grammar
    assert [(c.name, c.arguments) for c in result.parsed.calls] == [("search", {"query": "port"})]
    assert result.parsed.error is None
    assert "".join(shown) == result.parsed.text == "Let me check."
    assert result.generated == 2 + 1 + 2  # the dropped token was generated too


def test_without_the_grammar_the_same_call_is_an_error():
    result, _ = run(WRONG_CALL, tools=[SEARCH], tool_call_grammar=False)
    assert result.parsed.calls == () and "unknown tool 'serch'" in result.parsed.error


def test_a_native_call_is_finished_under_the_grammar_from_its_opening_tag():
    llama = FakeLlama(
        [b"<tool_", b'call>\n{"name": "find"}'],
        constrained=[b"call>", b'\n{"name": "search", "arguments": {"query": "port"}}\n</tool_call>'],
    )
    result, shown = run([], tools=[SEARCH], mode="native", llama=llama)
    assert llama.requests[1][0] == PROMPT + [0]
    assert 'root ::= "call>" call-block' in llama.requests[1][1]._grammar
    assert result.parsed.calls[0].name == "search" and shown == []


@pytest.mark.parametrize("case", ["no tools", "output grammar", "split character"])
def test_no_second_generation_when(case):
    tools, grammar = [SEARCH], None
    pieces = [b'{"name": "search", "arguments": {"query": "port"}}']
    if case == "no tools":
        tools = []
    elif case == "output grammar":  # the whole output has a grammar already (a summary's bullets)
        grammar = object()
    else:  # the opening's token also ends a character begun before it: the text cannot restart there
        pieces = [b"caf\xc3", b'\xa9 {"name": "search", "arguments": {"query": "port"}}']
    llama = FakeLlama(pieces)
    control = _Run(deadline=float("inf"), grammar=grammar)
    result = LocalModel("/unused.gguf")._generate(FakeLoaded(llama), control, list(PROMPT), tools, 100, print)
    assert len(llama.requests) == 1
    # What the model wrote is parsed as it stands: a call when tools were offered.
    assert [c.name for c in result.parsed.calls] == ([] if case == "no tools" else ["search"])
    if case == "split character":
        assert result.parsed.text == "café"


def test_cancel_before_the_next_token():
    model = LocalModel("/unused.gguf")
    control = _Run(deadline=float("inf"))
    shown: list[str] = []

    def emit(piece: str) -> None:
        shown.append(piece)
        control.stop.set()  # as the event loop does when the awaiting task is cancelled

    result = model._generate(FakeLoaded(FakeLlama([b"one ", b"two ", b"three"])), control, [1], (), 10, emit)
    assert result.finish == "cancelled" and result.generated == 1 and shown == ["one"]


def test_deadline_before_the_next_token():
    model = LocalModel("/unused.gguf")
    control = _Run(deadline=float("-inf"))
    result = model._generate(FakeLoaded(FakeLlama([b"one"])), control, [1], (), 10, lambda p: None)
    assert result.finish == "deadline" and result.generated == 0 and result.parsed.text == ""


# -- templates -----------------------------------------------------------------------------

QWEN_LIKE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }}{% endfor %}</tools>{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
)
CHATML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
STRICT = (
    "{% if tools %}{{ raise_exception('no tools here') }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}"
)


@needs_real_model
def test_template_renders_tools():
    assert template_renders_tools(QWEN_LIKE)
    assert not template_renders_tools(CHATML)
    assert not template_renders_tools(STRICT)


@needs_real_model
def test_read_gguf_string(embedded_gguf):
    template = read_gguf_string(embedded_gguf, "tokenizer.chat_template")
    assert template and "<|im_start|>" in template
    assert read_gguf_string(embedded_gguf, "no.such.key") is None


def test_read_gguf_string_refuses_other_files(tmp_path):
    path = tmp_path / "x.gguf"
    path.write_bytes(b"NOPE" + bytes(40))
    with pytest.raises(ValueError):
        read_gguf_string(path, "tokenizer.chat_template")


# -- a template with native tool support ---------------------------------------------------

#: A compact Hermes/Qwen-style template: tools in the system turn, calls as <tool_call> blocks,
#: tool results inside the user turn.
HERMES_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n<tools>{% for t in tools %}\n{{ t | tojson }}{% endfor %}\n</tools><|im_end|>\n"
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'user' or (m.role == 'system' and not loop.first) %}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% elif m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}"
    '{% for c in m.tool_calls or [] %}<tool_call>\n{"name": "{{ c.function.name }}", "arguments": '
    "{{ c.function.arguments | tojson }}}\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class TemplateOnly:
    """Stands in for a loaded model: the real sandboxed template renderer, a word tokenizer."""

    def __init__(self, template: str) -> None:
        self.chat = ChatTemplate(template, model_name="template-only.gguf")
        self.native_tools = template_renders_tools(template)

    def tokenize(self, text: str) -> list[int]:
        return list(range(len(text.split())))


@needs_real_model
def test_native_template_gets_schemas_calls_and_tool_messages():
    from imprintd.messages import ToolCall, assistant, system, tool_result, user

    model = LocalModel("/unused.gguf")
    model._loaded = TemplateOnly(HERMES_TEMPLATE)
    assert model.native_tools
    call = ToolCall(id="call_1", name="search", arguments={"query": "port"})
    messages = [
        system("Be brief."),
        user("Which port?"),
        assistant("", tool_calls=(call,)),
        tool_result(call, "port = 8080"),
    ]
    rendered = model.render_prompt(messages, [SEARCH])
    assert rendered.startswith(
        "<|im_start|>system\nBe brief.\n\n# Tools\n<tools>"  # trim_blocks ate the newline
        '{"type": "function", "function": {"name": "search"'
    )
    assert '<tool_call>\n{"name": "search", "arguments": {"query": "port"}}\n</tool_call>' in rendered
    assert "<tool_response>\nport = 8080\n</tool_response>" in rendered
    assert rendered.endswith("<|im_start|>assistant\n")
    # No tools block in the system prompt text itself: the template shows the schemas.
    assert "You can call these tools" not in rendered
    # Per-message counts: the text each message adds after a fixed lead-in.
    assert model.count_message(user("one two three")) == len(["<|im_start|>user", "one", "two", "three<|im_end|>"])


def test_a_damaged_header_is_a_value_error_and_leaves_the_chat_format_unknown(tmp_path):
    from tests.models.test_on_disk import TEMPLATE, nested_arrays, raw_gguf, string_value

    deep = raw_gguf(
        tmp_path / "deep.gguf",
        [("general.architecture", string_value("llama")), ("x", nested_arrays(200_000)), TEMPLATE],
    )
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(deep.read_bytes()[:30])
    for path in (deep, cut):
        with pytest.raises(ValueError):
            read_gguf_string(path, "tokenizer.chat_template")
    # What initialize and imprint/modelChanged ask: unknown, not an internal error.
    assert (LocalModel(deep).chat_format, LocalModel(deep).reasons) == ("json-fallback", False)
