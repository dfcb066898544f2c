"""Conversation history search: what the first query of a reply costs, by conversation size.

The first search was measured at 182 ms per query on a synthetic 400-message,
921,024-character conversation. Its index was then built once per reply (1.2x a full scan,
growing with the session). The index is kept in the data database, written when
messages are stored, so a reply only reads it. For conversations of 400, 1,000, 2,500 and
5,000 messages of that shape (mixed prose, pasted configs and logs, tool calls and results),
stored in a real ``Store``, this measures in the same run:

- the baseline: one plain scan per query (every window re-tokenized), averaged over the queries;
- the first search's per-reply path (``history_adr0141.py``): build the index, then the first query;
- the new first query of a reply: a ``ConversationHistory`` over the stored messages with the
  store's index, then one query (a fresh one each time, so every one is a first query; the
  median of three per query). Loading the messages is not counted: a reply loads them anyway;
- what indexing costs when messages are stored: indexing the whole conversation once, per message.

It prints each as milliseconds and as a ratio to the plain scan at that size, then the new first
query at 5,000 messages against 400 (target: at most 0.1x a plain scan at 400, flat to 5,000).
The stored index must give the same places and text as the scan. Not a test: run
``python bench/bench_history_search.py`` (about a minute and a half).
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import history_adr0141 as adr0141  # noqa: E402

from imprintd.context.history import ConversationHistory  # noqa: E402
from imprintd.messages import Message, ToolCall, assistant, tool_result, user  # noqa: E402
from imprintd.store import Store  # noqa: E402

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

WORDS = [
    "service",
    "config",
    "deploy",
    "cluster",
    "node",
    "memory",
    "cache",
    "queue",
    "worker",
    "schedule",
    "retry",
    "timeout",
    "latency",
    "throughput",
    "budget",
    "token",
    "model",
    "prompt",
    "context",
    "window",
    "summary",
    "search",
    "index",
    "billing",
    "invoice",
    "customer",
    "account",
    "region",
    "replica",
    "shard",
    "backup",
    "restore",
    "migration",
    "schema",
    "table",
    "column",
    "query",
    "request",
    "response",
    "error",
    "warning",
    "log",
    "trace",
    "metric",
    "alert",
    "dashboard",
    "release",
    "branch",
    "commit",
    "review",
    "test",
    "coverage",
    "build",
    "artifact",
    "container",
    "image",
    "volume",
    "network",
    "proxy",
    "gateway",
    "certificate",
    "domain",
]


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
        out.append(
            f"2026-11-05T10:{i % 60:02d}:{rng.randint(0, 59):02d}Z {level} {rng.choice(WORDS)} "
            f"{rng.choice(WORDS)} id={rng.getrandbits(48):x} took {rng.randint(1, 900)}ms"
        )
        if i == lines // 2:
            out.append("Traceback: KeyError: 'tenant' in scheduler.dispatch (scheduler.py:211)")
    return "\n".join(out)


def conversation(size: int = TARGET_MESSAGES, seed: int = 141) -> list[Message]:
    """``size`` messages: questions, answers, pastes, tool calls and results. At 400, the first search's
    921,024 characters exactly; larger ones have the same mix, unscaled."""
    rng = random.Random(seed)
    messages: list[Message] = []
    seq = 0

    def add(message: Message) -> None:
        nonlocal seq
        seq += 1
        messages.append(_with_seq(message, seq))

    while len(messages) < size:
        kind = rng.random()
        if kind < 0.15 and len(messages) + 2 <= size:
            add(user("Here is the compose file for staging:\n" + compose(rng, rng.randint(20, 60))))
            add(assistant(prose(rng, rng.randint(400, 1500))))
        elif kind < 0.3 and len(messages) + 2 <= size:
            add(user("This is the log from last night:\n" + log(rng, rng.randint(30, 80))))
            add(assistant(prose(rng, rng.randint(400, 1500))))
        elif kind < 0.55 and len(messages) + 4 <= size:
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
    return _scale(messages, TARGET_CHARS) if size == TARGET_MESSAGES else messages


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
            messages[i] = _with_text(
                messages[i], text + " " + extra[: target - total - 1] if target - total > 1 else text + "."
            )
        else:
            cut = min(total - target, max(0, len(text) - 200))
            if cut == 0:
                continue
            messages[i] = _with_text(messages[i], text[: len(text) - cut])
        total = sum(len(m.content) for m in messages)
    return messages


SIZES = (400, 1_000, 2_500, 5_000)


def timed(function, *args) -> tuple[float, object]:
    start = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - start, result


def store_conversation(directory: str, messages: list[Message]) -> tuple[Store, str, float]:
    """The conversation stored a reply at a time; returns the store, session and seconds spent indexing."""
    store = Store.open(Path(directory) / "bench.sqlite3")
    with store.reading() as db:
        db.pragma("synchronous", "OFF")  # a quicker setup; queries are what is measured
    session = store.create_session()
    batch: list[Message] = []
    for message in messages:  # one extend per user turn, as replies store them
        if message.role == "user" and batch:
            store.extend(session.id, [msgspec.structs.replace(m, seq=None) for m in batch])
            batch = []
        batch.append(message)
    store.extend(session.id, [msgspec.structs.replace(m, seq=None) for m in batch])
    # Indexing alone, measured by doing it again from nothing.
    with store.transaction() as db:
        db.execute("DELETE FROM history_sessions WHERE session_id = ?", (session.id,))
    start = time.perf_counter()
    store.history_index(session.id).lookup(["warm"])  # indexes the whole session once
    return store, session.id, time.perf_counter() - start


def measure(size: int) -> dict[str, float]:
    messages = conversation(size)
    chars = sum(len(m.content) for m in messages)
    with tempfile.TemporaryDirectory() as directory:
        store, session_id, indexing = store_conversation(directory, messages)
        stored = store.messages(session_id)

        # The baseline: every window re-tokenized per query (dates for the headers still come
        # from the store, so both print the same).
        history = ConversationHistory(stored, store.history_index(session_id))
        history.search_places("warm up", scan=True)  # the stem cache sees the vocabulary once first
        scans, scanned = [], {}
        for query in QUERIES:
            seconds, found = timed(lambda q: history.search_places(q, scan=True), query)
            scans.append(seconds)
            scanned[query] = found

        firsts = []
        for query in QUERIES:
            tries = []
            for _ in range(3):  # the median of three, each a reply's first query
                start = time.perf_counter()
                reply_history = ConversationHistory(stored, store.history_index(session_id))
                found = reply_history.search_places(query)
                tries.append(time.perf_counter() - start)
                assert found == scanned[query], f"the stored index and the scan differ for {query!r}"
            firsts.append(statistics.median(tries))
        store.close()

    olds = []
    for query in QUERIES[:3]:
        start = time.perf_counter()
        old = adr0141.ConversationHistory(messages)
        old.search(query)
        olds.append(time.perf_counter() - start)
    return {
        "messages": size,
        "chars": chars,
        "scan": statistics.mean(scans) * 1000,
        "old": statistics.mean(olds) * 1000,
        "new": statistics.mean(firsts) * 1000,
        "indexing": indexing * 1000 / size,
    }


def main() -> None:
    rows = []
    print(
        f"{'messages':>8} {'characters':>11}  {'plain scan':>10}  {'first search, query':>22}"
        f"  {'new first query':>19}  {'indexing when stored':>21}"
    )
    for size in SIZES:
        row = measure(size)
        rows.append(row)
        print(
            f"{row['messages']:>8,} {row['chars']:>11,}  {row['scan']:>7.1f} ms  "
            f"{row['old']:>8.1f} ms ({row['old'] / row['scan']:>5.2f}x)  "
            f"{row['new']:>7.2f} ms ({row['new'] / row['scan']:.3f}x)  "
            f"{row['indexing']:>8.2f} ms/message",
            flush=True,
        )
    first, last = rows[0], rows[-1]
    print(
        f"new first query at {first['messages']} messages: {first['new'] / first['scan']:.3f}x a plain scan "
        "(target <= 0.1x)"
    )
    print(
        f"new first query, {last['messages']:,} vs {first['messages']} messages: "
        f"{last['new'] / first['new']:.2f}x (flat: ~1x; a plain scan grows {last['scan'] / first['scan']:.1f}x)"
    )


if __name__ == "__main__":
    main()
