"""The running summary at the reply level: ``Chat.reply`` with the stand-in model and a small context.

A long compose file pasted early in a session, five more realistic exchanges, then a question
about the billing port: the running summary covers the paste, the prompt carries the summary
block, the strategy line and the conversation_history tool instead of the paste, and the
tool finds the paste's billing block. Around it: a stored summary standing in on the next
reply, the timeout fallback to fitting's dropping with its six-message wait, redaction,
cancellation, the final answer after a budget stop, when the tool is offered, persist-false
sessions and storage. The unit-level cases live in ``tests/context/``.

A summarizer request is recognised as the stand-in sees it: no tools, and its system message
is ``summary.SUMMARIZER_SYSTEM``.
"""

from __future__ import annotations

import re

import anyio
import pytest

from imprintd import messages as msg
from imprintd.chat import Chat, ReplyRequest
from imprintd.context import summary as summaries
from imprintd.context.history import STRATEGY_LINE, TOOL_NAME
from imprintd.context.summary import EXAMPLE, HEADING, PROGRESS, RETRY_AFTER_MESSAGES, SUMMARIZER_SYSTEM
from imprintd.store import SessionNotFound, StoredSummary
from tests.conversations import BILLING_ANSWER, BILLING_QUESTION, COMPOSE, FOLLOW_UPS, PASTE, PASTE_REPLY
from tests.helpers import ask, connection_of, make_chat, tool_turn
from tests.recording import RecordingEvents
from tests.standin import Hang, Request, StandInModel, call

# --- the conversation: tests/conversations.py --------------------------------------------------

# Sizes chosen so that the paste and the five follow-ups fit until the billing question, and no
# longer fit then (asserted in test_the_conversation_overflows_only_at_the_billing_question).
N_CTX = 2304
MAX_TOKENS = 256


# --- helpers ---------------------------------------------------------------------------------


def is_summarizer(request: Request) -> bool:
    return not request.tools and request.system == SUMMARIZER_SYSTEM


def summarizer_requests(model: StandInModel, start: int = 0) -> list[Request]:
    return [r for r in model.requests[start:] if is_summarizer(r)]


def coordinator_requests(model: StandInModel, start: int = 0) -> list[Request]:
    return [r for r in model.requests[start:] if not is_summarizer(r)]


_LINE = re.compile(r"^#(\d+) (user|assistant|tool)", re.MULTILINE)


def bullets_for(request: Request, extra: str = "") -> str:
    """One bullet per exchange of the transcript, citing its message numbers, as a model would."""
    transcript = request.messages[-1].content
    numbers = [(int(n), role) for n, role in _LINE.findall(transcript)]
    groups: list[list[int]] = []
    for number, role in numbers:
        if role == "user" or not groups:
            groups.append([number])
        else:
            groups[-1].append(number)
    lines = []
    for group in groups:
        span = f"#{group[0]}" if len(group) == 1 else f"#{group[0]}–#{group[-1]}"
        what = "pasted the staging compose file" if group[0] == 1 else f"talked about topic {group[0]}"
        lines.append(f"- ({span}) The user {what}{extra}.")
    return "\n".join(lines)


def dispatch(coordinator, *, summarize=bullets_for):
    """A scripted reply for any request: summarizer requests get ``summarize``, others ``coordinator``."""

    def reply(request: Request):
        return summarize(request) if is_summarizer(request) else coordinator(request)

    return reply


def answer(text: str):
    return lambda request: text


def as_before(request: Request) -> str:
    """The replies of ``FOLLOW_UPS`` (and the paste's), for the question just asked."""
    replies = {PASTE: PASTE_REPLY, **dict(FOLLOW_UPS)}
    return replies.get(request.messages[-1].content, "ok")


def billing_lookup(request: Request):
    """The coordinator looks the billing port up, then answers from what the tool returned;
    other questions get their replies from ``as_before``."""
    last = request.messages[-1]
    if last.role == "tool":
        return BILLING_ANSWER
    if last.content != BILLING_QUESTION:
        return as_before(request)
    if any(t.name == TOOL_NAME for t in request.tools):
        return tool_turn(call(TOOL_NAME, call_id="look_1", query="billing port"))
    return "I can't look that up."


def script(model: StandInModel, reply, count: int = 40) -> None:
    """From now on every request gets ``reply`` (what an earlier script left is dropped)."""
    model.replies[:] = [reply] * count


def seed(store, session_id: str, *, paste: str = PASTE, follow_ups=FOLLOW_UPS) -> list:
    """The paste and its reply, then the follow-ups, stored as earlier replies would have."""
    stored = [store.append(session_id, msg.user(paste)), store.append(session_id, msg.assistant(PASTE_REPLY))]
    for question, reply in follow_ups:
        stored.append(store.append(session_id, msg.user(question)))
        stored.append(store.append(session_id, msg.assistant(reply)))
    return stored


def new_session(chat: Chat, *, persist: bool = True, **seed_args):
    store = chat.store if persist else chat.memory
    info = store.create_session(workspace=None)
    seed(store, info.id, **seed_args)
    return store, info.id


def small_chat(model: StandInModel, **settings) -> Chat:
    model.n_ctx = N_CTX
    return make_chat(model, **{"chat.max_tokens": MAX_TOKENS, **settings})


def index_of(events: RecordingEvents, predicate) -> int:
    return next(i for i, entry in enumerate(events.log) if predicate(entry))


def message_contents(request: Request) -> list[str]:
    return [m.content for m in request.messages]


# --- the main case ---------------------------------------------------------------------------


async def test_the_conversation_overflows_only_at_the_billing_question(model, workspace):
    """The sizes are realistic and tight: every follow-up fits, the billing question does not."""
    chat = small_chat(model)
    script(model, dispatch(as_before))
    first, _ = await ask(chat, PASTE, workspace=workspace)
    assert first.text == PASTE_REPLY
    for question, _reply in FOLLOW_UPS:
        await ask(chat, question, first.session_id, workspace=workspace)
    assert summarizer_requests(model) == []  # everything so far fit beside no summary
    assert all(COMPOSE in r.text for r in model.requests)  # the paste went with every reply

    before = len(model.requests)
    await ask(chat, BILLING_QUESTION, first.session_id, workspace=workspace)
    assert len(summarizer_requests(model, before)) == 1


async def test_a_long_paste_is_summarized_out_of_the_prompt_and_found_again(model, workspace):
    chat = small_chat(model)
    store, sid = new_session(chat)
    script(model, dispatch(billing_lookup))

    outcome, events = await ask(chat, BILLING_QUESTION, sid, workspace=workspace)
    assert outcome.text == BILLING_ANSWER and outcome.stop_reason == "answer"

    # One summarizer request, first; it asks for one bullet per exchange with the example.
    [summarizer] = summarizer_requests(model)
    assert model.requests[0] is summarizer
    assert summarizer.max_tokens == summaries.SUMMARY_OUTPUT_TOKENS
    instruction = summarizer.messages[-1].content
    assert re.search(r"Write one bullet per exchange from #1 to #\d+, in order", instruction)
    assert instruction.endswith(f"{EXAMPLE}\nWrite only the new bullets.")
    assert "#1 user: Here is our staging compose file" in instruction
    assert "characters omitted" in instruction  # the paste was clipped for the summarizer
    assert COMPOSE not in instruction

    # The stream: progress, then the summary, then the lookup.
    kinds = events.kinds()
    progress_at = index_of(events, lambda e: e == ("progress", PROGRESS))
    summary_at = kinds.index("summary")
    step_at = kinds.index("tool_step")
    assert progress_at < summary_at < step_at
    text, first_seq, last_seq = events.log[summary_at][1]
    assert first_seq == 1 and last_seq >= 2
    assert text.startswith("- (#1–#2) The user pasted the staging compose file.")
    assert events.steps[0].tool == TOOL_NAME
    assert events.steps[0].title == "Searching earlier in this conversation for “billing port”"
    assert [s.state for s in events.steps] == ["started", "finished"]
    assert index_of(events, lambda e: e[0] == "text" and e[1]) > step_at  # the answer comes after the lookup

    # The coordinator's prompt: summary block, strategy line, the tool; not the paste.
    first, second = coordinator_requests(model)
    assert HEADING in first.system and f"(messages #1–#{last_seq}, summarized; no longer shown)" in first.system
    assert text in first.system
    assert STRATEGY_LINE in first.system
    assert "#1 pasted by the user" in first.system  # the covered material names the paste
    assert "use conversation_history to search them" in first.system
    assert TOOL_NAME in [t.name for t in first.tools]
    assert COMPOSE not in first.text and PASTE not in message_contents(first)
    assert 'ports: ["8101:8101"]' not in first.text
    covered = [m for m in chat.store.messages(sid) if m.seq <= last_seq]
    assert not set(m.content for m in covered) & set(message_contents(first)[1:])
    assert first.messages[-1].content == BILLING_QUESTION
    assert first.messages[-2].content == FOLLOW_UPS[-1][1]  # the newest exchange stays

    # The tool returned the paste's billing block, to the next round.
    result = second.messages[-1]
    assert result.role == "tool" and result.name == TOOL_NAME
    assert "#1 user" in result.content
    assert 'ports: ["8101:8101"]' in result.content and 'BILLING_PORT: "8101"' in result.content
    assert COMPOSE not in second.text  # a passage, not the whole paste

    # Stored: the summary with its session; the lookup and the answer after the question.
    saved = store.summary(sid)
    assert saved == StoredSummary(text=text, first_seq=1, last_seq=last_seq, retry_at=None)
    stored = store.messages(sid)
    assert [m.role for m in stored[-4:]] == ["user", "assistant", "tool", "assistant"]
    assert stored[-4].content == BILLING_QUESTION and stored[-1].content == BILLING_ANSWER
    assert "8101" in stored[-2].content


async def test_a_stored_summary_stands_in_for_what_it_covers_on_the_next_reply(model, workspace):
    chat = small_chat(model)
    store, sid = new_session(chat)
    script(model, dispatch(billing_lookup))
    await ask(chat, BILLING_QUESTION, sid, workspace=workspace)
    saved = store.summary(sid)

    before = len(model.requests)
    script(model, dispatch(answer("Traefik, from next sprint.")))
    outcome, events = await ask(chat, "And what goes in front of the gateway?", sid, workspace=workspace)
    assert outcome.text == "Traefik, from next sprint."
    assert summarizer_requests(model, before) == []  # no new summary: the text fits beside it
    assert "summary" not in events.kinds() and PROGRESS not in events.progress_messages
    [request] = coordinator_requests(model, before)
    assert saved.text in request.system and HEADING in request.system
    covered = [m.content for m in store.messages(sid) if m.seq <= saved.last_seq]
    assert not set(covered) & set(message_contents(request)[1:])
    assert COMPOSE not in request.text
    assert store.summary(sid) == saved


async def test_a_seeded_summary_is_reused_without_asking_the_model(model, workspace):
    chat = small_chat(model)
    store, sid = new_session(chat)
    seeded = StoredSummary(
        text="- (#1–#2) The user pasted the staging compose file.\n"
        "- (#3–#4) Traefik goes in front of the gateway next sprint.",
        first_seq=1,
        last_seq=4,
    )
    store.save_summary(sid, seeded)
    script(model, dispatch(answer("Yes.")))
    outcome, events = await ask(chat, "Is that still the plan?", sid, workspace=workspace)
    assert outcome.text == "Yes."
    assert summarizer_requests(model) == []
    [request] = model.requests
    assert seeded.text in request.system
    assert "#1 pasted by the user (" in request.system
    assert PASTE not in message_contents(request) and FOLLOW_UPS[0][0] not in message_contents(request)
    assert FOLLOW_UPS[1][0] in message_contents(request)  # #5 onwards is shown as it was
    assert store.summary(sid) == seeded


# --- the fallback ----------------------------------------------------------------------------


async def test_a_summary_out_of_time_falls_back_to_dropping_and_waits_six_messages(model, workspace, monkeypatch):
    monkeypatch.setattr(summaries, "SUMMARY_TIMEOUT_S", 0.2)
    chat = small_chat(model)
    store, sid = new_session(chat)
    script(
        model,
        dispatch(
            answer("It was 8101, I think."), summarize=lambda request: Hang("- (#1–#2) The user pasted a partial")
        ),
    )

    outcome, events = await ask(chat, BILLING_QUESTION, sid, workspace=workspace)
    assert outcome.text == "It was 8101, I think." and outcome.stop_reason == "answer"
    [timed_out] = summarizer_requests(model)
    assert timed_out.timeout == 0.2
    assert PROGRESS in events.progress_messages and "summary" not in events.kinds()

    # Fitting's dropping: no summary block, the oldest exchanges gone, the newest kept.
    [request] = coordinator_requests(model)
    assert HEADING not in request.system and "partial" not in request.text
    assert PASTE not in message_contents(request)
    assert FOLLOW_UPS[-1][0] in message_contents(request) and FOLLOW_UPS[-1][1] in message_contents(request)
    assert request.messages[1].role == "user"  # dropped at an exchange boundary
    assert TOOL_NAME in [t.name for t in request.tools]  # the paste can still be looked up

    count = len(store.messages(sid)) - 1  # at the attempt: everything stored up to the question
    saved = store.summary(sid)
    assert saved is not None and saved.text == "" and saved.retry_at == count + RETRY_AFTER_MESSAGES

    # No new attempt until six more messages exist: two replies of two messages each go by.
    script(model, dispatch(answer("ok"), summarize=bullets_for))
    for n in range(2):
        before = len(model.requests)
        _, events = await ask(chat, f"Another short question, number {n}?", sid, workspace=workspace)
        assert summarizer_requests(model, before) == [], f"reply {n} tried again too early"
        assert PROGRESS not in events.progress_messages
        assert len(store.messages(sid)) - 1 < saved.retry_at  # its question was before the retry point
    before = len(model.requests)
    _, events = await ask(chat, "And one more?", sid, workspace=workspace)
    assert len(store.messages(sid)) - 1 == saved.retry_at  # the question was the sixth message more
    assert len(summarizer_requests(model, before)) == 1
    assert "summary" in events.kinds()
    assert store.summary(sid).text.startswith("- (#1–#2) The user pasted the staging compose file.")


async def test_a_failed_update_keeps_the_previous_summary(model, workspace, monkeypatch):
    monkeypatch.setattr(summaries, "SUMMARY_TIMEOUT_S", 0.2)
    chat = small_chat(model)
    store, sid = new_session(chat)
    # A summary of the first exchange only: the rest still overflows, so an update is tried.
    previous = StoredSummary(text="- (#1–#2) The user pasted the staging compose file.", first_seq=1, last_seq=2)
    store.save_summary(sid, previous)
    for question, reply in FOLLOW_UPS * 2:
        store.append(sid, msg.user(question))
        store.append(sid, msg.assistant(reply))
    script(model, dispatch(answer("ok"), summarize=lambda request: Hang("- (#3–#4) partial")))
    _, events = await ask(chat, "Where were we?", sid, workspace=workspace)
    assert len(summarizer_requests(model)) == 1
    assert "summary" not in events.kinds()
    saved = store.summary(sid)
    assert saved.text == previous.text and (saved.first_seq, saved.last_seq) == (1, 2)
    assert saved.retry_at == len(store.messages(sid)) - 1 + RETRY_AFTER_MESSAGES
    [request] = coordinator_requests(model)
    assert previous.text in request.system and "partial" not in request.text


async def test_the_retry_point_counts_messages_of_a_memory_session_past_its_400(model, workspace):
    """A persist-false session keeps its newest 400 messages while their numbers go on: the
    six-message wait counts numbered messages, or a session past 400 would never retry."""
    chat = small_chat(model)
    model.n_ctx = 8192  # the summarizer's request for most of 400 messages must fit
    store = chat.memory
    sid = store.create_session().id
    for n in range(1, 211):  # 420 messages: the first 20 have dropped out
        store.append(sid, msg.user(f"Question number {n} about the staging deployment of the shop stack?"))
        store.append(sid, msg.assistant(f"Answer number {n}: the staging deployment of the shop stack is fine."))
    assert len(store.messages(sid)) == 400 and store.messages(sid)[-1].seq == 420
    # An attempt failed when the session had 401 messages: none before the 407th.
    store.save_summary(sid, StoredSummary(text="", first_seq=21, last_seq=21, retry_at=407))
    script(model, dispatch(answer("ok")))
    _, events = await ask(chat, "Where were we?", sid, workspace=workspace)  # message #421
    assert len(summarizer_requests(model)) == 1 and "summary" in events.kinds()


# --- secrets, cancellation -------------------------------------------------------------------

SECRET_KEY = "sk-proj-4fJ9kQ2xZ7mN1pL8vR3tY6wB0cD5eH"
SECRET_PASSWORD = "hunter2-Quokka-77"


async def test_secrets_are_redacted_in_the_summarizer_request_and_the_summary(model, workspace):
    chat = small_chat(model)
    paste = PASTE.replace(
        'POSTGRES_USER: "shop"', f'POSTGRES_USER: "shop"\n      POSTGRES_PASSWORD: "{SECRET_PASSWORD}"'
    )
    follow_ups = [
        (
            f"Also, the billing API key is {SECRET_KEY}, and the db password: {SECRET_PASSWORD}",
            "Noted; I will not repeat them.",
        ),
        *FOLLOW_UPS[1:],
    ]
    store, sid = new_session(chat, paste=paste, follow_ups=follow_ups)

    def leaky(request: Request) -> str:  # a summarizer that repeats secrets despite its instructions
        return bullets_for(request, extra=f", key {SECRET_KEY} and password: {SECRET_PASSWORD}")

    script(model, dispatch(answer("ok"), summarize=leaky))
    _, events = await ask(chat, "What did we decide?", sid, workspace=workspace)
    [request] = summarizer_requests(model)
    assert "#3 user: Also, the billing API key is [REDACTED]" in request.text
    assert SECRET_KEY not in request.text and SECRET_PASSWORD not in request.text

    saved = store.summary(sid)
    assert saved.last_seq >= 4  # the exchange with the secrets is covered
    assert "[REDACTED]" in saved.text
    assert SECRET_KEY not in saved.text and SECRET_PASSWORD not in saved.text
    [(_, (text, _, _))] = [e for e in events.log if e[0] == "summary"]
    assert text == saved.text
    [coordinator] = coordinator_requests(model)
    assert SECRET_KEY not in coordinator.system and SECRET_PASSWORD not in coordinator.system
    # What the user said stays stored as they said it (the tool can still read it back).
    assert SECRET_KEY in store.messages(sid)[2].content


async def test_cancelling_while_summarizing_ends_the_reply_without_a_summary(model, workspace):
    chat = small_chat(model)
    store, sid = new_session(chat)
    stored_before = store.messages(sid)
    summarizing = anyio.Event()

    def hang(request: Request):
        summarizing.set()
        return Hang("- (#1–#2) The user")

    script(model, dispatch(answer("never"), summarize=hang))
    events = RecordingEvents()
    finished = []

    async def reply() -> None:
        await chat.reply(ReplyRequest(text=BILLING_QUESTION, session_id=sid, workspace=str(workspace)), events)
        finished.append(True)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(reply)
            await summarizing.wait()
            group.cancel_scope.cancel()

    assert finished == []
    assert len(model.requests) == 1 and is_summarizer(model.requests[0])
    assert PROGRESS in events.progress_messages
    assert "summary" not in events.kinds() and "text" not in events.kinds()
    stored = store.messages(sid)
    assert stored[:-1] == stored_before
    assert (stored[-1].role, stored[-1].content) == ("user", BILLING_QUESTION)
    assert store.summary(sid) is None


# --- the final answer after a budget stop --------------------------------------------------------


async def test_the_final_answer_keeps_the_summary_without_the_lookup_guidance(model, workspace):
    chat = small_chat(model, **{"chat.research_token_budget": 2048})
    store, sid = new_session(chat)
    numbers = iter(range(3, 13))  # each read of another earlier message is new evidence

    def coordinator(request: Request):
        if request.tools:
            number = next(numbers)
            return tool_turn(call(TOOL_NAME, call_id=f"read_{number}", message=number))
        return "Billing listens on port 8101, as the compose file said."

    script(model, dispatch(coordinator))
    outcome, events = await ask(chat, BILLING_QUESTION, sid, workspace=workspace)
    assert outcome.stop_reason == "token_budget"
    assert len(summarizer_requests(model)) == 1  # the summary is outside the research budget
    saved = store.summary(sid)

    researching = [r for r in coordinator_requests(model) if r.tools]
    assert len(researching) >= 2
    assert all(saved.text in r.system and STRATEGY_LINE in r.system for r in researching)
    final = model.requests[-1]
    assert final.tools == [] and not is_summarizer(final)
    assert "Writing the answer from the research notes…" in events.progress_messages
    assert HEADING in final.system and saved.text in final.system
    assert f"(messages #1–#{saved.last_seq}, summarized; no longer shown)" in final.system
    assert "#1 pasted by the user" in final.system
    assert "conversation_history" not in final.system  # neither the lookup guidance nor the strategy line
    assert STRATEGY_LINE not in final.system and "Tools:" not in final.system
    assert PASTE not in message_contents(final)
    assert outcome.text.startswith("Billing listens on port 8101, as the compose file said.")


# --- when the tool is offered ----------------------------------------------------------------


@pytest.mark.parametrize("persist", [True, False])
async def test_the_history_tool_is_offered_from_the_first_reply_on(model, workspace, persist):
    # Stable from the start (docs/decisions.md, "A prompt that stays put"): the first follow-up
    # changes neither the system prompt nor the tools, so the opening reply's state serves it.
    chat = make_chat(model)
    script(model, dispatch(answer("Hello.")))
    first, _ = await ask(chat, "Hi there", workspace=workspace, persist=persist)
    await ask(chat, "What did I just say?", first.session_id, workspace=workspace)
    opening, follow_up = model.requests
    assert [t.name for t in opening.tools] == ["search", "read_file", TOOL_NAME]
    assert STRATEGY_LINE in opening.system
    assert (opening.system, opening.tools) == (follow_up.system, follow_up.tools)
    store, info = chat.locate(first.session_id)
    assert info.persist is persist


async def test_without_a_workspace_the_history_tool_and_its_guidance_are_still_offered(model):
    # Departing from the running summary's first rule ("and tools are offered"): a chat with no folder must still reach
    # a paste the summary covered, so the history tool is offered whenever there are earlier messages.
    chat = small_chat(model)
    store, sid = new_session(chat)
    seeded = StoredSummary(text="- (#1–#2) The user pasted the staging compose file.", first_seq=1, last_seq=2)
    store.save_summary(sid, seeded)
    script(model, dispatch(answer("Hello.")))
    await ask(chat, "What did I paste?", sid)
    [request] = model.requests
    assert [tool.name for tool in request.tools] == ["conversation_history"]
    assert STRATEGY_LINE in request.system and "use conversation_history" in request.system
    assert seeded.text in request.system  # the summary itself is still there


# --- persist-false sessions ------------------------------------------------------------------


async def test_a_persist_false_session_keeps_its_summary_in_memory_and_writes_nothing(model, workspace, isolated_dirs):
    chat = small_chat(model)
    data_dir = isolated_dirs
    assert not data_dir.exists()
    script(model, dispatch(billing_lookup))
    first, _ = await ask(chat, PASTE, workspace=workspace, persist=False)
    for question, _reply in FOLLOW_UPS:
        await ask(chat, question, first.session_id, workspace=workspace)
    outcome, events = await ask(chat, BILLING_QUESTION, first.session_id, workspace=workspace)

    assert outcome.text == BILLING_ANSWER
    assert "summary" in events.kinds()
    summary = chat.memory.summary(first.session_id)
    assert summary is not None and summary.first_seq == 1 and summary.text
    assert chat.memory.session(first.session_id).persist is False
    tool_results = [m for m in chat.memory.messages(first.session_id) if m.role == "tool"]
    assert tool_results and "8101" in tool_results[0].content
    assert chat._store is None  # the database was never opened
    assert not data_dir.exists()  # nothing at all was written there


@pytest.mark.parametrize("persist", [True, False])
async def test_a_reply_searches_the_sessions_index_and_rebuilds_nothing(model, workspace, monkeypatch, persist):
    # The index is kept with the session; a reply tokenizes only what it stores.
    from imprintd.store import history_index

    chat = small_chat(model)
    store, sid = new_session(chat, persist=persist)
    earlier = len(store.messages(sid))
    tokenized: list[int] = []
    original = history_index.windows_of

    def counting(message):
        tokenized.append(message.seq)
        return original(message)

    monkeypatch.setattr(history_index, "windows_of", counting)
    script(model, dispatch(billing_lookup))

    outcome, events = await ask(chat, BILLING_QUESTION, sid, workspace=workspace)

    assert outcome.text == BILLING_ANSWER and events.steps[0].tool == TOOL_NAME
    result = coordinator_requests(model)[-1].messages[-1]
    assert result.role == "tool" and 'ports: ["8101:8101"]' in result.content
    # Only the question and the reply's own messages were indexed, each once, as they were stored.
    stored = store.messages(sid)
    assert sorted(tokenized) == [m.seq for m in stored[earlier:]]


# --- storage ---------------------------------------------------------------------------------


async def test_the_summary_is_stored_with_its_session_and_deleted_with_it(model, workspace):
    chat = small_chat(model)
    store, sid = new_session(chat)
    other, _ = new_session(chat)
    script(model, dispatch(answer("ok")))
    await ask(chat, BILLING_QUESTION, sid, workspace=workspace)
    assert store.summary(sid) is not None and store.summary(sid).text

    # A fresh Store on the same file reads it back (it was committed, with its session).
    from imprintd.store import Store

    with Store.open(chat.store.path) as again:
        assert again.summary(sid) == store.summary(sid)

    chat.delete_session(sid)
    with pytest.raises(SessionNotFound):
        chat.store.summary(sid)
    rows = (
        connection_of(chat.store)
        .execute("SELECT count(*) FROM chat_summaries WHERE session_id = ?", (sid,))
        .fetchone()[0]
    )
    assert rows == 0


async def test_a_persist_false_summary_is_deleted_with_its_session(model, workspace):
    chat = small_chat(model)
    store, sid = new_session(chat, persist=False)
    script(model, dispatch(answer("ok")))
    await ask(chat, BILLING_QUESTION, sid, workspace=workspace)
    assert chat.memory.summary(sid).text
    chat.delete_session(sid)
    with pytest.raises(SessionNotFound):
        chat.memory.summary(sid)
