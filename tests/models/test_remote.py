"""The remote provider against a scripted OpenAI-compatible server on 127.0.0.1.

Every error case names its cause; tool-call deltas split across chunks are reassembled; what
went over the wire (path, auth header, body) is asserted. No sleeps: a silent server blocks on
an event released at teardown, and timeouts are httpx's own.
"""

from __future__ import annotations

import gzip
import json
import math
import socket
import ssl
import tracemalloc

import anyio
import pytest

from imprintd.messages import ToolCall, ToolSpec, assistant, system, tool_result, user
from imprintd.models import remote as remote_mod
from imprintd.models.base import ModelError, inference_lock
from imprintd.models.remote import RemoteModel
from imprintd.models.remote_counts import MESSAGE_OVERHEAD, PROMPT_OVERHEAD, estimate_tokens
from tests.lock import lock_held_elsewhere
from tests.models.scripted_server import (
    Recorded,
    ScriptedServer,
    Writer,
    chunk,
    stream_reply,
)

SEARCH = ToolSpec(
    name="search",
    description="Search the workspace.",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}},
)
MESSAGES = [system("You are terse."), user("Say hi.")]


def model_for(server: ScriptedServer, **kwargs) -> RemoteModel:
    return RemoteModel(server.base_url, "test-model", n_ctx=4096, **kwargs)


@pytest.fixture
def no_retry_wait(monkeypatch):
    """Retries of transient failures wait 10 ms instead of 1, 2 and 4 s (a Retry-After still counts)."""
    monkeypatch.setattr(remote_mod, "RETRY_DELAYS_S", (0.01, 0.01, 0.01))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- counting ----------------------------------------------------------------------------------


def test_estimate_is_utf8_bytes_over_three():
    assert estimate_tokens("") == 0
    assert estimate_tokens("abc") == 1
    assert estimate_tokens("abcd") == 2
    assert estimate_tokens("é") == 1  # two bytes
    assert estimate_tokens("日本語") == 3  # nine bytes


def test_counts_are_additive():
    remote = RemoteModel("http://127.0.0.1:1/v1", "m")
    call = ToolCall(id="c", name="search", arguments={"query": "x"})
    messages = [system("s" * 30), user("héllo"), assistant("", tool_calls=(call,)), tool_result(call, "r" * 10)]
    per_message = [remote.count_message(m) for m in messages]
    assert per_message[0] == MESSAGE_OVERHEAD + 10
    assert per_message[2] == MESSAGE_OVERHEAD + math.ceil(
        len(json.dumps({"name": "search", "arguments": {"query": "x"}})) / 3
    )
    assert remote.count_prompt(messages, [SEARCH]) == PROMPT_OVERHEAD + sum(per_message) + math.ceil(
        len(json.dumps(SEARCH.as_openai()).encode()) / 3
    )


def test_a_message_counted_again_or_an_equal_one_is_found_by_what_it_reads(monkeypatch):
    remote = RemoteModel("http://127.0.0.1:1/v1", "m")
    estimated: list[str] = []
    estimate = RemoteModel._estimate
    monkeypatch.setattr(RemoteModel, "_estimate", staticmethod(lambda m: estimated.append(m.content) or estimate(m)))
    first = user("a question")
    assert remote.count_message(first) == remote.count_message(first) == MESSAGE_OVERHEAD + 4
    assert remote.count_message(user("a question")) == MESSAGE_OVERHEAD + 4  # an equal message: by content
    assert estimated == ["a question"]
    # A new message is estimated anew, never given an earlier one's count.
    for length in range(1, 200):
        assert remote.count_message(user("x" * 3 * length)) == MESSAGE_OVERHEAD + length
    assert remote.count_tool(SEARCH) == remote.count_tool(SEARCH) == estimate_tokens(json.dumps(SEARCH.as_openai()))


# -- a normal streamed reply -----------------------------------------------------------------


async def test_streams_text_and_sends_the_request_as_openai_expects():
    handler = stream_reply(chunk("Hel"), chunk("lo"), chunk(" there"), chunk(finish="stop"))
    with ScriptedServer(handler) as server:
        pieces: list[str] = []
        result = await model_for(server, api_key="sk-secret").complete(
            MESSAGES, [SEARCH], max_tokens=64, timeout=60, on_text=pieces.append
        )
    assert result.text == "Hello there" == "".join(pieces)
    assert result.finish_reason == "stop" and result.tool_calls == ()
    [request] = server.requests
    assert request.method == "POST" and request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-secret"
    assert request.headers["content-type"] == "application/json"
    body = request.body
    assert body["model"] == "test-model" and body["stream"] is True and body["max_tokens"] == 64
    assert body["messages"] == [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]
    assert body["tools"] == [SEARCH.as_openai()]
    usage = result.usage
    assert usage.prompt_tokens == model_for(server).count_prompt(MESSAGES, [SEARCH])
    assert usage.evaluated_tokens == usage.prompt_tokens
    assert usage.generated_tokens == estimate_tokens("Hello there")


async def test_the_certificate_store_is_built_once_not_per_request(monkeypatch):
    # httpx builds one per client (~50 ms, on the event loop), and a client is made per request.
    built: list[object] = []
    create_default_context = ssl.create_default_context

    def counted(*args, **kwargs):
        built.append(args)
        return create_default_context(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counted)
    remote_mod.tls_context.cache_clear()
    handler = stream_reply(chunk("ok", finish="stop"))
    with ScriptedServer(handler) as server:
        model = model_for(server)
        for _ in range(3):
            await model.complete(MESSAGES, [], max_tokens=8, timeout=60)
    assert len(server.requests) == 3
    assert len(built) == 1


async def test_no_api_key_sends_no_authorization_and_no_tools_key():
    with ScriptedServer(stream_reply(chunk("ok", finish="stop"))) as server:
        await model_for(server).complete(MESSAGES, max_tokens=8, timeout=60)
    request = server.requests[0]
    assert "authorization" not in request.headers and "tools" not in request.body


def test_api_key_is_not_in_repr():
    assert "sk-secret" not in repr(RemoteModel("http://h/v1", "m", api_key="sk-secret"))


async def test_tool_exchange_messages_are_sent_in_openai_form():
    call = ToolCall(id="call_9", name="search", arguments={"query": "port"})
    history = [*MESSAGES, assistant("", tool_calls=(call,)), tool_result(call, "found it")]
    with ScriptedServer(stream_reply(chunk("done", finish="stop"))) as server:
        await model_for(server).complete(history, [SEARCH], max_tokens=8, timeout=60)
    sent = server.requests[0].body["messages"]
    assert sent[2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_9", "type": "function", "function": {"name": "search", "arguments": '{"query": "port"}'}}
        ],
    }
    assert sent[3] == {"role": "tool", "content": "found it", "tool_call_id": "call_9", "name": "search"}


async def test_server_usage_gives_evaluated_tokens():
    usage = {"prompt_tokens": 120, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 100}}
    handler = stream_reply(chunk("hi", finish="stop"), {"id": "c1", "choices": [], "usage": usage})
    with ScriptedServer(handler) as server:
        result = await model_for(server).complete(MESSAGES, max_tokens=8, timeout=60)
    assert result.usage.evaluated_tokens == 20


async def test_finish_length():
    with ScriptedServer(stream_reply(chunk("abc"), chunk(finish="length"))) as server:
        result = await model_for(server).complete(MESSAGES, max_tokens=1, timeout=60)
    assert result.finish_reason == "length" and result.text == "abc"


async def test_prompt_too_big_for_n_ctx():
    remote = RemoteModel("http://127.0.0.1:1/v1", "m", n_ctx=512)
    with pytest.raises(ModelError, match="exceeds the 512-token context"):
        await remote.complete([user("x" * 3000)], max_tokens=16, timeout=5)


# -- tool calls --------------------------------------------------------------------------------


async def test_tool_call_deltas_split_across_chunks_are_reassembled():
    handler = stream_reply(
        chunk("Let me look."),
        chunk(
            tool_calls=[
                {"index": 0, "id": "call_a", "type": "function", "function": {"name": "search", "arguments": ""}}
            ]
        ),
        chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"que'}}]),
        chunk(
            tool_calls=[
                {
                    "index": 1,
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "search", "arguments": '{"query"'},
                }
            ]
        ),
        chunk(tool_calls=[{"index": 0, "function": {"arguments": 'ry": "po'}}]),
        chunk(tool_calls=[{"index": 1, "function": {"arguments": ': "b"}'}}]),
        chunk(tool_calls=[{"index": 0, "function": {"arguments": 'rt"}'}}]),
        chunk(finish="tool_calls"),
    )
    with ScriptedServer(handler) as server:
        result = await model_for(server).complete(MESSAGES, [SEARCH], max_tokens=64, timeout=60)
    assert result.text == "Let me look."
    assert result.finish_reason == "tool_calls" and result.tool_call_error is None
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("call_a", "search", {"query": "port"}),
        ("call_b", "search", {"query": "b"}),
    ]


async def test_native_call_arguments_nested_thousands_deep_are_a_malformed_call_not_an_internal_error():
    deep = '{"query": ' + "[" * 1_500 + "]" * 1_500 + "}"
    handler = stream_reply(
        chunk("Let me look."),
        chunk(tool_calls=[{"index": 0, "id": "x", "function": {"name": "search", "arguments": deep}}]),
        chunk(finish="tool_calls"),
    )
    with ScriptedServer(handler) as server:
        result = await model_for(server).complete(MESSAGES, [SEARCH], max_tokens=2048, timeout=60)
    assert result.text == "Let me look." and result.tool_calls == ()
    assert "nested more than 64 levels deep" in result.tool_call_error and "'search'" in result.tool_call_error


async def test_malformed_native_tool_calls_are_reported_not_run():
    handler = stream_reply(
        chunk(tool_calls=[{"index": 0, "id": "x", "function": {"name": "search", "arguments": '{"query": '}}]),
        chunk(tool_calls=[{"index": 1, "id": "y", "function": {"name": "rm", "arguments": "{}"}}]),
        chunk(tool_calls=[{"index": 2, "id": "z", "function": {"name": "search", "arguments": "[1]"}}]),
        chunk(finish="tool_calls"),
    )
    with ScriptedServer(handler) as server:
        result = await model_for(server).complete(MESSAGES, [SEARCH], max_tokens=64, timeout=60)
    assert result.tool_calls == ()
    assert "not valid JSON" in result.tool_call_error
    assert "unknown tool 'rm'" in result.tool_call_error
    assert "must be a JSON object, not a list" in result.tool_call_error
    assert result.finish_reason == "stop"


async def test_hermes_markup_in_content_is_parsed_and_hidden():
    handler = stream_reply(
        chunk("Checking.\n<tool_"),
        chunk('call>{"name": "search", "arguments": {"query": "q"}}'),
        chunk("</tool_call>"),
        chunk(finish="stop"),
    )
    with ScriptedServer(handler) as server:
        pieces: list[str] = []
        result = await model_for(server).complete(MESSAGES, [SEARCH], max_tokens=64, timeout=60, on_text=pieces.append)
    assert "".join(pieces) == result.text == "Checking."
    assert [c.arguments for c in result.tool_calls] == [{"query": "q"}]


async def test_markup_written_with_no_tools_offered_stops_the_text_and_is_reported():
    handler = stream_reply(
        chunk("Billing runs two replicas [1]. \n<tool_"),
        chunk('call>{"name": "search", "arguments": {"query": "owner"}}'),
        chunk("</tool_call>"),
        chunk(finish="stop"),
    )
    with ScriptedServer(handler) as server:
        pieces: list[str] = []
        result = await model_for(server).complete(MESSAGES, max_tokens=64, timeout=60, on_text=pieces.append)
    assert "tools" not in server.requests[0].body
    assert "".join(pieces) == result.text == "Billing runs two replicas [1]."
    assert result.wrote_tool_call and result.tool_calls == () and result.finish_reason == "stop"


async def test_a_reply_without_markup_reports_none_written():
    with ScriptedServer(stream_reply(chunk("a < b <tool"), chunk(finish="stop"))) as server:
        result = await model_for(server).complete(MESSAGES, max_tokens=64, timeout=60)
    assert result.text == "a < b <tool" and not result.wrote_tool_call


# -- failures, each named ----------------------------------------------------------------------


async def test_connection_refused():
    port = free_port()
    remote = RemoteModel(f"http://127.0.0.1:{port}/v1", "m")
    with pytest.raises(ModelError) as caught:
        await remote.complete(MESSAGES, max_tokens=8, timeout=60)
    assert str(caught.value) == f"the model server at http://127.0.0.1:{port}/v1 refused the connection; is it running?"


async def test_dns_failure():
    remote = RemoteModel("http://no-such-host.invalid/v1", "m", connect_timeout=20)
    with pytest.raises(ModelError, match=r"could not resolve the host 'no-such-host.invalid'"):
        await remote.complete(MESSAGES, max_tokens=8, timeout=60)


def error_reply(code: int, body: dict | None = None, headers: dict | None = None):
    def handle(request: Recorded, writer: Writer) -> None:
        writer.json(code, body or {"error": {"message": f"status {code}"}}, headers)

    return handle


@pytest.mark.parametrize(
    ("code", "body", "headers", "expected"),
    [
        (
            401,
            {"error": {"message": "Invalid API key"}},
            None,
            "the server answered 401 Unauthorized: check IMPRINT_CHAT_API_KEY: Invalid API key",
        ),
        (
            404,
            {"error": {"message": "The model `test-model` does not exist"}},
            None,
            "model 'test-model' was not found (404)",
        ),
        (429, {"error": {"message": "slow down"}}, {"Retry-After": "7"}, "rate limited (429)"),
        (503, {"error": {"message": "overloaded"}}, None, "server error 503: overloaded"),
        (500, {"detail": "boom"}, None, "server error 500: boom"),
        (400, {"error": {"message": "bad field"}}, None, "the server refused the request (400 Bad Request): bad field"),
    ],
)
async def test_http_errors_are_named(code, body, headers, expected, no_retry_wait):
    with ScriptedServer(error_reply(code, body, headers)) as server, pytest.raises(ModelError) as caught:
        await model_for(server, api_key="sk-secret").complete(MESSAGES, max_tokens=8, timeout=5)
    message = str(caught.value)
    assert message.startswith(expected)
    assert "sk-secret" not in message
    if code == 429:
        assert "retry after 7 s" in message


def hostile_error(kind: str):
    """An answer of status 500 no client should read whole: 64 MiB with no length, a gzip bomb
    (64 MiB decoded from about 64 KB), or JSON nested 100,000 deep."""
    pad = 64 << 20
    # Made before the test traces memory (the server runs in the test's process).
    bomb = gzip.compress(b'{"error": {"message": "busy"}, "pad": "' + b" " * pad + b'"}') if kind == "bomb" else b""

    def handle(request: Recorded, writer: Writer) -> None:
        if kind == "endless":
            writer.status(500, {"Content-Type": "application/json", "Connection": "close"})
            try:
                writer.data(b'{"error": {"message": "overloaded ')
                for _ in range(pad // (64 << 10)):
                    writer.data(b"x" * (64 << 10))
            except OSError:
                return  # the client stopped reading and closed: as it should
        elif kind == "bomb":
            headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
            writer.status(500, {**headers, "Content-Length": str(len(bomb))})
            writer.data(bomb)
        else:
            body = b'{"error": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
            writer.status(500, {"Content-Type": "application/json", "Content-Length": str(len(body))})
            writer.data(body)

    return handle


@pytest.mark.parametrize(
    ("kind", "detail"),
    [
        ("endless", ': {"error": {"message": "overloaded xxx'),
        ("bomb", ': {"error": {"message": "busy"}'),
        ("deep", ': {"error": [[['),
    ],
)
async def test_an_error_answer_is_read_only_as_far_as_its_message(kind, detail, no_retry_wait):
    """Its first 64 KiB at most, decoded within that bound too; nesting bounded: a clear ModelError,
    never the whole body in memory or a RecursionError."""
    with ScriptedServer(hostile_error(kind)) as server:
        tracemalloc.start()
        try:
            with pytest.raises(ModelError) as caught:
                await model_for(server).complete(MESSAGES, max_tokens=8, timeout=30)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert str(caught.value).startswith("server error 500" + detail)
    assert peak < 8 << 20


async def test_stream_that_stops_mid_reply():
    with ScriptedServer(stream_reply(chunk("Half a "), chunk("repl"), done=False)) as server:
        pieces: list[str] = []
        retries: list[str] = []
        with pytest.raises(ModelError, match="the stream ended before the reply finished"):
            await model_for(server).complete(
                MESSAGES, max_tokens=8, timeout=60, on_text=pieces.append, on_retry=retries.append
            )
    assert "".join(pieces).startswith("Half a")
    assert len(server.requests) == 1 and retries == []  # text had streamed: never asked again


# -- retries of transient failures ------------------------------------------------------------------------
def failing_then(failures: list, reply):
    """A handler that answers each of ``failures`` in turn (a status, or "reset"), then ``reply``."""

    def handle(request: Recorded, writer: Writer) -> None:
        if failures:
            failure = failures.pop(0)
            if failure == "reset":
                # Close the connection before a byte of the response: the client reads a reset.
                writer._handler.connection.shutdown(socket.SHUT_RDWR)
                return
            code, headers = failure if isinstance(failure, tuple) else (failure, None)
            writer.json(code, {"error": {"message": f"status {code}"}}, headers)
            return
        reply(request, writer)

    return handle


@pytest.mark.parametrize("failure", [429, 500, 502, 503, 504, "reset"])
async def test_a_transient_failure_is_retried_and_each_retry_is_reported(failure, no_retry_wait):
    answer = stream_reply(chunk("Hello"), chunk(" there", finish="stop"))
    with ScriptedServer(failing_then([failure, failure], answer)) as server:
        retries: list[str] = []
        pieces: list[str] = []
        completion = await model_for(server, api_key="sk-secret").complete(
            MESSAGES, max_tokens=8, timeout=60, on_text=pieces.append, on_retry=retries.append
        )
    assert completion.text == "Hello there" and "".join(pieces) == "Hello there"
    assert len(server.requests) == 3
    assert [r.body for r in server.requests] == [server.requests[0].body] * 3  # the same request each time
    assert len(retries) == 2
    assert retries[0].endswith("Retrying in 0.01 s (attempt 2 of 4)…") and "attempt 3 of 4" in retries[1]
    expected = "the stream ended before the reply finished" if failure == "reset" else str(failure)
    assert expected in retries[0] and "sk-secret" not in "".join(retries)


async def test_retries_stop_after_three_and_the_error_says_so(no_retry_wait):
    with ScriptedServer(failing_then([502] * 5, stream_reply(chunk("late", finish="stop")))) as server:
        retries: list[str] = []
        with pytest.raises(ModelError, match=r"^server error 502: status 502 \(tried 4 times\)$"):
            await model_for(server).complete(MESSAGES, max_tokens=8, timeout=60, on_retry=retries.append)
    assert len(server.requests) == 4 and len(retries) == 3


async def test_retry_after_is_honoured(no_retry_wait, monkeypatch):
    answer = stream_reply(chunk("ok", finish="stop"))
    waits: list[float] = []
    sleep = anyio.sleep

    async def recorded(delay: float) -> None:  # the wait is observed, not spent
        waits.append(delay)
        await sleep(0)

    monkeypatch.setattr(remote_mod.anyio, "sleep", recorded)
    with ScriptedServer(failing_then([(429, {"Retry-After": "1"})], answer)) as server:
        retries: list[str] = []
        completion = await model_for(server).complete(MESSAGES, max_tokens=8, timeout=60, on_retry=retries.append)
    assert completion.text == "ok" and len(server.requests) == 2
    assert 1.0 in waits and 0.01 not in waits  # the server's second, not the 10 ms of the first backoff step
    assert retries == [
        "The model server: rate limited (429) by " + server.base_url + "; retry after 1 s: status 429. "
        "Retrying in 1 s (attempt 2 of 4)…"
    ]


async def test_without_a_retry_after_the_retries_wait_one_two_and_four_seconds(monkeypatch):
    """The default backoff, observed rather than spent: the daemon's own waits between tries."""
    answer = stream_reply(chunk("ok", finish="stop"))
    waits: list[float] = []
    sleep = anyio.sleep

    async def recorded(delay: float) -> None:
        waits.append(delay)
        await sleep(0)

    monkeypatch.setattr(remote_mod.anyio, "sleep", recorded)
    with ScriptedServer(failing_then([503, 502, "reset"], answer)) as server:
        retries: list[str] = []
        completion = await model_for(server).complete(MESSAGES, max_tokens=8, timeout=60, on_retry=retries.append)
    assert completion.text == "ok" and len(server.requests) == 4
    assert waits == [1.0, 2.0, 4.0]
    assert [r[r.index("Retrying in") :] for r in retries] == [
        "Retrying in 1 s (attempt 2 of 4)…",
        "Retrying in 2 s (attempt 3 of 4)…",
        "Retrying in 4 s (attempt 4 of 4)…",
    ]


async def test_a_wait_past_the_deadline_is_not_waited(no_retry_wait):
    answer = stream_reply(chunk("ok", finish="stop"))
    with ScriptedServer(failing_then([(503, {"Retry-After": "30"})], answer)) as server:
        retries: list[str] = []
        with pytest.raises(ModelError, match=r"not retried: a wait of 30 s would pass the request's deadline"):
            await model_for(server).complete(MESSAGES, max_tokens=8, timeout=5, on_retry=retries.append)
    assert len(server.requests) == 1 and retries == []


async def test_a_refusal_is_not_retried(no_retry_wait):
    with ScriptedServer(failing_then([400], stream_reply(chunk("ok", finish="stop")))) as server:
        with pytest.raises(ModelError, match="refused the request"):
            await model_for(server).complete(MESSAGES, max_tokens=8, timeout=60)
    assert len(server.requests) == 1


async def test_the_start_hook_runs_in_a_request_slot_once_per_request_not_per_retry(no_retry_wait):
    answer = stream_reply(chunk("ok", finish="stop"))
    with ScriptedServer(failing_then([502], answer)) as server:
        calls: list[tuple[float, bool]] = []
        model = model_for(server)

        async def start() -> None:
            assert model._connections is not None
            # A slot of the server's, not the local model's lock: remote requests run side by side.
            calls.append((model._connections.slots.borrowed_tokens, inference_lock().locked()))

        await model.complete(MESSAGES, max_tokens=8, timeout=60, on_start=start)
    assert calls == [(1, False)] and len(server.requests) == 2


async def test_finish_reason_without_done_is_a_complete_reply():
    with ScriptedServer(stream_reply(chunk("ok"), chunk(finish="stop"), done=False)) as server:
        result = await model_for(server).complete(MESSAGES, max_tokens=8, timeout=60)
    assert result.text == "ok" and result.finish_reason == "stop"


async def test_error_event_mid_stream():
    with ScriptedServer(stream_reply(chunk("a"), {"error": {"message": "context overflow"}})) as server:
        with pytest.raises(ModelError, match="reported an error mid-reply: context overflow"):
            await model_for(server).complete(MESSAGES, max_tokens=8, timeout=60)


async def test_garbage_chunk():
    with ScriptedServer(stream_reply(chunk("a"), "not json")) as server:  # type: ignore[arg-type]
        with pytest.raises(ModelError, match="not JSON"):
            await model_for(server).complete(MESSAGES, max_tokens=8, timeout=60)


async def test_a_stream_in_cr_lf_lines_reads_as_one_in_lf_lines():
    def handle(request: Recorded, writer: Writer) -> None:
        writer.start_stream()
        # Each event in two writes, one ending between the CR and the LF of its line break.
        for item in (chunk("Hello"), chunk(" there"), chunk(finish="stop")):
            writer.raw(f"data: {json.dumps(item)}\r")
            writer.raw("\n\r\n")
        writer.raw("data: [DONE]\r\n\r\n")

    with ScriptedServer(handle) as server:
        result = await model_for(server).complete(MESSAGES, max_tokens=8, timeout=60)
    assert result.text == "Hello there" and result.finish_reason == "stop"


async def test_a_line_without_end_is_refused_not_buffered(monkeypatch):
    monkeypatch.setattr(remote_mod, "MAX_STREAM_LINE_CHARS", 50_000)
    written: list[int] = []

    def endless(request: Recorded, writer: Writer) -> None:
        writer.start_stream()
        writer.event(chunk("Half a "))
        writer.raw("data: ")
        try:
            for _ in range(10_000):  # 40 MB, were it all read
                writer.raw("x" * 4096)
                written.append(4096)
        except OSError:  # the client closed the stream
            pass

    pieces: list[str] = []
    with ScriptedServer(endless) as server:
        with pytest.raises(ModelError, match=r"more than 50,000 characters without a line break"):
            await model_for(server).complete(MESSAGES, max_tokens=8, timeout=60, on_text=pieces.append)
    assert "".join(pieces).startswith("Half a")
    assert sum(written) < 10_000 * 4096  # the client stopped reading: the server's writes failed


def silent(request: Recorded, writer: Writer) -> None:
    """Accepts the request and never answers (until the test ends)."""
    writer.start_stream()
    writer.event(chunk("first words"))
    server_release.wait(timeout=60)


server_release = None  # set per test below


@pytest.fixture
def silent_server():
    global server_release
    server = ScriptedServer(silent)
    server_release = server.release
    with server:
        yield server


async def test_silent_server_fails_on_read_timeout(silent_server):
    remote = model_for(silent_server, read_timeout=0.5)
    with pytest.raises(ModelError, match=r"^no answer within 0.5 s from the model server at http://127\.0\.0\.1"):
        await remote.complete(MESSAGES, max_tokens=8, timeout=None)


async def test_deadline_returns_partial_text(silent_server):
    remote = model_for(silent_server, read_timeout=60)
    pieces: list[str] = []
    result = await remote.complete(MESSAGES, max_tokens=8, timeout=1.0, on_text=pieces.append)
    assert result.finish_reason == "deadline"
    assert result.text == "first words" == "".join(pieces)
    assert result.usage.generated_tokens == estimate_tokens("first words")


async def test_cancel_stops_the_request(silent_server):
    remote = model_for(silent_server, read_timeout=60)
    with anyio.CancelScope() as scope:
        await remote.complete(MESSAGES, max_tokens=8, timeout=None, on_text=lambda piece: scope.cancel())
    assert scope.cancel_called


async def test_deadline_includes_waiting_for_a_request_slot(silent_server):
    remote = model_for(silent_server, read_timeout=60, parallel=1)
    held = object()
    slots = remote._connections_here().slots
    await slots.acquire_on_behalf_of(held)
    try:
        result = await remote.complete(MESSAGES, max_tokens=8, timeout=0.3)
    finally:
        slots.release_on_behalf_of(held)
    assert result.finish_reason == "deadline" and result.text == ""
    assert silent_server.requests == []  # it never got a slot, so it never asked


async def test_the_local_models_lock_does_not_hold_a_remote_request():
    with ScriptedServer(stream_reply(chunk("ok", finish="stop"))) as server:
        async with lock_held_elsewhere():
            result = await model_for(server).complete(MESSAGES, max_tokens=8, timeout=30)
    assert result.text == "ok"
