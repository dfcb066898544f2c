"""Writing the running summary now, on the user's word (``imprint/compact``, ACP ``/compact``).

The automatic running summary (docs/decisions.md, "Running summary") is written only when the conversation's text no longer fits. Compacting runs
the same summarizer (``context/summary.update_summary``: one bullet per exchange, each opening
with its message numbers, appended to the summary so far, the covered-material list kept) on
every exchange the summary does not cover yet, except the newest: the next question still sees
its last exchange word for word, as after an automatic summary.

A session whose uncovered part is at most one exchange has nothing to summarize, and is told so
(nothing is asked of the model, nothing stored). A failed attempt stores nothing either: the
previous summary stays and, unlike an automatic attempt, no retry point is set, since the user
asked and sees the error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from imprintd.context import summary as summaries
from imprintd.events import ReplyEvents
from imprintd.messages import Message
from imprintd.models.base import Model
from imprintd.store import StoredSummary


class CompactFailed(Exception):
    """The summarizer did not write a summary; the message says why. Nothing was stored."""


@dataclass(frozen=True)
class Compacted:
    #: True when a new summary was written; False when there was nothing to summarize.
    written: bool
    summary: StoredSummary | None
    note: str


def to_cover(messages: Sequence[Message], state: StoredSummary | None) -> list[Message]:
    """The messages compacting covers: every uncovered exchange but the newest, whole."""
    covered = summaries.covered_through(state)
    uncovered = [m for m in messages if m.role != "system" and (m.seq or 0) > covered]
    groups = summaries.exchanges(uncovered)
    return [m for group in groups[:-1] for m in group]


async def compact(
    model: Model, messages: Sequence[Message], state: StoredSummary | None, events: ReplyEvents
) -> Compacted:
    """Summarize what ``to_cover`` chooses; the new summary is for the caller to store."""
    chosen = to_cover(messages, state)
    if not chosen:
        covered = summaries.covered_through(state)
        where = f" after message #{covered} (what the summary covers)" if covered else ""
        return Compacted(
            written=False,
            summary=state if state is not None and state.text else None,
            note=f"Nothing to summarize: the conversation{where} is at most one exchange, which stays in view.",
        )
    count = max((m.seq or 0) for m in messages)
    outcome = await summaries.update_summary(
        model, state=state, messages=list(messages), to_cover=chosen, message_count=count, events=events
    )
    if not outcome.ok or outcome.state is None:
        raise CompactFailed(f"no summary was written: {outcome.reason}; the previous summary stays.")
    new = outcome.state
    return Compacted(
        written=True, summary=new, note=f"The summary now covers messages #{new.first_seq}–#{new.last_seq}."
    )
