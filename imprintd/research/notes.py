"""Research notes and the final answer written from them (docs/decisions.md, "Final answer
from notes").

When research ends on a budget, stagnation or a full context, this reply's numbered results
(``research/citations.py``) become notes under the same numbers the coordinator saw: a search
hit, a file range read, an earlier message, one note per section worker of an analyzed result
or of the user's own message, whose first note says which characters were not read. A place
returned by several searches is one note and ranks first; the ranking orders the digest and
never renumbers. Empty reads, errors and calls not run add nothing. Notes are built from the
results' structure (``ToolResult.hits``, ``sources``, ``quotes``), never parsed from the text
the model read.

The reserved answer's request then holds the system prompt without the tool strategy, up
to six earlier user and assistant messages, and the question with the notes for citation
within 6,000 characters (700 a note). Imprint, not the model, writes the Sources list of the
notes the answer cites (``citations.sources``), and the fallbacks when the answer cannot finish.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import msgspec

from imprintd.context.sections import CUT_REASONS, Analysis
from imprintd.messages import Message, Style, ToolCall, system, user
from imprintd.research.citations import Numbering, Passage
from imprintd.tools.base import ToolResult

DIGEST_LIMIT = 6_000
NOTE_LIMIT = 700
EARLIER_LIMIT = 6
ELLIPSIS = "…"
#: Characters of a finding quoted in a fallback (a line, not a passage).
FINDING_LIMIT = 240


class ToolStepRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call of this reply and its result; ``result is None``: the call was not run."""

    call: ToolCall
    result: ToolResult | None = None
    #: The section analysis the model was shown instead of an oversized result, if any.
    analysis: Analysis | None = None


class Note(msgspec.Struct, frozen=True, kw_only=True):
    """One research note, under the number its result had in this reply."""

    number: int  # the result's number (``research/citations.py``), not its rank
    label: str  # "src/billing/config.py:55–58", "message #12", "notes on sections 1–2 of 9 of message #1"
    text: str
    passage: Passage
    times: int = 1  # how many searches (or identical calls) returned it


# --- building notes ---------------------------------------------------------------------------


@dataclass
class _Draft:
    passage: Passage
    text: str
    step: int  # the first step that returned it (-1: the analysis of the user's message)
    position: int  # its place within that step's result
    steps: set[int] = field(default_factory=set)

    def rank_key(self) -> tuple[int, int, int]:
        # Several searches first; then in the order research found them, a
        # search's own hits by score (which is the order the search returned them in).
        return (-len(self.steps), self.step, self.position)


def _clean(text: str) -> str:
    """Trailing spaces and runs of blank lines out; the content itself untouched."""
    lines = [line.rstrip() for line in text.strip("\n").split("\n")]
    kept: list[str] = []
    for line in lines:
        if line or (kept and kept[-1]):
            kept.append(line)
    return "\n".join(kept).strip()


def _is_empty(result: ToolResult) -> bool:
    # A result that saw nothing (no hits, no sources, no evidence) is an empty read, whatever
    # its text says ("No results for …", "x is empty.").
    return not result.text.strip() or not (result.hits or result.sources or result.evidence)


def build_notes(
    steps: Sequence[ToolStepRecord],
    numbering: Numbering | None = None,
    *,
    question: Analysis | None = None,
    question_seq: int | None = None,
) -> list[Note]:
    """This reply's results as ranked notes under their numbers (see the module docstring).

    ``numbering`` is the reply's, so a note keeps the number the coordinator saw (a fresh one
    numbers the steps in order). ``question``: the analysis of the user's own message, whose
    workers' notes are notes too (of message ``question_seq``).
    """
    numbering = numbering if numbering is not None else Numbering()
    drafts: dict[int, _Draft] = {}
    if question is not None:
        for draft in _analysis_drafts(question, numbering, step=-1, message=question_seq):
            _merge(drafts, draft)
    for step, record in enumerate(steps):
        result = record.result
        if result is None or not result.ok or _is_empty(result):
            continue
        if record.analysis is not None:
            # Its notes, not its first characters: they cover every section that was read.
            for draft in _analysis_drafts(record.analysis, numbering, step=step, result=result):
                _merge(drafts, draft)
            continue
        for position, passage in enumerate(numbering.result(record.call, result)[1]):
            # A read's continuation line is tool protocol: a tools-free final turn must not be
            # invited to call read_file, so notes keep only the content.
            text = _clean(passage.text)
            if text:
                _merge(drafts, _Draft(passage=passage, text=text, step=step, position=position))
    ranked = sorted(drafts.values(), key=_Draft.rank_key)
    return [
        Note(number=d.passage.number, label=d.passage.label, text=d.text, passage=d.passage, times=len(d.steps))
        for d in ranked
    ]


def _analysis_drafts(
    analysis: Analysis,
    numbering: Numbering,
    *,
    step: int,
    message: int | None = None,
    result: ToolResult | None = None,
) -> list[_Draft]:
    """One draft per worker's notes on an analyzed source; the first says what was not read."""
    passages = numbering.analysis(analysis, message=message, result=result)
    drafts = [
        _Draft(passage=passage, text=_clean(passage.text), step=step, position=position)
        for position, passage in enumerate(passages)
    ]
    if analysis.cut and drafts:
        unread = (
            f"characters {analysis.read_to}–{analysis.total_chars} of this source were not read "
            f"({CUT_REASONS[analysis.cut][0]})"
        )
        drafts[0].text = f"{drafts[0].text}\n({unread})"
    return drafts


def _merge(drafts: dict[int, _Draft], draft: _Draft) -> None:
    existing = drafts.get(draft.passage.number)
    if existing is None:
        draft.steps.add(draft.step)
        drafts[draft.passage.number] = draft
        return
    existing.steps.add(draft.step)  # the same place again: one note, ranked where first seen


# --- the digest -------------------------------------------------------------------------------


def clip_at_word(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, cut after a whole word and marked "…" when cut."""
    if len(text) <= limit:
        return text
    room = text[: max(0, limit - len(ELLIPSIS))]
    if not text[len(room)].isspace():
        # The limit falls inside a word: go back to the last space before it.
        space = max(room.rfind(" "), room.rfind("\n"), room.rfind("\t"))
        if space > 0:
            room = room[:space]
    return room.rstrip() + ELLIPSIS


def note_line(note: Note, per_note: int = NOTE_LIMIT) -> str:
    return f"[{note.number}] {note.label}: {clip_at_word(note.text, per_note)}"


def digest(notes: Sequence[Note], *, limit: int = DIGEST_LIMIT, per_note: int = NOTE_LIMIT) -> tuple[str, list[Note]]:
    """The notes for citation: whole notes, in rank order, each under its result's number, within
    ``limit`` characters.

    Stops at the first note that does not fit; a citation is valid exactly when it names one
    of the notes returned (the ranking does not renumber, so the numbers may have gaps).
    """
    lines: list[str] = []
    included: list[Note] = []
    used = 0
    for note in notes:
        line = note_line(note, per_note)
        cost = len(line) + (1 if lines else 0)
        if used + cost > limit:
            break
        lines.append(line)
        included.append(note)
        used += cost
    return "\n".join(lines), included


# --- the final request ------------------------------------------------------------------------

WRITTEN_INSTRUCTIONS = (
    "Answer the question above from these research notes; no tools are available now. "
    "Open with a direct answer in one or two sentences. Then give the key points as a short "
    "list, citing the notes each point comes from as [n]. Then say in one line what the notes "
    "leave open. Stay under about 250 words. Do not list sources; they are added for you."
)
SPOKEN_INSTRUCTIONS = (
    "Answer the question above from these research notes; no tools are available now. "
    "Answer in two or three plain sentences that read well aloud: no list, no citations, "
    "no code, no markup."
)
NO_NOTES = "(The research found nothing to note.)"


def _conversational(message: Message) -> Message | None:
    """A user or assistant message without its tool exchange, or None to drop it."""
    if message.role not in ("user", "assistant") or not message.content.strip():
        return None  # tool results, system text, and assistant turns that only call tools
    if message.tool_calls:
        return Message(role=message.role, content=message.content, seq=message.seq)
    return message


def earlier_messages(earlier: Sequence[Message], question: str, limit: int = EARLIER_LIMIT) -> list[Message]:
    """Up to ``limit`` of the latest earlier user and assistant messages, tool exchanges out."""
    kept = [m for m in map(_conversational, earlier) if m is not None]
    # The question is stored before research starts, so callers may pass it along with
    # the conversation; it is asked once, at the end, with the notes.
    if kept and kept[-1].role == "user" and kept[-1].content.strip() == question.strip():
        kept.pop()
    kept = kept[-limit:] if limit > 0 else []
    # Chat templates that insist on alternation want the conversation to open with a user turn.
    while kept and kept[0].role == "assistant":
        kept.pop(0)
    return kept


def final_request(
    *,
    system_prompt: str,
    earlier: Sequence[Message],
    summary_block: str | None,
    question: str,
    digest_text: str,
    style: Style = "written",
) -> list[Message]:
    """The reserved answer's messages; it is sent with no tools.

    ``system_prompt`` comes without the tool strategy (the caller builds it so); the
    summary block, when there is one, is appended to it.
    """
    prompt = system_prompt.rstrip()
    if summary_block and summary_block.strip():
        prompt = f"{prompt}\n\n{summary_block.strip()}"
    instructions = SPOKEN_INSTRUCTIONS if style == "spoken" else WRITTEN_INSTRUCTIONS
    notes = digest_text.strip() or NO_NOTES
    ask = f"{question.strip()}\n\nResearch notes:\n{notes}\n\n{instructions}"
    return [system(prompt), *earlier_messages(earlier, question), user(ask)]


# --- fallbacks --------------------------------------------------------------------------------

#: Sentence end: terminal punctuation, then any closing quotes, brackets or emphasis, then
#: any trailing citations such as " [2]".
_SENTENCE_END = re.compile(r"[.!?…](?:[\"'”’)\]*_`]*)(?:\s*\[\d+(?:\s*,\s*\d+)*\])*\s*$")


def ends_with_sentence(text: str) -> bool:
    return bool(_SENTENCE_END.search(text.rstrip()))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _finding(note: Note) -> str:
    return f"- {note.label}: {clip_at_word(_one_line(note.text), FINDING_LIMIT)} [{note.number}]"


def _places(notes: Iterable[Note]) -> list[str]:
    """Where the notes come from, for speaking: file paths, else the note's label."""
    places: list[str] = []
    for note in notes:
        place = note.passage.path or note.label
        if place not in places:
            places.append(place)
    return places


def _spoken_list(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _spoken_findings(notes: Sequence[Note]) -> str:
    places = _places(notes)
    if not places:
        return "The research found nothing to report."
    return f"The research found relevant material in {_spoken_list(places[:4])}."


def cut_short(written: str, notes: Sequence[Note], *, style: Style = "written") -> str:
    """An answer that stopped early: what it wrote, that it was cut short, the three strongest findings.

    A text that ended after a whole sentence gets no ellipsis; a partial sentence ends "…".
    """
    text = written.rstrip()
    if not text.strip():
        return findings_only(notes, style=style)
    if not ends_with_sentence(text):
        text += ELLIPSIS
    if style == "spoken":
        return f"{text} I had to stop there. {_spoken_findings(notes[:3])}"
    strongest = notes[:3]
    if not strongest:
        return f"{text}\n\n(The answer was cut short.)"
    findings = "\n".join(_finding(note) for note in strongest)
    return f"{text}\n\n(The answer was cut short. The strongest findings of the research:)\n{findings}"


def findings_only(notes: Sequence[Note], *, style: Style = "written") -> str:
    """No answer at all: a short list of the four strongest findings."""
    if style == "spoken":
        return f"I couldn't finish an answer. {_spoken_findings(notes[:4])}"
    strongest = notes[:4]
    if not strongest:
        return "I couldn't write an answer, and the research found nothing to report."
    findings = "\n".join(_finding(note) for note in strongest)
    return f"I couldn't write a full answer. The strongest findings of the research:\n{findings}"
