"""The final answer's own paths (docs/decisions.md, "Final answer from notes"): a request that cannot be prepared,
a model that reports writing a tool call as text (``Completion.wrote_tool_call``), and the time it gets."""

from __future__ import annotations

from imprintd import messages as msg
from imprintd.context import sections as sec
from imprintd.research.answer import final_answer
from imprintd.research.notes import DIGEST_LIMIT, ToolStepRecord
from imprintd.tools.base import Source, ToolResult
from tests.recording import RecordingEvents
from tests.standin import StandInModel, call


def read_step(path: str, text: str) -> ToolStepRecord:
    return ToolStepRecord(
        call=call("read_file", path=path),
        result=ToolResult(
            text=text, subject=path, evidence=(f"{path}:1-3",), sources=(Source(path=path, start_line=1, end_line=3),)
        ),
    )


STEPS = [
    read_step("services/billing.yaml", "name: billing\nport: 8101\nreplicas: 2"),
    read_step("docs/deploy.md", "Billing is deployed behind the gateway."),
]


async def answer(model, events=None, **overrides):
    values = dict(
        system_prompt="You are Imprint.",
        summary_block="",
        earlier=[],
        question="Which port does billing use?",
        steps=STEPS,
        style="written",
        max_tokens=256,
    )
    values.update(overrides)
    return await final_answer(model, events or RecordingEvents(), **values)


async def test_a_final_request_that_cannot_be_prepared_gives_the_findings_without_asking_the_model():
    model = StandInModel(n_ctx=300)  # the question and notes do not fit beside 256 output tokens
    events = RecordingEvents()
    final = await answer(model, events)
    assert model.requests == []
    assert final.text.startswith(
        "I couldn't write a full answer. The strongest findings of the research:\n"
        "- services/billing.yaml:1–3: name: billing port: 8101 replicas: 2 [1]"
    )
    assert events.progress_messages == ["Writing the answer from the research notes…"]
    assert events.streamed == final.text


async def test_a_final_turn_whose_model_wrote_a_tool_call_is_cut_short_with_its_text_kept():
    # The final turn offers no tools; a template without tool support writes a call as JSON
    # text anyway. The model stops its text before the markup (tests/models/test_toolcalls.py)
    # and reports it; the answer keeps that text and adds the strongest findings.
    model = StandInModel(native_tools=False)
    model.queue('Billing listens on 8101 [1]. {"name": "search", "arguments": {"query": "billing owner"}}')
    events = RecordingEvents()
    final = await answer(model, events)
    assert model.requests[0].tools == []
    assert final.text.startswith(
        "Billing listens on 8101 [1].\n\n(The answer was cut short. The strongest findings of the research:)\n"
    )
    assert "billing owner" not in final.text and '"name"' not in final.text
    assert events.streamed == final.text


async def test_an_answer_without_a_tool_call_is_kept_whole():
    model = StandInModel(native_tools=False)
    model.queue('Set it like this: {"port": 8101} [1].')
    final = await answer(model)
    assert final.text == 'Set it like this: {"port": 8101} [1].\n\nSources:\n[1] services/billing.yaml:1-3'


async def test_the_final_request_gets_the_time_it_is_given():
    model = StandInModel()
    model.queue("Billing listens on 8101 [1].")
    await answer(model, timeout=7.5)
    assert model.requests[0].timeout == 7.5
    model.queue("Billing listens on 8101 [1].")
    await answer(model)
    assert model.requests[1].timeout == 120  # its own 120 s unless told otherwise


async def test_what_was_not_read_is_said_before_the_sources():
    model = StandInModel()
    model.queue("Billing listens on 8101 [1].")
    events = RecordingEvents()
    final = await answer(model, events, coverage="Characters 10–20 of your message (20 characters) were not read.")
    assert final.text == (
        "Billing listens on 8101 [1].\n\nCharacters 10–20 of your message (20 characters) were "
        "not read.\n\nSources:\n[1] services/billing.yaml:1-3"
    )
    assert events.streamed == final.text


async def test_the_final_request_shrinks_an_analyzed_question_and_the_digest_to_fit():
    model = StandInModel(n_ctx=1536)
    lines = [f"- [s{n}] service_{n:02d} answers in {n * 10} ms, which is worth keeping" for n in range(1, 30)]
    analysis = sec.Analysis(
        source_id="src123456789",
        kind=sec.USER_KIND,
        label="user message",
        total_chars=12_000,
        sections=((0, 6_000), (5_936, 12_000)),
        workers=(
            sec.WorkerNotes(worker=1, sections=(1,), notes="\n".join(lines[:15])),
            sec.WorkerNotes(worker=2, sections=(2,), notes="\n".join(lines[15:])),
        ),
        head="Here is the service log:",
        tail="Which service is slowest?",
    )
    analyzed = analysis.coordinator_text(reread=False)
    steps = [read_step(f"docs/part{n}.md", f"Part {n} says billing is on 8101. " * 15) for n in range(10)]
    full = model.count_prompt([msg.system("You are Imprint."), msg.user(analyzed + "\n" + "x" * DIGEST_LIMIT)])
    assert full + 512 > model.n_ctx  # whole, it could never fit
    model.queue("Billing listens on 8101 [1].")
    events = RecordingEvents()
    final = await answer(
        model, events, question=analyzed, question_analysis=analysis, question_seq=1, steps=steps, max_tokens=512
    )
    [request] = model.requests
    assert model.count_prompt(request.messages) + request.max_tokens <= model.n_ctx
    assert request.max_tokens == 512  # the parts shrank first; the answer's allowance stayed
    sent = request.messages[-1].content
    assert sent.startswith("[Section analysis] The user's message was too long")
    assert "- [s1] service_01" in sent and "- [s29] service_29" in sent  # every note kept its start
    assert "Research notes:\n[1] " in sent
    assert final.text.startswith("Billing listens on 8101 [1].\n\nSources:\n[1] ")


async def test_the_users_own_question_is_never_shrunk():
    model = StandInModel(n_ctx=1024)
    question = "Which port does billing use? " + "Please explain in detail. " * 60
    steps = [read_step(f"docs/part{n}.md", f"Part {n} says billing is on 8101. " * 15) for n in range(10)]
    full = model.count_prompt([msg.system("You are Imprint."), msg.user(question + "x" * DIGEST_LIMIT)])
    assert full + 256 > model.n_ctx  # with the whole digest it would not fit
    model.queue("Billing listens on 8101 [1].")
    await answer(model, question=question, steps=steps, max_tokens=256)
    [request] = model.requests
    assert request.messages[-1].content.startswith(question.strip())
    assert model.count_prompt(request.messages) + request.max_tokens <= model.n_ctx
