"""The research loop with the stand-in model: what reached the model, and why research stopped."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import msgspec
import pytest

from imprintd import messages as msg
from imprintd.context import sections as sec
from imprintd.context.originals import ReplySections
from imprintd.messages import ToolSpec
from imprintd.models.base import Completion, ModelError
from imprintd.research import loop as loop_mod
from imprintd.research.citations import Numbering
from imprintd.research.loop import ReplyFailed, research
from imprintd.research.notes import build_notes
from imprintd.research.preview import PREVIEW_CHARS
from imprintd.tools.base import Hit, Source, ToolHints, ToolResult
from tests.helpers import tool_turn
from tests.recording import RecordingEvents
from tests.research.fakes import SYSTEM, FakeSearch, scope
from tests.standin import Fail, Hang, StandInModel, call


async def test_a_plain_answer_ends_research_in_one_request(model: StandInModel):
    model.queue("The answer.")
    history = [msg.user("Earlier?", seq=1), msg.assistant("Earlier answer.", seq=2)]
    question = msg.user("Now?", seq=3)
    outcome = await research(scope(model), system=SYSTEM, history=history, question=question, tools=[FakeSearch()])
    assert outcome.stop == "answer" and outcome.answer.text == "The answer."
    [request] = model.requests
    assert request.messages == [SYSTEM, *history, question]
    assert [tool.name for tool in request.tools] == ["search"]
    assert outcome.steps == [] and outcome.exchange == []


async def test_a_tool_round_appends_the_call_and_its_result_then_answers(model: StandInModel):
    search = FakeSearch()
    events = RecordingEvents()
    model.queue(tool_turn(call("search", query="billing port")), "Billing uses 8101.")
    question = msg.user("Which port does billing use?", seq=1)
    outcome = await research(scope(model, events), system=SYSTEM, history=[], question=question, tools=[search])
    assert outcome.stop == "answer"
    second = model.requests[1].messages
    assert second[2].tool_calls[0].name == "search"
    assert second[3].role == "tool" and "passage about billing port" in second[3].content
    assert [(s.state, s.title) for s in events.steps] == [
        ("started", "Searching the workspace for “billing port”"),
        ("finished", "Searching the workspace for “billing port”"),
    ]
    assert [m.role for m in outcome.exchange] == ["assistant", "tool"]
    assert outcome.steps[0].result.hits[0].path == "src/billing_port.py"


async def test_text_of_a_round_that_calls_tools_is_marked_preamble_and_the_answer_is_a_new_part(model: StandInModel):
    events = RecordingEvents()
    model.queue(
        Completion(text="Let me look that up.", tool_calls=(call("search", query="billing port"),)),
        "Billing uses 8101.",
    )
    await research(
        scope(model, events), system=SYSTEM, history=[], question=msg.user("Port?", seq=1), tools=[FakeSearch()]
    )
    assert events.parts == [("preamble", "Let me look that up."), ("answer", "Billing uses 8101.")]
    # The preamble is known before the tool runs, so a client can fold it before the step shows.
    assert events.kinds().index("preamble") < events.kinds().index("tool_step")


async def test_text_cut_off_by_the_time_budget_is_preamble(model: StandInModel):
    events = RecordingEvents()
    model.queue(Hang("I will start by"))
    outcome = await research(
        scope(model, events, time_budget=0.5),
        system=SYSTEM,
        history=[],
        question=msg.user("q", seq=1),
        tools=[FakeSearch()],
    )
    assert outcome.stop == "time_budget"
    assert events.parts == [("preamble", "I will start by")]


async def test_a_plain_answer_is_one_answer_part(model: StandInModel):
    events = RecordingEvents()
    model.queue("Just the answer.")
    await research(scope(model, events), system=SYSTEM, history=[], question=msg.user("q", seq=1), tools=[FakeSearch()])
    assert events.parts == [("answer", "Just the answer.")]
    assert "preamble" not in events.kinds()


async def test_an_identical_call_is_answered_from_the_earlier_result_and_stagnation_stops(model: StandInModel):
    search = FakeSearch()
    model.queue(
        tool_turn(call("search", query="port")),
        tool_turn(call("search", query="port", call_id="c2")),
        tool_turn(call("search", query="port", call_id="c3")),
    )
    outcome = await research(scope(model), system=SYSTEM, history=[], question=msg.user("q", seq=1), tools=[search])
    assert search.runs == ["port"]  # run once, then answered from the earlier result
    assert outcome.stop == "no_new_evidence"
    assert len(model.requests) == 3  # one round with evidence, then two without (patience 2)


async def test_the_token_budget_stops_research_before_a_request_would_cross_it(model: StandInModel):
    search = FakeSearch()
    queries = [f"topic {n}" for n in range(50)]
    model.queue(*[tool_turn(call("search", call_id=f"c{n}", query=q)) for n, q in enumerate(queries)])
    the_scope = scope(model, token_budget=2000, max_tokens=400)
    outcome = await research(the_scope, system=SYSTEM, history=[], question=msg.user("q", seq=1), tools=[search])
    budget = outcome.budget
    assert outcome.stop == "token_budget"
    # Every request the model got was reserved first and settled after, in order...
    assert len(budget.reservations) == len(model.requests) >= 2
    assert (
        [r.allowance for r in budget.reservations]
        == [r.max_tokens for r in model.requests]
        == [400] * len(model.requests)
    )
    assert [r.prompt_tokens for r in budget.reservations] == [
        model.count_prompt(r.messages, r.tools) for r in model.requests
    ]
    assert budget.open_reservations == ()
    assert budget.remaining == budget.total - budget.charged + budget.refunded >= 0
    # ...and research stopped on the first request that would have crossed the budget.
    refused = budget.refused
    assert refused is not None and refused.remaining == budget.remaining
    assert refused.needed == refused.prompt_charge + 400 > budget.remaining
    assert refused.prompt_charge > 0 and len(search.runs) == len(model.requests)


async def test_the_time_budget_stops_a_round_that_runs_past_it(model: StandInModel):
    model.queue(Hang("thinking about"))
    outcome = await research(
        scope(model, time_budget=0.5), system=SYSTEM, history=[], question=msg.user("q", seq=1), tools=[FakeSearch()]
    )
    assert outcome.stop == "time_budget"
    assert model.requests[0].timeout == pytest.approx(0.5, abs=0.2)


async def test_research_that_fills_the_context_stops_for_the_final_answer():
    model = StandInModel(n_ctx=1400)
    big = ToolResult(text="x " * 1500, subject="big", evidence=("e1",))  # ~750 tokens, no room for another
    search = FakeSearch({"a": big, "b": ToolResult(text="y " * 1500, subject="b", evidence=("e2",))})
    model.queue(tool_turn(call("search", query="a")), tool_turn(call("search", query="b", call_id="c2")))
    outcome = await research(
        scope(model, max_tokens=200, analysis_workers=0),
        system=SYSTEM,
        history=[],
        question=msg.user("q", seq=1),
        tools=[search],
    )
    assert outcome.stop == "context_full"


async def test_a_malformed_call_is_not_run_and_the_model_is_told_why(model: StandInModel):
    search = FakeSearch()
    model.queue(Completion(text="", tool_call_error="the arguments are not valid JSON: Expecting ','"), "Fine.")
    outcome = await research(scope(model), system=SYSTEM, history=[], question=msg.user("q", seq=1), tools=[search])
    assert outcome.stop == "answer" and search.runs == []
    assert "Expecting ','" in model.requests[1].messages[-1].content


async def test_an_unknown_tool_is_a_failed_step_with_the_tools_named(model: StandInModel):
    events = RecordingEvents()
    model.queue(tool_turn(call("delete_everything")), "ok")
    await research(scope(model, events), system=SYSTEM, history=[], question=msg.user("q", seq=1), tools=[FakeSearch()])
    assert events.steps[0].state == "failed" and "search" in events.steps[0].detail


async def test_an_oversized_question_is_analyzed_in_sections_and_the_reread_tool_offered():
    model = StandInModel(n_ctx=2048)
    paste = "".join(f"line {n}: service alpha{n} listens on port {9000 + n}\n" for n in range(400))
    paste += "QUESTION: which port does alpha399 use?"
    events = RecordingEvents()
    # Worker notes for every section, then the coordinator's answer.
    model.queue(*["worker notes: alpha399 uses 9399"] * 12)
    outcome = await research(
        scope(model, events, max_tokens=256),
        system=SYSTEM,
        history=[],
        question=msg.user(paste, seq=1),
        tools=[FakeSearch()],
    )
    workers = [r for r in model.requests if not r.tools]
    coordinator = [r for r in model.requests if r.tools]
    assert len(workers) >= 2 and len(coordinator) == 1
    assert "read_chat_section" in [tool.name for tool in coordinator[0].tools]
    assert paste not in coordinator[0].text and "9399" in coordinator[0].text
    assert "QUESTION: which port does alpha399 use?" in coordinator[0].text  # the tail is kept
    assert events.progress_messages[0].startswith("Analyzing section 1 of ")
    assert outcome.question.content != paste


async def test_an_oversized_question_with_analysis_off_fails_naming_the_setting():
    model = StandInModel(n_ctx=1024)
    with pytest.raises(ReplyFailed, match="analysis_workers = 0"):
        await research(
            scope(model, analysis_workers=0),
            system=SYSTEM,
            history=[],
            question=msg.user("word " * 3000, seq=1),
            tools=[],
        )
    assert model.requests == []


async def test_an_oversized_tool_result_is_analyzed_and_its_tail_reaches_the_coordinator():
    model = StandInModel(n_ctx=2048)
    log = "".join(f"{n:05d} routine entry nothing to see\n" for n in range(600)) + "FATAL: disk full on db-7\n"
    search = FakeSearch({"errors": ToolResult(text=log, subject="errors", evidence=("log",))})

    def notes(request):
        return "notes: FATAL disk full on db-7" if "FATAL" in request.text else "notes: routine entries"

    model.queue(tool_turn(call("search", query="errors")), *[notes] * 12, "db-7 ran out of disk.")
    outcome = await research(
        scope(model), system=SYSTEM, history=[], question=msg.user("what failed?", seq=1), tools=[search]
    )
    final = model.requests[-1]
    assert outcome.stop == "answer"
    assert "FATAL disk full on db-7" in final.messages[-1].content  # the worker notes on the tail
    assert log not in final.text
    assert outcome.exchange[-1].content == log  # the original is what gets stored


async def test_with_zero_workers_a_big_tool_result_is_clipped_to_4000_characters(model: StandInModel):
    search = FakeSearch({"big": ToolResult(text="z" * 9000, subject="big", evidence=("z",))})
    model.queue(tool_turn(call("search", query="big")), "done")
    await research(
        scope(model, analysis_workers=0), system=SYSTEM, history=[], question=msg.user("q", seq=1), tools=[search]
    )
    shown = model.requests[1].messages[-1].content
    assert shown.startswith("z" * 4000) and "z" * 4001 not in shown and "clipped" in shown


async def test_cancelling_research_stops_the_running_request(model: StandInModel):
    model.queue(Hang("partial"))
    with anyio.move_on_after(0.3) as cancelled:
        await research(scope(model), system=SYSTEM, history=[], question=msg.user("q", seq=1), tools=[])
    assert cancelled.cancel_called and len(model.requests) == 1


def test_patience_is_two_rounds():
    assert loop_mod.NO_NEW_EVIDENCE_PATIENCE == 2


async def test_history_goes_before_section_workers_start():
    model = StandInModel(n_ctx=2048)
    history = []
    for n in range(1, 9):
        history += [
            msg.user(f"question {n} " + "words " * 60, seq=2 * n - 1),
            msg.assistant(f"answer {n} " + "words " * 60, seq=2 * n),
        ]
    question = msg.user("a long question " + "detail " * 900, seq=17)  # fits alone, not with all history
    model.queue("answered")
    await research(scope(model), system=SYSTEM, history=history, question=question, tools=[])
    [request] = model.requests  # no worker ran: dropping old exchanges was enough
    assert request.messages[-1] == question
    kept = request.messages[1:-1]
    assert kept and kept[0].role == "user" and kept == history[-len(kept) :]  # the newest whole exchanges

    model = StandInModel(n_ctx=2048)
    model.queue(*["notes"] * 12)
    huge = msg.user("a huge question " + "detail " * 3000, seq=17)  # does not fit even alone
    await research(scope(model), system=SYSTEM, history=history, question=huge, tools=[])
    workers = [r for r in model.requests if r.max_tokens == sec.NOTES_MAX_TOKENS]
    assert len(workers) >= 2 and model.requests[: len(workers)] == workers  # workers first, then the coordinator


class FakeRead:
    """A read_file whose result is the same text every time; counts its runs."""

    spec = ToolSpec(
        name="read_file",
        description="Read a file.",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    )

    def __init__(self, text: str) -> None:
        self.text = text
        self.runs = 0

    def title(self, arguments: Mapping[str, Any]) -> str:
        return f"Reading {arguments.get('path', '')}"

    async def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        self.runs += 1
        path = arguments["path"]
        return ToolResult(
            text=self.text,
            subject=path,
            evidence=(f"{path}:1-2",),
            sources=(Source(path=path, start_line=1, end_line=2),),
        )


async def test_a_repeated_call_makes_one_note_of_its_result_without_the_repeat_marker(model: StandInModel):
    from imprintd.research.notes import build_notes

    read = FakeRead("GATEWAY_PORT = 8443")
    model.queue(
        tool_turn(call("read_file", path="src/config.py")),
        tool_turn(call("read_file", call_id="c2", path="src/config.py")),
        "8443.",
    )
    outcome = await research(scope(model), system=SYSTEM, history=[], question=msg.user("q", seq=1), tools=[read])
    assert read.runs == 1
    # The model is told the second call repeats the first...
    assert model.requests[2].messages[-1].content.startswith("(Same call as before; its result again.)")
    # ...under the number it was first shown with...
    assert model.requests[1].messages[-1].content == "[1] src/config.py:1–2\nGATEWAY_PORT = 8443"
    assert model.requests[2].messages[-1].content.endswith("\n[1] src/config.py:1–2\nGATEWAY_PORT = 8443")
    # ...but the notes see the result itself: one note, found twice, with no tool protocol in it.
    [note] = build_notes(outcome.steps, outcome.numbering)
    assert note.text == "GATEWAY_PORT = 8443" and note.times == 2 and note.number == 1


async def test_a_repeated_oversized_result_is_not_analyzed_again():
    model = StandInModel(n_ctx=2048)
    log = "".join(f"{n:05d} routine entry nothing to see\n" for n in range(600)) + "FATAL: disk full on db-7\n"
    search = FakeSearch({"errors": ToolResult(text=log, subject="errors", evidence=("log",))})
    sections = ReplySections("r1")
    rounds = [
        tool_turn(call("search", query="errors")),
        tool_turn(call("search", call_id="c2", query="errors")),
        Completion(text="db-7 ran out of disk."),
    ]

    def reply(request):  # workers (no tools) take notes; the coordinator plays its rounds
        return rounds.pop(0) if request.tools else "notes: FATAL disk full on db-7"

    model.queue(*[reply] * 40)
    outcome = await research(
        scope(model, sections=sections),
        system=SYSTEM,
        history=[],
        question=msg.user("what failed?", seq=1),
        tools=[search],
    )
    assert outcome.stop == "answer" and search.runs == ["errors"]
    workers = [r for r in model.requests if not r.tools]
    used = sections.sections_used
    assert len(workers) == used  # one analysis only: the repeat reused its notes
    repeat = model.requests[-1].messages[-1].content
    assert repeat.startswith("(Same call as before; its result again.)\n[Section analysis]")


async def test_a_malformed_call_round_stores_nothing(model: StandInModel):
    model.queue(Completion(text="", tool_call_error="the arguments are not valid JSON"), "Fine.")
    outcome = await research(
        scope(model), system=SYSTEM, history=[], question=msg.user("q", seq=1), tools=[FakeSearch()]
    )
    assert outcome.stop == "answer"
    # No tool ran: nothing of that round is a tool exchange to store with the reply.
    assert outcome.exchange == []


async def test_a_budget_spent_analyzing_the_question_keeps_the_notes_of_the_sections_read():
    model = StandInModel(n_ctx=2048)
    paste = "".join(f"line {n}: service alpha{n} listens on port {9000 + n}\n" for n in range(400))
    model.queue(*[lambda r, n=n: f"worker notes {n}" for n in range(1, 13)])
    outcome = await research(
        scope(model, token_budget=3000),
        system=SYSTEM,
        history=[],
        question=msg.user(paste, seq=1),
        tools=[FakeSearch()],
    )
    assert outcome.stop == "token_budget"
    assert all(not r.tools for r in model.requests)  # workers only: no coordinator round was paid for
    analysis = outcome.question_analysis
    assert analysis is not None and analysis.cut == "token_budget"
    assert 1 <= len(analysis.sections) == len(model.requests) < analysis.needed
    assert outcome.analyses == [analysis]
    # The question now stands as the notes of the sections read, each under its number, which
    # say what was not read.
    numbers = [p.number for p in outcome.numbering.passages]
    assert numbers == list(range(1, len(analysis.workers) + 1))
    assert outcome.question.content == analysis.coordinator_text(numbers=numbers)
    assert "\n[1] Notes of worker 1 on section" in outcome.question.content
    assert "worker notes 1" in outcome.question.content
    assert f"Characters {analysis.read_to}–{len(paste)} were NOT read" in outcome.question.content


async def test_a_budget_spent_analyzing_a_tool_result_stops_research_on_the_token_budget():
    model = StandInModel(n_ctx=4096)
    log = "".join(f"{n:05d} routine entry nothing to see\n" for n in range(600)) + "FATAL: disk full on db-7\n"
    search = FakeSearch({"errors": ToolResult(text=log, subject="errors", evidence=("log",))})
    model.queue(
        tool_turn(call("search", query="errors")),
        *["notes: routine"] * 12,
        *[tool_turn(call("search", call_id=f"c{n}", query=f"more {n}")) for n in range(5)],
    )
    # Enough for the first round and one worker, not for the second; a coordinator round on
    # the clipped result would still fit what remains.
    outcome = await research(
        scope(model, token_budget=5800, max_tokens=128),
        system=SYSTEM,
        history=[],
        question=msg.user("what failed?", seq=1),
        tools=[search],
    )
    assert outcome.stop == "token_budget"
    assert len([r for r in model.requests if r.tools]) == 1  # no round ran on a clipped result
    assert outcome.exchange[-1].content == log
    # The notes of the sections read are kept for the final answer, not the
    # first characters of the raw result.
    [step] = outcome.steps
    assert step.analysis is not None and step.analysis.cut == "token_budget"
    read = len(step.analysis.sections)
    assert read == len([r for r in model.requests if not r.tools]) >= 1
    notes = build_notes(outcome.steps, outcome.numbering)
    assert [n.text.split("\n")[0] for n in notes] == ["notes: routine"] * min(read, 2)
    assert notes[0].label.startswith("notes on section 1 of ") and notes[0].label.endswith(" of a long tool result")
    assert f"characters {step.analysis.read_to}–{len(log)} of this source were not read" in notes[0].text
    assert all("00000 routine entry" not in n.text for n in notes)


async def test_workers_on_a_tool_result_see_the_users_question_even_when_it_was_analyzed():
    model = StandInModel(n_ctx=2048)
    paste = "".join(f"line {n}: service alpha{n} listens on port {9000 + n}\n" for n in range(400))
    paste += "QUESTION: which service logged the disk error?"
    log = "".join(f"{n:05d} routine entry nothing to see\n" for n in range(600)) + "FATAL: disk full on db-7\n"
    search = FakeSearch({"errors": ToolResult(text=log, subject="errors", evidence=("log",))})
    rounds = [tool_turn(call("search", query="errors")), Completion(text="db-7.")]

    def reply(request):  # workers (no tools) take notes; the coordinator plays its rounds
        return rounds.pop(0) if request.tools else "notes"

    model.queue(*[reply] * 60)
    await research(scope(model), system=SYSTEM, history=[], question=msg.user(paste, seq=1), tools=[search])
    on_the_log = [r for r in model.requests if not r.tools and "routine entry" in r.text]
    assert on_the_log
    for request in on_the_log:
        asked = request.messages[-1].content.split("Your notes so far:")[0]
        assert "QUESTION: which service logged the disk error?" in asked
        assert "[Section analysis]" not in asked


async def test_tool_steps_are_numbered_within_the_reply_when_the_model_reuses_call_ids(model: StandInModel):
    events = RecordingEvents()
    model.queue(  # the id "call_0" every round, and twice in one round, as many servers write it
        tool_turn(call("search", "call_0", query="billing port")),
        tool_turn(call("search", "call_0", query="billing config"), call("ghost", "call_0")),
        "Billing uses 8101.",
    )
    question = msg.user("Which port does billing use?", seq=1)
    outcome = await research(scope(model, events), system=SYSTEM, history=[], question=question, tools=[FakeSearch()])
    assert outcome.stop == "answer"
    assert [(s.call_id, s.state) for s in events.steps] == [
        ("step-1", "started"),
        ("step-1", "finished"),
        ("step-2", "started"),
        ("step-2", "finished"),
        ("step-3", "failed"),  # an unknown tool fails without starting, under its own number
    ]
    # What the model is shown keeps its own ids: the numbering is the clients'.
    assert [m.tool_call_id for m in model.requests[2].messages if m.role == "tool"] == ["call_0"] * 3


async def test_numbered_results_leave_every_earlier_message_of_the_prompt_unchanged(model: StandInModel):
    # Numbers are given when a result arrives: round k+1's prompt starts with round k's, byte
    # for byte (llama.cpp reuses the evaluated prefix), and a place found again keeps its number.
    shared = Hit(id="shared", path="src/port.py", start_line=1, end_line=3, score=2.0, excerpt="PORT = 8101")
    other = Hit(id="other", path="src/b.py", start_line=4, end_line=6, score=1.0, excerpt="B = 1")
    search = FakeSearch(
        {
            "port": ToolResult(text="t", subject="port", evidence=("shared",), hits=(shared,)),
            "b": ToolResult(text="t", subject="b", evidence=("other", "shared"), hits=(other, shared)),
        }
    )
    model.queue(
        tool_turn(call("search", query="port")), tool_turn(call("search", call_id="c2", query="b")), "8101 [1]."
    )
    outcome = await research(scope(model), system=SYSTEM, history=[], question=msg.user("q", seq=1), tools=[search])
    assert outcome.stop == "answer"
    prompts = [request.messages for request in model.requests]
    for earlier, later in zip(prompts, prompts[1:], strict=False):
        assert later[: len(earlier)] == earlier
    assert prompts[1][-1].content == "[1] src/port.py:1–3\nPORT = 8101"
    assert prompts[2][-1].content == "[2] src/b.py:4–6\nB = 1\n\n[1] src/port.py:1–3\nPORT = 8101"


# -- one rule for a stop after work -------------------------------------------------------------------
async def test_a_round_failing_after_a_search_stops_on_model_error_keeping_the_search(model: StandInModel):
    events = RecordingEvents()
    model.queue(
        Completion(text="Looking.", tool_calls=(call("search", query="billing port"),)),
        Fail("server error 502: bad gateway (tried 4 times)"),
    )
    question = msg.user("Which port?", seq=1)
    outcome = await research(scope(model, events), system=SYSTEM, history=[], question=question, tools=[FakeSearch()])
    assert outcome.stop == "model_error"
    assert outcome.failure == (
        "Research stopped early: the model failed in round 2 (server error 502: bad gateway (tried 4 times)), "
        "so this answer is written from what round 1 found."
    )
    assert [m.role for m in outcome.exchange] == ["assistant", "tool"]  # the search is kept, to be stored
    assert build_notes(outcome.steps)[0].text  # and becomes a note for the final answer


async def test_a_round_failing_before_anything_was_gathered_fails(model: StandInModel):
    model.queue(Fail("server error 503"))
    with pytest.raises(ModelError, match="server error 503"):
        await research(scope(model), system=SYSTEM, history=[], question=msg.user("q", seq=1), tools=[FakeSearch()])


async def test_a_result_shorter_than_an_analysis_header_is_passed_whole_and_research_stops_full(
    model: StandInModel,
):
    """A context nearly full of research: the short result does not fit, but its analysis could
    only be longer, so it is passed whole and the next fit stops research (context_full)."""
    short = "x " * 150  # 300 characters: shorter than an analysis header
    assert len(short) < sec.header_chars(len(short), sec.tool_kind("search"))
    searching = call("search", query="a " * 120)
    question = msg.user("q", seq=1)
    found = ToolResult(text=short, evidence=("passage:1",))
    shown = Numbering().result(searching, found)[0]  # as the coordinator is shown it, numbered
    before = model.count_prompt([SYSTEM, question, msg.assistant("", tool_calls=(searching,))], [FakeSearch().spec])
    model.n_ctx = before + 256 + model.count_message(msg.tool_result(searching, shown)) - 1  # one token short

    class Short(FakeSearch):
        async def run(self, arguments: Mapping[str, Any]) -> ToolResult:
            await super().run(arguments)
            return found

    model.queue(tool_turn(searching))
    outcome = await research(
        scope(model, max_tokens=256), system=SYSTEM, history=[], question=question, tools=[Short()]
    )
    assert outcome.stop == "context_full" and outcome.analyses == []
    assert outcome.exchange[-1].content == short
    assert len(model.requests) == 1  # no section worker ran


async def test_the_reread_tool_is_not_offered_when_its_schema_alone_would_fill_the_context(model: StandInModel):
    """After the question's analysis, read_chat_section's schema must not alone make the context full."""
    model.n_ctx = 1536

    def reply(request):
        if not request.tools and request.system == sec.WORKER_SYSTEM_PROMPT:
            return "- [s1] the paste lists lines"
        return "Answered from the notes."

    question = msg.user("line of the paste\n" * 600 + "What is in it?", seq=1)
    # First, with room to spare: what the coordinator is sent with the reread tool, and without it.
    model.queue(*[reply] * 40)
    first = await research(scope(model, max_tokens=16), system=SYSTEM, history=[], question=question, tools=[])
    with_reread = model.requests[-1]
    assert [tool.name for tool in with_reread.tools] == ["read_chat_section"]
    numbers = sorted(first.numbering.by_number())
    bare = [SYSTEM, msg.user(first.question_analysis.coordinator_text(reread=False, numbers=numbers), seq=1)]
    needed = model.count_prompt(bare)
    assert model.count_prompt(with_reread.messages, with_reread.tools) > needed
    # Then with an output allowance that leaves room for the notes but not the schema as well.
    model.requests.clear()
    model.queue(*[reply] * 40)
    outcome = await research(
        scope(model, max_tokens=model.n_ctx - needed), system=SYSTEM, history=[], question=question, tools=[]
    )
    assert outcome.stop == "answer" and outcome.answer.text == "Answered from the notes."  # not context_full
    coordinator = model.requests[-1]
    assert coordinator.tools == []
    assert "read_chat_section" not in coordinator.messages[-1].content  # nor its guidance


class FakeMcpLookup(FakeRead):
    """A tool with annotations, as an MCP tool has: read-only, reaching outside."""

    spec = ToolSpec(
        name="docs__lookup",
        description="Look a topic up.",
        parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    )

    def hints(self, arguments: Mapping[str, Any]) -> ToolHints:
        return ToolHints(read_only=True, destructive=False, open_world=True)

    async def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        result = await super().run(arguments)
        return msgspec.structs.replace(
            result, resources=("https://docs.example.com/billing", "command:workbench.action.terminal.new")
        )


async def test_a_finished_step_carries_a_bounded_redacted_preview_and_the_result_is_stored_whole(
    model: StandInModel,
):
    key = "sk-proj-" + "Qx7" * 16
    text = f"OPENAI_API_KEY={key}\n" + "\n".join(f"line {n}: billing listens on 8101" for n in range(200))
    events = RecordingEvents()
    model.queue(tool_turn(call("read_file", path="billing.env")), "Billing uses 8101.")
    outcome = await research(
        scope(model, events), system=SYSTEM, history=[], question=msg.user("Port?", seq=1), tools=[FakeRead(text)]
    )
    started, finished = events.steps
    assert (started.preview, started.hints) == ("", None)  # a workspace tool has no annotations
    assert finished.state == "finished" and len(finished.preview) <= PREVIEW_CHARS
    assert key not in finished.preview and finished.preview.startswith("OPENAI_API_KEY=")
    assert "line 30: billing listens on 8101" in finished.preview and "line 199" not in finished.preview
    # What is stored, and what the model read, is the result itself.
    [stored] = [m for m in outcome.exchange if m.role == "tool"]
    assert stored.content == text
    assert key in model.requests[1].messages[-1].content


async def test_an_annotated_tools_steps_carry_its_hints_from_the_start_and_its_links_at_the_end(
    model: StandInModel,
):
    events = RecordingEvents()
    model.queue(tool_turn(call("docs__lookup", path="billing")), "Billing uses 8101.")
    await research(
        scope(model, events),
        system=SYSTEM,
        history=[],
        question=msg.user("Port?", seq=1),
        tools=[FakeMcpLookup("Billing listens on 8101.")],
    )
    started, finished = events.steps
    hints = ToolHints(read_only=True, destructive=False, open_world=True)
    assert (started.hints, finished.hints) == (hints, hints)
    assert finished.preview == "Billing listens on 8101."
    assert finished.resources == ("https://docs.example.com/billing",)  # the command: URI is no link
