"""AcpEvents on its own: the mappings no scripted model reaches, checked against the SDK's schema."""

from __future__ import annotations

from pathlib import Path

import msgspec
from acp import schema

from imprintd.acp.events import AcpEvents, stop_reason
from imprintd.context.usage import ContextUsage, Parts
from imprintd.events import ToolStep
from imprintd.reply import ReplyOutcome
from tests.acp.peer import conforms


class Sent:
    """A Connection stand-in that keeps each notification as the JSON the agent would write."""

    def __init__(self) -> None:
        self.notifications: list[dict] = []

    def notify(self, method: str, params) -> None:
        assert method == "session/update"
        self.notifications.append(msgspec.json.decode(msgspec.json.encode(params)))


def events(root: Path | None = None) -> tuple[AcpEvents, Sent]:
    sent = Sent()
    acp_events = AcpEvents(sent, "session-1", root)
    acp_events.begin("session-1", "reply-1")
    return acp_events, sent


def test_a_step_that_fails_before_it_starts_is_one_failed_tool_call():
    acp_events, sent = events()
    acp_events.tool_step(
        ToolStep(
            call_id="call_0",
            tool="ghost",
            title="Calling ghost",
            state="failed",
            detail="There is no tool named 'ghost'.",
        )
    )
    [notification] = sent.notifications
    conforms(schema.SessionNotification, notification)
    update = notification["update"]
    assert (update["sessionUpdate"], update["status"], update["kind"]) == ("tool_call", "failed", "other")
    assert update["content"] == [
        {"type": "content", "content": {"type": "text", "text": "There is no tool named 'ghost'."}}
    ]


def test_a_live_read_file_step_points_at_the_file_and_line_it_reads(tmp_path):
    root = tmp_path.resolve()
    cases = [
        ({"path": "src/app.py"}, None),
        ({"path": "src/app.py", "start_line": 5, "end_line": 9}, 4),
        ({"path": "../outside.py"}, "none"),
        ({"path": 7}, "none"),
    ]
    for arguments, line in cases:
        acp_events, sent = events(root)
        acp_events.tool_step(
            ToolStep(call_id="c", tool="read_file", title="Reading", state="started", arguments=arguments)
        )
        update = sent.notifications[0]["update"]
        if line == "none":
            assert "locations" not in update, arguments
            continue
        expected = {"path": str(root / arguments["path"])} | ({"line": line} if line is not None else {})
        assert update["locations"] == [expected], arguments


def sent_texts(sent: Sent) -> list[tuple[str, str]]:
    for notification in sent.notifications:
        conforms(schema.SessionNotification, notification)
    return [(n["update"]["sessionUpdate"], n["update"]["content"]["text"]) for n in sent.notifications]


def test_text_streams_as_message_chunks_and_a_preamble_stays_before_the_answer():
    acp_events, sent = events()
    acp_events.text("Let me look ")
    acp_events.text("that up.")
    assert sent_texts(sent) == [("agent_message_chunk", "Let me look "), ("agent_message_chunk", "that up.")]
    acp_events.text_was_preamble()
    acp_events.text_was_preamble()  # nothing new streamed: nothing changes
    acp_events.text("Billing listens")
    acp_events.text(" on 8101.")
    acp_events.finish(ReplyOutcome(session_id="session-1", reply_id="reply-1", text="Billing listens on 8101."))
    assert sent_texts(sent)[2:] == [
        ("agent_message_chunk", "\n\nBilling listens"),  # the answer starts its own paragraph
        ("agent_message_chunk", " on 8101."),  # and nothing is sent twice when the reply returns
    ]


def test_finish_sends_what_of_the_result_did_not_stream():
    acp_events, sent = events()
    acp_events.text("Billing listens on 8101.")
    acp_events.finish(
        ReplyOutcome(session_id="session-1", reply_id="reply-1", text="Billing listens on 8101.\n\nSources: …")
    )
    assert sent_texts(sent) == [
        ("agent_message_chunk", "Billing listens on 8101."),
        ("agent_message_chunk", "\n\nSources: …"),
    ]


def test_context_usage_is_a_usage_update_of_the_window():
    acp_events, sent = events()
    parts = Parts(system=400, tools=1200, summary=300, earlier=2900, question=150, research=350)
    acp_events.context_usage(
        ContextUsage(
            n_ctx=8192,
            output_allowance=1024,
            exact=True,
            used=parts.total,
            parts=parts,
            in_view=((12, 40),),
            summarized=((1, 11),),
            dropped=(),
        )
    )
    [notification] = sent.notifications
    conforms(schema.SessionNotification, notification)
    assert notification["update"] == {"sessionUpdate": "usage_update", "used": 5300, "size": 8192}


def test_nothing_is_sent_once_the_prompt_is_closed():
    acp_events, sent = events()
    acp_events.text("Once upon")
    acp_events.close()
    acp_events.text(" a time")
    acp_events.progress("Analyzing section 1 of 2")
    acp_events.tool_step(ToolStep(call_id="c", tool="search", title="Searching", state="started"))
    assert sent_texts(sent) == [("agent_message_chunk", "Once upon")]


def test_stop_reasons_map_to_acp():
    assert stop_reason("answer") == "end_turn"
    for research_stop in ("token_budget", "time_budget", "no_new_evidence", "context_full"):
        assert stop_reason(research_stop) == "end_turn"
    assert stop_reason("length") == "max_tokens"


def test_progress_and_a_written_summary_are_thoughts_one_line_each():
    acp_events, sent = events()
    acp_events.progress("Analyzing section 3 of 12", 25)
    acp_events.summary("- (#1–#4) The user asked about billing …", 1, 12)
    for notification in sent.notifications:
        conforms(schema.SessionNotification, notification)
    assert [(n["update"]["sessionUpdate"], n["update"]["content"]["text"]) for n in sent.notifications] == [
        ("agent_thought_chunk", "Analyzing section 3 of 12\n"),
        ("agent_thought_chunk", "Summarized the earlier conversation (messages #1–#12).\n"),
    ]


def test_reasoning_streams_as_thought_chunks_and_a_progress_line_after_it_starts_its_own_line():
    acp_events, sent = events()
    acp_events.reasoning("The config")
    acp_events.reasoning(" says 8101.")
    acp_events.progress("Writing the answer from the research notes…")
    acp_events.text("Port 8101.")
    for notification in sent.notifications:
        conforms(schema.SessionNotification, notification)
    assert [(n["update"]["sessionUpdate"], n["update"]["content"]["text"]) for n in sent.notifications] == [
        ("agent_thought_chunk", "The config"),
        ("agent_thought_chunk", " says 8101."),
        ("agent_thought_chunk", "\nWriting the answer from the research notes…\n"),
        ("agent_message_chunk", "Port 8101."),
    ]


def test_the_next_rounds_thoughts_start_a_paragraph_of_their_own():
    acp_events, sent = events()
    acp_events.reasoning("I should search.")
    acp_events.text_was_preamble()  # the round called a tool
    acp_events.reasoning("It says 8101.")
    assert [n["update"]["content"]["text"] for n in sent.notifications] == ["I should search.", "\n\nIt says 8101."]


def test_a_notice_is_a_thought_line_and_a_logged_warning(caplog):
    acp_events, sent = events()
    notice = "The model server's context window is 2,048 tokens (llama-server /props n_ctx), smaller than chat.n_ctx."
    with caplog.at_level("WARNING"):
        acp_events.notice(notice)
    for notification in sent.notifications:
        conforms(schema.SessionNotification, notification)
    assert [(n["update"]["sessionUpdate"], n["update"]["content"]["text"]) for n in sent.notifications] == [
        ("agent_thought_chunk", notice + "\n")
    ]
    assert notice in caplog.text


def test_an_mcp_results_uri_is_linked_after_the_answer_and_only_one_to_click():
    from imprintd.messages import SourceRef, ToolOrigin

    acp_events, sent = events()
    origin = ToolOrigin(server="docs", tool="fetch_page", arguments={"slug": "rollout"})
    sources = [
        SourceRef(
            number=1,
            kind="tool",
            label="docs: fetch_page",
            origin=msgspec.structs.replace(origin, uri="https://docs.example.com/rollout"),
        ),
        SourceRef(
            number=2, kind="tool", label="docs: run", origin=msgspec.structs.replace(origin, uri="javascript:alert(1)")
        ),
        SourceRef(number=3, kind="tool", label="docs: list", origin=origin),
    ]
    acp_events.finish(ReplyOutcome(session_id="session-1", reply_id="reply-1", text="", sources=tuple(sources)))
    links = [n["update"]["content"] for n in sent.notifications if n["update"]["content"]["type"] == "resource_link"]
    assert links == [
        {
            "type": "resource_link",
            "uri": "https://docs.example.com/rollout",
            "name": "docs: fetch_page",
            "title": "[1] docs: fetch_page",
        }
    ]
    for notification in sent.notifications:
        conforms(schema.SessionNotification, notification)
