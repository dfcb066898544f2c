"""Fitting a prompt to the model's context (docs/decisions.md, "Fitting").

When the system prompt, tool schemas, earlier history, the current turn and the output
allowance do not fit ``model.n_ctx``, earlier history goes a block at a time, at fixed drop
points, measured where each piece starts in cached per-message tokens. Those places stay put
while the conversation grows (it only appends), so after a drop the next replies only append
to the prompt and the model's saved state or prefix cache serves all but the new tokens (this
departs from the first rule's "only as much as must": up to a step more goes):

1. earlier turns' tool exchanges (an assistant tool-call message, its own text included,
   together with all its tool results, matched by ``tool_call_id``): those starting before the
   first point at which the rest fits go, oldest block first. The points are multiples of
   three quarters of the room history has beside the system prompt and tools
   (``research_step``), counted in the whole history: a drop re-evaluates the tool exchanges
   kept after it, so points this far apart leave few of them, and come seldom;
2. then whole earlier exchanges, each from its user question up to the next one, so the kept
   history still starts with a question and no tool result is orphaned: those starting before
   the first point at which the rest fits. These points are multiples of half that room
   (``drop_step``), counted in the conversation's own tokens (the questions and answers: every
   tool exchange is gone by then), so they are as far apart in what the prompt holds;
3. if the current turn alone is still too big, ``fits`` is False and the caller sends the
   current turn's oversized input or evidence to section analysis.

The order stands: no whole exchange goes while a tool exchange is left. The current turn
is never dropped and the inputs are never changed (stored sessions and their replay stay as
they are). The cost is bounded: "fitting measures the prompt once per removed piece, at
most once per earlier message". Here the exact count is taken once at the start, and the system
prompt and tools once for the step; each removal subtracts the model's cached per-message
counts, and one exact count confirms the result when the running total says it fits (if the
exact count disagrees and the prompt is still over, removal goes on from the exact figure).
Per-message counts can also be pessimistic (a real template's joins add less than a message
counted alone), so the running total may ask for more tool exchanges to go than needed: when
no whole exchange had to go and an exact count came in under the running total, the block of
tool exchanges removed last is put back, newest first, while the exact count says it fits (a
block, so the kept history still ends on a drop point). So ``measurements`` is at most the
number of removed pieces plus the pieces put back plus four, and usually three.

What a fit derives from the history (per-message counts, where each message starts, the tool
exchanges and whole exchanges) is kept with the session's view when the caller gives one
(``view``, ``session_view.py``), found by the messages' numbers: a session's history is the same
stored messages reply after reply with new ones appended, so a fit goes over only the messages
the last fit of that history had not; the exact counts still go over the whole prompt. A history
that begins at another message (the summary moved on) or another model is derived anew, and
without a view each fit derives it; the figures are the model's own either way.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import msgspec

from imprintd.messages import Message, ToolSpec
from imprintd.models.base import Model
from imprintd.session_view import SessionView

__all__ = ["Fitted", "fit_prompt", "research_pieces", "exchange_pieces"]


class Fitted(msgspec.Struct, frozen=True, kw_only=True):
    """What to send: the fitted messages and what fitting did to get there."""

    #: The system message, the kept history and the current turn, in order.
    messages: list[Message]
    #: The exact ``count_prompt`` of ``messages`` with the tools.
    prompt_tokens: int
    #: ``prompt_tokens + max_tokens <= model.n_ctx``.
    fits: bool
    #: Earlier tool exchanges removed (step 1).
    dropped_tool_exchanges: int
    #: Whole earlier exchanges removed (step 2).
    dropped_exchanges: int
    #: How many exact ``count_prompt`` calls fitting made.
    measurements: int
    #: Pieces removed and then put back because the exact count had room for them.
    restored: int = 0


def research_pieces(history: Sequence[Message]) -> list[list[int]]:
    """Indexes of ``history``'s tool exchanges, one list per piece, oldest first (``Pieces``)."""
    pieces = Pieces()
    for message in history:
        pieces.add(message)
    return [list(piece) for piece in pieces.research.values()]


def exchange_pieces(history: Sequence[Message]) -> list[list[int]]:
    """Indexes of ``history``'s whole exchanges, oldest first (``Pieces``)."""
    pieces = Pieces()
    for message in history:
        pieces.add(message)
    return [list(piece) for piece in pieces.exchanges]


@dataclass
class Pieces:
    """What fitting removes by, taken in one message at a time (so a session's view extends it with
    new messages only): the rules of both kinds of piece, stated once.

    A research piece (``research``, by its first index, oldest first) is an assistant message with
    tool calls plus every later tool result that answers one of its calls. A tool result whose call
    is not in the history (its call was cut earlier, e.g. by a summary) is earlier research too,
    and goes as a piece of its own.

    An exchange (``exchanges``) goes from a user question up to, not including, the next user
    question. Messages before the first question (what is left after a summary cut) form the first
    piece, so that after any removal the history starts with a question.
    """

    taken: int = 0
    research: dict[int, tuple[int, ...]] = field(default_factory=dict)
    exchanges: list[tuple[int, ...]] = field(default_factory=list)
    owner: dict[str, int] = field(default_factory=dict)  # call id -> index of the message that made it

    def add(self, message: Message) -> bool:
        """Place the next message; whether it is research (a call or a tool result)."""
        index = self.taken
        self.taken += 1
        research = message.role == "tool"
        if message.role == "assistant" and message.tool_calls:
            research = True
            self.research[index] = (index,)
            # Ids can repeat across turns ("call_1" every time); a later call takes the id over.
            for call in message.tool_calls:
                self.owner[call.id] = index
        elif message.role == "tool":
            first = self.owner.get(message.tool_call_id) if message.tool_call_id is not None else None
            if first is None:
                self.research[index] = (index,)
            else:
                self.research[first] = (*self.research[first], index)
        if message.role == "user" or not self.exchanges:
            self.exchanges.append((index,))
        else:
            self.exchanges[-1] = (*self.exchanges[-1], index)
        return research


def fit_prompt(
    model: Model,
    *,
    system: Message,
    history: Sequence[Message],
    current: Sequence[Message],
    tools: Sequence[ToolSpec] = (),
    max_tokens: int,
    view: SessionView | None = None,
) -> Fitted:
    """Fit ``system + history + current`` (with ``tools`` and ``max_tokens``) to ``model.n_ctx``.

    ``history`` is the conversation before the current question; ``current`` is the
    current question followed by this reply's own tool exchanges so far. Only ``history``
    is ever shortened. ``view``: the session's, whose stored messages ``history`` is a run of;
    what is derived from them is kept with it. Synchronous: it counts, it does not generate.
    """
    limit = model.n_ctx - max_tokens
    kept = [True] * len(history)
    measurements = 0

    def measure() -> int:
        nonlocal measurements
        measurements += 1
        return model.count_prompt(_assemble(system, history, kept, current), tools)

    total = measure()
    dropped = {"research": 0, "exchange": 0}
    restored = 0
    if total > limit:
        measurements += 1  # the system prompt and tools, counted once for both steps
        step = drop_step(model, system, tools, limit)
        # Cached per-message counts keep a long session cheap; exact counts confirm.
        measured = _measured(model, history, view)
        counts = measured.counts
        total, dropped["research"], restored, pessimistic = _drop_research(
            measured.research, kept, counts, measured.starts, research_step(step), limit, total, measure
        )
        if total > limit:
            # Step 2 runs only once every tool exchange is gone: its places are counted in the
            # conversation's own tokens (``spoken``), which is what the kept history holds by then.
            total, dropped["exchange"] = _drop_exchanges(
                measured.exchanges, kept, counts, measured.spoken, step, limit, total, measure, pessimistic
            )
    return Fitted(
        messages=_assemble(system, history, kept, current),
        prompt_tokens=total,
        fits=total <= limit,
        dropped_tool_exchanges=dropped["research"],
        dropped_exchanges=dropped["exchange"],
        measurements=measurements,
        restored=restored,
    )


def drop_step(model: Model, system: Message, tools: Sequence[ToolSpec], limit: int) -> int:
    """Tokens of history between two drop points: half the room history has beside the
    system prompt and tools (at least one token)."""
    return max(1, (limit - model.count_prompt([system], tools)) // 2)


def research_step(step: int) -> int:
    """Tokens of history between two of step 1's drop points: one and a half ``step``s, three
    quarters of the room beside the system prompt and tools (at least one token).

    A drop re-evaluates everything kept after the first piece it removes: the tool exchanges
    that start past the point. Points further apart leave less of them after each drop, and
    the drops come less often; half the room left about two thirds of the prompt to evaluate
    again every second reply of a workspace session (docs/decisions.md, "Fitting").
    """
    return max(1, step * 3 // 2)


def _drop_research(
    pieces: Sequence[Sequence[int]],
    kept: list[bool],
    counts: Sequence[int],
    starts: Sequence[int],
    step: int,
    limit: int,
    total: int,
    measure: Callable[[], int],
) -> tuple[int, int, int, bool]:
    """Step 1: drop earlier tool exchanges in blocks between fixed drop points.

    Returns (total, tool exchanges dropped, put back, whether counts proved pessimistic). Block k
    holds the tool exchanges that start in the history between drop points k-1 and k (multiples
    of ``step``, ``research_step``): blocks go oldest first until the rest fits, so the kept history changes
    only where a point is passed, and the replies in between only append to the prompt. When an
    exact count comes in under the running total, the block removed last is put back while it
    fits (a block, not a piece: the boundary stays on a point). ``total`` is exact on return
    unless nothing was dropped.
    """
    removed: list[tuple[list[int], int]] = []  # each block removed: its indexes and its pieces
    dropped, next_piece, exact, pessimistic = 0, 0, True, False
    while total > limit and next_piece < len(pieces):
        point = (starts[pieces[next_piece][0]] // step + 1) * step
        block: list[int] = []
        first_piece = next_piece
        while next_piece < len(pieces) and starts[pieces[next_piece][0]] < point:
            block.extend(pieces[next_piece])
            next_piece += 1
        for index in block:
            kept[index] = False
        dropped += next_piece - first_piece
        removed.append((block, next_piece - first_piece))
        total -= sum(counts[index] for index in block)
        exact = False
        if total <= limit:
            estimate, total, exact = total, measure(), True
            pessimistic = pessimistic or total < estimate
    if not exact:
        estimate, total = total, measure()
        pessimistic = pessimistic or total < estimate
    restored = 0
    while total <= limit and pessimistic and len(removed) > 0:
        # Put back the block removed last while it fits: the history is then what removal
        # would have left had it stopped one point earlier, so it stays well formed.
        block, count = removed[-1]
        for index in block:
            kept[index] = True
        with_it = measure()
        if with_it > limit:
            for index in block:
                kept[index] = False
            break
        removed.pop()
        dropped -= count
        restored += count
        total = with_it
    return total, dropped, restored, pessimistic


def _drop_exchanges(
    pieces: Sequence[Sequence[int]],
    kept: list[bool],
    counts: Sequence[int],
    starts: Sequence[int],
    step: int,
    limit: int,
    total: int,
    measure: Callable[[], int],
    pessimistic: bool,
) -> tuple[int, int]:
    """Step 2: drop whole exchanges at fixed drop points; returns (exact total, exchanges dropped).

    An exchange's place is where it starts (``starts``: in the conversation's own cached
    per-message tokens, tool exchanges left out, since step 1 removed them all before this
    runs), which later replies do not change (they only append). Drop point k is k times ``step``:
    the exchanges starting before the first point at which the rest fits go. The point stays
    put while the conversation grows, so the replies after a drop only append to the prompt
    (and llama.cpp, or a remote server's prefix cache, evaluates only what is new) until the
    conversation has grown by about a step again. Where the next point would leave no earlier
    exchange at all (the current turn fills the context), they go one at a time instead.
    """
    # ``pieces``: ``exchange_pieces``, oldest first, so their starts increase.
    dropped, next_piece, exact = 0, 0, True
    while total > limit and next_piece < len(pieces):
        # The first drop point past the oldest exchange still kept.
        point = (starts[pieces[next_piece][0]] // step + 1) * step
        one_at_a_time = starts[pieces[-1][0]] < point
        while next_piece < len(pieces) and starts[pieces[next_piece][0]] < point:
            live = [index for index in pieces[next_piece] if kept[index]]
            for index in live:
                kept[index] = False
            if live:
                dropped += 1
                total -= sum(counts[index] for index in live)
                exact = False
            next_piece += 1
            if one_at_a_time and pessimistic and not exact:
                # The running total may not fall to the limit: each removal is confirmed (one
                # exact count per removed piece, the bound).
                total, exact = measure(), True
            if one_at_a_time and total <= limit:
                # The point would take every earlier exchange: a current turn that fills the
                # context (a long paste) keeps what fits of the newest ones instead.
                break
        # Pessimistic per-message counts would carry removal past the point that fits: then
        # every point is confirmed by an exact count.
        if not exact and (total <= limit or pessimistic):
            estimate, total, exact = total, measure(), True
            pessimistic = pessimistic or total < estimate
    if not exact:
        total = measure()
    return total, dropped


@dataclass
class _Measured:
    """What fitting derives from one history with one model: each message's count, where each
    starts (``starts``; in the conversation's own tokens, tool exchanges left out: ``spoken``; both
    one longer than ``counts``), and ``research_pieces`` and ``exchange_pieces`` (as tuples)."""

    counts: list[int]
    starts: list[int]
    spoken: list[int]
    research: list[tuple[int, ...]]
    exchanges: list[tuple[int, ...]]


@dataclass
class _Counted:
    """``_Measured`` for the messages taken in so far, extended with new ones only."""

    model: weakref.ref[Model]
    messages: list[Message] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    starts: list[int] = field(default_factory=lambda: [0])
    spoken: list[int] = field(default_factory=lambda: [0])
    pieces: Pieces = field(default_factory=Pieces)

    def extend(self, model: Model, messages: Sequence[Message]) -> None:
        for message in messages:
            count = model.count_message(message)
            self.messages.append(message)
            self.counts.append(count)
            self.starts.append(self.starts[-1] + count)
            research = self.pieces.add(message)
            self.spoken.append(self.spoken[-1] + (0 if research else max(0, count)))

    def measured(self, size: int) -> _Measured:
        """For the first ``size`` messages (all of them, or fewer: then the pieces anew)."""
        if size == len(self.messages):
            research, exchanges = list(self.pieces.research.values()), list(self.pieces.exchanges)
        else:
            history = self.messages[:size]
            research = [tuple(piece) for piece in research_pieces(history)]
            exchanges = [tuple(piece) for piece in exchange_pieces(history)]
        return _Measured(self.counts[:size], self.starts[: size + 1], self.spoken[: size + 1], research, exchanges)


@dataclass
class _Fitting:
    """What fitting keeps with a session's view: the derivation of the history fitted last (one
    model's, beginning at one message), and the lock a fit extends it under."""

    counted: _Counted | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def _measured(model: Model, history: Sequence[Message], view: SessionView | None) -> _Measured:
    """``history``'s counts, starts and pieces by ``model``: what ``view`` keeps of them, extended
    with the messages it has not counted; derived anew without a view, or when the history is not
    the run of stored messages the kept one began (another model's, or one the summary moved past)."""
    if not history:
        return _Measured([], [0], [0], [], [])
    if view is None or any(message.seq is None for message in history):
        counted = _Counted(weakref.ref(model))
        counted.extend(model, history)
        return counted.measured(len(history))
    fitting = view.derived("fitting", _Fitting)
    with fitting.lock:  # counting may tokenize: only fits of this session wait on it
        kept = fitting.counted
        if kept is None or kept.model() is not model or not _continues(kept.messages, history):
            kept = fitting.counted = _Counted(weakref.ref(model))
        kept.extend(model, history[len(kept.messages) :])
        return kept.measured(len(history))


def _continues(taken: Sequence[Message], history: Sequence[Message]) -> bool:
    """Whether ``history`` is the stored messages ``taken`` holds, or begins with them, or with
    all but those after its end: the same numbers (a stored message never changes)."""
    return all(a.seq == b.seq for a, b in zip(taken, history, strict=False))


def _assemble(
    system: Message, history: Sequence[Message], kept: Sequence[bool], current: Sequence[Message]
) -> list[Message]:
    """A new list: the system message, the kept history in order, then the current turn."""
    return [system, *(message for message, keep in zip(history, kept, strict=True) if keep), *current]
