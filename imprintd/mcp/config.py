"""Which MCP servers a reply may use, in the shape editors write them.

Editors and agents list servers by name (VS Code's ``mcp.json``, Claude Code's and Cline's
``mcpServers``): ``{"git": {"command": "uvx", "args": ["mcp-server-git"], "env": {}}}`` for a
server Imprint starts over stdio, ``{"docs": {"url": "https://…/mcp", "headers": {…}}}`` for one
it reaches over streamable HTTP (``"type": "sse"`` for the older SSE transport). ``parse_servers``
reads that shape into hashable ``McpServerConfig`` records: two sessions that name the same
record share one started server (``servers.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

Transport = Literal["stdio", "http", "sse"]

#: A server's name becomes the first part of its tools' names (``git__git_log``), and
#: OpenAI-compatible tool names allow only these characters (docs/decisions.md, "MCP tools in a small context").
SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")

ACCEPTED = (
    'an object of servers by name, each {"command": "…", "args": ["…"], "env": {"NAME": "value"}} '
    'or {"url": "http(s)://…", "headers": {"Name": "value"}, "type": "http" or "sse"}'
)


class McpServerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One MCP server as configured; frozen and hashable, so equal configurations share a server."""

    name: str
    transport: Transport
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()

    def described(self) -> str:
        """The server as ``imprintd mcp`` lists it, without header or environment values."""
        if self.transport == "stdio":
            return " ".join([self.command, *self.args])
        return f"{self.url} ({self.transport})"


def parse_servers(value: Any) -> tuple[McpServerConfig, ...]:
    """The servers ``value`` lists, in the editor shape; ValueError naming the entry, the field
    and what is accepted. ``None`` and ``{}`` are no servers; an already parsed tuple passes."""
    if value is None:
        return ()
    if isinstance(value, tuple) and all(isinstance(item, McpServerConfig) for item in value):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"expected {ACCEPTED}, got {_kind(value)}")
    # "disabled": true (Cline's and Claude Code's files have it) keeps an entry without starting it.
    return tuple(
        _server(name, entry)
        for name, entry in value.items()
        if not (isinstance(entry, Mapping) and entry.get("disabled") is True)
    )


def _server(name: Any, entry: Any) -> McpServerConfig:
    if not isinstance(name, str) or not SERVER_NAME.fullmatch(name):
        raise ValueError(
            f"MCP server name {name!r} is not accepted: expected 1 to 32 letters, digits, '_' or '-' "
            "(it starts the names of its tools)"
        )
    if "__" in name:
        raise ValueError(
            f"MCP server name {name!r} is not accepted: it may not contain '__' (it separates server and tool)"
        )
    if not isinstance(entry, Mapping):
        raise ValueError(f'MCP server "{name}" must be an object with "command" or "url", got {_kind(entry)}')
    known = {"command", "args", "env", "url", "headers", "type", "transport", "disabled"}
    unknown = sorted(str(key) for key in entry if key not in known)
    if unknown:
        raise ValueError(
            f'MCP server "{name}": unknown field {", ".join(unknown)}; accepted: command, args, env '
            "(stdio) or url, headers, type (http, sse)"
        )
    kind = entry.get("type", entry.get("transport"))
    if "command" in entry and "url" in entry:
        raise ValueError(
            f'MCP server "{name}" has both "command" and "url": give one (command: stdio, url: http or sse)'
        )
    if "command" in entry:
        if kind not in (None, "stdio"):
            raise ValueError(f'MCP server "{name}": type {kind!r} does not go with "command"; accepted: "stdio"')
        command = entry["command"]
        if not isinstance(command, str) or not command.strip():
            raise ValueError(f'MCP server "{name}": command must be a non-empty string, got {_kind(command)}')
        return McpServerConfig(
            name=name,
            transport="stdio",
            command=command,
            args=_strings(name, "args", entry.get("args", ())),
            env=_pairs(name, "env", entry.get("env", {})),
        )
    if "url" in entry:
        url = entry["url"]
        if not isinstance(url, str) or not re.match(r"https?://[^\s/]+", url):
            raise ValueError(f'MCP server "{name}": url must be an http(s) URL with a host, got {_kind(url)}')
        transport = {None: "http", "http": "http", "streamable-http": "http", "streamableHttp": "http", "sse": "sse"}
        if kind not in transport:
            raise ValueError(
                f'MCP server "{name}": type {kind!r} is not accepted with "url"; accepted: "http" or "sse"'
            )
        return McpServerConfig(
            name=name,
            transport=transport[kind],  # type: ignore[arg-type]
            url=url,
            headers=_pairs(name, "headers", entry.get("headers", {})),
        )
    raise ValueError(f'MCP server "{name}" needs "command" (a program to start over stdio) or "url" (http or sse)')


def _strings(name: str, field: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(item, str) for item in value):
        raise ValueError(f'MCP server "{name}": {field} must be a list of strings, got {_kind(value)}')
    return tuple(value)


def _pairs(name: str, field: str, value: Any) -> tuple[tuple[str, str], ...]:
    if isinstance(value, list | tuple) and all(
        isinstance(pair, list | tuple) and len(pair) == 2 for pair in value
    ):  # already pairs (a parsed config sent back)
        value = dict(value)
    if not isinstance(value, Mapping) or not all(
        isinstance(key, str) and isinstance(item, str) for key, item in value.items()
    ):
        raise ValueError(f'MCP server "{name}": {field} must be an object of strings, got {_kind(value)}')
    return tuple(sorted(value.items()))


def _kind(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:59] + '…'}"


def as_editor_shape(servers: tuple[McpServerConfig, ...]) -> dict[str, dict[str, Any]]:
    """The servers back in the editor shape (``imprintd config`` shows them so), secrets masked."""
    shaped: dict[str, dict[str, Any]] = {}
    for server in servers:
        if server.transport == "stdio":
            entry: dict[str, Any] = {"command": server.command, "args": list(server.args)}
            if server.env:
                entry["env"] = {key: "…" for key, _ in server.env}
        else:
            entry = {"url": server.url, "type": server.transport}
            if server.headers:
                entry["headers"] = {key: "…" for key, _ in server.headers}
        shaped[server.name] = entry
    return shaped
