"""``imprintd acp`` driven by the ACP SDK as the client: initialize, sessions and prompts.

The model is the scripted OpenAI-compatible server; each test asserts what reached it, what
came over ACP (every message also checked against the SDK's schema) and what was stored.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import acp
import pytest
from acp import schema

from imprintd.store import Store
from tests.acp.peer import acp_agent, texts
from tests.openai_stub import StubReply, drop_connection, unavailable


def stored(daemon_env) -> Store:
    return Store.open(Path(daemon_env["IMPRINT_DATA_DIR"]) / "imprint.sqlite3")


def stored_messages(daemon_env, session_id: str) -> list[tuple[str, str]]:
    with stored(daemon_env) as store:
        return [(m.role, m.content) for m in store.messages(session_id)]


def user_messages(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


async def ask(agent, session_id: str, *blocks) -> schema.PromptResponse:
    return await asyncio.wait_for(agent.conn.prompt(session_id=session_id, prompt=list(blocks)), 120)


async def test_initialize_says_protocol_1_and_what_the_agent_can_do(agent):
    answer = await agent.conn.initialize(protocol_version=1)
    assert answer.protocol_version == 1
    capabilities = answer.agent_capabilities
    assert capabilities.load_session is True
    assert (
        capabilities.prompt_capabilities.image,
        capabilities.prompt_capabilities.audio,
        capabilities.prompt_capabilities.embedded_context,
    ) == (False, False, True)
    assert capabilities.session_capabilities.list is not None
    assert capabilities.session_capabilities.delete is not None
    assert answer.agent_info.name == "imprintd" and answer.agent_info.version
    assert answer.auth_methods == []


async def test_a_prompt_streams_the_answer_and_ends_the_turn(agent, stub, workspace, daemon_env):
    stub.queue("Billing listens on 8101.")
    session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])

    answer = await ask(agent, session.session_id, acp.text_block("Which port does billing use?"))

    assert answer.stop_reason == "end_turn"
    updates = agent.take_updates(session.session_id)
    assert texts(updates, "agent_message_chunk") == ["Billing", " listens", " on", " 8101."]  # as the model wrote it
    assert user_messages(stub.requests[-1])[-1] == "Which port does billing use?"
    assert stored_messages(daemon_env, session.session_id) == [
        ("user", "Which port does billing use?"),
        ("assistant", "Billing listens on 8101."),
    ]
    with stored(daemon_env) as store:
        assert store.session(session.session_id).workspace == str(workspace.resolve())


async def test_the_answer_streams_while_the_model_is_still_writing(agent, stub, workspace, daemon_env):
    answer_text = (
        "Billing listens on 8101 in every environment: the compose file maps it, the gateway "
        "forwards to it, and the health check probes it there every ten seconds."
    )
    words = answer_text.split(" ")
    hold = threading.Event()
    stub.queue(StubReply(text=answer_text, hold=hold))  # the model writes one piece, then waits for the test
    session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
    prompt = asyncio.ensure_future(ask(agent, session.session_id, acp.text_block("Which port does billing use?")))
    try:
        first = await agent.wait_for_update(session.session_id, lambda u: u.session_update == "agent_message_chunk")
        # The client shows the first piece while the rest is not even written yet.
        assert first.content.text == words[0]
        assert len(first.content.text) < len(answer_text) / 3
        assert not prompt.done()
    finally:
        hold.set()
    assert (await asyncio.wait_for(prompt, 60)).stop_reason == "end_turn"
    chunks = texts(agent.take_updates(session.session_id), "agent_message_chunk")
    assert len(chunks) == len(words)  # each piece the model wrote is a chunk of its own
    assert "".join(chunks) == answer_text
    assert stored_messages(daemon_env, session.session_id)[-1] == ("assistant", answer_text)


async def test_a_follow_up_in_the_session_sends_the_earlier_exchange(agent, stub, workspace):
    stub.queue("Billing listens on 8101.", "It is set in deploy/billing.yaml.")
    session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
    await ask(agent, session.session_id, acp.text_block("Which port does billing use?"))
    await ask(agent, session.session_id, acp.text_block("Where is that set?"))
    conversation = [(m["role"], m["content"]) for m in stub.requests[-1]["messages"] if m["role"] != "system"]
    assert conversation == [
        ("user", "Which port does billing use?"),
        ("assistant", "Billing listens on 8101."),
        ("user", "Where is that set?"),
    ]


async def test_attached_resources_go_with_the_question_and_links_are_named(agent, stub, workspace, daemon_env):
    stub.queue("It sets the port.")
    (workspace / "deploy").mkdir()
    config = workspace / "deploy" / "billing.yaml"
    config.write_text("port: 8101\n", encoding="utf-8")
    session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])

    await ask(
        agent,
        session.session_id,
        acp.text_block("What does"),
        acp.resource_link_block(name="billing.yaml", uri=config.as_uri()),
        acp.text_block("set? Compare with the selection."),
        acp.resource_block(acp.embedded_text_resource(f"{config.as_uri()}#L1:1", "port: 8101")),
    )

    question = (  # blocks that would run together go on lines of their own
        "What does\nbilling.yaml (deploy/billing.yaml)\nset? Compare with the selection.\n\n"
        "Attached deploy/billing.yaml#L1:1:\n```\nport: 8101\n```"
    )
    assert user_messages(stub.requests[-1])[-1] == question
    assert stored_messages(daemon_env, session.session_id)[0] == ("user", question)


async def test_a_session_server_that_does_not_start_leaves_the_reply_to_the_workspace_tools(agent, stub, workspace):
    stub.queue("Hello.")
    server = schema.McpServerStdio(name="files", command="/usr/bin/true", args=[], env=[])  # exits at once
    session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[server])
    assert (await ask(agent, session.session_id, acp.text_block("Hi"))).stop_reason == "end_turn"
    # Reported once, by name, as a failed tool call (and in the log).
    [failed] = [u for u in agent.take_updates(session.session_id) if u.session_update == "tool_call"]
    assert failed.status == "failed" and "files" in failed.title + failed.content[0].content.text
    assert "files" in agent.log()
    offered = {tool["function"]["name"] for tool in stub.requests[-1]["tools"]}
    assert offered == {"search", "read_file", "conversation_history"}  # nothing from the MCP server


async def test_bad_prompts_are_answered_with_errors_naming_what_was_wrong(agent, stub, workspace):
    session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
    with pytest.raises(acp.RequestError) as error:
        await ask(agent, "no-such-session", acp.text_block("Hi"))
    assert error.value.code == -32002 and "no-such-session" in str(error.value)
    with pytest.raises(acp.RequestError) as error:
        await ask(agent, session.session_id, acp.image_block("aGk=", "image/png"))
    assert error.value.code == -32602 and "prompt[0]: image content is not supported" in str(error.value)
    with pytest.raises(acp.RequestError) as error:
        await ask(agent, session.session_id, acp.text_block("   "))
    assert error.value.code == -32602 and "prompt" in str(error.value)
    with pytest.raises(acp.RequestError) as error:
        await agent.conn.new_session(cwd=str(workspace / "missing"), mcp_servers=[])
    assert error.value.code == -32602 and "cwd" in str(error.value) and "missing" in str(error.value)
    with pytest.raises(acp.RequestError) as error:
        await agent.conn.new_session(cwd="relative/dir", mcp_servers=[])
    assert error.value.code == -32602 and "absolute" in str(error.value)
    assert stub.requests == []  # none of them reached the model
    stub.queue("Still here.")
    assert (await ask(agent, session.session_id, acp.text_block("Hi"))).stop_reason == "end_turn"


async def test_an_unreachable_model_fails_the_prompt_with_the_cause_and_the_agent_keeps_serving(
    agent, stub, workspace, daemon_env
):
    # Three tries the server answers 503 (retried at once: Retry-After 0, not the 1+2+4 s backoff),
    # then the last retry's connection dropped: its cause is what the user is told.
    stub.queue(*unavailable(3), drop_connection)
    session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
    with pytest.raises(acp.RequestError) as error:
        await ask(agent, session.session_id, acp.text_block("Is anyone there?"))
    assert error.value.code == -32603 and "stream ended" in str(error.value)  # the cause, in words
    assert "incident" not in str(error.value)
    assert stored_messages(daemon_env, session.session_id) == [("user", "Is anyone there?")]
    stub.queue("Yes.")
    assert (await ask(agent, session.session_id, acp.text_block("Now?"))).stop_reason == "end_turn"


async def test_cancel_answers_cancelled_and_stores_only_the_question(agent, stub, workspace, daemon_env):
    reached, hold = threading.Event(), threading.Event()

    def slow(request):
        reached.set()
        return StubReply(text="This answer will never finish", hold=hold)

    stub.queue(slow)
    session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
    prompt = asyncio.ensure_future(ask(agent, session.session_id, acp.text_block("Tell me a long story")))
    try:
        assert await asyncio.to_thread(reached.wait, 60), "the question never reached the model"
        await agent.wait_for_update(session.session_id, lambda u: u.session_update == "agent_message_chunk")
        await agent.conn.cancel(session_id=session.session_id)
        answer = await asyncio.wait_for(prompt, 60)
    finally:
        hold.set()  # the model would go on writing; none of it may reach the client
    assert answer.stop_reason == "cancelled"
    assert texts(agent.take_updates(session.session_id), "agent_message_chunk") == ["This"]
    assert stored_messages(daemon_env, session.session_id) == [("user", "Tell me a long story")]

    stub.queue("A short one.")  # the agent and the session go on
    assert (await ask(agent, session.session_id, acp.text_block("A short one, then"))).stop_reason == "end_turn"
    assert "".join(texts(agent.take_updates(session.session_id), "agent_message_chunk")) == "A short one."
    assert stored_messages(daemon_env, session.session_id) == [
        ("user", "Tell me a long story"),
        ("user", "A short one, then"),
        ("assistant", "A short one."),
    ]


async def test_a_second_prompt_in_a_session_waits_for_the_first(agent, stub, workspace, daemon_env):
    reached, hold = threading.Event(), threading.Event()

    def slow(request):
        reached.set()
        return StubReply(text="First answer.", hold=hold)

    stub.queue(slow, "Second answer.")
    session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
    first = asyncio.ensure_future(ask(agent, session.session_id, acp.text_block("First?")))
    try:
        assert await asyncio.to_thread(reached.wait, 60)
        second = asyncio.ensure_future(ask(agent, session.session_id, acp.text_block("Second?")))
        listed = await agent.conn.list_sessions()  # short requests are answered meanwhile
        assert [s.session_id for s in listed.sessions] == [session.session_id]
        assert len(stub.requests) == 1 and not second.done()
    finally:
        hold.set()
    assert (await asyncio.wait_for(first, 60)).stop_reason == "end_turn"
    assert (await asyncio.wait_for(second, 60)).stop_reason == "end_turn"
    assert stored_messages(daemon_env, session.session_id) == [
        ("user", "First?"),
        ("assistant", "First answer."),
        ("user", "Second?"),
        ("assistant", "Second answer."),
    ]


async def test_settings_come_from_the_imprint_environment_and_flags_after_acp(daemon_env, stub, tmp_path, workspace):
    env = {**daemon_env, "IMPRINT_CHAT_MAX_TOKENS": "77"}
    stub.queue("Short.", "Shorter.")
    async with acp_agent(env, tmp_path, "from-env") as agent:
        session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
        await ask(agent, session.session_id, acp.text_block("Hi"))
    assert stub.requests[-1]["max_tokens"] == 77
    async with acp_agent(env, tmp_path, "from-flag", args=("--set", "chat.max_tokens=66")) as agent:
        session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
        await ask(agent, session.session_id, acp.text_block("Hi"))
    assert stub.requests[-1]["max_tokens"] == 66  # a flag wins over the environment


async def test_a_reasoning_models_thoughts_are_thought_chunks_never_the_answer(agent, stub, workspace, daemon_env):
    stub.queue(StubReply(reasoning="The user asks for the port.", text="Billing listens on 8101."))
    session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
    await ask(agent, session.session_id, acp.text_block("Which port does billing use?"))
    updates = agent.take_updates(session.session_id)
    assert "".join(texts(updates, "agent_thought_chunk")).endswith("The user asks for the port.")
    assert "".join(texts(updates, "agent_message_chunk")) == "Billing listens on 8101."
    with stored(daemon_env) as store:
        answer = store.messages(session.session_id)[-1]
    assert (answer.content, answer.reasoning) == ("Billing listens on 8101.", "The user asks for the port.")

    # Loaded again, the thoughts come back as a thought chunk before the answer they led to.
    loaded = await agent.conn.load_session(cwd=str(workspace), session_id=session.session_id, mcp_servers=[])
    assert loaded is None or loaded.model_dump(exclude_none=True) == {}
    replayed = agent.take_updates(session.session_id)
    assert [(u.session_update, u.content.text) for u in replayed] == [
        ("user_message_chunk", "Which port does billing use?"),
        ("agent_thought_chunk", "The user asks for the port."),
        ("agent_message_chunk", "Billing listens on 8101."),
    ]
