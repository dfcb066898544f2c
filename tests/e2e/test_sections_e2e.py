"""Section analysis end to end (docs/decisions.md, "Section analysis"): the real daemon over stdio, a 2,048-token
context, the scripted OpenAI-compatible model on loopback, Neovim's and VS Code's capabilities.

A 30,000-character paste is analyzed in sections by note-taking workers (progress on
``$/progress``, never in ``imprint/replyDelta``), the coordinator rereads an exact range
through ``read_chat_section``, and an editor rereads it through ``imprint/read_chat_section``.
Every request the model receives fits the budget by the remote provider's estimate.
"""

from __future__ import annotations

import re

import pytest
from pygls.exceptions import JsonRpcException

from tests.helpers import estimated_prompt
from tests.openai_stub import StubReply

#: Room for the coordinator with every tool (conversation_history is offered from the first reply
#: on) and the reread tool beside an analyzed 30,000-character paste.
N_CTX = 2304
MAX_TOKENS = 256
#: Output tokens of a worker's notes (sections.NOTES_MAX_TOKENS).
NOTES_MAX_TOKENS = 384
WORKER_SYSTEM_START = "You take notes for another assistant"

FACT = "vault_unseal_port = 48213  # the one true unseal port"
ANSWER = "The vault unseal port is 48213."
SOURCE_ID = re.compile(r'source id "([A-Za-z0-9_-]+)"')
NUMBER = re.compile(r"\[(\d+)\] ")
SECTION = re.compile(r"Section (\d+) of (\d+) of the user message")
ANALYZING = re.compile(r"Analyzing section (\d+) of (\d+)")


@pytest.fixture
def daemon_env(daemon_env, request):
    """The shared environment with a 2,304-token context and a 256-token answer allowance;
    a test may add more through indirect parametrization."""
    env = dict(daemon_env)
    env.update({"IMPRINT_CHAT_N_CTX": str(N_CTX), "IMPRINT_CHAT_MAX_TOKENS": str(MAX_TOKENS)})
    env.update(getattr(request, "param", {}))
    return env


def make_paste(size: int = 30_000, fact_at: int = 27_000) -> tuple[str, int]:
    """A config-like paste of exactly ``size`` characters with FACT starting a line near
    ``fact_at`` (past the last 600 characters the coordinator sees whole); returns the paste
    and the fact's offset."""
    lines, length, n = [], 0, 0
    fact_offset = -1
    while length < size:
        if fact_offset < 0 and length >= fact_at:
            line, fact_offset = FACT + "\n", length
        else:
            line = f"service_{n:05d}.timeout_ms = {1000 + (n * 37) % 9000}\n"
            n += 1
        lines.append(line)
        length += len(line)
    paste = "".join(lines)[:size]
    assert paste[fact_offset : fact_offset + len(FACT)] == FACT
    return paste, fact_offset


PREFIX = "Here is our config:\n"
SUFFIX = "\nWhich port does the vault unseal on?"


def question_of(paste: str) -> str:
    """The message sent: the paste between a line of introduction and the question. The
    original the daemon keeps is the whole message, so its offsets are the paste's plus
    len(PREFIX)."""
    return PREFIX + paste + SUFFIX


async def chat(client, **params):
    return await client.protocol.send_request_async("imprint/chat", params)


async def read_section(client, **params):
    return await client.protocol.send_request_async("imprint/read_chat_section", params)


def deltas(client, reply_id: str) -> str:
    return "".join(p.text for m, p in client.notifications if m == "imprint/replyDelta" and p.replyId == reply_id)


def progress_messages(client) -> list[str]:
    """Every work-done progress message the client received (begin and report), in order."""
    return [
        value.message
        for reports in client.progress_reports.values()
        for value in reports
        if getattr(value, "message", None)
    ]


def coordinator_prompt(stub) -> str:
    """The analyzed question as the coordinator's first round saw it."""
    return next(r for r in stub.requests if "tools" in r)["messages"][-1]["content"]


def is_worker(request: dict) -> bool:
    return "tools" not in request and request["messages"][0]["content"].startswith(WORKER_SYSTEM_START)


def model_script(read_start: int, read_length: int):
    """The model's behaviour as a function of each request: workers get short notes naming
    their section; the coordinator's first turn rereads ``read_start``/``read_length`` of the
    source id its prompt names; after a tool result it answers."""

    def reply(request: dict) -> StubReply | str:
        if is_worker(request):
            number = SECTION.search(request["messages"][1]["content"]).group(1)
            return f"- [s{number}] WORKER-NOTE-{number}: service timeouts, nothing about vault yet"
        if any(m["role"] == "tool" for m in request["messages"]):
            [reread] = [m for m in request["messages"] if m["role"] == "tool"]
            return f"{ANSWER[:-1]} [{NUMBER.match(reread['content']).group(1)}]."
        prompt = request["messages"][-1]["content"]
        source_id = SOURCE_ID.search(prompt).group(1)
        return StubReply(
            tool_calls=[
                {
                    "name": "read_chat_section",
                    "id": "call_read",
                    "arguments": {"source_id": source_id, "start": read_start, "length": read_length},
                }
            ]
        )

    return reply


async def test_a_paste_is_analyzed_in_sections_and_the_coordinator_rereads_an_exact_range(client, stub):
    paste, fact_at = make_paste()
    question = question_of(paste)
    read_start, read_length = len(PREFIX) + fact_at - 20, len(FACT) + 40
    expected = question[read_start : read_start + read_length]
    assert expected == paste[fact_at - 20 : fact_at + len(FACT) + 20] and FACT in expected
    stub.queue(*[model_script(read_start, read_length)] * 200)

    result = await chat(client, text=question)
    assert result.stopReason == "answer"
    # The answer cites the reread, numbered after the workers' notes the coordinator saw first:
    # a section of the user's own message (its seq is 1), which holds what the sentence says.
    workers_shown = NUMBER.findall(coordinator_prompt(stub))
    reread = len(workers_shown) + 1
    label = f"characters {read_start}–{read_start + read_length} of message #1"
    answer = f"{ANSWER[:-1]} [{reread}].\n\nSources:\n[{reread}] {label}"
    assert result.text == answer
    [source] = result.sources
    assert (source.number, source.kind, source.label, source.message, source.path) == (
        reread,
        "section",
        label,
        1,
        None,
    )
    assert (source.cited, source.supported) == (True, True)

    # What reached the model: workers first, then the coordinator twice.
    requests = stub.requests
    workers = [r for r in requests if is_worker(r)]
    coordinator = [r for r in requests if not is_worker(r)]
    assert len(workers) >= 2
    assert requests[: len(workers)] == workers  # every section is read before the coordinator starts
    assert len(coordinator) == 2
    count = len(workers)
    numbers = [SECTION.search(r["messages"][1]["content"]).groups() for r in workers]
    assert numbers == [(str(n), str(count)) for n in range(1, count + 1)]
    offered = [tool["function"]["name"] for tool in coordinator[0]["tools"]]
    assert "read_chat_section" in offered

    # Every request fits the 2,048-token context by the provider's estimate, and none holds the paste.
    for request in requests:
        assert request["max_tokens"] == (NOTES_MAX_TOKENS if is_worker(request) else MAX_TOKENS)
        assert estimated_prompt(request) + request["max_tokens"] <= N_CTX
        for message in request["messages"]:
            assert paste not in (message["content"] or "")
    # The fact is seen only by the worker(s) whose section holds it, and by the reread.
    seen_by = [r for r in workers if FACT in r["messages"][1]["content"]]
    assert 1 <= len(seen_by) <= 2
    assert FACT not in coordinator[0]["messages"][-1]["content"]

    # The tool result that reached the model is exactly the range it asked for.
    [tool_message] = [m for m in coordinator[1]["messages"] if m["role"] == "tool"]
    assert tool_message["tool_call_id"] == "call_read"
    assert tool_message["content"] == f"[{reread}] {label}\n{expected}"

    # Progress: every section, in order, on $/progress; none of it, nor any note, in the reply text.
    analyzing = [m for m in progress_messages(client) if ANALYZING.fullmatch(m)]
    assert analyzing == [f"Analyzing section {n} of {count}" for n in range(1, count + 1)]
    streamed = deltas(client, result.replyId)
    assert streamed == answer
    assert "Analyzing" not in streamed and "WORKER-NOTE" not in streamed and "[s1]" not in streamed

    # The tool step was reported as it started and finished.
    steps = [
        (p.tool, p.state, p.callId)
        for m, p in client.notifications
        if m == "imprint/toolStep" and p.replyId == result.replyId
    ]
    assert steps == [("read_chat_section", "started", "step-1"), ("read_chat_section", "finished", "step-1")]
    assert any(m.startswith("Rereading characters") for m in progress_messages(client))

    # An editor rereads the same range, exactly.
    source_id = SOURCE_ID.search(coordinator[0]["messages"][-1]["content"]).group(1)
    read = await read_section(client, replyId=result.replyId, sourceId=source_id, start=read_start, length=read_length)
    assert (read.replyId, read.sourceId) == (result.replyId, source_id)
    assert read.text == expected
    assert (read.start, read.end, read.total) == (read_start, read_start + read_length, len(question))
    tail = await read_section(client, replyId=result.replyId, sourceId=source_id, start=len(question) - 10, length=4000)
    assert tail.text == question[-10:] and tail.end == tail.total == len(question)

    # Bad reads, each -32602 with a message naming the problem.
    bad = [
        ({"replyId": "0" * 32, "sourceId": source_id, "start": 0, "length": 10}, "unknown reply id"),
        ({"replyId": result.replyId, "sourceId": "nope", "start": 0, "length": 10}, "unknown source id"),
        ({"replyId": result.replyId, "sourceId": source_id, "start": len(question), "length": 10}, "past the end"),
        ({"replyId": result.replyId, "sourceId": source_id, "start": 0, "length": 0}, "length"),
        ({"replyId": result.replyId, "sourceId": source_id, "start": 0, "length": 4001}, "length"),
        ({"replyId": result.replyId, "sourceId": source_id, "start": -1, "length": 10}, "start"),
    ]
    for params, named in bad:
        with pytest.raises(JsonRpcException) as error:
            await read_section(client, **params)
        assert error.value.code == -32602, params
        assert named in error.value.message, (params, error.value.message)


async def stored_messages(client) -> list[tuple[str, str]]:
    listed = await client.protocol.send_request_async("imprint/sessions", {})
    session = await client.protocol.send_request_async("imprint/session", {"sessionId": listed.sessions[0].sessionId})
    return [(m.role, m.content) for m in session.messages]


async def test_a_paste_over_a_million_characters_is_refused_naming_the_limit_and_nothing_is_stored(client, stub):
    # 1,000,001 characters is about 1 MB on the wire: well under the 16 MiB frame cap.
    paste, _ = make_paste(size=1_000_001, fact_at=900_000)
    assert len(paste) == 1_000_001
    with pytest.raises(JsonRpcException) as error:
        await chat(client, text=paste)
    assert error.value.code == -32602 and error.value.message.startswith("text:")
    assert re.search(r"1,?000,?000\b", error.value.message), error.value.message
    assert "1,000,001 characters" in error.value.message
    assert stub.requests == []  # refused before any worker ran
    assert not [m for m, _ in client.notifications if m == "imprint/replyDelta"]
    listed = await client.protocol.send_request_async("imprint/sessions", {})
    assert listed.sessions == []  # a refused question stores nothing


@pytest.mark.parametrize(
    "daemon_env", [{"IMPRINT_CHAT_ANALYSIS_WORKERS": "0"}], indirect=True, ids=["analysis_workers=0"]
)
async def test_with_analysis_off_an_oversized_paste_fails_explicitly(client, stub):
    paste, _ = make_paste()
    with pytest.raises(JsonRpcException) as error:
        await chat(client, text=question_of(paste))
    assert error.value.code == -32803
    assert "chat.analysis_workers" in error.value.message, error.value.message
    assert stub.requests == []  # never clipped and sent anyway
    assert await stored_messages(client) == [("user", question_of(paste))]
