"""The LSP-framed JSON-RPC server: lifecycle, settings from the editor, and thin handlers.

Each handler below serves one method of protocol.md: its params arrive decoded
(``rpc.msgspec_handler``), it asks the core (``chat.Chat``) and converts the answer to the
wire. Core exceptions become JSON-RPC errors in one place, ``CORE_ERRORS``, applied where
handlers are registered. Nothing here decides anything about a reply.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any, cast
from urllib.parse import unquote, urlparse

import apsw
import msgspec
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer

from imprintd import __version__
from imprintd import protocol as wire
from imprintd.chat import Chat, QuestionTooLong, ReplyRequest, WorkspaceMissing, workspace_folder
from imprintd.context.history import HistoryError
from imprintd.context.originals import SectionError
from imprintd.conversations.compact import CompactFailed
from imprintd.conversations.search import SearchError
from imprintd.conversations.titles import TitleError
from imprintd.models.base import ModelError
from imprintd.offload import in_search_worker, in_worker
from imprintd.research.loop import ReplyFailed
from imprintd.rpc import ImprintProtocol, leave_despite_busy_threads, msgspec_handler, run_stdio
from imprintd.settings import ChatSettings
from imprintd.store import SessionNotFound, StoreError
from imprintd.wire_events import WireEvents

logger = logging.getLogger(__name__)

#: LSP's RequestFailed: the request was valid but could not be carried out.
REQUEST_FAILED = -32803


class RequestFailed(JsonRpcException):
    CODE = REQUEST_FAILED


#: Core exceptions and the JSON-RPC error each becomes (protocol.md, "Errors"); the first match
#: wins, so SessionNotFound comes before StoreError, its base. Anything else is -32603.
CORE_ERRORS: tuple[tuple[tuple[type[Exception], ...], Callable[[Exception], JsonRpcException]], ...] = (
    ((SessionNotFound,), lambda error: JsonRpcInvalidParams(f"sessionId: {error}")),
    ((WorkspaceMissing,), lambda error: JsonRpcInvalidParams(f"workspace: {error}")),
    ((QuestionTooLong,), lambda error: JsonRpcInvalidParams(f"text: {error}")),
    ((HistoryError, SectionError), lambda error: JsonRpcInvalidParams(str(error))),
    ((SearchError, TitleError), lambda error: JsonRpcInvalidParams(str(error))),
    ((ModelError, ReplyFailed, StoreError, apsw.Error), lambda error: RequestFailed(str(error))),
    ((CompactFailed,), lambda error: RequestFailed(str(error))),
)


def _as_rpc_error(error: Exception) -> JsonRpcException | None:
    for kinds, to_rpc in CORE_ERRORS:
        if isinstance(error, kinds):
            return to_rpc(error)
    return None


def _answering_core_errors(handler):
    """``handler`` with core exceptions raised as the JSON-RPC errors of ``CORE_ERRORS``."""
    if inspect.iscoroutinefunction(handler):

        @functools.wraps(handler)
        async def async_wrapped(*args):
            try:
                return await handler(*args)
            except Exception as error:
                rpc_error = _as_rpc_error(error)
                if rpc_error is None:
                    raise
                raise rpc_error from None

        return async_wrapped

    @functools.wraps(handler)
    def wrapped(*args):
        try:
            return handler(*args)
        except Exception as error:
            rpc_error = _as_rpc_error(error)
            if rpc_error is None:
                raise
            raise rpc_error from None

    return wrapped


def _in_worker_thread(handler):
    """``handler`` run in a worker thread when it is synchronous: it asks the store (which may wait
    up to its busy timeout on a file another process holds) or reads what a reply keeps, and the
    event loop must go on moving every other message meanwhile (``offload``)."""
    if inspect.iscoroutinefunction(handler):
        return handler  # awaits its own blocking work in workers

    @functools.wraps(handler)
    async def in_thread(*args):
        return await in_worker(handler, *args)

    return in_thread


class ImprintServer(LanguageServer):
    """The daemon's pygls server: the one ``Chat`` every handler asks, and editor settings."""

    def __init__(self, chat: Chat) -> None:
        super().__init__("imprintd", __version__, protocol_cls=ImprintProtocol)
        self.chat = chat
        self.on_stop = chat.close
        #: The model as the client was last told it (``initialize``, then ``imprint/modelChanged``).
        self.announced: wire.ModelInfo | None = None
        self._announcing: set[asyncio.Future] = set()
        #: Announcements go out one at a time, in the order of the changes that made them.
        self._announcing_in_order = asyncio.Lock()
        cast(ImprintProtocol, self.protocol).experimental = self._initialize_model_info

    async def aclose(self) -> None:
        """At the end of serving, before the loop's tasks are cancelled: stop every MCP server."""
        await self.chat.mcp.aclose()

    def model_info(self, settings: ChatSettings | None = None) -> wire.ModelInfo:
        return wire.ModelInfo.from_core(self.chat.model_identity(settings))

    def _initialize_model_info(self) -> Awaitable[dict[str, Any]]:
        """``initialize``'s ``capabilities.experimental``: the model its settings name, told in
        turn with announcements (``announce_model``) and read in a worker thread, as they are."""
        return self._tell_initialize(self.chat.settings)

    async def _tell_initialize(self, settings: ChatSettings) -> dict[str, Any]:
        async with self._announcing_in_order:
            self.announced = await in_worker(self.model_info, settings)
        return {"imprint": msgspec.to_builtins(self.announced)}

    async def announce_model(self, settings: ChatSettings | None = None) -> None:
        """``imprint/modelChanged`` when the model ``settings`` name (the current ones by default),
        as clients show it, differs from what they were told.

        After a settings change, and after each reply: a remote model is known to reason only
        once its server has sent reasoning. Telling the model reads its GGUF's header, in a
        worker thread (``offload``); announcements wait for one another, so clients hear of
        changes in the order they were made, each about the settings it made.
        """
        settings = settings or self.chat.settings
        async with self._announcing_in_order:
            if settings is self.chat.settings:
                await self.chat.learn_window()  # a served model's window, asked once per model
            model = await in_worker(self.model_info, settings)
            if self.announced is not None and model != self.announced:
                self.protocol.notify(wire.MODEL_CHANGED, msgspec.to_builtins(model))
            self.announced = model

    def announce_model_soon(self) -> None:
        """``announce_model`` from a synchronous handler: a task, kept until it ends, about the
        settings as they are now (the task starts after any changes that follow in the same read)."""
        task = asyncio.ensure_future(self.announce_model(self.chat.settings))
        self._announcing.add(task)
        task.add_done_callback(self._announcing.discard)

    def report_settings_errors(self, errors: tuple[str, ...]) -> None:
        for error in errors:
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=error))

    def apply_editor_settings(self, values: Any, *, report_model: bool = True) -> None:
        """Apply editor settings; ``imprint/modelChanged`` when they change the model in use.

        ``initialize`` says the model in its result, so it passes ``report_model=False``.
        """
        if not values:
            return  # nothing sent: null, {}, or an empty Lua table encoded as []
        if isinstance(values, dict):
            values = values.get("imprint", values)
        before = len(self.chat.resolved.errors)
        self.chat.update_settings(self.chat.resolved.apply(values, "editor"))
        self.report_settings_errors(self.chat.resolved.errors[before:])
        if report_model:
            self.announce_model_soon()


# -- lifecycle and settings ---------------------------------------------------------------------
async def initialize(server: ImprintServer, params: types.InitializeParams) -> None:
    # The answer waits for this, and a client asks nothing before it has the answer (the LSP spec).
    server.chat.workspace = await _editor_workspace(server, params)
    server.report_settings_errors(server.chat.resolved.errors)
    server.apply_editor_settings(params.initialization_options, report_model=False)


async def _editor_workspace(server: ImprintServer, params: types.InitializeParams) -> str | None:
    """The editor's folder: ``workspaceFolders[0]``, else ``rootUri``, else ``rootPath``.

    One that cannot be used (not a file: URI, too long, a NUL, a symbolic link loop, not a
    folder) is reported once, naming the field, and ignored: chats then research the folder
    each names, or none, instead of every one failing on the editor's.
    """
    protocol = server.protocol
    unparsable = protocol.unparsable_root_uri if isinstance(protocol, ImprintProtocol) else None
    uri: str | None
    if params.workspace_folders:
        field, uri = "workspaceFolders[0].uri", params.workspace_folders[0].uri
    elif params.root_uri or unparsable:
        field, uri = "rootUri", params.root_uri or unparsable
    elif params.root_path:
        field, uri = "rootPath", None
    else:
        return None
    folder = _path_from_uri(uri) if uri is not None else params.root_path
    try:
        if folder is None:
            raise WorkspaceMissing(f"{_shown(uri or '')} is not a file: URI of a local folder.")
        return str(await in_worker(workspace_folder, folder))  # a stat of each part
    except WorkspaceMissing as error:
        message = f"initialize {field}: {error} Imprint ignores it; a chat can name its folder (workspace)."
        logger.warning("%s", message)
        server.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=message))
        return None


def _shown(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else f"{text[: limit - 1]}… ({len(text):,} characters)"


def did_change_configuration(server: ImprintServer, params: types.DidChangeConfigurationParams) -> None:
    server.apply_editor_settings(params.settings)


# -- imprint/* ------------------------------------------------------------------------------------
async def chat_reply(server: ImprintServer, params: wire.ChatParams) -> wire.ChatResult:
    events = WireEvents(server, work_done_token=params.work_done_token)
    request = ReplyRequest(
        text=params.text,
        session_id=params.session_id,
        style=params.style,
        persist=params.persist,
        workspace=params.workspace,
    )
    try:
        outcome = await server.chat.reply(request, events)
    finally:
        await events.finish()
        await server.announce_model()
    return wire.ChatResult.from_core(outcome)


def sessions(server: ImprintServer, params: wire.SessionsParams) -> wire.SessionsResult:
    return wire.SessionsResult(sessions=[wire.SessionInfoWire.from_core(info) for info in server.chat.sessions()])


def session(server: ImprintServer, params: wire.SessionParams) -> wire.SessionResult:
    view = server.chat.session(params.session_id)
    return wire.SessionResult(
        session=wire.SessionInfoWire.from_core(view.info),
        messages=[wire.MessageWire.from_core(m) for m in view.messages],
        summary=wire.SummaryInfo.from_core(view.summary),
    )


def delete_session(server: ImprintServer, params: wire.SessionParams) -> wire.DeleteSessionResult:
    server.chat.delete_session(params.session_id)
    return wire.DeleteSessionResult(session_id=params.session_id, deleted=True)


def summary(server: ImprintServer, params: wire.SessionParams) -> wire.SummaryResult:
    return wire.SummaryResult(
        session_id=params.session_id, summary=wire.SummaryInfo.from_core(server.chat.summary(params.session_id))
    )


def read_chat_section(server: ImprintServer, params: wire.ReadChatSectionParams) -> wire.ReadChatSectionResult:
    read = server.chat.read_chat_section(params.reply_id, params.source_id, params.start, params.length)
    return wire.ReadChatSectionResult(
        reply_id=params.reply_id,
        source_id=params.source_id,
        start=read.start,
        end=read.end,
        total=read.total,
        text=read.text,
    )


async def conversation_history(
    server: ImprintServer, params: wire.ConversationHistoryParams
) -> wire.ConversationHistoryResult:
    text = await in_search_worker(
        lambda stop: server.chat.conversation_history(
            params.session_id, query=params.query, message=params.message, offset=params.offset, stop=stop
        )
    )
    return wire.ConversationHistoryResult(session_id=params.session_id, text=text)


async def context(server: ImprintServer, params: wire.SessionParams) -> wire.ContextUsageWire:
    usage = await server.chat.context_usage(params.session_id)
    return wire.ContextUsageWire.from_core(params.session_id, None, usage)


async def search_conversations(
    server: ImprintServer, params: wire.SearchConversationsParams
) -> wire.SearchConversationsResult:
    page = await in_search_worker(
        lambda stop: server.chat.search_conversations(
            params.query,
            workspace=params.workspace,
            since=params.since,
            until=params.until,
            limit=params.limit,
            offset=params.offset,
            stop=stop,
        )
    )
    return wire.SearchConversationsResult.from_core(params.query, page)


def export(server: ImprintServer, params: wire.ExportParams) -> wire.ExportResult:
    view = server.chat.session(params.session_id)
    return wire.ExportResult.from_view(view.info, view.messages, view.summary, params.format)


async def compact(server: ImprintServer, params: wire.CompactParams) -> wire.CompactResult:
    events = WireEvents(server, work_done_token=params.work_done_token)
    try:
        done = await server.chat.compact(params.session_id, events)
    finally:
        await events.finish()
    return wire.CompactResult(
        session_id=params.session_id,
        compacted=done.written,
        summary=wire.SummaryInfo.from_core(done.summary),
        note=done.note,
    )


async def models(server: ImprintServer, params: wire.ModelsParams) -> wire.ModelsResult:
    found = await in_worker(server.chat.models_on_disk)  # reads file headers
    served, served_error = [], ""
    if server.chat.settings.provider == "openai":
        from imprintd.models.served import served_models  # loads httpx: only for a remote provider

        try:
            served = await in_worker(served_models, server.chat.settings.base_url)
        except ModelError as error:
            served_error = str(error)
    return wire.ModelsResult(
        current=await in_worker(server.model_info),  # reads the GGUF's header
        models=[wire.ModelOnDisk.from_core(m) for m in found],
        served=served,
        served_error=served_error,
    )


def rename_session(server: ImprintServer, params: wire.RenameSessionParams) -> wire.RenameSessionResult:
    info = server.chat.rename_session(params.session_id, params.title)
    return wire.RenameSessionResult(session=wire.SessionInfoWire.from_core(info))


#: Each method and its handler; ``imprint/*`` params and results are msgspec Structs.
LSP_HANDLERS = ((types.INITIALIZE, initialize), (types.WORKSPACE_DID_CHANGE_CONFIGURATION, did_change_configuration))
IMPRINT_HANDLERS = (
    (wire.CHAT, wire.ChatParams, chat_reply),
    (wire.SESSIONS, wire.SessionsParams, sessions),
    (wire.SESSION, wire.SessionParams, session),
    (wire.DELETE_SESSION, wire.SessionParams, delete_session),
    (wire.SUMMARY, wire.SessionParams, summary),
    (wire.READ_CHAT_SECTION, wire.ReadChatSectionParams, read_chat_section),
    (wire.CONVERSATION_HISTORY, wire.ConversationHistoryParams, conversation_history),
    (wire.CONTEXT, wire.SessionParams, context),
    (wire.SEARCH_CONVERSATIONS, wire.SearchConversationsParams, search_conversations),
    (wire.RENAME_SESSION, wire.RenameSessionParams, rename_session),
    (wire.EXPORT, wire.ExportParams, export),
    (wire.COMPACT, wire.CompactParams, compact),
    (wire.MODELS, wire.ModelsParams, models),
)


def build_server(chat: Chat) -> ImprintServer:
    server = ImprintServer(chat)
    for method, lsp_handler in LSP_HANDLERS:
        server.feature(method)(functools.partial(lsp_handler, server))
    for method, params_type, handler in IMPRINT_HANDLERS:
        bound = _answering_core_errors(_in_worker_thread(functools.partial(handler, server)))
        server.feature(method)(msgspec_handler(params_type)(bound))
    return server


def _path_from_uri(uri: str) -> str | None:
    """The local path of a ``file:`` URI; None for any other URI, or one that does not parse."""
    try:
        parsed = urlparse(uri)
    except ValueError:  # "file://[x": an unclosed IPv6 host
        return None
    return unquote(parsed.path) if parsed.scheme == "file" else None


def serve(chat: Chat) -> int:
    """Run the daemon on this process's stdin and stdout; returns the exit code."""
    # Our own reader on stdin's fd: the reading thread may still be blocked in it at exit,
    # and interpreter shutdown aborts if that thread holds sys.stdin's buffer lock.
    stdin = open(sys.stdin.fileno(), "rb", closefd=False)  # noqa: SIM115 (lives as long as the process)
    stdout = sys.stdout.buffer
    sys.stdout = sys.stderr  # stdout carries protocol only; a stray print goes to the log
    code = run_stdio(build_server(chat), stdin, stdout)
    leave_despite_busy_threads(code)  # no worker thread may hold the process after exit or EOF
    return code
