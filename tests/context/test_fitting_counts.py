"""Fitting a long session counts each earlier message once per reply, not once per pass.

Fitting counts the prompt whole, then each message, then the kept prompt again, every round of
every reply; the remote model's estimates are cached by what they read (``Model.count_message``:
"cached, cheap to call repeatedly"), so a history read again (new objects, the same text) is
estimated only for what is new, and the figures are the ones the uncached estimate gives.
"""

from __future__ import annotations

import msgspec

from imprintd.context.fitting import fit_prompt
from imprintd.messages import Message, ToolCall, assistant, system, tool_result, user
from imprintd.models.remote import RemoteModel
from imprintd.models.remote_counts import PROMPT_OVERHEAD
from imprintd.session_view import SessionView


def research_session(replies: int) -> list[Message]:
    history: list[Message] = []
    for number in range(replies):
        call = ToolCall(id=f"call_{number}", name="search", arguments={"query": f"billing port {number}"})
        history += [
            user(f"Which port does service {number} use?"),
            assistant("", tool_calls=(call,)),
            tool_result(call, f"services/{number}.yaml:3: port: {8000 + number}\n" + "filler line\n" * 300),
            assistant(f"Port {8000 + number}."),
        ]
    return [msgspec.structs.replace(m, seq=seq) for seq, m in enumerate(history, 1)]


class Counting(RemoteModel):
    """The remote model, counting how many messages it estimated (cache misses)."""

    estimated = 0

    @staticmethod
    def _estimate(message: Message) -> int:
        Counting.estimated += 1
        return RemoteModel._estimate(message)


def test_a_long_session_is_estimated_once_per_message_and_again_only_for_what_is_new():
    model = Counting("http://127.0.0.1:9/v1", "stub", n_ctx=8192)
    history = research_session(60)
    prompt = {"system": system("You answer questions about services."), "max_tokens": 1024}
    Counting.estimated = 0
    fitted = fit_prompt(model, history=history, current=[user("And service 7?")], **prompt)
    assert fitted.dropped_tool_exchanges > 0 and fitted.measurements >= 3  # counted in several passes
    assert Counting.estimated == len(history) + 2  # each message once, the system and the question too

    # The next reply reads the session again (new objects, the same text) and adds an exchange.
    again = [msgspec.json.decode(msgspec.json.encode(m), type=Message) for m in research_session(61)]
    Counting.estimated = 0
    refitted = fit_prompt(model, history=again, current=[user("And service 8?")], **prompt)
    assert Counting.estimated == 4 + 1  # the new exchange and the new question

    # The figures are the uncached estimate's.
    fresh = RemoteModel("http://127.0.0.1:9/v1", "stub", n_ctx=8192)
    assert (
        refitted.prompt_tokens
        == fresh.count_prompt(refitted.messages)
        == PROMPT_OVERHEAD + sum(RemoteModel._estimate(m) for m in refitted.messages)
    )


class Asked(RemoteModel):
    """The remote model, recording each message it was asked to count alone (its whole-prompt
    counts add up the messages' counts: those are not recorded)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.asked: list[int | None] = []
        self._in_prompt = False

    def count_message(self, message: Message) -> int:
        if not self._in_prompt:
            self.asked.append(message.seq)
        return super().count_message(message)

    def count_prompt(self, messages, tools=()) -> int:
        self._in_prompt = True
        try:
            return super().count_prompt(messages, tools)
        finally:
            self._in_prompt = False


def test_a_grown_history_is_counted_message_by_message_only_for_what_is_new():
    model = Asked("http://127.0.0.1:9/v1", "stub", n_ctx=8192)
    session = research_session(61)
    view = SessionView("s1")
    prompt = {"system": system("You answer questions about services."), "max_tokens": 1024}

    def fit(history: list[Message], model: Asked = model, view: SessionView | None = view):
        if view is not None:
            view.extend(history)
        model.asked.clear()
        return fit_prompt(model, history=history, current=[user("And service 7?")], view=view, **prompt)

    first = fit(session[:240])
    assert first.dropped_tool_exchanges > 0 and model.asked == list(range(1, 241))
    # The next reply: the view has one more exchange; only that is counted message by message.
    grown = fit(session)
    assert model.asked == [241, 242, 243, 244]
    # And it fits as a fit that counts every message does (another model: nothing kept for it).
    other = Asked("http://127.0.0.1:9/v1", "stub", n_ctx=8192)
    assert fit(session, other) == grown and other.asked == list(range(1, 245))
    # Without a view each fit counts every message, and fits the same.
    assert fit(session, view=None) == grown and model.asked == list(range(1, 245))
    # A shorter history that begins the same (the reply before, fitted again) is counted from
    # what is kept.
    assert fit(session[:240], other) == first and other.asked == []
    # A history that begins later (a summary moved on) is counted anew, from where it begins.
    fit(session[8:], other)
    assert other.asked == list(range(9, 245))


def test_what_is_kept_between_fits_is_what_the_history_gives_afresh():
    from imprintd.context import fitting

    model = RemoteModel("http://127.0.0.1:9/v1", "stub", n_ctx=8192)
    session = research_session(6)
    repeated = ToolCall(id="call_1", name="search", arguments={"query": "again"})  # an id used before
    orphan = ToolCall(id="call_gone", name="read_file", arguments={"path": "a.py"})  # its call cut
    session = [
        assistant("Carried over from before the summary."),
        tool_result(orphan, "a.py: 1 line"),
        *session[:12],
        assistant("", tool_calls=(repeated,)),
        *session[12:],
        tool_result(repeated, "again: nothing"),
        user("Last one?"),
    ]
    session = [msgspec.structs.replace(m, seq=seq) for seq, m in enumerate(session, 1)]
    view = SessionView("s1")
    view.extend(session)
    for end in (*range(1, len(session) + 1), 5, len(session)):  # growing, then shorter, then again
        history = session[:end]
        measured = fitting._measured(model, history, view)
        counts = [model.count_message(m) for m in history]
        research = {index for piece in fitting.research_pieces(history) for index in piece}
        assert measured.counts == counts
        assert measured.starts == [sum(counts[:i]) for i in range(end + 1)]
        assert measured.spoken == [
            sum(c for j, c in enumerate(counts[:i]) if j not in research) for i in range(end + 1)
        ]
        assert [list(p) for p in measured.research] == fitting.research_pieces(history)
        assert [list(p) for p in measured.exchanges] == fitting.exchange_pieces(history)
