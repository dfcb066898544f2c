"""Writing the running summary now (imprintd/conversations/compact.py), with the stand-in model."""

from __future__ import annotations

import msgspec
import pytest

from imprintd.context.summary import SUMMARY_OUTPUT_TOKENS
from imprintd.conversations.compact import CompactFailed, compact, to_cover
from imprintd.messages import ToolCall, assistant, tool_result, user
from imprintd.store import StoredSummary
from tests.recording import RecordingEvents
from tests.standin import Fail, StandInModel

CALL = ToolCall(id="c1", name="search", arguments={"query": "billing port"})


def numbered(*messages):
    return [msgspec.structs.replace(m, seq=n) for n, m in enumerate(messages, 1)]


CONVERSATION = numbered(
    user("Here is the compose file for staging."),
    assistant("Noted: billing is on 8101."),
    user("Which port does billing use?"),
    assistant("", tool_calls=(CALL,)),
    tool_result(CALL, "billing.yaml:3 port: 8101"),
    assistant("Billing uses 8101."),
    user("And the gateway?"),
    assistant("8443."),
)


def test_covers_every_uncovered_exchange_but_the_newest_tool_exchanges_included():
    assert [m.seq for m in to_cover(CONVERSATION, None)] == [1, 2, 3, 4, 5, 6]
    covered = StoredSummary(text="- (#1–#2) compose file", first_seq=1, last_seq=2)
    assert [m.seq for m in to_cover(CONVERSATION, covered)] == [3, 4, 5, 6]
    # a state carrying only a failed attempt's retry point covers nothing
    assert [m.seq for m in to_cover(CONVERSATION, StoredSummary(text="", first_seq=1, last_seq=8, retry_at=14))] == [
        1,
        2,
        3,
        4,
        5,
        6,
    ]


async def test_writes_bullets_for_the_chosen_exchanges_appended_to_the_summary_so_far():
    model = StandInModel()
    model.queue("- (#3–#6) The user asked for billing's port; it is 8101, from billing.yaml.\n")
    events = RecordingEvents()
    state = StoredSummary(text="- (#1–#2) The user pasted the staging compose file.", first_seq=1, last_seq=2)
    done = await compact(model, CONVERSATION, state, events)
    assert done.written and done.note == "The summary now covers messages #1–#6."
    assert done.summary == StoredSummary(
        text="- (#1–#2) The user pasted the staging compose file.\n"
        "- (#3–#6) The user asked for billing's port; it is 8101, from billing.yaml.",
        first_seq=1,
        last_seq=6,
    )
    [request] = model.requests
    assert request.max_tokens == SUMMARY_OUTPUT_TOKENS and request.tools == []
    transcript = request.messages[-1].content
    assert "#3" in transcript and "#6" in transcript and "#7" not in transcript and "And the gateway?" not in transcript
    assert [p for k, p in events.log if k == "summary"] == [(done.summary.text, 1, 6)]


async def test_at_most_one_uncovered_exchange_is_nothing_to_summarize_and_asks_nothing():
    model = StandInModel()
    state = StoredSummary(text="- (#1–#6) all of it", first_seq=1, last_seq=6)
    done = await compact(model, CONVERSATION, state, RecordingEvents())
    assert not done.written and done.summary == state and model.requests == []
    assert done.note == (
        "Nothing to summarize: the conversation after message #6 (what the summary covers) is at most one "
        "exchange, which stays in view."
    )
    empty = await compact(model, CONVERSATION[:2], None, RecordingEvents())
    assert not empty.written and empty.summary is None and "Nothing to summarize" in empty.note


async def test_a_failed_attempt_raises_and_leaves_nothing_to_store():
    model = StandInModel()
    model.queue(Fail("connection refused"))
    with pytest.raises(CompactFailed, match="no summary was written: the model failed: .*connection refused"):
        await compact(model, CONVERSATION, None, RecordingEvents())
