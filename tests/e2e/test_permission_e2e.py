"""``imprint/requestPermission`` end to end: the real daemon over stdio with ``mcp-server-git``
configured as an editor sends it (``chat.mcp_servers`` in initializationOptions), the scripted
model calling a git tool that may act, and a pytest-lsp client answering the daemon's question.

What is asserted: the question's params over the wire, whether the tool ran (the repository's
branches), what reached the model and what was stored.
"""

from __future__ import annotations

import sys

import pytest_asyncio
from lsprotocol import types
from pytest_lsp import ClientServerConfig, client_capabilities

from imprintd import protocol as wire
from tests.e2e.rawclient import RawClient, next_matching
from tests.mcp_repo import branches, git_repository, git_server
from tests.openai_stub import StubReply

#: What the client advertises when it answers the daemon's permission requests.
ANSWERS_PERMISSIONS = {"imprint": {"permissionRequests": True}}


def create_branch(repo, name: str) -> StubReply:
    arguments = {"repo_path": str(repo), "branch_name": name}
    return StubReply(tool_calls=[{"name": "git__git_create_branch", "id": "call_0", "arguments": arguments}])


def plain(value):
    """A message pygls handed over as attribute objects, as plain JSON values."""
    if isinstance(value, list | tuple) and not hasattr(value, "_asdict"):
        return [plain(item) for item in value]
    if hasattr(value, "_asdict"):
        return {key: plain(item) for key, item in value._asdict().items()}
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


async def started(daemon_env, tmp_path, experimental):
    """A client of the real daemon with the git server configured; it records what it is asked
    and answers with ``client.answers`` in turn (an Exception answers as an error)."""
    repo = git_repository(tmp_path / "repo")
    command, args = git_server(repo)
    config = ClientServerConfig(
        server_command=[sys.executable, "-m", "imprintd", "serve", "--stdio"],
        server_env={**daemon_env, "IMPRINT_CHAT_N_CTX": "32768"},  # the git tools offered whole
    )
    client = await config.start()
    client.asked, client.answers, client.repo = [], [], repo

    @client.feature(wire.REQUEST_PERMISSION)
    def answer(params):
        client.asked.append(plain(params))
        outcome = client.answers.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return {"outcome": outcome}

    client.notifications = []
    client.feature(wire.TOOL_STEP)(lambda params: client.notifications.append(plain(params)))
    capabilities = client_capabilities("visual-studio-code")
    capabilities.experimental = experimental
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    await client.initialize_session(
        types.InitializeParams(
            capabilities=capabilities,
            workspace_folders=[types.WorkspaceFolder(uri=workspace.as_uri(), name="workspace")],
            initialization_options={"chat": {"mcp_servers": {"git": {"command": command, "args": args}}}},
        )
    )
    return client


@pytest_asyncio.fixture
async def client(daemon_env, tmp_path):
    lsp = await started(daemon_env, tmp_path, ANSWERS_PERMISSIONS)
    yield lsp
    await lsp.shutdown_session()
    await lsp.stop()


@pytest_asyncio.fixture
async def silent_client(daemon_env, tmp_path):
    """A client that does not say it answers permission requests."""
    lsp = await started(daemon_env, tmp_path, None)
    yield lsp
    await lsp.shutdown_session()
    await lsp.stop()


async def chat(client, text: str, session_id: str | None = None):
    params = {"text": text} if session_id is None else {"text": text, "sessionId": session_id}
    return await client.protocol.send_request_async(wire.CHAT, params)


async def stored_tool_results(client, session_id: str) -> list[str]:
    session = await client.protocol.send_request_async(wire.SESSION, {"sessionId": session_id})
    return [m.content for m in session.messages if m.role == "tool"]


def tool_results(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_the_client_allows_once_then_rejects_and_the_tool_runs_only_when_allowed(client, stub):
    stub.queue(create_branch(client.repo, "allowed"), "Made it.", create_branch(client.repo, "refused"), "Did not.")
    client.answers.append("allow_once")

    first = await chat(client, "Make a branch named allowed")

    [asked] = client.asked
    [step] = [n for n in client.notifications if n["state"] == "started"]
    assert asked == {
        "replyId": first.replyId,
        "callId": step["callId"],
        "server": "git",
        "tool": "git_create_branch",
        "title": step["title"],
        "arguments": {"repo_path": str(client.repo), "branch_name": "allowed"},
        "readOnly": False,
        "destructive": False,
    }
    assert "allowed" in branches(client.repo)
    assert "allowed" in tool_results(stub.requests[1])[-1]  # git's answer reached the model
    assert "allowed" in (await stored_tool_results(client, first.sessionId))[-1]
    assert [n["state"] for n in client.notifications if n["callId"] == step["callId"]] == ["started", "finished"]

    client.answers.append("reject")
    second = await chat(client, "Make a branch named refused", first.sessionId)

    assert len(client.asked) == 2 and client.asked[1]["replyId"] == second.replyId
    assert "refused" not in branches(client.repo)
    declined = "The user declined to let git run git_create_branch"
    assert declined in tool_results(stub.requests[3])[-1]
    assert declined in (await stored_tool_results(client, second.sessionId))[-1]
    assert second.text == "Did not."  # the reply went on


async def test_an_answer_that_does_not_fit_is_a_reject_and_always_is_not_asked_again(client, stub):
    stub.queue(
        create_branch(client.repo, "unclear"),
        "No.",
        create_branch(client.repo, "always-one"),
        "One.",
        create_branch(client.repo, "always-two"),
        "Two.",
    )
    client.answers += ["maybe", "allow_always"]
    first = await chat(client, "Branch unclear")
    assert "unclear" not in branches(client.repo)
    assert "declined" in tool_results(stub.requests[1])[-1]
    await chat(client, "Branch one", first.sessionId)
    await chat(client, "Branch two", first.sessionId)
    assert len(client.asked) == 2  # "always" holds for the session
    assert {"always-one", "always-two"} <= set(branches(client.repo))


def test_an_error_answer_is_a_reject_and_the_daemon_keeps_serving(daemon_env, stub, tmp_path):
    repo = git_repository(tmp_path / "repo")
    command, args = git_server(repo)
    stub.queue(create_branch(repo, "errored"), "Could not.")
    raw = RawClient({**daemon_env, "IMPRINT_CHAT_N_CTX": "32768"})
    try:
        raw.initialize(
            capabilities={"experimental": ANSWERS_PERMISSIONS},
            initializationOptions={"chat": {"mcp_servers": {"git": {"command": command, "args": args}}}},
        )
        asked = raw.request(wire.CHAT, {"text": "Branch errored"})
        question = next_matching(raw, lambda message: message.get("method") == wire.REQUEST_PERMISSION)
        assert question["params"]["tool"] == "git_create_branch"
        raw.send({"id": question["id"], "error": {"code": -32603, "message": "the dialog failed"}})
        answer = raw.response(asked)
        assert answer["result"]["text"] == "Could not."
        assert "errored" not in branches(repo)
        assert "declined" in tool_results(stub.requests[1])[-1]
        stub.queue("Still here.")
        assert raw.response(raw.request(wire.CHAT, {"text": "Hello?"}))["result"]["text"] == "Still here."
    finally:
        raw.kill()


async def test_a_client_that_did_not_say_it_answers_is_never_asked_and_nothing_runs(silent_client, stub):
    stub.queue(create_branch(silent_client.repo, "unasked"), "Could not.")
    result = await chat(silent_client, "Branch unasked")
    assert silent_client.asked == []
    assert "unasked" not in branches(silent_client.repo)
    assert "declined" in tool_results(stub.requests[1])[-1]
    assert result.text == "Could not."


def test_an_answer_after_the_reply_was_cancelled_runs_nothing_and_the_daemon_keeps_serving(daemon_env, stub, tmp_path):
    repo = git_repository(tmp_path / "repo")
    command, args = git_server(repo)
    stub.queue(create_branch(repo, "late"))
    raw = RawClient({**daemon_env, "IMPRINT_CHAT_N_CTX": "32768"})
    try:
        raw.initialize(
            capabilities={"experimental": ANSWERS_PERMISSIONS},
            initializationOptions={"chat": {"mcp_servers": {"git": {"command": command, "args": args}}}},
        )
        asked = raw.request(wire.CHAT, {"text": "Branch late"})
        question = next_matching(raw, lambda message: message.get("method") == wire.REQUEST_PERMISSION)
        raw.notify("$/cancelRequest", {"id": asked})  # the user stopped the reply while deciding
        assert raw.response(asked)["error"]["code"] == -32800
        raw.send({"id": question["id"], "result": {"outcome": "allow_once"}})  # and then clicked Allow
        stub.queue("Still here.")
        assert raw.response(raw.request(wire.CHAT, {"text": "Hello?"}))["result"]["text"] == "Still here."
        assert "late" not in branches(repo)
        assert "failed to dispatch" not in raw.stderr_text()
    finally:
        raw.kill()
