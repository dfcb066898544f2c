"""The repetition guard: generation stops when the output starts looping (docs/decisions.md,
"Repetition guard").

Small models under greedy decoding fall into loops (``_json_json_json…``, one line written
again and again) and then spend the whole output allowance on them. Every provider feeds what
the model writes, piece by piece, to a ``RepetitionGuard``; once it says the text loops, the
provider stops generating (a remote stream is closed) and finishes with ``"repetition"``. The
text is then cut back to the last whole sentence before the loop, and the reply says that the
model repeated itself.

Two shapes count as a loop, both deterministic and cheap to check after every piece:

- **A repeated line**: the same line, of at least ``MIN_LINE_CHARS`` characters once stripped,
  written ``LINE_REPEATS`` times in a row (blank lines between them do not count); a list
  number at its start does not make it another line (``# 11. 1.1.1.1``, ``# 12. 1.1.1.1``).
  So is a block of up to ``MAX_BLOCK_LINES`` lines written ``LINE_REPEATS`` times in a row
  (a paragraph of several lines, too long for a periodic tail). Tables and lists repeat a
  shape, not a line: their rows differ in their cells, so they never trip it.
- **A periodic tail**: the last ``PERIODIC_CHARS`` characters or more, and at least
  ``PERIODIC_REPEATS`` whole units, repeat one unit of at most ``MAX_PERIOD`` characters
  (``_json`` 40 times, a sentence written over and over on one line). Units of whitespace alone (indentation) and a unit of one repeated character, up to
  ``MAX_RULE_CHARS`` (a long ``====`` rule), are not loops.
"""

from __future__ import annotations

import re

#: Consecutive identical lines that make a loop.
LINE_REPEATS = 4
#: Characters a line needs (stripped) to count: short lines ("}", "---", "") repeat legitimately.
#: A block counts when its longest line has them.
MIN_LINE_CHARS = 12
#: The most lines a repeated block may have: a paragraph of a few lines, written again and again.
MAX_BLOCK_LINES = 8
#: Characters of the tail that must repeat one unit to count as a loop.
PERIODIC_CHARS = 160
#: Whole units a periodic tail needs besides its length (the same count as repeated lines).
PERIODIC_REPEATS = LINE_REPEATS
#: The longest unit a periodic tail is checked for: a sentence written over and over.
MAX_PERIOD = 256
#: A run of one character (a rule of "=" or "-") may be this long before it counts.
MAX_RULE_CHARS = 400
#: The guard looks at most this far back: enough for every shape above.
_WINDOW = max(PERIODIC_REPEATS * MAX_PERIOD + MAX_PERIOD, MAX_RULE_CHARS + 1, 4096)

#: A list item's number at the start of a line ("3. ", "# 12) "): counting, not content.
_LIST_NUMBER = re.compile(r"^#*\s*\d+[.)]\s+")
_SENTENCE_END = re.compile(r"[.!?…:](?:[\"')\]]*)(?=\s)|\n")


class RepetitionGuard:
    """Fed the text a model writes, piece by piece; ``looping`` once it loops."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._size = 0
        self._tail = ""
        self.looping = False
        #: Where the loop starts in everything fed so far (valid once ``looping``).
        self.loop_start = 0

    def feed(self, piece: str) -> bool:
        """Take the next piece; True when the text (now) loops."""
        if self.looping or not piece:
            return self.looping
        self._text.append(piece)
        self._size += len(piece)
        self._tail = (self._tail + piece)[-_WINDOW:]
        offset = self._size - len(self._tail)
        start = _repeated_lines(self._tail)
        if start is None:
            start = _periodic_tail(self._tail)
        if start is not None:
            self.looping = True
            self.loop_start = offset + start
        return self.looping

    @property
    def text(self) -> str:
        return "".join(self._text)


def _repeated_lines(tail: str) -> int | None:
    """Where a run of ``LINE_REPEATS`` identical complete lines, or blocks of up to
    ``MAX_BLOCK_LINES`` lines, ending the text starts (past the first occurrence).

    Blank lines between the repeats do not break the run (a paragraph written again and again).
    The smallest block that repeats wins: one line written again is a block of one.
    """
    lines, position = [], 0
    for line in tail.split("\n")[:-1]:  # the last line may still be growing
        stripped = line.strip()
        if stripped:
            lines.append((position, _LIST_NUMBER.sub("", stripped), len(stripped)))
        position += len(line) + 1
    texts = [text for _, text, _ in lines]
    for size in range(1, MAX_BLOCK_LINES + 1):
        if len(lines) < LINE_REPEATS * size:
            return None
        block = texts[-size:]
        if max(length for _, _, length in lines[-size:]) < MIN_LINE_CHARS or not all(block):
            continue
        if any(texts[-size * (n + 1) : len(texts) - size * n] != block for n in range(1, LINE_REPEATS)):
            continue
        run = LINE_REPEATS
        while size * (run + 1) <= len(texts) and texts[-size * (run + 1) : len(texts) - size * run] == block:
            run += 1
        # Keep the first occurrence: the loop is the repeats after it.
        last_of_first = lines[-size * run + size - 1][0]
        return tail.index("\n", last_of_first) + 1
    return None


def _periodic_tail(tail: str) -> int | None:
    """Where a tail of at least ``PERIODIC_CHARS`` characters repeating one unit starts."""
    if len(tail) < PERIODIC_CHARS:
        return None
    end = len(tail)
    for period in range(1, MAX_PERIOD + 1):
        span = max(PERIODIC_CHARS, PERIODIC_REPEATS * period)
        if span > end or tail[-1] != tail[-1 - period]:  # the cheap test first: most periods fail it
            continue
        if not _periodic(tail, end - span, end, period):
            continue
        unit = tail[end - period : end]
        if unit.isspace():
            continue
        start = end - span
        while start > 0 and tail[start - 1] == tail[start - 1 + period]:
            start -= 1
        if len(set(unit)) == 1 and end - start <= MAX_RULE_CHARS:
            continue
        # Keep the first occurrence whole: the backward walk can overshoot into text that only
        # ends like the unit ("10.\n\n" before a paragraph ending "use.\n\n"), so its end is
        # the first sentence or line end at or past one unit on, when there is one.
        first = start + period
        end_of_first = _SENTENCE_END.search(tail, max(start, first - 2), min(end, first + period))
        return end_of_first.end() if end_of_first else first
    return None


def _periodic(text: str, start: int, end: int, period: int) -> bool:
    return text[start + period : end] == text[start : end - period]


def cut_before_loop(text: str, loop_start: int) -> str:
    """``text`` up to the last whole sentence that ends before ``loop_start``.

    With no sentence end before the loop (a loop can start in the first sentence), the text up
    to the end of the word the loop starts in is kept. A code block the cut leaves open is closed.
    """
    # Matched in the whole text: a sentence's end needs the space after it, which may lie past the cut.
    ends = [match.end() for match in _SENTENCE_END.finditer(text, 0, loop_start + 1) if match.end() <= loop_start]
    if ends:
        kept = text[: ends[-1]].rstrip()
    else:
        word_end = re.compile(r"\s").search(text, loop_start, loop_start + MAX_PERIOD)
        kept = text[: word_end.start() if word_end else loop_start].rstrip()
    if kept.count("```") % 2:
        kept += "\n```"  # the loop was inside a code block: close it, or the rest renders as code
    return kept
