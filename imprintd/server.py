"""The LSP-framed JSON-RPC server: lifecycle, settings from the editor, and thin handlers.

Each handler decodes its params (``rpc.msgspec_handler``), asks the core (``chat.Chat``)
and encodes the answer. Nothing here decides anything about a reply.
"""

from __future__ import annotations

import functools
import logging
import sys
from typing import Any
from urllib.parse import unquote, urlparse

import apsw
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer

from imprintd import __version__
from imprintd import protocol as wire
from imprintd.chat import Chat, ReplyRequest, WorkspaceMissing
from imprintd.context.history import ConversationHistory, HistoryError
from imprintd.context.sections import SectionError
from imprintd.models.base import ModelError
from imprintd.research.loop import ReplyFailed
from imprintd.rpc import ImprintProtocol, leave_despite_busy_threads, msgspec_handler, run_stdio
from imprintd.store import SessionNotFound, StoreError
from imprintd.wire_events import WireEvents

logger = logging.getLogger(__name__)

#: LSP's RequestFailed: the request was valid but could not be carried out.
REQUEST_FAILED = -32803


class RequestFailed(JsonRpcException):
    CODE = REQUEST_FAILED


def _unknown_session(error: SessionNotFound) -> JsonRpcInvalidParams:
    return JsonRpcInvalidParams(f"sessionId: {error}")


def _locate(chat: Chat, session_id: str):
    """The store and info of ``session_id``; an unknown id is invalid params naming it."""
    try:
        return chat.locate(session_id)
    except SessionNotFound as error:
        raise _unknown_session(error) from None


def _database_failures(handler):
    """A database that cannot be used answers -32803 saying why (protocol.md), not -32603."""

    @functools.wraps(handler)
    def wrapped(params):
        try:
            return handler(params)
        except SessionNotFound:
            raise  # each handler answers it as invalid params
        except (StoreError, apsw.Error) as error:
            raise RequestFailed(str(error)) from None

    return wrapped


def build_server(chat: Chat) -> LanguageServer:
    server = LanguageServer("imprintd", __version__, protocol_cls=ImprintProtocol)
    server.on_stop = chat.close

    def report_settings_errors(errors: tuple[str, ...]) -> None:
        for error in errors:
            server.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=error))

    def apply_editor_settings(values: Any) -> None:
        if not values:
            return  # nothing sent: null, {}, or an empty Lua table encoded as []
        if isinstance(values, dict):
            values = values.get("imprint", values)
        before = len(chat.resolved.errors)
        chat.update_settings(chat.resolved.apply(values, "editor"))
        report_settings_errors(chat.resolved.errors[before:])

    @server.feature(types.INITIALIZE)
    def initialize(params: types.InitializeParams) -> None:
        root = params.workspace_folders[0].uri if params.workspace_folders else params.root_uri
        chat.workspace = _path_from_uri(root) if root else params.root_path
        report_settings_errors(chat.resolved.errors)
        apply_editor_settings(params.initialization_options)

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(params: types.DidChangeConfigurationParams) -> None:
        apply_editor_settings(params.settings)

    @server.feature(wire.CHAT)
    @msgspec_handler(wire.ChatParams)
    async def chat_reply(params: wire.ChatParams) -> wire.ChatResult:
        events = WireEvents(server, work_done_token=params.work_done_token)
        request = ReplyRequest(text=params.text, session_id=params.session_id, style=params.style,
                               persist=params.persist, workspace=params.workspace)
        try:
            outcome = await chat.reply(request, events)
        except SessionNotFound as error:
            raise _unknown_session(error) from None
        except WorkspaceMissing as error:
            raise JsonRpcInvalidParams(f"workspace: {error}") from None
        except (ModelError, StoreError, apsw.Error, ReplyFailed) as error:
            raise RequestFailed(str(error)) from None
        finally:
            await events.finish()
        return wire.ChatResult(
            session_id=outcome.session_id, reply_id=outcome.reply_id, text=outcome.text,
            sources=[wire.SourceRef(number=s.number, label=s.label, path=s.path, start_line=s.start_line,
                                    end_line=s.end_line) for s in outcome.sources],
            stop_reason=outcome.stop_reason,
        )

    @server.feature(wire.SESSIONS)
    @msgspec_handler(wire.SessionsParams)
    @_database_failures
    def sessions(params: wire.SessionsParams) -> wire.SessionsResult:
        return wire.SessionsResult(sessions=[_session_wire(info) for info in chat.sessions()])

    @server.feature(wire.SESSION)
    @msgspec_handler(wire.SessionParams)
    @_database_failures
    def session(params: wire.SessionParams) -> wire.SessionResult:
        store, info = _locate(chat, params.session_id)
        return wire.SessionResult(
            session=_session_wire(info),
            messages=[_message_wire(m) for m in store.messages(info.id)],
            summary=_summary_wire(store.summary(info.id)),
        )

    @server.feature(wire.DELETE_SESSION)
    @msgspec_handler(wire.SessionParams)
    @_database_failures
    def delete_session(params: wire.SessionParams) -> wire.DeleteSessionResult:
        try:
            chat.delete_session(params.session_id)
        except SessionNotFound as error:
            raise _unknown_session(error) from None
        return wire.DeleteSessionResult(session_id=params.session_id, deleted=True)

    @server.feature(wire.SUMMARY)
    @msgspec_handler(wire.SessionParams)
    @_database_failures
    def summary(params: wire.SessionParams) -> wire.SummaryResult:
        store, info = _locate(chat, params.session_id)
        return wire.SummaryResult(session_id=info.id, summary=_summary_wire(store.summary(info.id)))

    @server.feature(wire.READ_CHAT_SECTION)
    @msgspec_handler(wire.ReadChatSectionParams)
    def read_chat_section(params: wire.ReadChatSectionParams) -> wire.ReadChatSectionResult:
        try:
            text = chat.sections.read(params.reply_id, params.source_id, params.start, params.length)
            total = chat.sections.get(params.reply_id).length(params.source_id)
        except SectionError as error:
            raise JsonRpcInvalidParams(str(error)) from None
        return wire.ReadChatSectionResult(reply_id=params.reply_id, source_id=params.source_id, start=params.start,
                                          end=params.start + len(text), total=total, text=text)

    @server.feature(wire.CONVERSATION_HISTORY)
    @msgspec_handler(wire.ConversationHistoryParams)
    @_database_failures
    def conversation_history(params: wire.ConversationHistoryParams) -> wire.ConversationHistoryResult:
        if (params.query is None) == (params.message is None):
            raise JsonRpcInvalidParams("Invalid params: give either query (to search) or message (to read), not both")
        store, info = _locate(chat, params.session_id)
        history = ConversationHistory(store.messages(info.id), store.history_index(info.id))
        try:
            text = history.search(params.query) if params.query is not None else history.read(
                params.message, params.offset)
        except HistoryError as error:
            raise JsonRpcInvalidParams(str(error)) from None
        return wire.ConversationHistoryResult(session_id=info.id, text=text)

    return server


def _path_from_uri(uri: str) -> str | None:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else None


def _session_wire(info) -> wire.SessionInfoWire:
    return wire.SessionInfoWire(
        session_id=info.id, title=info.title, workspace=info.workspace, created_at=info.created_at,
        updated_at=info.updated_at, message_count=info.message_count, persist=info.persist,
    )


def _message_wire(message) -> wire.MessageWire:
    return wire.MessageWire(
        seq=message.seq, role=message.role, content=message.content,
        tool_calls=[wire.ToolCallWire(id=c.id, name=c.name, arguments=c.arguments) for c in message.tool_calls],
        tool_call_id=message.tool_call_id, name=message.name,
    )


def _summary_wire(summary) -> wire.SummaryInfo | None:
    if summary is None or not summary.text:
        return None  # no summary, or only the retry point of a failed first attempt
    return wire.SummaryInfo(text=summary.text, first_seq=summary.first_seq, last_seq=summary.last_seq)


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
