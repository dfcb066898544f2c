"""The Agent Client Protocol's messages as msgspec Structs: what a client sends, what we send.

Only the parts of ACP v1 this agent speaks are modelled. Incoming params are decoded
strictly (a wrong type answers -32602 naming the field) and unknown fields are ignored, so
a newer client's additions do not break us. Outgoing messages are encoded camelCase with
unset optional fields left out. Each decoder is built once, at import.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, Raw, Struct, UnsetType

PROTOCOL_VERSION = 1

StopReason = Literal["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"]
ToolKind = Literal["read", "edit", "delete", "move", "search", "execute", "think", "fetch", "other"]
ToolCallStatus = Literal["pending", "in_progress", "completed", "failed"]


class _Wire(Struct, rename="camel", kw_only=True, omit_defaults=True):
    """camelCase on the wire; optional fields we send are left out when unset."""


# --- the JSON-RPC envelope ------------------------------------------------------------------


class Envelope(Struct, kw_only=True):
    """One JSON-RPC 2.0 message; ``UNSET`` tells a missing key from a null one."""

    jsonrpc: str | UnsetType = UNSET
    id: int | str | None | UnsetType = UNSET
    method: str | UnsetType = UNSET
    params: Raw | UnsetType = UNSET
    result: Raw | UnsetType = UNSET
    error: Raw | UnsetType = UNSET


class ErrorObject(_Wire):
    code: int
    message: str


class Response(Struct, kw_only=True):
    """A result or an error (exactly one is set) for request ``id``."""

    jsonrpc: str = "2.0"
    id: int | str | None
    result: Any | UnsetType = UNSET
    error: ErrorObject | UnsetType = UNSET


class Request(Struct, kw_only=True):
    """A request of the agent's to the client (``session/request_permission``)."""

    jsonrpc: str = "2.0"
    id: str
    method: str
    params: Any


class Notification(Struct, kw_only=True):
    jsonrpc: str = "2.0"
    method: str
    params: Any


# --- content blocks -------------------------------------------------------------------------


class TextBlock(_Wire, tag_field="type", tag="text"):
    text: str


class ImageBlock(_Wire, tag_field="type", tag="image"):
    """Decoded only to be refused by name: promptCapabilities says image is false."""


class AudioBlock(_Wire, tag_field="type", tag="audio"):
    """Decoded only to be refused by name: promptCapabilities says audio is false."""


class ResourceLinkBlock(_Wire, tag_field="type", tag="resource_link"):
    uri: str
    name: str
    title: str | UnsetType = UNSET
    description: str | UnsetType = UNSET
    mime_type: str | UnsetType = UNSET


class ResourceContents(_Wire):
    """An embedded resource's contents: ``text`` for text, ``blob`` (base64) for anything else."""

    uri: str
    text: str | None = None
    blob: str | None = None
    mime_type: str | None = None


class EmbeddedResourceBlock(_Wire, tag_field="type", tag="resource"):
    resource: ResourceContents


ContentBlock = TextBlock | ImageBlock | AudioBlock | ResourceLinkBlock | EmbeddedResourceBlock
OutBlock = TextBlock | ResourceLinkBlock


# --- requests and their results -------------------------------------------------------------


class InitializeParams(_Wire):
    # Integer in ACP v1; a client sending something else is still answered with ours.
    protocol_version: int | str
    client_capabilities: dict[str, Any] | None = None
    client_info: dict[str, Any] | None = None


class Implementation(_Wire):
    name: str
    title: str
    version: str


class InitializeResult(_Wire):
    protocol_version: int
    agent_capabilities: dict[str, Any]
    agent_info: Implementation
    auth_methods: list[Any]


class NameValue(_Wire):
    """An environment variable of a stdio server, or a header of an http or sse one."""

    name: str
    value: str


class McpServer(_Wire):
    """An MCP server the client offers for a session, in any of ACP's shapes.

    A stdio server has no ``type`` (``name``, ``command``, ``args``, ``env``); an http or sse one
    has ``type``, ``name``, ``url`` and ``headers``. One Struct reads them all (msgspec cannot
    mix a tagged and an untagged shape in one union); ``acp.mcp`` checks which fields go together.
    """

    name: str
    type: str | UnsetType = UNSET
    command: str | UnsetType = UNSET
    args: list[str] = []
    env: list[NameValue] = []
    url: str | UnsetType = UNSET
    headers: list[NameValue] = []


class NewSessionParams(_Wire):
    cwd: str
    mcp_servers: list[McpServer] = []
    additional_directories: list[str] | None = None


class ConfigSelectOption(_Wire):
    value: str
    name: str
    description: str | UnsetType = UNSET


class ConfigOption(_Wire, tag_field="type", tag="select"):
    """A session config option of the select kind (the model picker: category ``model``)."""

    id: str
    name: str
    category: str
    current_value: str
    options: list[ConfigSelectOption]
    description: str | UnsetType = UNSET


class NewSessionResult(_Wire):
    session_id: str
    config_options: list[ConfigOption] | UnsetType = UNSET


class SetConfigOptionParams(_Wire):
    session_id: str
    config_id: str
    value: str


class SetConfigOptionResult(_Wire):
    config_options: list[ConfigOption]


class ConfigOptionUpdate(_Wire, tag_field="sessionUpdate", tag="config_option_update"):
    config_options: list[ConfigOption]


class LoadSessionParams(_Wire):
    session_id: str
    cwd: str
    mcp_servers: list[McpServer] = []


class ResumeSessionParams(_Wire):
    """``session/resume``: the session goes on with these servers, and nothing is replayed."""

    session_id: str
    cwd: str
    mcp_servers: list[McpServer] = []
    additional_directories: list[str] | None = None


class ResumeSessionResult(_Wire):
    config_options: list[ConfigOption] | UnsetType = UNSET


class ListSessionsParams(_Wire):
    cwd: str | None = None
    cursor: str | None = None


class SessionListing(_Wire):
    session_id: str
    cwd: str
    title: str | UnsetType = UNSET
    updated_at: str | UnsetType = UNSET


class ListSessionsResult(_Wire):
    sessions: list[SessionListing]


class SessionParams(_Wire):
    """``session/delete``, ``session/close`` and ``session/cancel``: just the session."""

    session_id: str


class PromptParams(_Wire):
    session_id: str
    prompt: list[ContentBlock]


class PromptResult(_Wire):
    stop_reason: StopReason


# --- session/update -------------------------------------------------------------------------


class UserMessageChunk(_Wire, tag_field="sessionUpdate", tag="user_message_chunk"):
    content: OutBlock


class AgentMessageChunk(_Wire, tag_field="sessionUpdate", tag="agent_message_chunk"):
    content: OutBlock


class AgentThoughtChunk(_Wire, tag_field="sessionUpdate", tag="agent_thought_chunk"):
    content: OutBlock


class ToolCallLocation(_Wire):
    path: str
    line: int | UnsetType = UNSET


class ToolCallContent(_Wire, tag_field="type", tag="content"):
    content: OutBlock


class ToolCallStart(_Wire, tag_field="sessionUpdate", tag="tool_call"):
    tool_call_id: str
    title: str
    kind: ToolKind
    status: ToolCallStatus
    locations: list[ToolCallLocation] | UnsetType = UNSET
    content: list[ToolCallContent] | UnsetType = UNSET
    raw_input: dict[str, Any] | UnsetType = UNSET


class ToolCallUpdate(_Wire, tag_field="sessionUpdate", tag="tool_call_update"):
    tool_call_id: str
    status: ToolCallStatus
    content: list[ToolCallContent] | UnsetType = UNSET
    kind: ToolKind | UnsetType = UNSET


# --- session/request_permission (agent -> client) -------------------------------------------

PermissionOptionKind = Literal["allow_once", "allow_always", "reject_once", "reject_always"]


class PermissionOption(_Wire):
    option_id: str
    name: str
    kind: PermissionOptionKind


class PermissionToolCall(_Wire):
    """The tool call a permission is asked for: the ``tool_call`` sent just before, by its id."""

    tool_call_id: str
    title: str | UnsetType = UNSET
    kind: ToolKind | UnsetType = UNSET
    status: ToolCallStatus | UnsetType = UNSET
    raw_input: dict[str, Any] | UnsetType = UNSET


class RequestPermissionParams(_Wire):
    session_id: str
    tool_call: PermissionToolCall
    options: list[PermissionOption]


class PermissionOutcome(_Wire):
    """``{"outcome": "selected", "optionId": …}`` or ``{"outcome": "cancelled"}``."""

    outcome: str
    option_id: str | UnsetType = UNSET


class RequestPermissionResult(_Wire):
    outcome: PermissionOutcome


class UsageUpdate(_Wire, tag_field="sessionUpdate", tag="usage_update"):
    """Tokens in the context (``used``) of the window (``size``)."""

    used: int
    size: int


class SessionInfoUpdate(_Wire, tag_field="sessionUpdate", tag="session_info_update"):
    """The session's title (and when it last changed), as ``session/list`` has them."""

    title: str | UnsetType = UNSET
    updated_at: str | UnsetType = UNSET


class CommandInput(_Wire):
    hint: str


class AvailableCommand(_Wire):
    name: str
    description: str
    input: CommandInput | UnsetType = UNSET


class AvailableCommandsUpdate(_Wire, tag_field="sessionUpdate", tag="available_commands_update"):
    available_commands: list[AvailableCommand]


SessionUpdate = (
    UserMessageChunk
    | AgentMessageChunk
    | AgentThoughtChunk
    | ToolCallStart
    | ToolCallUpdate
    | UsageUpdate
    | SessionInfoUpdate
    | AvailableCommandsUpdate
    | ConfigOptionUpdate
)


class SessionNotification(_Wire):
    session_id: str
    update: SessionUpdate


# --- decoding -------------------------------------------------------------------------------

envelope_decoder = msgspec.json.Decoder(Envelope)
any_decoder = msgspec.json.Decoder()
encoder = msgspec.json.Encoder()

#: Params decoders by method, built once.
PARAMS: dict[str, msgspec.json.Decoder] = {
    "initialize": msgspec.json.Decoder(InitializeParams),
    "session/new": msgspec.json.Decoder(NewSessionParams),
    "session/load": msgspec.json.Decoder(LoadSessionParams),
    "session/resume": msgspec.json.Decoder(ResumeSessionParams),
    "session/close": msgspec.json.Decoder(SessionParams),
    "session/list": msgspec.json.Decoder(ListSessionsParams),
    "session/delete": msgspec.json.Decoder(SessionParams),
    "session/prompt": msgspec.json.Decoder(PromptParams),
    "session/cancel": msgspec.json.Decoder(SessionParams),
    "session/set_config_option": msgspec.json.Decoder(SetConfigOptionParams),
}

#: The answer to ``session/request_permission``, decoded strictly: one that does not fit is a refusal.
permission_result_decoder = msgspec.json.Decoder(RequestPermissionResult)
