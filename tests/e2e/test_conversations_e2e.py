"""Searching and renaming conversations over the real stdio protocol: the daemon,
the scripted OpenAI-compatible model on loopback, Neovim's and VS Code's capabilities."""

from __future__ import annotations

import pytest
from pygls.exceptions import JsonRpcException

from tests.openai_stub import StubReply


async def request(client, method: str, params: dict):
    return await client.protocol.send_request_async(method, params)


async def chat(client, **params):
    return await request(client, "imprint/chat", params)


async def test_search_finds_every_stored_session_and_not_a_persist_false_one(client, stub):
    stub.queue(
        "Billing listens on port 8101.",
        "Deploys go through the gateway.",
        "The billing port is private to you.",
    )
    billing = await chat(client, text="Which port does billing use?")
    deploy = await chat(client, text="How do we deploy?")
    await chat(client, text="A billing question off the record", persist=False)

    found = await request(client, "imprint/searchConversations", {"query": "billing port"})
    assert found.query == "billing port" and len(found.hits) == 2 and found.nextOffset is None
    assert {(h.sessionId, h.seq) for h in found.hits} == {(billing.sessionId, 1), (billing.sessionId, 2)}
    top = found.hits[0]
    assert top.title == "Which port does billing use?" and top.role in ("user", "assistant")
    assert {p.text.lower() for p in top.snippet if p.match} == {"billing", "port"}
    assert "".join(p.text for p in top.snippet) in ("Which port does billing use?", "Billing listens on port 8101.")

    paged = await request(client, "imprint/searchConversations", {"query": "billing port", "limit": 1})
    assert len(paged.hits) == 1 and paged.nextOffset == 1
    rest = await request(client, "imprint/searchConversations", {"query": "billing port", "limit": 1, "offset": 1})
    assert [(h.sessionId, h.seq) for h in paged.hits + rest.hits] == [(h.sessionId, h.seq) for h in found.hits]

    deploys = await request(client, "imprint/searchConversations", {"query": "deploy", "since": "2000-01-01"})
    assert [h.sessionId for h in deploys.hits] == [deploy.sessionId, deploy.sessionId]


BAD_SEARCHES = [
    ({"query": ""}, "query: '' has no word to search for"),
    ({"query": '"*"'}, "has no word to search for"),
    ({}, "query"),
    ({"query": 5}, "query"),
    ({"query": "x", "limit": 0}, "limit"),
    ({"query": "x", "limit": 101}, "limit"),
    ({"query": "x", "offset": -1}, "offset"),
    ({"query": "x", "offset": 2**62}, "offset"),
    ({"query": "x", "since": "0001-01-01"}, "since: 0001-01-01 is out of range; expected a date from 1970-01-01"),
    ({"query": "x", "since": "yesterday"}, "since: 'yesterday' is not a date; expected YYYY-MM-DD"),
    ({"query": "x", "since": "2026-11-03", "until": "2026-11-01"}, "until: 2026-11-01 is before since"),
]


async def test_search_refuses_bad_input_naming_the_field_and_keeps_serving(client, stub):
    for params, message in BAD_SEARCHES:
        with pytest.raises(JsonRpcException) as error:
            await request(client, "imprint/searchConversations", params)
        assert error.value.code == -32602 and message in error.value.message, (params, error.value.message)
    found = await request(client, "imprint/searchConversations", {"query": "anything"})
    assert found.hits == [] and found.nextOffset is None


async def test_rename_titles_the_session_everywhere_and_keeps_its_place(client, stub):
    stub.queue("one", "two")
    first = await chat(client, text="First question\nwith a second line")
    second = await chat(client, text="Second question")
    listed = await request(client, "imprint/sessions", {})
    assert [s.title for s in listed.sessions] == ["Second question", "First question"]

    renamed = await request(
        client, "imprint/renameSession", {"sessionId": first.sessionId, "title": "  Billing\n port  "}
    )
    assert renamed.session.sessionId == first.sessionId and renamed.session.title == "Billing port"
    listed = await request(client, "imprint/sessions", {})
    assert [(s.sessionId, s.title) for s in listed.sessions] == [
        (second.sessionId, "Second question"),
        (first.sessionId, "Billing port"),
    ]
    session = await request(client, "imprint/session", {"sessionId": first.sessionId})
    assert session.session.title == "Billing port"
    found = await request(client, "imprint/searchConversations", {"query": "first"})
    assert found.hits[0].title == "Billing port"
    # a later question keeps the name the user gave
    stub.queue("three")
    await chat(client, text="And another?", sessionId=first.sessionId)
    session = await request(client, "imprint/session", {"sessionId": first.sessionId})
    assert session.session.title == "Billing port"


async def test_a_renamed_title_is_text_without_control_characters(client, stub):
    # A title that would clear the terminal, ring and back up where the CLI prints it.
    stub.queue("an answer")
    known = await chat(client, text="Keep my title")
    renamed = await request(
        client,
        "imprint/renameSession",
        {"sessionId": known.sessionId, "title": "\x00\x07\x1b[2J\b\x7fBilling\tport\x9b"},
    )
    assert renamed.session.title == "[2JBilling port"
    listed = await request(client, "imprint/sessions", {})
    assert [s.title for s in listed.sessions if s.sessionId == known.sessionId] == ["[2JBilling port"]


async def test_a_persist_false_session_can_be_renamed(client, stub):
    stub.queue("kept in memory")
    off = await chat(client, text="Off the record", persist=False)
    renamed = await request(client, "imprint/renameSession", {"sessionId": off.sessionId, "title": "Private"})
    assert renamed.session.title == "Private" and renamed.session.persist is False


BAD_RENAMES = [
    ({"sessionId": "nope", "title": "x"}, "sessionId: no session with id 'nope'"),
    ({"sessionId": "", "title": "x"}, "sessionId"),
    ({"title": "x"}, "sessionId"),
    ({"sessionId": "KNOWN", "title": " \n "}, "title: it is empty; give the session a name of 1 to 80 characters"),
    ({"sessionId": "KNOWN", "title": "x" * 81}, "title: it has 81 characters; a title has at most 80"),
    ({"sessionId": "KNOWN"}, "title"),
    # Only invisible characters: zero-width space and joiner, the byte-order mark, a control.
    ({"sessionId": "KNOWN", "title": "\u200b\u200d\ufeff\x07"}, "title: it is empty"),
]


async def test_rename_refuses_bad_input_naming_the_field(client, stub):
    stub.queue("an answer")
    known = await chat(client, text="Keep my title")
    for params, message in BAD_RENAMES:
        params = {k: (known.sessionId if v == "KNOWN" else v) for k, v in params.items()}
        with pytest.raises(JsonRpcException) as error:
            await request(client, "imprint/renameSession", params)
        assert error.value.code == -32602 and message in error.value.message, (params, error.value.message)
    session = await request(client, "imprint/session", {"sessionId": known.sessionId})
    assert session.session.title == "Keep my title"


async def test_export_gives_markdown_and_the_stored_messages_as_json(client, stub, tmp_path):
    import json

    (tmp_path / "workspace" / "billing.yaml").write_text("billing:\n  port: 8101\n")
    stub.queue(
        StubReply(text="", tool_calls=[{"name": "read_file", "arguments": {"path": "billing.yaml"}}]),
        "Billing listens on 8101 [1].",
    )
    answered = await chat(client, text="Which port does billing use?")
    md = await request(client, "imprint/export", {"sessionId": answered.sessionId})
    assert md.format == "markdown" and md.fileName == "imprint-which-port-does-billing-use.md"
    assert md.text.startswith("# Which port does billing use?\n")
    assert "<summary>1 tool step</summary>" in md.text and "- read_file billing.yaml" in md.text
    assert "Billing listens on 8101 [1]." in md.text
    assert "1. [billing.yaml:1-2](billing.yaml#L1-L2)" in md.text

    exported = await request(client, "imprint/export", {"sessionId": answered.sessionId, "format": "json"})
    session = await client.protocol.send_request_async("imprint/session", {"sessionId": answered.sessionId})
    as_json = json.loads(exported.text)
    assert exported.fileName.endswith(".json")
    assert [(m["seq"], m["role"], m["content"]) for m in as_json["messages"]] == [
        (m.seq, m.role, m.content) for m in session.messages
    ]
    assert as_json["session"]["sessionId"] == answered.sessionId

    for params, message in [
        ({"sessionId": "nope"}, "sessionId: no session with id 'nope'"),
        ({"sessionId": answered.sessionId, "format": "pdf"}, "format"),
        ({}, "sessionId"),
    ]:
        with pytest.raises(JsonRpcException) as error:
            await request(client, "imprint/export", params)
        assert error.value.code == -32602 and message in error.value.message, error.value.message


async def test_compact_writes_the_summary_now_and_says_when_there_is_nothing_to_summarize(client, stub):
    from tests.e2e.summary_script import bullets, is_summarizer

    def model(body: dict):
        if is_summarizer(body):
            return bullets(body)
        return "An answer."

    stub.queue(*[model] * 4)
    first = await chat(client, text="Here is the staging compose file.")
    sid = first.sessionId
    lonely = await request(client, "imprint/compact", {"sessionId": sid})
    assert lonely.compacted is False and lonely.summary is None and "Nothing to summarize" in lonely.note
    assert not any(is_summarizer(body) for body in stub.requests)

    for text in ("What about topic three?", "And topic five?"):
        await chat(client, text=text, sessionId=sid)
    done = await request(client, "imprint/compact", {"sessionId": sid})
    assert done.compacted is True and done.note == "The summary now covers messages #1–#4."
    assert (done.summary.firstSeq, done.summary.lastSeq) == (1, 4)
    assert (
        done.summary.text
        == "- (#1–#2) The user pasted the staging compose file.\n- (#3–#4) The user talked about topic 3."
    )
    [asked] = [body for body in stub.requests if is_summarizer(body)]
    assert "#4 assistant" in asked["messages"][-1]["content"] and "#5" not in asked["messages"][-1]["content"]
    updated = [p for m, p in client.notifications if m == "imprint/summaryUpdated"]
    assert [(p.sessionId, p.summary.text) for p in updated] == [(sid, done.summary.text)]
    stored = await request(client, "imprint/summary", {"sessionId": sid})
    assert stored.summary.text == done.summary.text and stored.summary.lastSeq == 4

    again = await request(client, "imprint/compact", {"sessionId": sid})
    assert again.compacted is False and again.summary.text == done.summary.text
    assert "after message #4" in again.note

    for params, message in [({"sessionId": "nope"}, "sessionId: no session with id 'nope'"), ({}, "sessionId")]:
        with pytest.raises(JsonRpcException) as error:
            await request(client, "imprint/compact", params)
        assert error.value.code == -32602 and message in error.value.message


async def test_compact_that_fails_answers_32803_and_keeps_the_summary_as_it_was(client, stub):
    from tests.e2e.summary_script import is_summarizer

    def model(body: dict):
        if is_summarizer(body):
            return StubReply(status=400, body='{"error": {"message": "the summarizer is broken"}}')
        return "An answer."

    stub.queue(*[model] * 3)
    first = await chat(client, text="First question")
    await chat(client, text="Second question", sessionId=first.sessionId)
    with pytest.raises(JsonRpcException) as error:
        await request(client, "imprint/compact", {"sessionId": first.sessionId})
    assert error.value.code == -32803 and "no summary was written" in error.value.message
    stored = await request(client, "imprint/summary", {"sessionId": first.sessionId})
    assert stored.summary is None


async def test_models_lists_the_ggufs_of_chat_models_dir_with_the_model_in_use(client, stub, tmp_path):
    from lsprotocol import types

    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "notes.gguf").write_bytes(b"not a model")
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"imprint": {"chat": {"models_dir": str(folder)}}})
    )
    found = await request(client, "imprint/models", {})
    assert found.current.provider == "openai" and found.current.model == "stub"
    assert found.served == ["stub"] and found.servedError == ""  # the scripted server's GET /v1/models
    mine = [m for m in found.models if m.source == "models_dir"]
    assert [(m.path, m.chat, m.reason) for m in mine] == [
        (str(folder / "notes.gguf"), False, "not a GGUF file (it does not start with GGUF)")
    ]
    with pytest.raises(JsonRpcException) as error:
        await request(client, "imprint/models", [1])
    assert error.value.code == -32602
