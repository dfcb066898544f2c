"""What redaction costs on text dense in what the secret rules look for (SECURITY.md).

1. ``redact`` and the rule set alone (``secret_rules.find``) on 1 MB of text of each density,
   side by side with 1 MB of plain prose (the baseline): CPU seconds a megabyte and the ratio
   to prose. Densities: ``api.`` over and over, every keyword of the rule set in a row (with
   spaces, with ``=`` between, each given a value), ``key=abc``, and ``curl`` (the two
   ``curl-auth-*`` rules, which may look five lines on, are the costliest tries; with
   ``\r\n\r\n`` after each, every line holds one; a line of CRs after each; a ``-H`` header
   after each), and ``key=`` given random values of 16 and of 150 characters (a finding of the
   generic rule each, every one checked against its allowlists). A digest of each output is printed: a change that should keep redaction as it
   was prints the same digests before and after.
2. What a summary attempt redacts as the session grows: the summarizer's request
   (``summarizer_request``) over the first 10, 50 and 150 messages of a session whose 2 KB
   messages are dense in keywords, against one of plain prose of the same sizes. A session's
   per-chat cost does not grow with density when the ratio stays flat.
3. What each reply's covered material costs (the summary block's list of a session's pastes
   and tool calls, redacted): the first reply over N covered exchanges, and a later one over
   the same (short texts' redactions are remembered), dense against prose.

    python bench/bench_redact.py [--repeat 3]

Not a test; the machine is shared, so CPU time (``time.process_time``) and ratios are printed,
the best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import string
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from imprintd import redact as redaction  # noqa: E402
from imprintd import secret_rules  # noqa: E402
from imprintd.context.summary import (  # noqa: E402
    CLIP_LEVELS,
    StoredSummary,
    covered_material,
    summarizer_request,
    summary_block,
)
from imprintd.messages import Message, ToolCall  # noqa: E402
from imprintd.redact import redact  # noqa: E402

PROSE = "The service reads its settings at start and answers on the port it was given. "


def sized(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def densities() -> dict[str, str]:
    keywords = sorted({keyword for rule in secret_rules.load().rules for keyword in rule.keywords})
    return {
        "api.": "api. ",
        "every keyword": " ".join(keywords) + " ",
        "every keyword, =": "=".join(keywords) + "=",
        "every keyword given a value": "".join(f"{k}=abcdefghijk123 " for k in keywords),
        "key=abc": "key=abc ",
        "curl": "curl ",
        "curl, CR LF twice": "curl\r\n\r\n",
        "curl, a line of CRs": "curl\r\r\r\r\r\r\r\r\r\r\n",
        "curl -H, CR LF twice": "curl -H x\r\n\r\n",
        "key=, a random value": "".join(f"key={random_value(16, seed)} " for seed in range(2_000)),
        "key=, 150 random characters": "".join(f"key={random_value(150, seed)} " for seed in range(500)),
    }


def random_value(length: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(length))


def best(function: Callable[[], object], repeat: int, *, remembered: bool = False) -> float:
    """The least CPU time of ``repeat`` runs; each run redacts afresh unless ``remembered``."""
    times = []
    for _ in range(repeat):
        if not remembered:
            redaction._REMEMBERED = redaction._Remembered()  # nothing remembered
        start = time.process_time()
        function()
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    secret_rules.load()  # compiled once, outside the timings

    megabyte = 1_000_000
    prose = sized(PROSE, megabyte)
    base_redact = best(lambda: redact(prose), args.repeat)
    base_rules = best(lambda: list(secret_rules.find(prose)), args.repeat)
    print("1 MB of text, CPU seconds (ratio to prose)")
    print(f"  {'text':30s} {'redact':>15s} {'rules alone':>15s}   output digest")
    print(f"  {'prose (baseline)':30s} {base_redact:8.2f}        {base_rules:8.2f}          {digest(redact(prose))}")
    for name, unit in densities().items():
        text = sized(unit, megabyte)
        spent = best(lambda text=text: redact(text), args.repeat)
        rules = best(lambda text=text: list(secret_rules.find(text)), args.repeat)
        print(
            f"  {name:30s} {spent:8.2f} ({spent / base_redact:4.1f}x) {rules:8.2f} ({rules / base_rules:4.1f}x)"
            f"   {digest(redact(text))}"
        )

    print("\nThe summarizer's request over a session's first N messages of 2 KB, CPU seconds")
    dense_unit = densities()["every keyword given a value"]
    for count in (10, 50, 150):
        spent = {}
        for name, unit in (("prose", PROSE), ("dense", dense_unit)):
            messages = [
                Message(role="user" if seq % 2 else "assistant", content=sized(unit[seq % 50 :] + unit, 2000), seq=seq)
                for seq in range(1, count + 1)
            ]
            spent[name] = best(
                lambda messages=messages: summarizer_request("", messages, clip_chars=CLIP_LEVELS[0]), args.repeat
            )
        print(
            f"  {count:4d} messages: prose {spent['prose']:.3f}, dense {spent['dense']:.3f} ({spent['dense'] / spent['prose']:.1f}x)"
        )

    print("\nEach reply's covered material over N exchanges (a 2 KB paste and a search each), CPU seconds")
    for count in (10, 50, 150):
        spent = {}
        for name, unit in (("prose", PROSE), ("dense", dense_unit)):
            session = exchanges(unit, count)
            state = StoredSummary(text="- Earlier.", first_seq=1, last_seq=3 * count)
            first = best(lambda s=session, st=state: summary_block(st, covered_material(s)), args.repeat)
            later = best(
                lambda s=session, st=state: summary_block(st, covered_material(s)), args.repeat, remembered=True
            )
            spent[name] = (first, later)
        print(
            f"  {count:4d} exchanges: first reply prose {spent['prose'][0]:.4f}, dense {spent['dense'][0]:.4f}"
            f" ({spent['dense'][0] / spent['prose'][0]:.1f}x); later replies prose {spent['prose'][1]:.4f},"
            f" dense {spent['dense'][1]:.4f} ({spent['dense'][1] / spent['prose'][1]:.1f}x)"
        )


def exchanges(unit: str, count: int) -> list[Message]:
    """``count`` exchanges: a 2 KB paste made of ``unit``, a search call, its result."""
    messages = []
    for n in range(count):
        seq = 3 * n + 1
        call = ToolCall(id=f"c{seq}", name="search", arguments={"query": f"{n} {unit[:60]}"})
        messages += [
            Message(role="user", content=sized(unit[n % 50 :] + unit, 2000), seq=seq),
            Message(role="assistant", content="", tool_calls=(call,), seq=seq + 1),
            Message(role="tool", content="r" * 120, tool_call_id=call.id, name="search", seq=seq + 2),
        ]
    return messages


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


if __name__ == "__main__":
    main()
