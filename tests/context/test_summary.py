"""The running summary (docs/decisions.md, "Running summary"): when to cover, what the summarizer reads, what it writes."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from imprintd.context import summary as summaries
from imprintd.context.summary import (
    CLIP_LEVELS,
    PROGRESS,
    RETRY_AFTER_MESSAGES,
    SUMMARY_CAP_CHARS,
    SUMMARY_OUTPUT_TOKENS,
    SUMMARY_RESERVE_TOKENS,
    SUMMARY_TIMEOUT_S,
    append_bullets,
    conversation_fits,
    covered_material,
    fit_summarizer_request,
    plan_coverage,
    should_attempt,
    summarizer_request,
    summary_block,
    update_summary,
)
from imprintd.messages import FIRST_LOOK_CALL_PREFIX, Message, ToolCall, ToolSpec, assistant, system, tool_result, user
from imprintd.models.base import Completion
from imprintd.store import StoredSummary
from tests.recording import RecordingEvents
from tests.standin import Fail, Hang, StandInModel

SYSTEM = system("You are Imprint. Answer briefly.")
TOOLS = [
    ToolSpec(
        name="search",
        description="Search the workspace.",
        parameters={"type": "object", "properties": {"query": {"type": "string"}}},
    )
]


def conversation(exchanges: int, *, chars: int = 400, tools_every: int = 0) -> list[Message]:
    """``exchanges`` question/answer pairs of ``chars`` characters each, numbered from 1.

    Every ``tools_every``-th exchange also holds a search call and its (long) result.
    """
    messages: list[Message] = []
    seq = 0
    for n in range(1, exchanges + 1):
        seq += 1
        messages.append(user(f"Q{n} " + "q" * (chars - 4), seq=seq))
        if tools_every and n % tools_every == 0:
            call = ToolCall(id=f"call_{n}", name="search", arguments={"query": f"topic {n}"})
            seq += 1
            messages.append(assistant("", seq=seq, tool_calls=(call,)))
            seq += 1
            messages.append(tool_result(call, "r" * 3000, seq=seq))
        seq += 1
        messages.append(assistant(f"A{n} " + "a" * (chars - 4), seq=seq))
    return messages


def question_after(messages: list[Message]) -> Message:
    return user("What did we decide?", seq=messages[-1].seq + 1)


def text_cost(model: StandInModel, messages: list[Message]) -> int:
    return sum(model.count_message(m) for m in messages if m.role in ("user", "assistant") and not m.tool_calls)


# --- fitting and the plan ---------------------------------------------------------------------


def test_the_plan_covers_nothing_while_the_text_fits():
    model = StandInModel(n_ctx=4096)
    earlier = conversation(4)
    question = question_after(earlier)
    args = dict(system=SYSTEM, summary=None, messages=earlier, question=question, tools=TOOLS, max_tokens=512)
    assert conversation_fits(model, **args)
    assert plan_coverage(model, **args) is None


def test_a_question_that_will_be_analyzed_in_sections_is_left_out_of_the_plan():
    """Two short exchanges and a paste too big for the context alone: the paste goes to section
    analysis whatever the history holds, so nothing is summarized for it."""
    model = StandInModel(n_ctx=4096)
    earlier = conversation(2, chars=60)
    paste = user("log line\n" * 3000, seq=earlier[-1].seq + 1)
    assert model.count_prompt([SYSTEM, paste], TOOLS) + 512 > model.n_ctx
    args = dict(system=SYSTEM, summary=None, messages=earlier, question=paste, tools=TOOLS, max_tokens=512)
    assert plan_coverage(model, **args) is None


def test_tool_exchanges_do_not_count_as_conversation_text():
    model = StandInModel(n_ctx=4096)
    earlier = conversation(4, tools_every=1)  # 4 × 3,000 characters of results: 3,000 tokens
    question = question_after(earlier)
    assert conversation_fits(
        model, system=SYSTEM, summary=None, messages=earlier, question=question, tools=TOOLS, max_tokens=512
    )


def test_the_plan_covers_the_oldest_exchanges_to_half_the_room_at_an_exchange_boundary():
    model = StandInModel(n_ctx=4096)
    earlier = conversation(20, tools_every=3)
    question = question_after(earlier)
    args = dict(system=SYSTEM, summary=None, messages=earlier, question=question, tools=TOOLS, max_tokens=512)
    assert not conversation_fits(model, **args)

    covered = plan_coverage(model, **args)

    assert covered
    # The oldest first, in order, up to an exchange boundary: the next message is a question.
    assert covered == earlier[: len(covered)]
    assert earlier[len(covered)].role == "user"
    # Tool exchanges go with the exchange that made them.
    assert any(m.role == "tool" for m in covered)
    # The stated headroom: the rest of the text fills at most half the room beside a
    # full-size summary, and covering one exchange fewer would not.
    room = 4096 - 512 - model.count_prompt([SYSTEM, question], TOOLS) - SUMMARY_RESERVE_TOKENS
    rest = earlier[len(covered) :]
    assert text_cost(model, rest) <= room // 2
    last_covered = summaries.exchanges(covered)[-1]
    assert text_cost(model, rest) + text_cost(model, last_covered) > room // 2
    # With those covered (and a full-size summary), the text fits with room to grow.
    assert text_cost(model, rest) + SUMMARY_RESERVE_TOKENS + model.count_prompt([SYSTEM, question], TOOLS) + 512 <= 4096


def test_the_plan_starts_after_what_the_summary_covers_and_counts_its_block():
    model = StandInModel(n_ctx=4096)
    earlier = conversation(24)
    question = question_after(earlier)
    state = StoredSummary(text="- (#1–#6) Early questions about the build.", first_seq=1, last_seq=6)
    block = summary_block(state, covered_material(earlier[:6]))
    system_with_block = system(SYSTEM.content + "\n\n" + block)
    args = dict(summary=state, messages=earlier, question=question, tools=TOOLS, max_tokens=512)

    # The block is measured once, whether the caller put it in the system prompt or not.
    assert conversation_fits(model, system=SYSTEM, **args) == conversation_fits(model, system=system_with_block, **args)
    covered = plan_coverage(model, system=system_with_block, **args)
    assert covered and covered[0].seq == 7 and covered[0].role == "user"
    room = 4096 - 512 - model.count_prompt([SYSTEM, question], TOOLS) - SUMMARY_RESERVE_TOKENS
    assert text_cost(model, earlier[6 + len(covered) :]) <= room // 2


def test_an_empty_summary_covers_nothing():
    model = StandInModel(n_ctx=4096)
    earlier = conversation(20)
    question = question_after(earlier)
    failed = StoredSummary(text="", first_seq=1, last_seq=1, retry_at=30)
    covered = plan_coverage(
        model, system=SYSTEM, summary=failed, messages=earlier, question=question, tools=TOOLS, max_tokens=512
    )
    assert covered and covered[0].seq == 1
    assert summary_block(failed, []) == ""


# --- what the summarizer reads ----------------------------------------------------------------


def test_the_summarizer_request_clips_names_tool_results_and_ends_with_the_instruction():
    paste = "HEAD" + "x" * 5000 + "TAIL"
    call = ToolCall(id="c14", name="search", arguments={"query": "billing port"})
    to_cover = [
        user(paste, seq=12),
        assistant("I see the compose file.", seq=13, tool_calls=(call,)),
        tool_result(call, "billing block " * 276, seq=14),
        assistant("The billing port is 8101.", seq=15),
        user("Thanks. Keep Postgres 16.", seq=16),
        assistant("Noted.", seq=17),
    ]
    request = summarizer_request("- (#1–#11) Earlier things.", to_cover)
    assert [m.role for m in request] == ["system", "user"]
    body = request[1].content

    assert "- (#1–#11) Earlier things." in body
    # Long messages: head and tail kept, the middle named.
    head, tail = CLIP_LEVELS[0]
    assert f"#12 user: HEAD{'x' * (head - 4)}\n[… {len(paste) - head - tail:,} characters omitted …]\n" in body
    assert f"{'x' * (tail - 4)}TAIL" in body
    # Tool calls and results named, results not included.
    assert "#13 assistant: I see the compose file.\n(called search for “billing port”)" in body
    assert f"#14 tool result: search for “billing port” ({len(to_cover[2].content):,} characters)" in body
    assert "billing block billing block" not in body
    # Exchanges are kept apart, numbered as stored.
    assert "#15 assistant: The billing port is 8101.\n\n#16 user: Thanks. Keep Postgres 16." in body
    # The closing instruction, after the transcript, with a two-line example.
    assert body.index("#17 assistant") < body.index("Write one bullet per exchange from #12 to #17")
    assert body.rstrip().endswith(
        "- (#1–#2) The user pasted the staging compose file; the assistant noted its services and ports.\n"
        "- (#3–#4) The user asked which database bedrock runs; the assistant said Postgres 16.\n"
        "Write only the new bullets."
    )


def test_the_request_is_clipped_harder_to_fit_and_refused_when_it_cannot():
    to_cover = [
        m for n in range(1, 6) for m in (user(f"paste {n}\n" + "p" * 6000, seq=2 * n - 1), assistant("ok", seq=2 * n))
    ]
    roomy = StandInModel(n_ctx=8192)
    request = fit_summarizer_request(roomy, "", to_cover)
    assert request is not None and "characters omitted" in request[1].content
    assert roomy.count_prompt(request) + SUMMARY_OUTPUT_TOKENS <= roomy.n_ctx
    assert f"paste 1\n{'p' * (CLIP_LEVELS[0][0] - 8)}\n[…" in request[1].content

    tight = StandInModel(n_ctx=1100)
    squeezed = fit_summarizer_request(tight, "", to_cover)
    assert squeezed is not None
    assert tight.count_prompt(squeezed) + SUMMARY_OUTPUT_TOKENS <= tight.n_ctx
    assert len(squeezed[1].content) < len(request[1].content)

    assert fit_summarizer_request(StandInModel(n_ctx=512), "", to_cover) is None


def test_covered_material_names_long_pastes_and_tool_results():
    call = ToolCall(id="c", name="search", arguments={"query": "billing port"})
    look = ToolCall(id="h", name="conversation_history", arguments={"query": "compose"})
    messages = [
        user("services:\n  billing:\n" + "x" * 3600, seq=3),
        user("short question", seq=4),
        assistant("", seq=5, tool_calls=(call,)),
        tool_result(call, "r" * 3870, seq=6),
        assistant("", seq=7, tool_calls=(look,)),
        tool_result(look, "quoted", seq=8),
    ]
    assert covered_material(messages) == [
        f"#3 pasted by the user ({len(messages[0].content):,} characters), beginning “services:”",
        "#6 tool result: search for “billing port” (3,870 characters)",
    ]


def test_covered_material_leaves_out_the_daemon_s_first_looks():
    call = ToolCall(id="call_0a1b", name="search", arguments={"query": "billing port"})
    first = ToolCall(id=FIRST_LOOK_CALL_PREFIX + "0a1b2c3d", name="search", arguments={"query": "billing port use"})
    messages = [
        user("Which port does billing use?", seq=1),
        assistant("", seq=2, tool_calls=(first,)),
        tool_result(first, "[1] services/billing.yaml:1-4\nport: 8101", seq=3),
        assistant("", seq=4, tool_calls=(call,)),
        tool_result(call, "r" * 120, seq=5),
    ]
    assert covered_material(messages) == ["#5 tool result: search for “billing port” (120 characters)"]


def test_the_summary_block_with_and_without_lookup_guidance():
    state = StoredSummary(text="- (#1–#2) The user pasted the compose file.", first_seq=1, last_seq=4)
    block = summary_block(state, ["#1 pasted by the user (3,607 characters), beginning “services:”"])
    assert block.startswith("Earlier in this conversation (messages #1–#4")
    assert "- (#1–#2) The user pasted the compose file." in block
    assert "- #1 pasted by the user (3,607 characters)" in block
    assert "conversation_history" in block.splitlines()[-1]
    final = summary_block(state, [], lookup_guidance=False)
    assert "conversation_history" not in final and state.text in final
    assert summary_block(None, []) == ""


def test_the_covered_material_list_shows_the_latest_twelve_and_counts_the_rest():
    state = StoredSummary(text="- (#1–#40) Many searches.", first_seq=1, last_seq=40)
    material = [f"#{n} tool result: search for “topic {n}” (900 characters)" for n in range(1, 21)]
    block = summary_block(state, material)
    lines = block.splitlines()
    assert "Covered material: (the latest 12; 8 earlier not listed)" in lines
    listed = [line for line in lines if line.startswith("- #")]
    assert listed == [f"- {item}" for item in material[8:]]
    exactly = summary_block(state, material[:12])
    assert "Covered material:" in exactly.splitlines() and "earlier not listed" not in exactly


# --- what it writes -----------------------------------------------------------------------------


def test_new_bullets_are_appended_normalized_and_the_oldest_go_beyond_the_cap():
    existing = "- (#1–#2) First."
    added = append_bullets(existing, "Here is the summary:\n* (#3–#4) Second.\n1. (#5–#6) Third\n  continued.\nDone.")
    assert added == "- (#1–#2) First.\n- (#3–#4) Second.\n- (#5–#6) Third continued."

    long = "\n".join(f"- (#{2 * i + 1}–#{2 * i + 2}) " + "w" * 200 for i in range(10))
    capped = append_bullets(long, "- (#21–#22) The newest.")
    assert len(capped) <= SUMMARY_CAP_CHARS
    assert capped.endswith("- (#21–#22) The newest.")
    assert "(#1–#2)" not in capped and "(#19–#20)" in capped
    assert all(line.startswith("- ") for line in capped.splitlines())


async def test_update_writes_bullets_after_showing_progress():
    model = StandInModel(n_ctx=8192)
    earlier = conversation(6)
    to_cover = earlier[:6]
    previous = None
    model.queue("- (#1–#2) The user asked Q1.\n- (#3–#4) Q2.\n- (#5–#6) Q3.")
    events = RecordingEvents()

    outcome = await update_summary(
        model, state=previous, messages=earlier, to_cover=to_cover, message_count=13, events=events
    )

    assert outcome.ok
    assert outcome.state == StoredSummary(
        text="- (#1–#2) The user asked Q1.\n- (#3–#4) Q2.\n- (#5–#6) Q3.", first_seq=1, last_seq=6, retry_at=None
    )
    assert events.log == [("progress", PROGRESS), ("summary", (outcome.state.text, 1, 6))]
    [request] = model.requests
    assert request.max_tokens == SUMMARY_OUTPUT_TOKENS and request.timeout == SUMMARY_TIMEOUT_S
    assert request.tools == []
    assert "Write one bullet per exchange from #1 to #6" in request.text


async def test_an_update_appends_to_the_summary_so_far():
    model = StandInModel()
    earlier = conversation(6)
    state = StoredSummary(text="- (#1–#2) Q1 asked.", first_seq=1, last_seq=2, retry_at=None)
    model.queue("- (#3–#4) Q2 asked.")
    outcome = await update_summary(
        model, state=state, messages=earlier, to_cover=earlier[2:4], message_count=13, events=RecordingEvents()
    )
    assert outcome.state == StoredSummary(text="- (#1–#2) Q1 asked.\n- (#3–#4) Q2 asked.", first_seq=1, last_seq=4)
    assert "Summary so far:\n- (#1–#2) Q1 asked." in model.requests[0].text


async def test_a_summary_out_of_time_falls_back_discards_the_partial_and_waits_six_messages(monkeypatch):
    monkeypatch.setattr(summaries, "SUMMARY_TIMEOUT_S", 0.05)
    model = StandInModel()
    earlier = conversation(6)
    state = StoredSummary(text="- (#1–#2) Q1 asked.", first_seq=1, last_seq=2)
    model.queue(Hang("- (#3–#4) half a bullet"))
    events = RecordingEvents()

    outcome = await update_summary(
        model, state=state, messages=earlier, to_cover=earlier[2:6], message_count=13, events=events
    )

    assert not outcome.ok and "0.05 seconds" in outcome.reason
    assert outcome.state == StoredSummary(
        text="- (#1–#2) Q1 asked.", first_seq=1, last_seq=2, retry_at=13 + RETRY_AFTER_MESSAGES
    )
    assert "half a bullet" not in outcome.state.text
    assert events.log == [("progress", PROGRESS)]
    assert model.requests[0].timeout == 0.05
    assert not should_attempt(outcome.state, 13)
    assert not should_attempt(outcome.state, 18)
    assert should_attempt(outcome.state, 19)


async def test_a_summary_skipped_for_no_time_left_sets_no_retry_point():
    model = StandInModel()
    earlier = conversation(6)
    state = StoredSummary(text="- (#1–#2) Q1 asked.", first_seq=1, last_seq=2)
    events = RecordingEvents()
    outcome = await update_summary(
        model, state=state, messages=earlier, to_cover=earlier[2:6], message_count=13, events=events, timeout=0
    )
    assert not outcome.ok and outcome.reason == "no time left in the reply's time budget"
    assert outcome.state == state and outcome.state.retry_at is None  # the next reply may try again
    assert should_attempt(outcome.state, 14)
    assert model.requests == [] and events.log == []  # nothing asked, nothing announced


@pytest.mark.parametrize("reply", [Fail("model gone"), "", "I could not summarize this."])
async def test_failures_and_empty_output_keep_the_previous_summary(reply):
    model = StandInModel()
    earlier = conversation(4)
    model.queue(reply)
    outcome = await update_summary(
        model, state=None, messages=earlier, to_cover=earlier[:4], message_count=9, events=RecordingEvents()
    )
    assert not outcome.ok
    assert outcome.state is not None and outcome.state.text == "" and outcome.state.retry_at == 15
    assert summaries.covered_through(outcome.state) == 0
    assert not should_attempt(outcome.state, 14) and should_attempt(outcome.state, 15)


async def test_a_request_that_cannot_fit_falls_back_without_calling_the_model():
    model = StandInModel(n_ctx=512)
    earlier = [user("p" * 8000, seq=n) for n in range(1, 30)]
    events = RecordingEvents()
    outcome = await update_summary(
        model, state=None, messages=earlier, to_cover=earlier, message_count=30, events=events
    )
    assert not outcome.ok and "does not fit" in outcome.reason
    assert model.requests == [] and events.summaries == []
    assert outcome.state.retry_at == 36


async def test_a_summary_cut_by_the_output_limit_drops_its_unfinished_last_bullet():
    model = StandInModel()
    earlier = conversation(4)
    model.queue("- (#1–#2) Q1.\n- (#3–#4) Q2 and " + "more " * 400)
    outcome = await update_summary(
        model, state=None, messages=earlier, to_cover=earlier[:4], message_count=9, events=RecordingEvents()
    )
    assert outcome.ok and outcome.state.text == "- (#1–#2) Q1."


async def test_secrets_are_redacted_in_the_request_and_in_the_summary():
    model = StandInModel()
    call = ToolCall(id="c", name="search", arguments={"query": "token ghp_abcdefghijklmnopqrstuvwxyz0123456789"})
    earlier = [
        user("Our db: postgres://app:hunter2@db:5432/app and OPENAI_API_KEY=sk-proj-abc123def456ghi789jkl0", seq=1),
        assistant("Noted the database URL.", seq=2, tool_calls=(call,)),
        tool_result(call, "nothing", seq=3),
        user("password: swordfish\n" + "x" * 2000, seq=4),
        assistant("ok", seq=5),
    ]
    model.queue(
        "- (#1–#3) The user gave the URL postgres://app:hunter2@db:5432/app and key "
        "sk-proj-abc123def456ghi789jkl0.\n- (#4–#5) password: swordfish noted."
    )
    events = RecordingEvents()
    outcome = await update_summary(
        model, state=None, messages=earlier, to_cover=earlier, message_count=6, events=events
    )

    sent = model.requests[0].text
    secrets = ("hunter2", "sk-proj-abc123def456ghi789jkl0", "swordfish", "ghp_abcdefghijklmnopqrstuvwxyz0123456789")
    for secret in secrets:
        assert secret not in sent
        assert secret not in outcome.state.text
        assert secret not in events.summaries[0][0]
    assert "postgres://app:[REDACTED]@db:5432/app" in outcome.state.text


async def test_cancelling_while_summarizing_writes_no_summary():
    model = StandInModel()
    earlier = conversation(4)
    model.queue(Hang("- (#1–#2) partial"))
    events = RecordingEvents()
    task = asyncio.create_task(
        update_summary(model, state=None, messages=earlier, to_cover=earlier[:4], message_count=9, events=events)
    )
    while not model.requests:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert events.summaries == []
    assert events.log == [("progress", PROGRESS)]


def test_should_attempt_without_a_retry_point():
    assert should_attempt(None, 1)
    assert should_attempt(StoredSummary(text="- x", first_seq=1, last_seq=2), 3)


async def test_a_cut_off_summary_covers_only_the_exchanges_whose_bullets_were_written():
    # Twelve exchanges to cover; the output limit cuts the summary inside its eighth bullet.
    model = StandInModel()
    earlier = conversation(12)
    written = "\n".join(f"- (#{2 * n - 1}–#{2 * n}) The user asked Q{n}." for n in range(1, 8))
    model.queue(Completion(text=f"{written}\n- (#15–#16) The user asked about", finish_reason="length"))
    outcome = await update_summary(
        model, state=None, messages=earlier, to_cover=earlier[:24], message_count=25, events=RecordingEvents()
    )
    assert outcome.ok
    assert outcome.state.text == written  # seven whole bullets, the cut one dropped
    assert (outcome.state.first_seq, outcome.state.last_seq) == (1, 14)  # not 24: #15–#24 wait
    assert summaries.covered_through(outcome.state) == 14
    # What is not covered stays in the conversation text the next reply measures.
    assert [m.seq for m in summaries.conversation_text(earlier, outcome.state)] == list(range(15, 25))


def test_bullets_without_numbers_cover_one_exchange_each():
    earlier = conversation(5)
    assert summaries.covered_by(["- Q1 asked.", "- Q2 asked."], earlier[:10]) == 4
    assert summaries.covered_by(["- (#3) Q2 asked."], earlier[:10]) == 4
    assert summaries.covered_by([], earlier[:10]) is None


async def test_a_cut_off_summary_with_no_whole_bullet_falls_back():
    model = StandInModel()
    earlier = conversation(4)
    model.queue(Completion(text="- (#1–#2) The user asked about " + "more " * 10, finish_reason="length"))
    outcome = await update_summary(
        model, state=None, messages=earlier, to_cover=earlier[:8], message_count=9, events=RecordingEvents()
    )
    assert not outcome.ok and outcome.state.text == "" and outcome.state.retry_at == 15


# -- the bullets' grammar ---------------------------------------------------------------------


def test_the_grammar_allows_one_bullet_per_exchange_in_order_each_citing_its_numbers():
    messages = [
        user("a", seq=4),
        assistant("b", seq=5),
        tool_result(ToolCall(id="c", name="search"), "r"),
        user("d", seq=7),
    ]
    messages[2] = msgspec.structs.replace(messages[2], seq=6)
    assert summaries.bullet_grammar(messages) == (
        "root ::= bullet1 bullet2\n"
        'bullet1 ::= "- (#4–#6) " line "\\n"\n'
        'bullet2 ::= "- (#7) " line "\\n"\n'
        "line ::= [^\\n]+"
    )


async def test_the_summarizer_request_asks_for_the_grammar_of_what_it_covers():
    model = StandInModel()
    covered = [
        user("Which port?", seq=1),
        assistant("8101.", seq=2),
        user("And the host?", seq=3),
        assistant("h1.", seq=4),
    ]
    model.queue("- (#1–#2) The billing port is 8101.\n- (#3–#4) The host is h1.\n")
    outcome = await summaries.update_summary(
        model, state=None, messages=covered, to_cover=covered, message_count=5, events=RecordingEvents()
    )
    assert outcome.ok and outcome.state.last_seq == 4
    [request] = model.requests
    assert request.grammar == summaries.bullet_grammar(covered)
    assert '"- (#1–#2) "' in request.grammar and '"- (#3–#4) "' in request.grammar
