"""One real reply with an MCP server configured: the embedded SmolLM2-135M through llama.cpp, and
``mcp-server-git`` on a real repository over stdio.

What is judged is not whether a 135M model calls a tool: it is that the server's tools were
offered, fitted (git's 12 schemas take more than 10% of this window, so the model got the
compact pair) and counted exactly (the context usage of the round is the model's own count of
the prompt it was sent, tools included, and the rendered prompt holds the pair).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from imprintd.chat import ReplyRequest
from imprintd.mcp.config import McpServerConfig
from imprintd.mcp.servers import McpServers, McpToolInfo
from imprintd.mcp.tools import MCP_SHARE, CallContext, CallTool, Catalog, FindTools, McpTool, schema_tokens
from imprintd.models.chat_formats.grammar import find_opening
from imprintd.models.chat_formats.json_fallback import JSON_FALLBACK
from tests.helpers import make_chat
from tests.mcp.servers import git_repo, git_server, processes_under
from tests.models.real_model import Sampler, needs_real_model
from tests.recording import RecordingEvents

pytestmark = [needs_real_model, pytest.mark.timeout(600)]


@dataclass
class Requests:
    """The real model, with every request's messages and tools kept."""

    model: object
    sent: list[tuple[list, list]] = field(default_factory=list)

    def __getattr__(self, name):
        return getattr(self.model, name)

    async def complete(self, messages, tools=(), **kwargs):
        self.sent.append((list(messages), list(tools)))
        return await self.model.complete(messages, tools, **kwargs)


async def test_a_real_reply_offers_fits_and_counts_the_mcp_tools(local_model, tmp_path):
    repo = git_repo(tmp_path / "shop")
    server = git_server(repo)
    model = Requests(local_model)
    chat = make_chat(model, **{"chat.mcp_servers": (server,), "chat.max_tokens": 64, "chat.research_time_budget": 300})
    events = RecordingEvents()
    try:
        outcome = await chat.reply(ReplyRequest(text="What changed in the last commit?", persist=False), events)
        assert outcome.text

        messages, tools = model.sent[0]
        assert [spec.name for spec in tools] == ["conversation_history", "find_tools", "call_tool"]
        # Every git schema, counted by the model's own template and tokenizer, is over the share.
        infos = await chat.mcp.tools_for([server], session_id="count", events=None, timeout=30)
        context = CallContext(servers=chat.mcp, events=events, session_id="count", time_left=lambda: 60.0)
        every = [McpTool(info, context).spec for info in infos]
        assert len(every) == 12
        assert schema_tokens(local_model.count_prompt, every) > MCP_SHARE * local_model.n_ctx
        assert schema_tokens(local_model.count_prompt, tools[1:]) <= MCP_SHARE * 4096

        # The round's usage is the exact count of the prompt the model was sent, the pair included.
        usage = next(payload for kind, payload in events.log if kind == "context_usage")
        assert usage.exact
        assert usage.used == local_model.count_prompt(messages, tools)
        assert usage.parts.tools == local_model.count_prompt(messages, tools) - local_model.count_prompt(messages)
        rendered = local_model.render_prompt(messages, tools)
        assert "\n- find_tools: Find tools of the user's MCP servers" in rendered
        assert "\n- call_tool: Run a tool that find_tools listed" in rendered
        assert "git__git_log" not in rendered
    finally:
        await chat.mcp.aclose()
    assert not processes_under(repo)


TRACKER = McpServerConfig(name="tracker", transport="stdio", command="tracker-mcp")


def tracker_tool(name: str, properties: dict, required: list[str]) -> McpTool:
    info = McpToolInfo(
        server=TRACKER,
        name=name,
        description=f"The tracker's {name}.",
        input_schema={"type": "object", "properties": properties, "required": required},
        read_only=True,
        destructive=False,
    )
    return McpTool(info, CallContext(servers=McpServers(), events=None, session_id="s", time_left=lambda: 60.0))  # type: ignore[arg-type]


def test_call_tools_arguments_follow_the_schema_of_the_tool_it_names(local_model):
    local_model.load()  # a local model runs: call_tool carries the schema its grammar holds calls to
    catalog = Catalog(
        [
            tracker_tool("get_issue", {"repo": {"type": "string"}, "number": {"type": "integer"}}, ["repo", "number"]),
            tracker_tool("search_docs", {"query": {"type": "string"}}, ["query"]),
        ]
    )
    tools = [FindTools(catalog).spec, CallTool(catalog).spec]
    assert tools[1].grammar is not None and "anyOf" not in str(tools[1].parameters)  # never rendered
    opening, _ = find_opening('{"name":', JSON_FALLBACK.syntax)
    grammar = JSON_FALLBACK.call_grammar(tools, opening, '{"name":')
    valid = [
        ' "call_tool", "arguments": {"name": "tracker__get_issue", "arguments": {"repo": "shop/billing", "number": 7}}}',
        ' "call_tool", "arguments": {"name": "tracker__search_docs", "arguments": {"query": "port"}}}',
        ' "find_tools", "arguments": {"query": "issues"}}',
    ]
    invalid = {
        "a tool not listed": ' "call_tool", "arguments": {"name": "tracker__delete", "arguments": {}}}',
        "another tool's arguments": ' "call_tool", "arguments": {"name": "tracker__get_issue", "arguments": {"query": "x"}}}',
        "a required argument missing": ' "call_tool", "arguments": {"name": "tracker__get_issue", "arguments": {"repo": "a"}}}',
        "a string for an integer": (
            ' "call_tool", "arguments": {"name": "tracker__get_issue", "arguments": {"repo": "a", "number": "7"}}}'
        ),
    }
    for rest in valid:
        sampler = Sampler(local_model, grammar)
        assert sampler.accepts('{"name":' + rest), rest
        sampler.close()
    for what, rest in invalid.items():
        sampler = Sampler(local_model, grammar)
        assert not sampler.accepts('{"name":' + rest), what
        sampler.close()
