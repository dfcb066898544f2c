"""The final answer's own paths (docs/decisions.md, "Final answer from notes"): a request that cannot be prepared,
a model that reports writing a tool call as text (``Completion.wrote_tool_call``), and the time it gets."""

from __future__ import annotations

from imprintd.research.answer import final_answer
from imprintd.research.notes import ToolStepRecord
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
    await answer(model, timeout=500)
    assert model.requests[1].timeout == 120  # never more than its own 120 s


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
