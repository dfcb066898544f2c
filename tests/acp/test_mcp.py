"""MCP servers over ACP: the servers a client names for a session, their calls as ``tool_call``
updates (kind from the start, the result's preview and links at the end),
``session/request_permission`` before a tool that may act, and ``session/load``,
``session/resume`` and ``session/close``.

The server is the real ``mcp-server-git`` on a real repository (``tests/mcp_repo.py``), started
by the agent from the ``mcpServers`` the ACP SDK client sends; the model is the scripted one.
Each test asserts what went over ACP (every message checked against the SDK's schema), what
reached the model, what the server did and what was stored.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import acp
import pytest
from acp import schema

from imprintd.research.preview import PREVIEW_CHARS
from imprintd.store import Store
from tests.acp.peer import acp_agent, texts
from tests.mcp.servers import DOCS, EverythingHttp, processes_under, script_server
from tests.mcp_repo import LATEST, branches, git_repository, git_server, git_server_processes
from tests.openai_stub import StubReply


def git_config(repo: Path, name: str = "git") -> schema.McpServerStdio:
    command, args = git_server(repo)
    return schema.McpServerStdio(name=name, command=command, args=args, env=[])


def call(tool: str, call_id: str, **arguments) -> dict:
    return {"name": tool, "id": call_id, "arguments": arguments}


def offered(request: dict) -> set[str]:
    return {tool["function"]["name"] for tool in request.get("tools", [])}


def tool_results(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def tool_updates(updates) -> list:
    return [u for u in updates if u.session_update in ("tool_call", "tool_call_update")]


def stored(daemon_env, session_id: str):
    with Store.open(Path(daemon_env["IMPRINT_DATA_DIR"]) / "imprint.sqlite3") as store:
        return store.messages(session_id)


async def ask(agent, session_id: str, text: str) -> schema.PromptResponse:
    return await asyncio.wait_for(agent.conn.prompt(session_id=session_id, prompt=[acp.text_block(text)]), 120)


@pytest.fixture
def daemon_env(daemon_env):
    """A window the git server's dozen tool schemas fit in whole (at 8,192 tokens they take
    more than their share, and the model is offered the compact pair instead)."""
    return {**daemon_env, "IMPRINT_CHAT_N_CTX": "32768"}


@pytest.fixture
def repo(tmp_path) -> Path:
    return git_repository(tmp_path / "repo")


async def test_initialize_advertises_mcp_transports_resume_and_close(agent):
    answer = await agent.conn.initialize(protocol_version=1)
    capabilities = answer.agent_capabilities
    assert (capabilities.mcp_capabilities.http, capabilities.mcp_capabilities.sse) == (True, True)
    assert capabilities.mcp_capabilities.acp is False  # ACP's own MCP transport is not offered
    assert capabilities.session_capabilities.resume is not None
    assert capabilities.session_capabilities.close is not None


async def test_a_history_question_is_answered_from_git_log_of_the_sessions_server(
    agent, stub, workspace, repo, daemon_env
):
    stub.queue(
        StubReply(tool_calls=[call("git__git_log", "call_0", repo_path=str(repo), max_count=5)]),
        lambda request: f"The last change was “{LATEST}” [1].",
    )
    session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[git_config(repo)])

    answer = await ask(agent, session.session_id, "What changed last in the repository?")

    assert answer.stop_reason == "end_turn"
    first, second = stub.requests
    assert {"git__git_log", "git__git_status"} <= offered(first)  # the server's tools, beside the workspace's
    assert any(LATEST in result for result in tool_results(second)), "git log's output reached the model"
    updates = agent.take_updates(session.session_id)
    steps = tool_updates(updates)
    assert [(u.session_update, u.status) for u in steps] == [
        ("tool_call", "in_progress"),
        ("tool_call_update", "completed"),
    ]
    started, done = steps
    # Its kind is known from the start: the tool's annotations say it only reads (readOnlyHint).
    assert (started.kind, done.kind) == ("read", None)
    assert started.raw_input == {"repo_path": str(repo), "max_count": 5}
    assert "git" in started.title
    assert done.tool_call_id == started.tool_call_id
    # The completed call shows its result: git log's output, short enough to be shown whole.
    [result] = [m.content for m in stored(daemon_env, session.session_id) if m.role == "tool"]
    assert LATEST in result and len(result) < PREVIEW_CHARS
    assert [(c.type, c.content.type, c.content.text) for c in done.content] == [("content", "text", result)]
    text = "".join(texts(updates, "agent_message_chunk"))
    assert LATEST in text and "[1]" in text
    messages = stored(daemon_env, session.session_id)
    assert any(m.role == "tool" and LATEST in m.content for m in messages)
    assert LATEST in messages[-1].content
    # The answer cites the call: source [1] is git log's result, with its server, tool and arguments.
    [cited] = [source for source in messages[-1].sources if source.number == 1]
    assert (cited.kind, cited.cited, cited.origin.server, cited.origin.tool) == ("tool", True, "git", "git_log")
    assert cited.origin.arguments == {"repo_path": str(repo), "max_count": 5}
    assert agent.client.asked == []  # a read-only tool runs without asking


async def test_in_a_small_window_the_call_goes_through_the_compact_pair_and_shows_the_same(
    stub, workspace, repo, daemon_env, tmp_path
):
    stub.queue(
        StubReply(tool_calls=[call("call_tool", "call_0", name="git__git_log", arguments={"repo_path": str(repo)})]),
        f"It was “{LATEST}” [1].",
    )
    async with acp_agent({**daemon_env, "IMPRINT_CHAT_N_CTX": "8192"}, tmp_path, "small") as agent:
        session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[git_config(repo)])
        assert (await ask(agent, session.session_id, "What changed last?")).stop_reason == "end_turn"
        first, second = stub.requests
        assert {"find_tools", "call_tool"} <= offered(first) and "git__git_log" not in offered(first)
        assert any(LATEST in result for result in tool_results(second))
        steps = tool_updates(agent.take_updates(session.session_id))
        assert [(u.session_update, u.status) for u in steps] == [
            ("tool_call", "in_progress"),
            ("tool_call_update", "completed"),
        ]
        assert steps[0].raw_input == {"name": "git__git_log", "arguments": {"repo_path": str(repo)}}
        assert steps[0].kind == "read"  # the annotations of the tool call_tool names
        assert LATEST in steps[1].content[0].content.text


async def test_an_http_server_of_the_session_is_reached_and_a_tool_that_may_act_asks_first(
    stub, workspace, daemon_env, tmp_path
):
    stub.queue(
        StubReply(tool_calls=[call("everything__echo", "call_0", message="over streamable HTTP")]),
        StubReply(tool_calls=[call("everything__toggle-simulated-logging", "call_0")]),
        "It echoed, and logging is toggled.",
    )
    with EverythingHttp() as everything:
        # A window its dozen tool schemas fit in whole.
        async with acp_agent({**daemon_env, "IMPRINT_CHAT_N_CTX": "131072"}, tmp_path, "http") as agent:
            server = schema.HttpMcpServer(type="http", name="everything", url=everything.url, headers=[])
            session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[server])
            agent.client.permissions.append("allow_once")
            assert (await ask(agent, session.session_id, "Echo, then toggle logging")).stop_reason == "end_turn"
            assert "Echo: over streamable HTTP" in tool_results(stub.requests[1])[-1]
            [asked] = agent.client.asked  # echo is read-only; toggling is not
            assert (asked.tool_call.kind, asked.tool_call.raw_input) == ("execute", {})
            assert "logging" in tool_results(stub.requests[2])[-1].lower()
            assert "declined" not in tool_results(stub.requests[2])[-1]
            steps = tool_updates(agent.take_updates(session.session_id))
            assert [(u.session_update, u.status, u.kind) for u in steps] == [
                ("tool_call", "in_progress", "read"),
                ("tool_call_update", "completed", None),
                ("tool_call", "in_progress", "execute"),
                ("tool_call_update", "pending", "execute"),
                ("tool_call_update", "in_progress", None),
                ("tool_call_update", "completed", None),
            ]
            assert steps[1].content[0].content.text == "Echo: over streamable HTTP"


async def test_a_tool_that_may_act_runs_only_after_the_user_allows_it(agent, stub, workspace, repo):
    stub.queue(
        StubReply(tool_calls=[call("git__git_create_branch", "call_0", repo_path=str(repo), branch_name="allowed")]),
        "Created.",
        StubReply(tool_calls=[call("git__git_create_branch", "call_0", repo_path=str(repo), branch_name="refused")]),
        "Not created.",
    )
    session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[git_config(repo)])

    agent.client.permissions.append("allow_once")
    assert (await ask(agent, session.session_id, "Make a branch named allowed")).stop_reason == "end_turn"
    [asked] = agent.client.asked
    assert asked.session_id == session.session_id
    assert [(o.option_id, o.kind) for o in asked.options] == [
        ("allow_once", "allow_once"),
        ("allow_always", "allow_always"),
        ("reject", "reject_once"),
    ]
    assert asked.tool_call.raw_input == {"repo_path": str(repo), "branch_name": "allowed"}
    steps = tool_updates(agent.take_updates(session.session_id))
    # Pending while the user decides, then run in the same tool call.
    assert [(u.session_update, u.status) for u in steps] == [
        ("tool_call", "in_progress"),
        ("tool_call_update", "pending"),
        ("tool_call_update", "in_progress"),
        ("tool_call_update", "completed"),
    ]
    assert {u.tool_call_id for u in steps} == {asked.tool_call.tool_call_id}
    assert steps[1].kind == asked.tool_call.kind == "execute"  # it may act (no readOnlyHint)
    assert "allowed" in branches(repo)
    assert any("allowed" in result for result in tool_results(stub.requests[1]))

    agent.client.permissions.append("reject")
    assert (await ask(agent, session.session_id, "Make a branch named refused")).stop_reason == "end_turn"
    assert len(agent.client.asked) == 2
    assert "refused" not in branches(repo)
    steps = tool_updates(agent.take_updates(session.session_id))
    assert [(u.session_update, u.status) for u in steps] == [
        ("tool_call", "in_progress"),
        ("tool_call_update", "pending"),
        ("tool_call_update", "failed"),
    ]
    assert "declined" in steps[-1].content[0].content.text
    # The model is told the call did not run, and the reply goes on.
    assert "The user declined to let git run git_create_branch" in tool_results(stub.requests[3])[-1]

    # Loaded again, the session shows the same: the allowed call completed, the declined one failed.
    await agent.conn.load_session(cwd=str(workspace), session_id=session.session_id, mcp_servers=[])
    replayed = tool_updates(agent.take_updates(session.session_id))
    assert [(u.status, u.raw_input["branch_name"]) for u in replayed] == [
        ("completed", "allowed"),
        ("failed", "refused"),
    ]


async def test_always_allow_is_remembered_for_the_session(agent, stub, workspace, repo):
    stub.queue(
        StubReply(tool_calls=[call("git__git_create_branch", "call_0", repo_path=str(repo), branch_name="one")]),
        "One.",
        StubReply(tool_calls=[call("git__git_create_branch", "call_0", repo_path=str(repo), branch_name="two")]),
        "Two.",
    )
    session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[git_config(repo)])
    agent.client.permissions.append("allow_always")
    await ask(agent, session.session_id, "Branch one")
    await ask(agent, session.session_id, "Branch two")
    assert len(agent.client.asked) == 1  # not asked again
    assert {"one", "two"} <= set(branches(repo))
    steps = tool_updates(agent.take_updates(session.session_id))
    # Each run shows as what it is from its start, the second one too, though nobody was asked about it.
    assert [u.kind for u in steps if u.session_update == "tool_call"] == ["execute", "execute"]

    # Resumed without the server and then with it again, the session is asked anew: the answer
    # was for the server it let go of.
    await agent.conn.resume_session(session_id=session.session_id, cwd=str(workspace), mcp_servers=[])
    await agent.conn.resume_session(session_id=session.session_id, cwd=str(workspace), mcp_servers=[git_config(repo)])
    stub.queue(
        StubReply(tool_calls=[call("git__git_create_branch", "call_0", repo_path=str(repo), branch_name="three")]),
        "Three.",
    )
    agent.client.permissions.append("allow_once")
    await ask(agent, session.session_id, "Branch three")
    assert len(agent.client.asked) == 2 and "three" in branches(repo)


async def test_a_client_that_cannot_answer_or_cancels_the_prompt_means_no(agent, stub, workspace, repo):
    stub.queue(
        StubReply(tool_calls=[call("git__git_create_branch", "call_0", repo_path=str(repo), branch_name="unasked")]),
        "Could not.",
        StubReply(tool_calls=[call("git__git_create_branch", "call_0", repo_path=str(repo), branch_name="cancelled")]),
    )
    session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[git_config(repo)])
    # No answer queued: the client answers -32601, as one without the method does.
    assert (await ask(agent, session.session_id, "Branch unasked")).stop_reason == "end_turn"
    assert len(agent.client.asked) == 1 and "unasked" not in branches(repo)

    reached, deciding = asyncio.Event(), asyncio.get_running_loop().create_future()

    async def answer() -> str:
        reached.set()
        return await deciding

    agent.client.permissions.append(answer())
    prompt = asyncio.ensure_future(ask(agent, session.session_id, "Branch cancelled"))
    await asyncio.wait_for(reached.wait(), 60)  # the user is deciding
    await agent.conn.cancel(session_id=session.session_id)
    assert (await asyncio.wait_for(prompt, 60)).stop_reason == "cancelled"
    deciding.set_result("cancelled")  # as ACP asks of a client whose prompt was cancelled
    assert "cancelled" not in branches(repo)


async def test_resume_keeps_the_session_without_replaying_it_and_close_stops_its_server(
    agent, stub, workspace, repo, daemon_env
):
    stub.queue(
        "Hello.",
        StubReply(tool_calls=[call("git__git_log", "call_0", repo_path=str(repo))]),
        f"It was “{LATEST}”.",
    )
    session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
    await ask(agent, session.session_id, "Hi")
    assert "git__git_log" not in offered(stub.requests[0])
    agent.take_updates(session.session_id)

    resumed = await agent.conn.resume_session(
        session_id=session.session_id, cwd=str(workspace), mcp_servers=[git_config(repo)]
    )
    assert [option.id for option in resumed.config_options] == ["model"]
    assert agent.take_updates(session.session_id) == []  # nothing replayed
    await ask(agent, session.session_id, "What changed last?")
    assert "git__git_log" in offered(stub.requests[1])
    assert any(LATEST in result for result in tool_results(stub.requests[2]))
    assert git_server_processes(repo), "the server runs while the session uses it"

    await agent.conn.close_session(session_id=session.session_id)
    assert git_server_processes(repo) == []  # only this session used it
    assert [m.role for m in stored(daemon_env, session.session_id)][:2] == ["user", "assistant"]  # kept

    with pytest.raises(acp.RequestError) as error:
        await agent.conn.resume_session(session_id="no-such-session", cwd=str(workspace), mcp_servers=[])
    assert error.value.code == -32002
    # A session never asked anything is gone once closed: nothing of it was stored.
    unasked = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[git_config(repo)])
    await agent.conn.close_session(session_id=unasked.session_id)
    for later in (
        agent.conn.close_session(session_id=unasked.session_id),
        ask(agent, unasked.session_id, "Still there?"),
    ):
        with pytest.raises(acp.RequestError) as error:
            await later
        assert error.value.code == -32002 and unasked.session_id in str(error.value)


async def test_a_server_two_sessions_use_stops_only_when_both_are_closed(agent, stub, workspace, repo):
    stub.queue(
        StubReply(tool_calls=[call("git__git_status", "call_0", repo_path=str(repo))]),
        "Clean.",
        StubReply(tool_calls=[call("git__git_status", "call_0", repo_path=str(repo))]),
        "Still clean.",
    )
    first = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[git_config(repo)])
    second = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[git_config(repo)])
    await ask(agent, first.session_id, "Is the tree clean?")
    await ask(agent, second.session_id, "And now?")
    assert len(git_server_processes(repo)) == 1  # one process for the one configuration
    await agent.conn.close_session(session_id=first.session_id)
    assert len(git_server_processes(repo)) == 1
    await agent.conn.close_session(session_id=second.session_id)
    assert git_server_processes(repo) == []


async def test_mcp_servers_acp_cannot_use_are_refused_naming_the_entry(agent, stub, workspace, repo):
    for servers, expected in (
        ([{"type": "acp", "name": "mine", "serverId": "s1"}], "mcpServers[0]: type 'acp' is not supported"),
        ([{"name": "half", "args": [], "env": []}], "mcpServers[0]: a stdio server needs command"),
        ([{"type": "http", "name": "web", "headers": []}], "mcpServers[0]: an http server needs url"),
        ([{"type": "sse", "name": "web", "url": "ftp://x", "headers": []}], "url must be an http(s) URL"),
    ):
        with pytest.raises(acp.RequestError) as error:
            await agent.conn._conn.send_request("session/new", {"cwd": str(workspace), "mcpServers": servers})
        assert error.value.code == -32602 and expected in str(error.value), (servers, str(error.value))
    assert stub.requests == []
    # A client's name for a server need not fit a tool name: it is made to.
    command, args = git_server(repo)
    session = await agent.conn.new_session(
        cwd=str(workspace), mcp_servers=[schema.McpServerStdio(name="Git repo", command=command, args=args, env=[])]
    )
    stub.queue("Fine.")
    await ask(agent, session.session_id, "Hi")
    assert "Git_repo__git_log" in offered(stub.requests[0])


def test_acp_server_shapes_become_the_settings_records_and_names_fit_a_tool_name():
    from imprintd.acp import wire
    from imprintd.acp.mcp import session_servers
    from imprintd.mcp.config import parse_servers

    servers = session_servers(
        [
            wire.McpServer(
                name="git",
                command="/usr/bin/python3",
                args=["-m", "mcp_server_git"],
                env=[wire.NameValue(name="GIT_PAGER", value="cat")],
            ),
            wire.McpServer(name="git", type="stdio", command="uvx", args=["mcp-server-git"]),
            wire.McpServer(
                name="Docs & Notes (work) " + "x" * 40,
                type="sse",
                url="https://docs.example.com/sse",
                headers=[wire.NameValue(name="Authorization", value="Bearer t")],
            ),
            wire.McpServer(name="__", type="http", url="https://mcp.example.com/mcp"),
            wire.McpServer(name="x" * 31 + " y", command="true"),  # cut at the space: no "_" left at the end
        ]
    )
    assert [(s.name, s.transport) for s in servers] == [
        ("git", "stdio"),
        ("git-1", "stdio"),  # the same name twice: told apart by its place
        ("Docs_Notes_work_xxxxxxxxxxxxxxxx", "sse"),
        ("server3", "http"),
        ("x" * 31, "stdio"),
    ]
    # The same server written in the settings' shape is the same record: one process for both.
    assert (
        servers[0]
        == parse_servers(
            {"git": {"command": "/usr/bin/python3", "args": ["-m", "mcp_server_git"], "env": {"GIT_PAGER": "cat"}}}
        )[0]
    )
    assert servers[2].headers == (("Authorization", "Bearer t"),)


async def test_a_long_result_shows_a_bounded_preview_and_its_links_and_is_stored_whole(
    agent, stub, workspace, daemon_env, tmp_path
):
    docs = script_server(tmp_path, "docs", DOCS)
    stub.queue(StubReply(tool_calls=[call("docs__page", "call_0", topic="billing")]), "It listens on 8101 [1].")
    server = schema.McpServerStdio(name="docs", command=sys.executable, args=list(docs.args), env=[])
    session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[server])

    assert (await ask(agent, session.session_id, "Which port does billing use?")).stop_reason == "end_turn"

    started, done = tool_updates(agent.take_updates(session.session_id))
    assert started.kind == "fetch"  # read-only, and it reaches outside (openWorldHint)
    [result] = [m.content for m in stored(daemon_env, session.session_id) if m.role == "tool"]
    assert "billing line 119:" in result  # stored whole
    assert any("billing line 119:" in text for text in tool_results(stub.requests[1]))  # read whole
    preview, link = done.content
    text = preview.content.text
    assert len(text) <= PREVIEW_CHARS < len(result)
    assert text.endswith("\n…") and result.startswith(text.removesuffix("…"))  # cut at a line's end
    # The https link is handed over; the command: URI the server named is not.
    assert (link.content.type, link.content.uri) == ("resource_link", "https://docs.example.com/billing")
    assert "command:" in result


async def test_load_and_resume_let_go_of_the_servers_the_session_names_no_more(agent, stub, workspace, repo, tmp_path):
    stub.queue(
        StubReply(tool_calls=[call("git__git_status", "call_0", repo_path=str(repo))]),
        "Clean.",
        StubReply(tool_calls=[call("docs__page", "call_0", topic="billing")]),
        "Found it.",
    )
    docs = script_server(tmp_path, "docs", DOCS)
    docs_server = schema.McpServerStdio(name="docs", command=sys.executable, args=list(docs.args), env=[])
    session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[git_config(repo)])
    other = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[docs_server])
    await ask(agent, session.session_id, "Is the tree clean?")
    await ask(agent, other.session_id, "Which port?")
    assert git_server_processes(repo) and processes_under(tmp_path / "docs.py")

    # Resumed with another list: git, which only it used, stops now; docs runs on for the other session.
    await agent.conn.resume_session(session_id=session.session_id, cwd=str(workspace), mcp_servers=[docs_server])
    assert git_server_processes(repo) == []
    await agent.conn.load_session(session_id=session.session_id, cwd=str(workspace), mcp_servers=[])
    assert processes_under(tmp_path / "docs.py"), "the other session still names docs"
    # Loaded with none by the session that started it, docs stops too.
    await agent.conn.load_session(session_id=other.session_id, cwd=str(workspace), mcp_servers=[])
    assert processes_under(tmp_path / "docs.py") == []
