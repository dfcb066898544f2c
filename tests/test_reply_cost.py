"""What a reply does not do unless it is needed: work that reads the whole session each reply.

A reply's cost should not grow with the session for what the reply does not use (the
first look's replay, docs/decisions.md "First look"). With the stand-in model.
"""

from __future__ import annotations

from imprintd import reply as reply_mod
from imprintd.context.history import session_history
from tests.helpers import ask, make_chat, tool_turn
from tests.standin import call


async def test_the_history_is_read_for_the_history_tool_only_when_the_model_calls_it(model, monkeypatch):
    built: list[int] = []

    def counted(view, before, index=None):
        history = session_history(view, before, index)
        built.append(len(history))
        return history

    monkeypatch.setattr(reply_mod, "session_history", counted)
    chat = make_chat(model)
    model.queue("Billing listens on port 8101.", "Noted.")
    first, _ = await ask(chat, "Billing listens on port 8101, remember that.")
    await ask(chat, "And the gateway on 8443.", first.session_id)
    assert built == []  # two replies, neither looked back: the session was not read for it

    model.queue(tool_turn(call("conversation_history", query="billing port")), "Port 8101.")
    await ask(chat, "Which port did I give for billing?", first.session_id)
    assert built == [4]  # built once, on the call, from the four earlier messages
    looked_back = model.requests[-1].messages[-1]
    assert looked_back.role == "tool" and "8101" in looked_back.content  # and it answered the call
