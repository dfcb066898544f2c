"""What a reply reads of its session (``reply.read_session``): only what its prompt can use.

A session with a running summary: the reply reads the messages after the summary's range and,
of that range, only what the summary's covered material names; the prompt is the one the whole
session would give, message for message (so token for token), with the same layout.
"""

from __future__ import annotations

import contextlib

import msgspec
import pytest

from imprintd import messages as msg
from imprintd.messages import FIRST_LOOK_CALL_PREFIX, ToolCall
from imprintd.reply import _tool_lines, compose_prompt, read_session
from imprintd.store import ConversationStore, MemoryStore, Store, StoredSummary
from tests.helpers import ask, make_chat
from tests.standin import StandInModel

COVERED = 12


def long_session(store: ConversationStore) -> str:
    """Twelve covered messages (a paste, a first look, a search of the model's own), then four more."""
    session = store.create_session()
    look = ToolCall(id=f"{FIRST_LOOK_CALL_PREFIX}_1", name="search", arguments={"query": "billing port"})
    own = ToolCall(id="call_1", name="search", arguments={"query": "billing port"})
    store.extend(
        session.id,
        [
            msg.user("services:\n" + "  billing: {port: 8101}\n" * 80),  # 1: a paste
            msg.assistant("That is the staging compose file."),
            msg.user("What port does billing use?"),
            msg.assistant("", tool_calls=(look,)),
            msg.tool_result(look, "[1] compose.yaml:2 billing: {port: 8101}"),
            msg.assistant("", tool_calls=(own,)),
            msg.tool_result(own, "[2] compose.yaml:3 billing: {port: 8101}"),
            msg.assistant("8101 [2]."),
            msg.user("And replicas?"),
            msg.assistant("Two."),
            msg.user("Thanks."),
            msg.assistant("You're welcome."),  # 12: the summary covers up to here
            msg.user("What goes in front of the gateway?"),
            msg.assistant("Traefik, next sprint."),
            msg.user("Which version?"),
            msg.assistant("3.1."),
        ],
    )
    store.save_summary(
        session.id,
        StoredSummary(
            text="- (#1–#12) The user pasted the compose file; billing is on 8101.", first_seq=1, last_seq=12
        ),
    )
    return session.id


def composed(prompt):
    """``compose_prompt``'s result with the layout's earlier numbers as a tuple: a reply passes
    them as a ``range`` (the whole session, in one step), a list of messages gives a tuple."""
    system, history, layout = prompt
    return system, history, msgspec.structs.replace(layout, earlier=tuple(layout.earlier))


@pytest.mark.parametrize("persist", [True, False])
def test_the_prompt_from_what_a_reply_reads_is_the_one_from_the_whole_session(persist):
    with Store.open() if persist else contextlib.nullcontext(MemoryStore()) as store:
        sid = long_session(store)
        question = store.append(sid, msg.user("Is that still the plan?"))
        state, earlier, seqs = read_session(store, sid, question)
        whole = [m for m in store.messages(sid) if m.seq < question.seq]
        for workspace in (False, True):
            lines = _tool_lines(workspace=workspace)
            cut = composed(compose_prompt("written", lines, state, earlier, seqs=seqs))
            full = composed(compose_prompt("written", lines, state, whole))
            assert cut == full
        system, history, _layout = full
        assert "#1 pasted by the user (" in system.content and "#7 tool result: " in system.content
        assert [m.seq for m in history] == [13, 14, 15, 16]
        # Of the covered range, only the paste, the model's own call and its result were read (not
        # the first look's call or result).
        assert [m.seq for m in earlier] == [1, 6, 7, 13, 14, 15, 16]


async def test_a_reply_asks_the_store_only_for_what_the_summary_does_not_cover(monkeypatch):
    model = StandInModel()
    model.replies[:] = ["Yes."]
    chat = make_chat(model)
    store = chat.store
    sid = long_session(store)
    whole = store.messages(sid)
    asked: list[int] = []
    reads = store.messages

    def messages(session_id: str, *, after: int = 0):
        asked.append(after)
        return reads(session_id, after=after)

    monkeypatch.setattr(store, "messages", messages)
    outcome, _events = await ask(chat, "Is that still the plan?", sid)
    assert outcome.text == "Yes."
    assert asked == [COVERED]  # never the whole session
    [request] = model.requests
    state = store.summary(sid)
    system, history, _layout = compose_prompt("written", _tool_lines(workspace=False), state, whole)
    assert request.messages == [system, *history, request.messages[-1]]
    assert request.messages[-1].content == "Is that still the plan?"


def test_what_a_reply_decodes_does_not_grow_with_the_uncovered_first_looks(monkeypatch):
    """Uncovered tool exchanges (a first look every reply) pile up until a summary covers them:
    each reply decodes only what was stored since the last, and composes the same prompt."""
    from imprintd.store import database as store_module

    decoded = [0]
    decode = store_module._message_from_row

    def counted(row: tuple) -> msg.Message:
        decoded[0] += 1
        return decode(row)

    monkeypatch.setattr(store_module, "_message_from_row", counted)
    with Store.open() as store:
        sid = long_session(store)
        lines = _tool_lines(workspace=True)
        for turn in range(1, 31):
            look = ToolCall(id=f"{FIRST_LOOK_CALL_PREFIX}_{turn}", name="search", arguments={"query": f"q {turn}"})
            question = store.extend(
                sid,
                [
                    msg.user(f"question {turn}"),
                    msg.assistant("", tool_calls=(look,)),
                    msg.tool_result(look, f"[1] notes.md:{turn} line {turn}"),
                    msg.assistant(f"answer {turn}"),
                    msg.user(f"question {turn + 1}"),
                ],
            )[-1]
            before = decoded[0]
            state, earlier, seqs = read_session(store, sid, question)
            # The six new messages (the first read decodes the session once).
            assert decoded[0] - before <= (6 if turn > 1 else 16 + 5)
            whole = [m for m in store.messages(sid) if m.seq < question.seq]
            assert composed(compose_prompt("written", lines, state, earlier, seqs=seqs)) == composed(
                compose_prompt("written", lines, state, whole)
            )
            store.extend(sid, [msg.assistant(f"answer {turn + 1}")])
