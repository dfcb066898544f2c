"""When the local provider copies a session's state, on the embedded SmolLM2 (greedy).

A coordinator round returns before any copy of llama.cpp's state is taken; the session's own
next round extends the context and needs none; a side request (summary, section worker) or
another session copies it away first, and the session's next round restores it and evaluates
only what is new.
"""

from __future__ import annotations

import mmap

import pytest

from imprintd.messages import assistant, system, user
from imprintd.models.base import session_requests, side_requests
from imprintd.models.local import LocalModel
from imprintd.models.state_cache import SPARES
from tests.models.real_model import needs_real_model

pytestmark = needs_real_model

SYSTEM = system("You are Imprint, an assistant for the user's own work. Answer in a few plain sentences. " * 6)
FIRST = [SYSTEM, user("Which port does the billing service listen on? It is described in services/billing.yaml. " * 4)]


def follow_up(messages, answer: str, question: str):
    return [*messages, assistant(answer), user(question)]


def with_copies(gguf) -> tuple[LocalModel, list[int]]:
    """A model keeping states in memory, and the token counts of each state copy it takes."""
    model = LocalModel(gguf, n_ctx=2048, state_cache_memory=1 << 30, state_cache_disk=0)
    loaded = model.load()
    copies: list[int] = []
    real = loaded.save_sequence

    def counted(spare):
        saved = real(spare)
        if saved is not None:
            copies.append(len(saved[0]))
        return saved

    loaded.save_sequence = counted  # type: ignore[method-assign]
    return model, copies


async def test_a_round_returns_uncopied_and_the_state_is_copied_only_when_a_worker_replaces_it(embedded_gguf):
    model, copies = with_copies(embedded_gguf)
    with session_requests("coordinator", persist=False):
        first = await model.complete(FIRST, max_tokens=8)
        assert copies == []  # the reply came back without a copy of the KV cache
        second = follow_up(FIRST, first.text, "And which file says how many replicas it runs?")
        again = await model.complete(second, max_tokens=8)
        assert copies == []  # the session's own next round extends the context: nothing to copy
        assert again.usage.evaluated_tokens <= again.usage.prompt_tokens - first.usage.prompt_tokens + 8

        with side_requests():  # a section worker: another prompt on the same model
            await model.complete([system("Take notes."), user("unrelated words " * 80)], max_tokens=2)
        assert len(copies) == 1 and copies[0] >= again.usage.prompt_tokens  # copied before it ran

        third = follow_up(second, again.text, "Does it restart on failure?")
        prompt, reusable = model.reusable_prefix(third)
        after = await model.complete(third, max_tokens=8)
    assert model.last_restore == ("coordinator", copies[0], "memory")
    reused = after.usage.prompt_tokens - after.usage.evaluated_tokens
    assert reused >= again.usage.prompt_tokens  # everything up to the worker was kept
    assert reused == reusable  # and what the research budget was told beforehand
    assert len(copies) == 1


async def test_another_session_copies_the_state_away_and_deleting_the_session_drops_an_uncopied_one(
    embedded_gguf,
):
    model, copies = with_copies(embedded_gguf)
    with session_requests("one", persist=False):
        await model.complete(FIRST, max_tokens=4)
    with session_requests("two", persist=False):
        await model.complete([SYSTEM, user("Summarize the deploy notes for me, please. " * 8)], max_tokens=4)
    assert len(copies) == 1  # session one's, before session two's prompt replaced it
    model.forget_session("two")  # its state was never copied: nothing of it is kept later
    with session_requests("one", persist=False):
        await model.complete(FIRST, max_tokens=4)
    assert len(copies) == 1
    assert model.last_restore is not None and model.last_restore[0] == "one"
    assert all(state.session_id == "one" for state in model.states._memory.values())


@pytest.mark.skipif(not SPARES, reason="memory is readied ahead on Linux only")
async def test_once_states_are_copied_away_the_next_copy_goes_into_memory_readied_while_idle(embedded_gguf):
    model, copies = with_copies(embedded_gguf)
    cache = model.states
    handed: list[int] = []
    take_spare = cache.take_spare

    def recorded(size):
        spare = take_spare(size)
        handed.append(len(spare) if spare is not None else 0)
        return spare

    cache.take_spare = recorded  # type: ignore[method-assign]
    with session_requests("one", persist=False):
        first = await model.complete(FIRST, max_tokens=4)
    with session_requests("two", persist=False):
        await model.complete([SYSTEM, user("Summarize the deploy notes for me, please. " * 8)], max_tokens=4)
    cache.flush()  # what the writer does once the model has been idle a moment: ready the memory
    assert handed == [0] and cache.memory_used > sum(s.nbytes for s in cache._memory.values())
    with session_requests("one", persist=False):
        again = await model.complete(FIRST, max_tokens=4)
    assert len(copies) == 2 and handed[1] > 0  # session two's state went into the memory readied
    two = next(s for s in cache._memory.values() if s.session_id == "two")
    assert isinstance(two.data, mmap.mmap) and len(two.data) < handed[1]  # cut down to the state
    assert model.last_restore is not None and model.last_restore[0] == "one"
    assert again.text == first.text  # restored from its copy, the same greedy answer
    with session_requests("two", persist=False):
        await model.complete([SYSTEM, user("Summarize the deploy notes for me, please. " * 8)], max_tokens=4)
    assert model.last_restore is not None and model.last_restore[0] == "two"  # the cut-down copy loads


async def test_a_model_replaced_on_a_settings_change_keeps_its_last_state_and_leaves_nothing_running(
    embedded_gguf, tmp_path
):
    from imprintd import settings as settings_mod
    from imprintd.chat import Chat
    from imprintd.models.state_cache import states_folder
    from tests.helpers import ask

    folder = states_folder(tmp_path / "cache")
    built: list[LocalModel] = []

    def factory(chat_settings):
        built.append(
            LocalModel(
                embedded_gguf,
                n_ctx=chat_settings.n_ctx,
                state_cache_memory=1 << 30,
                state_cache_disk=1 << 30,
                state_folder=folder,
            )
        )
        return built[-1]

    resolved = settings_mod.load({}, environ={}).apply(
        {"chat.first_look": False, "chat.max_tokens": 8, "chat.n_ctx": 2048}, "test"
    )
    chat = Chat(resolved, model_factory=factory, data_dir=tmp_path / "data")
    stored, _ = await ask(chat, "Say hello.")
    old = built[0]
    assert old.states is not None and old.states.memory_used == 0  # nothing copied yet: the reply returned first
    chat.update_settings(resolved.apply({"chat.n_ctx": 1024}, "test"))
    assert chat.model() is not old
    for thread in chat._retiring:
        thread.join(60)
    assert not any(thread.is_alive() for thread in chat._retiring)
    assert old.states.closing and old.states.memory_used == 0 and old.states._writer is None
    assert [path.name.split(".")[0] for path in folder.glob("*.state")] == [stored.session_id]
    chat.delete_session(stored.session_id)
    assert list(folder.glob("*.state")) == []
    chat.close()
