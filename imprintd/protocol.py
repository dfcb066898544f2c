"""Wire types of every ``imprint/*`` method and notification (protocol.md is the contract).

Every message is a msgspec Struct, camelCase on the wire. Method names are fixed here once;
``server.py`` registers exactly these, and a test checks protocol.md names the same set.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

# Requests
CHAT = "imprint/chat"
SESSIONS = "imprint/sessions"
SESSION = "imprint/session"
DELETE_SESSION = "imprint/deleteSession"
SUMMARY = "imprint/summary"
READ_CHAT_SECTION = "imprint/read_chat_section"
CONVERSATION_HISTORY = "imprint/conversation_history"
# Notifications (server to client)
REPLY_DELTA = "imprint/replyDelta"
REPLY_PREAMBLE = "imprint/replyPreamble"
TOOL_STEP = "imprint/toolStep"
SUMMARY_UPDATED = "imprint/summaryUpdated"

REQUESTS = (CHAT, SESSIONS, SESSION, DELETE_SESSION, SUMMARY, READ_CHAT_SECTION, CONVERSATION_HISTORY)
NOTIFICATIONS = (REPLY_DELTA, REPLY_PREAMBLE, TOOL_STEP, SUMMARY_UPDATED)

Style = Literal["written", "spoken"]
StopReason = Literal["answer", "length", "token_budget", "time_budget", "no_new_evidence", "context_full"]
NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
NonNegative = Annotated[int, msgspec.Meta(ge=0)]


class Wire(msgspec.Struct, rename="camel", kw_only=True, omit_defaults=False):
    """Base of every wire type: camelCase names."""


# -- imprint/chat -------------------------------------------------------------
class ChatParams(Wire):
    text: NonEmpty
    session_id: str | None = None
    style: Style = "written"
    persist: bool = True
    workspace: str | None = None
    work_done_token: int | str | None = None


class SourceRef(Wire):
    """A cited note's place in the workspace, for an editor to open."""

    number: int
    label: str
    path: str
    start_line: int
    end_line: int


class ChatResult(Wire):
    session_id: str
    reply_id: str
    text: str
    sources: list[SourceRef]
    stop_reason: StopReason


class ReplyDelta(Wire):
    """The next piece of a reply's text, in ``part`` (0, 1, …)."""

    session_id: str
    reply_id: str
    part: int
    text: str


class ReplyPreamble(Wire):
    """Part ``part`` of the streamed text was preamble, not the answer; text goes on in ``part + 1``."""

    session_id: str
    reply_id: str
    part: int


class ToolStepNotice(Wire):
    session_id: str
    reply_id: str
    call_id: str
    tool: str
    title: str
    state: Literal["started", "finished", "failed"]
    detail: str = ""


class SummaryInfo(Wire):
    text: str
    first_seq: int
    last_seq: int


class SummaryUpdated(Wire):
    session_id: str
    reply_id: str
    summary: SummaryInfo


# -- sessions -----------------------------------------------------------------
class SessionParams(Wire):
    session_id: NonEmpty


class SessionsParams(Wire):
    pass


class SessionInfoWire(Wire):
    session_id: str
    title: str
    workspace: str | None
    created_at: float
    updated_at: float
    message_count: int
    persist: bool


class SessionsResult(Wire):
    sessions: list[SessionInfoWire]


class ToolCallWire(Wire):
    id: str
    name: str
    arguments: dict


class MessageWire(Wire):
    seq: int
    role: Literal["user", "assistant", "tool"]
    content: str
    tool_calls: list[ToolCallWire] = []
    tool_call_id: str | None = None
    name: str | None = None


class SessionResult(Wire):
    session: SessionInfoWire
    messages: list[MessageWire]
    summary: SummaryInfo | None


class DeleteSessionResult(Wire):
    session_id: str
    deleted: bool


class SummaryResult(Wire):
    session_id: str
    summary: SummaryInfo | None


# -- context engine -----------------------------------------------------------
class ReadChatSectionParams(Wire):
    reply_id: NonEmpty
    source_id: NonEmpty
    start: NonNegative
    length: Annotated[int, msgspec.Meta(ge=1, le=4000)]


class ReadChatSectionResult(Wire):
    reply_id: str
    source_id: str
    start: int
    end: int
    total: int
    text: str


class ConversationHistoryParams(Wire):
    """Search (``query``) or read one message (``message``, from ``offset``) of a session."""

    session_id: NonEmpty
    query: str | None = None
    message: Annotated[int, msgspec.Meta(ge=1)] | None = None
    offset: NonNegative = 0


class ConversationHistoryResult(Wire):
    session_id: str
    text: str
