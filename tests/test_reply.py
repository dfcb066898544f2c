"""A whole reply through the core (``Chat.reply``) with the stand-in model and a real workspace.

Asserts what reached the model, what the client was sent and what was stored, for the final
answer written from notes (docs/decisions.md, "Final answer from notes") and the stored reply.
"""

from __future__ import annotations

import os
import re

import anyio
import apsw
import pytest

from imprintd.chat import ReplyRequest
from imprintd.context.sections import WORKER_SYSTEM_PROMPT
from imprintd.models.base import Completion, ModelError, RequestScope
from imprintd.research import clock as clock_mod
from tests.helpers import ask, make_chat, tool_turn
from tests.recording import RecordingEvents
from tests.standin import Fail, Hang, StandInModel, call
from tests.store.disk_syncs import counting_syncs


def researcher(calls, final):
    """Scripted replies: the coordinator makes ``calls`` one per round, for as long as it is
    offered tools; the tools-free final request gets ``final``."""
    pending = list(calls)

    def reply(request):
        if request.tools:
            return tool_turn(pending.pop(0)) if pending else tool_turn(call("search", call_id="again", query="billing"))
        return final(request) if callable(final) else final

    return [reply] * (len(calls) + 4)


MANY_CALLS = [
    call("search", call_id=f"c{n}", query=q)
    for n, q in enumerate(["billing", "gateway", "replicas", "image", "deploy", "rollout", "port", "docs", "name"])
]


async def test_a_budget_stop_writes_the_answer_from_notes_with_sources(model, workspace):
    chat = make_chat(model, **{"chat.research_token_budget": 1280, "chat.max_tokens": 512})
    calls = [call("search", query="billing port"), call("read_file", call_id="c2", path="services/billing.yaml")]
    calls += [call("search", call_id=f"c{n}", query=f"deploy {n}") for n in range(3, 12)]
    model.queue(
        *researcher(
            calls,
            "Billing listens on port 8101 [1].\n\n- Deployed behind the gateway [2]."
            "\n\nThe notes do not say who owns it.",
        )
    )
    outcome, events = await ask(chat, "Which port does billing use?", workspace=workspace)
    assert outcome.stop_reason == "token_budget"

    final = model.requests[-1]
    assert final.tools == []
    assert all(m.role in ("system", "user", "assistant") and not m.tool_calls for m in final.messages)
    assert "Tools:" not in final.system  # no tool strategy in the final turn
    assert final.messages[-1].content.startswith("Which port does billing use?")
    assert "Research notes:" in final.messages[-1].content and "[1]" in final.messages[-1].content
    assert "port: 8101" in final.messages[-1].content

    assert outcome.text.startswith("Billing listens on port 8101 [1].")
    assert "\n\nSources:\n[1] services/billing.yaml" in outcome.text
    assert outcome.sources and outcome.sources[0].path == "services/billing.yaml"
    assert outcome.sources[0].start_line >= 1 and outcome.sources[0].end_line >= outcome.sources[0].start_line
    assert events.streamed.endswith(outcome.text[-40:])  # the Sources list streamed too

    stored = chat.store.messages(outcome.session_id)
    assert [m.role for m in stored] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ][: len(stored) - 1] + ["assistant"]
    assert stored[0].content == "Which port does billing use?" and stored[-1].content == outcome.text
    assert any(m.role == "tool" and "8101" in m.content for m in stored)


async def test_an_answer_cut_short_keeps_what_it_wrote_and_adds_the_strongest_findings(model, workspace):
    chat = make_chat(model, **{"chat.research_token_budget": 1280, "chat.max_tokens": 512})
    model.queue(*researcher(MANY_CALLS, Completion(text="Billing runs two replicas.", finish_reason="length")))
    outcome, _ = await ask(chat, "Tell me about billing", workspace=workspace)
    assert outcome.text.startswith("Billing runs two replicas.\n\n(The answer was cut short.")
    assert "…" not in outcome.text.split("\n")[0]  # cut after a whole sentence: no ellipsis


@pytest.mark.parametrize("finish", ["length", "repetition"])
async def test_a_final_answer_stopped_early_keeps_what_it_wrote_and_adds_the_findings(model, workspace, finish):
    chat = make_chat(model, **{"chat.research_token_budget": 1280, "chat.max_tokens": 512})
    model.queue(*researcher(MANY_CALLS, Completion(text="Billing runs two replicas.", finish_reason=finish)))
    outcome, _ = await ask(chat, "Tell me about billing", workspace=workspace)
    assert outcome.stop_reason == "token_budget"  # why research stopped; the answer's own cut is said in it
    assert outcome.text.startswith("Billing runs two replicas.\n\n(The answer was cut short.")


async def test_a_direct_answer_the_guard_cut_ends_with_a_line_saying_so(model):
    chat = make_chat(model)
    model.queue(Completion(text="Billing uses port 8101.", finish_reason="repetition"))
    outcome, events = await ask(chat, "Which port?")
    assert outcome.stop_reason == "repetition"
    assert (
        outcome.text
        == "Billing uses port 8101.\n\n(The model started repeating itself here, so the answer was cut off.)"
    )
    assert events.streamed.endswith("(The model started repeating itself here, so the answer was cut off.)")
    assert chat.session(outcome.session_id).messages[-1].content == outcome.text


async def test_a_new_sessions_reply_commits_its_question_with_the_session_then_its_answer(model, monkeypatch):
    commits = []

    def count_commits(db: apsw.Connection) -> None:
        db.set_commit_hook(lambda: commits.append(1) or False)  # False: let it commit

    monkeypatch.setattr(apsw, "connection_hooks", [*apsw.connection_hooks, count_commits])
    chat = make_chat(model)
    assert chat.store.sessions() == []  # opened (and migrated) before counting
    commits.clear()
    model.queue(Completion(text="A context window is what the model reads at once."))
    outcome, _ = await ask(chat, "What is a context window?")
    assert [(m.role, m.content) for m in chat.store.messages(outcome.session_id)] == [
        ("user", "What is a context window?"),
        ("assistant", "A context window is what the model reads at once."),
    ]
    assert chat.store.session(outcome.session_id).title == "What is a context window?"
    # The session with its question in one commit, then the answer: one disk sync fewer a new session.
    assert len(commits) == 2
    # The model was asked after the question was stored, and saw it.
    assert model.requests[0].messages[-1].content == "What is a context window?"


async def test_a_reply_waits_for_the_disk_once_the_answers_commit_syncing_its_question_with_it(model):
    with counting_syncs() as disk:
        chat = make_chat(model)
        assert chat.store.sessions() == []  # opened (and migrated) before counting
        log = f"{chat.store.path.name}-wal"
        disk.synced.clear()
        model.queue("A context window is what the model reads at once.", "A token is a piece of a word.")
        outcome, _ = await ask(chat, "What is a context window?")
        assert disk.synced == [log]
        await ask(chat, "And a token?", session_id=outcome.session_id)  # a follow-up, the same
        assert disk.synced == [log, log]
    assert [m.content for m in chat.store.messages(outcome.session_id)] == [
        "What is a context window?",
        "A context window is what the model reads at once.",
        "And a token?",
        "A token is a piece of a word.",
    ]


@pytest.mark.parametrize("follow_up", [False, True], ids=["new session", "follow-up"])
async def test_a_reply_that_fails_makes_its_question_durable_before_failing(model, monkeypatch, follow_up):
    chat = make_chat(model)
    session_id = None
    if follow_up:
        model.queue("Billing uses port 8101.")
        session_id = (await ask(chat, "Which port does billing use?"))[0].session_id
    synced: list[int] = []
    fsync = os.fsync

    def recording(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    model.queue(Fail("the model crashed"))
    with pytest.raises(ModelError, match="the model crashed"):
        await ask(chat, "And the host?", session_id)
    assert synced == [os.stat(f"{chat.store.path}-wal").st_ino]
    [session] = chat.store.sessions()
    assert chat.store.messages(session.id)[-1].content == "And the host?"


class KeepingStates(StandInModel):
    """The stand-in as a model with per-session states: what it was told to make way for."""

    def __init__(self) -> None:
        super().__init__()
        self.made_way: list[tuple[RequestScope, int]] = []

    def set_state_limits(self, *, memory_bytes: int, disk_bytes: int) -> None:
        pass

    def forget_session(self, session_id: str) -> None:
        pass

    def close_states(self) -> None:
        pass

    def make_way(self, scope: RequestScope) -> None:
        self.made_way.append((scope, len(self.requests)))


async def test_a_model_keeping_states_makes_way_for_each_replys_session_before_it_is_asked():
    model = KeepingStates()
    chat = make_chat(model)
    chat.model()  # built, as after a first reply
    model.queue(Completion(text="First."), Completion(text="Second."), Completion(text="Unstored."))
    first, _ = await ask(chat, "A question?")
    await ask(chat, "A follow-up?", session_id=first.session_id)
    unstored, _ = await ask(chat, "Off the record?", persist=False)
    assert model.made_way == [
        (RequestScope(session_id=first.session_id, persist=True), 0),
        (RequestScope(session_id=first.session_id, persist=True), 1),
        (RequestScope(session_id=unstored.session_id, persist=False), 2),
    ]


async def test_a_final_turn_that_fails_ends_with_the_findings(model, workspace):
    chat = make_chat(model, **{"chat.research_token_budget": 1280, "chat.max_tokens": 512})
    model.queue(*researcher(MANY_CALLS, Fail("the model crashed")))
    outcome, events = await ask(chat, "Tell me about billing", workspace=workspace)
    assert outcome.text.startswith("I couldn't write a full answer. The strongest findings of the research:\n- ")
    assert "port: 8101" in outcome.text or "billing" in outcome.text.split("\n")[1]
    assert outcome.stop_reason == "token_budget"  # a bounded stop is never a failed reply
    assert events.streamed == outcome.text


async def test_a_final_turn_that_asks_for_tools_keeps_its_text_and_adds_the_findings(model, workspace):
    # A provider that parses a call even with no tools offered returns it as a tool call.
    chat = make_chat(model, **{"chat.research_token_budget": 1280, "chat.max_tokens": 512})
    model.queue(
        *researcher(
            MANY_CALLS,
            Completion(
                text="Billing is deployed behind the gateway [1].",
                tool_calls=(call("search", call_id="x", query="owner"),),
            ),
        )
    )
    outcome, events = await ask(chat, "Tell me about billing", workspace=workspace)
    assert outcome.text.startswith(
        "Billing is deployed behind the gateway [1].\n\n(The answer was cut short. "
        "The strongest findings of the research:)\n- "
    )
    findings = [line for line in outcome.text.split("Sources:")[0].splitlines() if line.startswith("- ")]
    assert findings[0].startswith("- docs/deploy.md:1–") and "# Deploying The billing service" in findings[0]
    assert len(findings) == 2
    assert "search" not in outcome.text.split("\n")[0]  # nothing of the call is shown
    # Notes keep the numbers research gave: [1] is the first place found, whatever ranks first.
    assert outcome.text.endswith("\n\nSources:\n[1] services/billing.yaml:1-4\n[2] docs/deploy.md:1-4")
    assert events.streamed == outcome.text


async def test_a_spoken_reply_gets_no_sources_list_but_still_its_sources(model, workspace):
    chat = make_chat(model, **{"chat.research_token_budget": 1280, "chat.max_tokens": 512})
    model.queue(*researcher(MANY_CALLS, "Billing uses port 8101 [1]."))
    outcome, events = await ask(chat, "Which port?", workspace=workspace, style="spoken")
    assert outcome.text == "Billing uses port 8101." and events.streamed == outcome.text
    assert [(s.number, s.cited, s.supported) for s in outcome.sources] == [(1, True, True)]
    assert "two or three plain sentences" in model.requests[-1].messages[-1].content


async def test_cancelling_a_reply_keeps_only_the_question(model, workspace):
    chat = make_chat(model)
    model.queue(tool_turn(call("search", query="billing")), Hang("Billing"))
    events = RecordingEvents()
    with anyio.move_on_after(1):
        await chat.reply(ReplyRequest(text="Which port?", workspace=str(workspace)), events)
    [session] = chat.sessions()
    assert [(m.role, m.content) for m in chat.store.messages(session.id)] == [("user", "Which port?")]


async def test_workspace_tools_refuse_paths_outside_and_report_a_failed_step(model, workspace, tmp_path):
    (tmp_path / "secret.txt").write_text("TOP SECRET", encoding="utf-8")
    chat = make_chat(model)
    model.queue(tool_turn(call("read_file", path="../secret.txt")), "I can't read that.")
    outcome, events = await ask(chat, "Read ../secret.txt", workspace=workspace)
    assert events.steps[-1].state == "failed"
    assert "TOP SECRET" not in model.requests[1].text
    assert outcome.text == "I can't read that."


async def test_indexing_reports_progress_and_a_missing_workspace_is_named(model, workspace, tmp_path):
    chat = make_chat(model)
    model.queue("ok")
    _, events = await ask(chat, "hello", workspace=workspace)
    assert any(message.startswith("Indexing the workspace:") for message in events.progress_messages)
    from imprintd.chat import WorkspaceMissing

    with pytest.raises(WorkspaceMissing, match="nowhere"):
        await ask(chat, "hello", workspace=tmp_path / "nowhere")
    assert len(chat.sessions()) == 1  # the refused request stored nothing


async def test_a_final_turn_that_writes_a_tool_call_as_text_is_cut_short_without_the_markup(model, workspace):
    # The final turn offers no tools, so a model that asks for one anyway writes the call as
    # text: providers parse calls only when tools are offered (the final answer from notes is asked with no tools).
    chat = make_chat(model, **{"chat.research_token_budget": 1280, "chat.max_tokens": 512})
    model.queue(
        *researcher(
            MANY_CALLS,
            "Billing runs two replicas [1]. \n<tool_call>\n"
            '{"name": "search", "arguments": {"query": "billing owner"}}\n</tool_call>',
        )
    )
    outcome, events = await ask(chat, "Tell me about billing", workspace=workspace)
    assert outcome.text.startswith("Billing runs two replicas [1].\n\n(The answer was cut short.")
    assert "tool_call" not in outcome.text and "tool_call" not in events.streamed
    assert events.streamed == outcome.text


async def test_a_follow_up_researches_the_workspace_its_session_started_on(model, workspace):
    chat = make_chat(model)
    model.queue("first", "second")
    first, _ = await ask(chat, "What is in here?", workspace=workspace)
    assert chat.store.session(first.session_id).workspace == str(workspace.resolve())
    await chat.reply(ReplyRequest(text="And now?", session_id=first.session_id), RecordingEvents())
    assert {tool.name for tool in model.requests[1].tools} >= {"search", "read_file"}


async def test_the_final_answer_after_an_analyzed_question_has_no_reread_guidance(workspace):
    model = StandInModel(n_ctx=2048)
    chat = make_chat(model, **{"chat.n_ctx": 2048, "chat.max_tokens": 256})

    def reply(request):
        if request.max_tokens == 384:  # a section worker
            return "worker notes: billing listens on 8101"
        if request.tools:  # the coordinator keeps repeating one search: no new evidence
            return tool_turn(call("search", query="billing"))
        return "Billing listens on 8101 [1]."

    model.queue(*[reply] * 40)
    paste = "Which port does billing use? Here is the config:\n" + "setting: value\n" * 1200
    outcome, _ = await ask(chat, paste, workspace=workspace)
    assert outcome.stop_reason == "no_new_evidence"
    final = model.requests[-1]
    assert final.tools == [] and "[Section analysis]" in final.messages[-1].content
    assert "read_chat_section" not in final.text
    coordinator = [r for r in model.requests if r.tools][0]
    assert "read_chat_section" in coordinator.text  # the coordinator itself was told how to reread


# --- budgets and long input --------------------


def paste_of(lines: int) -> str:
    return "Which port does service alpha199 listen on? Here is the inventory:\n" + "".join(
        f"line {n}: service alpha{n} listens on port {9000 + n} FACT-{n}\n" for n in range(lines)
    )


def section_notes(request) -> str:
    """A worker's notes: the facts of the section it was shown."""
    import re

    shown = request.messages[-1].content.split("<<<", 1)[1]
    return "notes: " + " ".join(re.findall(r"FACT-\d+", shown)[-3:])


async def test_a_paste_the_token_budget_cannot_cover_is_answered_from_the_sections_read(workspace):
    model = StandInModel(n_ctx=2048)
    chat = make_chat(model, **{"chat.n_ctx": 2048, "chat.max_tokens": 256, "chat.research_token_budget": 6000})

    def reply(request):
        if request.max_tokens == 384:
            return section_notes(request)
        return (
            "alpha199 is not in the sections I read [1]."
            if not request.tools
            else tool_turn(call("search", query="alpha"))
        )

    model.queue(*[reply] * 40)
    paste = paste_of(400)
    outcome, events = await ask(chat, paste, workspace=workspace)

    workers = [r for r in model.requests if r.max_tokens == 384]
    analysis = [m for m in events.progress_messages if not m.startswith("Indexing")]
    planned = int(analysis[1].rsplit(" of ", 1)[1])
    assert 2 <= len(workers) < planned  # some sections were read, not all
    # Up front, before any worker ran: what will not be read and the setting that would read it.
    announce = analysis[0]
    assert announce.startswith(f"The user message needs {planned} sections: the research token budget (6,000 tokens")
    assert "chat.research_token_budget = " in announce and "will likely not be read" in announce
    assert outcome.stop_reason == "token_budget"
    # The final answer was written from the notes of the sections read, not the raw paste.
    final = model.requests[-1]
    assert final.tools == [] and paste not in final.text
    assert "[Section analysis]" in final.text and "FACT-1 " in final.text.replace("\n", " ")
    assert "were NOT read" in final.text
    # The reply says exactly which characters were not read, and is no "nothing to report".
    [read_to] = {int(m) for m in __import__("re").findall(r"only characters 0–(\d+) were read", final.text)}
    assert read_to < len(paste)
    assert outcome.text.startswith("alpha199 is not in the sections I read")
    assert (
        f"Characters {read_to:,}–{len(paste):,} of your message ({len(paste):,} characters) were not read: "
        f"the research token budget ran out after {len(workers)} of {planned} sections. "
        "Raising chat.research_token_budget to about "
    ) in outcome.text
    assert re.search(r"chat\.research_token_budget to about [\d,]+ would let the rest be read\.", outcome.text)
    assert "nothing to report" not in outcome.text
    assert events.streamed == outcome.text
    assert chat.store.messages(outcome.session_id)[-1].content == outcome.text


async def test_the_time_budget_bounds_section_analysis_and_the_final_answer_keeps_its_own_deadline(
    workspace, monkeypatch
):
    monkeypatch.setattr(clock_mod, "FINAL_TIMEOUT_S", 1.0)  # its own 120 s, shortened to keep the test quick
    model = StandInModel(n_ctx=2048)
    chat = make_chat(model, **{"chat.n_ctx": 2048, "chat.max_tokens": 256, "chat.research_time_budget": 2})
    model.queue(section_notes, Hang("half a note"), Hang("The answer that never ends"))
    with anyio.fail_after(20):  # a guard against a hang, not a measure: the deadlines are checked below
        outcome, events = await ask(chat, paste_of(400), workspace=workspace)
    first, second, final = model.requests
    # Research may use the budget less the final answer's 20% share; the final answer its own deadline.
    assert 1.0 <= first.timeout <= 1.6 and second.timeout <= first.timeout
    assert final.tools == [] and final.timeout == 1.0
    assert outcome.stop_reason == "time_budget"
    # Each hung request was ended by its deadline, and nothing else was asked: the reply lasts
    # research's share of the budget, then the final answer's own deadline.
    assert [request.ended for request in model.requests] == ["stop", "deadline", "deadline"]
    assert "the research time budget ran out after 1 of" in outcome.text
    assert re.search(r"Raising chat\.research_time_budget by about [\d,]+ s would let the rest be read\.", outcome.text)


async def test_a_model_that_never_answers_ends_the_reply_within_research_time_and_the_answers_deadline(
    model, workspace, monkeypatch
):
    monkeypatch.setattr(clock_mod, "FINAL_TIMEOUT_S", 0.5)
    chat = make_chat(model, **{"chat.research_time_budget": 2})
    model.queue(Hang("Thinking"), Hang("Still thinking"))
    with anyio.fail_after(20):  # a guard against a hang, not a measure: the deadlines are checked below
        outcome, _ = await ask(chat, "Which port does billing use?", workspace=workspace)
    coordinator, final = model.requests
    assert 1.0 <= coordinator.timeout <= 1.6  # 2 s less the final answer's share
    assert final.timeout == 0.5  # not what the budget left (0.4 s): the final answer's own deadline
    assert coordinator.ended == final.ended == "deadline"  # both cut by their deadlines, nothing more asked
    assert outcome.stop_reason == "time_budget" and outcome.text.strip()


async def test_notes_come_from_this_reply_only_never_from_earlier_replies(model, workspace):
    chat = make_chat(model, **{"chat.research_token_budget": 1024, "chat.max_tokens": 256})
    # The first reply reads billing's config and answers within its budget.
    model.queue(tool_turn(call("read_file", path="services/billing.yaml")), "Found it.")
    first, _ = await ask(chat, "Which port does billing use?", workspace=workspace)
    stored = chat.store.messages(first.session_id)
    assert any(m.role == "tool" and "port: 8101" in m.content for m in stored)
    # The second reply searches the docs until its budget stops it.
    rounds = [tool_turn(call("search", call_id=f"d{n}", query=f"rollout {n}")) for n in range(12)]

    def reply(request):
        return rounds.pop(0) if request.tools else "Rollouts take 5 minutes [1]."

    model.queue(*[reply] * 14)
    second, _ = await ask(chat, "How long do rollouts take?", workspace=workspace, session_id=first.session_id)
    assert second.stop_reason == "token_budget"
    final = model.requests[-1]
    assert final.tools == []
    notes = final.messages[-1].content.split("Research notes:\n", 1)[1]
    assert "Rollouts take 5 minutes" in notes
    assert "8101" not in notes and "billing.yaml" not in notes  # the earlier reply's read is not a note
    assert all("port: 8101" not in m.content for m in final.messages)


async def test_research_that_fills_the_context_is_answered_from_notes(model, workspace):
    (workspace / "big.log").write_text(
        "".join(f"{n:04d} gateway timeout on node-{n % 7}\n" for n in range(400)), encoding="utf-8"
    )
    model.n_ctx = 2048
    chat = make_chat(model, **{"chat.n_ctx": 2048, "chat.max_tokens": 768, "chat.analysis_workers": 0})

    def reply(request):
        if request.tools:
            return tool_turn(call("read_file", path="big.log"))
        return "Node timeouts fill the log [1]."

    model.queue(*[reply] * 4)
    outcome, events = await ask(chat, "What does big.log say?", workspace=workspace)
    assert outcome.stop_reason == "context_full"
    coordinator = [r for r in model.requests if r.tools]
    assert len(coordinator) == 1  # the second round did not fit beside the first one's result
    final = model.requests[-1]
    assert final.tools == [] and "0000 gateway timeout on node-0" in final.messages[-1].content
    assert outcome.text.startswith("Node timeouts fill the log [1].\n\nSources:\n[1] big.log")
    assert events.streamed == outcome.text


async def test_the_final_answer_has_its_own_120_seconds(model, workspace, monkeypatch):
    chat = make_chat(
        model, **{"chat.research_token_budget": 1280, "chat.max_tokens": 512, "chat.research_time_budget": 3600}
    )
    model.queue(*researcher(MANY_CALLS, "Billing listens on 8101 [1]."))
    await ask(chat, "Which port does billing use?", workspace=workspace)
    assert model.requests[-1].tools == [] and model.requests[-1].timeout == pytest.approx(120, abs=1)

    # A final turn that runs into that deadline keeps what it wrote and adds the findings.
    monkeypatch.setattr(clock_mod, "FINAL_TIMEOUT_S", 0.3)
    model.replies.clear()
    model.queue(*researcher(MANY_CALLS, Hang("Billing listens on")))
    with anyio.fail_after(20):
        outcome, events = await ask(chat, "Which port does billing use?", workspace=workspace)
    assert model.requests[-1].timeout == pytest.approx(0.3, abs=0.01)
    assert outcome.text.startswith("Billing listens on…\n\n(The answer was cut short. The strongest findings")
    assert events.streamed == outcome.text


async def test_a_final_turn_that_fails_after_a_paste_analysis_answers_from_the_pastes_notes():
    # The analysis of the user's own message is among the notes: a failed final turn lists its
    # findings (a section source of that message), never "the research found nothing".
    model = StandInModel(n_ctx=2048)
    chat = make_chat(model, **{"chat.research_token_budget": 3000, "chat.max_tokens": 256})
    paste = "".join(f"line {n}: service alpha{n} listens on port {9000 + n}\n" for n in range(400))

    def reply(request):
        if request.system.startswith(WORKER_SYSTEM_PROMPT[:40]):
            return "alpha7 listens on port 9007"
        raise ModelError("502 Bad Gateway")  # the final turn

    model.queue(*[reply] * 40)
    outcome, events = await ask(chat, paste)

    assert outcome.stop_reason == "token_budget"
    final = model.requests[-1]
    assert not final.tools and "(The research found nothing to note.)" not in final.text
    asked = final.messages[-1].content
    assert "Research notes:\n[1] notes on section 1 of " in asked and asked.count("alpha7 listens on port 9007") >= 1
    assert "Notes of worker" not in asked  # the question's notes come once, as notes
    assert outcome.text.startswith(
        "I couldn't write a full answer. The strongest findings of the research:\n- notes on section 1 of "
    )
    assert "nothing to report" not in outcome.text and events.streamed == outcome.text
    first = outcome.sources[0]
    assert (first.number, first.kind, first.message, first.path, first.cited) == (1, "section", 1, None, True)
    assert first.label.startswith("notes on section 1 of ") and first.label.endswith(" of message #1")
