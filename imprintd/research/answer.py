"""The final answer after research stops on a budget, stagnation or a full context (docs/decisions.md, "Final answer from notes").

The reserved answer is one request with no tools and its own output allowance, within its
own 120 s (``research/clock.py``): the system prompt without the tool strategy (and the
summary without the lookup guidance), up to six earlier messages, and the question with
numbered notes under the numbers the coordinator saw, shrunk until it fits the model's
context (``_fitted_request``). The daemon, not the model, appends what section analysis left
unread (``coverage``) and the Sources of the notes the answer cites (a number that names no
note is removed from the text, also as it streams). An answer that
stops early or asks for tools keeps what it wrote and gains the strongest findings; no
answer at all becomes the four strongest findings. A stop after work is never a failed reply.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import msgspec

from imprintd.context.sections import Analysis
from imprintd.events import ReplyEvents
from imprintd.messages import Message, SourceRef, Style
from imprintd.models.base import Completion, Model, ModelError
from imprintd.offload import in_worker
from imprintd.research import citations
from imprintd.research import notes as notes_mod
from imprintd.research.citations import Numbering
from imprintd.research.clock import FINAL_TIMEOUT_S
from imprintd.research.notes import Note, ToolStepRecord

logger = logging.getLogger(__name__)

__all__ = ["FINAL_TIMEOUT_S", "FinalAnswer", "final_answer", "coverage_note", "cut_off_note"]


class FinalAnswer(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    sources: tuple[SourceRef, ...] = ()
    #: What a reasoning model thought before it wrote the answer (streamed, stored, never text).
    reasoning: str = ""
    #: The answer as later prompts render it: ``text`` without the coverage and Sources the
    #: daemon appended (``Message.model_text``).
    model_text: str = ""


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
    (``question_analysis``, of message ``question_seq``) is among them, and ``question`` (its
    notes as the coordinator saw them) may be shortened to fit; the user's own words never are.
    """
    notes = notes_mod.build_notes(steps, numbering, question=question_analysis, question_seq=question_seq)
    fitted = await in_worker(  # counts and renders the whole request, maybe several times
        _fitted_request,
        model,
        notes=notes,
        system_prompt=system_prompt,
        summary_block=summary_block,
        earlier=earlier,
        question=question,
        question_analyzed=question_analysis is not None,
        style=style,
        max_tokens=max_tokens,
    )
    request, included, max_tokens = fitted.request, fitted.included, fitted.max_tokens
    passages = {note.number: note.passage for note in included}
    stream = citations.CitationFilter(citations.valid_for(passages, style), events.text)
    events.progress("Writing the answer from the research notes…")
    completion: Completion | None = None
    if request is not None:
        try:
            # No tools are offered; a model that writes a call anyway has its text (and what
            # streamed) stop before the markup and says so in ``wrote_tool_call``.
            completion = await model.complete(
                request,
                (),
                max_tokens=max_tokens,
                timeout=timeout,
                on_text=stream,
                on_retry=events.progress,
                on_reasoning=events.reasoning,
            )
        except ModelError as error:
            logger.warning("the final answer failed: %s", error)
        finally:
            stream.close()
    raw = completion.text if completion is not None else ""
    written = citations.plain(raw, passages, style)
    if completion is None or not written.strip():
        # The model wrote nothing: the findings come from every note, not only those that fit.
        included = list(notes)
        passages = {note.number: note.passage for note in included}
        text = notes_mod.findings_only(included, style=style)
        events.text(text)
    elif (
        completion.tool_calls
        or completion.wrote_tool_call
        or completion.finish_reason in ("length", "deadline", "repetition")
    ):
        text = notes_mod.cut_short(written, included, style=style)
        _stream_rest(events, written, text)
    else:
        text = written
    model_text = text
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
    return FinalAnswer(
        text=text, sources=tuple(refs), reasoning=completion.reasoning if completion else "", model_text=model_text
    )


def cut_off_note(max_tokens: int) -> str:
    """The line after a direct answer that reached the output limit."""
    return (
        f"(The answer was cut off at the output limit of {max_tokens:,} tokens; raising chat.max_tokens "
        "would let it finish.)"
    )


def coverage_note(analyses) -> str:
    """What the reply's section analyses left unread, in words; "" when every source was read whole."""
    return "\n".join(a.unread_sentence() for a in analyses if a.cut)


def _stream_rest(events: ReplyEvents, written: str, text: str) -> None:
    """Send what ``text`` adds after the part already streamed."""
    streamed = written.rstrip()
    events.text(text[len(streamed) :] if text.startswith(streamed) else "\n\n" + text)


#: The final request's digest is shrunk no further than this (a note or two still fit).
MIN_DIGEST_CHARS = 600
#: Nor an analyzed question's notes below this.
MIN_QUESTION_CHARS = 600
#: Nor the answer's output allowance below this, when nothing else is left to shrink.
MIN_ANSWER_TOKENS = 256
#: Each shrinking step keeps this share of what it shrinks.
SHRINK = 0.7


class _Fitted(msgspec.Struct, frozen=True):
    request: list[Message] | None
    included: list[Note]
    max_tokens: int


def _fitted_request(
    model: Model,
    *,
    notes: Sequence[Note],
    earlier: Sequence[Message],
    question: str,
    question_analyzed: bool,
    max_tokens: int,
    **parts,
) -> _Fitted:
    """The final request, shrunk until it fits the model's context with its output allowance.

    In order: the oldest earlier messages go; then the larger of an analyzed question's
    notes (each paragraph clipped at a word, keeping every part) and the digest (fewer,
    shorter notes) shrinks, down to 600 characters each; then the output allowance halves,
    down to 256 tokens. None when even that does not fit. Counting the request is short work (a few thousand characters).
    """
    kept = notes_mod.earlier_messages(earlier, question)
    limit = notes_mod.DIGEST_LIMIT
    asked = question
    allowance = max_tokens
    while True:
        digest_text, included = notes_mod.digest(notes, limit=limit, per_note=min(notes_mod.NOTE_LIMIT, limit // 2))
        request = notes_mod.final_request(earlier=kept, question=asked, digest_text=digest_text, **parts)
        if model.count_prompt(request) + allowance <= model.n_ctx:
            return _Fitted(request, included, allowance)
        shrink_question = question_analyzed and len(asked) > MIN_QUESTION_CHARS
        shrink_digest = len(digest_text) > MIN_DIGEST_CHARS
        if kept:
            kept = kept[1:]
        elif shrink_question and (not shrink_digest or len(asked) >= len(digest_text)):
            shorter = shrink_lines(asked, max(MIN_QUESTION_CHARS, int(len(asked) * SHRINK)))
            question_analyzed = len(shorter) < len(asked)  # lines at their shortest: shrink no more
            asked = shorter
        elif shrink_digest:
            limit = max(MIN_DIGEST_CHARS, int(len(digest_text) * SHRINK))
        elif allowance > MIN_ANSWER_TOKENS:
            allowance = max(MIN_ANSWER_TOKENS, allowance // 2)
        else:
            return _Fitted(None, included, allowance)


#: A line is never shrunk below this many characters.
MIN_LINE_CHARS = 40
#: Where lines of a shrunk analyzed question were left out.
OMITTED = "[…]"


def shrink_lines(text: str, target: int) -> str:
    """``text`` toward ``target`` characters, every line kept and clipped at a word in
    proportion, so the header, the message's ends and each of the workers' notes all keep
    their beginnings (a note's point comes first). Lines already short are kept whole; when
    that is still too long, the middle lines go (the header and the last notes stay)."""
    if len(text) <= target:
        return text
    scale = target / len(text)
    lines = [notes_mod.clip_at_word(line, max(MIN_LINE_CHARS, int(len(line) * scale))) for line in text.split("\n")]
    shrunk = "\n".join(lines)
    if len(shrunk) <= target:
        return shrunk
    head: list[str] = []
    tail: list[str] = []
    room = target - len(OMITTED) - 2
    first, last, front = 0, len(lines) - 1, True
    while first <= last:
        line = lines[first] if front else lines[last]
        if len(line) + 1 > room:
            break
        room -= len(line) + 1
        if front:
            head.append(line)
            first += 1
        else:
            tail.insert(0, line)
            last -= 1
        front = not front
    return "\n".join([*head, OMITTED, *tail])
