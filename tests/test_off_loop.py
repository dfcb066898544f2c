"""The event loop only moves messages. Whole-prompt counts and renders, and
every store call, run in worker threads during a reply, however it ends (here: research stopped
by its token budget, so the final answer is fitted and written from notes)."""

from __future__ import annotations

import threading
import traceback

import pytest

from imprintd.store import MemoryStore, Store
from tests.helpers import ask, make_chat, tool_turn
from tests.standin import StandInModel, call


class WatchedModel(StandInModel):
    """The stand-in, noting where each count ran when it ran on the event loop's thread."""

    loop_thread: threading.Thread | None = None
    on_loop: list[str] = []
    #: Inside the stand-in's own work (its ``complete`` checks the prompt's size as a provider
    #: would), or inside a count already noted.
    inside: int = 0

    def _counted(self, what: str, count, *args):
        if not self.inside and threading.current_thread() is self.loop_thread:
            self.on_loop.append(f"{what}:\n{''.join(traceback.format_stack(limit=5)[:-2])}")
        self.inside += 1
        try:
            return count(*args)
        finally:
            self.inside -= 1

    def count_message(self, message):
        return self._counted("count_message", super().count_message, message)

    def count_prompt(self, messages, tools=()):
        return self._counted("count_prompt", super().count_prompt, messages, tools)

    def count_text(self, text):
        return self._counted("count_text", super().count_text, text)

    async def complete(self, messages, tools=(), **options):
        self.inside += 1
        try:
            return await super().complete(messages, tools, **options)
        finally:
            self.inside -= 1


@pytest.fixture
def watched_stores(monkeypatch):
    """Every store method the reply path calls, noting calls on the event loop's thread."""
    on_loop: list[str] = []
    loop_thread: list[threading.Thread] = []
    for store_class in (Store, MemoryStore):
        for name in (
            "create_session",
            "session",
            "append",
            "extend",
            "messages",
            "summary",
            "save_summary",
            "history_index",
            "sessions",
            "reading",
            "transaction",
        ):
            original = getattr(store_class, name, None)
            if original is None:
                continue  # Store's own plumbing

            def watched(self, *args, __original=original, __name=name, **kwargs):
                if loop_thread and threading.current_thread() is loop_thread[0]:
                    on_loop.append(f"{__name}:\n{''.join(traceback.format_stack(limit=6)[:-1])}")
                return __original(self, *args, **kwargs)

            monkeypatch.setattr(store_class, name, watched)
    return on_loop, loop_thread


async def test_a_reply_counts_renders_and_stores_off_the_event_loop(workspace, watched_stores):
    model = WatchedModel()
    model.on_loop = []
    model.loop_thread = threading.current_thread()
    store_calls_on_loop, loop_thread = watched_stores
    loop_thread.append(threading.current_thread())
    chat = make_chat(model, **{"chat.research_token_budget": 1024, "chat.max_tokens": 512})
    calls = [call("search", query="billing port"), call("read_file", call_id="c2", path="services/billing.yaml")]
    calls += [call("search", call_id=f"c{n}", query=f"deploy {n}") for n in range(3, 12)]
    pending = list(calls)

    def reply(request):
        if request.tools:
            return tool_turn(pending.pop(0)) if pending else tool_turn(call("search", call_id="x", query="billing"))
        return "Billing listens on port 8101 [1]."

    model.queue(*[reply] * (len(calls) + 4))
    outcome, _ = await ask(chat, "Which port does billing use?", workspace=workspace)
    assert outcome.stop_reason == "token_budget"  # research rounds, tool results, the final answer
    assert model.on_loop == [], "\n".join(model.on_loop)
    assert store_calls_on_loop == [], "\n".join(store_calls_on_loop)


async def test_the_first_look_fits_its_hits_off_the_event_loop(workspace, watched_stores):
    model = WatchedModel()
    model.on_loop = []
    model.loop_thread = threading.current_thread()
    store_calls_on_loop, loop_thread = watched_stores
    loop_thread.append(threading.current_thread())
    # n_ctx small enough that the look's share holds fewer hits than the search found: the
    # result is rendered and counted again for each hit left out.
    chat = make_chat(model, **{"chat.first_look": True, "chat.n_ctx": 2048, "chat.max_tokens": 256})
    model.n_ctx = 2048
    model.queue("Billing listens on port 8101 [1].")
    await ask(chat, "Which port does the billing service deploy and listen on?", workspace=workspace)
    first_prompt = model.requests[0].text
    assert "Which port does the billing service deploy and listen on?" in first_prompt
    assert "[1]" in first_prompt  # the look's numbered hits reached the model
    assert model.on_loop == [], "\n".join(model.on_loop)
    assert store_calls_on_loop == [], "\n".join(store_calls_on_loop)


async def test_the_conversation_history_tool_reads_the_store_off_the_event_loop(watched_stores):
    model = WatchedModel()
    model.on_loop = []
    model.loop_thread = threading.current_thread()
    store_calls_on_loop, loop_thread = watched_stores
    chat = make_chat(model)
    model.queue("Billing listens on 8101.")
    first, _ = await ask(chat, "Which port does billing use?")
    model.queue(
        tool_turn(call("conversation_history", call_id="h1", query="billing port")),
        tool_turn(call("conversation_history", call_id="h2", message=2)),
        "It was 8101.",
    )
    loop_thread.append(threading.current_thread())
    outcome, _ = await ask(chat, "What did you say about billing?", session_id=first.session_id)
    assert "8101" in model.requests[-1].text  # the tool's search and read reached the model
    assert outcome.text.startswith("It was 8101.")
    assert model.on_loop == [], "\n".join(model.on_loop)
    assert store_calls_on_loop == [], "\n".join(store_calls_on_loop)


async def test_chats_in_one_session_take_turns_in_the_order_sent_while_the_store_is_slow(monkeypatch):
    """Store calls in worker threads may end in any order; the turns must not follow them."""
    from contextlib import asynccontextmanager

    import anyio

    from imprintd.chat import Chat
    from imprintd.messages import Message

    model = StandInModel()
    chat = make_chat(model)
    model.queue("One.")
    first, _ = await ask(chat, "Start.")
    model.queue("Answer to A.", "Answer to B.")
    second_turn_taken = threading.Event()
    taken: list[str] = []
    original_turn = chat._turns.turn

    @asynccontextmanager
    async def turn(session_id):
        async with original_turn(session_id):
            taken.append(session_id)
            if len(taken) == 2:
                second_turn_taken.set()
            yield

    monkeypatch.setattr(chat._turns, "turn", turn)
    located: list[str] = []
    original_locate = Chat.locate

    def slow_first_locate(self, session_id):
        located.append(session_id)
        if len(located) == 1:
            # The first chat's store read is slow: the second must not take the turn meanwhile.
            second_turn_taken.wait(timeout=1.0)
        return original_locate(self, session_id)

    monkeypatch.setattr(Chat, "locate", slow_first_locate)
    async with anyio.create_task_group() as group:
        group.start_soon(ask, chat, "A?", first.session_id)
        await anyio.lowlevel.checkpoint()  # A is sent first
        group.start_soon(ask, chat, "B?", first.session_id)
    questions = [m.content for m in chat.store.messages(first.session_id) if m.role == "user"]
    assert questions == ["Start.", "A?", "B?"]
    answers = [
        m.content for m in chat.store.messages(first.session_id) if isinstance(m, Message) and m.role == "assistant"
    ]
    assert answers == ["One.", "Answer to A.", "Answer to B."]


@pytest.fixture
def watched_loop_calls(monkeypatch, watched_stores):
    """Besides the store: resolving a workspace folder (a stat of each part), telling the model
    (reads its GGUF's header), building the model, finding the models on disk (reads their
    headers), asking whether a file is one and rendering a stored session for ACP's load, each
    noted when it runs on the event loop's thread."""
    import pathlib

    import imprintd.acp.agent
    import imprintd.chat
    import imprintd.server
    from imprintd.chat import Chat

    on_loop, loop_thread = watched_stores

    def watch(owner, name):
        original = getattr(owner, name)

        def watched(*args, **kwargs):
            if loop_thread and threading.current_thread() is loop_thread[0]:
                on_loop.append(f"{name}:\n{''.join(traceback.format_stack(limit=6)[:-1])}")
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, watched)

    for module in (imprintd.chat, imprintd.acp.agent, imprintd.server):
        watch(module, "workspace_folder")
    watch(imprintd.acp.agent, "find_models")
    watch(imprintd.acp.agent, "identify_model")
    watch(imprintd.acp.agent, "replay")
    watch(Chat, "model_identity")
    watch(Chat, "model")
    watch(pathlib.Path, "is_file")
    return on_loop, loop_thread


class Notes:
    """An ACP connection that keeps what the agent sends."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, object]] = []

    def notify(self, method, params) -> None:
        self.sent.append((method, params))


async def test_acp_prompts_loads_and_deletes_ask_the_store_off_the_event_loop(workspace, watched_loop_calls):
    from imprintd.acp import wire
    from imprintd.acp.agent import Agent

    on_loop, loop_thread = watched_loop_calls
    model = StandInModel()
    chat = make_chat(model)
    agent = Agent(chat, Notes())  # type: ignore[arg-type]
    loop_thread.append(threading.current_thread())
    new = await agent.new_session(wire.NewSessionParams(cwd=str(workspace)))
    [option] = new.config_options
    picked = wire.SetConfigOptionParams(session_id=new.session_id, config_id="model", value=option.current_value)
    assert (await agent.set_config_option(picked)).config_options[0].current_value == option.current_value
    model.queue("Billing listens on 8101.", "Still 8101.")
    first = await agent.prompt(wire.PromptParams(session_id=new.session_id, prompt=[wire.TextBlock(text="Port?")]))
    second = await agent.prompt(wire.PromptParams(session_id=new.session_id, prompt=[wire.TextBlock(text="Sure?")]))
    exported = await agent.prompt(wire.PromptParams(session_id=new.session_id, prompt=[wire.TextBlock(text="/export")]))
    assert (first.stop_reason, second.stop_reason, exported.stop_reason) == ("end_turn",) * 3
    await agent.load_session(wire.LoadSessionParams(session_id=new.session_id, cwd=str(workspace)))
    titles = [p for m, p in agent.connection.sent if isinstance(getattr(p, "update", None), wire.SessionInfoUpdate)]
    assert titles  # told from the store after the first answer and on the load
    listed = await agent.list_sessions(wire.ListSessionsParams(cwd=str(workspace)))
    assert [s.session_id for s in listed.sessions] == [new.session_id]
    await agent.delete_session(wire.SessionParams(session_id=new.session_id))
    loop_thread.clear()  # the checks below are the test's own
    assert on_loop == [], "\n".join(on_loop)
    assert new.session_id not in {info.id for info in chat.sessions()}


async def test_the_wire_tells_the_model_and_resolves_workspaces_off_the_event_loop(workspace, watched_loop_calls):
    import asyncio
    import json

    from imprintd.server import build_server
    from tests.test_rpc import Capture, send

    on_loop, loop_thread = watched_loop_calls
    model = StandInModel()
    server = build_server(make_chat(model))
    server.protocol.set_writer(Capture())
    loop_thread.append(threading.current_thread())
    initialize = {"processId": None, "rootUri": workspace.as_uri(), "capabilities": {}}
    send(server, {"id": 1, "method": "initialize", "params": initialize})
    answered = await server.protocol.writer.answer(1)
    assert answered["result"]["capabilities"]["experimental"]["imprint"]["provider"] == server.chat.settings.provider
    assert server.chat.workspace == str(workspace.resolve())  # the editor's folder, resolved
    model.queue("Billing listens on 8101.")
    send(server, {"id": 2, "method": "imprint/chat", "params": {"text": "Port?", "workspace": str(workspace)}})
    chatted = await server.protocol.writer.answer(2)
    assert "8101" in json.dumps(chatted)
    send(server, {"id": 3, "method": "imprint/models", "params": {}})
    assert "current" in (await server.protocol.writer.answer(3))["result"]
    send(server, {"method": "workspace/didChangeConfiguration", "params": {"settings": {"chat": {"max_tokens": 300}}}})
    assert server.chat.settings.max_tokens == 300 and server._announcing  # applied; the model being told
    await asyncio.gather(*server._announcing)
    send(server, {"id": 4, "method": "imprint/context", "params": {"sessionId": chatted["result"]["sessionId"]}})
    assert "result" in await server.protocol.writer.answer(4), "the next question's share of the context"
    assert on_loop == [], "\n".join(on_loop)
