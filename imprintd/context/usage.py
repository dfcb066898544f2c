"""What fills the context: a fitted prompt's tokens by part, and which messages it holds.

A client asks "does it still see my paste?"; this answers from the prompt the model is sent
(``context/fitting.py``), counted by the model itself (``exact`` for a local model's tokenizer,
the UTF-8-byte estimate for a remote one). Each part is what adding it to the prompt adds, so
the parts add up to ``used``, the prompt's tokens with the tool schemas:

- ``system``: the system prompt without the summary (the chat template's framing and the
  generation prompt included);
- ``summary``: the running summary in the system prompt;
- ``earlier``: the earlier messages fitting kept;
- ``question``: the question (an oversized one: the notes of its analysis);
- ``research``: this reply's tool calls and results so far;
- ``tools``: the tool schemas.

Every stored message before the question is in exactly one of ``in_view`` (sent whole),
``summarized`` (covered by the running summary) or ``dropped`` (left out by fitting); the
question itself is in view. Each is a list of ``[first, last]`` seq ranges, ascending.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

import msgspec

from imprintd.messages import Message, ToolSpec
from imprintd.models.base import Model, window_source

Ranges = tuple[tuple[int, int], ...]


class Parts(msgspec.Struct, frozen=True, kw_only=True):
    system: int
    tools: int
    summary: int
    earlier: int
    question: int
    research: int

    @property
    def total(self) -> int:
        return self.system + self.tools + self.summary + self.earlier + self.question + self.research


class ContextUsage(msgspec.Struct, frozen=True, kw_only=True):
    n_ctx: int
    #: Where ``n_ctx`` comes from: ``"chat.n_ctx"`` or the server's window (``models.base.window_source``).
    n_ctx_source: str = "chat.n_ctx"
    #: Tokens kept free for the model's answer (``chat.max_tokens``).
    output_allowance: int
    #: Counted with the model's own tokenizer (local) rather than estimated (remote).
    exact: bool
    used: int
    parts: Parts
    in_view: Ranges
    summarized: Ranges
    dropped: Ranges


class Layout(msgspec.Struct, frozen=True, kw_only=True):
    """Where a prompt's messages came from: what the fitted messages alone do not say."""

    #: The system message as it would be without the running summary.
    system_base: Message
    #: The seq of every stored message before the question (a ``range`` as a reply reads them).
    earlier: Sequence[int]
    #: The messages the running summary covers (``first_seq``, ``last_seq``); None without one.
    summarized: tuple[int, int] | None = None


def measure(
    model: Model,
    messages: Sequence[Message],
    *,
    current: int,
    tools: Sequence[ToolSpec],
    max_tokens: int,
    layout: Layout,
    used: int | None = None,
) -> ContextUsage:
    """The usage of ``messages`` (a fitted prompt: system, kept history, then ``current`` messages
    of this turn, the question first) sent with ``tools``.

    ``used`` is the prompt's count with the tools when the caller has it (fitting measured it).
    Counting runs the model's tokenizer a few times: call it from a worker thread.
    """
    system, kept, turn = (
        messages[0],
        list(messages[1 : len(messages) - current]),
        list(messages[len(messages) - current :]),
    )
    question = turn[:1]
    # Each count is of a longer prefix of the same prompt, so the differences add up exactly.
    base = model.count_prompt([layout.system_base])
    with_summary = model.count_prompt([system])
    with_earlier = model.count_prompt([system, *kept])
    with_question = model.count_prompt([system, *kept, *question])
    untooled = model.count_prompt(messages)
    total = model.count_prompt(messages, tools) if used is None else used
    parts = Parts(
        system=base,
        summary=with_summary - base,
        earlier=with_earlier - with_summary,
        question=with_question - with_earlier,
        research=untooled - with_question,
        tools=total - untooled,
    )
    in_view = sorted({m.seq for m in (*kept, *question) if m.seq is not None})
    # In runs, not seq by seq: the earlier messages are the whole session (one run, a ``range``,
    # as a reply reads them), and what is in view is a prompt's worth, so this does not grow with
    # the session.
    earlier = _runs(layout.earlier)
    low, high = layout.summarized or (1, 0)
    inside = [(max(first, low), min(last, high)) for first, last in earlier if first <= high and last >= low]
    outside = [
        piece
        for first, last in earlier
        for piece in ((first, min(last, low - 1)), (max(first, high + 1), last))
        if piece[0] <= piece[1]
    ]
    return ContextUsage(
        n_ctx=model.n_ctx,
        n_ctx_source=window_source(model),
        output_allowance=max_tokens,
        exact=model.exact_counts,
        used=total,
        parts=parts,
        in_view=ranges(in_view),
        summarized=_without(inside, in_view),
        dropped=_without(outside, in_view),
    )


def _runs(seqs: Sequence[int]) -> Ranges:
    """``seqs`` as ``ranges`` gives them; an ascending ``range`` in one step."""
    if isinstance(seqs, range) and seqs.step == 1:
        return ((seqs.start, seqs.stop - 1),) if seqs else ()
    return ranges(seqs)


def _without(runs: Iterable[tuple[int, int]], seqs: Sequence[int]) -> Ranges:
    """The ascending, disjoint ``runs`` less the ascending ``seqs``, as ``ranges``."""
    out: list[tuple[int, int]] = []
    for first, last in runs:
        start = bisect.bisect_left(seqs, first)
        for seq in seqs[start : bisect.bisect_right(seqs, last)]:
            if first < seq:
                out.append((first, seq - 1))
            first = seq + 1
        if first <= last:
            out.append((first, last))
    # Runs that touch (a range split at its ends) are one, as ``ranges`` makes them.
    merged: list[tuple[int, int]] = []
    for first, last in out:
        if merged and first == merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], last)
        else:
            merged.append((first, last))
    return tuple(merged)


def ranges(seqs: Iterable[int]) -> Ranges:
    """``{1, 2, 3, 7}`` as ``((1, 3), (7, 7))``."""
    runs: list[tuple[int, int]] = []
    for seq in sorted(seqs):
        if runs and seq == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], seq)
        else:
            runs.append((seq, seq))
    return tuple(runs)
