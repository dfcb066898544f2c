"""ACP sessions over the store the LSP side uses: load replays exactly what was stored, list and
delete work on it, and a session outlives the agent process."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path

import acp
import pytest

from imprintd.store import Store
from tests.acp.peer import acp_agent
from tests.openai_stub import StubReply, drop_connection, unavailable


def call(name: str, call_id: str, **arguments) -> dict:
    return {"name": name, "id": call_id, "arguments": arguments}


async def ask(agent, session_id: str, text: str):
    return await asyncio.wait_for(agent.conn.prompt(session_id=session_id, prompt=[acp.text_block(text)]), 120)


def stored_messages(daemon_env, session_id: str):
    with Store.open(Path(daemon_env["IMPRINT_DATA_DIR"]) / "imprint.sqlite3") as store:
        return store.messages(session_id)


async def test_load_in_a_new_agent_replays_exactly_what_was_stored(daemon_env, stub, tmp_path, workspace):
    (workspace / "deploy").mkdir()
    (workspace / "deploy" / "billing.yaml").write_text("billing:\n  port: 8101\n", encoding="utf-8")
    stub.queue(
        StubReply(
            text="Reading the deployment.",
            tool_calls=[call("read_file", "call_0", path="deploy/billing.yaml", start_line=2)],
        ),
        StubReply(tool_calls=[call("read_file", "call_0", path="/etc/passwd")]),
        "Billing listens on 8101.",
        "It is in deploy/billing.yaml.",
    )
    async with acp_agent(daemon_env, tmp_path, "first") as agent:
        session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
        await ask(agent, session.session_id, "Which port does billing use?")
        await ask(agent, session.session_id, "Where is it set?")
    sid = session.session_id

    async with acp_agent(daemon_env, tmp_path, "second") as agent:
        loaded = await agent.conn.load_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
        replayed = agent.take_updates(sid)
        stub.queue("Yes, 8101.")
        await ask(agent, sid, "Still 8101?")  # the loaded session goes on
        follow_up = stub.requests[-1]

    assert loaded is None or loaded.model_dump(exclude_none=True) == {}
    stored = stored_messages(daemon_env, sid)
    assert [(m.role, bool(m.tool_calls)) for m in stored[:8]] == [
        ("user", False),
        ("assistant", True),
        ("tool", False),
        ("assistant", True),
        ("tool", False),
        ("assistant", False),
        ("user", False),
        ("assistant", False),
    ]
    root = workspace.resolve()
    first_call, second_call = stored[1].tool_calls[0], stored[3].tool_calls[0]
    # The first answer cited nothing after a read: it keeps the place read, as not cited, and
    # the replay links it as the live answer did.
    assert [(s.number, s.kind, s.path, s.cited) for s in stored[5].sources] == [
        (1, "file", "deploy/billing.yaml", False)
    ]
    links = [u.content for u in replayed if getattr(u.content, "type", None) == "resource_link"]
    assert [(link.uri, link.name, link.title, link.description) for link in links] == [
        (
            (root / "deploy/billing.yaml").as_uri() + "#L2:2",
            "deploy/billing.yaml:2",
            "[1] deploy/billing.yaml:2",
            "read, not cited",
        )
    ]
    assert [
        (u.session_update, getattr(u, "content", None) and u.content.text)
        for u in replayed
        if u.session_update != "tool_call" and getattr(u.content, "type", None) != "resource_link"
    ] == [
        ("user_message_chunk", stored[0].content),
        ("agent_message_chunk", "Reading the deployment."),  # as it streamed: before the round's calls
        ("agent_message_chunk", stored[5].content),
        ("agent_message_chunk", "\n\n"),  # the link on a line of its own, as live
        ("user_message_chunk", stored[6].content),
        ("agent_message_chunk", stored[7].content),
    ]
    calls = [u for u in replayed if u.session_update == "tool_call"]
    assert [(u.title, u.kind, u.status, u.raw_input) for u in calls] == [
        ("read_file deploy/billing.yaml", "read", "completed", first_call.arguments),
        ("read_file /etc/passwd", "read", "failed", second_call.arguments),
    ]
    assert [(loc.path, loc.line) for loc in calls[0].locations] == [(str(root / "deploy/billing.yaml"), 1)]
    assert calls[1].locations is None
    # Each shows its stored result, as the live step showed it: the line read, and why the other failed.
    assert [[(c.type, c.content.text) for c in u.content] for u in calls] == [
        [("content", stored[2].content)],
        [("content", stored[4].content)],
    ]
    assert stored[2].content == "  port: 8101" and stored[4].content.startswith("Error: ")
    assert len({u.tool_call_id for u in calls}) == 2
    # The order: the calls sit between the question and the answer they led to.
    kinds = [u.session_update for u in replayed]
    assert kinds == [
        "user_message_chunk",
        "agent_message_chunk",
        "tool_call",
        "tool_call",
        "agent_message_chunk",
        "agent_message_chunk",  # the line break before the link
        "agent_message_chunk",  # the link to the place read
        "user_message_chunk",
        "agent_message_chunk",
    ]
    conversation = [
        (m["role"], m["content"])
        for m in follow_up["messages"]
        if m["role"] in ("user", "assistant") and not m.get("tool_calls")
    ]
    assert conversation[-3:] == [
        ("user", "Where is it set?"),
        ("assistant", "It is in deploy/billing.yaml."),
        ("user", "Still 8101?"),
    ]


async def test_a_cancelled_prompt_replays_as_its_question_alone(daemon_env, stub, tmp_path, workspace):
    # A try and two retries answered 503 (retried at once: Retry-After 0, not the 1+2+4 s backoff),
    # the last retry's connection dropped.
    stub.queue(*unavailable(3), drop_connection)
    async with acp_agent(daemon_env, tmp_path) as agent:
        session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
        with pytest.raises(acp.RequestError):
            await ask(agent, session.session_id, "Is anyone there?")
        agent.take_updates(session.session_id)
        await agent.conn.load_session(cwd=str(workspace), session_id=session.session_id, mcp_servers=[])
        replayed = agent.take_updates(session.session_id)
    assert [(u.session_update, u.content.text) for u in replayed] == [("user_message_chunk", "Is anyone there?")]


async def test_list_shows_sessions_with_their_folder_newest_first_and_filters_by_cwd(agent, stub, tmp_path, workspace):
    other = tmp_path / "other"
    other.mkdir()
    stub.queue("One.", "Two.")
    first = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
    await ask(agent, first.session_id, "First question")
    second = await agent.conn.new_session(cwd=str(other), mcp_servers=[])
    await ask(agent, second.session_id, "Second question\nwith a second line")
    unasked = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])

    listed = (await agent.conn.list_sessions()).sessions
    assert [(s.session_id, s.cwd, s.title) for s in listed] == [
        (second.session_id, str(other.resolve()), "Second question"),
        (first.session_id, str(workspace.resolve()), "First question"),
    ]
    assert unasked.session_id not in [s.session_id for s in listed]  # nothing to load yet
    assert all(datetime.fromisoformat(s.updated_at).tzinfo is not None for s in listed)
    in_workspace = (await agent.conn.list_sessions(cwd=str(workspace))).sessions
    assert [s.session_id for s in in_workspace] == [first.session_id]
    with pytest.raises(acp.RequestError) as error:
        await agent.conn.list_sessions(cursor="page-2")
    assert error.value.code == -32602 and "cursor" in str(error.value)


async def test_delete_removes_the_session_from_the_store(agent, stub, workspace, daemon_env):
    stub.queue("One.", "Two.")
    kept = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
    await ask(agent, kept.session_id, "Keep me")
    gone = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
    await ask(agent, gone.session_id, "Delete me")

    assert await agent.delete_session(gone.session_id) == {}

    assert [s.session_id for s in (await agent.conn.list_sessions()).sessions] == [kept.session_id]
    with Store.open(Path(daemon_env["IMPRINT_DATA_DIR"]) / "imprint.sqlite3") as store:
        assert [info.id for info in store.sessions()] == [kept.session_id]
    for attempt in (
        agent.conn.load_session(cwd=str(workspace), session_id=gone.session_id, mcp_servers=[]),
        agent.delete_session(gone.session_id),
        ask(agent, gone.session_id, "Still there?"),
    ):
        with pytest.raises(acp.RequestError) as error:
            await attempt
        assert error.value.code == -32002 and gone.session_id in str(error.value)


async def test_a_session_never_asked_anything_leaves_nothing_stored(daemon_env, stub, tmp_path, workspace):
    async with acp_agent(daemon_env, tmp_path) as agent:
        unasked = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
        dropped = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
        # It is a session all the same: it loads (with nothing to replay) and deletes.
        loaded = await agent.conn.load_session(cwd=str(workspace), session_id=unasked.session_id, mcp_servers=[])
        assert loaded is None or loaded.model_dump(exclude_none=True) == {}
        assert agent.take_updates(unasked.session_id) == []
        assert await agent.delete_session(dropped.session_id) == {}
        with pytest.raises(acp.RequestError) as error:
            await ask(agent, dropped.session_id, "Still there?")
        assert error.value.code == -32002
        with Store.open(Path(daemon_env["IMPRINT_DATA_DIR"]) / "imprint.sqlite3") as store:
            assert store.sessions() == []
        stub.queue("Hello.")
        await ask(agent, unasked.session_id, "Hi")  # its first question stores it, under the id ACP knows
    with Store.open(Path(daemon_env["IMPRINT_DATA_DIR"]) / "imprint.sqlite3") as store:
        assert [(info.id, info.workspace) for info in store.sessions()] == [
            (unasked.session_id, str(workspace.resolve()))
        ]
    assert [(m.role, m.content) for m in stored_messages(daemon_env, unasked.session_id)] == [
        ("user", "Hi"),
        ("assistant", "Hello."),
    ]
