"""``imprintd acp``: the Agent Client Protocol (v1) on stdio, for Zed, CodeCompanion and avante.

A thin adapter over the same core the LSP-framed server uses (``chat.Chat``): ``wire``
holds ACP's messages, ``jsonrpc`` the newline-delimited framing, ``agent`` the methods,
``events`` how a reply shows as ``session/update`` and ``replay`` how a stored one does.
stdout carries ACP messages only; logs go to stderr.
"""

from __future__ import annotations

import asyncio
import sys

from imprintd.chat import Chat


def serve(chat: Chat) -> int:
    """Speak ACP on this process's stdin and stdout until stdin ends; returns the exit code."""
    from imprintd.acp.agent import Agent
    from imprintd.acp.jsonrpc import Connection, Dispatcher, serve_lines

    # Our own reader on stdin's fd: the reading thread may still be blocked in it at exit,
    # and interpreter shutdown aborts if that thread holds sys.stdin's buffer lock.
    stdin = open(sys.stdin.fileno(), "rb", closefd=False)  # noqa: SIM115 (lives as long as the process)
    connection = Connection(sys.stdout.buffer)
    sys.stdout = sys.stderr  # stdout carries protocol only; a stray print goes to the log
    agent = Agent(chat, connection)

    async def run() -> None:
        try:
            await serve_lines(Dispatcher(connection, agent.requests, agent.notifications), stdin)
        finally:
            await chat.mcp.aclose()  # no MCP server outlives the agent

    try:
        asyncio.run(run())
    finally:
        chat.close()
    return 0
