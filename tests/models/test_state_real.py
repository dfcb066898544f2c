"""Per-session model state on the embedded SmolLM2 (2,048-token context, greedy).

A session's follow-up evaluates only what is new after whatever ran in between: a side request
(summary, section workers), another session, a restart. A restored state is the context it was
saved from, byte for byte, so the answer is token for token the one llama.cpp's own prefix reuse
gives with nothing in between. (Against an evaluation from nothing, both can differ in the last
bits, because llama.cpp computes the generated tokens' cache one at a time rather than in a batch;
seen once in these tests as a different stopping point.) One session never receives another's
state.
"""

from __future__ import annotations

import logging

import anyio
import pytest

from imprintd.context import sections as sec
from imprintd.context import summary as summaries
from imprintd.context.originals import SectionArchive
from imprintd.messages import assistant, system, user
from imprintd.models import state_cache
from imprintd.models.base import RequestScope, session_requests, side_requests
from imprintd.models.local import LocalModel
from imprintd.models.state_cache import states_folder
from imprintd.offload import in_model_thread
from imprintd.research.budget import ResearchBudget
from tests.helpers import ask, make_chat
from tests.models.real_model import needs_real_model
from tests.recording import RecordingEvents

pytestmark = needs_real_model

SYSTEM = system(
    "You are Imprint, an assistant for the user's own work. Answer in a few plain sentences and say "
    "when you are not sure. " * 6
)


def conversation(*turns: str):
    """System prompt, then the turns as alternating user and assistant messages."""
    messages = [SYSTEM]
    for index, text in enumerate(turns):
        messages.append(user(text) if index % 2 == 0 else assistant(text))
    return messages


FIRST = conversation("Which port does the billing service listen on? It is described in services/billing.yaml. " * 4)


def with_states(gguf, folder) -> LocalModel:
    model = LocalModel(gguf, n_ctx=2048, state_cache_memory=1 << 30, state_cache_disk=1 << 30, state_folder=folder)
    model.load()
    return model


@pytest.fixture
def folder(tmp_path):
    return tmp_path / "states"


def follow_up(messages, answer: str, question: str):
    return [*messages, assistant(answer), user(question)]


async def clobber(model: LocalModel) -> None:
    """A side request on other text: llama.cpp's context no longer holds the session's prefix."""
    with side_requests():
        await model.complete([system("Take notes."), user("unrelated words " * 80)], max_tokens=2)


async def live(model: LocalModel, *requests):
    """The requests in a row on one context, as llama.cpp's own prefix reuse runs them: the last completion."""
    model.load().llama.reset()
    completion = None
    for messages, max_tokens in requests:
        completion = await model.complete(messages, max_tokens=max_tokens)
    return completion


async def test_a_restored_state_answers_token_for_token_as_the_context_it_was_saved_from(
    embedded_gguf, folder, local_model
):
    model = with_states(embedded_gguf, folder)
    with session_requests("equal", persist=False):
        first = await model.complete(FIRST, max_tokens=12)
        await clobber(model)
        second = follow_up(FIRST, first.text, "And which file says how many replicas it runs?")
        restored = await model.complete(second, max_tokens=24)
    assert model.last_restore is not None and model.last_restore[0] == "equal" and model.last_restore[2] == "memory"
    assert model.last_restore[1] >= first.usage.prompt_tokens
    assert restored.usage.evaluated_tokens < restored.usage.prompt_tokens - first.usage.prompt_tokens + 8

    # The same two requests with nothing in between, on a model without states.
    reference = await live(local_model, (FIRST, 12), (second, 24))
    assert reference.usage.evaluated_tokens == restored.usage.evaluated_tokens
    tokens = local_model.load().tokenize
    assert tokens(restored.text) == tokens(reference.text)
    assert restored.usage.generated_tokens == reference.usage.generated_tokens


async def test_after_a_restart_the_saved_prefix_is_used(embedded_gguf, folder):
    before = with_states(embedded_gguf, folder)
    with session_requests("restarted", persist=True):
        first = await before.complete(FIRST, max_tokens=8)
    before.close_states()
    assert list(folder.glob("restarted.*.state"))
    second = follow_up(FIRST, first.text, "Does it restart on failure?")
    reference = await before.complete(second, max_tokens=16)  # its context still holds the saved state

    after = with_states(embedded_gguf, folder)  # a new process: llama.cpp holds nothing
    with session_requests("restarted", persist=True):
        prompt, held = after.reusable_prefix(second)
        completion = await after.complete(second, max_tokens=16)
    assert after.last_restore is not None and after.last_restore[2] == "disk"
    new_tokens = prompt - first.usage.prompt_tokens
    assert completion.usage.evaluated_tokens <= new_tokens + 8
    assert completion.usage.evaluated_tokens == reference.usage.evaluated_tokens
    assert held == prompt - completion.usage.evaluated_tokens  # what the budget would charge
    assert completion.text == reference.text


async def test_after_another_session_the_saved_prefix_is_used(embedded_gguf, folder):
    model = with_states(embedded_gguf, folder)
    with session_requests("one", persist=False):
        first = await model.complete(FIRST, max_tokens=8)
    with session_requests("two", persist=False):
        await model.complete(conversation("Summarize the deploy notes for me, please. " * 8), max_tokens=8)
    second = follow_up(FIRST, first.text, "Which team owns it?")
    with session_requests("one", persist=False):
        completion = await model.complete(second, max_tokens=8)
    assert model.last_restore is not None and model.last_restore[0] == "one"
    assert completion.usage.evaluated_tokens <= completion.usage.prompt_tokens - first.usage.prompt_tokens + 8


async def test_a_state_made_way_for_is_kept_before_the_next_request_and_only_once(embedded_gguf, folder):
    model = with_states(embedded_gguf, folder)
    with session_requests("one", persist=False):
        first = await model.complete(FIRST, max_tokens=8)
    model.make_way(RequestScope(session_id="one", persist=False))  # its own follow-up: nothing to copy
    await in_model_thread(lambda: None)  # what make_way queued there has run
    assert model.states is not None and model.states.stats["kept"] == 0

    model.make_way(RequestScope(session_id="two", persist=False))
    await in_model_thread(lambda: None)
    assert model.states.stats["kept"] == 1 and model.states.memory_used > 0  # session one's, copied
    with session_requests("two", persist=False):
        await model.complete(conversation("Summarize the deploy notes for me, please. " * 8), max_tokens=8)
    assert model.states.stats["kept"] == 1  # the request found it copied already

    second = follow_up(FIRST, first.text, "Which team owns it?")
    with session_requests("one", persist=False):
        completion = await model.complete(second, max_tokens=8)
    assert model.last_restore is not None and model.last_restore[0] == "one" and model.last_restore[2] == "memory"
    assert completion.usage.evaluated_tokens <= completion.usage.prompt_tokens - first.usage.prompt_tokens + 8


async def test_after_a_summary_and_a_section_analysis_the_saved_prefix_is_used(embedded_gguf, folder, monkeypatch):
    # Short notes, and time for a loaded CI machine: what matters is the round after the worker.
    monkeypatch.setattr(sec, "NOTES_MAX_TOKENS", 16)
    monkeypatch.setattr(sec, "WORKER_TIMEOUT_S", 1800.0)
    monkeypatch.setattr(summaries, "SUMMARY_OUTPUT_TOKENS", 16)
    monkeypatch.setattr(summaries, "SUMMARY_TIMEOUT_S", 1800)
    model = with_states(embedded_gguf, folder)
    with session_requests("research", persist=False):
        first = await model.complete(FIRST, max_tokens=8)
        numbered = [user("What does billing do?", seq=1), assistant("It charges the orders.", seq=2)]
        await summaries.update_summary(
            model,
            state=None,
            messages=numbered,
            to_cover=numbered,
            message_count=3,
            events=RecordingEvents(),
            timeout=1800,
        )
        second = follow_up(FIRST, first.text, "What does the summary say?")
        after_summary = await model.complete(second, max_tokens=8)
        assert model.last_restore is not None
        assert after_summary.usage.evaluated_tokens <= after_summary.usage.prompt_tokens - first.usage.prompt_tokens + 8

        budget = ResearchBudget(1_000_000)
        await sec.analyze(
            model,
            "line: the billing service listens on port 8101 and runs two replicas\n" * 8,
            kind=sec.tool_kind("read_file"),
            question="Which port?",
            workers=1,
            events=RecordingEvents(),
            sections=SectionArchive().open("reply"),
            budget=budget,
        )
        third = follow_up(second, after_summary.text, "And the replicas?")
        reservation = budget.reserve(model, third, (), 8)
        after_workers = await model.complete(third, max_tokens=8)
        budget.settle(reservation, after_workers)
    assert model.last_restore is not None
    assert (
        after_workers.usage.evaluated_tokens
        <= after_workers.usage.prompt_tokens - after_summary.usage.prompt_tokens + 8
    )
    # The coordinator round after the workers is charged what it evaluated, not its whole prompt.
    assert abs(reservation.prompt_charge - after_workers.usage.evaluated_tokens) <= 1


async def test_a_replaced_state_is_written_to_disk_only_once_the_model_is_idle(embedded_gguf, folder, monkeypatch):
    # The writer's clock stands still: the model never looks idle long enough for it, so only
    # the shutdown gets a file out, and none may appear while the other session's reply runs.
    monkeypatch.setattr(state_cache, "_clock", lambda: 1000.0)
    model = with_states(embedded_gguf, folder)
    with session_requests("alice", persist=True):
        await model.complete(FIRST, max_tokens=8)
    with session_requests("bob", persist=True):
        # Alice's state is copied as Bob's request starts and queued for the disk.
        bob = await model.complete(conversation("What does the deploy script do? " * 6), max_tokens=8)
    assert model.states is not None and model.states.memory_used > 0  # alice's copy, in memory
    assert not folder.exists() or list(folder.glob("*.state")) == []
    model.close_states()  # a shutdown: alice's queued state and bob's uncopied one, written
    assert sorted(path.name.split(".")[0] for path in folder.glob("*.state")) == ["alice", "bob"]

    restarted = with_states(embedded_gguf, folder)
    with session_requests("bob", persist=True):
        await restarted.complete(
            conversation("What does the deploy script do? " * 6, bob.text, "And then?"), max_tokens=4
        )
    assert restarted.last_restore is not None and restarted.last_restore[:1] == ("bob",)
    assert restarted.last_restore[2] == "disk"


async def test_concurrent_sessions_never_receive_each_others_state(embedded_gguf, folder, caplog):
    model = with_states(embedded_gguf, folder)
    with session_requests("alice", persist=True):
        alice = await model.complete(FIRST, max_tokens=8)
    model.close_states()
    restarted = with_states(embedded_gguf, folder)
    # Bob's prompt starts with all of Alice's saved one; a state shared across sessions would
    # serve him. Bob goes first on a context that holds nothing.
    bob_prompt = follow_up(FIRST, alice.text, "Is that port open to the internet?")
    with session_requests("bob", persist=False):
        bob = await restarted.complete(bob_prompt, max_tokens=8)
    assert restarted.last_restore is None
    assert bob.usage.evaluated_tokens == bob.usage.prompt_tokens

    restored_for: list[tuple[str, str]] = []
    real_restore = restarted._restore_state

    def watched(loaded, run, tokens):
        real_restore(loaded, run, tokens)
        if restarted.last_restore is not None:
            restored_for.append((run.scope.session_id, restarted.last_restore[0]))

    restarted._restore_state = watched  # type: ignore[method-assign]

    async def session(name: str, question: str) -> None:
        messages = follow_up(FIRST, alice.text, question)
        with session_requests(name, persist=False):
            for round_number in range(2):
                completion = await restarted.complete(messages, max_tokens=6)
                messages = follow_up(messages, completion.text, f"And then ({round_number})?")

    with caplog.at_level(logging.INFO, logger="imprintd.models.local"):
        async with anyio.create_task_group() as group:
            group.start_soon(session, "alice", "Who changed it last?")
            group.start_soon(session, "bob", "Is that port open to the internet?")
    assert restored_for, "the interleaved sessions restored nothing"
    assert all(requester == owner for requester, owner in restored_for), restored_for


async def test_a_deleted_session_leaves_no_state_file(embedded_gguf, tmp_path):
    model = LocalModel(
        embedded_gguf,
        n_ctx=2048,
        state_cache_memory=1 << 30,
        state_cache_disk=1 << 30,
        state_folder=states_folder(tmp_path / "cache"),
    )
    chat = make_chat(model, **{"chat.max_tokens": 16})
    stored, _ = await ask(chat, "Say hello.")
    in_memory, _ = await ask(chat, "Say goodbye.", persist=False)
    # Its state stays in llama.cpp's context until a request of another session needs it.
    assert model.save_context_state()
    model.states.flush(timeout=60)
    folder = states_folder(tmp_path / "cache")
    assert [path.name.split(".")[0] for path in folder.glob("*.state")] == [stored.session_id]
    assert model.states.best  # the persist-false session's state is in memory only:
    assert any(s.session_id == in_memory.session_id for s in model.states._memory.values())

    chat.delete_session(stored.session_id)
    chat.delete_session(in_memory.session_id)
    assert list(folder.glob("*.state")) == []
    assert not any(s.session_id in (stored.session_id, in_memory.session_id) for s in model.states._memory.values())
