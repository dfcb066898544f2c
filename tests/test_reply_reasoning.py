"""A reasoning model's thoughts through a whole reply, on the stand-in.

They stream on their own channel (``ReplyEvents.reasoning``), never as answer text; they are
stored with the assistant message they led to, never rendered back into a prompt, never a note
and never cited; they are charged to the research budget; and an answer the model left empty
is never stored or sent back empty.
"""

from __future__ import annotations

from imprintd.context.summary import summarizer_request
from imprintd.messages import Message, user
from imprintd.models.base import Completion
from imprintd.reply import NO_ANSWER, NO_ANSWER_AFTER_THINKING, thought_to_limit_note
from imprintd.research.budget import ResearchBudget, charged_complete
from tests.helpers import ask, make_chat
from tests.standin import StandInModel, call, count_text

THOUGHT = "The user asks about billing [1]. The config should say."


async def test_a_direct_answers_reasoning_streams_apart_and_is_stored_with_it(model):
    chat = make_chat(model)
    model.queue(Completion(text="Billing uses port 8101.", reasoning=THOUGHT))
    outcome, events = await ask(chat, "Which port does billing use?")

    assert events.thought == THOUGHT
    assert events.streamed == outcome.text == "Billing uses port 8101."
    # Thinking comes before the answer's text, on its own channel.
    kinds = [kind for kind in events.kinds() if kind in ("reasoning", "text")]
    assert kinds.index("text") > kinds.index("reasoning") and "reasoning" not in kinds[kinds.index("text") :]
    # A citation in the thinking is no source: it was never an answer.
    assert outcome.sources == ()
    stored = chat.store.messages(outcome.session_id)[-1]
    assert (stored.role, stored.content, stored.reasoning) == ("assistant", "Billing uses port 8101.", THOUGHT)


async def test_thinking_is_never_rendered_back_into_a_later_prompt(model):
    chat = make_chat(model)
    model.queue(Completion(text="Port 8101.", reasoning=THOUGHT), "Two replicas.")
    first, _ = await ask(chat, "Which port?")
    await ask(chat, "How many replicas?", first.session_id)
    follow_up = model.requests[-1].messages
    earlier_answer = next(m for m in follow_up if m.role == "assistant")
    assert earlier_answer.prompt_content == "Port 8101."
    assert all("The config should say" not in m.prompt_content for m in follow_up)


async def test_each_round_thinks_in_its_own_part_and_the_call_turn_keeps_its_thoughts(model, workspace):
    chat = make_chat(model)
    model.queue(
        Completion(text="", tool_calls=(call("search", query="billing port"),), reasoning="I should search."),
        Completion(text="Billing uses port 8101 [1].", reasoning="The result shows 8101."),
    )
    outcome, events = await ask(chat, "Which port does billing use?", workspace=workspace)

    order = [(kind, payload) for kind, payload in events.log if kind in ("reasoning", "preamble", "text")]
    assert order[0] == ("reasoning", "I")
    first_preamble = order.index(("preamble", None))
    assert "".join(p for k, p in order[:first_preamble] if k == "reasoning") == "I should search."
    assert "".join(p for k, p in order[first_preamble:] if k == "reasoning") == "The result shows 8101."
    assert "search" not in events.streamed and "8101" in events.streamed

    stored = chat.store.messages(outcome.session_id)
    calls = next(m for m in stored if m.tool_calls)
    assert calls.reasoning == "I should search." and calls.content == ""
    assert stored[-1].reasoning == "The result shows 8101."
    assert [s.number for s in outcome.sources] == [1]  # the answer's own citation is a source


async def test_an_answer_left_empty_after_thinking_is_never_stored_empty(model):
    chat = make_chat(model)
    model.queue(Completion(text="", reasoning="Hmm, let me think about ports."), "Port 8101.")
    outcome, events = await ask(chat, "Which port?")
    assert outcome.text == NO_ANSWER_AFTER_THINKING == events.streamed
    stored = chat.store.messages(outcome.session_id)[-1]
    assert (stored.content, stored.reasoning) == (NO_ANSWER_AFTER_THINKING, "Hmm, let me think about ports.")

    # The follow-up's prompt carries no empty assistant message (templates such as Ministral 3's refuse one).
    await ask(chat, "And now?", outcome.session_id)
    sent = model.requests[-1].messages
    assert all(m.prompt_content.strip() for m in sent if m.role == "assistant" and not m.tool_calls)


async def test_an_empty_answer_without_thinking_says_so_too(model):
    chat = make_chat(model)
    model.queue("")
    outcome, _ = await ask(chat, "Which port?")
    assert outcome.text == NO_ANSWER
    assert chat.store.messages(outcome.session_id)[-1].content == NO_ANSWER


async def test_thinking_that_uses_up_the_output_limit_says_so_and_what_would_leave_room():
    model = StandInModel()
    chat = make_chat(model, **{"chat.max_tokens": 64})
    model.queue(Completion(text="Never written.", reasoning="word " * 400))
    outcome, events = await ask(chat, "Which port?")
    assert outcome.stop_reason == "length"
    assert outcome.text == thought_to_limit_note(64) == events.streamed
    assert "output limit of 64 tokens thinking" in outcome.text and 'chat.reasoning to "off"' in outcome.text
    assert "Never written" not in outcome.text and events.thought.startswith("word word")
    assert chat.store.messages(outcome.session_id)[-1].content == outcome.text


async def test_the_final_answer_from_notes_streams_and_keeps_its_thinking(model, workspace):
    chat = make_chat(model, **{"chat.research_token_budget": 1280, "chat.max_tokens": 512})

    def reply(request):
        if request.tools:
            n = len(model.requests)
            return Completion(text="", tool_calls=(call("search", call_id=f"c{n}", query=f"billing {n}"),))
        return Completion(text="Billing uses port 8101 [1].", reasoning="From the notes: 8101.")

    model.queue(*[reply] * 12)
    outcome, events = await ask(chat, "Which port does billing use?", workspace=workspace)
    assert outcome.stop_reason == "token_budget"
    assert events.thought.endswith("From the notes: 8101.")
    assert "From the notes" not in outcome.text and outcome.text.startswith("Billing uses port 8101 [1].")
    assert chat.store.messages(outcome.session_id)[-1].reasoning == "From the notes: 8101."


async def test_thinking_is_charged_to_the_research_budget():
    model = StandInModel()
    thought = "Let me weigh the two ports carefully before answering."
    model.queue(Completion(text="8101.", reasoning=thought))
    budget = ResearchBudget(10_000)
    pieces: list[str] = []
    completion = await charged_complete(
        budget, model, [user("Which port?")], [], max_tokens=200, timeout=60, on_reasoning=pieces.append
    )
    assert "".join(pieces) == completion.reasoning == thought
    [reservation] = budget.reservations
    generated = count_text("8101.") + count_text(thought)
    assert completion.usage.generated_tokens == generated
    # The refund is the allowance less everything generated, thinking included.
    assert budget.refunded == 200 - generated
    assert budget.remaining == 10_000 - reservation.prompt_charge - generated


def test_thinking_is_never_summarized_as_an_answer():
    covered = [
        user("Which port?", seq=1),
        Message(role="assistant", content="Port 8101.", seq=2, reasoning="SECRET-PONDERING about ports"),
    ]
    request = summarizer_request("", covered)
    assert "Port 8101." in request[-1].content
    assert all("SECRET-PONDERING" not in m.content for m in request)
