"""Every researched answer is cited: the real daemon over stdio, a scripted model that reads the
numbered results it was sent and cites them, and what came back, streamed and stored.

Each case is asserted where it shows: what reached the model (numbered results, the citing
rule in the system prompt), the deltas and the result (`text`, `sources`), and the stored
session (`imprint/session`, after the daemon is restarted on the same data).
"""

from __future__ import annotations

import sys

import pytest_asyncio
from lsprotocol import types
from pytest_lsp import ClientServerConfig, client_capabilities

from imprintd import prompts
from imprintd import protocol as wire
from tests.e2e.research_repo import (
    FILES,
    PORT_FILE,
    TIMEOUT_FILE,
    call,
    parse_hits,
    rounds_done,
    tool_messages,
    write_workspace,
)
from tests.openai_stub import StubReply

# --- fixtures and the scripted model ---------------------------------------------------------


async def start(daemon_env, workspace, capabilities: str = "neovim"):
    config = ClientServerConfig(
        server_command=[sys.executable, "-m", "imprintd", "serve", "--stdio"], server_env=daemon_env
    )
    lsp = await config.start()
    lsp.notifications = []
    for method in wire.NOTIFICATIONS:
        lsp.feature(method)(lambda params, method=method: lsp.notifications.append((method, params)))
    await lsp.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities(capabilities),
            workspace_folders=[types.WorkspaceFolder(uri=workspace.as_uri(), name="workspace")],
        )
    )
    return lsp


async def stop(lsp) -> None:
    await lsp.shutdown_session()
    await lsp.stop()


@pytest_asyncio.fixture(params=["neovim", "visual-studio-code"])
async def repo_client(request, daemon_env, tmp_path):
    """A client of the real daemon whose workspace is the billing repo."""
    workspace = tmp_path / "workspace"
    write_workspace(workspace)
    lsp = await start(daemon_env, workspace, request.param)
    lsp.workspace = workspace
    yield lsp
    await stop(lsp)


def coordinator(steps, answer):
    """While tools are offered: the calls of ``steps`` (functions of the request), then
    ``answer(request)``; a tools-free final request is not expected."""

    def reply(request: dict):
        if "tools" not in request:
            return "(no final answer from notes expected)"
        done = rounds_done(request)
        if done < len(steps):
            return StubReply(tool_calls=steps[done](request))
        return answer(request)

    return reply


def shown(request: dict) -> list[dict]:
    """Every numbered place the model was sent in this reply: number, path, lines, text."""
    return [place for m in tool_messages(request) for place in parse_hits(m["content"])]


def number_of(request: dict, call_id: str) -> int:
    """The number the result of call ``call_id`` was shown under (a hit of the same lines is
    another result, with its own number)."""
    [content] = [m["content"] for m in tool_messages(request) if m.get("tool_call_id") == call_id]
    return int(content[1 : content.index("]")])


async def chat(client, **params):
    return await client.protocol.send_request_async("imprint/chat", params)


async def session_of(client, session_id: str):
    return await client.protocol.send_request_async("imprint/session", {"sessionId": session_id})


def deltas(client, reply_id: str) -> str:
    return "".join(p.text for m, p in client.notifications if m == "imprint/replyDelta" and p.replyId == reply_id)


PORT_LINES = len(FILES[PORT_FILE].rstrip("\n").split("\n"))
TIMEOUT_LINES = len(FILES[TIMEOUT_FILE].rstrip("\n").split("\n"))
READ_PORT = [
    lambda r: [call("search", "s1", query="billing port")],
    lambda r: [call("read_file", "r1", path=PORT_FILE)],
]


# --- the cases -------------------------------------------------------------------------------


async def test_a_direct_answer_cites_what_it_read_and_an_invalid_number_never_reaches_the_user(
    repo_client, stub, daemon_env
):
    client = repo_client

    def answer(request):
        read = number_of(request, "r1")
        return f"Billing listens on port 8101 [{read}]. It runs 2 replicas [99]."

    stub.queue(*[coordinator(READ_PORT, answer)] * 3)
    result = await chat(client, text="Which port does billing listen on?")

    last = stub.requests[-1]
    read = number_of(last, "r1")
    # The model was asked to cite by number, and every result opened with its number: the
    # search's hits from [1], then the read under the next number not yet given.
    assert prompts.CITATIONS in last["messages"][0]["content"]
    hits = parse_hits(tool_messages(last)[0]["content"])
    assert [h["number"] for h in hits] == list(range(1, len(hits) + 1))
    assert tool_messages(last)[1]["content"] == f"[{read}] {PORT_FILE}:1–{PORT_LINES}\n" + FILES[PORT_FILE].rstrip("\n")
    assert read == len(hits) + 1

    # [99] names no result: removed from the text and never streamed; the read is the source.
    text = (
        f"Billing listens on port 8101 [{read}]. It runs 2 replicas.\n\nSources:\n[{read}] {PORT_FILE}:1-{PORT_LINES}"
    )
    assert result.stopReason == "answer" and result.text == text
    assert deltas(client, result.replyId) == text and "[99]" not in deltas(client, result.replyId)
    [source] = result.sources
    assert (source.number, source.kind, source.label, source.path, source.startLine, source.endLine) == (
        read,
        "file",
        f"{PORT_FILE}:1–{PORT_LINES}",
        PORT_FILE,
        1,
        PORT_LINES,
    )
    assert (source.message, source.cited, source.supported, source.reason) == (None, True, True, "")

    # Stored with the answer: the session shows the same list, also from a new daemon.
    stored = (await session_of(client, result.sessionId)).messages
    assert stored[-1].content == text and stored[-1].sources == result.sources
    assert all(m.sources == [] for m in stored[:-1])
    reopened = await start(daemon_env, client.workspace)
    try:
        again = (await session_of(reopened, result.sessionId)).messages
    finally:
        await stop(reopened)
    assert again[-1].sources == result.sources


async def test_an_answer_citing_nothing_after_reads_lists_them_as_read_and_a_repeat_keeps_its_number(repo_client, stub):
    client = repo_client
    steps = [
        *READ_PORT,
        # A new read and the same read again, then the same search again (no new evidence).
        lambda r: [call("read_file", "r2", path=TIMEOUT_FILE), call("read_file", "r3", path=PORT_FILE)],
        lambda r: [call("search", "s2", query="billing port")],
    ]
    stub.queue(*[coordinator(steps, lambda r: "Billing listens on 8101 and times out after 7.5 seconds.")] * 5)
    result = await chat(client, text="Port and timeout of billing?")

    last = stub.requests[-1]
    first_search, port, timeout, port_again, search_again = (m["content"] for m in tool_messages(last))
    read = number_of(last, "r1")
    assert port_again == f"(Same call as before; its result again.)\n{port}"
    assert search_again == f"(Same call as before; its result again.)\n{first_search}"
    assert port.startswith(f"[{read}] ") and timeout.startswith(f"[{read + 1}] {TIMEOUT_FILE}:1–")

    # Nothing cited: the two files read are listed, as read, not cited; the hits only found are not.
    assert [(s.number, s.path, s.cited, s.supported) for s in result.sources] == [
        (read, PORT_FILE, False, None),
        (read + 1, TIMEOUT_FILE, False, None),
    ]
    assert result.text == (
        "Billing listens on 8101 and times out after 7.5 seconds.\n\nSources:\n"
        f"[{read}] {PORT_FILE}:1-{PORT_LINES} (read, not cited)\n"
        f"[{read + 1}] {TIMEOUT_FILE}:1-{TIMEOUT_LINES} (read, not cited)"
    )


async def test_a_citation_of_an_earlier_message_is_a_message_source(repo_client, stub):
    client = repo_client
    stub.queue("Noted: the gateway calls billing on port 8101.")
    first = await chat(client, text="Remember: the gateway calls billing on port 8101.")
    steps = [lambda r: [call("conversation_history", "h1", message=1)]]

    def answer(request):
        [quoted] = shown_messages(request)
        return f"You said the gateway calls billing on port 8101 [{quoted}]."

    stub.queue(*[coordinator(steps, answer)] * 2)
    result = await chat(client, text="What did I say the billing port was?", sessionId=first.sessionId)

    [read] = tool_messages(stub.requests[-1])
    assert read["content"].startswith("[1] #1 user, characters 0–")
    assert result.text == "You said the gateway calls billing on port 8101 [1].\n\nSources:\n[1] message #1"
    [source] = result.sources
    assert (source.kind, source.label, source.message, source.path, source.startLine) == (
        "message",
        "message #1",
        1,
        None,
        None,
    )
    assert (source.cited, source.supported) == (True, True)
    stored = (await session_of(client, result.sessionId)).messages
    assert stored[-1].sources == result.sources


def shown_messages(request: dict) -> list[int]:
    return [int(m["content"][1 : m["content"].index("]")]) for m in tool_messages(request)]


async def test_a_citation_whose_source_says_nothing_of_its_sentence_is_unsupported(repo_client, stub):
    client = repo_client
    steps = [*READ_PORT, lambda r: [call("read_file", "r2", path=TIMEOUT_FILE)]]

    def answer(request):
        port, timeout = number_of(request, "r1"), number_of(request, "r2")
        # The timeout sentence cites the deployment, which holds no 7.5 nor TIMEOUT_SECONDS.
        return f"Billing listens on 8101 [{port}]. Its client gives up after TIMEOUT_SECONDS = 7.5 [{port}, {timeout}]."

    stub.queue(*[coordinator(steps, answer)] * 4)
    result = await chat(client, text="Port and timeout?")

    port = number_of(stub.requests[-1], "r1")
    by_number = {s.number: s for s in result.sources}
    assert list(by_number) == [port, port + 1]
    assert by_number[port].supported is False
    assert by_number[port].reason == (
        "The cited text shares no number, name, quoted text or word with the sentence citing it: "
        "“Its client gives up after TIMEOUT_SECONDS = 7.5”"  # the claim the citation closes
    )
    assert (by_number[port + 1].supported, by_number[port + 1].reason) == (True, "")
    assert result.text.endswith(
        f"Sources:\n[{port}] {PORT_FILE}:1-{PORT_LINES} (unsupported)\n[{port + 1}] {TIMEOUT_FILE}:1-{TIMEOUT_LINES}"
    )


async def test_a_spoken_answer_stays_plain_and_still_sends_its_sources(repo_client, stub):
    client = repo_client
    stub.queue(*[coordinator(READ_PORT, lambda r: f"Billing listens on port 8101 [{number_of(r, 'r1')}].")] * 3)
    result = await chat(client, text="Which port does billing use?", style="spoken")

    read = number_of(stub.requests[-1], "r1")
    assert result.text == "Billing listens on port 8101."
    assert deltas(client, result.replyId) == result.text
    assert [(s.number, s.path, s.cited, s.supported) for s in result.sources] == [(read, PORT_FILE, True, True)]
    stored = (await session_of(client, result.sessionId)).messages
    assert stored[-1].content == result.text and stored[-1].sources == result.sources
