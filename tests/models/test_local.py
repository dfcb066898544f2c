"""The local provider on the embedded SmolLM2 GGUF through llama-cpp-python.

Counts are checked against llama.cpp's own tokenization and llama-cpp-python's own chat
handler; prefix reuse, cancellation, serialization and deadlines are checked on real
generation (greedy, n_ctx 2048). Time is never waited on for synchronization: the deadline
test moves the provider's clock from inside ``on_text``.
"""

from __future__ import annotations

import threading

import anyio
import pytest

from imprintd.messages import (
    Message,
    ToolCall,
    ToolSpec,
    assistant,
    system,
    tool_result,
    user,
)
from imprintd.models import local
from imprintd.models.base import Model, ModelError, ModelUnavailable, inference_lock
from imprintd.models.chat_formats.calls import tools_prompt
from imprintd.models.local import LocalModel
from imprintd.models.templates import ChatTemplate
from tests.lock import lock_held_elsewhere
from tests.models.real_model import needs_real_model

SEARCH = ToolSpec(
    name="search",
    description="Search the workspace for text.",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)
CALL = ToolCall(id="call_1", name="search", arguments={"query": "port number"})
#: Tokens of SmolLM2's generation prompt "<|im_start|>assistant\n".
GENERATION_PROMPT = 4

CONVERSATION = [
    system("You are a terse assistant. Answer in one short sentence."),
    user("Which port does the dev server use? Ünïcödé, 日本語 and emoji 🚀 count too."),
    assistant("", tool_calls=(CALL,)),
    tool_result(CALL, "config/dev.toml:3: port = 8080\nREADME.md:12: the dev server listens on 8080"),
    assistant("It uses port 8080."),
    user("And in production?"),
]


# -- file checks and laziness (no llama.cpp needed) ----------------------------------------


def test_constructing_loads_nothing(tmp_path):
    model = LocalModel(tmp_path / "absent.gguf", n_ctx=1024)
    assert model._loaded is None
    assert model.model_id == f"local:{tmp_path / 'absent.gguf'}#n_ctx=1024"
    assert isinstance(model, Model)


def test_missing_gguf_is_reported_by_name_at_first_use(tmp_path):
    path = tmp_path / "absent.gguf"
    model = LocalModel(path)
    with pytest.raises(ModelUnavailable, match=f"the chat model file {path} does not exist"):
        model.count_prompt([user("hi")])


def test_non_gguf_is_reported_by_name(tmp_path):
    path = tmp_path / "weights.gguf"
    path.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(ModelUnavailable, match=f"the chat model file {path} is not a GGUF file"):
        LocalModel(path).count_text("x")


def test_directory_is_reported(tmp_path):
    with pytest.raises(ModelUnavailable, match="is not a file"):
        LocalModel(tmp_path).load()


async def test_missing_gguf_fails_complete_too(tmp_path):
    with pytest.raises(ModelUnavailable, match="does not exist"):
        await LocalModel(tmp_path / "nope.gguf").complete([user("hi")], max_tokens=4, timeout=30)


# -- markup written with no tools offered (a scripted llama, no weights) ---------------------


class ScriptedLlama:
    """Stands in for llama-cpp-python's ``Llama``: token i detokenizes to ``pieces[i]``, then the turn ends."""

    END = -1

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = [piece.encode() for piece in pieces]

    def generate(self, tokens, **kwargs):
        yield from range(len(self.pieces))
        yield self.END

    def detokenize(self, tokens, prev_tokens=None, special=False) -> bytes:
        return self.pieces[tokens[0]]


class ScriptedLoaded:
    """What ``LocalModel.load`` returns, holding a ScriptedLlama."""

    def __init__(self, pieces: list[str], native_tools: bool) -> None:
        self.llama = ScriptedLlama(pieces)
        self.chat = ChatTemplate(HERMES_TEMPLATE if native_tools else PLAIN_TEMPLATE, model_name="scripted.gguf")
        self.native_tools = self.chat.native
        self.active = None
        self.generation_lock = threading.Lock()

    def is_end(self, token: int) -> bool:
        return token == ScriptedLlama.END

    def detokenize(self, token: int) -> bytes:
        return self.llama.detokenize([token], special=True)


#: A template that renders tool schemas (its model writes Hermes calls) and one that does not.
HERMES_TEMPLATE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}{% endfor %}</tools> <tool_call>{% endif %}"
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
)
PLAIN_TEMPLATE = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"


def scripted_local(pieces: list[str], *, native_tools: bool) -> LocalModel:
    model = LocalModel("/unused.gguf", n_ctx=1024)
    loaded = ScriptedLoaded(pieces, native_tools)
    model.load = lambda: loaded
    model.prompt_tokens = lambda messages, tools=(): [1, 2, 3]
    return model


@pytest.mark.parametrize(
    ("native_tools", "markup"),
    [
        (True, '<tool_call>\n{"name": "search", "arguments": {"query": "owner"}}\n</tool_call>'),
        (False, '```json\n{"name": "search", "arguments": {"query": "owner"}}\n```'),
    ],
)
async def test_markup_written_with_no_tools_offered_stops_the_text_and_is_reported(native_tools, markup):
    pieces = ["Billing runs", " two replicas [1].", " \n"] + [markup[i : i + 4] for i in range(0, len(markup), 4)]
    model = scripted_local(pieces, native_tools=native_tools)
    shown: list[str] = []
    result = await model.complete([user("Who owns billing?")], max_tokens=200, timeout=60, on_text=shown.append)
    assert "".join(shown) == result.text == "Billing runs two replicas [1]."
    assert result.wrote_tool_call and result.tool_calls == () and result.finish_reason == "stop"


async def test_a_local_reply_without_markup_reports_none_written():
    model = scripted_local(["Set it like this:", ' {"port": 8101}.'], native_tools=False)
    result = await model.complete([user("How?")], max_tokens=200, timeout=60)
    assert result.text == 'Set it like this: {"port": 8101}.' and not result.wrote_tool_call


# -- counts -------------------------------------------------------------------------------


@needs_real_model
async def test_a_prompt_measured_before_it_is_sent_is_tokenized_once(local_model, monkeypatch):
    llama = local_model.load().llama
    prompt = [*CONVERSATION, user("Which port, once more? (measured then sent)")]
    rendered = local_model.render_prompt(prompt, [SEARCH]).encode()
    tokenized: list[bytes] = []
    real = llama.tokenize

    def counted(text: bytes, *args, **kwargs):
        tokenized.append(text)
        return real(text, *args, **kwargs)

    monkeypatch.setattr(llama, "tokenize", counted)
    counted_tokens = local_model.count_prompt(prompt, [SEARCH])  # fitting
    assert local_model.reusable_prefix(prompt, [SEARCH])[0] == counted_tokens  # the budget
    completion = await local_model.complete(prompt, [SEARCH], max_tokens=2)
    assert tokenized.count(rendered) == 1
    assert completion.usage.prompt_tokens == counted_tokens == len(real(rendered, add_bos=False, special=True))


@needs_real_model
def test_count_prompt_is_llama_cpp_tokenization_of_the_rendered_prompt(local_model):
    rendered = local_model.render_prompt(CONVERSATION, [SEARCH])
    tokens = local_model.load().llama.tokenize(rendered.encode(), add_bos=False, special=True)
    assert local_model.count_prompt(CONVERSATION, [SEARCH]) == len(tokens)
    assert rendered.endswith("<|im_start|>assistant\n")
    # SmolLM2's template has no tool support: the tools are described in the system message.
    assert not local_model.native_tools
    assert rendered.startswith(
        "<|im_start|>system\nYou are a terse assistant. Answer in one short sentence.\n\n"
        + tools_prompt([SEARCH])
        + "<|im_end|>\n"
    )


@needs_real_model
def test_count_prompt_matches_llama_cpp_pythons_own_chat_handler(local_model):
    # An independent rendering: llama-cpp-python's chat completion formats the same messages
    # with the GGUF's template and reports the prompt tokens it evaluated.
    messages = [system("Be brief."), user("Name a colour."), assistant("Blue."), user("Another?")]
    other = LocalModel(local_model.model_path, n_ctx=512)  # its own llama.cpp context
    llama = other.load().llama
    try:
        reply = llama.create_chat_completion(
            messages=[{"role": m.role, "content": m.content} for m in messages], max_tokens=1, temperature=0
        )
    finally:
        llama.close()
    assert local_model.count_prompt(messages) == reply["usage"]["prompt_tokens"]


@needs_real_model
def test_count_message_sums_to_count_prompt(local_model):
    # SmolLM2's template is ChatML: every message renders as <|im_start|>role\n…<|im_end|>\n and
    # llama.cpp splits text at special tokens before BPE, so no token spans two messages. The
    # per-message counts therefore add up exactly; the prompt adds only the generation prompt.
    per_message = [local_model.count_message(m) for m in CONVERSATION]
    assert local_model.count_prompt(CONVERSATION) == sum(per_message) + GENERATION_PROMPT
    # The template inserts its own default system prompt when none is given; that text belongs
    # to no message, so it is the difference then.
    without_system = CONVERSATION[1:]
    default_system = local_model.count_prompt(without_system) - sum(per_message[1:]) - GENERATION_PROMPT
    assert default_system == local_model.count_message(
        system("You are a helpful AI assistant named SmolLM, trained by Hugging Face")
    )


@needs_real_model
def test_count_message_is_cached_and_ignores_seq(local_model, monkeypatch):
    rendered: list[str] = []
    tokens = local_model._message_tokens
    monkeypatch.setattr(local_model, "_message_tokens", lambda m: rendered.append(m.content) or tokens(m))
    message = user("cache me " * 20)
    first = local_model.count_message(message)
    assert local_model.count_message(Message(role="user", content=message.content, seq=42)) == first
    assert rendered == [message.content]  # rendered and tokenized once
    assert local_model.count_message(user("cache me too")) != first and len(rendered) == 2


@needs_real_model
def test_count_text(local_model):
    assert local_model.count_text("") == 0
    assert local_model.count_text("hello world") == len(
        local_model.load().llama.tokenize(b"hello world", add_bos=False, special=False)
    )


@needs_real_model
def test_tool_exchanges_render_as_text_for_a_template_without_tools(local_model):
    rendered = local_model.render_prompt(CONVERSATION)
    assert '<|im_start|>assistant\n{"name": "search", "arguments": {"query": "port number"}}<|im_end|>' in rendered
    assert "<|im_start|>user\nResult of the search call:\nconfig/dev.toml:3" in rendered


@needs_real_model
def test_tools_add_a_system_message_when_there_is_none(local_model):
    rendered = local_model.render_prompt([user("hi")], [SEARCH])
    assert rendered.startswith("<|im_start|>system\n" + tools_prompt([SEARCH]) + "<|im_end|>\n<|im_start|>user\nhi")


@needs_real_model
def test_rendering_is_deterministic(local_model):
    assert local_model.render_prompt(CONVERSATION, [SEARCH]) == local_model.render_prompt(CONVERSATION, [SEARCH])


# -- generation ---------------------------------------------------------------------------


@needs_real_model
async def test_completion_streams_and_stops_at_end_of_turn(local_model):
    pieces: list[str] = []
    threads: set[int] = set()

    def on_text(piece: str) -> None:
        pieces.append(piece)
        threads.add(threading.get_ident())

    result = await local_model.complete(
        [system("Answer with one word."), user("Is the sky blue? yes or no")],
        max_tokens=200,
        timeout=300,
        on_text=on_text,
    )
    assert threads == {threading.get_ident()}  # delivered on the event loop's thread, not the worker's
    assert result.finish_reason == "stop"
    assert result.text and "".join(pieces) == result.text
    assert "<|im_end|>" not in result.text
    assert result.usage.prompt_tokens == local_model.count_prompt(
        [system("Answer with one word."), user("Is the sky blue? yes or no")]
    )
    assert 0 < result.usage.generated_tokens < 200


@needs_real_model
async def test_max_tokens_gives_length(local_model):
    result = await local_model.complete([user("Write a long story about a dragon.")], max_tokens=5, timeout=300)
    assert result.finish_reason == "length"
    assert result.usage.generated_tokens == 5


@needs_real_model
async def test_prompt_too_long_for_the_context(local_model):
    with pytest.raises(ModelError, match="exceeds the 2048-token context"):
        await local_model.complete([user("word " * 2100)], max_tokens=16, timeout=300)


def common_prefix(a, b) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@needs_real_model
async def test_appending_a_message_evaluates_only_the_new_tokens(local_model):
    llama = local_model.load().llama
    instructions = "You research before answering. " + "Cite the file and line of every fact you use. " * 30
    first = [system(instructions), user("Where is the port configured?"), assistant("", tool_calls=(CALL,))]
    one = await local_model.complete(first, max_tokens=4, timeout=300)
    assert one.usage.evaluated_tokens <= one.usage.prompt_tokens
    cached = list(llama._input_ids)  # what llama.cpp holds after the first request

    second = [*first, tool_result(CALL, "config/dev.toml:3: port = 8080")]
    expected_tokens = local_model.prompt_tokens(second)
    shared = common_prefix(cached, expected_tokens)
    two = await local_model.complete(second, max_tokens=4, timeout=300)
    assert two.usage.prompt_tokens == len(expected_tokens)
    assert two.usage.evaluated_tokens == len(expected_tokens) - shared
    # The first prompt ended in the generation prompt "<|im_start|>assistant\n"; the second
    # replaces it with the tool result, so only "<|im_start|>" of it is shared and llama.cpp
    # evaluates the new message and a fresh generation prompt, less that one token.
    new_message = local_model.count_message(second[-1])
    assert two.usage.evaluated_tokens == new_message + GENERATION_PROMPT - 1
    assert two.usage.evaluated_tokens < two.usage.prompt_tokens // 10


@needs_real_model
async def test_same_prompt_twice_evaluates_almost_nothing(local_model):
    messages = [system("Be brief."), user("Say a number.")]
    await local_model.complete(messages, max_tokens=1, timeout=300)
    # One generated token is sampled but never evaluated, so llama.cpp holds exactly this
    # prompt and its logits: the same prompt again evaluates nothing.
    again = await local_model.complete(messages, max_tokens=3, timeout=300)
    assert again.usage.evaluated_tokens == 0
    # Now generated tokens follow the prompt in the cache; llama.cpp cuts them off and replays
    # the prompt's last token to get fresh logits.
    third = await local_model.complete(messages, max_tokens=1, timeout=300)
    assert third.usage.evaluated_tokens == 1
    assert third.text == again.text[: len(third.text)]  # greedy: the same start


@needs_real_model
async def test_cancel_stops_within_one_token(local_model):
    pieces: list[str] = []

    def first_piece_cancels(piece: str) -> None:
        pieces.append(piece)
        scope.cancel()

    with anyio.CancelScope() as scope:
        await local_model.complete(
            [user("Count from one to one hundred in words.")], max_tokens=200, timeout=300, on_text=first_piece_cancels
        )
        pytest.fail("complete returned although it was cancelled")
    assert scope.cancelled_caught
    assert len(pieces) == 1  # nothing reaches the caller after the cancel
    # The token being sampled when the cancel landed may finish; none after it.
    assert local_model.last_usage.generated_tokens <= 2
    # The lock was released and the model works on.
    assert not inference_lock().locked()
    after = await local_model.complete([user("Say hi.")], max_tokens=3, timeout=300)
    assert after.usage.generated_tokens >= 1


@needs_real_model
async def test_concurrent_completions_are_serialized(local_model):
    order: list[str] = []
    results = {}

    async def reply(label: str, question: str) -> None:
        results[label] = await local_model.complete(
            [user(question)], max_tokens=8, timeout=600, on_text=lambda piece: order.append(label)
        )

    async with anyio.create_task_group() as group:
        group.start_soon(reply, "a", "Tell me about cats.")
        group.start_soon(reply, "b", "Tell me about dogs.")
    assert set(results) == {"a", "b"}
    assert order.count("a") >= 1 and order.count("b") >= 1
    # One reply's pieces all come before the other's: no interleaving.
    first = order[0]
    switch = next(i for i, label in enumerate(order) if label != first)
    assert all(label != first for label in order[switch:]), order


@needs_real_model
async def test_deadline_returns_partial_text(local_model, monkeypatch):
    now = local._clock
    jump = {"by": 0.0}
    monkeypatch.setattr(local, "_clock", lambda: now() + jump["by"])
    pieces: list[str] = []

    def time_runs_out(piece: str) -> None:
        pieces.append(piece)
        jump["by"] = 10_000.0  # the deadline passes while the first piece is shown

    result = await local_model.complete(
        [user("Count from one to one hundred in words.")], max_tokens=200, timeout=60, on_text=time_runs_out
    )
    assert result.finish_reason == "deadline"
    assert result.text and result.text == "".join(pieces)
    assert result.usage.generated_tokens <= 2


@needs_real_model
async def test_deadline_includes_waiting_for_the_lock(local_model):
    async with lock_held_elsewhere():
        result = await local_model.complete([user("hi")], max_tokens=4, timeout=0.5)
    assert result.finish_reason == "deadline" and result.text == ""
    assert result.usage.generated_tokens == 0
