"""The remote provider against a real OpenAI-compatible server on 127.0.0.1.

The server is llama-cpp-python's own (``python -m llama_cpp.server``, through the small
launcher in ``llama_server.py``) serving the embedded SmolLM2 GGUF, started once per session on
a free port with an API key, and awaited by polling ``/v1/models``.
"""

from __future__ import annotations

import httpx
import pytest

from imprintd.messages import ToolSpec, system, user
from imprintd.models.base import ModelError
from imprintd.models.factory import create_model
from imprintd.models.remote import RemoteModel
from imprintd.settings import ChatSettings
from tests.models.llama_server import API_KEY, running_server
from tests.models.real_model import needs_real_model

pytestmark = needs_real_model

SEARCH = ToolSpec(
    name="search",
    description="Search the workspace.",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}},
)


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """Base URL of a running llama-cpp-python server (session-scoped)."""
    with running_server(tmp_path_factory, 2048) as base_url:
        yield base_url


def remote(base_url: str, api_key: str | None = API_KEY) -> RemoteModel:
    return RemoteModel(base_url, "smollm2", n_ctx=2048, api_key=api_key, read_timeout=300)


async def test_streamed_reply_from_a_real_server(llama_server):
    pieces: list[str] = []
    model = remote(llama_server)
    messages = [system("You are terse."), user("Say hello to the user.")]
    result = await model.complete(messages, max_tokens=12, timeout=300, on_text=pieces.append)
    assert result.text and "".join(pieces) == result.text
    assert result.finish_reason in ("stop", "length")
    assert result.usage.prompt_tokens == model.count_prompt(messages)
    assert result.usage.generated_tokens > 0


async def test_tools_are_accepted_by_a_real_server(llama_server):
    result = await remote(llama_server).complete([user("Find the port.")], [SEARCH], max_tokens=8, timeout=300)
    assert result.finish_reason in ("stop", "length", "tool_calls")


async def test_factory_builds_the_remote_model_with_the_env_key(llama_server):
    chat = ChatSettings(provider="openai", base_url=llama_server, model="smollm2", n_ctx=2048)
    model = create_model(chat, {"IMPRINT_CHAT_API_KEY": API_KEY})
    result = await model.complete([user("Hi")], max_tokens=4, timeout=300)
    assert result.text


async def test_wrong_key_is_401_from_a_real_server(llama_server):
    with pytest.raises(ModelError, match="^the server answered 401 Unauthorized: check IMPRINT_CHAT_API_KEY"):
        await remote(llama_server, api_key="wrong").complete([user("Hi")], max_tokens=4, timeout=300)


async def test_wrong_path_is_404_from_a_real_server(llama_server):
    base = llama_server.removesuffix("/v1") + "/nothing/v1"
    with pytest.raises(ModelError, match=r"^model 'smollm2' was not found \(404\)"):
        await remote(base).complete([user("Hi")], max_tokens=4, timeout=300)


async def test_estimate_is_not_below_the_servers_own_count(llama_server):
    # The remote estimate (docs/decisions.md, "Counting tokens") is meant to err on the side of room to spare: compare with the
    # server's tokenizer through its non-streamed usage report.
    messages = [system("You are terse."), user("Explain what a context window is, in two sentences.")]
    async with httpx.AsyncClient(timeout=300) as client:
        response = await client.post(
            f"{llama_server}/chat/completions",
            headers={"Authorization": f"Bearer {API_KEY}"},
            json={
                "model": "smollm2",
                "max_tokens": 1,
                "messages": [{"role": m.role, "content": m.content} for m in messages],
            },
        )
    actual = response.json()["usage"]["prompt_tokens"]
    assert remote(llama_server).count_prompt(messages) >= actual
