"""``@modelcontextprotocol/server-everything`` over stdio and streamable HTTP, in one reply each.

The stand-in model calls, in turn: an image, a call the server answers with an error (``isError``), a long
operation that reports progress, a tool without annotations (the user is asked and says no),
then its environment made long enough to need section analysis. Asserted: what the model read
of each, the steps, the permission request, progress, and that the reply answered. Tools that
need sampling or elicitation are not offered to Imprint, which supports neither.
"""

from __future__ import annotations

import os

import pytest

from imprintd.chat import ReplyRequest
from imprintd.context.sections import WORKER_SYSTEM_PROMPT
from imprintd.models.base import Completion
from tests.helpers import make_chat
from tests.mcp.servers import EVERYTHING, EverythingHttp, everything_stdio
from tests.recording import RecordingEvents
from tests.standin import StandInModel, call

INSTALL = "npm ci --prefix tests/mcp_servers installs server-everything"
#: In CI (as for the real model) a missing server fails these tests instead of skipping them.
REQUIRED = bool(os.environ.get("CI") or os.environ.get("IMPRINT_REQUIRE_REAL_MODEL"))

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not EVERYTHING.is_file() and not REQUIRED, reason=INSTALL),
]

#: An environment variable long enough that the server's get-env result needs section analysis.
LONG = "billing-port-9202 " * 6_000


@pytest.fixture(params=["stdio", "http"])
def everything(request):
    assert EVERYTHING.is_file(), INSTALL
    if request.param == "stdio":
        yield everything_stdio(env={"LONG_NOTE": LONG})
        return
    with EverythingHttp(env={"LONG_NOTE": LONG}) as server:
        yield server.config()


async def test_images_errors_progress_permission_and_a_long_result(everything):
    model = StandInModel(n_ctx=16384)
    chat = make_chat(model, **{"chat.mcp_servers": (everything,), "chat.research_time_budget": 120})
    rounds = [
        Completion(
            text="",
            tool_calls=(
                call("everything__get-tiny-image", call_id="a"),
                call("everything__get-resource-reference", call_id="b", resourceType="Text", resourceId=0),
                call("everything__trigger-long-running-operation", call_id="c", duration=1, steps=2),
            ),
        ),
        Completion(text="", tool_calls=(call("everything__toggle-simulated-logging", call_id="d"),)),
        Completion(text="", tool_calls=(call("everything__get-env", call_id="e"),)),
    ]

    def reply(request):
        if request.system.startswith(WORKER_SYSTEM_PROMPT[:40]):
            return "The environment names billing-port-9202."
        if request.tools and rounds:
            return rounds.pop(0)
        return "Billing is on port 9202 [3]."

    model.queue(*[reply] * 40)
    events = RecordingEvents(permission="reject")
    try:
        outcome = await chat.reply(ReplyRequest(text="Which billing port does the server know?"), events)
        offered = {spec.name for spec in model.requests[0].tools}
        assert {"everything__echo", "everything__get-tiny-image", "everything__get-env"} <= offered
        # Imprint offers no sampling and no elicitation, so the server lists no tool needing them.
        assert not {name for name in offered if "sampling" in name or "elicitation" in name}

        coordinator = [r for r in model.requests if not r.system.startswith(WORKER_SYSTEM_PROMPT[:40])]
        first = {m.tool_call_id: m.content for m in coordinator[1].messages if m.role == "tool"}
        assert "(image, image/png, 4,033 bytes: not shown)" in first["a"]
        assert "iVBOR" not in first["a"]  # the PNG's base64 never reaches the model
        assert first["b"].startswith("everything answered get-resource-reference with an error:")
        assert "Invalid resourceId: 0" in first["b"]
        assert first["c"].startswith("[2] everything: trigger-long-running-operation")

        declined = [m for m in coordinator[2].messages if m.role == "tool"][-1]
        assert declined.content == "The user declined to let everything run toggle-simulated-logging; go on without it."
        (asked,) = [p for kind, p in events.log if kind == "permission"]
        assert (asked.tool, asked.read_only, asked.destructive) == ("toggle-simulated-logging", False, False)

        # The long result went through section analysis, its notes numbered under its origin.
        analyzed = [m for m in coordinator[3].messages if m.role == "tool"][-1]
        assert analyzed.content.startswith("[Section analysis] A tool result of everything__get-env was too long")
        assert "[3] Notes of worker 1 on sections 1 (" in analyzed.content
        assert LONG[:200] not in analyzed.content
        (source,) = outcome.sources
        assert (source.kind, source.label) == ("section", "notes on sections 1–9 of 10 of everything: get-env")
        assert source.origin is not None and (source.origin.server, source.origin.tool) == ("everything", "get-env")
        workers = [r for r in model.requests if r.system.startswith(WORKER_SYSTEM_PROMPT[:40])]
        assert workers and "billing-port-9202" in workers[0].text

        progress = [p for kind, p in events.log if kind == "progress"]
        assert "Asking everything: trigger-long-running-operation (1 of 2)" in progress
        states = [(p.tool, p.state) for kind, p in events.log if kind == "tool_step"]
        assert ("everything__get-resource-reference", "failed") in states
        assert ("everything__toggle-simulated-logging", "failed") in states
        assert ("everything__get-env", "finished") in states
        assert outcome.stop_reason == "answer" and outcome.text.startswith("Billing is on port 9202")
    finally:
        await chat.mcp.aclose()
