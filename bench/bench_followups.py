"""Follow-ups on the local provider: how much of each coordinator prompt llama.cpp evaluates.

Drives ``Chat.reply`` (the real reply: summary step, fitting, research rounds, final answer) on
the embedded SmolLM2 at a 2,048-token context, in one run:

(a) one session of ``--follow-ups`` follow-ups (600-character questions by default) that
    outgrows the context;
(b) the first follow-up after a restart (a new ``Chat`` and model on the same cache dir);
(c) a follow-up after another session ran in between.

For each it prints the share of coordinator prompt tokens llama.cpp evaluated, measured
(``Usage.evaluated_tokens``), beside today's baseline, computed from the same run: the prompts
fitting gave before this change (one exchange dropped per reply, ``drop_step`` of 1) under
llama.cpp's own prefix reuse with no saved states (the one context holds the last request of
any kind, nothing after a restart), i.e. ``prompt − common prefix with what the context held``.
Then time to first token of the restart follow-up against a cold evaluation of the same prompt
on a fresh model, both measured, and whether their greedy answers agree.

    python bench/bench_followups.py [--follow-ups 13] [--question-chars 600] [--max-tokens 64]

Targets: each share ≤ 0.25; first token after a restart ≤ 0.3× cold. Not a test.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio  # noqa: E402

from imprintd import settings as settings_mod  # noqa: E402
from imprintd.context import fitting  # noqa: E402
from imprintd.models.base import request_scope  # noqa: E402
from imprintd.models.embedded import embedded_model_path  # noqa: E402
from imprintd.models.local import LocalModel  # noqa: E402
from imprintd.models.state_cache import common_prefix, states_folder  # noqa: E402
from imprintd.research import loop as loop_mod  # noqa: E402

SHARE_TARGET = 0.25
TTFT_TARGET = 0.3
TOPICS = [
    "the billing service's retry policy",
    "how the gateway routes requests to the inventory service",
    "why the nightly export job sometimes runs twice",
    "the cache invalidation rules of the product catalogue",
    "what the on-call engineer checks first during an outage",
    "how database migrations are rolled out to staging",
    "the rate limits of the public API",
    "how feature flags are cleaned up after a release",
    "the format of the audit log entries",
    "what happens when a payment provider times out",
    "how search results are ranked for new products",
    "the backup schedule of the order database",
    "how the mobile app learns about a forced update",
    "the steps of the quarterly access review",
    "how the recommendation model is retrained",
    "why two warehouses report different stock counts",
    "how support tickets are routed to the right team",
    "the limits on file uploads in the admin panel",
]


def question(number: int, chars: int) -> str:
    """A follow-up of about ``chars`` characters, different in every reply."""
    topic = TOPICS[number % len(TOPICS)]
    text = f"Question {number}: tell me about {topic}."
    filler = (
        f" Keep in mind what we said before about {topic}, and explain it the way you would to a new"
        " colleague who joined the team this week and has not read the design notes yet."
    )
    while len(text) < chars:
        text += filler
    return text[:chars]


class NoEvents:
    def begin(self, session_id, reply_id): ...
    def text(self, delta): ...
    def text_was_preamble(self): ...
    def progress(self, message, percentage=None): ...
    def tool_step(self, step): ...
    def summary(self, text, first_seq, last_seq): ...


@dataclass
class Record:
    """One model request as it ran, and what today's fitting would have sent instead."""

    scenario: str
    coordinator: bool
    prompt: array
    evaluated: int
    text: str
    baseline_prompt: array
    first_token_s: float | None
    restored: tuple | None
    messages: list = field(default_factory=list)
    tools: list = field(default_factory=list)


class Bench:
    def __init__(self, max_tokens: int) -> None:
        self.records: list[Record] = []
        self.scenario = "first"
        self.max_tokens = max_tokens
        self._sliding: list = []  # today's fitting of each coordinator round, in order
        real_fit = loop_mod.fit_prompt

        def fit_both(model, **kwargs):
            fitted = real_fit(model, **kwargs)
            stable_step = fitting.drop_step
            fitting.drop_step = lambda *args: 1  # exchanges one at a time: the fitting before this change
            try:
                self._sliding.append(real_fit(model, **kwargs).messages)
            finally:
                fitting.drop_step = stable_step
            return fitted

        loop_mod.fit_prompt = fit_both

    def model_factory(self, chat):
        bench = self

        class Recorded(LocalModel):
            async def complete(self, messages, tools=(), *, max_tokens, timeout=None, on_text=None, **hooks):
                scope = request_scope()
                # A research round follows its fitting; the final answer and side requests do not.
                coordinator = scope is not None and scope.keep and bool(bench._sliding)
                completion = await super().complete(
                    messages, tools, max_tokens=max_tokens, timeout=timeout, on_text=on_text, **hooks
                )
                prompt = array("i", self.prompt_tokens(messages, tools))
                baseline = prompt
                if coordinator:
                    baseline = array("i", self.prompt_tokens(bench._sliding.pop(0), tools))
                bench.records.append(
                    Record(
                        scenario=bench.scenario,
                        coordinator=coordinator,
                        prompt=prompt,
                        evaluated=completion.usage.evaluated_tokens,
                        text=completion.text,
                        baseline_prompt=baseline,
                        first_token_s=self.last_first_token_s,
                        restored=self.last_restore,
                        messages=list(messages),
                        tools=list(tools),
                    )
                )
                return completion

        return Recorded(
            embedded_model_path(),
            n_ctx=chat.n_ctx,
            state_cache_memory=chat.state_cache_memory,
            state_cache_disk=chat.state_cache_disk,
            state_folder=states_folder(settings_mod.cache_dir()),
        )

    def baseline(self, model: LocalModel) -> dict[str, tuple[int, int]]:
        """Per scenario: (coordinator prompt tokens, evaluated) today, from the prompts of this run."""
        held = array("i")
        totals: dict[str, tuple[int, int]] = {}
        for record in self.records:
            if record.scenario == "restart" and not any(
                r.scenario == "restart" for r in self.records[: self.records.index(record)]
            ):
                held = array("i")  # a new process holds nothing
            prompt = record.baseline_prompt
            common = common_prefix(held, prompt)
            reused = common - 1 if common and common == len(prompt) else common
            if record.coordinator:
                prompt_sum, evaluated_sum = totals.get(record.scenario, (0, 0))
                totals[record.scenario] = (prompt_sum + len(prompt), evaluated_sum + len(prompt) - reused)
            held = prompt + array("i", model.load().tokenize(record.text))
        return totals

    def measured(self) -> dict[str, tuple[int, int]]:
        totals: dict[str, tuple[int, int]] = {}
        for record in self.records:
            if record.coordinator:
                prompt_sum, evaluated_sum = totals.get(record.scenario, (0, 0))
                totals[record.scenario] = (prompt_sum + len(record.prompt), evaluated_sum + record.evaluated)
        return totals


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--follow-ups", type=int, default=13)
    parser.add_argument("--question-chars", type=int, default=600)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--n-ctx", type=int, default=2048)
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="imprint-bench-followups-"))
    for name in ("DATA", "CACHE"):
        os.environ[f"IMPRINT_{name}_DIR"] = str(folder / name.lower())
    os.environ["IMPRINT_CONFIG"] = str(folder / "config.toml")

    from imprintd.chat import Chat
    from imprintd.reply import ReplyRequest

    resolved = settings_mod.load({"chat.n_ctx": args.n_ctx, "chat.max_tokens": args.max_tokens})
    bench = Bench(args.max_tokens)
    started = time.perf_counter()
    number = 0

    async def ask(chat: Chat, session: str | None) -> str:
        nonlocal number
        number += 1
        outcome = await chat.reply(
            ReplyRequest(text=question(number, args.question_chars), session_id=session), NoEvents()
        )
        return outcome.session_id

    chat = Chat(resolved, model_factory=bench.model_factory)
    first = await ask(chat, None)
    bench.scenario = "follow-ups"
    for _ in range(args.follow_ups):
        await ask(chat, first)
    bench.scenario = "other session"
    other = await ask(chat, None)
    await ask(chat, other)
    bench.scenario = "switch"
    await ask(chat, first)
    chat.close()  # queued states reach the disk, as on a daemon's shutdown

    bench.scenario = "restart"
    chat = Chat(resolved, model_factory=bench.model_factory)
    await ask(chat, first)
    restarted = next(r for r in bench.records if r.scenario == "restart" and r.coordinator)
    model = chat.model()
    assert isinstance(model, LocalModel)
    chat.close()
    elapsed = time.perf_counter() - started

    cold = LocalModel(embedded_model_path(), n_ctx=args.n_ctx)
    cold.load()
    completion = await cold.complete(restarted.messages, restarted.tools, max_tokens=args.max_tokens)
    cold_first = cold.last_first_token_s or 0.0

    today = bench.baseline(model)
    now = bench.measured()
    print(
        f"Follow-ups on {model.name}, n_ctx {args.n_ctx}, {args.question_chars}-character questions, "
        f"max_tokens {args.max_tokens} ({elapsed:.0f} s)"
    )
    print("share of coordinator prompt tokens evaluated (target <= 0.25):")
    print(f"  {'scenario':<34} {'today (computed)':>18} {'with states (measured)':>24}")
    rows = [
        ("follow-ups", f"(a) {args.follow_ups} follow-ups"),
        ("restart", "(b) first follow-up after a restart"),
        ("switch", "(c) follow-up after another session"),
    ]
    for key, label in rows:
        base_prompt, base_evaluated = today.get(key, (0, 0))
        prompt, evaluated = now.get(key, (0, 0))
        base_share = base_evaluated / base_prompt if base_prompt else 0.0
        share = evaluated / prompt if prompt else 0.0
        print(
            f"  {label:<34} {base_share:>8.2f} ({base_evaluated:>5}/{base_prompt:<5})"
            f" {share:>10.2f} ({evaluated:>5}/{prompt:<5})"
        )
    per_reply = [(r.evaluated, len(r.prompt)) for r in bench.records if r.coordinator and r.scenario == "follow-ups"]
    print("  (a) per coordinator request, evaluated/prompt:", " ".join(f"{e}/{p}" for e, p in per_reply))
    side = [r for r in bench.records if not r.coordinator]
    print(f"  side requests (summary, workers, final answers from notes): {len(side)}")
    restored_first = restarted.first_token_s or 0.0
    print("time to first token, first follow-up after a restart (target <= 0.3x cold):")
    print(
        f"  restored from {restarted.restored[2] if restarted.restored else 'nothing'}: {restored_first * 1000:.0f} ms;"
        f" cold: {cold_first * 1000:.0f} ms; ratio {restored_first / cold_first if cold_first else 0:.2f}x;"
        f" same greedy answer: {'yes' if completion.text == restarted.text else 'no'}"
    )
    stats = model.states.stats if model.states else {}
    print(f"  states after the restart: {stats}")
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
