"""Real-model check: a question about a paste of ≥ 60,000 characters on
the embedded SmolLM2 GGUF with a 2,048-token context, answered with every section read.

The whole reply runs through ``Chat.reply`` (no workspace, nothing stored): the paste does not
fit, so section workers read it one section at a time under the research token budget, then
the coordinator answers from their notes. Printed: the sections planned and read, every
request's prompt tokens, the tokens the research budget charged for it and the tokens
llama.cpp actually evaluated (they should agree within 16), its seconds, and the answer.
Exits non-zero unless every section was read (no "were not read" in the answer) and every
charge is within 16 tokens of what was evaluated.

    python bench/check_long_paste.py [--chars 60000] [--n-ctx 2048] [--time-budget 3600]
                                     [--worker-timeout 120] [--model PATH.gguf]

Not a test: on a busy 2-core machine it takes minutes. The answer's quality is not checked:
the model has 135M parameters.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from imprintd import settings as settings_mod  # noqa: E402
from imprintd.chat import Chat, ReplyRequest  # noqa: E402
from imprintd.context import sections as sec  # noqa: E402
from imprintd.messages import Message, ToolSpec  # noqa: E402
from imprintd.models.embedded import embedded_model_path  # noqa: E402
from imprintd.models.local import LocalModel  # noqa: E402

MAX_TOKENS = 128
SERVICES = [
    "gateway",
    "billing",
    "orders",
    "catalog",
    "search",
    "mailer",
    "reports",
    "auth",
    "inventory",
    "shipping",
    "audit",
    "metrics",
    "pricing",
    "cart",
    "notify",
    "export",
    "reviews",
    "returns",
]


@dataclass
class Row:
    kind: str
    prompt: int
    charged: int | None
    evaluated: int = 0
    generated: int = 0
    seconds: float = 0.0
    finish: str = ""


@dataclass
class Measured:
    """The real model, recording each request: what the budget charged and what llama.cpp evaluated."""

    model: LocalModel
    rows: list[Row] = field(default_factory=list)
    _charge: int | None = None

    @property
    def model_id(self) -> str:
        return self.model.model_id

    @property
    def n_ctx(self) -> int:
        return self.model.n_ctx

    @property
    def native_tools(self) -> bool:
        return self.model.native_tools

    @property
    def exact_counts(self) -> bool:
        return self.model.exact_counts

    def count_prompt(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
        return self.model.count_prompt(messages, tools)

    def count_message(self, message: Message) -> int:
        return self.model.count_message(message)

    def count_text(self, text: str) -> int:
        return self.model.count_text(text)

    def reusable_prefix(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> tuple[int, int]:
        # The budget asks this right before it reserves a research request.
        prompt, held = self.model.reusable_prefix(messages, tools)
        self._charge = prompt - held
        return prompt, held

    async def complete(self, messages, tools=(), *, max_tokens, **options):
        kind = (
            "worker"
            if not tools and messages[0].content == sec.WORKER_SYSTEM_PROMPT
            else "coordinator"
            if tools
            else "final answer"
        )
        row = Row(kind=kind, prompt=self.model.count_prompt(messages, tools), charged=None)
        self.rows.append(row)
        started = time.monotonic()
        self._charge = None
        # Every option passed on (the reasoning callback, a grammar, …): the model is asked as the daemon asks it.
        completion = await self.model.complete(messages, tools, max_tokens=max_tokens, **options)
        row.charged = self._charge  # the budget measures under the lock, in on_start
        row.seconds = time.monotonic() - started
        usage = completion.usage
        row.evaluated, row.generated, row.finish = (
            usage.evaluated_tokens,
            usage.generated_tokens,
            completion.finish_reason,
        )
        print(
            f"  ... {len(self.rows)} {row.kind}: prompt {row.prompt}, charged {row.charged}, evaluated "
            f"{row.evaluated}, generated {row.generated}, {row.seconds:.1f} s",
            flush=True,
        )
        return completion


def paste(chars: int) -> str:
    """A commented config of about ``chars`` characters; billing's port is changed at the very end."""
    blocks: list[str] = []
    index = 0
    while sum(map(len, blocks)) < chars:
        name = SERVICES[index % len(SERVICES)]
        blocks.append(
            f"# Block {index}: the {name} service, replica group {index // len(SERVICES)}. Ask its owners\n"
            f"# before changing anything below; dependants wait for its health check after a restart.\n"
            f'[services.{name}-{index}]\nimage = "shop/{name}:{2 + index % 3}.{index}"\n'
            f"port = {8100 + index}\nreplicas = {1 + index % 3}\n\n"
        )
        index += 1
    return "".join(blocks) + "# Changed on 30 October: billing moved to port 9443 for TLS.\n"


async def run(chars: int, n_ctx: int, time_budget: float, worker_timeout: float, path: Path) -> int:
    sec.WORKER_TIMEOUT_S = worker_timeout
    model = Measured(LocalModel(path, n_ctx=n_ctx))
    model.model.load()
    resolved = settings_mod.load({}, environ={}).apply(
        {"chat.n_ctx": n_ctx, "chat.max_tokens": MAX_TOKENS, "chat.research_time_budget": time_budget}, "check"
    )
    chat = Chat(resolved, model_factory=lambda settings: model)
    config = paste(chars)
    text = f"Here is our config file:\n\n{config}\nWhich port does the billing service use now?"
    progress: list[str] = []

    class Events:
        def begin(self, session_id, reply_id):
            pass

        def text(self, delta):
            pass

        def reasoning(self, delta):
            pass

        def progress(self, message, percentage=None):
            progress.append(message)

        def tool_step(self, step):
            pass

        async def ask_permission(self, request):
            return "reject"  # no MCP servers here; a tool that may act would not run

        def summary(self, text, first_seq, last_seq):
            pass

        def context_usage(self, usage):
            pass

    print(
        f"model {path.name}, n_ctx {n_ctx}, paste {len(text):,} characters "
        f"({model.count_text(text):,} tokens), token budget {resolved.settings.chat.research_token_budget:,}, "
        f"time budget {time_budget:g} s, worker deadline {worker_timeout:g} s",
        flush=True,
    )
    started = time.monotonic()
    outcome = await chat.reply(ReplyRequest(text=text, persist=False), Events())
    seconds = time.monotonic() - started

    planned = next((int(m.rsplit(" of ", 1)[1]) for m in progress if m.startswith("Analyzing section")), 0)
    workers = [row for row in model.rows if row.kind == "worker"]
    print(
        f"{'#':>3}  {'request':<12} {'prompt':>6} {'charged':>7} {'evaluated':>9} {'generated':>9} "
        f"{'seconds':>7}  finish"
    )
    for number, row in enumerate(model.rows, start=1):
        charged = "-" if row.charged is None else str(row.charged)
        print(
            f"{number:>3}  {row.kind:<12} {row.prompt:>6} {charged:>7} {row.evaluated:>9} {row.generated:>9} "
            f"{row.seconds:>7.1f}  {row.finish}"
        )
    charged_rows = [row for row in model.rows if row.charged is not None]
    off = max((abs(row.charged - row.evaluated) for row in charged_rows), default=0)
    print(f"sections: {len(workers)} read of {planned} planned; stop: {outcome.stop_reason}; {seconds:.0f} s in all")
    print(
        f"tokens: charged {sum(r.charged for r in charged_rows):,}, evaluated "
        f"{sum(r.evaluated for r in charged_rows):,} over {len(charged_rows)} research requests "
        f"(largest difference {off}); {sum(r.evaluated for r in model.rows):,} evaluated with the final answer"
    )
    for message in progress:
        if not message.startswith("Analyzing section"):
            print(f"progress: {message}")
    print(f"answer: {outcome.text!r}")
    every_section = planned > 0 and len(workers) == planned and "were not read" not in outcome.text
    verdict = "MET" if every_section and off <= 16 else "NOT MET"
    print(f"RESULT: every section read: {every_section}; charges within 16 of evaluated: {off <= 16}; {verdict}")
    return 0 if verdict == "MET" else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", type=int, default=60_000)
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--time-budget", type=float, default=3600)
    parser.add_argument(
        "--worker-timeout",
        type=float,
        default=sec.WORKER_TIMEOUT_S,
        help="one worker's deadline (the record's 120 s; raise it on a busy machine)",
    )
    parser.add_argument("--model", type=Path, default=None, help="a GGUF file (default: the embedded SmolLM2)")
    args = parser.parse_args()
    return asyncio.run(
        run(args.chars, args.n_ctx, args.time_budget, args.worker_timeout, args.model or embedded_model_path())
    )


if __name__ == "__main__":
    sys.exit(main())
