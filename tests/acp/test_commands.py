"""The slash commands and the session's title over ACP: published after session/new and
session/load, run instead of asking the model, storing nothing but what they should."""

from __future__ import annotations

import asyncio
from pathlib import Path

from acp import schema

from imprintd.store import Store
from tests.acp.peer import acp_agent, texts
from tests.e2e.summary_script import bullets, is_summarizer
from tests.openai_stub import StubReply

NAMES = ["compact", "context", "sources", "export"]


def text(value: str) -> schema.TextContentBlock:
    return schema.TextContentBlock(type="text", text=value)


async def ask(agent, session_id: str, words: str) -> schema.PromptResponse:
    return await asyncio.wait_for(agent.conn.prompt(session_id=session_id, prompt=[text(words)]), 120)


def stored(daemon_env, session_id: str):
    with Store.open(Path(daemon_env["IMPRINT_DATA_DIR"]) / "imprint.sqlite3") as store:
        return [(m.seq, m.role, m.content) for m in store.messages(session_id)], store.summary(session_id)


async def test_commands_are_published_after_new_and_load_and_the_title_after_the_first_question(
    daemon_env, stub, tmp_path, workspace
):
    stub.queue("Billing listens on 8101.", "Still 8101.")
    async with acp_agent(daemon_env, tmp_path, "first") as agent:
        session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
        sid = session.session_id
        published = await agent.wait_for_update(sid, lambda u: u.session_update == "available_commands_update")
        assert [c.name for c in published.available_commands] == NAMES
        assert all(c.description for c in published.available_commands)
        await ask(agent, sid, "Which port does billing use?\nAnd why?")
        announced = agent.take_announcements(sid)
        assert [u.session_update for u in announced] == ["available_commands_update", "session_info_update"]
        assert announced[1].title == "Which port does billing use?" and announced[1].updated_at
        await ask(agent, sid, "Still?")  # the title did not change: not sent again
        assert agent.take_announcements(sid) == []
        listed = (await agent.conn.list_sessions()).sessions
        assert [(s.session_id, s.title) for s in listed] == [(sid, "Which port does billing use?")]

    async with acp_agent(daemon_env, tmp_path, "second") as agent:
        await agent.conn.load_session(cwd=str(workspace), session_id=sid, mcp_servers=[])
        announced = agent.take_announcements(sid)
        assert [u.session_update for u in announced] == ["session_info_update", "available_commands_update"]
        assert announced[0].title == "Which port does billing use?"


async def test_the_title_told_from_the_first_question_is_text(daemon_env, stub, tmp_path, workspace):
    # A first question opening with a zero-width line and holding terminal commands: the title
    # the client is told (and session/list gives) is its first visible line, as text.
    stub.queue("Billing listens on 8101.")
    async with acp_agent(daemon_env, tmp_path, "first") as agent:
        sid = (await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
        await agent.wait_for_update(sid, lambda u: u.session_update == "available_commands_update")
        await ask(agent, sid, "\u200b\ufeff\n\x1b[2J\x07Which\tport does \x9bbilling use?\x7f")
        announced = agent.take_announcements(sid)
        assert [u.title for u in announced if u.session_update == "session_info_update"] == [
            "[2JWhich port does billing use?"
        ]
        listed = (await agent.conn.list_sessions()).sessions
        assert [s.title for s in listed] == ["[2JWhich port does billing use?"]


async def test_commands_answer_without_the_model_and_store_only_the_summary(daemon_env, stub, tmp_path, workspace):
    (workspace / "billing.yaml").write_text("billing:\n  port: 8101\n", encoding="utf-8")

    def model(body: dict):
        return bullets(body) if is_summarizer(body) else "Noted."

    stub.queue(
        StubReply(text="", tool_calls=[{"name": "read_file", "arguments": {"path": "billing.yaml"}}]),
        "Billing listens on 8101 [1].",
        model,
        model,
        model,
    )
    async with acp_agent(daemon_env, tmp_path) as agent:
        session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
        sid = session.session_id
        nothing_yet = await ask(agent, sid, "/context")
        assert nothing_yet.stop_reason == "end_turn"
        assert "".join(texts(agent.take_updates(sid), "agent_message_chunk")).startswith("Nothing to context yet")

        await ask(agent, sid, "Which port does billing use?")
        await ask(agent, sid, "Topic three")
        await ask(agent, sid, "Topic five")
        agent.take_updates(sid)
        asked = len(stub.requests)
        before, _ = stored(daemon_env, sid)

        await ask(agent, sid, "/sources")
        updates = agent.take_updates(sid)
        links = [u.content for u in updates if u.session_update == "agent_message_chunk" and u.content.type != "text"]
        assert "".join(texts(updates, "agent_message_chunk")).startswith("Sources of the answer #4:\n")
        assert [(link.type, link.name) for link in links] == [("resource_link", "billing.yaml:1-2")]

        await ask(agent, sid, "/context")
        shown = "".join(texts(agent.take_updates(sid), "agent_message_chunk"))
        assert shown.startswith("Context for the next question: ") and "- earlier messages: " in shown
        assert "Messages in view: #1–#8" in shown

        await ask(agent, sid, "/export")
        exported = "".join(texts(agent.take_updates(sid), "agent_message_chunk"))
        assert exported.startswith("# Which port does billing use?\n") and "## You (#7)\n\nTopic five" in exported
        assert len(stub.requests) == asked  # none of them asked the model
        assert stored(daemon_env, sid) == (before, None)  # and none stored anything

        await ask(agent, sid, "/compact")
        said = "".join(texts(agent.take_updates(sid), "agent_message_chunk"))
        assert said.startswith("The summary now covers messages #1–#6.")
        assert [is_summarizer(body) for body in stub.requests[asked:]] == [True]
        messages, summary = stored(daemon_env, sid)
        assert messages == before and (summary.first_seq, summary.last_seq) == (1, 6)
        assert summary.text in said

        await ask(agent, sid, "/compact")
        assert "".join(texts(agent.take_updates(sid), "agent_message_chunk")).startswith("Nothing to summarize")


async def test_an_unknown_slash_word_is_a_question(agent, stub, workspace, daemon_env):
    stub.queue("It is a path.")
    session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
    await ask(agent, session.session_id, "/etc/hosts: what is it?")
    messages, _ = stored(daemon_env, session.session_id)
    assert messages == [(1, "user", "/etc/hosts: what is it?"), (2, "assistant", "It is a path.")]


async def test_the_model_is_a_config_option_listing_the_chat_ggufs_and_choosing_one_sets_chat_model(
    daemon_env, stub, tmp_path, workspace
):
    import shutil

    import acp

    from imprintd.models.embedded import find_embedded_model

    embedded = find_embedded_model()
    assert embedded is not None, "the embedded model comes with the test dependencies"
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(embedded, folder / "smol.gguf")
    (folder / "notes.gguf").write_bytes(b"not a model")
    env = {**daemon_env, "IMPRINT_CHAT_MODELS_DIR": str(folder), "HOME": str(tmp_path / "home")}
    async with acp_agent(env, tmp_path) as agent:
        session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])

        def unwrap(option):  # the SDK wraps a select option in a RootModel
            return getattr(option, "root", option)

        [option] = map(unwrap, session.config_options)
        assert (option.id, option.category, option.type, option.current_value) == ("model", "model", "select", "stub")
        values = [o.value for o in option.options]
        assert values == ["stub", str(folder / "smol.gguf")]  # the one in use, then the chat GGUFs (not notes.gguf)

        chosen = await agent.conn.set_config_option(
            session_id=session.session_id, config_id="model", value=str(folder / "smol.gguf")
        )
        [after] = map(unwrap, chosen.config_options)
        assert after.current_value == str(folder / "smol.gguf")
        update = await agent.wait_for_update(session.session_id, lambda u: u.session_update == "config_option_update")
        assert [unwrap(o).current_value for o in update.config_options] == [str(folder / "smol.gguf")]

        for config_id, value, named in (("mode", "x", "configId"), ("model", "/nope.gguf", "value")):
            try:
                await agent.conn.set_config_option(session_id=session.session_id, config_id=config_id, value=value)
            except acp.RequestError as error:
                assert error.code == -32602 and named in str(error)
            else:
                raise AssertionError(f"{config_id}={value} was taken")
