"""The final answer after research stops on a budget, stagnation or a full context (ADR 0127).

The reserved answer is one request with no tools and its own output allowance, within what
is left of the reply's time budget (its reserved share at least, at most 120 s;
``research/clock.py``): the system prompt without the tool strategy (and the summary
without the lookup guidance), up to six earlier messages, and the question with numbered
notes under the numbers the coordinator saw. The daemon, not the model, appends what section
analysis left unread (``coverage``) and the Sources of the notes the answer cites (a number
that names no note is removed from the text, also as it streams). An answer that
stops early or asks for tools keeps what it wrote and gains the strongest findings; no
answer at all becomes the four strongest findings. A bounded stop is never a failed reply.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import msgspec

from imprintd.context.sections import Analysis
from imprintd.events import ReplyEvents
from imprintd.messages import Message, SourceRef, Style
from imprintd.models.base import Completion, Model, ModelError
from imprintd.research import citations
from imprintd.research import notes as notes_mod
from imprintd.research.citations import Numbering
from imprintd.research.clock import FINAL_TIMEOUT_S
from imprintd.research.notes import ToolStepRecord

logger = logging.getLogger(__name__)

__all__ = ["FINAL_TIMEOUT_S", "FinalAnswer", "final_answer", "coverage_note"]


class FinalAnswer(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    sources: tuple[SourceRef, ...] = ()


async def final_answer(
    model: Model,
    events: ReplyEvents,
    *,
    system_prompt: str,
    summary_block: str,
    earlier: Sequence[Message],
    question: str,
    steps: Sequence[ToolStepRecord],
    style: Style,
    max_tokens: int,
    timeout: float = FINAL_TIMEOUT_S,
    coverage: str = "",
    numbering: Numbering | None = None,
    question_analysis: Analysis | None = None,
    question_seq: int | None = None,
) -> FinalAnswer:
    """The answer from notes, within ``timeout`` seconds; ``coverage`` (what was not read) is appended.

    Notes keep the numbers of the reply's ``numbering``; the analysis of the user's own message
    (``question_analysis``, of message ``question_seq``) is among them.
    """
    notes = notes_mod.build_notes(steps, numbering, question=question_analysis, question_seq=question_seq)
    digest_text, included = notes_mod.digest(notes)
    passages = {note.number: note.passage for note in included}
    stream = citations.CitationFilter(citations.valid_for(passages, style), events.text)
    request = _fitted_request(
        model,
        system_prompt=system_prompt,
        summary_block=summary_block,
        earlier=earlier,
        question=question,
        digest_text=digest_text,
        style=style,
        max_tokens=max_tokens,
    )
    events.progress("Writing the answer from the research notes…")
    completion: Completion | None = None
    if request is not None:
        try:
            # No tools are offered; a model that writes a call anyway has its text (and what
            # streamed) stop before the markup and says so in ``wrote_tool_call``.
            completion = await model.complete(
                request, (), max_tokens=max_tokens, timeout=min(timeout, FINAL_TIMEOUT_S), on_text=stream
            )
        except ModelError as error:
            logger.warning("the final answer failed: %s", error)
        finally:
            stream.close()
    raw = completion.text if completion is not None else ""
    written = citations.plain(raw, passages, style)
    if completion is None or not written.strip():
        text = notes_mod.findings_only(included, style=style)
        events.text(text)
    elif completion.tool_calls or completion.wrote_tool_call or completion.finish_reason in ("length", "deadline"):
        text = notes_mod.cut_short(written, included, style=style)
        _stream_rest(events, written, text)
    else:
        text = written
    if coverage:
        addition = "\n\n" + coverage
        events.text(addition)
        text += addition
    # A spoken answer's citations were kept out of its text; what it cited is still its sources.
    refs = citations.sources(raw if style == "spoken" else text, passages, passages.values())
    if style != "spoken" and refs:
        addition = "\n\n" + citations.sources_block(refs)
        events.text(addition)
        text += addition
    return FinalAnswer(text=text, sources=tuple(refs))


def coverage_note(analyses) -> str:
    """What the reply's section analyses left unread, in words; "" when every source was read whole."""
    return "\n".join(a.unread_sentence() for a in analyses if a.cut)


def _stream_rest(events: ReplyEvents, written: str, text: str) -> None:
    """Send what ``text`` adds after the part already streamed."""
    streamed = written.rstrip()
    events.text(text[len(streamed) :] if text.startswith(streamed) else "\n\n" + text)


def _fitted_request(model: Model, *, earlier: Sequence[Message], max_tokens: int, **parts) -> list[Message] | None:
    """The final request, dropping the oldest earlier messages until it fits; None if it can't."""
    kept = notes_mod.earlier_messages(earlier, parts["question"])
    while True:
        request = notes_mod.final_request(earlier=kept, **parts)
        if model.count_prompt(request) + max_tokens <= model.n_ctx:
            return request
        if not kept:
            return None
        kept = kept[1:]
