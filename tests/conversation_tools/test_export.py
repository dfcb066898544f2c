"""A conversation exported as Markdown or JSON (imprintd/conversations/export.py)."""

from __future__ import annotations

import json

import msgspec

from imprintd import protocol as wire
from imprintd.conversations.export import STEP_RESULT_CHARS, file_name, markdown
from imprintd.messages import SourceRef, ToolCall, assistant, tool_result, user
from imprintd.research.citations import sources_block
from imprintd.store import SessionInfo, Store, StoredSummary

SOURCES = (
    SourceRef(
        number=1, kind="file", label="services/billing.yaml", path="services/billing.yaml", start_line=1, end_line=12
    ),
    SourceRef(
        number=2,
        kind="file",
        label="docs/deploy.md",
        path="docs/deploy.md",
        start_line=3,
        end_line=3,
        cited=False,
        supported=None,
    ),
    SourceRef(number=3, kind="message", label="message #1", message=1),
)
CALL = ToolCall(id="c1", name="search", arguments={"query": "billing port"})
ANSWER = "Billing listens on 8101 [1]."


def stored_session(db: Store, *, summary: StoredSummary | None = None) -> SessionInfo:
    info = db.create_session(workspace="/home/me/shop")
    db.extend(
        info.id,
        [
            user("Which port does billing use?"),
            assistant("Let me look.", tool_calls=(CALL,)),
            tool_result(CALL, "services/billing.yaml:3  port: 8101\n" + "x" * (STEP_RESULT_CHARS + 500)),
            assistant(ANSWER + "\n\n" + sources_block(SOURCES), sources=SOURCES),
            user("And the gateway?"),
            assistant("The gateway is on 8443."),
        ],
    )
    if summary is not None:
        db.save_summary(info.id, summary)
    return db.session(info.id)


def test_markdown_has_questions_answers_folded_steps_and_sources_as_workspace_links(isolated_dirs):
    with Store.open() as db:
        info = stored_session(db)
        text = markdown(info, db.messages(info.id), None)
    assert text.startswith("# Which port does billing use?\n")
    assert f"Session `{info.id}` · workspace `/home/me/shop`" in text and "6 messages" in text
    assert "## You (#1)\n\nWhich port does billing use?" in text
    assert (
        "## Imprint (#4)\n\n<details>\n<summary>1 tool step</summary>\n\nLet me look.\n- search for “billing port”"
        in text
    )
    assert "Result of search for “billing port”:\n\n```\nservices/billing.yaml:3  port: 8101\n" in text
    assert f"… ({STEP_RESULT_CHARS + 500 + 36:,} characters in all)" in text  # clipped, saying how long it was
    assert "</details>\n\nBilling listens on 8101 [1].\n\nSources:\n\n" in text
    assert "1. [services/billing.yaml:1-12](services/billing.yaml#L1-L12)\n" in text
    assert "2. [docs/deploy.md:3](docs/deploy.md#L3) (read, not cited)\n" in text
    assert "3. #1\n" in text
    assert "[1] services/billing.yaml:1-12" not in text  # the plain Sources lines gave way to links
    assert text.index("## You (#5)") < text.index("## Imprint (#6)\n\nThe gateway is on 8443.")


def test_markdown_puts_the_running_summary_as_a_note_before_what_it_covers(isolated_dirs):
    summary = StoredSummary(text="- (#1–#4) billing is on 8101\n- asked twice", first_seq=1, last_seq=4)
    with Store.open() as db:
        info = stored_session(db, summary=summary)
        text = markdown(info, db.messages(info.id), db.summary(info.id))
    note = "> **Summary of messages #1–#4** (what Imprint keeps in view)\n>\n> - (#1–#4) billing is on 8101\n> - asked twice"
    assert note in text and text.index(note) < text.index("## You (#1)")


def test_json_is_what_imprint_session_returns(isolated_dirs):
    with Store.open() as db:
        info = stored_session(db)
        messages, summary = db.messages(info.id), db.summary(info.id)
    exported = wire.ExportResult.from_view(info, messages, summary, "json")
    assert exported.file_name == "imprint-which-port-does-billing-use.json"
    as_session = json.loads(json.dumps(msgspec.to_builtins(wire.SessionResult.from_view(info, messages, summary))))
    assert json.loads(exported.text) == as_session
    assert [m["seq"] for m in as_session["messages"]] == [1, 2, 3, 4, 5, 6]
    assert as_session["messages"][3]["sources"][0]["path"] == "services/billing.yaml"


def test_file_name_from_the_title_else_the_id():
    info = SessionInfo(
        id="5f0c1234abcd", title="", workspace=None, created_at=0, updated_at=0, message_count=0, persist=True
    )
    assert file_name(info, "markdown") == "imprint-5f0c1234.md"
    titled = SessionInfo(
        id="x",
        title="Why does `make` fail on CI?!",
        workspace=None,
        created_at=0,
        updated_at=0,
        message_count=0,
        persist=True,
    )
    assert file_name(titled, "json") == "imprint-why-does-make-fail-on-ci.json"


async def test_markdown_exports_the_steps_the_chat_showed(workspace):
    # A follow-up with the first look on, a call the model repeats, and a result holding a
    # four-backtick fence: the export titles the look with the question asked, leaves out the
    # look's lines written for the model and the repeated call, and keeps each result fenced.
    from imprintd.research import first_look
    from imprintd.research.loop import REPEATED
    from tests.helpers import ask, make_chat, tool_turn
    from tests.recording import RecordingEvents
    from tests.standin import StandInModel, call

    (workspace / "docs" / "fences.md").write_text("Billing fences:\n````\nport: 8101\n````\n", encoding="utf-8")
    model = StandInModel()
    chat = make_chat(model, **{"chat.first_look": True})
    again = call("read_file", "call_2", path="docs/fences.md")
    model.queue(
        "It is deployed behind the gateway.",
        tool_turn(call("read_file", "call_1", path="docs/fences.md")),
        tool_turn(again),
        "Port 8101.",
    )
    first, _ = await ask(chat, "Where is the billing service deployed?", workspace=workspace)
    events = RecordingEvents()
    await ask(chat, "And its port?", first.session_id, events=events)
    view = chat.session(first.session_id)
    stored = view.messages
    assert any(m.role == "tool" and m.content.startswith(REPEATED) for m in stored)  # the model repeated a call
    assert any(first_look.ASK_AGAIN in m.content for m in stored if m.role == "tool")  # the look, as the model read it
    shown_steps = [step.title for step in events.steps if step.state == "started"]

    text = markdown(view.info, stored, view.summary)
    follow_up = text[text.index("## You (#") + 1 :]
    follow_up = follow_up[follow_up.index("And its port?") :]
    listed = [line[2:] for line in follow_up.splitlines() if line.startswith("- ")]
    # One line a step the chat showed: the look and the first read, not the repeated one.
    assert shown_steps == ["Looking in the workspace for “And its port?”", "Reading docs/fences.md"]
    assert listed == ["Looking in the workspace for “And its port?”", "read_file docs/fences.md"]
    assert first_look.ASK_AGAIN not in text and first_look.BEST_LINES_HEADING not in text
    assert REPEATED not in text
    assert "Result of looking in the workspace for “And its port?”:" in follow_up
    # The file's four backticks sit inside a five-backtick fence.
    assert "`````\nBilling fences:\n````\nport: 8101\n````\n" in text
