"""Progress over the wire: a token is created lazily, and a silent client never holds a reply."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from lsprotocol import types

from imprintd import wire_events
from imprintd.wire_events import WireEvents


class FakeProgress:
    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.sent: list[tuple[str, object]] = []

    async def create_async(self, token):
        if not self.answer:
            await asyncio.Event().wait()  # a client that never answers
        self.sent.append(("create", token))

    def begin(self, token, value):
        self.sent.append(("begin", value.message))

    def report(self, token, value):
        self.sent.append(("report", value.message))

    def end(self, token, value):
        self.sent.append(("end", None))


def fake_server(answer: bool):
    capabilities = types.ClientCapabilities(window=types.WindowClientCapabilities(work_done_progress=True))
    notified: list[tuple[str, object]] = []
    return SimpleNamespace(
        work_done_progress=FakeProgress(answer),
        notified=notified,
        protocol=SimpleNamespace(
            client_capabilities=capabilities, notify=lambda method, params: notified.append((method, params))
        ),
    )


def test_deltas_are_numbered_by_part_and_only_a_part_with_text_is_called_preamble():
    server = fake_server(answer=True)
    events = WireEvents(server)
    events.begin("s1", "r1")
    events.text_was_preamble()  # a round that wrote nothing before its tool call: nothing to take back
    events.text("Let me look.")
    events.text_was_preamble()
    events.text("Port ")
    events.text("8101.")
    assert server.notified == [
        ("imprint/replyDelta", {"sessionId": "s1", "replyId": "r1", "part": 0, "text": "Let me look."}),
        ("imprint/replyPreamble", {"sessionId": "s1", "replyId": "r1", "part": 0}),
        ("imprint/replyDelta", {"sessionId": "s1", "replyId": "r1", "part": 1, "text": "Port "}),
        ("imprint/replyDelta", {"sessionId": "s1", "replyId": "r1", "part": 1, "text": "8101."}),
    ]


def test_reasoning_goes_out_apart_in_its_part_and_a_part_that_only_thought_is_closed():
    server = fake_server(answer=True)
    events = WireEvents(server)
    events.begin("s1", "r1")
    events.reasoning("")  # nothing to send
    events.reasoning("I should search.")
    events.text_was_preamble()  # the round thought, wrote nothing, and called a tool
    events.reasoning("It says 8101.")
    events.text("Port 8101.")
    assert server.notified == [
        ("imprint/replyReasoning", {"sessionId": "s1", "replyId": "r1", "part": 0, "text": "I should search."}),
        ("imprint/replyPreamble", {"sessionId": "s1", "replyId": "r1", "part": 0}),
        ("imprint/replyReasoning", {"sessionId": "s1", "replyId": "r1", "part": 1, "text": "It says 8101."}),
        ("imprint/replyDelta", {"sessionId": "s1", "replyId": "r1", "part": 1, "text": "Port 8101."}),
    ]


async def test_progress_begins_reports_and_ends_once_the_token_exists():
    server = fake_server(answer=True)
    events = WireEvents(server)
    events.progress("Analyzing section 1 of 2", 0)
    events.progress("Analyzing section 2 of 2", 50)
    await events.finish()
    assert [kind for kind, _ in server.work_done_progress.sent] == ["create", "begin", "report", "end"]


async def test_a_client_that_never_accepts_the_token_does_not_hold_the_reply(monkeypatch):
    monkeypatch.setattr(wire_events, "CREATE_TIMEOUT_S", 0.1)
    server = fake_server(answer=False)
    events = WireEvents(server)
    events.progress("Analyzing section 1 of 2", 0)
    await asyncio.wait_for(events.finish(), 30)
    assert server.work_done_progress.sent == []


async def test_no_progress_is_sent_without_client_support_or_a_token():
    server = fake_server(answer=True)
    server.protocol.client_capabilities = types.ClientCapabilities()
    events = WireEvents(server)
    events.progress("Indexing the workspace: 1 of 2 files", 50)
    await events.finish()
    assert server.work_done_progress.sent == []
