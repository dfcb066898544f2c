"""A reasoning model end to end: the real daemon over stdio, the remote provider
against a scripted OpenAI-compatible server that sends ``reasoning_content``, as llama.cpp's
server and vLLM do with a reasoning parser.

Its thoughts reach the client as ``imprint/replyReasoning``, never as ``imprint/replyDelta``;
they are stored with the answer (``imprint/session``) and never sent back to the model; the
model is announced as reasoning (``imprint/modelChanged``) once it has.
"""

from __future__ import annotations

from tests.openai_stub import StubReply


async def chat(client, **params):
    return await client.protocol.send_request_async("imprint/chat", params)


def of_reply(client, method: str, reply_id: str) -> list:
    return [p for m, p in client.notifications if m == method and getattr(p, "replyId", None) == reply_id]


async def test_thoughts_stream_as_reasoning_not_as_reply_text_and_are_stored(client, stub):
    stub.queue(
        StubReply(reasoning="The user wants the capital. It is Paris.", text="Paris."),
        "About two million.",
    )
    result = await chat(client, text="What is the capital of France?")
    assert result.text == "Paris." and result.stopReason == "answer"
    thoughts = of_reply(client, "imprint/replyReasoning", result.replyId)
    assert "".join(p.text for p in thoughts) == "The user wants the capital. It is Paris."
    assert {p.part for p in thoughts} == {0} and {p.sessionId for p in thoughts} == {result.sessionId}
    assert "".join(p.text for p in of_reply(client, "imprint/replyDelta", result.replyId)) == "Paris."

    session = await client.protocol.send_request_async("imprint/session", {"sessionId": result.sessionId})
    answer = session.messages[-1]
    assert (answer.role, answer.content, answer.reasoning) == (
        "assistant",
        "Paris.",
        "The user wants the capital. It is Paris.",
    )
    assert session.messages[0].reasoning == ""

    await chat(client, text="How many people live there?", sessionId=result.sessionId)
    sent = stub.requests[1]["messages"]
    assert {"role": "assistant", "content": "Paris."} in sent
    assert all("wants the capital" not in str(message) for message in sent)


async def test_a_round_that_thinks_then_calls_a_tool_is_a_part_of_its_own(client, stub, tmp_path):
    (tmp_path / "workspace" / "billing.yaml").write_text("billing:\n  port: 8101\n")
    stub.queue(
        StubReply(
            reasoning="I should search for it.", tool_calls=[{"name": "search", "arguments": {"query": "billing"}}]
        ),
        StubReply(reasoning="The file says 8101.", text="Billing listens on 8101."),
    )
    result = await chat(client, text="Which port does billing use?")
    assert result.text == "Billing listens on 8101."
    parts: dict[int, str] = {}
    for p in of_reply(client, "imprint/replyReasoning", result.replyId):
        parts[p.part] = parts.get(p.part, "") + p.text
    assert parts == {0: "I should search for it.", 1: "The file says 8101."}
    # The part that only thought is closed before its tool step, like one that wrote text.
    assert [p.part for p in of_reply(client, "imprint/replyPreamble", result.replyId)] == [0]
    assert {p.part for p in of_reply(client, "imprint/replyDelta", result.replyId)} == {1}


async def test_the_model_is_announced_as_reasoning_once_it_has(client, stub):
    stub.queue("Hello.", StubReply(reasoning="Greet back.", text="Hi."))
    await chat(client, text="Hi")
    assert not [p for m, p in client.notifications if m == "imprint/modelChanged"]
    await chat(client, text="Hi again")
    # Sent before the reply's result, so it has been handled by now.
    changed = [p for m, p in client.notifications if m == "imprint/modelChanged"]
    assert [(p.provider, p.chatFormat, p.reasons) for p in changed] == [("openai", "openai", True)]
