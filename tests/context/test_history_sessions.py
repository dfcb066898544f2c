"""``SessionHistories``: a reply's ``conversation_history`` built from what the session's last
build had not seen, its outputs the same as a build over every earlier message."""

from __future__ import annotations

from imprintd import reply as reply_mod
from imprintd.context.history import TOOL_NAME, ConversationHistory, HistoryError, SessionHistories
from imprintd.messages import FIRST_LOOK_CALL_PREFIX, Message, ToolCall, assistant, system, tool_result, user
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


def test_each_build_takes_in_only_new_messages_and_answers_as_a_fresh_build():
    messages = conversation()
    # The session's index holds every message, later ones too (as the store's does).
    index = MemoryHistoryIndex(indexed_messages(messages))
    histories = SessionHistories()
    built = []
    for end in range(1, len(messages) + 1, 5):
        before = histories.taken
        built.append((histories.history("s1", messages[:end], index), end))
        assert histories.taken - before == end - (end - 5 if end > 1 else 0)  # only the new messages
    # Asked after the session grew: each answers as a build over its own messages does (later
    # messages are not its own, the lookback made after it with the same call id included).
    for history, end in built:
        expected = outputs(ConversationHistory(messages[:end], index), messages[:end])
        assert outputs(history, messages[:end]) == expected


def test_neighbours_are_joined_across_first_looks_but_not_across_a_missing_number():
    messages = conversation()
    history = SessionHistories().history("s1", messages)
    text = history.search("billing")
    # Turn 5's answer and turn 6's question, a look between them: printed together.
    assert "on 8443.\n#" in text.split("Turn 6:")[0][-80:]
    # Turn 6's answer and turn 7's question, a number missing between them: apart.
    assert "port 8106; the gateway on 8443.\n\n" in text


def test_a_session_read_afresh_or_made_again_is_derived_anew():
    messages = conversation()
    histories = SessionHistories()
    histories.history("s1", messages[:20])
    # Made again under the same id: other message objects, other words.
    again = [user("Only this: the gateway listens on 8443.", seq=1)]
    assert outputs(histories.history("s1", again), again) == outputs(ConversationHistory(again), again)
    # The same messages decoded again are new objects: taken in again, not trusted by equality.
    copies = [Message(**{f: getattr(m, f) for f in m.__struct_fields__}) for m in messages]
    before = histories.taken
    history = histories.history("s1", copies)
    assert histories.taken - before == len(copies)
    assert outputs(history, copies) == outputs(ConversationHistory(messages), messages)
    # A shorter list than what was taken in (not a continuation) is built afresh too.
    assert outputs(histories.history("s1", messages[:7]), messages[:7]) == outputs(
        ConversationHistory(messages[:7]), messages[:7]
    )


def test_at_most_the_given_number_of_sessions_is_kept():
    messages = conversation()
    histories = SessionHistories(sessions=2)
    for session_id in ("a", "b", "c"):
        histories.history(session_id, messages)
    before = histories.taken
    histories.history("c", messages)
    histories.history("b", messages)
    assert histories.taken == before  # the two most recent are kept
    histories.history("a", messages)
    assert histories.taken - before == len(messages)  # the oldest went


async def test_a_later_reply_s_history_takes_in_only_what_was_stored_since(model, monkeypatch):
    histories = SessionHistories()
    monkeypatch.setattr(reply_mod, "SESSION_HISTORIES", histories)
    chat = make_chat(model)
    model.queue("Noted.", "Noted.")
    first, _ = await ask(chat, "Billing listens on port 8101, remember that.")
    await ask(chat, "And the gateway on 8443.", first.session_id)
    model.queue(tool_turn(call("conversation_history", query="billing port")), "Port 8101.")
    await ask(chat, "Which port did I give for billing?", first.session_id)
    assert histories.taken == 4  # the four earlier messages
    model.queue(tool_turn(call("conversation_history", query="gateway")), "8443.")
    await ask(chat, "And the gateway?", first.session_id)
    # Only what was stored since: the last question, its call, the call's result and the answer.
    assert histories.taken == 8
    looked_back = model.requests[-1].messages[-1]
    assert looked_back.role == "tool" and "8443" in looked_back.content
