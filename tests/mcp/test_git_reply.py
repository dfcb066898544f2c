"""Replies that research a real repository's history through ``mcp-server-git`` over stdio.

The stand-in model scripts the calls; the server, its process, its schemas and its answers are
real. Asserted: what the model was offered and shown, the result's number and the answer's
source, what was stored, the tool steps, the permission asked for a tool that writes, and that
no server process outlives ``aclose``.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from imprintd.chat import ReplyRequest
from imprintd.mcp.tools import MCP_SHARE, schema_tokens
from imprintd.messages import ToolCall
from imprintd.models.base import Completion
from tests.helpers import make_chat, tool_turn
from tests.mcp.servers import ASKER, git_repo, git_server, processes_under, script_server
from tests.recording import RecordingEvents
from tests.standin import StandInModel, call

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return git_repo(tmp_path_factory.mktemp("mcp-git") / "shop")


def chat_with(model, repo, **settings):
    server = git_server(repo)
    return make_chat(model, **{"chat.mcp_servers": (server,), **settings}), server


async def test_a_reply_answers_from_git_log_and_cites_it(repo):
    model = StandInModel(n_ctx=32768)  # room for all 12 schemas: offered as they are
    chat, server = chat_with(model, repo)

    def answer(request):
        shown = request.messages[-1].content
        assert shown.startswith("[1] git: git_log")
        return "Billing moved to port 9202 behind the gateway [1]."

    model.queue(tool_turn(call("git__git_log", repo_path=str(repo), max_count=5)), answer)
    events = RecordingEvents()
    outcome = await chat.reply(ReplyRequest(text="When did billing move to port 9202?"), events)
    try:
        first, second = model.requests
        offered = {spec.name: spec for spec in first.tools}
        assert {"git__git_log", "git__git_status", "git__git_commit", "git__git_show"} <= set(offered)
        # The server's own schema, as it listed it (without its title).
        assert offered["git__git_log"].parameters["required"] == ["repo_path"]
        assert "max_count" in offered["git__git_log"].parameters["properties"]

        # The model read the real log, numbered as one source.
        shown = second.messages[-1]
        assert shown.role == "tool" and shown.name == "git__git_log"
        label = f'git: git_log {{"max_count": 5, "repo_path": "{repo}"}}'
        assert shown.content.startswith(f"[1] {label}\n")
        assert "Move billing to port 9202 behind the gateway" in shown.content
        assert "Author: Ada" in shown.content

        (source,) = outcome.sources
        assert (source.number, source.kind, source.label, source.cited) == (1, "tool", label, True)
        assert source.origin is not None
        assert (source.origin.server, source.origin.tool) == ("git", "git_log")
        assert source.origin.arguments == {"repo_path": str(repo), "max_count": 5}
        assert outcome.text.endswith(f"Sources:\n[1] {label}")

        # Stored as the user sees it, and as the model read it.
        stored = chat.store.messages(outcome.session_id)
        tool = next(m for m in stored if m.role == "tool")
        assert "Move billing to port 9202" in tool.content and not tool.content.startswith("[1]")
        assert tool.model_text == shown.content
        assert stored[-1].sources == outcome.sources

        steps = [payload for kind, payload in events.log if kind == "tool_step"]
        assert [(s.tool, s.title, s.state) for s in steps] == [
            ("git__git_log", "Asking git: git_log", "started"),
            ("git__git_log", "Asking git: git_log", "finished"),
        ]
        assert not [payload for kind, payload in events.log if kind == "permission"]  # read-only: not asked
        assert [row.state for row in chat.mcp.status()] == ["ready"]
        assert processes_under(repo)
    finally:
        await chat.mcp.aclose()
    assert not processes_under(repo)  # stopped with its process


async def test_a_tool_that_writes_asks_first_and_always_lasts_for_the_session(repo):
    model = StandInModel(n_ctx=32768)
    chat, _ = chat_with(model, repo)
    events = RecordingEvents(permission="reject")
    model.queue(tool_turn(call("git__git_create_branch", repo_path=str(repo), branch_name="refused")), "Not made.")
    try:
        refused = await chat.reply(ReplyRequest(text="Make a branch called refused."), events)
        (asked,) = [payload for kind, payload in events.log if kind == "permission"]
        assert (asked.server, asked.tool, asked.title) == ("git", "git_create_branch", "Asking git: git_create_branch")
        assert asked.arguments == {"repo_path": str(repo), "branch_name": "refused"}
        assert (asked.read_only, asked.destructive, asked.call_id) == (False, False, "step-1")
        told = model.requests[-1].messages[-1]
        assert told.role == "tool" and "declined" in told.content
        assert refused.text == "Not made."
        assert "refused" not in _branches(repo)

        # "Always": this session's later calls of the same tool run without asking.
        events = RecordingEvents(permission="allow_always")
        model.queue(tool_turn(call("git__git_create_branch", repo_path=str(repo), branch_name="first")), "Made.")
        await chat.reply(ReplyRequest(text="Make a branch called first.", session_id=refused.session_id), events)
        assert len([1 for kind, _ in events.log if kind == "permission"]) == 1
        events = RecordingEvents(permission="reject")
        model.queue(tool_turn(call("git__git_create_branch", repo_path=str(repo), branch_name="second")), "Made.")
        await chat.reply(ReplyRequest(text="And one called second.", session_id=refused.session_id), events)
        assert not [1 for kind, _ in events.log if kind == "permission"]
        assert {"first", "second"} <= set(_branches(repo))

        # Another session is asked again.
        model.queue(tool_turn(call("git__git_create_branch", repo_path=str(repo), branch_name="third")), "No.")
        events = RecordingEvents(permission="reject")
        await chat.reply(ReplyRequest(text="Make a branch called third."), events)
        assert len([1 for kind, _ in events.log if kind == "permission"]) == 1
        assert "third" not in _branches(repo)
    finally:
        await chat.mcp.aclose()


def _branches(repo) -> list[str]:
    listed = subprocess.run(
        ["git", "-C", str(repo), "branch", "--format=%(refname:short)"], capture_output=True, text=True
    )
    return listed.stdout.split()


def run_tool(call_id: str, name: str, arguments: dict) -> ToolCall:
    """A ``call_tool`` call (``call()`` takes ``name`` for the tool's own name)."""
    return ToolCall(id=call_id, name="call_tool", arguments={"name": name, "arguments": arguments})


async def test_in_a_small_window_the_model_gets_find_tools_and_call_tool(repo):
    model = StandInModel(n_ctx=8192)
    chat, server = chat_with(model, repo)

    def pick(request):
        listed = request.messages[-1].content
        assert listed.splitlines()[0].startswith("git__git_log: ")
        return tool_turn(run_tool("c2", "git__git_log", {"repo_path": str(repo)}))

    model.queue(
        tool_turn(call("find_tools", query="commit history log")),
        pick,
        tool_turn(run_tool("c3", "git__git_log", {"max_count": 2})),
        "Rollouts were documented last [1].",
    )
    events = RecordingEvents()
    try:
        outcome = await chat.reply(ReplyRequest(text="What was committed last?"), events)
        first = model.requests[0]
        names = [spec.name for spec in first.tools]
        assert names[-2:] == ["find_tools", "call_tool"] and not any("__" in name for name in names)
        # All 12 schemas would have taken more than the share of this window.
        infos = await chat.mcp.tools_for([server], session_id="x", events=None, timeout=10)
        from imprintd.mcp.tools import CallContext, McpTool

        context = CallContext(servers=chat.mcp, events=events, session_id="x", time_left=lambda: 60.0)
        specs = [McpTool(info, context).spec for info in infos]
        assert schema_tokens(model.count_prompt, specs) > MCP_SHARE * 8192
        assert schema_tokens(model.count_prompt, first.tools[-2:]) <= MCP_SHARE * 4096

        ran = model.requests[2].messages[-1]
        assert ran.name == "call_tool" and ran.content.startswith("[1] git: git_log")
        refused = model.requests[3].messages[-1]
        assert refused.content == "Error: git__git_log needs repo_path (a string)"
        assert outcome.sources[0].origin is not None and outcome.sources[0].origin.tool == "git_log"
        titles = [p.title for kind, p in events.log if kind == "tool_step" and p.state == "started"]
        assert titles == ["Finding MCP tools for “commit history log”", "Asking git: git_log", "Asking git: git_log"]
    finally:
        await chat.mcp.aclose()


async def test_context_usage_counts_the_offered_mcp_schemas(repo):
    model = StandInModel(n_ctx=8192)
    chat, _ = chat_with(model, repo)
    model.queue("Hello.")
    try:
        outcome = await chat.reply(ReplyRequest(text="Hi"), RecordingEvents())
        usage = await chat.context_usage(outcome.session_id)
        offered = model.requests[0].tools
        assert [spec.name for spec in offered][-2:] == ["find_tools", "call_tool"]
        assert usage.parts.tools == model.count_tools(offered)
    finally:
        await chat.mcp.aclose()


async def test_sampling_and_elicitation_are_declined_a_tool_without_annotations_asks_and_a_changed_list_is_relisted(
    tmp_path,
):
    model = StandInModel(n_ctx=32768)
    asker = script_server(tmp_path, "asker", ASKER)
    chat = make_chat(model, **{"chat.mcp_servers": (asker,)})
    model.queue(
        Completion(
            text="",
            tool_calls=(
                call("asker__summarize", call_id="a", text="a long text"),
                call("asker__confirm", call_id="b", question="Go on?"),
                call("asker__grow", call_id="c"),
                call("asker__note", call_id="d", text="remember this"),
            ),
        ),
        "Declined [1].",
    )
    events = RecordingEvents(permission="reject")
    try:
        outcome = await chat.reply(ReplyRequest(text="Summarize it"), events)
        assert outcome.text.startswith("Declined")
        (asked,) = [p for kind, p in events.log if kind == "permission"]
        # No annotations: it may write and may destroy, so the user is asked.
        assert (asked.tool, asked.read_only, asked.destructive) == ("note", False, True)
        shown = "\n".join(m.content for m in model.requests[1].messages if m.role == "tool")
        assert "sampling declined: Sampling not supported" in shown
        assert "elicitation declined: Elicitation not supported" in shown
        assert "asker__extra" not in [spec.name for spec in model.requests[0].tools]
        model.queue("Done.")
        await chat.reply(ReplyRequest(text="Again"), RecordingEvents())
        assert "asker__extra" in [spec.name for spec in model.requests[-1].tools]
    finally:
        await chat.mcp.aclose()


def test_arguments_label_is_the_calls_json():
    # The label a source shows is the call's arguments as JSON, keys sorted: what clients show.
    from imprintd.messages import ToolOrigin
    from imprintd.research.citations import origin_label

    origin = ToolOrigin(server="git", tool="git_log", arguments={"repo_path": "/r", "max_count": 2}, uri=None)
    assert origin_label(origin) == 'git: git_log {"max_count": 2, "repo_path": "/r"}'
    long = ToolOrigin(server="docs", tool="read", arguments={"q": "x" * 200}, uri="https://example.com/a")
    assert origin_label(long) == 'docs: read {"q": "' + "x" * 72 + "…" + " (https://example.com/a)"
    assert len(json.dumps(long.arguments)) > 80


async def test_a_sessions_own_server_is_used_for_its_replies_and_stopped_when_it_is_released(repo, tmp_path):
    other = git_repo(tmp_path / "other")
    model = StandInModel(n_ctx=32768)
    chat, configured = chat_with(model, repo)
    own = git_server(other)  # named "git" too: the session's takes the configured one's place
    model.queue(tool_turn(call("git__git_log", repo_path=str(other))), "From the other repository [1].")
    try:
        outcome = await chat.reply(ReplyRequest(text="What is in the log?", mcp_servers=(own,)), RecordingEvents())
        assert "Message: Add the billing service on port 8101" in model.requests[1].messages[-1].content
        assert processes_under(other) and not processes_under(repo)  # the configured one never started
        assert [row.target for row in chat.mcp.status()] == [configured.described(), own.described()]

        await chat.mcp.release((own,), outcome.session_id)
        assert not processes_under(other)
        assert [(row.target, row.state) for row in chat.mcp.status()] == [(configured.described(), "stopped")]
    finally:
        await chat.mcp.aclose()
