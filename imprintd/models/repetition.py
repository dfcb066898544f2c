"""The repetition guard: generation stops when the output starts looping (docs/decisions.md,
"Repetition guard").

Small models under greedy decoding fall into loops (``_json_json_json…``, one line written
again and again) and then spend the whole output allowance on them. Every provider feeds what
the model writes, piece by piece, to a ``RepetitionGuard``; once it says the text loops, the
provider stops generating (a remote stream is closed) and finishes with ``"repetition"``. The
text is then cut back to the last whole sentence before the loop, and the reply says that the
model repeated itself.

Three shapes count as a loop, all deterministic and checked after every piece in time bounded
by the window, whatever the text:

- **A repeated line or block**: the same line, of at least ``MIN_LINE_CHARS`` characters once
  stripped, written ``LINE_REPEATS`` times in a row (blank lines between them do not count); a
  list number at its start does not make it another line (``# 11. 1.1.1.1``, ``# 12. 1.1.1.1``).
  So is a block of up to ``MAX_BLOCK_LINES`` lines written ``LINE_REPEATS`` times in a row (a
  paragraph of several lines, too long for a periodic tail). Lines are compared whole up to
  ``WINDOW_CHARS`` characters.
- **A counter line**: one line written ``COUNTER_REPEATS`` times in a row that differs only in its
  numbers ("Attempt 7 waits 5 seconds.", "Attempt 8 waits 5 seconds.", …).
- **A periodic tail**: the last ``PERIODIC_CHARS`` characters or more, and at least
  ``PERIODIC_REPEATS`` whole units, repeat one unit of at most ``MAX_PERIOD`` characters
  (``_json`` 40 times, a sentence written over and over on one line). Units of whitespace alone
  (indentation) and a unit of one repeated character, up to ``MAX_RULE_CHARS`` (a long ``====``
  rule), are not loops.

Data repeats legitimately: inside a code block (fenced), an inline code span or a table row
(a line starting with ``|``), identical rows, zero bytes, a repeated sequence or a rule are a
loop only once the repeating run spans ``DATA_LOOP_CHARS`` characters, far past what an answer
shows (a 64-entry zero array is 384), and numbers that count up there are never one.
"""

from __future__ import annotations

import re

#: Consecutive identical lines that make a loop.
LINE_REPEATS = 4
#: Characters a line needs (stripped) to count: short lines ("}", "---", "") repeat legitimately.
#: A block counts when its longest line has them.
MIN_LINE_CHARS = 12
#: The most lines a repeated block may have: a paragraph of several lines, written again and again.
MAX_BLOCK_LINES = 16
#: Lines in a row that differ only in their numbers that make a loop (a numbered list of one
#: template up to 39 lines long is not one).
COUNTER_REPEATS = 40
#: Characters of the tail that must repeat one unit to count as a loop.
PERIODIC_CHARS = 160
#: Whole units a periodic tail needs besides its length (the same count as repeated lines).
PERIODIC_REPEATS = LINE_REPEATS
#: The longest unit a periodic tail is checked for: a long sentence written over and over.
MAX_PERIOD = 512
#: A run of one character (a rule of "=" or "-") may be this long before it counts.
MAX_RULE_CHARS = 400
#: The tail is checked for a period once this many characters came since the last check: a
#: loop runs on, so it is seen a few characters later, and a character at a time costs less.
PERIODIC_STRIDE = 16
#: Inside code or a table, a repeating run counts only once it spans this many characters.
DATA_LOOP_CHARS = 2048
#: The guard looks at most this far back for a period; a longer line is compared by its end.
WINDOW_CHARS = 16_384
#: Complete lines the guard remembers: enough for every line shape above.
_KEPT_LINES = max(LINE_REPEATS * MAX_BLOCK_LINES, COUNTER_REPEATS) * 2 + 8

#: A list item's number at the start of a line ("3. ", "# 12) "): counting, not content.
_LIST_NUMBER = re.compile(r"^#*\s*\d+[.)]\s+")
_DIGITS = re.compile(r"\d+")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_SENTENCE_END = re.compile(r"[.!?…:](?:[\"')\]]*)(?=\s)|\n")


class _Line:
    __slots__ = ("data", "end", "start", "template", "text", "width")

    def __init__(self, start: int, end: int, text: str, width: int, data: bool) -> None:
        self.start, self.end, self.text, self.width, self.data = start, end, text, width, data
        self.template = _DIGITS.sub("#", text)


class RepetitionGuard:
    """Fed the text a model writes, piece by piece; ``looping`` once it loops."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._size = 0
        self._tail = ""
        self._lines: list[_Line] = []
        self._line_start = 0  # where the line being written starts, in everything fed
        self._fenced = False  # inside a fenced code block, as of the line being written
        self._checked = 0  # characters fed when the tail was last checked for a period
        self.looping = False
        #: Where the loop starts in everything fed so far (valid once ``looping``).
        self.loop_start = 0

    def feed(self, piece: str) -> bool:
        """Take the next piece; True when the text (now) loops."""
        if self.looping or not piece:
            return self.looping
        self._text.append(piece)
        before = self._size
        self._size += len(piece)
        self._tail = (self._tail + piece)[-WINDOW_CHARS:]
        offset = self._size - len(self._tail)
        start = None
        if "\n" in piece:
            self._take_lines(before, piece)
            start = _repeated_lines(self._lines)
        if start is None and self._size - self._checked >= PERIODIC_STRIDE:
            self._checked = self._size
            current = self._tail[max(self._line_start - offset, 0) :]
            if current.strip():
                in_data = self._fenced or current.lstrip().startswith("|") or current.count("`") % 2 == 1
            else:  # a line just begun belongs with the one before (a table's next row)
                in_data = self._fenced or bool(self._lines and self._lines[-1].data)
            at = _periodic_tail(self._tail, in_data)
            start = None if at is None else offset + at
        if start is not None:
            self.looping = True
            self.loop_start = start
        return self.looping

    def _take_lines(self, before: int, piece: str) -> None:
        """The lines ``piece`` completed, remembered with whether they are data."""
        at = piece.find("\n")
        while at != -1:
            end = before + at  # the newline's place in everything fed
            offset = self._size - len(self._tail)
            line = self._tail[max(self._line_start - offset, 0) : end - offset]
            stripped = line.strip()
            fence = _FENCE.match(line) is not None
            if fence:
                self._fenced = not self._fenced
            data = fence or self._fenced or stripped.startswith("|")
            if stripped:
                self._lines.append(_Line(self._line_start, end, _LIST_NUMBER.sub("", stripped), len(stripped), data))
                del self._lines[:-_KEPT_LINES]
            self._line_start = end + 1
            at = piece.find("\n", at + 1)

    @property
    def text(self) -> str:
        return "".join(self._text)


def _repeated_lines(lines: list[_Line]) -> int | None:
    """Where a loop of lines ending the text starts (past the first occurrence), or None.

    A run of ``LINE_REPEATS`` identical lines, or blocks of up to ``MAX_BLOCK_LINES`` lines
    (the smallest block that repeats wins: one line written again is a block of one); blank
    lines between do not break it. Or ``COUNTER_REPEATS`` prose lines differing only in their
    numbers. In data the run must also span ``DATA_LOOP_CHARS``.
    """
    texts = [line.text for line in lines]
    for size in range(1, MAX_BLOCK_LINES + 1):
        if len(lines) < LINE_REPEATS * size:
            break
        block = texts[-size:]
        if max(line.width for line in lines[-size:]) < MIN_LINE_CHARS:
            continue
        if any(texts[-size * (n + 1) : len(texts) - size * n] != block for n in range(1, LINE_REPEATS)):
            continue
        run = LINE_REPEATS
        while size * (run + 1) <= len(texts) and texts[-size * (run + 1) : len(texts) - size * run] == block:
            run += 1
        first = lines[-size * run]
        if any(line.data for line in lines[-size * run :]) and lines[-1].end - first.start < DATA_LOOP_CHARS:
            continue
        # Keep the first occurrence: the loop is the repeats after it.
        return lines[-size * run + size - 1].end + 1
    if len(lines) >= COUNTER_REPEATS:
        last = lines[-COUNTER_REPEATS:]
        template = last[-1].template
        if (
            last[-1].width >= MIN_LINE_CHARS
            and template != last[-1].text
            and all(line.template == template and not line.data for line in last)
        ):
            return last[0].end + 1
    return None


def _periodic_tail(tail: str, in_data: bool) -> int | None:
    """Where a tail of at least ``PERIODIC_CHARS`` characters repeating one unit starts (in
    data: a run of at least ``DATA_LOOP_CHARS``)."""
    if len(tail) < PERIODIC_CHARS:
        return None
    end = len(tail)
    floor = max(PERIODIC_CHARS, DATA_LOOP_CHARS) if in_data else PERIODIC_CHARS
    # The cheap tests first, in C: only periods whose unit ends like the tail are looked at.
    before = tail[-MAX_PERIOD - 1 : -1]
    found = before.rfind(tail[-1])
    # Every period within a run of one character ("=====") has the same unit as period 1.
    same = end - len(tail.rstrip(tail[-1]))
    while found != -1:
        period = len(before) - found
        found = before.rfind(tail[-1], 0, found if period != 1 else len(before) - same)
        span = max(floor, PERIODIC_REPEATS * period)
        if span > end or tail[-16:] != tail[-16 - period : end - period]:
            continue
        if not _periodic(tail, end - span, end, period):
            continue
        unit = tail[end - period : end]
        if unit.isspace():
            continue
        start = _run_start(tail, end - span, period)
        if len(set(unit)) == 1 and end - start <= max(MAX_RULE_CHARS, DATA_LOOP_CHARS if in_data else 0):
            continue
        # Keep the first occurrence whole: the backward walk can overshoot into text that only
        # ends like the unit ("10.\n\n" before a paragraph ending "use.\n\n"), so its end is
        # the first sentence or line end at or past one unit on, when there is one.
        first = start + period
        end_of_first = _SENTENCE_END.search(tail, max(start, first - 2), min(end, first + period))
        return end_of_first.end() if end_of_first else first
    return None


def _run_start(text: str, start: int, period: int) -> int:
    """How far back from ``start`` the text keeps repeating with ``period``: in blocks, then
    characters, so a long run costs a few slice comparisons, not a character loop."""
    block = max(period, 256)
    while start >= block and text[start - block : start] == text[start - block + period : start + period]:
        start -= block
    while start > 0 and text[start - 1] == text[start - 1 + period]:
        start -= 1
    return start


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
