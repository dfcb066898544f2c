"""The final answer after research stops on a budget, stagnation or a full context (ADR 0127).

The reserved answer is one request with no tools, its own output allowance and a 120 s
deadline: the system prompt without the tool strategy (and the summary without the
lookup guidance), up to six earlier messages, and the question with numbered notes. The
daemon, not the model, appends the Sources of the notes the answer cites. An answer that
stops early or asks for tools keeps what it wrote and gains the strongest findings; no
answer at all becomes the four strongest findings. A bounded stop is never a failed reply.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import msgspec

from imprintd.events import ReplyEvents
from imprintd.messages import Message
from imprintd.models.base import Completion, Model, ModelError
from imprintd.models.toolcalls import HERMES_OPEN
from imprintd.research import notes as notes_mod
from imprintd.research.notes import Note, ToolStepRecord

logger = logging.getLogger(__name__)

#: The final turn's own deadline (ADR 0101, kept by ADR 0127).
FINAL_TIMEOUT_S = 120.0


class FinalAnswer(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    cited: tuple[Note, ...] = ()


async def final_answer(model: Model, events: ReplyEvents, *, system_prompt: str, summary_block: str,
                       earlier: Sequence[Message], question: str, steps: Sequence[ToolStepRecord],
                       style: str, max_tokens: int) -> FinalAnswer:
    notes = notes_mod.build_notes(steps)
    digest_text, included = notes_mod.digest(notes)
    request = _fitted_request(model, system_prompt=system_prompt, summary_block=summary_block,
                              earlier=earlier, question=question, digest_text=digest_text,
                              style=style, max_tokens=max_tokens)
    events.progress("Writing the answer from the research notes…")
    completion: Completion | None = None
    stream = _UntilToolCall(events)
    if request is not None:
        try:
            completion = await model.complete(request, (), max_tokens=max_tokens, timeout=FINAL_TIMEOUT_S,
                                              on_text=stream.feed)
        except ModelError as error:
            logger.warning("the final answer failed: %s", error)
    written = completion.text if completion is not None else ""
    asked_for_tools = HERMES_OPEN in written
    if asked_for_tools:
        written = written[: written.index(HERMES_OPEN)].rstrip()
    else:
        stream.flush()
    if completion is None or not written.strip():
        text = notes_mod.findings_only(included, style=style)
        events.text(text)
    elif completion.tool_calls or asked_for_tools or completion.finish_reason in ("length", "deadline"):
        text = notes_mod.cut_short(written, included, style=style)
        _stream_rest(events, written, text)
    else:
        text = written
    cited = notes_mod.cited_notes(text, included)
    if style != "spoken" and cited:
        addition = "\n\n" + notes_mod.sources_block(cited)
        events.text(addition)
        text += addition
    return FinalAnswer(text=text, cited=tuple(cited) if style != "spoken" else ())


class _UntilToolCall:
    """Streams the final answer's text up to any tool-call markup the model writes.

    The final turn offers no tools, so providers parse no calls in it: a model that asks for
    a tool anyway (ADR 0127) writes ``<tool_call>…`` as text. What could still be the start
    of that marker, or whitespace before it, is held back until the next piece shows it is not.
    """

    def __init__(self, events: ReplyEvents) -> None:
        self._events = events
        self._pending = ""
        self._stopped = False

    def feed(self, piece: str) -> None:
        if self._stopped:
            return
        self._pending += piece
        start = self._pending.find(HERMES_OPEN)
        if start >= 0:
            self._stopped = True
            self._events.text(self._pending[:start].rstrip())
            self._pending = ""
            return
        held = next((n for n in range(min(len(HERMES_OPEN) - 1, len(self._pending)), 0, -1)
                     if HERMES_OPEN.startswith(self._pending[-n:])), 0)
        cut = len(self._pending) - held
        while cut > 0 and self._pending[cut - 1].isspace():  # it may end where the marker starts
            cut -= 1
        self._events.text(self._pending[:cut])
        self._pending = self._pending[cut:]

    def flush(self) -> None:
        """The answer is complete without markup: send what was held back."""
        if not self._stopped:
            self._events.text(self._pending)
        self._pending = ""


def _stream_rest(events: ReplyEvents, written: str, text: str) -> None:
    """Send what ``text`` adds after the part already streamed."""
    streamed = written.rstrip()
    events.text(text[len(streamed):] if text.startswith(streamed) else "\n\n" + text)


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
