"""The model config option over ACP with ``chat.provider = "openai"``: it offers
the models the server lists (``GET {base_url}/models``, asked once per agent and again when the
option is set), choosing one sets ``chat.model`` with the provider staying ``openai``, and a server
that cannot be asked still leaves a session offering the model in use."""

from __future__ import annotations

import asyncio

import acp
import pytest

from tests.acp.peer import acp_agent
from tests.acp.test_commands import text


def unwrap(option):  # the SDK wraps a select option in a RootModel
    return getattr(option, "root", option)


@pytest.fixture
def env(daemon_env, tmp_path):
    """No GGUF on this machine for the picker to find: only what the server offers."""
    (tmp_path / "models").mkdir()
    return {**daemon_env, "IMPRINT_CHAT_MODELS_DIR": str(tmp_path / "models"), "HOME": str(tmp_path / "home")}


async def test_new_sessions_offer_the_servers_models_asking_it_once(env, stub, tmp_path, workspace):
    stub.models = ["stub", "qwen2.5-coder-7b", "llama-3.1-8b"]
    async with acp_agent(env, tmp_path) as agent:
        first = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
        second = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
    for session in (first, second):
        [option] = map(unwrap, session.config_options)
        assert (option.category, option.current_value) == ("model", "stub")
        assert [(o.value, o.name) for o in option.options] == [(m, m) for m in stub.models]
    assert stub.gets == ["/v1/models"], "the second session/new uses the list the first one got"


async def test_choosing_a_served_model_sets_chat_model_and_the_next_reply_asks_it(env, stub, tmp_path, workspace):
    stub.models = ["stub", "qwen2.5-coder-7b"]
    stub.queue("Billing listens on 8101.")
    async with acp_agent(env, tmp_path) as agent:
        session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
        stub.models = ["stub", "qwen2.5-coder-7b", "loaded-since"]  # setting the option asks again
        chosen = await agent.conn.set_config_option(
            session_id=session.session_id, config_id="model", value="loaded-since"
        )
        [after] = map(unwrap, chosen.config_options)
        assert after.current_value == "loaded-since"
        assert [o.value for o in after.options] == stub.models
        update = await agent.wait_for_update(session.session_id, lambda u: u.session_update == "config_option_update")
        assert [unwrap(o).current_value for o in update.config_options] == ["loaded-since"]
        await asyncio.wait_for(agent.conn.prompt(session_id=session.session_id, prompt=[text("Which port?")]), 120)
    assert stub.requests[-1]["model"] == "loaded-since", "the provider stayed openai, with the model chosen"
    # The picker's two lists, then the reply's model asking its window once (vLLM's max_model_len).
    assert stub.gets == ["/v1/models", "/v1/models", "/v1/models"]


async def test_a_server_that_fails_still_gives_a_session_with_the_model_in_use(env, stub, tmp_path, workspace):
    stub.models_status = 500
    async with acp_agent(env, tmp_path) as agent:
        session = await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
        [option] = map(unwrap, session.config_options)
        assert option.current_value == "stub"
        assert [(o.value, o.description) for o in option.options] == [("stub", "in use")]
        with pytest.raises(acp.RequestError) as refused:
            await agent.conn.set_config_option(session_id=session.session_id, config_id="model", value="other")
        assert refused.value.code == -32602
        assert "'other' is not one of the models offered ('stub')" in str(refused.value)
        await agent.conn.new_session(cwd=str(workspace), mcp_servers=[])
    assert "the model picker lists no served models: the model server answered 500" in agent.log()
    # Once for the first session, once for the choice; not for the second session.
    assert stub.gets == ["/v1/models", "/v1/models"]


async def test_the_server_is_asked_off_the_event_loop_and_again_when_its_url_changes(
    stub, tmp_path, workspace, monkeypatch
):
    import threading

    import imprintd.acp.agent
    from imprintd.acp import wire
    from imprintd.acp.agent import Agent
    from tests.helpers import make_chat
    from tests.standin import StandInModel
    from tests.test_off_loop import Notes

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "models").mkdir()
    chat = make_chat(
        StandInModel(),
        **{
            "chat.provider": "openai",
            "chat.base_url": stub.base_url,
            "chat.model": "stub",
            "chat.models_dir": str(tmp_path / "models"),
        },
    )
    asked: list[tuple[str, bool]] = []  # (base URL, on the loop's thread)
    original = imprintd.acp.agent.served_models

    def watched(base_url: str) -> list[str]:
        asked.append((base_url, threading.current_thread() is loop_thread))
        return original(base_url)

    monkeypatch.setattr(imprintd.acp.agent, "served_models", watched)
    loop_thread = threading.current_thread()
    agent = Agent(chat, Notes())  # type: ignore[arg-type]
    new = await agent.new_session(wire.NewSessionParams(cwd=str(workspace)))
    await agent.new_session(wire.NewSessionParams(cwd=str(workspace)))
    picked = wire.SetConfigOptionParams(session_id=new.session_id, config_id="model", value="stub")
    await agent.set_config_option(picked)
    elsewhere = stub.base_url.replace("127.0.0.1", "localhost")
    chat.update_settings(chat.resolved.apply({"chat": {"base_url": elsewhere}}, "test"))
    await agent.new_session(wire.NewSessionParams(cwd=str(workspace)))
    assert asked == [(stub.base_url, False), (stub.base_url, False), (elsewhere, False)]


# --- the picker never costs a session, and always offers both kinds of model ---------------


def in_process_agent(tmp_path, monkeypatch, **settings):
    """An ``Agent`` on a stand-in model, HOME empty, ``chat.models_dir`` a fresh folder."""
    from imprintd.acp.agent import Agent
    from tests.helpers import make_chat
    from tests.standin import StandInModel
    from tests.test_off_loop import Notes

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    folder = tmp_path / "models"
    folder.mkdir(exist_ok=True)
    chat = make_chat(StandInModel(), **{"chat.models_dir": str(folder), **settings})
    return Agent(chat, Notes()), folder  # type: ignore[arg-type]


def option_of(result):
    [option] = result.config_options
    return option


async def test_a_broken_link_among_the_models_still_gives_sessions(tmp_path, monkeypatch, workspace):
    from imprintd.acp import wire
    from tests.models.test_on_disk import CHAT, gguf

    agent, folder = in_process_agent(tmp_path, monkeypatch, **{"chat.base_url": "http://127.0.0.1:9/v1"})
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    snapshot = tmp_path / "home" / ".cache" / "huggingface" / "hub" / "models--org--repo" / "snapshots" / "rev"
    snapshot.mkdir(parents=True)
    (snapshot / "gone.gguf").symlink_to(snapshot / "deleted-blob")  # a download cut short
    (snapshot / "loop.gguf").symlink_to(snapshot / "loop.gguf")
    good = gguf(folder / "good.gguf", CHAT)
    for _ in range(2):
        option = option_of(await agent.new_session(wire.NewSessionParams(cwd=str(workspace))))
        assert [o.value for o in option.options] == [option.current_value, str(good)]


async def test_a_listing_that_fails_falls_back_to_the_model_in_use(tmp_path, monkeypatch, workspace):
    import imprintd.acp.agent
    from imprintd.acp import wire

    def broken(models_dir: str):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(imprintd.acp.agent, "find_models", broken)
    agent, _ = in_process_agent(tmp_path, monkeypatch, **{"chat.provider": "openai", "chat.model": "qwen"})
    option = option_of(await agent.new_session(wire.NewSessionParams(cwd=str(workspace))))
    assert (option.current_value, [(o.value, o.description) for o in option.options]) == ("qwen", [("qwen", "in use")])


async def test_a_hostile_server_list_leaves_sessions_working_and_refusals_short(tmp_path, monkeypatch, workspace):
    from imprintd.acp import wire
    from imprintd.acp.jsonrpc import RpcError
    from tests.models.test_served import Hostile

    hostile = Hostile()
    try:
        agent, _ = in_process_agent(
            tmp_path,
            monkeypatch,
            **{"chat.provider": "openai", "chat.model": "m", "chat.base_url": hostile.url("deep")},
        )
        option = option_of(await agent.new_session(wire.NewSessionParams(cwd=str(workspace))))
        assert [(o.value, o.description) for o in option.options] == [("m", "in use")]

        chat = agent.chat
        chat.update_settings(chat.resolved.apply({"chat": {"base_url": hostile.url("many")}}, "test"))
        session = await agent.new_session(wire.NewSessionParams(cwd=str(workspace)))
        assert len(option_of(session).options) == 1 + 1_000  # the model in use and the first 1,000 ids
        with pytest.raises(RpcError) as refused:
            await agent.set_config_option(
                wire.SetConfigOptionParams(session_id=session.session_id, config_id="model", value="nope")
            )
        assert refused.value.code == -32602 and str(refused.value).endswith("'model-18' and 981 more).")
    finally:
        hostile.close()


async def test_a_slow_server_does_not_hold_session_new_and_its_list_comes_to_later_sessions(
    stub, tmp_path, monkeypatch, workspace
):
    import threading

    import imprintd.acp.agent
    from imprintd.acp import wire

    released = threading.Event()
    original = imprintd.acp.agent.served_models

    def slow(base_url: str) -> list[str]:
        released.wait(60)
        return original(base_url)

    monkeypatch.setattr(imprintd.acp.agent, "served_models", slow)
    monkeypatch.setattr(imprintd.acp.agent, "SERVED_WAIT_S", 0)
    stub.models = ["stub", "qwen2.5-coder-7b"]
    agent, _ = in_process_agent(tmp_path, monkeypatch, **{"chat.provider": "openai", "chat.base_url": stub.base_url})
    agent.chat.update_settings(agent.chat.resolved.apply({"chat": {"model": "stub"}}, "test"))
    first = option_of(await agent.new_session(wire.NewSessionParams(cwd=str(workspace))))
    assert [(o.value, o.description) for o in first.options] == [("stub", "in use")]
    released.set()
    monkeypatch.setattr(imprintd.acp.agent, "SERVED_WAIT_S", 60)
    later = option_of(await agent.new_session(wire.NewSessionParams(cwd=str(workspace))))
    assert [o.value for o in later.options] == ["stub", "qwen2.5-coder-7b"]
    assert stub.gets == ["/v1/models"]


async def test_the_servers_models_are_offered_beside_a_local_gguf_and_either_can_be_chosen(
    stub, tmp_path, monkeypatch, workspace
):
    from imprintd.acp import wire
    from tests.models.test_on_disk import CHAT, gguf

    stub.models = ["qwen2.5-coder-7b"]
    agent, folder = in_process_agent(tmp_path, monkeypatch, **{"chat.base_url": stub.base_url})
    local = str(gguf(folder / "local.gguf", CHAT))
    agent.chat.update_settings(agent.chat.resolved.apply({"chat": {"provider": "local", "model": local}}, "test"))
    session = await agent.new_session(wire.NewSessionParams(cwd=str(workspace)))
    assert [o.value for o in option_of(session).options] == ["qwen2.5-coder-7b", local]

    def choose(value: str):
        params = wire.SetConfigOptionParams(session_id=session.session_id, config_id="model", value=value)
        return agent.set_config_option(params)

    chosen = option_of(await choose("qwen2.5-coder-7b"))
    settings = agent.chat.settings
    assert (settings.provider, settings.model, chosen.current_value) == (
        "openai",
        "qwen2.5-coder-7b",
        "qwen2.5-coder-7b",
    )
    assert [o.value for o in chosen.options] == ["qwen2.5-coder-7b", local], "the GGUF stays offered"
    back = option_of(await choose(local))
    assert (agent.chat.settings.provider, agent.chat.settings.model, back.current_value) == ("local", local, local)
    assert [o.value for o in back.options] == ["qwen2.5-coder-7b", local], "and the server's model too"
