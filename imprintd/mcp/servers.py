"""The MCP servers of one process: started when first needed, shared, stopped when done.

``McpServers`` (one per ``Chat``, ``Chat.mcp``) keeps one connection per configuration
(``McpServerConfig`` is hashable: every session naming the same server shares one). A
connection is owned by a task of its own, which enters the SDK's transport and
``ClientSession`` contexts, initializes, lists the tools, then holds the contexts open until
it is told to stop, and leaves them in that same task (anyio requires it; a process started
by ``stdio_client`` is stopped as its context exits, so nothing is orphaned). Calls are made
on the open session from the reply's own task, under the reply's timeout and cancellation.

A server that cannot be started (no such command, an unreachable URL), does not answer
``initialize`` within ``START_TIMEOUT_S``, dies, or writes what is not JSON-RPC is reported once
(logged, and a failed ``ToolStep`` in the reply that found it) and the reply goes on without
its tools; it is tried again by a reply at least ``RETRY_AFTER_S`` later. The tool list is
cached and listed again after ``notifications/tools/list_changed``.

Sampling and elicitation are not offered (the client capabilities leave them out, and the
SDK answers such a request with an error): a server cannot make Imprint's model write for it
or ask the user for input. "Always allow" answers are kept here, per session, server and tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Literal

import anyio
import msgspec

from imprintd.events import ReplyEvents, ToolStep
from imprintd.mcp.config import McpServerConfig

logger = logging.getLogger(__name__)

#: Seconds a server has to start and answer ``initialize`` and ``tools/list``.
START_TIMEOUT_S = 15.0
#: Of the time a reply's research has left, the most starting its servers may take.
START_SHARE = 0.5
#: Seconds one tool call may take at most (less when the reply's research has less left).
CALL_TIMEOUT_S = 60.0
#: Seconds a failed server is left alone before a reply tries it again.
RETRY_AFTER_S = 60.0
#: Seconds stopping one server may take (the SDK ends a stdio server's process within it).
STOP_TIMEOUT_S = 10.0

State = Literal["stopped", "starting", "ready", "failed"]


class ServerStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One server as ``imprintd mcp`` lists it."""

    name: str
    transport: str
    target: str
    state: State
    detail: str = ""
    tools: tuple[str, ...] = ()


class McpUnavailable(Exception):
    """The server cannot serve the call (not started, failed, or it died during it); says why."""


class McpToolInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One tool of one server, as listed: what ``mcp/tools.py`` builds a ``Tool`` from."""

    server: McpServerConfig
    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool = False
    destructive: bool = True
    #: ``openWorldHint`` said true (unset is taken as not: a client shows the call as a read).
    open_world: bool = False
    title: str = ""


def tool_info(server: McpServerConfig, tool: Any) -> McpToolInfo:
    """An SDK ``Tool`` as ``McpToolInfo``; annotations missing mean: may write, may destroy."""
    annotations = tool.annotations
    read_only = bool(annotations and annotations.read_only_hint)
    # The spec's default for destructiveHint is true, and it is meaningful only when not read-only.
    destructive = not read_only and not (annotations is not None and annotations.destructive_hint is False)
    if read_only and annotations is not None and annotations.destructive_hint:
        destructive = True
    return McpToolInfo(
        server=server,
        name=tool.name,
        description=(tool.description or "").strip(),
        input_schema=dict(tool.input_schema or {"type": "object"}),
        read_only=read_only,
        destructive=destructive,
        open_world=bool(annotations and annotations.open_world_hint),
        title=tool.title or (annotations.title if annotations and annotations.title else "") or "",
    )


class _Connection:
    """One server's connection, owned by one task (``_own``) from start to stop."""

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.state: State = "stopped"
        self.detail = ""
        self.failed_at = 0.0
        self.session: Any = None
        self.tools: list[McpToolInfo] | None = None
        self.stale = False
        self.ready = anyio.Event()
        self._stop = anyio.Event()
        self._done = anyio.Event()
        self._task: asyncio.Task | None = None
        self._listing = anyio.Lock()
        #: Whether this failure was reported in a reply yet (each failure is reported once).
        self.reported = True

    def start(self) -> None:
        self.state, self.detail = "starting", ""
        self.ready, self._stop, self._done = anyio.Event(), anyio.Event(), anyio.Event()
        self._task = asyncio.get_running_loop().create_task(self._own(), name=f"imprintd-mcp-{self.config.name}")

    def fail(self, detail: str) -> None:
        if self.state == "failed":
            return
        logger.warning("MCP server %s: %s", self.config.name, detail)
        self.state, self.detail, self.failed_at, self.reported = "failed", detail, time.monotonic(), False
        self.session, self.tools = None, None
        self.ready.set()
        self._stop.set()
        if asyncio.current_task() is not self._task:
            self.abandon()  # found from outside (a garbled line, a lost call): its task may be stuck in a request

    async def _own(self) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(_transport(self.config))
                from mcp import ClientSession
                from mcp.types import Implementation

                session = await stack.enter_async_context(
                    ClientSession(
                        read,
                        write,
                        message_handler=self._on_message,
                        client_info=Implementation(name="imprintd", version=_version()),
                    )
                )
                await session.initialize()
                self.session = session
                await self._list(session)
                self.state = "ready"
                self.ready.set()
                await self._stop.wait()
        except asyncio.CancelledError:
            if self.state == "starting":
                self.fail("stopped while starting")
            raise  # cancelled: stopped from outside, its contexts exited (the process ended)
        except Exception as error:  # noqa: BLE001 (a server's failure must never end the daemon)
            self.fail(_why(error))
        finally:
            if self.state == "ready":
                self.state = "stopped"
            self.session = None
            self.ready.set()
            self._done.set()

    async def _on_message(self, message: Any) -> None:
        import mcp.types as types

        if isinstance(message, types.ToolListChangedNotification):
            self.stale = True
        elif isinstance(message, Exception):
            # What the server wrote is not JSON-RPC: the connection cannot be trusted after it.
            self.fail(f"wrote something that is not an MCP message ({_why(message)})")

    async def _list(self, session: Any) -> list[McpToolInfo]:
        tools: list[McpToolInfo] = []
        cursor = None
        for _ in range(100):  # a server that pages forever cannot hang a reply
            from mcp.types import PaginatedRequestParams

            listed = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
            tools.extend(tool_info(self.config, tool) for tool in listed.tools)
            cursor = listed.next_cursor
            if not cursor:
                break
        self.tools, self.stale = tools, False
        return tools

    async def listed(self, timeout: float) -> list[McpToolInfo]:
        """The tools, listed again when the server said they changed."""
        if self.tools is not None and not self.stale:
            return self.tools
        async with self._listing:
            if self.session is None:
                raise McpUnavailable(self.detail or "not running")
            try:
                with anyio.fail_after(timeout):
                    return await self._list(self.session)
            except Exception as error:
                self.fail(f"listing its tools failed: {_why(error)}")
                raise McpUnavailable(self.detail) from None

    def abandon(self) -> None:
        """Stop a connection stuck starting without waiting: its task unwinds the SDK's contexts
        (which end the process, shielded) on its own."""
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def stop(self) -> None:
        task = self._task
        if task is None:
            return
        self._stop.set()
        with anyio.move_on_after(STOP_TIMEOUT_S):
            await self._done.wait()
        if not task.done():
            task.cancel()  # its contexts exit shielded: the process is still stopped
            with anyio.move_on_after(STOP_TIMEOUT_S):
                await self._done.wait()
        self._task = None
        if self.state != "failed":
            self.state = "stopped"


def _version() -> str:
    from imprintd import __version__

    return __version__


def _transport(config: McpServerConfig) -> contextlib.AbstractAsyncContextManager[Any]:
    """The SDK's transport context for ``config``: its streams to and from the server."""
    if config.transport == "stdio":
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=config.command, args=list(config.args), env=dict(config.env) or None)
        return stdio_client(params, errlog=sys.stderr)
    if config.transport == "sse":
        from mcp.client.sse import sse_client

        return sse_client(config.url, headers=dict(config.headers) or None)
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    return _http(streamable_http_client, create_mcp_http_client, config)


@contextlib.asynccontextmanager
async def _http(streamable_http_client: Callable, create_client: Callable, config: McpServerConfig):
    async with create_client(headers=dict(config.headers) or None) as client:
        async with streamable_http_client(config.url, http_client=client) as streams:
            yield streams


def _why(error: BaseException) -> str:
    """A failure in words: the exception's own message, the first of a group's."""
    if isinstance(error, BaseExceptionGroup) and error.exceptions:
        return _why(error.exceptions[0])
    if isinstance(error, FileNotFoundError):
        return f"the command was not found ({error.filename or error})"
    if isinstance(error, TimeoutError):
        return "it did not answer in time"
    message = getattr(error, "message", None)  # MCPError's own words, not its args tuple
    text = (message if isinstance(message, str) else str(error)).strip() or type(error).__name__
    if isinstance(error, ValueError) and "validation error" in text:
        # pydantic's report of a line that is not a JSON-RPC message: its input is the line.
        quoted = re.search(r"input_value=('.*?'|\".*?\")", text)
        text = f"the line {quoted.group(1)}" if quoted else "a line that is not a JSON-RPC message"
    text = text.splitlines()[0]
    return text if len(text) <= 300 else text[:299] + "…"


class McpServers:
    """Every MCP server this process started, one per configuration; see the module docstring."""

    def __init__(self) -> None:
        self._connections: dict[McpServerConfig, _Connection] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Sessions that named each server the settings do not: ``release`` stops one no open session uses.
        self._users: dict[McpServerConfig, set[str]] = {}
        #: The servers of the settings: kept until the settings drop them or the process ends.
        self._configured: tuple[McpServerConfig, ...] = ()
        #: "Always" answers: session id → {(server, tool)}.
        self._always: dict[str, set[tuple[str, str]]] = {}

    # -- settings and sessions --------------------------------------------------------------
    def configure(self, servers: Sequence[McpServerConfig]) -> None:
        """The servers the settings name now (``imprintd mcp`` lists them even before they start).

        A running server the settings no longer name, and no session named, is stopped (its task
        unwinds on its own)."""
        removed = set(self._configured) - set(servers)
        self._configured = tuple(servers)
        for config in removed:
            if self._users.get(config):
                continue
            connection = self._connections.pop(config, None)
            if connection is not None:
                connection.abandon()

    def always_allowed(self, session_id: str, server: str, tool: str) -> bool:
        return (server, tool) in self._always.get(session_id, set())

    def allow_always(self, session_id: str, server: str, tool: str) -> None:
        self._always.setdefault(session_id, set()).add((server, tool))

    # -- tools ------------------------------------------------------------------------------
    async def tools_for(
        self, servers: Iterable[McpServerConfig], *, session_id: str, events: ReplyEvents | None, timeout: float
    ) -> list[McpToolInfo]:
        """The tools of ``servers`` for a reply of ``session_id``, starting those not running.

        A server that fails (now, or since the last reply) is reported once through ``events``
        and left out (``events`` None: not reported yet); the others are started side by side,
        each within ``timeout``.
        """
        wanted = list(dict.fromkeys(servers))
        if not wanted:
            return []
        self._same_loop()
        for config in wanted:
            if config not in self._configured:  # a session's own server: stopped when no session uses it
                self._users.setdefault(config, set()).add(session_id)
        listed: dict[McpServerConfig, list[McpToolInfo]] = {}

        async def one(config: McpServerConfig) -> None:
            try:
                connection = await self._ready(config, timeout)
                listed[config] = await connection.listed(timeout)
            except McpUnavailable:
                pass

        async with anyio.create_task_group() as group:
            for config in wanted:
                group.start_soon(one, config)
        for config in wanted:
            connection = self._connections.get(config)
            if (
                events is not None
                and connection is not None
                and connection.state == "failed"
                and not connection.reported
            ):
                connection.reported = True
                events.tool_step(
                    ToolStep(
                        call_id=f"mcp-{config.name}",
                        tool=f"{config.name}__",
                        title=f"Starting MCP server {config.name}",
                        state="failed",
                        detail=f"MCP server {config.name} is left out of this reply: {connection.detail}",
                    )
                )
        return [tool for config in wanted for tool in listed.get(config, [])]

    async def _ready(self, config: McpServerConfig, timeout: float) -> _Connection:
        connection = self._connections.get(config)
        if connection is None:
            connection = self._connections[config] = _Connection(config)
        if connection.state == "failed":
            if time.monotonic() - connection.failed_at < RETRY_AFTER_S:
                raise McpUnavailable(connection.detail)
            await connection.stop()
        if connection.state == "stopped":
            connection.start()
        with anyio.move_on_after(timeout):
            await connection.ready.wait()
        if connection.state == "starting":
            # Failing it abandons its task, which stops the server on its own while the reply goes on.
            connection.fail(f"it did not finish starting (initialize and tools/list) within {timeout:.0f} s")
        if connection.state != "ready":
            raise McpUnavailable(connection.detail or "not running")
        return connection

    async def call(
        self,
        config: McpServerConfig,
        tool: str,
        arguments: dict[str, Any],
        *,
        timeout: float,
        progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None,
    ) -> Any:
        """Call ``tool`` on ``config``'s server; its ``CallToolResult``. McpUnavailable when the
        server is gone or dies during the call, TimeoutError past ``timeout``; a cancelled reply
        cancels the call (the SDK tells the server)."""
        connection = self._connections.get(config)
        session = connection.session if connection is not None and connection.state == "ready" else None
        if connection is None or session is None:
            raise McpUnavailable(connection.detail if connection is not None else "not started")
        from mcp import MCPError

        try:
            with anyio.fail_after(timeout):
                return await session.call_tool(tool, arguments, progress_callback=progress)
        except MCPError as error:
            if connection.state == "failed":
                raise McpUnavailable(connection.detail) from None
            if _connection_lost(error):
                connection.fail(f"the connection ended during a call of {tool} ({_why(error)})")
                raise McpUnavailable(connection.detail) from None
            raise
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as error:
            connection.fail(f"the connection ended during a call of {tool} ({_why(error)})")
            raise McpUnavailable(connection.detail) from None

    # -- status and stopping -----------------------------------------------------------------
    def status(self, servers: Iterable[McpServerConfig] = ()) -> list[ServerStatus]:
        """Each configured server (and each other one started), its state and its tools."""
        listed = list(dict.fromkeys([*self._configured, *servers, *self._connections]))
        rows = []
        for config in listed:
            connection = self._connections.get(config)
            state: State = connection.state if connection is not None else "stopped"
            tools = tuple(tool.name for tool in (connection.tools or ())) if connection is not None else ()
            rows.append(
                ServerStatus(
                    name=config.name,
                    transport=config.transport,
                    target=config.described(),
                    state=state,
                    detail=connection.detail if connection is not None else "",
                    tools=tools,
                )
            )
        return rows

    async def release(self, servers: Iterable[McpServerConfig], session_id: str | None = None) -> None:
        """A session closed: stop those of ``servers`` that no other session uses and the settings
        do not name, and forget its "always" answers."""
        if session_id is not None:
            self._always.pop(session_id, None)
        await self._stop_unused(servers, session_id)

    async def drop(self, servers: Iterable[McpServerConfig], session_id: str) -> None:
        """A session no longer names ``servers`` (a client's ``session/load`` or ``session/resume``
        listed others): stop those no other session uses and the settings do not name, and forget
        the session's "always" answers for their tools (a server of the same name later may be
        another one)."""
        servers = list(servers)
        names = {config.name for config in servers}
        kept = {(server, tool) for server, tool in self._always.get(session_id, set()) if server not in names}
        if session_id in self._always:
            self._always[session_id] = kept
        await self._stop_unused(servers, session_id)

    async def _stop_unused(self, servers: Iterable[McpServerConfig], session_id: str | None) -> None:
        """``session_id`` uses ``servers`` no more: stop each that no session uses and the settings do not name."""
        for config in list(dict.fromkeys(servers)):
            users = self._users.get(config, set())
            if session_id is not None:
                users.discard(session_id)
            if users or config in self._configured:
                continue
            self._users.pop(config, None)
            connection = self._connections.pop(config, None)
            if connection is not None:
                await connection.stop()

    async def aclose(self) -> None:
        """Stop every server (each stdio server's process ends with it)."""
        connections, self._connections = list(self._connections.values()), {}
        self._users.clear()
        if not connections:
            return
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as group:
                for connection in connections:
                    group.start_soon(connection.stop)

    def _same_loop(self) -> None:
        """Connections belong to the event loop that started them: a new loop (the CLI runs one
        per command) starts its own, and those of a closed loop are forgotten."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._connections:
                logger.info(
                    "MCP servers of an earlier event loop are forgotten: %s",
                    ", ".join(c.name for c in self._connections),
                )
            self._connections.clear()
            self._loop = loop


def _connection_lost(error: Exception) -> bool:
    from mcp_types import CONNECTION_CLOSED

    return getattr(getattr(error, "error", None), "code", None) == CONNECTION_CLOSED or "closed" in str(error).lower()
