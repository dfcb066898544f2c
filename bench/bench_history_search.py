"""Conversation history search: plain scan against the per-reply index (ADR 0141).

ADR 0141 measured lexical search at 182 ms per query on a synthetic 400-message,
921,024-character conversation and asked for an index "once per reply" if search got slow.
This builds a conversation of the same shape (mixed prose, pasted configs and logs, tool
calls and results), then measures in the same run:

- one plain scan per query (every window re-tokenized), averaged over several queries;
- one index build;
- the indexed query, averaged over the same queries after that one build.

It prints the speed-up of the indexed query over the scan (target: at least 10x) and the
build time as a ratio to one plain scan. Both paths must return identical text. Not a test:
run ``python bench/bench_history_search.py``.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from imprintd.context.history import ConversationHistory, search_by_scan  # noqa: E402
from imprintd.messages import Message, ToolCall, assistant, tool_result, user  # noqa: E402

TARGET_MESSAGES = 400
TARGET_CHARS = 921_024
QUERIES = [
    "billing port",
    "what did I paste about the postgres password policy",
    "redis eviction maxmemory",
    "which GPU does bedrock have",
    "naming-ai decision",
    "the stack trace with KeyError in scheduler",
    "deployment region eu-west",
    "8101",
]

WORDS = (
    "service config deploy cluster node memory cache queue worker schedule retry timeout latency "
    "throughput budget token model prompt context window summary search index billing invoice "
    "customer account region replica shard backup restore migration schema table column query "
    "request response error warning log trace metric alert dashboard release branch commit review "
    "test coverage build artifact container image volume network proxy gateway certificate domain"
).split()


def prose(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 16))).capitalize() + ". "
        out.append(sentence)
        size += len(sentence)
    return "".join(out)[:chars]


def compose(rng: random.Random, services: int) -> str:
    lines = ["services:"]
    for i in range(services):
        name = "billing" if i == services // 2 else f"svc{i}-{rng.choice(WORDS)}"
        port = 8101 if name == "billing" else 8000 + i
        lines += [
            f"  {name}:",
            f"    image: registry.local/{name}:{rng.randint(1, 9)}.{rng.randint(0, 20)}",
            "    ports:",
            f'      - "{port}:{port}"',
            "    environment:",
            f"      LOG_LEVEL: {rng.choice(['info', 'debug', 'warn'])}",
            f"      WORKERS: {rng.randint(1, 16)}",
        ]
    return "\n".join(lines)


def log(rng: random.Random, lines: int) -> str:
    out = []
    for i in range(lines):
        level = rng.choice(["INFO", "WARN", "ERROR", "DEBUG"])
        out.append(f"2026-11-05T10:{i % 60:02d}:{rng.randint(0, 59):02d}Z {level} {rng.choice(WORDS)} "
                   f"{rng.choice(WORDS)} id={rng.getrandbits(48):x} took {rng.randint(1, 900)}ms")
        if i == lines // 2:
            out.append("Traceback: KeyError: 'tenant' in scheduler.dispatch (scheduler.py:211)")
    return "\n".join(out)


def conversation(seed: int = 141) -> list[Message]:
    """400 messages, ~921,000 characters: questions, answers, pastes, tool calls and results."""
    rng = random.Random(seed)
    messages: list[Message] = []
    seq = 0

    def add(message: Message) -> None:
        nonlocal seq
        seq += 1
        messages.append(_with_seq(message, seq))

    while len(messages) < TARGET_MESSAGES:
        kind = rng.random()
        if kind < 0.15 and len(messages) + 2 <= TARGET_MESSAGES:
            add(user("Here is the compose file for staging:\n" + compose(rng, rng.randint(20, 60))))
            add(assistant(prose(rng, rng.randint(400, 1500))))
        elif kind < 0.3 and len(messages) + 2 <= TARGET_MESSAGES:
            add(user("This is the log from last night:\n" + log(rng, rng.randint(30, 80))))
            add(assistant(prose(rng, rng.randint(400, 1500))))
        elif kind < 0.55 and len(messages) + 4 <= TARGET_MESSAGES:
            query = " ".join(rng.sample(WORDS, 2))
            call = ToolCall(id=f"call_{seq}", name="search", arguments={"query": query})
            add(user(prose(rng, rng.randint(60, 300)) + "?"))
            add(assistant("", tool_calls=(call,)))
            add(tool_result(call, prose(rng, rng.randint(2000, 4000))))
            add(assistant(prose(rng, rng.randint(300, 1500))))
        else:
            add(user(prose(rng, rng.randint(40, 600)) + "?"))
            add(assistant(prose(rng, rng.randint(300, 2500))))
    # A few facts the queries ask about, spread through the conversation.
    facts = [
        "Bedrock has an RTX 5070 Ti with 16 GB.",
        "We decided on naming-ai for the project name.",
        "The deployment region is eu-west-2.",
        "Redis eviction: maxmemory-policy allkeys-lru.",
        "Postgres password policy: 16 characters, rotated quarterly.",
    ]
    for i, fact in enumerate(facts):
        index = (i + 1) * len(messages) // (len(facts) + 2)
        while messages[index].role != "user":
            index += 1
        messages[index] = _with_text(messages[index], messages[index].content + "\n" + fact)
    return _scale(messages, TARGET_CHARS)


def _with_seq(message: Message, seq: int) -> Message:
    return msgspec.structs.replace(message, seq=seq)


def _with_text(message: Message, text: str) -> Message:
    return msgspec.structs.replace(message, content=text)


def _scale(messages: list[Message], target: int) -> list[Message]:
    """Trim or pad the longest answers so the whole comes to ``target`` characters exactly."""
    total = sum(len(m.content) for m in messages)
    rng = random.Random(7)
    answers = [i for i, m in enumerate(messages) if m.role == "assistant" and m.content]
    while total != target:
        i = rng.choice(answers)
        text = messages[i].content
        if total < target:
            extra = prose(rng, min(target - total, 2000))
            messages[i] = _with_text(messages[i], text + " " + extra[: target - total - 1] if target - total > 1
                                     else text + ".")
        else:
            cut = min(total - target, max(0, len(text) - 200))
            if cut == 0:
                continue
            messages[i] = _with_text(messages[i], text[: len(text) - cut])
        total = sum(len(m.content) for m in messages)
    return messages


def timed(function, *args) -> tuple[float, object]:
    start = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - start, result


def main() -> None:
    messages = conversation()
    chars = sum(len(m.content) for m in messages)
    print(f"conversation: {len(messages)} messages, {chars:,} characters")

    # Warm the stem cache the same way for both paths: each sees the vocabulary once first.
    history = ConversationHistory(messages)
    search_by_scan(history, "warm up")

    scans = []
    scanned: dict[str, str] = {}
    for query in QUERIES:
        seconds, text = timed(search_by_scan, history, query)
        scans.append(seconds)
        scanned[query] = text

    fresh = ConversationHistory(messages)
    build, _ = timed(fresh.build_index)
    queries = []
    for query in QUERIES:
        seconds, text = timed(fresh.search, query)
        queries.append(seconds)
        assert text == scanned[query], f"indexed and scanned answers differ for {query!r}"

    scan_ms = statistics.mean(scans) * 1000
    query_ms = statistics.mean(queries) * 1000
    print(f"plain scan:     {scan_ms:8.2f} ms per query (mean of {len(QUERIES)})")
    print(f"index build:    {build * 1000:8.2f} ms once per reply")
    print(f"indexed query:  {query_ms:8.3f} ms per query (mean of {len(QUERIES)})")
    print(f"speed-up of the indexed query over the scan: {scan_ms / query_ms:.1f}x (target >= 10x)")
    print(f"index build as a ratio to one plain scan:    {build * 1000 / scan_ms:.2f}x")
    print(f"first query of a reply (build + query) vs scan: {(build * 1000 + query_ms) / scan_ms:.2f}x")


if __name__ == "__main__":
    main()
