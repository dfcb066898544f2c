"""Every MCP call is bounded: by the reply's research time (a call past it is stopped and the
reply goes on) and by the reply itself (a cancelled reply cancels its call). The server stays
usable after both."""

from __future__ import annotations

import anyio
import pytest

from imprintd.chat import ReplyRequest
from tests.helpers import make_chat, tool_turn
from tests.mcp.servers import ASKER, script_server
from tests.recording import RecordingEvents
from tests.standin import StandInModel, call

pytestmark = pytest.mark.timeout(120)


async def test_a_call_past_the_replys_time_is_stopped_and_the_reply_answers(tmp_path):
    model = StandInModel(n_ctx=32768)
    asker = script_server(tmp_path, "asker", ASKER)
    # The call is stopped when research time runs out (80% of the budget, the server's start
    # included): 4 s leaves the start seconds to spare on a loaded machine, and no more to wait.
    chat = make_chat(model, **{"chat.mcp_servers": (asker,), "chat.research_time_budget": 4})
    model.queue(tool_turn(call("asker__wait", seconds=3600)), "It did not answer in time.")
    events = RecordingEvents()
    try:
        outcome = await chat.reply(ReplyRequest(text="Wait for it."), events)
        assert outcome.text.startswith("It did not answer in time.")
        (failed,) = [p for kind, p in events.log if kind == "tool_step" and p.state == "failed"]
        assert failed.tool == "asker__wait"
        assert failed.detail.startswith("asker did not answer wait within ") and failed.detail.endswith(" s.")

        model.queue(tool_turn(call("asker__wait", seconds=0)), "Waited [1].")
        again = await chat.reply(ReplyRequest(text="Once more.", session_id=outcome.session_id), RecordingEvents())
        assert again.text.startswith("Waited [1].")
        assert model.requests[-1].messages[-1].content.endswith("\nwaited")
    finally:
        await chat.mcp.aclose()


async def test_a_cancelled_reply_cancels_its_call_and_the_server_serves_the_next(tmp_path):
    model = StandInModel(n_ctx=32768)
    asker = script_server(tmp_path, "asker", ASKER)
    chat = make_chat(model, **{"chat.mcp_servers": (asker,)})
    model.queue(tool_turn(call("asker__wait", seconds=3600)))

    class CancelOnCall(RecordingEvents):
        scope: anyio.CancelScope | None = None

        def tool_step(self, step) -> None:
            super().tool_step(step)
            if step.state == "started" and self.scope is not None:
                self.scope.cancel()  # the user cancels while the call runs

    events = CancelOnCall()
    try:
        with anyio.CancelScope() as scope:
            events.scope = scope
            await chat.reply(ReplyRequest(text="Wait for it."), events)
        assert scope.cancelled_caught
        assert [p.state for kind, p in events.log if kind == "tool_step"] == ["started"]
        assert [row.state for row in chat.mcp.status()] == ["ready"]

        model.queue(tool_turn(call("asker__wait", seconds=0)), "Waited [1].")
        again = await chat.reply(ReplyRequest(text="Once more."), RecordingEvents())
        assert again.text.startswith("Waited [1].")
    finally:
        await chat.mcp.aclose()
