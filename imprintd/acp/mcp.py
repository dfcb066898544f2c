"""The MCP servers an ACP client hands a session, as the core's ``McpServerConfig`` records.

ACP lists a session's servers in ``session/new``, ``session/load`` and ``session/resume``: a
stdio server as ``{name, command, args, env: [{name, value}]}``, an http or sse one as
``{type, name, url, headers: [{name, value}]}``. They are read here into the editor shape
``chat.mcp_servers`` takes and checked by the same parser (``mcp.config.parse_servers``), so a
server named in ACP and the same one in the settings are one configuration, sharing a process.

A server's name starts its tools' names (``git__git_log``), so it is kept to the characters a
tool name allows: clients name servers freely ("GitHub MCP"), and refusing a session for a
space in a name would be worse than showing ``GitHub_MCP__…``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from msgspec import UNSET

from imprintd.acp import wire
from imprintd.acp.jsonrpc import INVALID_PARAMS, RpcError
from imprintd.mcp.config import McpServerConfig, parse_servers

#: What ``initialize`` says of them (``agentCapabilities.mcpCapabilities``): the core's SDK
#: clients speak streamable HTTP and SSE besides stdio; ACP's own transport is not offered.
MCP_CAPABILITIES = {"http": True, "sse": True}

#: The longest server name the core takes (its tools' names must stay within 64 characters).
NAME_LIMIT = 32


def session_servers(servers: Sequence[wire.McpServer]) -> tuple[McpServerConfig, ...]:
    """The session's servers as core records; -32602 naming ``mcpServers[i]`` and what is accepted."""
    shaped: dict[str, dict[str, Any]] = {}
    for index, server in enumerate(servers):
        name = tool_safe_name(server.name, taken=shaped.keys(), index=index)
        shaped[name] = _editor_entry(index, server)
    try:
        return parse_servers(shaped)
    except ValueError as error:
        raise RpcError(INVALID_PARAMS, f"mcpServers: {error}") from None


def tool_safe_name(name: str, *, taken, index: int) -> str:
    """``name`` with what a tool name cannot hold made ``_`` (``__`` separates server and tool),
    cut to ``NAME_LIMIT``; a name taken already, or none, is told apart by its place in the list."""
    # Cut before the underscores are stripped: a name must neither end nor begin with one (``a___b``).
    safe = re.sub(r"_{2,}", "_", re.sub(r"[^A-Za-z0-9_-]", "_", name))[:NAME_LIMIT].strip("_") or f"server{index}"
    if safe in taken:
        suffix = f"-{index}"
        safe = safe[: NAME_LIMIT - len(suffix)] + suffix
    return safe


def _editor_entry(index: int, server: wire.McpServer) -> dict[str, Any]:
    """One ACP server in the shape ``chat.mcp_servers`` takes, or -32602 saying which fields go together."""
    where = f"mcpServers[{index}]"
    if server.type is UNSET or server.type == "stdio":
        if server.command is UNSET:
            raise RpcError(
                INVALID_PARAMS,
                f"{where}: a stdio server needs command (with args and env); an http or sse one needs type and url.",
            )
        return {
            "command": server.command,
            "args": list(server.args),
            "env": {variable.name: variable.value for variable in server.env},
        }
    if server.type in ("http", "sse"):
        if server.url is UNSET:
            raise RpcError(INVALID_PARAMS, f"{where}: an {server.type} server needs url (and headers).")
        return {
            "type": server.type,
            "url": server.url,
            "headers": {header.name: header.value for header in server.headers},
        }
    raise RpcError(
        INVALID_PARAMS,
        f"{where}: type {server.type!r} is not supported (mcpCapabilities); "
        "send a stdio server (command, args, env) or type http or sse (url, headers).",
    )
