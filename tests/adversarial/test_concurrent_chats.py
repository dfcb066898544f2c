"""Chats sent at once in one session, over stdio: the daemon takes them in turn, in the order
they were asked, so the model answering each sees the questions before it with their answers
and the session is stored question, answer, question, answer. A chat cancelled while it waits
its turn answers -32800 and stores nothing."""

from __future__ import annotations

import threading

from tests.e2e.rawclient import RawClient, next_matching
from tests.openai_stub import StubReply


def answer_to(request: dict) -> str:
    """The scripted model's answer names the question it was asked."""
    return f"Answer to {request['messages'][-1]['content']}."


def conversation(request: dict) -> list[tuple[str, str]]:
    """What the model was shown, system prompt left out: (role, text) in order."""
    return [(m["role"], m["content"]) for m in request["messages"] if m["role"] != "system"]


def stored(raw: RawClient, session_id: str) -> list[tuple[str, str]]:
    session = raw.response(raw.request("imprint/session", {"sessionId": session_id}))["result"]
    return [(m["role"], m["content"]) for m in session["messages"]]


def start_session(raw: RawClient, stub, release: threading.Event) -> tuple[str, int]:
    """A session whose first reply is running, held by the scripted model until ``release``."""
    stub.queue(lambda request: StubReply(text=answer_to(request), hold=release))
    first = raw.request("imprint/chat", {"text": "Q1"})
    delta = next_matching(raw, lambda m: m.get("method") == "imprint/replyDelta")
    return delta["params"]["sessionId"], first


def ask_at_once(raw: RawClient, session_id: str, *questions: str) -> list[int]:
    ids = [raw.request("imprint/chat", {"text": question, "sessionId": session_id}) for question in questions]
    # Answered only after every chat above was read and started: they are all in flight now.
    assert "result" in raw.response(raw.request("imprint/sessions", {}))
    return ids


def results(raw: RawClient, ids: list[int]) -> dict[int, dict]:
    answers: dict[int, dict] = {}
    while len(answers) < len(ids):
        message = raw.next()
        assert message is not None, raw.stderr_text()[-3000:]
        if "method" not in message:
            answers[message["id"]] = message
    return answers


def test_three_chats_at_once_in_one_session_take_turns(raw, stub):
    release = threading.Event()
    raw.initialize()
    session_id, first = start_session(raw, stub, release)
    stub.queue(answer_to, answer_to)
    later = ask_at_once(raw, session_id, "Q2", "Q3")
    assert stored(raw, session_id) == [("user", "Q1")]  # before the fix: Q1 Q2 Q3, unanswered
    release.set()

    answers = results(raw, [first, *later])
    assert [answers[i]["result"]["text"] for i in (first, *later)] == [
        "Answer to Q1.",
        "Answer to Q2.",
        "Answer to Q3.",
    ]
    assert stored(raw, session_id) == [
        ("user", "Q1"),
        ("assistant", "Answer to Q1."),
        ("user", "Q2"),
        ("assistant", "Answer to Q2."),
        ("user", "Q3"),
        ("assistant", "Answer to Q3."),
    ]
    # Each model request saw the earlier questions with their answers, and its own question last.
    assert [conversation(request) for request in stub.requests] == [
        [("user", "Q1")],
        [("user", "Q1"), ("assistant", "Answer to Q1."), ("user", "Q2")],
        [
            ("user", "Q1"),
            ("assistant", "Answer to Q1."),
            ("user", "Q2"),
            ("assistant", "Answer to Q2."),
            ("user", "Q3"),
        ],
    ]


def test_a_chat_cancelled_while_waiting_its_turn_answers_32800_and_stores_nothing(raw, stub):
    release = threading.Event()
    raw.initialize()
    session_id, first = start_session(raw, stub, release)
    stub.queue(answer_to)
    waiting, last = ask_at_once(raw, session_id, "Q2", "Q3")
    raw.notify("$/cancelRequest", {"id": waiting})
    cancelled = raw.response(waiting)  # at once, while Q1 is still held
    assert cancelled["error"]["code"] == -32800
    release.set()

    answers = results(raw, [first, last])
    assert answers[last]["result"]["text"] == "Answer to Q3."
    assert stored(raw, session_id) == [
        ("user", "Q1"),
        ("assistant", "Answer to Q1."),
        ("user", "Q3"),
        ("assistant", "Answer to Q3."),
    ]
    assert [conversation(request)[-1] for request in stub.requests] == [("user", "Q1"), ("user", "Q3")]
    assert len(stub.requests) == 2  # the cancelled chat never reached the model
