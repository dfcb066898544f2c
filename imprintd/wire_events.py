"""ReplyEvents over the wire: reply text as ``imprint/replyDelta``, a reasoning model's thoughts
as ``imprint/replyReasoning`` (in the part they precede), long work as LSP progress.

A tool call that needs the user's yes (``ask_permission``) is the server-to-client request
``imprint/requestPermission``, sent only to a client whose ``initialize`` capabilities say it
answers them (``experimental.imprint.permissionRequests: true``); any other client, an error
answer, an answer that does not fit, or none within ``PERMISSION_TIMEOUT_S``, is a no.

Progress uses standard work-done progress: the request's own ``workDoneToken`` when the
client sent one, else a token created with ``window/workDoneProgress/create`` when the
client supports it (created on the first report, so replies without long work send
nothing), else none. Reply text never travels on the progress channel, and progress
never on the text channel.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import msgspec
from lsprotocol import types

from imprintd import protocol as wire
from imprintd.context.usage import ContextUsage
from imprintd.events import PermissionAnswer, PermissionRequest, ToolStep

logger = logging.getLogger(__name__)

#: How long to wait for the client to accept a progress token before going on without progress.
CREATE_TIMEOUT_S = 10.0
#: How long a permission request waits for the user's choice before it counts as a no.
PERMISSION_TIMEOUT_S = 120.0


class WireEvents:
    def __init__(self, server, *, work_done_token: int | str | None = None, title: str = "Imprint") -> None:
        self._server = server
        self._title = title
        self._token = work_done_token
        self._began = False
        self._creating: asyncio.Task | None = None
        self._pending: list[tuple[str, int | None]] = []
        self.session_id = ""
        self.reply_id = ""
        #: The part the next delta belongs to, and whether any text or reasoning went out in it yet.
        self.part = 0
        self._part_has_text = False
        self._part_has_reasoning = False

    def _notify(self, method: str, params: msgspec.Struct) -> None:
        self._server.protocol.notify(method, msgspec.to_builtins(params))

    # -- ReplyEvents ----------------------------------------------------------
    def begin(self, session_id: str, reply_id: str) -> None:
        self.session_id, self.reply_id = session_id, reply_id

    def text(self, delta: str) -> None:
        if delta:
            self._part_has_text = True
            self._notify(
                wire.REPLY_DELTA,
                wire.ReplyDelta(session_id=self.session_id, reply_id=self.reply_id, part=self.part, text=delta),
            )

    def reasoning(self, delta: str) -> None:
        if delta:
            self._part_has_reasoning = True
            self._notify(
                wire.REPLY_REASONING,
                wire.ReplyReasoning(session_id=self.session_id, reply_id=self.reply_id, part=self.part, text=delta),
            )

    def text_was_preamble(self) -> None:
        if not (self._part_has_text or self._part_has_reasoning):
            return  # nothing was shown, so nothing needs taking back
        # A part of reasoning alone ends too: the next round's thoughts are a part of their own.
        self._notify(
            wire.REPLY_PREAMBLE, wire.ReplyPreamble(session_id=self.session_id, reply_id=self.reply_id, part=self.part)
        )
        self.part += 1
        self._part_has_text = self._part_has_reasoning = False

    def tool_step(self, step: ToolStep) -> None:
        self._notify(
            wire.TOOL_STEP,
            wire.ToolStepNotice(
                session_id=self.session_id,
                reply_id=self.reply_id,
                call_id=step.call_id,
                tool=step.tool,
                title=step.title,
                state=step.state,
                detail=step.detail,
                preview=step.preview or msgspec.UNSET,
                resources=list(step.resources) or msgspec.UNSET,
            ),
        )
        if step.state == "started":
            self.progress(step.title)

    def summary(self, text: str, first_seq: int, last_seq: int) -> None:
        self._notify(
            wire.SUMMARY_UPDATED,
            wire.SummaryUpdated(
                session_id=self.session_id,
                reply_id=self.reply_id,
                summary=wire.SummaryInfo(text=text, first_seq=first_seq, last_seq=last_seq),
            ),
        )

    def context_usage(self, usage: ContextUsage) -> None:
        self._notify(wire.CONTEXT_USAGE, wire.ContextUsageWire.from_core(self.session_id, self.reply_id, usage))

    def notice(self, message: str) -> None:
        """Logged, and shown by the editor (``window/showMessage``, a warning)."""
        logger.warning("%s", message)
        self._server.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=message))

    async def ask_permission(self, request: PermissionRequest) -> PermissionAnswer:
        if not client_answers_permissions(self._server):
            logger.info(
                "%s__%s needs permission and the client does not answer %s: not run",
                request.server,
                request.tool,
                wire.REQUEST_PERMISSION,
            )
            return "reject"
        params = wire.PermissionParams(
            reply_id=self.reply_id,
            call_id=request.call_id,
            server=request.server,
            tool=request.tool,
            title=request.title,
            arguments=request.arguments,
            read_only=request.read_only,
            destructive=request.destructive,
        )
        asked = self._server.protocol.send_request_async(wire.REQUEST_PERMISSION, msgspec.to_builtins(params))
        try:
            # Shielded: given up on (timed out, or the reply cancelled), the request stays open, so
            # an answer that comes later finds it and is dropped quietly rather than failing pygls.
            answer = await asyncio.wait_for(asyncio.shield(asked), PERMISSION_TIMEOUT_S)
            return msgspec.convert(_plain(answer), wire.PermissionResult).outcome
        except TimeoutError:
            logger.info("%s: no answer within %.0f s; taken as reject", wire.REQUEST_PERMISSION, PERMISSION_TIMEOUT_S)
        except msgspec.ValidationError as error:
            logger.warning("%s: the answer does not fit (%s); taken as reject", wire.REQUEST_PERMISSION, error)
        except Exception as error:  # the client answered an error, or the connection ended
            logger.info("%s: the client answered %s; taken as reject", wire.REQUEST_PERMISSION, error)
        return "reject"

    def progress(self, message: str, percentage: int | None = None) -> None:
        if self._token is None and self._creating is None:
            if not _client_supports_progress(self._server):
                return
            self._creating = asyncio.ensure_future(self._create_token())
        if self._token is None:
            self._pending.append((message, percentage))
            return
        self._send(message, percentage)

    # -- progress plumbing ----------------------------------------------------
    async def _create_token(self) -> None:
        token = f"imprint-{uuid.uuid4().hex}"
        try:
            # A client that never answers must not hold the reply's response back.
            await asyncio.wait_for(self._server.work_done_progress.create_async(token), CREATE_TIMEOUT_S)
        except Exception as error:  # refused or unanswered: carry on without progress
            logger.info("client refused a progress token: %s", error)
            self._pending.clear()
            return
        self._token = token
        for message, percentage in self._pending:
            self._send(message, percentage)
        self._pending.clear()

    def _send(self, message: str, percentage: int | None) -> None:
        progress = self._server.work_done_progress
        if not self._began:
            self._began = True
            progress.begin(
                self._token,
                types.WorkDoneProgressBegin(
                    title=self._title, message=message, percentage=percentage, cancellable=False
                ),
            )
        else:
            progress.report(self._token, types.WorkDoneProgressReport(message=message, percentage=percentage))

    async def finish(self) -> None:
        """End the progress the reply began, if any (after a pending token is created)."""
        if self._creating is not None:
            await asyncio.shield(self._creating)
        if self._began and self._token is not None:
            self._server.work_done_progress.end(self._token, types.WorkDoneProgressEnd())


def _client_supports_progress(server) -> bool:
    capabilities = getattr(server.protocol, "client_capabilities", None)
    window = getattr(capabilities, "window", None)
    return bool(window and window.work_done_progress)


def client_answers_permissions(server) -> bool:
    """Whether the client said, in ``initialize``, that it answers ``imprint/requestPermission``:
    ``capabilities.experimental.imprint.permissionRequests`` is ``true``."""
    capabilities = getattr(server.protocol, "client_capabilities", None)
    experimental = getattr(capabilities, "experimental", None)
    imprint = experimental.get("imprint") if isinstance(experimental, dict) else None
    return isinstance(imprint, dict) and imprint.get("permissionRequests") is True


def _plain(value: Any) -> Any:
    """A client's result as plain JSON values: pygls hands results over as namedtuples."""
    if hasattr(value, "_asdict"):
        return {key: _plain(item) for key, item in value._asdict().items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value
