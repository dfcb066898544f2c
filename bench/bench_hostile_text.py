"""Does hostile text cost linear time in the scans over model and user text (SECURITY.md, "Bounds")?

Each worst input found is run at a size and at four times that size; the ratio of CPU times
should stay near 4 (a superlinear scan shows 8 or more):

- an answer's citations, through what a reply does with them (``citations.plain`` while it
  streams, then ``citations.sources`` over the passages): an unclosed ``[1, 2, 3, …`` list,
  closed invalid citations (``[9]`` when 3 results exist), valid ones (``[1]``) in one
  sentence, and a bracket of thousands of digits;
- the repetition guard, fed 4-character pieces of text that never loops but keeps it
  checking (lines that almost repeat, one long line of numbers);
- the first look's query from a question of one long word, of hyphenated words, of a compound
  ending in a long word and of one compound of many parts;
- the answer filter and the reasoning splitters, fed a reply a character at a time as a model
  streams it: a remote answer of spaces (the remote provider's whole text path), ``[`` or a fence
  then spaces (a JSON call that never opens), spaces in Mistral's and in a thinking model's
  thoughts;
- redaction (``redact``, which the summarizer and each reply's covered material run) of text
  dense in the secret rules' keywords, and of ``curl`` followed by line breaks of every mix:
  CRs on one line (gitleaks' curl rules once read them in n**5 ways: 40 CRs took seconds,
  80 hours), CR LF twice, lines of only CRs, and a ``-H`` flag on each line; and of runs of one
  letter, ``sk-``, ``ab_`` and ``a=``; the summarizer's request over one message of ``AccountKey=``
  repeated (only its clipped ends are redacted, so its cost should stay flat, near 1).

    python bench/bench_hostile_text.py [--size 67000]

Not a test; CPU time (``time.process_time``), best of three, so other load matters less.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from imprintd import secret_rules  # noqa: E402
from imprintd.context.summary import summarizer_request  # noqa: E402
from imprintd.messages import ToolSpec, assistant, user  # noqa: E402
from imprintd.models.chat_formats.calls import VisibleTextFilter  # noqa: E402
from imprintd.models.chat_formats.hermes import HERMES  # noqa: E402
from imprintd.models.chat_formats.reasoning import THINK, ReasoningSplitter  # noqa: E402
from imprintd.models.chat_formats.table import BY_NAME  # noqa: E402
from imprintd.models.remote_reply import _Stream  # noqa: E402
from imprintd.models.repetition import RepetitionGuard  # noqa: E402
from imprintd.redact import redact  # noqa: E402
from imprintd.research import citations, first_look  # noqa: E402
from imprintd.research.citations import Passage  # noqa: E402

RULES = secret_rules.load()  # compiled once, outside the timings

PASSAGES = {
    n: Passage(number=n, kind="file", label=f"a.py:{n}", text=f"VALUE_{n} = {n}", path="a.py") for n in (1, 2, 3)
}


def reply(answer: str) -> None:
    citations.plain(answer, PASSAGES, "written")
    citations.sources(answer, PASSAGES)


def guard(text: str) -> None:
    watcher = RepetitionGuard()
    for at in range(0, len(text), 4):
        if watcher.feed(text[at : at + 4]):
            raise AssertionError("not a loop")


def summarized(text: str) -> None:
    summarizer_request("", [user(text + "\npassword: hunter2", seq=1), assistant("ok", seq=2)])


TOOLS = (ToolSpec(name="search", description="Search.", parameters={"type": "object", "properties": {}}),)


def remote_answer(text: str) -> None:
    """The remote provider's path for streamed text: its think splitter, key mask and filter."""
    stream = _Stream(filter=VisibleTextFilter(TOOLS, HERMES.syntax), on_text=None)
    for character in text:
        stream.text(character)
    stream.parsed(TOOLS)


def answer_filter(format_name: str) -> Callable[[str], object]:
    def run(text: str) -> object:
        visible = VisibleTextFilter(TOOLS, BY_NAME[format_name].syntax)
        for character in text:
            visible.feed(character)
        return visible.finish()

    return run


def thoughts(text: str) -> None:
    splitter = ReasoningSplitter(THINK, opened=True)
    for character in text:
        splitter.feed(character)
    splitter.finish()


def word(n: int) -> str:
    """A made-up word for ``n``: no two nearby lines differ only in numbers."""
    letters = "etaoinshrdlucmfwypvbgk"
    n = n * 7919 + 13
    out = []
    while n:
        n, digit = divmod(n, len(letters))
        out.append(letters[digit])
    return "".join(out)


def sized(unit: Callable[[int], str], size: int) -> str:
    out, n = [], 0
    total = 0
    while total < size:
        piece = unit(n)
        out.append(piece)
        total += len(piece)
        n += 1
    return "".join(out)[:size]


CASES: dict[str, tuple[Callable[[str], object], Callable[[int], str]]] = {
    "citations: an unclosed [1, 2, 3, … list": (reply, lambda n: "The list [" if n == 0 else f"{n % 9 + 1}, "),
    "citations: closed invalid [9] citations": (reply, lambda n: "It holds [9]. "),
    "citations: valid [1] in one sentence": (reply, lambda n: "VALUE_1 is 1 [1] "),
    "citations: a bracket of digits": (reply, lambda n: "See [" if n == 0 else "1234567890"),
    "repetition guard: lines that almost repeat": (
        guard,
        lambda n: f"The {word(n)} reads the {word(n * 7 + 3)} file.\n",
    ),
    "repetition guard: a long line of numbers": (guard, lambda n: f"{n * 7919 % 100003} "),
    "first look: one long word": (lambda text: first_look.query(text, []), lambda n: "a"),
    "first look: hyphenated words": (lambda text: first_look.query(text, []), lambda n: f"w{n}-x{n} "),
    "first look: a compound ending in a long word": (
        lambda text: first_look.query(text, []),
        lambda n: "keep-alive" if n == 0 else "a",
    ),
    "first look: a compound of many parts": (lambda text: first_look.query(text, []), lambda n: "ab-"),
    "remote answer: spaces": (remote_answer, lambda n: "a" if n == 0 else " "),
    "answer filter: [ then spaces (json-fallback)": (answer_filter("json-fallback"), lambda n: "[" if n == 0 else " "),
    "answer filter: a fence then spaces": (answer_filter("json-fallback"), lambda n: "```" if n == 0 else " "),
    "answer filter: spaces (mistral)": (answer_filter("mistral"), lambda n: "a" if n == 0 else " "),
    "reasoning: spaces in the thoughts": (thoughts, lambda n: "a" if n == 0 else " "),
    "redaction: every keyword given a value": (
        redact,
        lambda n: "".join(f"{k}=abcdefghijk{n} " for k in sorted({k for r in RULES.rules for k in r.keywords})),
    ),
    "redaction: one letter": (redact, lambda n: "x"),
    "redaction: sk- over and over": (redact, lambda n: "sk-"),
    "redaction: ab_ over and over": (redact, lambda n: "ab_"),
    "redaction: a= over and over": (redact, lambda n: "a="),
    "summarizer: one message of AccountKey=": (summarized, lambda n: "AccountKey="),
    "redaction: curl and CRs on one line": (redact, lambda n: "curl" if n == 0 else "\r"),
    "redaction: curl, CR LF twice": (redact, lambda n: "curl\r\n\r\n"),
    "redaction: curl, a line of only CRs": (redact, lambda n: "curl\n\r\r\r\r\r\r\r\r\n"),
    "redaction: curl -H, CR LF twice": (redact, lambda n: "curl -H x\r\n\r\n"),
}


def best(function: Callable[[], object]) -> float:
    times = []
    for _ in range(3):
        start = time.process_time()
        function()
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=67_000, help="characters of the smaller input (4x: ~269 KB)")
    args = parser.parse_args()
    print(f"{'input':45s} {args.size:>9,} ch {4 * args.size:>9,} ch   ratio (4 = linear)")
    for name, (run, unit) in CASES.items():
        small, large = sized(unit, args.size), sized(unit, 4 * args.size)
        first = best(lambda small=small, run=run: run(small))
        second = best(lambda large=large, run=run: run(large))
        print(f"{name:45s} {first:9.3f} s   {second:9.3f} s   {second / max(first, 1e-9):5.1f}")


if __name__ == "__main__":
    main()
