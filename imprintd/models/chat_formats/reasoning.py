"""Reasoning: the markers a family thinks between, and the splitter that keeps thoughts out of
the answer (docs/decisions.md, "Reasoning").

Each chat format names its family's markers (``ChatFormat.reasoning``); a template is looked
at for those first and then for the others known here, since a template may think in another
family's markers (SmolLM3's ``json-fallback`` template writes ``<think>``). The same call syntax
comes with or without a thinking model (Qwen2.5 and Qwen3 both write Hermes calls), so whether
a model reasons is read from its template, not from its format.

Everything here is pure: no model, no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

from imprintd.models.chat_formats.calls import MarkerEraser, SpaceTrimmer, partial_suffix


@dataclass(frozen=True)
class Reasoning:
    """How a family marks its thoughts: they run from ``open`` to ``close``."""

    open: str
    close: str
    #: What a template that thinks in these markers writes (all of it).
    signs: tuple[str, ...]


THINK = Reasoning("<think>", "</think>", ("<think>",))
MISTRAL_THINK = Reasoning("[THINK]", "[/THINK]", ("[THINK]",))
GEMMA_THOUGHT = Reasoning("<|channel>thought", "<channel|>", ("<|channel>", "thought"))
#: Every family's markers, in the order a template is looked at for them after its format's own.
KNOWN = (MISTRAL_THINK, GEMMA_THOUGHT, THINK)

#: The template variables that switch a family's reasoning on or off.
REASONING_SWITCHES = ("enable_thinking", "thinking")


def detect_reasoning(template: str, first: Reasoning | None = None) -> Reasoning | None:
    """The reasoning markers ``template`` knows (``first``, a format's own, before the others),
    or None for a model that does not reason."""
    candidates = KNOWN if first is None else (first, *(known for known in KNOWN if known != first))
    return next((markers for markers in candidates if all(sign in template for sign in markers.signs)), None)


class ReasoningSplitter:
    """Splits streamed text into reasoning and answer by a family's markers.

    ``feed`` returns ``(reasoning, text)`` safe to pass on now, holding back a tail that may
    still become a marker. ``opened``: the prompt already opened the reasoning (a template whose
    generation prompt ends with ``<think>``), so the reply starts inside it. Only the first
    block counts: what follows the closing marker (or one of ``ends``) is the answer (the
    answer's filter removes stray markers there). ``stray``: markers removed from the reasoning (the family's closers
    and channel markers; the opening marker written again).

    Linear in the reply: the tail held is bounded by a marker's length, and the reasoning's
    trailing whitespace (which the thoughts end without) is held as pieces.
    """

    def __init__(
        self,
        markers: Reasoning | None,
        *,
        opened: bool = False,
        stray: Sequence[str] = (),
        ends: Sequence[str] = (),
    ) -> None:
        self._markers = markers
        #: Markers that end the thoughts without closing them: they and what follows are the
        #: answer (Qwen3.5's ``<tool_call>``, as llama.cpp's parser reads it).
        self._ends = tuple(ends)
        self._state = "none" if markers is None else "before"
        #: The prompt opened the thoughts: a reply that does not open them again starts inside.
        self._opened = opened
        self._pending = ""
        self._erase = MarkerEraser((*stray, markers.open) if markers is not None else stray)
        self._space = SpaceTrimmer()

    def __copy__(self) -> ReasoningSplitter:
        clone = object.__new__(ReasoningSplitter)
        clone.__dict__.update(self.__dict__)
        clone._erase = copy.copy(self._erase)
        clone._space = copy.copy(self._space)
        return clone

    def feed(self, piece: str) -> tuple[str, str]:
        if self._state in ("none", "after"):
            return "", piece
        self._pending += piece
        return self._split(final=False)

    def finish(self) -> tuple[str, str]:
        return self._split(final=True)

    def _split(self, *, final: bool) -> tuple[str, str]:
        markers = self._markers
        if markers is None or self._state == "after":
            text, self._pending = self._pending, ""
            return "", text
        if self._state == "before":
            # Leading whitespace is dropped as it comes (the answer drops it too).
            self._pending = self._pending.lstrip()
            pending = self._pending
            if pending.startswith(markers.open):
                self._pending = pending[len(markers.open) :]
                self._state = "inside"
            elif not final and markers.open.startswith(pending):
                return "", ""  # may still become the opening marker
            elif self._opened:
                self._state = "inside"
            else:
                self._state = "after"
                self._pending = ""
                return "", pending
        pending = self._pending
        end = pending.find(markers.close)
        answer = end + len(markers.close)
        for marker in self._ends:
            at = pending.find(marker)
            if at >= 0 and (end < 0 or at < end):
                end = answer = at
        if end >= 0:
            self._pending = ""
            self._state = "after"
            return self._thought(pending[:end], last=True), pending[answer:]
        if final:
            self._pending = ""
            return self._thought(pending, last=True), ""
        cut = len(pending) - max(partial_suffix(pending, marker) for marker in (markers.close, *self._ends))
        self._pending = pending[cut:]
        return self._thought(pending[:cut], last=False), ""

    def _thought(self, piece: str, *, last: bool) -> str:
        """``piece`` of the reasoning as it is kept: stray markers out, no leading whitespace,
        trailing whitespace only once more follows."""
        if last:
            return self._space.finish(self._erase.feed(piece) + self._erase.finish())
        return self._space.feed(self._erase.feed(piece))


def split_reasoning(
    text: str, markers: Reasoning | None, *, opened: bool = False, stray: Sequence[str] = ()
) -> tuple[str, str]:
    """``(reasoning, answer)`` of a whole reply (``ReasoningSplitter`` at once)."""
    splitter = ReasoningSplitter(markers, opened=opened, stray=stray)
    reasoning, answer = splitter.feed(text)
    more_reasoning, more_answer = splitter.finish()
    return (reasoning + more_reasoning).rstrip(), answer + more_answer
