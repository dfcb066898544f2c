"""imprint/chat and the session methods end to end: the real daemon over stdio, a real
OpenAI-compatible server on loopback as the model, Neovim's and VS Code's capabilities."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcException

from tests.openai_stub import StubReply, drop_connection, unavailable


async def chat(client, **params):
    return await client.protocol.send_request_async("imprint/chat", params)


def deltas(client, reply_id: str) -> str:
    return "".join(p.text for m, p in client.notifications if m == "imprint/replyDelta" and p.replyId == reply_id)


async def test_chat_streams_the_answer_and_stores_both_messages(client, stub):
    stub.queue("Paris is the capital of France.")
    result = await chat(client, text="What is the capital of France?")
    assert result.text == "Paris is the capital of France."
    assert result.stopReason == "answer"
    assert deltas(client, result.replyId) == result.text  # streamed before the result, in order

    sent = stub.requests[0]
    assert sent["stream"] is True
    assert sent["messages"][0]["role"] == "system"
    assert sent["messages"][-1] == {"role": "user", "content": "What is the capital of France?"}

    session = await client.protocol.send_request_async("imprint/session", {"sessionId": result.sessionId})
    assert [(m.seq, m.role, m.content) for m in session.messages] == [
        (1, "user", "What is the capital of France?"),
        (2, "assistant", "Paris is the capital of France."),
    ]


async def test_text_before_a_tool_call_streams_as_a_preamble_part_and_the_answer_as_the_next(client, stub, tmp_path):
    (tmp_path / "workspace" / "billing.yaml").write_text("billing:\n  port: 8101\n")
    stub.queue(
        StubReply(
            text="Let me look for the billing config.",
            tool_calls=[{"name": "search", "arguments": {"query": "billing port"}}],
        ),
        "Billing listens on 8101.",
    )
    result = await chat(client, text="Which port does billing use?")
    assert result.text == "Billing listens on 8101." and result.stopReason == "answer"
    events = [(m, p) for m, p in client.notifications if getattr(p, "replyId", None) == result.replyId]
    kinds = [m if m != "imprint/toolStep" else f"toolStep:{p.state}" for m, p in events]
    first_step = kinds.index("toolStep:started")
    assert kinds[kinds.index("imprint/replyPreamble") + 1] == "toolStep:started"
    assert kinds[0] == "imprint/contextUsage"  # what fills the round's context, before it is sent
    assert all(k == "imprint/replyDelta" for k in kinds[1 : first_step - 1])
    preamble = [p for m, p in events if m == "imprint/replyPreamble"]
    assert [p.part for p in preamble] == [0]
    parts: dict[int, str] = {}
    for m, p in events:
        if m == "imprint/replyDelta":
            parts[p.part] = parts.get(p.part, "") + p.text
    assert parts == {0: "Let me look for the billing config.", 1: "Billing listens on 8101."}


async def test_a_follow_up_sends_the_earlier_exchange(client, stub):
    stub.queue("It is Paris.", "About two million people.")
    first = await chat(client, text="Capital of France?")
    await chat(client, text="How many people live there?", sessionId=first.sessionId)
    roles = [(m["role"], m["content"]) for m in stub.requests[1]["messages"][1:]]
    assert roles == [
        ("user", "Capital of France?"),
        ("assistant", "It is Paris."),
        ("user", "How many people live there?"),
    ]


async def test_sessions_list_get_and_delete(client, stub):
    stub.queue("one", "two")
    a = await chat(client, text="First question")
    b = await chat(client, text="Second question")
    listed = await client.protocol.send_request_async("imprint/sessions", {})
    assert [s.sessionId for s in listed.sessions][:2] == [b.sessionId, a.sessionId]
    assert listed.sessions[0].title == "Second question" and listed.sessions[0].messageCount == 2

    deleted = await client.protocol.send_request_async("imprint/deleteSession", {"sessionId": a.sessionId})
    assert deleted.deleted is True
    listed = await client.protocol.send_request_async("imprint/sessions", {})
    assert a.sessionId not in [s.sessionId for s in listed.sessions]
    with pytest.raises(JsonRpcException) as error:
        await client.protocol.send_request_async("imprint/session", {"sessionId": a.sessionId})
    assert error.value.code == -32602 and a.sessionId in error.value.message


async def test_cancel_stops_the_reply_and_keeps_the_question(client, stub):
    hold = threading.Event()
    stub.queue(StubReply(text="This answer will never finish", hold=hold))
    request = client.protocol.send_request("imprint/chat", {"text": "Tell me a long story"})
    try:
        await asyncio.wait_for(client.wait_for_notification("imprint/replyDelta"), 60)
        client.protocol.notify("$/cancelRequest", types.CancelParams(id=_last_request_id(client)))
        with pytest.raises(JsonRpcException) as error:
            await asyncio.wait_for(asyncio.wrap_future(request), 60)
        assert error.value.code == -32800
    finally:
        hold.set()
    listed = await client.protocol.send_request_async("imprint/sessions", {})
    session = await client.protocol.send_request_async("imprint/session", {"sessionId": listed.sessions[0].sessionId})
    assert [(m.role, m.content) for m in session.messages] == [("user", "Tell me a long story")]


def _last_request_id(client):
    pending = [key for key in client.protocol._request_futures]
    return pending[-1]


async def test_unreachable_model_fails_the_reply_with_the_cause_and_keeps_serving(client, stub, daemon_env):
    # Three tries the server answers 503 (retried at once: Retry-After 0, not the 1+2+4 s backoff),
    # then the last retry's connection dropped.
    stub.queue(*unavailable(3), drop_connection)
    with pytest.raises(JsonRpcException) as error:
        await chat(client, text="Is anyone there?")
    assert error.value.code == -32803
    assert "/" not in error.value.message.split("http")[0]  # no local paths, no traceback
    listed = await client.protocol.send_request_async("imprint/sessions", {})
    session = await client.protocol.send_request_async("imprint/session", {"sessionId": listed.sessions[0].sessionId})
    assert [(m.role, m.content) for m in session.messages] == [("user", "Is anyone there?")]


def _snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


async def test_persist_false_leaves_the_data_dir_byte_for_byte_unchanged(client, stub, daemon_env):
    stub.queue("stored", "not stored", "still not stored")
    await chat(client, text="A stored question")
    data_dir = Path(daemon_env["IMPRINT_DATA_DIR"])
    before = _snapshot(data_dir)
    first = await chat(client, text="An ephemeral question", persist=False)
    await chat(client, text="And a follow-up", sessionId=first.sessionId)
    assert _snapshot(data_dir) == before
    session = await client.protocol.send_request_async("imprint/session", {"sessionId": first.sessionId})
    assert session.session.persist is False
    assert [m.content for m in session.messages] == [
        "An ephemeral question",
        "not stored",
        "And a follow-up",
        "still not stored",
    ]


async def test_short_requests_are_answered_while_a_reply_is_generating(client, stub):
    hold = threading.Event()
    stub.queue("First answer.", StubReply(text="A slow answer that takes its time", hold=hold))
    first = await chat(client, text="First question")
    reply = asyncio.ensure_future(chat(client, text="A slow one", sessionId=first.sessionId))
    try:
        await asyncio.wait_for(client.wait_for_notification("imprint/replyDelta"), 60)
        listed = await asyncio.wait_for(client.protocol.send_request_async("imprint/sessions", {}), 60)
        summary = await asyncio.wait_for(
            client.protocol.send_request_async("imprint/summary", {"sessionId": first.sessionId}), 60
        )
        assert listed.sessions[0].sessionId == first.sessionId and summary.summary is None
        assert not reply.done()  # answered while the reply was still being written
    finally:
        hold.set()
    result = await asyncio.wait_for(reply, 60)
    assert result.text == "A slow answer that takes its time"


async def test_tool_steps_have_ids_unique_in_the_reply_when_the_model_reuses_its_own(client, stub):
    stub.queue(  # the stub names every round's first call "call_0", as many servers do
        StubReply(tool_calls=[{"name": "search", "arguments": {"query": "billing port"}}]),
        StubReply(tool_calls=[{"name": "search", "arguments": {"query": "billing config"}}]),
        "Billing listens on 8101.",
    )
    result = await client.protocol.send_request_async("imprint/chat", {"text": "Which port does billing use?"})
    steps = [
        (p.callId, p.state, p.title)
        for m, p in client.notifications
        if m == "imprint/toolStep" and p.replyId == result.replyId
    ]
    assert steps == [
        ("step-1", "started", "Searching the workspace for “billing port”"),
        ("step-1", "finished", "Searching the workspace for “billing port”"),
        ("step-2", "started", "Searching the workspace for “billing config”"),
        ("step-2", "finished", "Searching the workspace for “billing config”"),
    ]
    # The model is shown its own ids, as it wrote them.
    assert [c["id"] for m in stub.requests[1]["messages"] for c in m.get("tool_calls") or ()] == ["call_0"]


async def test_a_model_that_loops_is_stopped_and_the_reply_says_so(client, stub):
    loop = "It is set in the constructor. " + "the default value " * 400
    stub.queue(loop)
    result = await chat(client, text="What is the default salt?")
    assert result.stopReason == "repetition"
    assert result.text == (
        "It is set in the constructor.\n\n(The model started repeating itself here, so the answer was cut off.)"
    )
    assert len(deltas(client, result.replyId)) < 400  # the stream stopped at the loop, not 1,200 words on
    session = await client.protocol.send_request_async("imprint/session", {"sessionId": result.sessionId})
    assert session.messages[-1].content == result.text  # stored as shown


async def test_the_first_look_reaches_the_model_and_the_client_before_the_first_round(client, stub, tmp_path):
    workspace = tmp_path / "shop"
    (workspace / "services").mkdir(parents=True)
    (workspace / "services" / "billing.yaml").write_text("name: billing\nport: 8101\n", encoding="utf-8")
    # On by default for users; the tests' daemon starts with it off, so the editor turns it on.
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"imprint": {"chat": {"first_look": True}}})
    )
    stub.queue("Billing listens on 8101 [1].")
    result = await chat(client, text="Which port does billing listen on?", workspace=str(workspace))

    [sent] = stub.requests
    call, found = sent["messages"][-2], sent["messages"][-1]
    assert call["role"] == "assistant" and call["tool_calls"][0]["function"]["name"] == "search"
    assert found["role"] == "tool" and "services/billing.yaml" in found["content"] and "port: 8101" in found["content"]
    steps = [(p.state, p.title) for m, p in client.notifications if m == "imprint/toolStep"]
    assert steps == [
        ("started", "Looking in the workspace for “Which port does billing listen on?”"),
        ("finished", "Looking in the workspace for “Which port does billing listen on?”"),
    ]
    assert result.text.startswith("Billing listens on 8101")
