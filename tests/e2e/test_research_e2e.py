"""Research end to end: the real daemon over stdio researches a small service repo
with search and read_file through a scripted OpenAI-compatible model, stops on its token
budget, and writes the final answer from notes with Sources that point at the right lines.

The scripted coordinator behaves like a model: it reads the tool results it was sent (hits
are ``[n] path:START–END`` then the excerpt) and chooses its next call from them; the
tools-free final request is answered by citing the numbered notes whose text holds the facts.
Everything is asserted over the wire: notifications, progress, the requests the model got,
the result and the stored session.
"""

from __future__ import annotations

import json
import sys

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, client_capabilities

from imprintd import protocol as wire
from tests.e2e.conftest import CLIENTS
from tests.e2e.research_repo import (
    BILLING_STEPS,
    ENV_SECRET,
    FILES,
    INDEXED,
    MORE_READS,
    PORT_FACT,
    PORT_FILE,
    QUESTION,
    SECRET,
    TIMEOUT_FACT,
    TIMEOUT_FILE,
    Coordinator,
    billing_research,
    call,
    line_of,
    parse_hits,
    parse_notes,
    tool_messages,
    write_workspace,
)

# --- fixtures ---------------------------------------------------------------------------------


@pytest_asyncio.fixture(params=CLIENTS)
async def research_client(request, daemon_env, tmp_path):
    """Like conftest's ``client``, with the repo written into the workspace first and research
    bounded by a small token budget (far below the context, so the budget ends research)."""
    workspace = tmp_path / "workspace"
    write_workspace(workspace)
    env = {
        **daemon_env,
        "IMPRINT_CHAT_N_CTX": "32768",
        "IMPRINT_CHAT_MAX_TOKENS": "256",
        "IMPRINT_CHAT_RESEARCH_TOKEN_BUDGET": "4096",
    }
    config = ClientServerConfig(server_command=[sys.executable, "-m", "imprintd", "serve", "--stdio"], server_env=env)
    lsp = await config.start()
    lsp.notifications = []
    for method in wire.NOTIFICATIONS:
        lsp.feature(method)(lambda params, method=method: lsp.notifications.append((method, params)))
    await lsp.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities(request.param),
            workspace_folders=[types.WorkspaceFolder(uri=workspace.as_uri(), name="workspace")],
        )
    )
    lsp.workspace = workspace
    yield lsp
    await lsp.shutdown_session()
    await lsp.stop()


async def chat(client, **params):
    return await client.protocol.send_request_async("imprint/chat", params)


def steps_of(client, reply_id: str) -> list:
    return [p for m, p in client.notifications if m == "imprint/toolStep" and p.replyId == reply_id]


def deltas(client, reply_id: str) -> str:
    return "".join(p.text for m, p in client.notifications if m == "imprint/replyDelta" and p.replyId == reply_id)


def progress_messages(client) -> list[str]:
    return [
        report.message
        for reports in client.progress_reports.values()
        for report in reports
        if getattr(report, "message", None)
    ]


# --- the research reply ------------------------------------------------------------------------


async def test_research_over_two_files_stops_on_the_budget_and_cites_the_right_lines(research_client, stub):
    client = research_client
    stub.queue(*billing_research())

    result = await chat(client, text=QUESTION)

    # The budget ended research, before every file was read and not on the context.
    assert result.stopReason == "token_budget"
    research = [r for r in stub.requests if "tools" in r]
    final_requests = [r for r in stub.requests if "tools" not in r]
    assert len(final_requests) == 1 and stub.requests[-1] is final_requests[0]
    assert len(BILLING_STEPS) < len(research) < len(BILLING_STEPS) + len(MORE_READS), (
        "the budget should stop research mid-way"
    )

    # Tool steps: each started, then finished, with the titles a client shows.
    shown = [(p.title, p.state) for p in steps_of(client, result.replyId)]
    assert shown[:8] == [
        ("Searching the workspace for “billing port”", "started"),
        ("Searching the workspace for “billing port”", "finished"),
        (f"Reading {PORT_FILE}", "started"),
        (f"Reading {PORT_FILE}", "finished"),
        ("Searching the workspace for “billing client timeout”", "started"),
        ("Searching the workspace for “billing client timeout”", "finished"),
        (f"Reading {TIMEOUT_FILE}", "started"),
        (f"Reading {TIMEOUT_FILE}", "finished"),
    ]
    assert all(state in ("started", "finished") for _, state in shown)
    assert len(shown) == 2 * len(research)  # one call a round, every one run
    # A finished step carries the start of its result for the client to show; a started one has none.
    steps = steps_of(client, result.replyId)
    read = next(p for p in steps if (p.title, p.state) == (f"Reading {PORT_FILE}", "finished"))
    assert PORT_FACT in read.preview
    assert not any(hasattr(p, "preview") or hasattr(p, "resources") for p in steps if p.state == "started")

    # Progress: indexing the workspace, the tool steps, and writing the final answer.
    messages = progress_messages(client)
    assert f"Indexing the workspace: {len(INDEXED)} of {len(INDEXED)} files" in messages
    assert "Searching the workspace for “billing port”" in messages
    assert messages[-1] == "Writing the answer from the research notes…"
    assert not any(
        "Indexing" in p.text or "Writing the answer" in p.text
        for m, p in client.notifications
        if m == "imprint/replyDelta"
    )

    # Every hit the model was sent points at the lines its excerpt came from.
    sent = [m["content"] for m in tool_messages(research[-1])]
    sent_hits = [hit for m in sent[0::2] for hit in parse_hits(m)]  # the searches of rounds 1, 3
    assert {PORT_FILE, TIMEOUT_FILE} <= {hit["path"] for hit in sent_hits}
    for hit in sent_hits:
        lines = FILES[hit["path"]].split("\n")
        assert "\n".join(lines[hit["start"] - 1 : hit["end"]]) == hit["excerpt"], hit
    # Numbers run on through the reply: each place first seen gets the next one.
    numbers = [hit["number"] for m in sent for hit in parse_hits(m)]
    assert sorted(set(numbers)) == list(range(1, max(numbers) + 1))

    # The final request: no tools, no tool exchange, the question followed by numbered notes.
    final = final_requests[0]
    assert "tools" not in final and "tool_choice" not in final
    assert [m["role"] for m in final["messages"]] == ["system", "user"]
    assert not any(m.get("tool_calls") or m.get("tool_call_id") for m in final["messages"])
    ask = final["messages"][-1]["content"]
    assert ask.startswith(QUESTION + "\n\nResearch notes:\n[")
    notes = parse_notes(ask)
    # Notes keep the numbers the coordinator saw (the digest is ranked, never renumbered).
    shown = {hit["number"]: hit for m in tool_messages(research[-1]) for hit in parse_hits(m["content"])}
    for number, (label, _) in notes.items():
        if number in shown:
            assert label.startswith(f"{shown[number]['path']}:{shown[number]['start']}"), (number, label)
    digest = ask.split("\n\nResearch notes:\n", 1)[1].rsplit("\n\nAnswer the question above", 1)[0]
    assert len(digest) <= 6000  # the notes' digest size
    assert "Tools:" not in final["messages"][0]["content"]  # the tool strategy is left out

    # The answer ends with the Sources the daemon wrote, of the two right files.
    assert result.text.startswith("Billing listens on 8101")
    assert deltas(client, result.replyId) == result.text
    body, sources_block = result.text.rsplit("\n\nSources:\n", 1)
    assert "Sources" not in body
    assert {source.path for source in result.sources} == {PORT_FILE, TIMEOUT_FILE}
    for source in result.sources:
        assert (
            f"[{source.number}] {source.path}:{source.startLine}-{source.endLine}" in sources_block
            or f"[{source.number}] {source.path}:{source.startLine} " in sources_block
        )
        fact = PORT_FACT if source.path == PORT_FILE else TIMEOUT_FACT
        assert source.startLine <= line_of(source.path, fact) <= source.endLine, source
        assert notes[source.number][0] == source.label and source.label.startswith(source.path)
        assert (source.kind, source.cited, source.supported, source.reason) == ("file", True, True, "")
    assert len(sources_block.strip().split("\n")) == 2

    # The session stores the question, the calls and results in order, and the final answer.
    session = await client.protocol.send_request_async("imprint/session", {"sessionId": result.sessionId})
    stored = session.messages
    assert (stored[0].role, stored[0].content) == ("user", QUESTION)
    assert (stored[-1].role, stored[-1].content) == ("assistant", result.text)
    assert stored[-1].sources == result.sources and all(m.sources == [] for m in stored[:-1])
    exchange = stored[1:-1]
    calls = [m for m in exchange if m.role == "assistant"]
    results = [m for m in exchange if m.role == "tool"]
    assert len(calls) == len(results) == len(research)  # the next round never started: the budget
    assert len(exchange) == 2 * len(research)
    for index, assistant in enumerate(calls):
        assert exchange[2 * index] is assistant and exchange[2 * index + 1].role == "tool"
        assert exchange[2 * index + 1].toolCallId == assistant.toolCalls[0].id
    assert [(c.toolCalls[0].name, c.toolCalls[0].arguments._asdict()) for c in calls[:4]] == [
        ("search", {"query": "billing port"}),
        ("read_file", {"path": PORT_FILE}),
        ("search", {"query": "billing client timeout"}),
        ("read_file", {"path": TIMEOUT_FILE}),
    ]
    assert results[1].content == FILES[PORT_FILE].rstrip("\n")
    assert results[3].content == FILES[TIMEOUT_FILE].rstrip("\n")
    # What the model read in each round is the stored result under its number, sent back in the
    # next request; the stored result is the tool's own text, without this reply's numbers.
    for index, request in enumerate(research[1:]):
        sent = tool_messages(request)[-1]["content"]
        if results[index].content.startswith("[hit "):
            assert [h["excerpt"] for h in parse_hits(sent)] == [
                block.split("\n", 1)[1] for block in results[index].content.split("\n\n[hit ")
            ]
        else:
            assert sent.startswith("[") and sent.endswith("\n" + results[index].content)


# --- containment ------------------------------------------------------------------------------


async def test_reads_outside_the_workspace_or_of_secrets_fail_and_never_reach_the_model(research_client, stub):
    client = research_client
    outside = client.workspace.parent / "outside.txt"
    refused = {
        "../outside.txt": "'..' segments are not allowed",
        str(outside): "absolute paths are not allowed",
        "~/x": "'~' home-directory paths are not allowed",
        "docs/outside-link.txt": "symbolic link that leads outside the workspace",
        ".env": "secret-bearing",
    }
    reads = [call("read_file", f"bad_{n}", path=path) for n, path in enumerate(refused)]
    steps = [lambda r: [*reads, call("search", "s_secret", query="outside secret BILLING_API_KEY sk")]]
    answer = "I could not read those files: they are outside the workspace or hold secrets."
    stub.queue(*[Coordinator(steps, final=lambda r: "(no final answer expected)", then=answer)] * 2)

    result = await chat(client, text="Print ../outside.txt, the .env file and ~/x for me.")

    assert result.stopReason == "answer" and result.text == answer and result.sources == []
    shown = steps_of(client, result.replyId)
    for path, reason in refused.items():
        mine = [(p.state, p.detail) for p in shown if p.tool == "read_file" and p.title == f"Reading {path}"]
        assert [state for state, _ in mine] == ["started", "failed"], (path, mine)
        assert reason in mine[1][1], (path, mine)
    assert [p.state for p in shown if p.tool == "search"] == ["started", "finished"]

    # Neither secret reached the model, in any request, nor the client.
    sent = json.dumps(stub.requests, ensure_ascii=False)
    assert SECRET not in sent and ENV_SECRET not in sent
    second = stub.requests[1]
    assert [m["content"] for m in tool_messages(second)][:5] == [p.detail for p in shown if p.state == "failed"]
    wire_text = repr(client.notifications) + repr(client.progress_reports)
    assert SECRET not in wire_text and ENV_SECRET not in wire_text
    session = await client.protocol.send_request_async("imprint/session", {"sessionId": result.sessionId})
    assert not any(SECRET in m.content or ENV_SECRET in m.content for m in session.messages)


async def test_a_workspace_that_is_not_a_folder_is_invalid_params_naming_it(client, stub, tmp_path):
    missing = tmp_path / "no-such-repo"
    with pytest.raises(JsonRpcException) as error:
        await chat(client, text="What is in this repo?", workspace=str(missing))
    assert error.value.code == -32602
    assert str(missing) in error.value.message
    assert stub.requests == []  # refused before any model work
    stub.queue("Still here.")
    assert (await chat(client, text="Are you still there?")).text == "Still here."


# --- repeated hits and repeated calls ---------------------------------------------------------


async def test_a_hit_found_by_two_searches_is_one_note_ranked_first_and_a_repeated_call_is_not_run_again(
    research_client, stub
):
    client = research_client
    steps = [
        lambda r: [call("search", "s_dunning", query="dunning")],
        lambda r: [call("search", "s_chargeback", query="chargeback")],
        lambda r: [call("search", "s_dunning_again", query="dunning")],  # identical: answered from before
        lambda r: [call("search", "s_chargeback_again", query="chargeback")],
    ]
    stub.queue(*[Coordinator(steps, answer_citing_first())] * 8)

    result = await chat(client, text="What happens when a card payment fails or is disputed?")

    # Two rounds in a row brought nothing new (the repeats), so research stopped on that.
    assert result.stopReason == "no_new_evidence"
    research = [r for r in stub.requests if "tools" in r]
    assert len(research) == 4

    # Each search ran once: the repeats were answered from the earlier results.
    titles = [(p.title, p.state) for p in steps_of(client, result.replyId)]
    assert titles == [
        ("Searching the workspace for “dunning”", "started"),
        ("Searching the workspace for “dunning”", "finished"),
        ("Searching the workspace for “chargeback”", "started"),
        ("Searching the workspace for “chargeback”", "finished"),
    ]
    final = stub.requests[-1]
    dunning = tool_messages(research[1])[0]["content"]
    chargeback = tool_messages(research[2])[1]["content"]
    repeated = tool_messages(research[3])[2]["content"]
    assert repeated == f"(Same call as before; its result again.)\n{dunning}"

    # The two searches share one hit: the FAQ, which holds both words.
    first = {hit["number"]: hit for hit in parse_hits(dunning)}
    second = {hit["number"]: hit for hit in parse_hits(chargeback)}
    shared = set(first) & set(second)
    assert [first[hit]["path"] for hit in shared] == ["docs/payments-faq.md"]
    assert {hit["path"] for hit in first.values()} == {"docs/payments-faq.md", "src/billing/dunning.py"}
    assert {hit["path"] for hit in second.values()} == {"docs/payments-faq.md", "docs/disputes.md"}

    # It kept its first number in the second search. In the final request it is one note, ranked
    # first; the others follow in the order found, each under the number the coordinator saw.
    assert "tools" not in final
    [number] = shared
    faq = first[number]
    notes = parse_notes(final["messages"][-1]["content"])
    assert list(notes) == [number, *(n for n in sorted({**first, **second}) if n != number)]
    assert [label.split(":")[0] for label, _ in notes.values()] == [
        "docs/payments-faq.md",
        "src/billing/dunning.py",
        "docs/disputes.md",
    ]
    assert notes[number][1] == faq["excerpt"].strip()
    assert [(s.number, s.path, s.startLine, s.endLine) for s in result.sources] == [
        (number, "docs/payments-faq.md", faq["start"], faq["end"])
    ]
    assert result.text.endswith(f"Sources:\n[{number}] docs/payments-faq.md:{faq['start']}-{faq['end']}")


def answer_citing_first():
    def final(request: dict) -> str:
        first = next(iter(parse_notes(request["messages"][-1]["content"])))
        return f"A failed card starts dunning, and a dispute freezes the charge [{first}]."

    return final
