"""MCP tools as research tools: named, fitted to the context, asked about, converted.

Each tool of a configured server becomes a ``Tool`` named ``server__tool`` (OpenAI-compatible
tool names allow only letters, digits, ``_`` and ``-``, so ``git.log`` cannot be sent;
docs/decisions.md, "MCP tools in a small context"). Its schema is the server's own input schema.

What the model is shown is fitted (docs/decisions.md, "MCP tools in a small context"): when the
MCP tools' schemas would take more than ``MCP_SHARE`` of the model's window, the model gets one
compact pair instead: ``find_tools(query)`` (names and one-line descriptions, ranked by the
query's terms) and ``call_tool(name, arguments)``, which checks the arguments against the found
tool's schema and runs it.

A call runs without asking only when the tool's annotations say ``readOnlyHint: true`` and not
``destructiveHint``; any other waits for ``ReplyEvents.ask_permission`` (an "always" answer is
kept for the session by ``McpServers``). A declined call's result says so and research goes on.

Results (``convert``): text blocks joined; images, audio and blobs described (type, size),
never inlined; a resource link or embedded resource named with its URI (the URIs kept, in
order, in ``ToolResult.resources``, for the client to link to); ``isError`` a failed
result; everything redacted (``redact.py``) before anything else sees it; at most
``MAX_RESULT_CHARS`` characters. A result is one numbered source, cited with its server, tool,
arguments and URI (``research/citations.py``); a long one is analyzed in sections like a long
file (``research/loop.py``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from imprintd.events import PermissionRequest, ReplyEvents
from imprintd.mcp.servers import CALL_TIMEOUT_S, McpServers, McpToolInfo, McpUnavailable
from imprintd.messages import Message, ToolOrigin, ToolSpec
from imprintd.redact import redact
from imprintd.tools.base import CALL_STEP, ToolError, ToolHints, ToolResult

#: The most of the model's window the MCP tools' schemas may take before the compact pair
#: replaces them (docs/decisions.md, "MCP tools in a small context").
MCP_SHARE = 0.10
#: What joins a server's name and its tool's name.
SEPARATOR = "__"
#: OpenAI's limit on a tool name's length.
MAX_NAME_CHARS = 64
#: Characters of a tool's description offered to the model with its schema.
DESCRIPTION_CHARS = 600
#: Characters of a tool's description ``find_tools`` shows: its first line or sentence.
ONE_LINE_CHARS = 160
#: Tools ``find_tools`` lists at most.
FIND_LIMIT = 8
#: Characters of one result the model can be shown at all (section analysis reads at most this).
MAX_RESULT_CHARS = 1_000_000


def tool_name(server: str, tool: str) -> str:
    """``server__tool``, its characters those OpenAI-compatible tool names allow, at most 64."""
    name = f"{server}{SEPARATOR}{re.sub(r'[^A-Za-z0-9_-]', '_', tool)}"
    if len(name) <= MAX_NAME_CHARS:
        return name
    digest = hashlib.sha256(tool.encode("utf-8")).hexdigest()[:8]
    return f"{name[: MAX_NAME_CHARS - 9]}_{digest}"


def one_line(description: str) -> str:
    """A description's first sentence or line, cut at ``ONE_LINE_CHARS``."""
    first = description.strip().split("\n", 1)[0]
    sentence = re.split(r"(?<=[.!?])\s", first, maxsplit=1)[0]
    return sentence if len(sentence) <= ONE_LINE_CHARS else sentence[: ONE_LINE_CHARS - 1] + "…"


def _schema(info: McpToolInfo) -> dict[str, Any]:
    """The tool's input schema as offered: the server's, without its title and ``$schema``
    (they tell the model nothing and cost tokens)."""
    schema = {key: value for key, value in info.input_schema.items() if key not in ("title", "$schema")}
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


@dataclass(frozen=True)
class CallContext:
    """What a call needs beyond its arguments: the servers, the reply's events and session,
    and how many seconds the reply's research has left."""

    servers: McpServers
    events: ReplyEvents
    session_id: str
    time_left: Callable[[], float]


class McpTool:
    """One MCP server's tool as a research ``Tool``."""

    def __init__(self, info: McpToolInfo, context: CallContext) -> None:
        self.info = info
        self.context = context
        description = info.description or info.title or f"The {info.name} tool of the MCP server {info.server.name}."
        if len(description) > DESCRIPTION_CHARS:
            description = description[: DESCRIPTION_CHARS - 1] + "…"
        self.spec = ToolSpec(
            name=tool_name(info.server.name, info.name), description=description, parameters=_schema(info)
        )

    @property
    def server(self) -> str:
        return self.info.server.name

    def title(self, arguments: Mapping[str, Any]) -> str:
        return f"Asking {self.server}: {self.info.name}"

    def hints(self, arguments: Mapping[str, Any]) -> ToolHints:
        info = self.info
        return ToolHints(read_only=info.read_only, destructive=info.destructive, open_world=info.open_world)

    async def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        check_arguments(self.spec.name, dict(arguments), self.spec.parameters)
        origin = ToolOrigin(server=self.server, tool=self.info.name, arguments=dict(arguments))
        if not await self._allowed(dict(arguments)):
            return ToolResult(
                ok=False,
                subject=self.title(arguments),
                text=f"The user declined to let {self.server} run {self.info.name}; go on without it.",
            )
        timeout = max(1.0, min(CALL_TIMEOUT_S, self.context.time_left()))
        events = self.context.events

        async def progress(done: float, total: float | None, message: str | None) -> None:
            share = f" ({done:g} of {total:g})" if total else f" ({done:g})"
            events.progress(f"{self.title(arguments)}{share}{': ' + message if message else ''}")

        from mcp import MCPError

        try:
            result = await self.context.servers.call(
                self.info.server, self.info.name, dict(arguments), timeout=timeout, progress=progress
            )
        except McpUnavailable as error:
            return ToolResult(ok=False, text=f"The MCP server {self.server} is unavailable: {error}.")
        except TimeoutError:
            return ToolResult(ok=False, text=f"{self.server} did not answer {self.info.name} within {timeout:.0f} s.")
        except MCPError as error:
            return ToolResult(ok=False, text=f"{self.server} refused {self.info.name}: {redact(error.message)}")
        return convert(result, origin)

    async def _allowed(self, arguments: dict[str, Any]) -> bool:
        """Read-only tools run; any other runs once the user says yes (or said "always" this session)."""
        info, context = self.info, self.context
        if info.read_only and not info.destructive:
            return True
        if context.servers.always_allowed(context.session_id, self.server, info.name):
            return True
        answer = await context.events.ask_permission(
            PermissionRequest(
                call_id=CALL_STEP.get(),
                server=self.server,
                tool=info.name,
                title=self.title(arguments),
                arguments=arguments,
                read_only=info.read_only,
                destructive=info.destructive,
            )
        )
        if answer == "allow_always":
            context.servers.allow_always(context.session_id, self.server, info.name)
        return answer in ("allow_once", "allow_always")


# --- arguments ------------------------------------------------------------------------------

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def check_arguments(name: str, arguments: dict[str, Any], schema: Mapping[str, Any]) -> None:
    """ToolError naming the first argument that does not follow ``schema`` (its top level:
    required names, unknown names where ``additionalProperties`` is false, each value's type
    and ``enum``), and what is accepted."""
    properties: Mapping[str, Any] = schema.get("properties") or {}
    missing = [key for key in schema.get("required") or () if key not in arguments]
    if missing:
        wanted = "; ".join(f"{key} ({_accepted(properties.get(key, {}))})" for key in missing)
        raise ToolError(f"{name} needs {wanted}")
    if schema.get("additionalProperties") is False:
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            raise ToolError(f"{name} takes only {', '.join(properties) or 'no arguments'}, not {', '.join(unknown)}")
    for key, value in arguments.items():
        fragment = properties.get(key)
        if not isinstance(fragment, Mapping):
            continue
        if not _fits(value, fragment):
            raise ToolError(f"{name}: {key} must be {_accepted(fragment)}, not {json.dumps(value)[:80]}")


def _fits(value: Any, fragment: Mapping[str, Any]) -> bool:
    if "enum" in fragment and value not in fragment["enum"]:
        return False
    kinds = fragment.get("type")
    if kinds is None:
        options = fragment.get("anyOf") or fragment.get("oneOf")
        return not options or any(isinstance(option, Mapping) and _fits(value, option) for option in options)
    for kind in [kinds] if isinstance(kinds, str) else kinds:
        accepted = _JSON_TYPES.get(kind)
        if accepted is None:
            return True  # a type this check does not know: the server checks it
        if isinstance(value, bool) and kind in ("integer", "number"):
            continue
        if kind == "integer" and isinstance(value, float) and value.is_integer():
            return True
        if isinstance(value, accepted):
            return True
    return False


def _accepted(fragment: Mapping[str, Any]) -> str:
    if "enum" in fragment:
        return "one of " + ", ".join(json.dumps(value) for value in fragment["enum"])
    kinds = fragment.get("type")
    if isinstance(kinds, list):
        return " or ".join(_article(kind) for kind in kinds)
    if isinstance(kinds, str):
        return _article(kinds)
    return "a value as the tool's schema describes"


def _article(kind: str) -> str:
    return {"integer": "an integer", "array": "an array", "object": "an object"}.get(kind, f"a {kind}")


# --- results ---------------------------------------------------------------------------------


def convert(result: Any, origin: ToolOrigin) -> ToolResult:
    """An SDK ``CallToolResult`` as a ``ToolResult`` (see the module docstring)."""
    parts: list[str] = []
    uris: list[str] = []
    for block in result.content or ():
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"({kind}, {block.mime_type}, {_decoded_size(block.data):,} bytes: not shown)")
        elif kind == "resource_link":
            uris.append(str(block.uri))
            what = f", {block.mime_type}" if block.mime_type else ""
            parts.append(f"(resource {block.name}{what}: {block.uri})")
        elif kind == "resource":
            resource = block.resource
            uris.append(str(resource.uri))
            text = getattr(resource, "text", None)
            if isinstance(text, str):
                parts.append(f"(resource {resource.uri})\n{text}")
            else:
                what = resource.mime_type or "binary"
                parts.append(f"(resource {resource.uri}, {what}, {_decoded_size(resource.blob):,} bytes: not shown)")
        else:
            parts.append(f"({kind or 'unknown'} content: not shown)")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, indent=1))
    text = redact("\n\n".join(part for part in parts if part))
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"\n(cut here: {len(text) - MAX_RESULT_CHARS:,} characters more not shown)"
    uri = uris[0] if uris else None
    origin = ToolOrigin(server=origin.server, tool=origin.tool, arguments=origin.arguments, uri=uri)
    subject = f"{origin.server}: {origin.tool}"
    if result.is_error:
        return ToolResult(
            ok=False, subject=subject, text=f"{origin.server} answered {origin.tool} with an error: {text}"
        )
    if not text.strip():
        return ToolResult(subject=subject, text=f"{origin.server} returned nothing for {origin.tool}.")
    key = hashlib.sha256(
        json.dumps([origin.server, origin.tool, origin.arguments], sort_keys=True).encode()
    ).hexdigest()
    return ToolResult(subject=subject, text=text, evidence=(f"mcp:{key[:16]}",), origin=origin, resources=tuple(uris))


def _decoded_size(data: str | bytes | None) -> int:
    if not data:
        return 0
    if isinstance(data, bytes):
        return len(data)
    try:
        return len(base64.b64decode(data, validate=False))
    except ValueError:
        return len(data) * 3 // 4


# --- the compact pair ------------------------------------------------------------------------


class Catalog:
    """The MCP tools of one reply by name, their ranking for ``find_tools``, and the schema a
    local model's call grammar holds ``call_tool``'s arguments to."""

    def __init__(self, tools: Sequence[McpTool]) -> None:
        self.tools = {tool.spec.name: tool for tool in tools}
        self.grammar = call_grammar_schema(tools)
        self._terms = {
            name: Counter(_terms(f"{name} {tool.info.title} {tool.spec.description}"))
            for name, tool in self.tools.items()
        }
        self._lengths = {name: sum(terms.values()) for name, terms in self._terms.items()}

    def find(self, query: str, limit: int = FIND_LIMIT) -> list[McpTool]:
        """The tools best matching ``query``: BM25 over each tool's name and description."""
        wanted = set(_terms(query))
        if not wanted:
            return list(self.tools.values())[:limit]
        count = len(self.tools)
        average = sum(self._lengths.values()) / max(count, 1) or 1.0
        scores: dict[str, float] = {}
        for term in wanted:
            having = [name for name, terms in self._terms.items() if term in terms]
            if not having:
                continue
            idf = math.log(1 + (count - len(having) + 0.5) / (len(having) + 0.5))
            for name in having:
                frequency = self._terms[name][term]
                norm = frequency * 2.2 / (frequency + 1.2 * (0.25 + 0.75 * self._lengths[name] / average))
                scores[name] = scores.get(name, 0.0) + idf * norm
        ranked = sorted(scores, key=lambda name: (-scores[name], name))
        return [self.tools[name] for name in ranked[:limit]]


def call_grammar_schema(tools: Sequence[McpTool]) -> dict[str, Any] | None:
    """``call_tool``'s arguments as one choice per tool: ``{"name": <that tool>, "arguments": <its
    schema>}``, so a local model that opens a call to ``call_tool`` names a listed tool and fills in
    that tool's own arguments (``models/chat_formats/grammar.py``). A schema llama.cpp's converter cannot
    read leaves that tool's arguments any object. None where no local model runs (llama_cpp not
    loaded): the schema is for its grammar alone."""
    if "llama_cpp" not in sys.modules or not tools:
        return None
    from imprintd.models.chat_formats.grammar import _converter_class

    choices = []
    for tool in tools:
        arguments: dict[str, Any] = tool.spec.parameters
        try:
            _converter_class()(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False).visit(
                arguments, "probe"
            )
        except Exception:  # noqa: BLE001 (any schema the converter cannot read)
            arguments = {"type": "object"}
        choices.append(
            {
                "type": "object",
                "properties": {"name": {"const": tool.spec.name}, "arguments": arguments},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    return {"anyOf": choices}


def _terms(text: str) -> list[str]:
    """Lower-case words, names split at ``_``, ``-`` and case changes (``git_log`` → git, log)."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", text)
    words = re.findall(r"[A-Za-z0-9]+", spaced.lower())
    return [_stem(word) for word in words if len(word) > 1 and word not in STOP_WORDS]


#: Words too common to find a tool by (``find_tools``' query and a tool's description).
STOP_WORDS = frozenset(
    [
        "the",
        "a",
        "an",
        "of",
        "to",
        "for",
        "and",
        "or",
        "in",
        "on",
        "by",
        "with",
        "from",
        "is",
        "are",
        "be",
        "it",
        "its",
        "this",
        "that",
        "as",
        "at",
    ]
)


def _stem(word: str) -> str:
    for suffix in ("ing", "es", "ed", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


FIND_TOOLS_SPEC = ToolSpec(
    name="find_tools",
    description=(
        "Find tools of the user's MCP servers (git history, issue trackers, docs, …) by what they do. "
        "Returns tool names with one line each; run one with call_tool."
    ),
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string", "description": "what the tool should do, in a few words"}},
        "required": ["query"],
    },
)

CALL_TOOL_SPEC = ToolSpec(
    name="call_tool",
    description="Run a tool that find_tools listed, with arguments as its schema (shown by find_tools) asks.",
    parameters={
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "the tool's name as find_tools listed it"},
            "arguments": {"type": "object", "description": "the tool's arguments"},
        },
        "required": ["name"],
    },
)


class FindTools:
    """``find_tools(query)``: the best matching MCP tools, each with one line and its arguments."""

    spec = FIND_TOOLS_SPEC

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    def title(self, arguments: Mapping[str, Any]) -> str:
        return f"Finding MCP tools for “{arguments.get('query', '')}”"

    async def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        query = arguments.get("query")
        if not isinstance(query, str):
            raise ToolError("find_tools needs query (a string: what the tool should do)")
        found = self.catalog.find(query)
        if not found:
            names = ", ".join(self.catalog.tools) or "none"
            return ToolResult(text=f"No MCP tool matches “{query}”. The tools are: {names}.", subject=query)
        lines = [
            f"{tool.spec.name}: {one_line(tool.spec.description)} Arguments: {_arguments_line(tool)}" for tool in found
        ]
        return ToolResult(text="\n".join(lines), subject=query)


def _arguments_line(tool: McpTool) -> str:
    """A tool's arguments in a few words: ``repo_path (string, required), max_count (integer)``."""
    schema = tool.spec.parameters
    required = set(schema.get("required") or ())
    shown = []
    for key, fragment in (schema.get("properties") or {}).items():
        kind = fragment.get("type", "any") if isinstance(fragment, Mapping) else "any"
        kind = "/".join(kind) if isinstance(kind, list) else kind
        shown.append(f"{key} ({kind}{', required' if key in required else ''})")
    return ", ".join(shown) or "none"


class CallTool:
    """``call_tool(name, arguments)``: run the MCP tool ``name`` that ``find_tools`` listed."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.spec = msgspec.structs.replace(CALL_TOOL_SPEC, grammar=catalog.grammar)

    def _tool(self, arguments: Mapping[str, Any]) -> McpTool:
        name = arguments.get("name")
        tool = self.catalog.tools.get(name) if isinstance(name, str) else None
        if tool is None:
            raise ToolError(
                f"call_tool: there is no MCP tool named {name!r}; find one with find_tools "
                f"(the tools are: {', '.join(self.catalog.tools) or 'none'})"
            )
        return tool

    def title(self, arguments: Mapping[str, Any]) -> str:
        return self._tool(arguments).title(arguments.get("arguments") or {})

    def hints(self, arguments: Mapping[str, Any]) -> ToolHints | None:
        """The named tool's annotations; None for a name ``find_tools`` did not list (the call fails)."""
        try:
            tool = self._tool(arguments)
        except ToolError:
            return None
        return tool.hints(arguments.get("arguments") or {})

    async def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        tool = self._tool(arguments)
        inner = arguments.get("arguments", {})
        if not isinstance(inner, dict):
            raise ToolError(f"call_tool: arguments must be an object, as {tool.spec.name}'s schema asks")
        return await tool.run(inner)


# --- fitting ---------------------------------------------------------------------------------


def schema_tokens(
    count_prompt: Callable[[Sequence[Message], Sequence[ToolSpec]], int], specs: Sequence[ToolSpec]
) -> int:
    """Tokens ``specs`` add to a prompt, counted by the model's own formatting."""
    if not specs:
        return 0
    from imprintd.messages import system

    probe = [system("")]
    return count_prompt(probe, specs) - count_prompt(probe, [])


def fitted(
    tools: Sequence[McpTool], *, n_ctx: int, count_prompt: Callable[[Sequence[Message], Sequence[ToolSpec]], int]
) -> list[Any]:
    """What the model is offered of ``tools``: each one when their schemas take at most
    ``MCP_SHARE`` of ``n_ctx``, else the compact pair over them (none for none)."""
    if not tools:
        return []
    if schema_tokens(count_prompt, [tool.spec for tool in tools]) <= MCP_SHARE * n_ctx:
        return list(tools)
    catalog = Catalog(tools)
    return [FindTools(catalog), CallTool(catalog)]
