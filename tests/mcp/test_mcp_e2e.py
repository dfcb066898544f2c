"""``mcp-server-git`` end to end: ``imprintd ask`` and ``imprintd mcp`` as a shell runs them, and
the LSP-framed daemon over stdio (pytest-lsp), both answering through the scripted
OpenAI-compatible model on loopback. Asserted: what the model was offered and shown, the answer
and its Sources, the steps on stderr or over the wire, and the permission rules of ``ask``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from lsprotocol import types
from pytest_lsp import ClientServerConfig, client_capabilities

from imprintd import protocol as wire
from imprintd.messages import ToolOrigin
from imprintd.research.citations import origin_label
from tests.mcp.servers import git_repo, processes_under
from tests.openai_stub import StubReply

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def repo(tmp_path):
    return git_repo(tmp_path / "shop")


def with_git(daemon_env, repo, **more) -> dict[str, str]:
    servers = {
        "git": {"command": sys.executable, "args": ["-m", "mcp_server_git", "--repository", str(repo)]},
        "missing": {"command": str(repo / "no-such-server")},
    }
    # A window where git's 12 schemas stay under the share: the model is offered each by name.
    return {**daemon_env, "IMPRINT_CHAT_MCP_SERVERS": json.dumps(servers), "IMPRINT_CHAT_N_CTX": "32768", **more}


def ask(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "imprintd", "ask", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=150,
        stdin=subprocess.DEVNULL,
    )


def tools_of(request: dict) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools", ())]


def test_ask_answers_from_git_log_with_its_source(daemon_env, stub, repo):
    stub.queue(
        StubReply(tool_calls=[{"name": "git__git_log", "arguments": {"repo_path": str(repo), "max_count": 3}}]),
        "The rollout window was documented last [1].",
    )
    done = ask(with_git(daemon_env, repo), "What was committed last?")
    assert done.returncode == 0, done.stderr
    first, second = stub.requests
    assert "git__git_log" in tools_of(first) and "find_tools" not in tools_of(first)
    shown = second["messages"][-1]
    assert shown["role"] == "tool" and shown["content"].startswith('[1] git: git_log {"max_count": 3, "repo_path"')
    assert "Document the rollout window of 5 minutes" in shown["content"]
    label = origin_label(ToolOrigin(server="git", tool="git_log", arguments={"repo_path": str(repo), "max_count": 3}))
    assert label.startswith('git: git_log {"max_count": 3, "repo_path": ')
    assert done.stdout == f"The rollout window was documented last [1].\n\nSources:\n[1] {label}\n"
    assert "[Asking git: git_log: finished]" in done.stderr
    assert "[Starting MCP server missing: failed - MCP server missing is left out of this reply" in done.stderr


def test_ask_refuses_a_tool_that_writes_without_a_terminal_unless_allowed(daemon_env, stub, repo):
    create = {"name": "git__git_create_branch", "arguments": {"repo_path": str(repo), "branch_name": "hotfix"}}
    stub.queue(StubReply(tool_calls=[create]), "It was not made.")
    refused = ask(with_git(daemon_env, repo), "Make a hotfix branch.")
    assert refused.returncode == 0, refused.stderr
    assert "[Asking git: git_create_branch: refused, it may act and stdin is not a terminal" in refused.stderr
    assert "declined" in stub.requests[1]["messages"][-1]["content"]
    branches = subprocess.run(["git", "-C", str(repo), "branch"], capture_output=True, text=True).stdout
    assert "hotfix" not in branches

    stub.queue(StubReply(tool_calls=[create]), "Made.")
    allowed = ask(with_git(daemon_env, repo), "Make a hotfix branch.", "--allow-tools")
    assert allowed.returncode == 0, allowed.stderr
    assert "hotfix" in subprocess.run(["git", "-C", str(repo), "branch"], capture_output=True, text=True).stdout
    assert not processes_under(repo)  # `ask` stopped its servers as it ended


def test_imprintd_mcp_lists_servers_their_state_and_tools(daemon_env, repo):
    listed = subprocess.run(
        [sys.executable, "-m", "imprintd", "mcp"],
        capture_output=True,
        text=True,
        env=with_git(daemon_env, repo),
        timeout=120,
    )
    assert listed.returncode == 1  # one server failed
    lines = listed.stdout.splitlines()
    assert lines[0] == f"git  ready  ({sys.executable} -m mcp_server_git --repository {repo})"
    assert any(line.startswith("    git__git_log  [read-only]  ") for line in lines)
    assert any(line.startswith("    git__git_commit  [asks first]  ") for line in lines)
    assert lines[-1].startswith(f"missing  failed  ({repo}/no-such-server): the command was not found")


async def test_the_daemon_over_stdio_answers_from_git_and_keeps_serving(daemon_env, stub, repo, tmp_path):
    config = ClientServerConfig(
        server_command=[sys.executable, "-m", "imprintd", "serve", "--stdio"], server_env=with_git(daemon_env, repo)
    )
    lsp = await config.start()
    notes: list = []
    lsp.feature(wire.TOOL_STEP)(lambda params: notes.append(params))
    await lsp.initialize_session(types.InitializeParams(capabilities=client_capabilities("visual-studio-code")))
    try:
        stub.queue(
            StubReply(tool_calls=[{"name": "git__git_log", "arguments": {"repo_path": str(repo)}}]),
            "Billing moved to port 9202 [1].",
        )
        result = await lsp.protocol.send_request_async(wire.CHAT, {"text": "Where is billing now?"})
        assert result.text.startswith("Billing moved to port 9202 [1].")
        (source,) = result.sources
        assert (source.kind, source.origin.server, source.origin.tool) == ("tool", "git", "git_log")
        assert source.origin.arguments.repo_path == str(repo)
        steps = [(n.tool, n.state) for n in notes]
        assert ("missing__", "failed") in steps
        assert ("git__git_log", "started") in steps and ("git__git_log", "finished") in steps
        # The finished call carries the start of git log's output for the client to show.
        [finished] = [n for n in notes if (n.tool, n.state) == ("git__git_log", "finished")]
        assert "Move billing to port 9202 behind the gateway" in finished.preview
        assert not hasattr(finished, "resources")  # git log names no resource

        # A tool that writes: this client cannot be asked yet, so it is refused and the reply goes on.
        stub.queue(
            StubReply(tool_calls=[{"name": "git__git_add", "arguments": {"repo_path": str(repo), "files": ["x"]}}]),
            "Not added.",
        )
        again = await lsp.protocol.send_request_async(wire.CHAT, {"text": "Add x.", "sessionId": result.sessionId})
        assert again.text == "Not added."
        assert "declined" in stub.requests[-1]["messages"][-1]["content"]
    finally:
        await lsp.shutdown_session()
        await lsp.stop()
    assert not processes_under(repo)  # the daemon stopped its server as it ended
