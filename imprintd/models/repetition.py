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
  written ``LINE_REPEATS`` times in a row. Tables and lists repeat a shape, not a line: their
  rows differ in their cells, so they never trip it.
- **A periodic tail**: the last ``PERIODIC_CHARS`` characters or more, and at least
  ``PERIODIC_REPEATS`` whole units, repeat one unit of at most ``MAX_PERIOD`` characters
  (``_json`` 40 times, a phrase written over and over on one line). Units of whitespace alone (indentation) and a unit of one repeated character, up to
  ``MAX_RULE_CHARS`` (a long ``====`` rule), are not loops.
"""

from __future__ import annotations

import re

#: Consecutive identical lines that make a loop.
LINE_REPEATS = 4
#: Characters a line needs (stripped) to count: short lines ("}", "---", "") repeat legitimately.
MIN_LINE_CHARS = 12
#: Characters of the tail that must repeat one unit to count as a loop.
PERIODIC_CHARS = 160
#: Whole units a periodic tail needs besides its length (the same count as repeated lines).
PERIODIC_REPEATS = LINE_REPEATS
#: The longest unit a periodic tail is checked for.
MAX_PERIOD = 64
#: A run of one character (a rule of "=" or "-") may be this long before it counts.
MAX_RULE_CHARS = 400
#: The guard looks at most this far back: enough for every shape above.
_WINDOW = max(PERIODIC_REPEATS * MAX_PERIOD + MAX_PERIOD, MAX_RULE_CHARS + 1, 4096)

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
        start = _repeated_line(self._tail)
        if start is None:
            start = _periodic_tail(self._tail)
        if start is not None:
            self.looping = True
            self.loop_start = offset + start
        return self.looping

    @property
    def text(self) -> str:
        return "".join(self._text)


def _repeated_line(tail: str) -> int | None:
    """Where a run of ``LINE_REPEATS`` identical complete lines ending the text starts."""
    lines = tail.split("\n")
    complete = lines[:-1]  # the last one may still be growing
    if len(complete) < LINE_REPEATS:
        return None
    last = complete[-1].strip()
    if len(last) < MIN_LINE_CHARS:
        return None
    if any(line.strip() != last for line in complete[-LINE_REPEATS:]):
        return None
    run = LINE_REPEATS
    while run < len(complete) and complete[-run - 1].strip() == last:
        run += 1
    # Keep the first occurrence: the loop is the repeats after it.
    kept = "\n".join(lines[: len(complete) - run + 1])
    return len(kept) + 1


def _periodic_tail(tail: str) -> int | None:
    """Where a tail of at least ``PERIODIC_CHARS`` characters repeating one unit starts."""
    if len(tail) < PERIODIC_CHARS:
        return None
    end = len(tail)
    for period in range(1, MAX_PERIOD + 1):
        span = max(PERIODIC_CHARS, PERIODIC_REPEATS * period)
        if span > end or not _periodic(tail, end - span, end, period):
            continue
        unit = tail[end - period : end]
        if unit.isspace():
            continue
        start = end - span
        while start > 0 and tail[start - 1] == tail[start - 1 + period]:
            start -= 1
        if len(set(unit)) == 1 and end - start <= MAX_RULE_CHARS:
            continue
        # Keep one whole unit: what follows it is the repetition.
        return start + period
    return None


def _periodic(text: str, start: int, end: int, period: int) -> bool:
    return text[start + period : end] == text[start : end - period]


def cut_before_loop(text: str, loop_start: int) -> str:
    """``text`` up to the last whole sentence that ends before ``loop_start``.

    With no sentence end before the loop (a loop can start in the first sentence), the text up
    to the end of the word the loop starts in is kept.
    """
    head = text[:loop_start]
    ends = [match.end() for match in _SENTENCE_END.finditer(head)]
    if ends:
        return head[: ends[-1]].rstrip()
    word_end = re.compile(r"\s").search(text, loop_start, loop_start + MAX_PERIOD)
    return text[: word_end.start() if word_end else loop_start].rstrip()
