"""Research over ACP: tool steps as ``tool_call`` / ``tool_call_update``, progress as thoughts,
and a research stop's answer with its sources as ``resource_link`` blocks.

The workspace and the scripted coordinator are the research end-to-end test's.
"""

from __future__ import annotations

import asyncio
import threading

import acp

from tests.acp.peer import acp_agent, texts
from tests.e2e.research_repo import (
    INDEXED,
    PORT_FACT,
    PORT_FILE,
    TIMEOUT_FACT,
    TIMEOUT_FILE,
    billing_research,
    call,
    line_of,
    write_workspace,
)
from tests.openai_stub import StubReply

QUESTION = "Which port does the billing service listen on, and how long does its client wait before timing out?"


async def ask(agent, session_id: str, text: str):
    return await asyncio.wait_for(agent.conn.prompt(session_id=session_id, prompt=[acp.text_block(text)]), 120)


def tool_updates(updates) -> list:
    return [u for u in updates if u.session_update in ("tool_call", "tool_call_update")]


async def test_tool_steps_are_tool_calls_with_kind_status_and_location(agent, stub, tmp_path):
    workspace = tmp_path / "workspace"
    write_workspace(workspace)
    stub.queue(
        StubReply(
            text="Let me read the deployment.",
            tool_calls=[call("read_file", "call_0", path=PORT_FILE, start_line=2, end_line=4)],
        ),
        StubReply(tool_calls=[call("read_file", "call_0", path="../outside.txt")]),
        "Billing listens on 8101.",
    )
    session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])

    answer = await ask(agent, session.session_id, "Which port does billing use?")

    assert answer.stop_reason == "end_turn"
    updates = agent.take_updates(session.session_id)
    steps = tool_updates(updates)
    assert [(u.session_update, u.status) for u in steps] == [
        ("tool_call", "in_progress"),
        ("tool_call_update", "completed"),
        ("tool_call", "in_progress"),
        ("tool_call_update", "failed"),
    ]
    read, done, refused, failed = steps
    assert read.title == f"Reading {PORT_FILE} lines 2–4" and read.kind == "read"
    assert [(loc.path, loc.line) for loc in read.locations] == [(str(workspace.resolve() / PORT_FILE), 1)]
    assert done.tool_call_id == read.tool_call_id
    # The completed call shows what it read: the lines themselves, as a text block.
    lines = (workspace / PORT_FILE).read_text(encoding="utf-8").splitlines()[1:4]
    [shown] = done.content
    assert (shown.type, shown.content.type, shown.content.text) == ("content", "text", "\n".join(lines))
    # The model reused the id "call_0"; ACP's ids stay distinct within the session.
    assert refused.tool_call_id != read.tool_call_id and failed.tool_call_id == refused.tool_call_id
    assert refused.title == "Reading ../outside.txt" and refused.locations is None  # never point outside
    detail = failed.content[0].content.text
    assert "'..' segments are not allowed" in detail
    # The text streamed as it was written: the round's words before its call, the answer after the steps.
    # It cited nothing after a read: the place read is listed, marked as not cited, and linked.
    messages = [
        (updates.index(u), u.content.text)
        for u in updates
        if u.session_update == "agent_message_chunk" and u.content.type == "text"
    ]
    assert "".join(text for _, text in messages) == (
        f"Let me read the deployment.\n\nBilling listens on 8101.\n\nSources:\n[1] {PORT_FILE}:2-4 (read, not cited)"
        "\n\n"  # the link goes on a line of its own, not glued to the Sources line
    )
    before = [index for index, text in messages if index < updates.index(read)]
    assert "".join(text for index, text in messages if index in before) == "Let me read the deployment."
    assert all(index > updates.index(failed) for index, _ in messages if index not in before)
    [link] = [u.content for u in updates if u.session_update == "agent_message_chunk" and u.content.type != "text"]
    assert (link.type, link.name, link.description) == ("resource_link", f"{PORT_FILE}:2-4", "read, not cited")
    thoughts = texts(updates, "agent_thought_chunk")
    assert f"Indexing the workspace: {len(INDEXED)} of {len(INDEXED)} files\n" in thoughts
    assert "Let me read the deployment." not in "".join(thoughts)
    assert updates[-1].content.type == "resource_link"  # the answer, then its link, last
    # What fills the context, as ACP can say it: each round's tokens of the window, before that round.
    usage = [u for u in updates if u.session_update == "usage_update"]
    assert len(usage) == len(stub.requests) == 3 and {u.size for u in usage} == {8192}
    assert usage[0].used < usage[1].used < usage[2].used  # each round carries the research so far
    assert updates.index(usage[1]) < updates.index(refused)


async def test_a_research_stop_answers_with_sources_as_resource_links(daemon_env, stub, tmp_path):
    workspace = tmp_path / "workspace"
    write_workspace(workspace)
    env = {
        **daemon_env,
        "IMPRINT_CHAT_N_CTX": "32768",
        "IMPRINT_CHAT_MAX_TOKENS": "256",
        "IMPRINT_CHAT_RESEARCH_TOKEN_BUDGET": "4096",
    }
    stub.queue(*billing_research())

    async with acp_agent(env, tmp_path) as agent:
        session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
        answer = await ask(agent, session.session_id, QUESTION)
        updates = agent.take_updates(session.session_id)

    assert answer.stop_reason == "end_turn"  # the token budget stopped research; the turn still ended
    messages = [u.content for u in updates if u.session_update == "agent_message_chunk"]
    links = [m for m in messages if m.type == "resource_link"]
    # The links come after the answer's text, each on a line of its own (CodeCompanion
    # showed a link glued to the Sources list's last line).
    first_link = messages.index(links[0])
    assert all(m.type == "text" for m in messages[:first_link])
    after = messages[first_link - 1 :]
    assert [m.type for m in after] == ["text", "resource_link"] * len(links)
    assert [m.text for m in after[::2]] == ["\n\n"] + ["\n"] * (len(links) - 1)
    writing = next(
        u for u in updates if u.session_update == "agent_thought_chunk" and "research notes" in u.content.text
    )
    pieces = texts(updates[updates.index(writing) :], "agent_message_chunk")
    assert len(pieces) > 10  # the answer from notes streams piece by piece, as it is written
    answer_text = "".join(pieces)
    assert answer_text.lstrip("\n").startswith("Billing listens on 8101")
    assert "\n\nSources:\n" in answer_text  # the daemon's Sources list streams with it
    assert len(links) == 2
    root = workspace.resolve()
    for link in links:
        path = PORT_FILE if PORT_FILE in link.uri else TIMEOUT_FILE
        fact = PORT_FACT if path == PORT_FILE else TIMEOUT_FACT
        uri, lines = link.uri.split("#L")
        start, end = (int(n) for n in lines.split(":"))
        assert uri == (root / path).as_uri()
        assert start <= line_of(path, fact) <= end
        assert link.name == f"{path}:{start}-{end}"
        assert link.title.startswith("[") and path in link.title
    thoughts = "".join(texts(updates, "agent_thought_chunk"))
    assert "Writing the answer from the research notes…\n" in thoughts
    searches = [u for u in tool_updates(updates) if u.session_update == "tool_call" and u.kind == "search"]
    assert searches[0].title == "Searching the workspace for “billing port”" and searches[0].locations is None


async def test_text_cut_off_by_the_time_budget_is_thinking_and_the_answer_from_notes_follows(
    daemon_env, stub, tmp_path, workspace
):
    hold = threading.Event()
    stub.queue(
        StubReply(text="Let me think about billing for a long while", hold=hold),
        "From what I have: nothing about billing yet.",
    )
    env = {**daemon_env, "IMPRINT_CHAT_RESEARCH_TIME_BUDGET": "3"}
    try:
        async with acp_agent(env, tmp_path) as agent:
            session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
            answer = await ask(agent, session.session_id, "Which port does billing use?")
            updates = agent.take_updates(session.session_id)
    finally:
        hold.set()
    assert answer.stop_reason == "end_turn"  # the time budget stopped research; the answer from notes ends the turn
    assert "tools" not in stub.requests[-1]  # the tools-free final request wrote the answer
    assert texts(updates, "agent_thought_chunk")[-1] == "Writing the answer from the research notes…\n"
    # What the cut round wrote stays as it streamed; the answer from notes follows in its own paragraph.
    assert "".join(texts(updates, "agent_message_chunk")) == "Let\n\nFrom what I have: nothing about billing yet."
