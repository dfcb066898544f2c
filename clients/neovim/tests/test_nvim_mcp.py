"""MCP servers through the plugin against the real daemon: the `mcp_servers` setup option sent as
`chat.mcp_servers`, the real `mcp-server-git` on a real repository, `imprint/requestPermission`
answered with `vim.ui.select`, and MCP steps named by their server."""

from __future__ import annotations

import sys

from tests.mcp_repo import LATEST, branches, git_repository
from tests.openai_stub import StubReply

#: vim.ui.select replaced by one that records what it was asked and answers with the next of
#: `_G.test_choices` (an index, or 0 for dismissed) on a later turn of the loop, as a picker does.
PICKER = """
_G.test_asked, _G.test_choices = {}, {}
vim.ui.select = function(items, opts, on_choice)
  table.insert(_G.test_asked, { items = items, prompt = opts.prompt, kind = opts.kind })
  local choice = table.remove(_G.test_choices, 1) or 0
  vim.schedule(function()
    if choice == 0 then on_choice(nil, nil) else on_choice(items[choice], choice) end
  end)
end
"""


def create_branch(repo, name: str) -> StubReply:
    arguments = {"repo_path": str(repo), "branch_name": name}
    return StubReply(tool_calls=[{"name": "git__git_create_branch", "id": "call_0", "arguments": arguments}])


def tool_results(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def test_mcp_servers_reach_the_daemon_and_a_tool_that_may_act_runs_only_when_picked(
    bare_editor, options, stub, tmp_path
):
    editor = bare_editor
    repo = git_repository(tmp_path / "repo")
    servers = {"git": {"command": sys.executable, "args": ["-m", "mcp_server_git", "--repository", str(repo)]}}
    # A window the git tools' schemas fit in whole (else the model gets the compact pair).
    editor.lua(
        "require('imprint').setup(...)", {**options, "mcp_servers": servers, "settings": {"chat": {"n_ctx": 32768}}}
    )
    editor.lua(PICKER)
    editor.lua("_G.test_choices = { 1 }")  # Allow once
    stub.queue(
        StubReply(tool_calls=[{"name": "git__git_log", "id": "call_0", "arguments": {"repo_path": str(repo)}}]),
        create_branch(repo, "topic"),
        "Branched topic off the last commit.",
        create_branch(repo, "refused"),
        "I did not make it.",
    )

    editor.command("Imprint Branch topic off the last commit")
    [done] = editor.wait_done(1)
    assert done["status"] == "done", editor.notes()

    assert "git__git_log" in {tool["function"]["name"] for tool in stub.requests[0]["tools"]}
    [asked] = editor.lua("return _G.test_asked")
    assert asked["items"] == ["Allow once", "Always allow", "Reject"]
    assert asked["kind"] == "imprint.permission"
    assert (
        "“git”" in asked["prompt"]
        and "git_create_branch" in asked["prompt"]
        and '"branch_name":"topic"' in asked["prompt"]
    )
    assert "topic" in branches(repo)
    assert any(LATEST in result for result in tool_results(stub.requests[1])), "git log's output reached the model"
    assert "topic" in tool_results(stub.requests[2])[-1]
    # Both steps as finished virtual lines, each naming the server.
    steps = [text for _, text, _ in editor.tool_lines()]
    assert len(steps) == 2 and all(text.startswith("  ✓ ") and "git" in text for text in steps), steps

    editor.command("Imprint And one named refused")  # the picker is dismissed this time
    [_, second] = editor.wait_done(2)
    assert second["status"] == "done", editor.notes()
    assert len(editor.lua("return _G.test_asked")) == 2
    assert "refused" not in branches(repo)
    assert "declined" in tool_results(stub.requests[4])[-1]
    assert any(text.startswith("  ✗ ") and "git" in text for _, text, _ in editor.tool_lines())

    stored = editor.request("imprint/session", {"sessionId": done["sessionId"]})
    assert [m["role"] for m in stored["messages"]].count("tool") == 3

    # Reopened, the stored calls show by server and tool, the declined one failed.
    editor.command("ImprintNew")
    editor.lua("require('imprint.sessions').open(...)", done["sessionId"])
    editor.wait(f"require('imprint.chat').session_id() == '{done['sessionId']}'", "the session to open")
    assert [text for _, text, _ in editor.tool_lines()] == [
        "  ✓ git · git_log",
        "  ✓ git · git_create_branch",
        "  ✗ git · git_create_branch",
    ]


def test_the_option_is_checked_and_sent_whole_when_it_changes(bare_editor, options, stub, tmp_path):
    editor = bare_editor
    try:
        editor.lua("require('imprint').setup(...)", {**options, "mcp_servers": {"git": {"args": ["x"]}}})
        raise AssertionError("a server without command or url was accepted")
    except Exception as error:  # noqa: BLE001 (pynvim raises NvimError)
        assert "mcp_servers" in str(error)
    repo = git_repository(tmp_path / "repo")
    servers = {
        "git": {"command": sys.executable, "args": ["-m", "mcp_server_git", "--repository", str(repo)], "env": {}}
    }
    editor.lua("require('imprint').setup(...)", {**options, "settings": {"chat": {"n_ctx": 32768}}})
    stub.queue("one", "two", "three")
    editor.command("Imprint hi")
    editor.wait_done(1)
    assert not any(tool["function"]["name"].startswith("git__") for tool in stub.requests[0]["tools"])

    # setup() again with servers: a running daemon gets them (didChangeConfiguration), whole.
    editor.lua(
        "require('imprint').setup(...)", {**options, "mcp_servers": servers, "settings": {"chat": {"n_ctx": 32768}}}
    )
    editor.command("Imprint again")
    editor.wait_done(2)
    assert "git__git_log" in {tool["function"]["name"] for tool in stub.requests[1]["tools"]}
    assert not [message for message, level in editor.notes() if level == 4], editor.notes()

    # And without them again: unset, so the daemon offers none.
    editor.lua("require('imprint').setup(...)", {**options, "settings": {"chat": {"n_ctx": 32768}}})
    editor.command("Imprint once more")
    editor.wait_done(3)
    assert not any(tool["function"]["name"].startswith("git__") for tool in stub.requests[2]["tools"])


def test_an_mcp_results_web_address_opens_with_vim_ui_open_and_shows_in_the_quickfix(editor):
    opened, listed = editor.lua("""
        local sources = require('imprint.chat.sources')
        local opened = {}
        vim.ui.open = function(uri) table.insert(opened, uri) end
        local function tool(number, uri)
          return { number = number, kind = 'tool', label = 'docs: fetch_page', path = vim.NIL, message = vim.NIL,
            startLine = vim.NIL, endLine = vim.NIL, cited = true, supported = true, reason = '',
            origin = { server = 'docs', tool = 'fetch_page', arguments = vim.empty_dict(), uri = uri } }
        end
        local all = { tool(1, 'https://docs.example.com/rollout'), tool(2, 'javascript:alert(1)'), tool(3, vim.NIL) }
        for _, source in ipairs(all) do sources.open(source) end
        require('imprint.chat.state').last_sources = { sources = all }
        sources.to_quickfix()
        return { opened, vim.tbl_map(function(item) return item.text end, vim.fn.getqflist()) }
    """)
    assert opened == ["https://docs.example.com/rollout"]  # a server's other addresses are not opened
    assert listed == [
        "[1] docs: fetch_page <https://docs.example.com/rollout>",
        "[2] docs: fetch_page",
        "[3] docs: fetch_page",
    ]
    assert [message for message, _ in editor.notes()].count("imprint: docs: fetch_page has no place to open") == 2
