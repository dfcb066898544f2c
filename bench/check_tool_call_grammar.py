"""Do the embedded model's tool calls parse and validate? With and without the call grammar.

Each request is what a research round sends (``search`` and ``read_file`` offered) with a
question that asks for a lookup, under two system prompts: the daemon's own (with its tool
strategy), and one line telling the model to use the tools, under which the embedded model
opens calls more often. Every request is
made twice in the same process, side by side: once with the grammar a call the model opens is
finished under (``models/chat_formats/grammar.py``), once with the model left free. Each completion is
one of: no call, a valid call (it parses, names an offered tool, and its arguments pass the
tool's own check), or an invalid one. Also reported: the time of the requests that opened a
call, with the grammar against without. Not a test: the figures go in docs/benchmarks.md.

    python bench/check_tool_call_grammar.py [--n-ctx 2048] [--max-tokens 200] [--show]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imprintd import prompts  # noqa: E402
from imprintd.messages import system, user  # noqa: E402
from imprintd.models.base import Completion  # noqa: E402
from imprintd.models.embedded import embedded_model_path  # noqa: E402
from imprintd.models.local import LocalModel  # noqa: E402
from imprintd.tools.base import ToolError, parse_arguments  # noqa: E402
from imprintd.tools.workspace import ReadFileArguments, ReadFileTool, SearchArguments, SearchTool  # noqa: E402

TOOLS = [SearchTool.spec, ReadFileTool.spec]
ARGUMENTS = {"search": SearchArguments, "read_file": ReadFileArguments}
QUESTIONS = [
    "Read the file src/app.py.",
    "Read httpx/_config.py and tell me the default timeout.",
    "Search the workspace for DEFAULT_MAX_REDIRECTS.",
    "Find where MAX_URL_LENGTH is defined.",
    "Open httpx/_client.py at line 120.",
    "Show me lines 1 to 40 of README.md.",
    "Use the search tool to find the retry limit.",
    "Look up how many keep-alive connections the pool keeps.",
    "Which file defines the Signer class? Search for it.",
    "Search for 'follow_redirects' and read the file it is in.",
    "Read the first 30 lines of pyproject.toml.",
    "Find the tests for the URL parser.",
    "Where is the user agent string set? Look it up.",
    "Call read_file on docs/index.md.",
    "Search the code for TooManyRedirects.",
    "Read setup.cfg from line 10.",
]


@dataclass
class Outcome:
    kind: str  # "none", "valid" or "invalid"
    detail: str
    seconds: float


def judge(completion: Completion) -> tuple[str, str]:
    if completion.tool_call_error:
        return "invalid", completion.tool_call_error
    if not completion.tool_calls:
        return "none", completion.text[:80]
    for call in completion.tool_calls:
        try:
            parse_arguments(call.name, call.arguments, ARGUMENTS[call.name])
        except ToolError as error:
            return "invalid", str(error)
    return "valid", "; ".join(f"{c.name}({c.arguments})" for c in completion.tool_calls)


SYSTEMS = {
    "daemon": prompts.system_prompt(tool_lines=(prompts.TOOL_STRATEGY, prompts.CITATIONS)),
    "told": "You answer questions about the user's workspace. Use the tools.",
}


async def ask(model: LocalModel, prompt: str, question: str, max_tokens: int, grammar: bool) -> Outcome:
    model._tool_call_grammar = grammar  # as LocalModel(tool_call_grammar=...) sets it
    messages = [system(prompt), user(question)]
    started = time.perf_counter()
    completion = await model.complete(messages, TOOLS, max_tokens=max_tokens)
    seconds = time.perf_counter() - started
    kind, detail = judge(completion)
    return Outcome(kind, detail, seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-ctx", type=int, default=2048)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--show", action="store_true", help="print each call or what was wrong with it")
    args = parser.parse_args()

    model = LocalModel(embedded_model_path(), n_ctx=args.n_ctx)
    model.load()
    for label, prompt in SYSTEMS.items():
        print(f"system prompt: {label}")
        report(model, prompt, args)
        print()


def report(model: LocalModel, prompt: str, args: argparse.Namespace) -> None:
    results: dict[bool, list[Outcome]] = {True: [], False: []}
    for number, question in enumerate(QUESTIONS, 1):
        # Alternate which goes first, so neither always finds the other's prefix evaluated.
        for grammar in (True, False) if number % 2 else (False, True):
            results[grammar].append(anyio.run(ask, model, prompt, question, args.max_tokens, grammar))
        constrained, free = results[True][-1], results[False][-1]
        print(f"{number:2}. grammar: {constrained.kind:7}  free: {free.kind:7}  {question}")
        if args.show:
            print(f"      grammar: {constrained.detail}\n      free:    {free.detail}")
    for grammar, label in ((True, "with the grammar"), (False, "left free")):
        rows = results[grammar]
        opened = [row for row in rows if row.kind != "none"]
        valid = sum(row.kind == "valid" for row in rows)
        print(f"{label:17} calls opened {len(opened):2} of {len(rows)}, valid {valid} of {len(opened)}")
    both = [
        (c.seconds, f.seconds)
        for c, f in zip(results[True], results[False], strict=True)
        if "none" not in (c.kind, f.kind)
    ]
    if both:
        ratio = sum(c for c, _ in both) / sum(f for _, f in both)
        print(f"time of the requests that opened a call both ways, grammar / free: {ratio:.2f}x ({len(both)} requests)")


if __name__ == "__main__":
    main()
