"""What fills the context, reported per coordinator round and for the next question: the numbers
are those of the prompt the stand-in model was sent, counted its way, and the message numbers
are those fitting kept, the summary covers, or fitting dropped."""

from __future__ import annotations

import random

from imprintd import messages as msg
from imprintd import prompts
from imprintd.context import usage as usage_mod
from imprintd.context.history import STRATEGY_LINE, TOOL_NAME, ConversationHistoryTool
from imprintd.context.usage import ContextUsage, ranges
from imprintd.store import StoredSummary
from tests.conversations import BILLING_QUESTION, FOLLOW_UPS, PASTE, PASTE_REPLY
from tests.helpers import ask, make_chat, tool_turn
from tests.standin import PROMPT_OVERHEAD, Request, StandInModel, call

MAX_TOKENS = 256


def seeded(chat, summary: StoredSummary, workspace=None) -> tuple[str, int]:
    """A stored session: the long paste and its reply, then the follow-ups; its last seq."""
    info = chat.store.create_session(workspace=str(workspace) if workspace else None)
    chat.store.append(info.id, msg.user(PASTE))
    chat.store.append(info.id, msg.assistant(PASTE_REPLY))
    for question, reply in FOLLOW_UPS:
        chat.store.append(info.id, msg.user(question))
        last = chat.store.append(info.id, msg.assistant(reply))
    chat.store.save_summary(info.id, summary)
    return info.id, last.seq


def no_summary_system(model: StandInModel) -> int:
    """The system prompt's part: the prompt with the workspace and history tools, no summary."""
    system = msg.system(prompts.system_prompt(tool_lines=(prompts.TOOL_STRATEGY, STRATEGY_LINE, prompts.CITATIONS)))
    return model.count_message(system) + PROMPT_OVERHEAD


def assert_is_what_was_sent(usage: ContextUsage, request: Request, model: StandInModel, question_seq: int) -> None:
    """Every number of ``usage`` is the stand-in's count of ``request``, part by part."""
    messages = request.messages
    at = next(i for i, m in enumerate(messages) if m.seq == question_seq)
    assert usage.used == model.count_prompt(messages, request.tools)
    assert usage.parts.total == usage.used
    assert usage.parts.tools == model.count_tools(request.tools)
    assert usage.parts.system + usage.parts.summary == model.count_message(messages[0]) + PROMPT_OVERHEAD
    assert usage.parts.earlier == sum(model.count_message(m) for m in messages[1:at])
    assert usage.parts.question == model.count_message(messages[at])
    assert usage.parts.research == sum(model.count_message(m) for m in messages[at + 1 :])
    assert usage.in_view == ranges(m.seq for m in messages if m.seq is not None)
    assert (usage.n_ctx, usage.output_allowance, usage.exact) == (model.n_ctx, MAX_TOKENS, True)
    assert usage.used + usage.output_allowance <= usage.n_ctx


async def test_each_round_reports_the_prompt_it_sends_with_the_summary_and_the_research(model, workspace):
    chat = make_chat(model, **{"chat.max_tokens": MAX_TOKENS})
    summary = StoredSummary(
        text="- (#1–#4) The user pasted the staging compose file; billing is 8101.", first_seq=1, last_seq=4
    )
    sid, last = seeded(chat, summary)
    model.queue(tool_turn(call(TOOL_NAME, query="billing port")), "It was 8101.")

    outcome, events = await ask(chat, BILLING_QUESTION, sid, workspace=workspace)

    assert outcome.text == "It was 8101."
    assert len(model.requests) == len(events.usages) == 2  # one report per coordinator round
    question = last + 1
    for usage, request in zip(events.usages, model.requests, strict=True):
        assert_is_what_was_sent(usage, request, model, question)
        assert usage.parts.system == no_summary_system(model) and usage.parts.summary > 0
        assert (usage.in_view, usage.summarized, usage.dropped) == (((5, question),), ((1, 4),), ())
    first, second = events.usages
    assert first.parts.research == 0 and second.parts.research > 0  # the round's tool call and result
    assert second.used == first.used + second.parts.research
    # Each report comes before its round's request: right after the first, the tool step.
    kinds = events.kinds()
    assert kinds.index("context_usage") < kinds.index("tool_step")


async def test_messages_fitting_dropped_are_reported_dropped(model, workspace):
    model.n_ctx = 2304  # the paste no longer fits beside the rest
    chat = make_chat(model, **{"chat.max_tokens": MAX_TOKENS})
    failed = StoredSummary(text="", first_seq=1, last_seq=1, retry_at=10_000)  # no summary, no new attempt yet
    sid, last = seeded(chat, failed)
    model.queue("It was 8101, I think.")

    _, events = await ask(chat, BILLING_QUESTION, sid, workspace=workspace)

    [usage], [request] = events.usages, model.requests
    question = last + 1
    assert_is_what_was_sent(usage, request, model, question)
    assert usage.parts.summary == 0 and usage.summarized == ()
    sent = {m.seq for m in request.messages if m.seq is not None}
    assert 1 not in sent and question in sent  # the paste went, the question stayed
    assert usage.dropped == ranges(set(range(1, question)) - sent)
    assert usage.dropped[0][0] == 1 and usage.in_view[-1][1] == question


async def test_the_next_question_gets_what_the_round_got_less_the_question(model, workspace):
    chat = make_chat(model, **{"chat.max_tokens": MAX_TOKENS})
    summary = StoredSummary(text="- (#1–#4) The user pasted the staging compose file.", first_seq=1, last_seq=4)
    sid, last = seeded(chat, summary, workspace)  # the next question researches the session's folder
    model.queue("Yes.")

    ahead = await chat.context_usage(sid)
    _, events = await ask(chat, "Is that still the plan?", sid)

    [round_usage] = events.usages
    assert ahead.parts.question == ahead.parts.research == 0
    assert ahead.parts.total == ahead.used == round_usage.used - round_usage.parts.question
    for part in ("system", "tools", "summary", "earlier"):
        assert getattr(ahead.parts, part) == getattr(round_usage.parts, part), part
    assert (ahead.in_view, ahead.summarized, ahead.dropped) == (((5, last),), ((1, 4),), ())
    assert round_usage.in_view == ((5, last + 1),)  # the question, now asked, is in view
    assert len(model.requests) == 1  # counting asked the model nothing


async def test_without_a_workspace_the_next_question_is_counted_with_the_history_tool_alone(model):
    chat = make_chat(model, **{"chat.max_tokens": MAX_TOKENS})
    info = chat.store.create_session(workspace=None)
    chat.store.append(info.id, msg.user("Hello"))
    chat.store.append(info.id, msg.assistant("Hi."))

    usage = await chat.context_usage(info.id)

    # With earlier messages conversation_history is offered, workspace or not; no search or read.
    system = msg.system(prompts.system_prompt(tool_lines=(STRATEGY_LINE, prompts.CITATIONS)))
    assert usage.parts.tools == model.count_tools([ConversationHistoryTool.spec])
    assert usage.parts.system == model.count_message(system) + PROMPT_OVERHEAD
    assert usage.parts.earlier == model.count_message(msg.user("Hello")) + model.count_message(msg.assistant("Hi."))
    assert usage.in_view == ((1, 2),) and usage.summarized == usage.dropped == ()


def test_ranges_are_runs_of_consecutive_numbers():
    assert ranges([]) == ()
    assert ranges([7, 1, 3, 2]) == ((1, 3), (7, 7))
    assert ranges({4, 5, 9, 10, 12}) == ((4, 5), (9, 10), (12, 12))


def test_the_summarized_and_dropped_runs_are_the_numbers_left_over():
    # Against the plain form, number by number, on seeded sessions: every earlier message, given
    # as a range (as a reply reads them) or as numbers with gaps, with a summary's range or none.
    rng = random.Random(32)
    model = StandInModel()
    for _ in range(300):
        oldest, question = rng.randint(1, 30), rng.randint(31, 120)
        earlier = range(oldest, question)
        if rng.random() < 0.5:
            earlier = tuple(seq for seq in earlier if rng.random() < 0.8)
        summary = sorted(rng.sample(range(1, 125), 2)) if rng.random() < 0.7 else None
        shown = sorted(rng.sample(list(earlier), min(len(earlier), rng.randint(0, 12))))
        kept = [msg.user(f"message {seq}", seq=seq) for seq in shown]
        layout = usage_mod.Layout(
            system_base=msg.system("s"), earlier=earlier, summarized=tuple(summary) if summary else None
        )
        messages = [msg.system("s"), *kept, msg.user("the question", seq=question)]
        usage = usage_mod.measure(model, messages, current=1, tools=(), max_tokens=16, layout=layout)
        in_view = {*shown, question}
        low, high = summary or (1, 0)
        summarized = {seq for seq in earlier if low <= seq <= high} - in_view
        assert usage.in_view == ranges(in_view)
        assert usage.summarized == ranges(summarized)
        assert usage.dropped == ranges(set(earlier) - in_view - summarized)
