"""The running summary and conversation_history end to end (docs/decisions.md, "Running summary"): the real daemon
over stdio, a small context, the scripted OpenAI-compatible model on loopback, Neovim's and
VS Code's capabilities.

A compose file with a billing service on port 8101 is pasted early, five more exchanges follow,
the summary covers the paste, and a later question about the billing port leads to a
conversation_history call whose result holds 8101. Then the session methods return the
summary, ``imprint/conversation_history`` searches and reads the conversation exactly, bad
params are refused, and the summary goes with its session.
"""

from __future__ import annotations

import pytest
from pygls.exceptions import JsonRpcException

from imprintd.context.summary import HEADING, PROGRESS
from tests.conversations import BILLING_QUESTION, COMPOSE, FOLLOW_UPS, PASTE
from tests.e2e.summary_script import MAX_TOKENS, N_CTX, PORTS, QUERY, is_summarizer, model

INVALID_PARAMS = -32602


@pytest.fixture
def daemon_env(daemon_env):
    env = dict(daemon_env)
    env.update({"IMPRINT_CHAT_N_CTX": str(N_CTX), "IMPRINT_CHAT_MAX_TOKENS": str(MAX_TOKENS)})
    return env


async def request(client, method: str, **params):
    return await client.protocol.send_request_async(method, params)


def progress_messages(client) -> list[str]:
    return [
        value.message
        for reports in client.progress_reports.values()
        for value in reports
        if getattr(value, "message", None)
    ]


async def expect_invalid(client, method: str, **params) -> str:
    with pytest.raises(JsonRpcException) as error:
        await request(client, method, **params)
    assert error.value.code == INVALID_PARAMS, error.value
    return error.value.message


async def test_a_pasted_compose_file_is_summarized_and_looked_up_again(client, stub):
    stub.queue(*[model] * 30)

    first = await request(client, "imprint/chat", text=PASTE)
    sid = first.sessionId
    for question, reply in FOLLOW_UPS:
        result = await request(client, "imprint/chat", text=question, sessionId=sid)
        assert result.text == reply
    assert not any(is_summarizer(body) for body in stub.requests)  # it all fit so far
    assert not any(m == "imprint/summaryUpdated" for m, _ in client.notifications)

    seen = len(stub.requests)
    answer = await request(client, "imprint/chat", text=BILLING_QUESTION, sessionId=sid)
    assert answer.text == 'Billing listens on 8101: the compose file you pasted has `ports: ["8101:8101"]`.'
    assert answer.stopReason == "answer"

    # Over the wire: the summary first, covering the paste, then the lookup.
    mine = [(m, p) for m, p in client.notifications if getattr(p, "replyId", None) == answer.replyId]
    methods = [m for m, _ in mine]
    summary_at = methods.index("imprint/summaryUpdated")
    steps = [(i, p) for i, (m, p) in enumerate(mine) if m == "imprint/toolStep"]
    assert steps and all(p.tool == "conversation_history" for _, p in steps)
    assert summary_at < steps[0][0]
    assert [p.state for _, p in steps] == ["started", "finished"]
    assert steps[0][1].title == "Searching earlier in this conversation for “billing port”"
    summary = mine[summary_at][1].summary
    assert summary.firstSeq <= 1 <= summary.lastSeq
    assert summary.text.startswith("- (#1–#2) The user pasted the staging compose file.")
    assert PROGRESS in progress_messages(client)
    assert "Searching earlier in this conversation for “billing port”" in progress_messages(client)

    # What the model received: the summarizer first; then a prompt with the summary, not the paste.
    summarizer, coordinator, after_tool = stub.requests[seen:]
    assert is_summarizer(summarizer)
    system = coordinator["messages"][0]["content"]
    assert HEADING in system and summary.text in system
    assert "#1 pasted by the user" in system
    assert "conversation_history" in [tool["function"]["name"] for tool in coordinator["tools"]]
    for body in (coordinator, after_tool):
        assert all(COMPOSE not in (message["content"] or "") for message in body["messages"])
    assert coordinator["messages"][-1] == {"role": "user", "content": BILLING_QUESTION}
    result = after_tool["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == "call_hist"
    assert "8101" in result["content"] and PORTS.search(result["content"])

    # The session methods return the summary.
    stored = await request(client, "imprint/summary", sessionId=sid)
    assert stored.sessionId == sid
    assert (stored.summary.text, stored.summary.firstSeq, stored.summary.lastSeq) == (
        summary.text,
        summary.firstSeq,
        summary.lastSeq,
    )
    session = await request(client, "imprint/session", sessionId=sid)
    assert (session.summary.text, session.summary.firstSeq, session.summary.lastSeq) == (
        summary.text,
        summary.firstSeq,
        summary.lastSeq,
    )
    assert session.messages[0].seq == 1 and session.messages[0].content == PASTE
    assert [m.role for m in session.messages[-4:]] == ["user", "assistant", "tool", "assistant"]

    # imprint/conversation_history: search, and exact reads by number and offset.
    found = await request(client, "imprint/conversation_history", sessionId=sid, query=QUERY)
    assert found.sessionId == sid and "#1 user" in found.text and "8101" in found.text
    assert len(found.text) <= 4_000
    read = await request(client, "imprint/conversation_history", sessionId=sid, message=1)
    total = len(PASTE)
    assert read.text == f"#1 user, characters 0–{total} of {total:,}:\n{PASTE}\n(end of message #1)"
    offset = PASTE.index("  billing:")
    page = await request(client, "imprint/conversation_history", sessionId=sid, message=1, offset=offset)
    assert page.text == f"#1 user, characters {offset}–{total} of {total:,}:\n{PASTE[offset:]}\n(end of message #1)"
    assert page.text.split("\n", 1)[1].startswith(
        '  billing:\n    <<: *defaults\n    image: shop/billing:2.3.4\n    ports: ["8101:8101"]'
    )

    # Bad params.
    await expect_invalid(client, "imprint/conversation_history", sessionId=sid, query=QUERY, message=1)
    await expect_invalid(client, "imprint/conversation_history", sessionId=sid)
    message = await expect_invalid(client, "imprint/conversation_history", sessionId="0" * 32, query=QUERY)
    assert "0" * 32 in message
    message = await expect_invalid(client, "imprint/conversation_history", sessionId=sid, message=999)
    assert "999" in message
    await expect_invalid(client, "imprint/conversation_history", sessionId=sid, message=1, offset=total)

    # The summary goes with its session.
    deleted = await request(client, "imprint/deleteSession", sessionId=sid)
    assert deleted.deleted is True
    await expect_invalid(client, "imprint/summary", sessionId=sid)
    await expect_invalid(client, "imprint/session", sessionId=sid)
    await expect_invalid(client, "imprint/conversation_history", sessionId=sid, query=QUERY)


async def test_no_summary_is_reported_while_the_conversation_fits(client, stub):
    stub.queue(*[model] * 4)
    first = await request(client, "imprint/chat", text=PASTE)
    await request(client, "imprint/chat", text=FOLLOW_UPS[0][0], sessionId=first.sessionId)
    stored = await request(client, "imprint/summary", sessionId=first.sessionId)
    assert stored.summary is None
    session = await request(client, "imprint/session", sessionId=first.sessionId)
    assert session.summary is None
    assert not any(m == "imprint/summaryUpdated" for m, _ in client.notifications)
    assert PROGRESS not in progress_messages(client)
    # Both replies were offered the lookup tool: the tools stay put from the first reply on.
    offered = [[tool["function"]["name"] for tool in body.get("tools", [])] for body in stub.requests]
    assert "conversation_history" in offered[0] and offered[0] == offered[1]
