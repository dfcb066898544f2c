"""A served model's real window: asked of the server, learned from what it refuses or cuts.

The scripted OpenAI server (``tests/openai_stub.py``) answers each server's own endpoint as that
server documents it (llama-server ``GET /props``, vLLM's ``max_model_len`` in ``GET /v1/models``,
LM Studio ``GET /api/v0/models``, Ollama ``POST /api/show`` and ``GET /api/ps``), or none of
them. Replies go through ``Chat.reply`` and the real remote provider; the tests assert what the
server was sent (every request fitted to its window), the notice, and the model info.
"""

from __future__ import annotations

import json
import math

import anyio
import pytest

from imprintd import protocol as wire
from imprintd.chat import Chat
from imprintd.messages import system, user
from imprintd.models.base import ContextExceeded
from imprintd.models.remote import RemoteModel
from imprintd.models.server_window import (
    OLLAMA_DEFAULT_CTX,
    context_exceeded,
    from_lmstudio,
    from_ollama,
    from_vllm,
)
from tests.helpers import ask, estimated_prompt, remote_chat
from tests.openai_stub import OpenAIStub, StubReply

LLAMA_PROPS = {
    "default_generation_settings": {"id": 0, "n_ctx": 2048, "params": {"n_predict": -1}},
    "total_slots": 4,
    "model_path": "/models/qwen3-4b-q4_k_m.gguf",
    "chat_template": "{{ messages }}",
}
LMSTUDIO_MODELS = {
    "object": "list",
    "data": [
        {
            "id": "stub",
            "object": "model",
            "type": "llm",
            "publisher": "lmstudio-community",
            "arch": "qwen3",
            "compatibility_type": "gguf",
            "quantization": "Q4_K_M",
            "state": "loaded",
            "max_context_length": 32768,
            "loaded_context_length": 3072,
        }
    ],
}
VLLM_MODELS = {
    "object": "list",
    "data": [{"id": "stub", "object": "model", "owned_by": "vllm", "root": "Qwen/Qwen3-4B", "max_model_len": 2560}],
}
OLLAMA_SHOW = {
    "modelfile": "FROM /root/.ollama/models/blobs/sha256-…",
    "parameters": 'stop "<|im_end|>"\ntemperature 0.6',
    "template": "{{ .Prompt }}",
    "details": {"family": "qwen3", "parameter_size": "4.0B", "quantization_level": "Q4_K_M"},
    "model_info": {"general.architecture": "qwen3", "qwen3.context_length": 40960},
}


def the_model(chat: Chat) -> RemoteModel:
    model = chat.model()
    assert isinstance(model, RemoteModel)
    return model


# -- what each server's endpoint says ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("endpoint", "answer", "window", "source"),
    [
        ("GET /props", LLAMA_PROPS, 2048, "llama-server /props n_ctx"),
        ("GET /api/v0/models", LMSTUDIO_MODELS, 3072, "LM Studio loaded_context_length"),
        ("GET /v1/models", VLLM_MODELS, 2560, "vLLM /v1/models max_model_len"),
    ],
)
async def test_the_servers_window_is_the_budget_and_the_user_is_told_once(endpoint, answer, window, source):
    with OpenAIStub() as stub:
        stub.endpoints[endpoint] = (200, answer)
        chat = remote_chat(stub)
        stub.queue("First answer.", "Second answer.")
        first, events = await ask(chat, "What is the port?")
        second, later = await ask(chat, "And the host?", first.session_id)
        model = the_model(chat)
        assert (model.n_ctx, model.window_source, model.server_n_ctx) == (window, source, window)
        # Every request fitted the server's window, with a quarter of it for the answer.
        for request in stub.requests:
            assert request["max_tokens"] == window // 4
            assert estimated_prompt(request) + request["max_tokens"] <= window
        notices = [payload for kind, payload in events.log if kind == "notice"]
        assert len(notices) == 1 and f"{window:,} tokens ({source})" in notices[0]
        assert "chat.n_ctx (8,192)" in notices[0]
        assert not [kind for kind, _ in later.log if kind == "notice"], "told once"
        [usage, *_] = [payload for kind, payload in events.log if kind == "context_usage"]
        assert (usage.n_ctx, usage.n_ctx_source, usage.output_allowance) == (window, source, window // 4)
        info = wire.ModelInfo.from_core(chat.model_identity())
        assert (info.n_ctx, info.n_ctx_source, info.server_n_ctx) == (window, source, window)
        assert second.text == "Second answer."
        chat.close()


async def test_a_server_window_larger_than_chat_n_ctx_leaves_chat_n_ctx():
    with OpenAIStub() as stub:
        stub.endpoints["GET /props"] = (200, {"default_generation_settings": {"n_ctx": 32768}})
        chat = remote_chat(stub)
        stub.queue("Fine.")
        _, events = await ask(chat, "Hello?")
        model = the_model(chat)
        assert (model.n_ctx, model.window_source, model.server_n_ctx) == (8192, "chat.n_ctx", 32768)
        assert stub.requests[0]["max_tokens"] == 1024
        assert not [kind for kind, _ in events.log if kind == "notice"]
        chat.close()


async def test_a_server_that_answers_none_of_them_keeps_chat_n_ctx_and_the_estimate():
    with OpenAIStub() as stub:
        chat = remote_chat(stub)
        stub.queue("Fine.")
        _, events = await ask(chat, "Hello?")
        model = the_model(chat)
        assert (model.n_ctx, model.window_source, model.server_n_ctx) == (8192, "chat.n_ctx", None)
        assert model.exact_counts is False and model.calibration == 1.0
        assert stub.requests[0]["max_tokens"] == 1024
        asked = {key for key, _ in stub.endpoint_requests}
        assert asked == {"GET /props", "GET /api/v0/models", "GET /api/ps", "POST /api/show"}
        assert stub.gets == ["/v1/models"]  # vLLM's list, without max_model_len
        info = wire.ModelInfo.from_core(chat.model_identity())
        assert (info.n_ctx, info.n_ctx_source, info.server_n_ctx) == (8192, "chat.n_ctx", None)
        assert not [kind for kind, _ in events.log if kind == "notice"]
        chat.close()


async def test_the_window_is_asked_once_per_model():
    with OpenAIStub() as stub:
        stub.endpoints["GET /props"] = (200, LLAMA_PROPS)
        chat = remote_chat(stub)
        stub.queue("One.", "Two.")
        first, _ = await ask(chat, "One?")
        await ask(chat, "Two?", first.session_id)
        assert [key for key, _ in stub.endpoint_requests].count("GET /props") == 1
        chat.close()


# -- Ollama: a guessed window, then the silent front truncation shown by usage -------------------------
async def test_ollamas_silent_front_truncation_is_detected_from_usage_and_the_round_refitted():
    with OpenAIStub() as stub:
        # Not loaded yet: /api/ps lists nothing and the model has no num_ctx parameter, so the
        # window is Ollama's default, a guess. The server really runs with 2,048
        # (OLLAMA_CONTEXT_LENGTH): it loads the model with that and cuts longer prompts from the front.
        stub.endpoints["POST /api/show"] = (200, OLLAMA_SHOW)
        stub.endpoints["GET /api/ps"] = (200, {"models": []})
        served = 2048

        def ollama(request: dict) -> StubReply:
            stub.endpoints["GET /api/ps"] = (
                200,
                {"models": [{"name": "stub", "model": "stub", "context_length": served}]},
            )
            return StubReply(
                text="Noted from what I was given.", usage={"prompt_tokens": min(estimated_prompt(request), served)}
            )

        stub.default_reply = ollama
        chat = remote_chat(stub)
        question = "Read this log and say what failed. " + " ".join(
            f"line {n}: request served in {n % 97} ms" for n in range(330)
        )
        assert 7_000 < len(question) < 12_000
        outcome, events = await ask(chat, question)
        model = the_model(chat)
        assert (model.n_ctx, model.window_source) == (served, "Ollama /api/ps context_length")
        first, *rest = stub.requests
        # The first request was fitted to the guess and cut by the server; every later one fits.
        assert estimated_prompt(first) + first["max_tokens"] <= OLLAMA_DEFAULT_CTX
        assert estimated_prompt(first) > served
        assert rest, "the round was asked again"
        for request in rest:
            assert estimated_prompt(request) + request["max_tokens"] <= served
        # The question was read in sections to fit, and an answer stored, not an error.
        assert any("section" in message.lower() for message in events.progress_messages)
        assert outcome.text
        notices = [payload for kind, payload in events.log if kind == "notice"]
        assert notices and "OLLAMA_CONTEXT_LENGTH" in notices[-1]
        chat.close()


# -- refusals for length, by each server's words -------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "body", "window", "prompt"),
    [
        ("Requested tokens (2745) exceed context window of 1024", None, 1024, 2745),
        (
            "This model's maximum context length is 1024 tokens. However, you requested 3769 tokens "
            "(2745 in the messages, 1024 in the completion). Please reduce the length of the messages or completion.",
            None,
            1024,
            2745,
        ),
        (
            "This model's maximum context length is 4096 tokens. However, your messages resulted in 5120 tokens.",
            None,
            4096,
            5120,
        ),
        ("The decoder prompt (length 5000) is longer than the maximum model length of 4096.", None, 4096, None),
        (
            "the request exceeds the available context size, try increasing it",
            {"error": {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096}},
            4096,
            5000,
        ),
        (
            "Trying to keep the first 5000 tokens when context the overflows. However, the model is loaded with "
            "context length of only 4096 tokens, which is not enough. Try to load the model with a larger context length",
            None,
            4096,
            None,
        ),
        ("the input length exceeds the context length", None, None, None),
        ("context_length_exceeded", None, None, None),
    ],
)
def test_refusals_for_length_are_read_by_each_servers_words(text, body, window, prompt):
    found = context_exceeded(text, body)
    assert found is not None
    assert (found.window, found.prompt_tokens) == (window, prompt)


def test_other_refusals_are_not_taken_for_length():
    assert context_exceeded("model 'x' not found, try pulling it first") is None
    assert context_exceeded("Invalid API key") is None


def test_endpoint_answers_that_do_not_say_a_window_say_none():
    assert from_vllm({"data": [{"id": "other", "max_model_len": 1}, {"id": "x"}]}, "stub") is None
    assert from_vllm("not json", "stub") is None
    assert from_lmstudio({"data": [{"id": "stub", "max_context_length": 8192}]}, "stub").provisional
    assert from_ollama({"parameters": "num_ctx 16384"}, {"models": []}, "stub").tokens == 16384
    assert from_ollama({"error": "model not found"}, None, "stub") is None
    with_small_model = dict(OLLAMA_SHOW, model_info={"llama.context_length": 2048})
    assert from_ollama(with_small_model, {"models": []}, "stub").tokens == 2048  # never past the model's own


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, {"error": {"message": "Requested tokens (2745) exceed context window of 1024", "code": 400}}),
        (
            400,
            {
                "error": {
                    "code": 400,
                    "message": "the request exceeds the available context size, try increasing it",
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": 2745,
                    "n_ctx": 1024,
                }
            },
        ),
        (500, {"error": {"message": "the input length exceeds the context length"}}),
    ],
)
async def test_a_refusal_for_length_teaches_the_window_and_the_round_is_refitted(status, body):
    with OpenAIStub() as stub:
        refused = StubReply(status=status, body=json.dumps(body))
        stub.queue(refused)
        stub.default_reply = "An answer from what fits."
        chat = remote_chat(stub, **{"chat.analysis_workers": 2})
        question = "Summarize: " + " ".join(f"item {n} costs {n * 3} euros" for n in range(400))
        outcome, events = await ask(chat, question)
        model = the_model(chat)
        first, *rest = stub.requests
        assert estimated_prompt(first) > 1024 and rest
        if "n_ctx" in json.dumps(body) or "window of" in json.dumps(body):
            assert (model.n_ctx, model.window_source) == (1024, "the server's refusal")
            for request in rest:
                assert estimated_prompt(request) + request["max_tokens"] <= 1024
        else:
            assert model.calibration > 1.0  # no window named: the estimate allows a quarter more
        assert outcome.text
        chat.close()


async def test_a_prompt_that_still_does_not_fit_fails_naming_the_window_and_the_setting():
    with OpenAIStub() as stub:
        stub.endpoints["GET /props"] = (200, {"default_generation_settings": {"n_ctx": 2048}})
        model = RemoteModel(stub.base_url, "stub", n_ctx=8192)
        await model.learn_window()
        with pytest.raises(ContextExceeded) as failed:
            await model.complete([system("Be brief."), user("x" * 9_000)], max_tokens=256, timeout=30)
        message = str(failed.value)
        assert "2,048-token window (llama-server /props n_ctx)" in message
        assert "llama-server with a larger -c" in message and "chat.max_tokens" in message
        assert "stream ended" not in message
        assert stub.requests == []  # refused here, unsent
        model.close_connections()


async def test_probe_answers_are_read_with_a_bound(monkeypatch):
    from imprintd.models import server_window

    monkeypatch.setattr(server_window, "MAX_PROBE_BYTES", 200)
    with OpenAIStub() as stub:
        big = dict(LLAMA_PROPS, chat_template="x" * 5_000)
        stub.endpoints["GET /props"] = (200, big)
        model = RemoteModel(stub.base_url, "stub", n_ctx=8192)
        await model.learn_window()
        assert model.server_n_ctx is None  # not read past the bound, so not known
        model.close_connections()
        await anyio.lowlevel.checkpoint()


# -- exact counts from a server that tokenizes --------------------------------------------------------
def rendered(messages: list[dict], tools: list[dict] | None) -> str:
    """A ChatML rendering, as a llama-server template would give it (tools in the system turn)."""
    text = "".join(f"<|im_start|>{m['role']}\n{m.get('content') or ''}<|im_end|>\n" for m in messages)
    if tools:
        text = f"<|im_start|>system\n<tools>{json.dumps(tools)}</tools><|im_end|>\n" + text
    return text + "<|im_start|>assistant\n"


def tokens_of(text: str) -> list[int]:
    """The server's tokenizer: a token per started four characters (fewer than the estimate's)."""
    return list(range(math.ceil(len(text) / 4)))


@pytest.mark.parametrize("server", ["llama-server", "vllm"])
async def test_a_server_that_tokenizes_counts_every_prompt_exactly(server):
    with OpenAIStub() as stub:
        counted: list[int] = []
        if server == "llama-server":
            stub.endpoints["GET /props"] = (200, LLAMA_PROPS)
            stub.endpoints["POST /apply-template"] = lambda body: (
                200,
                {"prompt": rendered(body["messages"], body.get("tools"))},
            )

            def tokenize(body: dict) -> tuple[int, dict]:
                counted.append(len(tokens_of(body["content"])))
                return 200, {"tokens": tokens_of(body["content"])}

        else:
            stub.endpoints["GET /v1/models"] = (200, VLLM_MODELS)

            def tokenize(body: dict) -> tuple[int, dict]:
                tokens = tokens_of(rendered(body["messages"], body.get("tools")))
                counted.append(len(tokens))
                return 200, {"count": len(tokens), "max_model_len": 2560, "tokens": tokens}

        stub.endpoints["POST /tokenize"] = tokenize
        chat = remote_chat(stub)
        stub.queue("The answer.")
        _, events = await ask(chat, "What does the server count?")
        model = the_model(chat)
        assert model.exact_counts
        [request] = stub.requests
        [usage] = [payload for kind, payload in events.log if kind == "context_usage"]
        # What the meter says is the server's count of exactly what was sent.
        exact = len(tokens_of(rendered(request["messages"], request.get("tools"))))
        assert usage.exact and usage.used == exact
        assert exact < estimated_prompt(request)  # the estimate would have said more
        # Each distinct prompt is asked once: counting it again is answered from the cache.
        asked = len(counted)
        model.count_prompt([system("s"), user("u")])
        model.count_prompt([system("s"), user("u")])
        assert len(counted) == asked + 1
        chat.close()


async def test_a_server_that_fails_to_count_leaves_the_estimate():
    with OpenAIStub() as stub:
        stub.endpoints["GET /props"] = (200, LLAMA_PROPS)  # /apply-template and /tokenize: 404 (an old build)
        chat = remote_chat(stub)
        stub.queue("Fine.")
        _, events = await ask(chat, "Hello?")
        model = the_model(chat)
        assert model.exact_counts is False
        [usage] = [payload for kind, payload in events.log if kind == "context_usage"]
        assert not usage.exact and usage.used == estimated_prompt(stub.requests[0])
        assert [key for key, _ in stub.endpoint_requests].count("POST /apply-template") == 1  # not asked again
        chat.close()
