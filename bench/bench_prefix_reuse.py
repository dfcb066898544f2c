"""Prefix reuse across the rounds of one research reply (docs/decisions.md, "Research budget"), on the local provider.

Simulates one reply's research loop on the embedded SmolLM2 GGUF (or ``--model``): every round
sends the whole conversation, then appends an assistant tool call and a tool result of a few
hundred tokens, append-only, as the research loop does, until the context is full (or
``--rounds``). For each round it prints the prompt's tokens and the tokens llama.cpp actually
evaluated (``Usage.evaluated_tokens``), side by side, the ratio evaluated/prompt, and what the
round appended. Each round should evaluate only what it appended, so the ratio falls as the reply
grows; the target for the later rounds (the second half of those run) is at most 10%.

    python bench/bench_prefix_reuse.py [--rounds 24] [--n-ctx 8192] [--model PATH.gguf]

Not a test: the figures depend on the model and the template; nothing here is timed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from imprintd.messages import Message, ToolCall, ToolSpec, assistant, system, tool_result, user  # noqa: E402
from imprintd.models.embedded import embedded_model_path  # noqa: E402
from imprintd.models.local import LocalModel  # noqa: E402

TARGET = 0.10
MAX_TOKENS = 4  # each round's own output barely matters here: the bench is about prompts

INSTRUCTIONS = (
    "You are Imprint, a research assistant for the user's workspace. Before answering, search the "
    "workspace and read the files that matter. Cite every fact with its file and line range. "
    "Prefer primary sources (configuration, code) over notes. When two sources disagree, say so and "
    "name both. Keep answers short: a few sentences, then the sources. " * 3
)
TOOLS = [
    ToolSpec(
        name="search_workspace",
        description="Full-text search over the workspace's files.",
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
        },
    ),
    ToolSpec(
        name="read_file",
        description="Read lines of one workspace file.",
        parameters={
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "start_line": {"type": "integer"},
                "end_line": {"type": "integer"},
            },
            "required": ["path"],
        },
    ),
]


def tool_round(index: int) -> tuple[Message, Message]:
    """Round ``index``'s assistant call and its result (deterministic, a few hundred tokens)."""
    if index % 2 == 0:
        call = ToolCall(
            id=f"call_{index}",
            name="search_workspace",
            arguments={"query": f"embedding language support part {index}", "limit": 5},
        )
        lines = [
            f"docs/embeddings/part{index}.md:{10 * n + 1}-{10 * n + 4}: multilingual embedding model "
            f"e5-{index}-{n} indexes chunks of 512 tokens; search ranks by cosine similarity "
            f"and falls back to keyword search for short queries ({n})."
            for n in range(5)
        ]
    else:
        call = ToolCall(
            id=f"call_{index}",
            name="read_file",
            arguments={"path": f"src/search/index_{index}.py", "start_line": 1, "end_line": 30},
        )
        lines = [
            f"{n + 1:>3}  def rank_{index}_{n}(query, hits):  # order hits by score, ties by path" for n in range(12)
        ]
    return assistant("", tool_calls=(call,)), tool_result(call, "\n".join(lines))


async def run(rounds: int, n_ctx: int, path: Path) -> int:
    model = LocalModel(path, n_ctx=n_ctx)
    started = time.monotonic()
    model.load()
    print(
        f"model {path.name}, n_ctx {n_ctx}, {rounds} rounds, native tools: {model.native_tools}"
        f" (loaded in {time.monotonic() - started:.1f} s)"
    )
    messages: list[Message] = [
        system(INSTRUCTIONS),
        user("What can you tell me about multi-language embedding and searching here?"),
    ]
    print(
        f"{'round':>5}  {'prompt':>7}  {'evaluated':>9}  {'ratio':>6}  {'appended':>8}   (appended: tokens of the "
        f"call and result added since the previous round)"
    )
    ratios: list[float] = []
    extra: list[int] = []  # evaluated minus appended, per round after the first
    total_prompt = total_evaluated = 0
    appended_tokens = 0  # set at the end of each round, read from the second on
    for index in range(1, rounds + 1):
        result = await model.complete(messages, TOOLS, max_tokens=MAX_TOKENS, timeout=600)
        usage = result.usage
        ratio = usage.evaluated_tokens / usage.prompt_tokens
        appended = "" if index == 1 else f"{appended_tokens:>8}"
        print(f"{index:>5}  {usage.prompt_tokens:>7}  {usage.evaluated_tokens:>9}  {ratio:>6.1%}  {appended}")
        total_prompt += usage.prompt_tokens
        total_evaluated += usage.evaluated_tokens
        ratios.append(ratio)
        if index > 1:
            extra.append(usage.evaluated_tokens - appended_tokens)
        call, result_message = tool_round(index)
        appended_tokens = model.count_message(call) + model.count_message(result_message)
        messages += [call, result_message]
        if model.count_prompt(messages, TOOLS) + MAX_TOKENS > n_ctx:
            print(f"(stopping: the next round would not fit n_ctx {n_ctx})")
            break
    print(
        f"all rounds: {total_evaluated} tokens evaluated of {total_prompt} sent "
        f"({total_evaluated / total_prompt:.1%}); without prefix reuse every round evaluates its whole prompt"
    )
    if extra:
        print(
            f"evaluated minus appended, rounds 2+: {min(extra)} to {max(extra)} tokens "
            f"(the new generation prompt, less the turn header and any of the model's own output "
            f"that the appended call repeats)"
        )
    first_later = len(ratios) // 2 + 1
    later = ratios[first_later - 1 :]
    if len(ratios) < 2:
        print("RESULT: fewer than two rounds ran; use more --rounds or a larger --n-ctx")
        return 1
    worst = max(later)
    verdict = "MET" if worst <= TARGET else "NOT MET"
    print(
        f"RESULT: later rounds ({first_later}-{len(ratios)} of {len(ratios)}) evaluate "
        f"{min(later):.1%}-{worst:.1%} of their prompt; target <= {TARGET:.0%} {verdict}"
    )
    return 0 if verdict == "MET" else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--model", type=Path, default=None, help="a GGUF file (default: the embedded SmolLM2)")
    args = parser.parse_args()
    return asyncio.run(run(args.rounds, args.n_ctx, args.model or embedded_model_path()))


if __name__ == "__main__":
    sys.exit(main())
