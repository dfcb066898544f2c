"""``chat.mcp_servers``: the editor shape read from every settings source, refusals that name the
entry, the field and what is accepted (the previous list stays), and how ``imprintd config``
shows it (header and environment values masked)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from imprintd import settings as settings_mod
from imprintd.mcp.config import McpServerConfig, parse_servers

GIT = {"git": {"command": "uvx", "args": ["mcp-server-git", "--repository", "."], "env": {"GIT_PAGER": "cat"}}}


def test_the_editor_shape_becomes_hashable_configs():
    servers = parse_servers(
        {
            **GIT,
            "docs": {"url": "https://docs.example.com/mcp", "headers": {"Authorization": "Bearer x"}},
            "old": {"url": "http://127.0.0.1:3001/sse", "type": "sse"},
            "off": {"command": "never", "disabled": True},
        }
    )
    assert servers == (
        McpServerConfig(
            name="git",
            transport="stdio",
            command="uvx",
            args=("mcp-server-git", "--repository", "."),
            env=(("GIT_PAGER", "cat"),),
        ),
        McpServerConfig(
            name="docs",
            transport="http",
            url="https://docs.example.com/mcp",
            headers=(("Authorization", "Bearer x"),),
        ),
        McpServerConfig(name="old", transport="sse", url="http://127.0.0.1:3001/sse"),
    )
    assert len({*servers, *parse_servers(GIT)}) == 3  # equal configurations are one server


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1], "expected an object of servers by name"),
        ({"git": "uvx"}, 'MCP server "git" must be an object with "command" or "url", got str'),
        ({"git": {}}, 'MCP server "git" needs "command" (a program to start over stdio) or "url" (http or sse)'),
        ({"git": {"command": ""}}, 'MCP server "git": command must be a non-empty string'),
        ({"git": {"command": "x", "args": "--repo ."}}, 'MCP server "git": args must be a list of strings, got str'),
        ({"git": {"command": "x", "env": {"A": 1}}}, 'MCP server "git": env must be an object of strings'),
        ({"git": {"command": "x", "url": "http://h"}}, 'MCP server "git" has both "command" and "url"'),
        ({"git": {"url": "ftp://h"}}, 'MCP server "git": url must be an http(s) URL with a host'),
        (
            {"git": {"url": "http://h", "type": "ws"}},
            'type \'ws\' is not accepted with "url"; accepted: "http" or "sse"',
        ),
        ({"git": {"command": "x", "cwd": "/"}}, 'MCP server "git": unknown field cwd; accepted: command, args, env'),
        ({"git.hub": {"command": "x"}}, "MCP server name 'git.hub' is not accepted: expected 1 to 32 letters"),
        ({"a__b": {"command": "x"}}, "MCP server name 'a__b' is not accepted: it may not contain '__'"),
    ],
)
def test_a_bad_entry_is_refused_naming_it_the_field_and_what_is_accepted(value, message):
    with pytest.raises(ValueError) as refused:
        parse_servers(value)
    assert message in str(refused.value)


def test_every_source_sets_it_and_a_refused_value_keeps_the_previous(tmp_path, monkeypatch):
    config = tmp_path / "config.toml"
    config.write_text('[chat.mcp_servers.git]\ncommand = "uvx"\nargs = ["mcp-server-git"]\n', encoding="utf-8")
    monkeypatch.setenv("IMPRINT_CONFIG", str(config))
    resolved = settings_mod.load(environ={})
    assert [s.name for s in resolved.settings.chat.mcp_servers] == ["git"]
    assert resolved.origins["chat.mcp_servers"] == f"config file {config}"

    resolved = settings_mod.load(environ={"IMPRINT_CHAT_MCP_SERVERS": '{"docs": {"url": "http://127.0.0.1:9/mcp"}}'})
    assert [s.url for s in resolved.settings.chat.mcp_servers] == ["http://127.0.0.1:9/mcp"]

    edited = resolved.apply({"chat": {"mcp_servers": {"fs": {"command": "x", "args": 3}}}}, "editor")
    assert edited.settings.chat.mcp_servers == resolved.settings.chat.mcp_servers  # the previous stays
    assert edited.errors[-1].startswith('chat.mcp_servers is not accepted: MCP server "fs": args must be a list')
    assert edited.errors[-1].endswith(
        "(from editor; keeping {'docs': {'url': 'http://127.0.0.1:9/mcp', 'type': 'http'}})"
    )

    bad = settings_mod.load(environ={"IMPRINT_CHAT_MCP_SERVERS": "{not json"})
    assert bad.errors[0].startswith("chat.mcp_servers is not accepted: not JSON")

    cleared = edited.apply({"chat": {"mcp_servers": None}}, "editor")
    assert cleared.settings.chat.mcp_servers == resolved.settings.chat.mcp_servers  # the environment's again


def test_imprintd_config_shows_servers_without_secret_values(tmp_path):
    env = {
        **{key: value for key, value in os.environ.items() if not key.startswith("IMPRINT_")},
        "IMPRINT_CONFIG": str(tmp_path / "none.toml"),
        "IMPRINT_CHAT_MCP_SERVERS": '{"docs": {"url": "https://d.example/mcp", "headers": {"Authorization": "Bearer s3cret"}}}',
    }
    shown = subprocess.run(
        [sys.executable, "-m", "imprintd", "config"], capture_output=True, text=True, env=env, timeout=120
    )
    assert shown.returncode == 0, shown.stderr
    line = next(line for line in shown.stdout.splitlines() if line.startswith("chat.mcp_servers"))
    assert "https://d.example/mcp" in line and "Authorization" in line and "s3cret" not in line
    assert "(environment)" in line
