"""Servers that fail: a command that does not exist, one that hangs at ``initialize``, one that
writes what is not JSON, one that exits in the middle of a call. Each reply still answers within
its time budget, each failure is reported once (a failed step), a working server beside them
keeps serving, and the next reply is served too. No process outlives its failure.
"""

from __future__ import annotations

import msgspec
import pytest

from imprintd.chat import ReplyRequest
from imprintd.mcp.config import parse_servers
from tests.helpers import make_chat, tool_turn
from tests.mcp.servers import (
    EXITS_MID_CALL,
    HANGS_AT_INITIALIZE,
    WRITES_GARBAGE,
    alive,
    git_repo,
    git_server,
    processes_under,
    script_server,
)
from tests.recording import RecordingEvents
from tests.standin import StandInModel, call

pytestmark = pytest.mark.timeout(120)

#: The reply's time budget: research gets 4.8 s of it, and starting the servers half of that.
BUDGET_S = 6


async def test_servers_that_cannot_start_are_reported_once_and_the_replies_go_on(tmp_path):
    (missing,) = parse_servers({"missing": {"command": str(tmp_path / "no-such-server")}})
    servers = (
        missing,
        script_server(tmp_path, "hangs", HANGS_AT_INITIALIZE),
        script_server(tmp_path, "garbage", WRITES_GARBAGE),
    )
    model = StandInModel(n_ctx=8192)
    chat = make_chat(model, **{"chat.mcp_servers": servers, "chat.research_time_budget": BUDGET_S})
    model.queue("Answered without them.")
    events = RecordingEvents()
    try:
        with_time = await chat.reply(ReplyRequest(text="What is the status?"), events)
        assert with_time.text == "Answered without them." and with_time.stop_reason == "answer"
        failed = {p.tool: (p.state, p.detail) for kind, p in events.log if kind == "tool_step"}
        assert failed == {
            "missing__": (
                "failed",
                f"MCP server missing is left out of this reply: the command was not found ({tmp_path}/no-such-server)",
            ),
            "hangs__": (
                "failed",
                "MCP server hangs is left out of this reply: it did not finish starting (initialize and tools/list) "
                "within 2 s",
            ),
            "garbage__": (
                "failed",
                "MCP server garbage is left out of this reply: wrote something that is not an MCP message "
                "(the line 'this is not JSON-RPC')",
            ),
        }
        assert [spec.name for spec in model.requests[0].tools] == ["conversation_history"]
        assert {row.name: row.state for row in chat.mcp.status()} == dict.fromkeys(
            ("missing", "hangs", "garbage"), "failed"
        )

        # The next reply is served at once; the failures are not reported again (retried a minute on).
        model.queue("Still here.")
        events = RecordingEvents()
        again = await chat.reply(ReplyRequest(text="Are you there?", session_id=with_time.session_id), events)
        assert again.text == "Still here."
        assert not [p for kind, p in events.log if kind == "tool_step"]
    finally:
        await chat.mcp.aclose()
    assert not processes_under(tmp_path)


async def test_a_server_that_exits_mid_call_fails_that_call_and_the_others_answer(tmp_path):
    repo = git_repo(tmp_path / "repo")
    flaky = script_server(tmp_path, "flaky", EXITS_MID_CALL)
    flaky = msgspec.structs.replace(flaky, args=(*flaky.args, str(tmp_path / "flaky.pid")))
    model = StandInModel(n_ctx=32768)
    chat = make_chat(model, **{"chat.mcp_servers": (flaky, git_server(repo))})
    model.queue(
        tool_turn(call("flaky__lookup", word="port"), call("git__git_status", call_id="c2", repo_path=str(repo))),
        "Answered from git [1].",
    )
    events = RecordingEvents()
    try:
        outcome = await chat.reply(ReplyRequest(text="What is the status?"), events)
        assert outcome.text.startswith("Answered from git [1].")
        assert {"flaky__lookup", "git__git_status"} <= {spec.name for spec in model.requests[0].tools}
        results = {m.tool_call_id: m.content for m in model.requests[1].messages if m.role == "tool"}
        assert results["call_1"] == (
            "The MCP server flaky is unavailable: the connection ended during a call of lookup (Connection closed)."
        )
        assert results["c2"].startswith("[1] git: git_status")
        steps = [(p.tool, p.state) for kind, p in events.log if kind == "tool_step" and p.state != "started"]
        assert steps == [("flaky__lookup", "failed"), ("git__git_status", "finished")]
        assert not alive(int((tmp_path / "flaky.pid").read_text()))
        assert {row.name: row.state for row in chat.mcp.status()} == {"flaky": "failed", "git": "ready"}

        model.queue("Next.")
        next_reply = await chat.reply(ReplyRequest(text="And now?", session_id=outcome.session_id), RecordingEvents())
        assert next_reply.text == "Next."
        offered = {spec.name for spec in model.requests[-1].tools}
        assert "git__git_status" in offered and "flaky__lookup" not in offered
    finally:
        await chat.mcp.aclose()
    assert not processes_under(tmp_path)
