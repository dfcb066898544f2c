"""``session_history``: a reply's ``conversation_history`` built from what the session's view had
not taken in for the last build, its outputs the same as a build over every earlier message."""

from __future__ import annotations

import pytest

from imprintd import session_view
from imprintd.context import history as history_mod
from imprintd.context.history import TOOL_NAME, ConversationHistory, HistoryError, session_history
from imprintd.messages import FIRST_LOOK_CALL_PREFIX, Message, ToolCall, assistant, system, tool_result, user
from imprintd.session_view import SessionView
from imprintd.store import Store
from imprintd.store.history_index import MemoryHistoryIndex, indexed_messages
from tests.helpers import ask, make_chat, tool_turn
from tests.standin import call

QUERIES = ("billing port", "retention policy", "Postgres", "gateway 8443", "start counselling", "call_1")


def conversation() -> list[Message]:
    """Turns with first looks, the model's own searches (one call id used in two turns, the
    second time for a lookback), a number missing and a system message: everything the build
    derives (numbering, neighbours, which call a result answers) is exercised."""
    out: list[Message] = [system("You are helpful.")]
    seq = 1
    for turn in range(14):
        question = f"Turn {turn}: where does billing listen, and what is the retention policy for gateway {turn}?"
        look = ToolCall(id=f"{FIRST_LOOK_CALL_PREFIX}{seq:08x}", name="search", arguments={"query": question})
        out += [
            user(question, seq=seq),
            assistant("", seq=seq + 1, tool_calls=(look,)),
            tool_result(look, f"[1] src/billing_{turn}.py:1-9\nbilling port {8100 + turn}", seq=seq + 2),
        ]
        seq += 3
        if turn in (3, 9):
            # The same id both times: the second time it is a lookback, so which call a result
            # answers depends on how far the history goes.
            name = "search" if turn == 3 else TOOL_NAME
            own = ToolCall(id="call_1", name=name, arguments={"query": f"retention policy {turn}"})
            out += [
                assistant("", seq=seq, tool_calls=(own,)),
                tool_result(own, f"docs/ops.md: logs kept {turn} days, Postgres {turn}", seq=seq + 1),
            ]
            seq += 2
        out.append(assistant(f"Billing listens on port {8100 + turn}; the gateway on 8443.", seq=seq))
        seq += 2 if turn == 6 else 1  # a number missing: the messages around it are not neighbours
    return out


def outputs(history: ConversationHistory, messages: list[Message]) -> list[object]:
    """Everything the tool answers: each query's search, and every message read by number."""
    out: list[object] = [len(history)]
    for query in QUERIES:
        found = history.search_places(query)
        out.append((found.text, found.places, found.blocks, found.heading))
    for seq in [m.seq for m in messages if m.seq is not None] + [999]:
        try:
            out.append(history.read(seq))
        except HistoryError as error:
            out.append(str(error))
    return out


@pytest.fixture
def taken(monkeypatch) -> list[int]:
    """A one-item list counting the messages histories take in (derive from) from now on."""
    count = [0]
    extend = history_mod._Derived.extend

    def counted(self, messages):
        messages = list(messages)
        count[0] += len(messages)
        return extend(self, messages)

    monkeypatch.setattr(history_mod._Derived, "extend", counted)
    return count


def stored(messages: list[Message]) -> list[Message]:
    """The conversation as a store holds it: numbered messages only."""
    return [m for m in messages if m.seq is not None]


def test_each_build_takes_in_only_new_messages_and_answers_as_a_fresh_build(taken):
    messages = stored(conversation())
    # The session's index holds every message, later ones too (as the store's does).
    index = MemoryHistoryIndex(indexed_messages(messages))
    view = SessionView("s1")
    built = []
    for end in range(1, len(messages) + 1, 5):
        view.extend(messages[:end])
        before = taken[0]
        built.append((session_history(view, (messages[end - 1].seq or 0) + 1, index), end))
        assert taken[0] - before == end - (end - 5 if end > 1 else 0)  # only the new messages
    # Asked after the session grew: each answers as a build over its own messages does (later
    # messages are not its own, the lookback made after it with the same call id included).
    for history, end in built:
        expected = outputs(ConversationHistory(messages[:end], index), messages[:end])
        assert outputs(history, messages[:end]) == expected
    # An earlier question's history, built after the view grew past it: only what came before it.
    before = taken[0]
    earlier = session_history(view, messages[6].seq or 0, index)
    assert taken[0] == before
    assert outputs(earlier, messages[:6]) == outputs(ConversationHistory(messages[:6], index), messages[:6])


def test_neighbours_are_joined_across_first_looks_but_not_across_a_missing_number():
    view = SessionView("s1")
    view.extend(stored(conversation()))
    text = session_history(view, 10**9).search("billing")
    # Turn 5's answer and turn 6's question, a look between them: printed together.
    assert "on 8443.\n#" in text.split("Turn 6:")[0][-80:]
    # Turn 6's answer and turn 7's question, a number missing between them: apart.
    assert "port 8106; the gateway on 8443.\n\n" in text


def test_a_session_made_again_under_its_id_is_derived_anew(isolated_dirs, taken):
    with Store.open() as db:
        db.create_session(session_id="s1")
        db.extend("s1", [m for m in conversation() if m.role != "system"][:20])
        session_history(db.view("s1"), 10**9)
        db.delete_session("s1")
        db.create_session(session_id="s1")
        again = db.extend("s1", [user("Only this: the gateway listens on 8443.")])
        before = taken[0]
        history = session_history(db.view("s1"), 10**9, db.history_index("s1"))
        assert taken[0] - before == 1
        assert outputs(history, again) == outputs(ConversationHistory(again, db.history_index("s1")), again)


def test_views_past_the_limit_go_least_recently_read_first_with_their_histories(isolated_dirs, taken, monkeypatch):
    messages = [m for m in conversation() if m.role != "system"]
    size = sum(map(session_view.message_bytes, messages))
    monkeypatch.setattr(session_view, "SESSION_VIEW_BYTES", 2 * size)  # room for two sessions
    with Store.open() as db:
        for session_id in ("a", "b", "c"):
            db.create_session(session_id=session_id)
            db.extend(session_id, messages)
            session_history(db.view(session_id), 10**9)
        before = taken[0]
        session_history(db.view("c"), 10**9)
        session_history(db.view("b"), 10**9)
        assert taken[0] == before  # the two most recent are kept
        session_history(db.view("a"), 10**9)
        assert taken[0] - before == len(messages)  # the oldest went


async def test_a_later_reply_s_history_takes_in_only_what_was_stored_since(model, taken):
    chat = make_chat(model)
    model.queue("Noted.", "Noted.")
    first, _ = await ask(chat, "Billing listens on port 8101, remember that.")
    await ask(chat, "And the gateway on 8443.", first.session_id)
    model.queue(tool_turn(call("conversation_history", query="billing port")), "Port 8101.")
    await ask(chat, "Which port did I give for billing?", first.session_id)
    assert taken[0] == 5  # the four earlier messages, and the question (stored first; not shown)
    model.queue(tool_turn(call("conversation_history", query="gateway")), "8443.")
    await ask(chat, "And the gateway?", first.session_id)
    # Only what was stored since: the last call, its result, the answer and the new question.
    assert taken[0] == 5 + 4
    looked_back = model.requests[-1].messages[-1]
    assert looked_back.role == "tool" and "8443" in looked_back.content
