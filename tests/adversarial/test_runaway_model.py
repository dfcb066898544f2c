"""A model server that ignores ``max_tokens`` and streams on without end is cut at the output
allowance (``max_tokens`` at ``OUTPUT_BYTES_PER_TOKEN`` UTF-8 bytes a token): the stream is
closed, the reply ends with ``stopReason: "length"``, and what is streamed, stored and held in
memory stays within the allowance."""

from __future__ import annotations

import json
import tracemalloc

import anyio

from imprintd.messages import ToolSpec, user
from imprintd.models.remote import OUTPUT_BYTES_PER_TOKEN, RemoteModel
from imprintd.models.remote_counts import estimate_tokens
from tests.e2e.rawclient import RawClient
from tests.openai_stub import ENDLESS_LIMIT, StubReply

MAX_TOKENS = 64
ALLOWANCE_BYTES = MAX_TOKENS * OUTPUT_BYTES_PER_TOKEN


def test_a_server_streaming_past_max_tokens_is_cut_with_stop_reason_length(daemon_env, stub):
    stub.queue(StubReply(endless="flood "))
    client = RawClient({**daemon_env, "IMPRINT_CHAT_MAX_TOKENS": str(MAX_TOKENS)})
    try:
        client.initialize()
        request_id = client.request("imprint/chat", {"text": "Which port?"})
        deltas: list[str] = []
        while (message := client.next()) is not None and message.get("id") != request_id:
            if message.get("method") == "imprint/replyDelta":
                deltas.append(message["params"]["text"])
        assert message is not None, client.stderr_text()[-3000:]
        result = message["result"]
        assert stub.requests[0]["max_tokens"] == MAX_TOKENS  # it was asked for, and ignored
        assert result["stopReason"] == "length"
        streamed = "".join(deltas)
        written, note = streamed.split("\n\n(The answer was cut off", 1)  # the reply says it was cut
        assert 0 < len(written.encode()) <= ALLOWANCE_BYTES  # before the fix: all 50,000 pieces
        assert "chat.max_tokens" in note
        assert result["text"] == streamed
        assert stub.hung_up.wait(60), "the daemon kept the stream open"
        assert stub.endless_sent < ENDLESS_LIMIT
        session = client.response(client.request("imprint/session", {"sessionId": result["sessionId"]}))
        answer = session["result"]["messages"][-1]
        assert answer["role"] == "assistant" and answer["content"] == streamed
        assert "result" in client.response(client.request("imprint/sessions", {}))  # still serving
    finally:
        client.kill()


def test_a_runaway_stream_is_held_in_bounded_memory(stub):
    stub.queue(StubReply(endless="flood "))
    model = RemoteModel(stub.base_url, "stub")
    pieces: list[str] = []
    tracemalloc.start()
    try:
        completion = anyio.run(
            lambda: model.complete([user("Which port?")], max_tokens=MAX_TOKENS, on_text=pieces.append)
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert completion.finish_reason == "length"
    assert len(completion.text.encode()) <= ALLOWANCE_BYTES and "".join(pieces) == completion.text
    assert completion.usage.generated_tokens == estimate_tokens(completion.text)
    assert stub.hung_up.wait(60) and stub.endless_sent < ENDLESS_LIMIT
    # The stub itself allocates a little per piece it sends; the reply is a few hundred bytes.
    assert peak < 4 * 1024 * 1024, f"peak {peak:,} bytes"


def test_endless_tool_call_arguments_are_cut_too(stub):
    def chunk(delta: dict) -> str:
        return json.dumps({"choices": [{"index": 0, "delta": delta}]})

    start = {"index": 0, "id": "c1", "function": {"name": "search", "arguments": '{"query": "'}}
    more = chunk({"tool_calls": [{"index": 0, "function": {"arguments": "x" * 50}}]})
    stub.queue(StubReply(raw_events=[chunk({"tool_calls": [start]}), *[more] * 2000, "[DONE]"]))
    model = RemoteModel(stub.base_url, "stub")
    search = ToolSpec(name="search", description="Search.", parameters={"type": "object"})
    completion = anyio.run(lambda: model.complete([user("Which port?")], [search], max_tokens=MAX_TOKENS))
    assert completion.finish_reason == "length"
    assert completion.usage.generated_tokens <= estimate_tokens("x" * ALLOWANCE_BYTES)  # before: 33,000
    # The call was cut mid-arguments: it is not run, and the model is told why.
    assert completion.tool_calls == () and "not valid JSON" in (completion.tool_call_error or "")
