"""What fills the context, over the wire: ``imprint/contextUsage`` before each research round and
``imprint/context`` for the next question, from the real daemon on the scripted remote model."""

from __future__ import annotations

import pytest
from pygls.exceptions import JsonRpcException

from tests.openai_stub import StubReply


def usages(client, reply_id: str) -> list:
    return [p for m, p in client.notifications if m == "imprint/contextUsage" and p.replyId == reply_id]


def parts_total(usage) -> int:
    parts = usage.parts
    return parts.system + parts.tools + parts.summary + parts.earlier + parts.question + parts.research


async def test_each_round_reports_its_context_and_the_next_question_can_be_asked_about(client, stub):
    stub.queue(
        StubReply(tool_calls=[{"name": "search", "id": "call_0", "arguments": {"query": "billing port"}}]),
        "Billing listens on 8101.",
    )
    result = await client.protocol.send_request_async("imprint/chat", {"text": "Which port does billing use?"})

    first, second = usages(client, result.replyId)  # one per coordinator round
    assert len(stub.requests) == 2
    for usage in (first, second):
        assert usage.sessionId == result.sessionId
        assert (usage.nCtx, usage.outputAllowance, usage.exact) == (8192, 1024, False)  # remote: estimated
        assert parts_total(usage) == usage.used and usage.used + usage.outputAllowance <= usage.nCtx
        assert usage.parts.tools > 0 and usage.parts.summary == usage.parts.earlier == 0
        assert (usage.inView, usage.summarized, usage.dropped) == ([[1, 1]], [], [])  # the question alone
    assert first.parts.research == 0 and second.parts.research > 0
    assert second.used == first.used + second.parts.research
    # Each report went out before its round's request reached the model: before the tool step.
    methods = [m for m, p in client.notifications if getattr(p, "replyId", None) == result.replyId]
    assert methods.index("imprint/contextUsage") < methods.index("imprint/toolStep")

    ahead = await client.protocol.send_request_async("imprint/context", {"sessionId": result.sessionId})
    assert (ahead.sessionId, ahead.replyId) == (result.sessionId, None)
    assert ahead.parts.question == ahead.parts.research == 0 and parts_total(ahead) == ahead.used
    assert ahead.parts.earlier > second.parts.question  # the question, the search and the answer
    assert (ahead.inView, ahead.summarized, ahead.dropped) == ([[1, 4]], [], [])
    assert len(stub.requests) == 2  # asking what fills the context asks the model nothing

    # The next question gets exactly that, and its own tokens.
    stub.queue("Still 8101.")
    follow_up = await client.protocol.send_request_async(
        "imprint/chat", {"text": "Still?", "sessionId": result.sessionId}
    )
    [asked] = usages(client, follow_up.replyId)
    for part in ("system", "tools", "summary", "earlier"):
        assert getattr(asked.parts, part) == getattr(ahead.parts, part), part
    assert asked.used == ahead.used + asked.parts.question and asked.parts.question > 0
    assert asked.inView == [[1, 5]]
    # The tools stay put from the first reply on (conversation_history included).
    assert asked.parts.tools == second.parts.tools

    with pytest.raises(JsonRpcException) as error:
        await client.protocol.send_request_async("imprint/context", {"sessionId": "no-such-session"})
    assert error.value.code == -32602 and "no-such-session" in error.value.message
