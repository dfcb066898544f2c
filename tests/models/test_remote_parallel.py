"""Remote replies side by side: a slow stream in one session does not hold another's reply.

Over the scripted OpenAI server (``tests/openai_stub.py``) through the real remote provider and
``Chat.reply``: the first session's stream is held open on an event the test sets; the second
session's reply completes meanwhile. Also: one HTTP client per model, its connections reused,
closed when the model is replaced; ``chat.remote_parallel`` bounds requests at once; the count
caches hold a bounded number of characters.
"""

from __future__ import annotations

import sys
import threading
import tracemalloc

import anyio
import pytest

from imprintd.messages import user
from imprintd.models.remote import RemoteModel
from tests.helpers import ask, remote_chat
from tests.openai_stub import OpenAIStub, StubReply


async def wait_for(event: threading.Event) -> None:
    """Wait, off the loop, for the stub's thread to set ``event`` (no sleeps, no polling)."""
    assert await anyio.to_thread.run_sync(event.wait, 30), "the stub never got the request"


async def test_a_held_stream_in_one_session_does_not_hold_another_sessions_reply():
    with OpenAIStub() as stub:
        chat = remote_chat(stub)
        arrived, release = threading.Event(), threading.Event()

        def slow(request: dict) -> StubReply:
            arrived.set()
            return StubReply(text="The slow answer arrives last.", hold=release)

        stub.queue(slow, "The quick answer.")
        finished: list[str] = []

        async def slow_session() -> None:
            outcome, _ = await ask(chat, "A question the server is slow to answer?")
            finished.append(outcome.text)

        async with anyio.create_task_group() as group:
            group.start_soon(slow_session)
            await wait_for(arrived)  # the slow stream is open, held after its first word
            quick, _ = await ask(chat, "A quick question?")
            # The other session's reply is whole while the first stream is still held open.
            assert quick.text == "The quick answer."
            assert finished == []
            release.set()
        assert finished == ["The slow answer arrives last."]
        asked = [request["messages"][-1]["content"] for request in stub.requests]
        assert asked == ["A question the server is slow to answer?", "A quick question?"]
        chat.close()


class WatchedSlots:
    """The model's request slots, saying when a request has to wait for one (no polling)."""

    def __init__(self, inner: anyio.CapacityLimiter) -> None:
        self.inner = inner
        self.waiting = anyio.Event()

    @property
    def total_tokens(self) -> float:
        return self.inner.total_tokens

    async def acquire_on_behalf_of(self, borrower: object) -> None:
        if self.inner.available_tokens == 0:
            self.waiting.set()
        await self.inner.acquire_on_behalf_of(borrower)

    def release_on_behalf_of(self, borrower: object) -> None:
        self.inner.release_on_behalf_of(borrower)


async def test_remote_parallel_one_makes_the_second_reply_wait_its_turn():
    with OpenAIStub() as stub:
        chat = remote_chat(stub, **{"chat.remote_parallel": 1})
        model = chat.model()
        assert isinstance(model, RemoteModel)
        connections = model._connections_here()
        slots = WatchedSlots(connections.slots)
        connections.slots = slots  # type: ignore[assignment]
        arrived, release = threading.Event(), threading.Event()

        def slow(request: dict) -> StubReply:
            arrived.set()
            return StubReply(text="First.", hold=release)

        stub.queue(slow, "Second.")
        order: list[str] = []

        async def session(text: str) -> None:
            outcome, _ = await ask(chat, text)
            order.append(outcome.text)

        async with anyio.create_task_group() as group:
            group.start_soon(session, "One?")
            await wait_for(arrived)
            group.start_soon(session, "Two?")
            await slots.waiting.wait()  # the second reply asks for the one slot, held by the first
            assert len(stub.requests) == 1  # so it waits, unsent
            release.set()
        assert order == ["First.", "Second."]
        chat.close()


async def test_one_http_client_per_model_reused_and_closed_when_the_model_is_replaced():
    with OpenAIStub() as stub:
        chat = remote_chat(stub)
        stub.queue("one", "two")
        await ask(chat, "First?")
        model = chat.model()
        assert isinstance(model, RemoteModel) and model._connections is not None
        client = model._connections.client
        await ask(chat, "Second?")
        assert model._connections.client is client  # the same client, its connection kept
        chat.update_settings(chat.resolved.apply({"chat.model": "other"}, "test"))
        replacement = chat.model()
        assert replacement is not model
        await anyio.lowlevel.checkpoint()
        for _ in range(100):
            if client.is_closed:
                break
            await anyio.lowlevel.checkpoint()
        assert client.is_closed and model._connections is None
        chat.close()


def test_the_count_cache_keeps_no_message_or_text_alive():
    model = RemoteModel("http://127.0.0.1:1/v1", "m")
    text = "".join(["pasted ", "x" * 900])  # made at run time: a constant is held by the code too
    message = user(text)
    before = sys.getrefcount(text), sys.getrefcount(message)
    assert model.count_message(message) == model.count_message(message) == model._estimate(message)
    # Counts are found by a hash of what they read: a deleted session's text is not held here.
    assert (sys.getrefcount(text), sys.getrefcount(message)) == before


def test_the_count_cache_does_not_keep_sixty_pasted_megabytes():
    model = RemoteModel("http://127.0.0.1:1/v1", "m")
    tracemalloc.start()
    try:
        for index in range(60):
            model.count_message(user(f"{index}" + "z" * 1_000_000))
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held < 1 << 20  # 60 MB were counted; what is kept is their hashes


@pytest.mark.parametrize("parallel", [1, 3])
def test_the_setting_reaches_the_model(parallel):
    with OpenAIStub() as stub:
        chat = remote_chat(stub, **{"chat.remote_parallel": parallel})
        model = chat.model()
        assert isinstance(model, RemoteModel) and model._parallel == parallel
