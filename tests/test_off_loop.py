"""Issue 35, item 1: the event loop only moves messages. Whole-prompt counts and renders, and
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
