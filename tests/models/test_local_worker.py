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
)
from tests.models.real_model import needs_real_model

SEARCH = ToolSpec(name="search", description="Search.", parameters={"type": "object", "properties": {}})
END = -1


@dataclass
class FakeLlama:
    """Yields token ids 0..n-1, each detokenizing to ``pieces[i]`` bytes; ``END`` ends the turn."""

    pieces: list[bytes]
    tokens_evaluated: int = 0

    def generate(self, tokens, **kwargs):
        yield from range(len(self.pieces))
        yield END

    def detokenize(self, tokens, prev_tokens=None, special=False) -> bytes:
        return self.pieces[tokens[0]]


@dataclass
class FakeLoaded:
    llama: FakeLlama
    native_tools: bool = False
    active: object = None
    generation_lock: threading.Lock = field(default_factory=threading.Lock)

    def is_end(self, token: int) -> bool:
        return token == END


def run(pieces: list[bytes], tools=(), mode="json", max_tokens=100):
    model = LocalModel("/unused.gguf")
    shown: list[str] = []
    result = model._generate(
        FakeLoaded(FakeLlama(pieces)), _Run(deadline=float("inf")), [1, 2, 3], tools, mode, max_tokens, shown.append
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


def test_malformed_call_is_an_error_not_a_call():
    result, _ = run([b'{"name": "search", "arguments": "oops"}'], tools=[SEARCH])
    assert result.parsed.calls == () and "not valid JSON" in result.parsed.error


def test_cancel_before_the_next_token():
    model = LocalModel("/unused.gguf")
    control = _Run(deadline=float("inf"))
    shown: list[str] = []

    def emit(piece: str) -> None:
        shown.append(piece)
        control.stop.set()  # as the event loop does when the awaiting task is cancelled

    result = model._generate(FakeLoaded(FakeLlama([b"one ", b"two ", b"three"])), control, [1], (), "none", 10, emit)
    assert result.finish == "cancelled" and result.generated == 1 and shown == ["one"]


def test_deadline_before_the_next_token():
    model = LocalModel("/unused.gguf")
    control = _Run(deadline=float("-inf"))
    result = model._generate(FakeLoaded(FakeLlama([b"one"])), control, [1], (), "none", 10, lambda p: None)
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
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.with_generation = Jinja2ChatFormatter(template=template, eos_token="", bos_token="")
        self.without_generation = Jinja2ChatFormatter(
            template=template, eos_token="", bos_token="", add_generation_prompt=False
        )
        self.native_tools = template_renders_tools(template)

    def render(self, messages, tools, generation: bool) -> str:
        formatter = self.with_generation if generation else self.without_generation
        return formatter(messages=messages, tools=tools).prompt

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
