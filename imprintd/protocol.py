"""Wire types of every ``imprint/*`` method and notification (protocol.md is the contract).

Every message is a msgspec Struct, camelCase on the wire. Method names are fixed here once;
``server.py`` registers exactly these, and a test checks protocol.md names the same set.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

import msgspec

# The core defines these vocabularies; the wire uses them as they are.
from imprintd import reply
from imprintd.context.usage import ContextUsage
from imprintd.conversations import export as conversation_export
from imprintd.conversations import search as conversation_search
from imprintd.events import PermissionAnswer, StepState
from imprintd.messages import Message, SourceKind, Style
from imprintd.messages import SourceRef as CoreSourceRef
from imprintd.messages import ToolOrigin as CoreToolOrigin
from imprintd.models.identity import ModelIdentity
from imprintd.models.on_disk import FoundModel
from imprintd.research.loop import Stop as StopReason
from imprintd.store import SessionInfo, StoredSummary

# Requests
CHAT = "imprint/chat"
SESSIONS = "imprint/sessions"
SESSION = "imprint/session"
DELETE_SESSION = "imprint/deleteSession"
SUMMARY = "imprint/summary"
READ_CHAT_SECTION = "imprint/read_chat_section"
CONVERSATION_HISTORY = "imprint/conversation_history"
CONTEXT = "imprint/context"
SEARCH_CONVERSATIONS = "imprint/searchConversations"
RENAME_SESSION = "imprint/renameSession"
EXPORT = "imprint/export"
COMPACT = "imprint/compact"
MODELS = "imprint/models"
# Notifications (server to client)
REPLY_DELTA = "imprint/replyDelta"
REPLY_PREAMBLE = "imprint/replyPreamble"
REPLY_REASONING = "imprint/replyReasoning"
TOOL_STEP = "imprint/toolStep"
SUMMARY_UPDATED = "imprint/summaryUpdated"
MODEL_CHANGED = "imprint/modelChanged"
CONTEXT_USAGE = "imprint/contextUsage"
# Requests (server to client)
REQUEST_PERMISSION = "imprint/requestPermission"

REQUESTS = (
    CHAT,
    SESSIONS,
    SESSION,
    DELETE_SESSION,
    SUMMARY,
    READ_CHAT_SECTION,
    CONVERSATION_HISTORY,
    CONTEXT,
    SEARCH_CONVERSATIONS,
    RENAME_SESSION,
    EXPORT,
    COMPACT,
    MODELS,
)
NOTIFICATIONS = (REPLY_DELTA, REPLY_PREAMBLE, REPLY_REASONING, TOOL_STEP, SUMMARY_UPDATED, MODEL_CHANGED, CONTEXT_USAGE)
SERVER_REQUESTS = (REQUEST_PERMISSION,)

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


class ToolOriginWire(Wire):
    """The MCP server and tool a ``"tool"`` source came from, its arguments, and a URI it names."""

    server: str
    tool: str
    arguments: dict[str, Any]
    uri: str | None

    @classmethod
    def from_core(cls, origin: CoreToolOrigin) -> ToolOriginWire:
        return cls(**msgspec.structs.asdict(origin))


class SourceRef(Wire):
    """One source of an answer (protocol.md, "Sources"): a file's lines, an earlier message,
    section notes, or an MCP tool's result; cited, or read and not cited; checked against the
    sentences citing it."""

    number: int
    kind: SourceKind
    label: str
    path: str | None
    start_line: int | None
    end_line: int | None
    message: int | None
    cited: bool
    supported: bool | None
    reason: str
    origin: ToolOriginWire | None

    @classmethod
    def from_core(cls, source: CoreSourceRef) -> SourceRef:
        # The same fields, by name: a field added to one and not the other fails here.
        fields = msgspec.structs.asdict(source)
        origin = fields.pop("origin")
        return cls(**fields, origin=ToolOriginWire.from_core(origin) if origin is not None else None)


class ChatResult(Wire):
    session_id: str
    reply_id: str
    text: str
    sources: list[SourceRef]
    stop_reason: StopReason

    @classmethod
    def from_core(cls, outcome: reply.ReplyOutcome) -> ChatResult:
        return cls(
            session_id=outcome.session_id,
            reply_id=outcome.reply_id,
            text=outcome.text,
            sources=[SourceRef.from_core(source) for source in outcome.sources],
            stop_reason=outcome.stop_reason,
        )


class ReplyDelta(Wire):
    """The next piece of a reply's text, in ``part`` (0, 1, …)."""

    session_id: str
    reply_id: str
    part: int
    text: str


class ReplyReasoning(Wire):
    """The next piece of what a reasoning model thought, in ``part``, ahead of that part's text:
    shown folded, never as the answer."""

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
    """One tool step's start or end. ``preview`` and ``resources`` come only with a ``finished``
    step that has them (left out otherwise): the start of its result, redacted and bounded, and
    the URIs an MCP result names that a client may open."""

    session_id: str
    reply_id: str
    call_id: str
    tool: str
    title: str
    state: StepState
    detail: str = ""
    preview: str | msgspec.UnsetType = msgspec.UNSET
    resources: list[str] | msgspec.UnsetType = msgspec.UNSET


# -- imprint/requestPermission (server to client) ------------------------------
class PermissionParams(Wire):
    """A tool call that waits for the user's yes: the MCP server and tool, what it would run with,
    and what its annotations say (``readOnlyHint``, ``destructiveHint``)."""

    reply_id: str
    call_id: str
    server: str
    tool: str
    title: str
    arguments: dict[str, Any]
    read_only: bool
    destructive: bool


class PermissionResult(Wire):
    outcome: PermissionAnswer


class SummaryInfo(Wire):
    text: str
    first_seq: int
    last_seq: int

    @classmethod
    def from_core(cls, summary: StoredSummary | None) -> SummaryInfo | None:
        if summary is None or not summary.text:
            return None  # no summary, or only the retry point of a failed first attempt
        return cls(text=summary.text, first_seq=summary.first_seq, last_seq=summary.last_seq)


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

    @classmethod
    def from_core(cls, info: SessionInfo) -> SessionInfoWire:
        return cls(
            session_id=info.id,
            title=info.title,
            workspace=info.workspace,
            created_at=info.created_at,
            updated_at=info.updated_at,
            message_count=info.message_count,
            persist=info.persist,
        )


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
    #: An answer's sources, as its ``imprint/chat`` result had them; [] on other messages.
    sources: list[SourceRef] = []
    #: What a reasoning model thought before it wrote this assistant message; "" when nothing.
    reasoning: str = ""

    @classmethod
    def from_core(cls, message: Message) -> MessageWire:
        assert message.seq is not None and message.role != "system", "only stored messages go on the wire"
        return cls(
            seq=message.seq,
            role=message.role,
            content=message.content,
            tool_calls=[ToolCallWire(id=c.id, name=c.name, arguments=c.arguments) for c in message.tool_calls],
            tool_call_id=message.tool_call_id,
            name=message.name,
            sources=[SourceRef.from_core(source) for source in message.sources],
            reasoning=message.reasoning,
        )


class SessionResult(Wire):
    session: SessionInfoWire
    messages: list[MessageWire]
    summary: SummaryInfo | None

    @classmethod
    def from_view(cls, info: SessionInfo, messages: list[Message], summary: StoredSummary | None) -> SessionResult:
        return cls(
            session=SessionInfoWire.from_core(info),
            messages=[MessageWire.from_core(m) for m in messages],
            summary=SummaryInfo.from_core(summary),
        )


class DeleteSessionResult(Wire):
    session_id: str
    deleted: bool


class SummaryResult(Wire):
    session_id: str
    summary: SummaryInfo | None


class RenameSessionParams(Wire):
    session_id: NonEmpty
    title: str


class RenameSessionResult(Wire):
    session: SessionInfoWire


class ExportParams(Wire):
    session_id: NonEmpty
    format: conversation_export.Format = "markdown"


class ExportResult(Wire):
    session_id: str
    format: conversation_export.Format
    file_name: str
    text: str

    @classmethod
    def from_view(
        cls,
        info: SessionInfo,
        messages: list[Message],
        summary: StoredSummary | None,
        format: conversation_export.Format,
    ) -> ExportResult:
        if format == "markdown":
            text = conversation_export.markdown(info, messages, summary)
        else:  # what imprint/session returns, indented for reading
            encoded = msgspec.json.encode(SessionResult.from_view(info, messages, summary))
            text = msgspec.json.format(encoded, indent=2).decode() + "\n"
        return cls(session_id=info.id, format=format, file_name=conversation_export.file_name(info, format), text=text)


class CompactParams(Wire):
    session_id: NonEmpty
    work_done_token: int | str | None = None


class CompactResult(Wire):
    """``compacted`` false: nothing to summarize (``note`` says so); ``summary`` as it stands."""

    session_id: str
    compacted: bool
    summary: SummaryInfo | None
    note: str


# -- searching every conversation ---------------------------------------------
class SearchConversationsParams(Wire):
    """``since``/``until``: local dates ``YYYY-MM-DD``, both included."""

    query: str
    workspace: str | None = None
    since: str | None = None
    until: str | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=conversation_search.MAX_LIMIT)] = conversation_search.DEFAULT_LIMIT
    offset: Annotated[int, msgspec.Meta(ge=0, le=conversation_search.MAX_OFFSET)] = 0


class SnippetPart(Wire):
    text: str
    match: bool


class SearchHit(Wire):
    session_id: str
    title: str
    workspace: str | None
    seq: int
    role: str
    created_at: float
    score: float
    snippet: list[SnippetPart]

    @classmethod
    def from_core(cls, hit: conversation_search.Hit) -> SearchHit:
        return cls(
            session_id=hit.session_id,
            title=hit.title,
            workspace=hit.workspace,
            seq=hit.seq,
            role=hit.role,
            created_at=hit.created_at,
            score=round(hit.score, 4),
            snippet=[SnippetPart(text=part.text, match=part.match) for part in hit.snippet],
        )


class SearchConversationsResult(Wire):
    query: str
    hits: list[SearchHit]
    next_offset: int | None

    @classmethod
    def from_core(cls, query: str, page: conversation_search.SearchPage) -> SearchConversationsResult:
        return cls(
            query=query,
            hits=[SearchHit.from_core(hit) for hit in page.hits],
            next_offset=page.next_offset,
        )


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


# -- the model in use -----------------------------------------------------------
class ModelInfo(Wire):
    """The model the daemon answers with: ``initialize``'s ``capabilities.experimental.imprint``
    and the ``imprint/modelChanged`` notification."""

    provider: str
    model: str
    #: How to show the model: the same string as its ``imprint/models`` entry's ``name``.
    name: str
    #: The window prompts are fitted to: ``chat.n_ctx``, or a served model's smaller window.
    n_ctx: int
    #: Where ``n_ctx`` comes from: ``"chat.n_ctx"``, or what the server said or showed
    #: (``"llama-server /props n_ctx"``, ``"Ollama num_ctx parameter"``, ``"the server's refusal"``, …).
    n_ctx_source: str
    #: The window the model's server reported or showed (null: a local model, or a server that
    #: said nothing yet); larger than ``n_ctx`` when ``chat.n_ctx`` is the smaller.
    server_n_ctx: int | None
    #: How the model writes tool calls and reasoning (``hermes``, ``qwen-xml``, …, ``json-fallback``;
    #: ``openai`` for a remote server, which parses them itself); null while it cannot be told
    #: (the GGUF is missing or unreadable, no remote model is named).
    chat_format: str | None
    #: The model thinks before it answers (its thoughts come as ``imprint/replyReasoning``).
    reasons: bool

    @classmethod
    def from_core(cls, identity: ModelIdentity) -> ModelInfo:
        return cls(
            provider=identity.provider,
            model=identity.model,
            name=identity.name,
            n_ctx=identity.n_ctx,
            n_ctx_source=identity.n_ctx_source,
            server_n_ctx=identity.server_n_ctx,
            chat_format=identity.chat_format,
            reasons=identity.reasons,
        )


class ModelsParams(Wire):
    pass


class ModelOnDisk(Wire):
    """A GGUF found on this machine, described from its header (protocol.md, ``imprint/models``)."""

    name: str
    path: str
    source: str
    size: int
    architecture: str | None
    quantization: str | None
    context_length: int | None
    has_chat_template: bool
    chat_format: str | None
    chat: bool
    reason: str

    @classmethod
    def from_core(cls, found: FoundModel) -> ModelOnDisk:
        return cls(**dataclasses.asdict(found))  # the same fields, by name


class ModelsResult(Wire):
    current: ModelInfo
    models: list[ModelOnDisk]
    #: With ``chat.provider = "openai"``: the ids the server's ``/v1/models`` lists (else []), and
    #: why it could not be asked ("" when it was).
    served: list[str] = []
    served_error: str = ""


# -- what fills the context -------------------------------------------------------
class ContextParts(Wire):
    """Tokens by part of the prompt; they add up to ``used``."""

    system: int
    tools: int
    summary: int
    earlier: int
    question: int
    research: int


class ContextUsageWire(Wire):
    """``imprint/contextUsage`` (a coordinator round's prompt) and ``imprint/context``'s result
    (the next question's, with ``reply_id`` null)."""

    session_id: str
    reply_id: str | None
    n_ctx: int
    #: Where ``n_ctx`` comes from (as ``ModelInfo.n_ctx_source``).
    n_ctx_source: str
    output_allowance: int
    exact: bool
    used: int
    parts: ContextParts
    in_view: list[tuple[int, int]]
    summarized: list[tuple[int, int]]
    dropped: list[tuple[int, int]]

    @classmethod
    def from_core(cls, session_id: str, reply_id: str | None, usage: ContextUsage) -> ContextUsageWire:
        parts = usage.parts
        return cls(
            session_id=session_id,
            reply_id=reply_id,
            n_ctx=usage.n_ctx,
            n_ctx_source=usage.n_ctx_source,
            output_allowance=usage.output_allowance,
            exact=usage.exact,
            used=usage.used,
            parts=ContextParts(
                system=parts.system,
                tools=parts.tools,
                summary=parts.summary,
                earlier=parts.earlier,
                question=parts.question,
                research=parts.research,
            ),
            in_view=list(usage.in_view),
            summarized=list(usage.summarized),
            dropped=list(usage.dropped),
        )
