"""What every tool is: a schema, a title for the client, and a run that returns structure.

Tools are built for one reply from that reply's session and workspace; nothing here is a
global registry: none is ever mutated. Results carry structure
(hits, sources) so research notes are built from it, never parsed from text.

A tool's arguments are declared once, as a msgspec Struct: ``tool_spec`` turns it into the
JSON schema the model is offered, and ``parse_arguments`` checks a call against it, with an
error that names the argument and what it accepts, worded from that same schema.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar, runtime_checkable

import msgspec

from imprintd.messages import ToolOrigin, ToolSpec

#: The step id (``ToolStep.call_id``) of the call a tool is running: a tool that asks the user
#: first (an MCP tool) names the step its question belongs to. Set by the research loop.
CALL_STEP: ContextVar[str] = ContextVar("imprintd_call_step", default="")


class Source(msgspec.Struct, frozen=True, kw_only=True):
    """A place in the workspace an editor can open: relative path and 1-based line range."""

    path: str
    start_line: int
    end_line: int


class Hit(msgspec.Struct, frozen=True, kw_only=True):
    """One workspace search hit. ``id`` is stable for the same passage across searches."""

    id: str
    path: str
    start_line: int
    end_line: int
    score: float
    excerpt: str
    kind: str = "file"

    @property
    def source(self) -> Source:
        return Source(path=self.path, start_line=self.start_line, end_line=self.end_line)


class Quote(msgspec.Struct, frozen=True, kw_only=True):
    """An earlier message of this conversation as a result shows it: its seq and the text shown."""

    message: int
    text: str


class ToolResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a tool call produced.

    ``text`` is what the model sees. ``subject`` names what the call was about (a query, a
    path) for notes and the client. ``evidence`` holds keys of what was seen (hit ids, read
    ranges) so research can tell whether a round found anything new. ``hits`` and
    ``sources`` are the structure notes are built from. ``ok=False`` marks a failed or
    refused call, whose ``text`` says why; it adds no notes. ``continuation`` is the end of
    ``text`` that tells the model where to read on: tool protocol, not content, so notes (read
    by a tools-free final turn) leave it out. ``quotes`` are the earlier messages a
    ``conversation_history`` result shows, in order, after its ``preface``; research numbers
    each (``research/citations.py``). ``origin`` names the MCP server and tool of a result from
    outside the workspace: research numbers it as one source, cited with that origin.
    ``resources`` are the URIs such a result names (its resource links and embedded resources),
    in order, for the client to link to.
    """

    text: str
    ok: bool = True
    subject: str = ""
    evidence: tuple[str, ...] = ()
    hits: tuple[Hit, ...] = ()
    sources: tuple[Source, ...] = ()
    continuation: str = ""
    quotes: tuple[Quote, ...] = ()
    preface: str = ""
    footer: str = ""
    origin: ToolOrigin | None = None
    resources: tuple[str, ...] = ()

    @property
    def content(self) -> str:
        """``text`` without its continuation line."""
        if self.continuation and self.text.endswith(self.continuation):
            return self.text[: -len(self.continuation)].rstrip("\n")
        return self.text


class ToolHints(msgspec.Struct, frozen=True, kw_only=True):
    """What an MCP tool's annotations say of it: whether it only reads (``readOnlyHint``), may
    destroy (``destructiveHint``, unset: it may), reaches beyond the user's machine and the
    server's own data (``openWorldHint``, taken only when the server says so)."""

    read_only: bool = False
    destructive: bool = True
    open_world: bool = False


class ToolError(Exception):
    """A call that cannot be run as asked; the message is shown to the model and the client."""


Arguments = TypeVar("Arguments", bound=msgspec.Struct)


def tool_spec(name: str, description: str, arguments: type[msgspec.Struct]) -> ToolSpec:
    """The ToolSpec offered to the model for a tool whose arguments are the Struct ``arguments``."""
    return ToolSpec(name=name, description=description, parameters=parameters_schema(arguments))


def parameters_schema(arguments: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON schema of ``arguments`` as a tool's parameters.

    Each property reads type, limits, then description; defaults are left out (descriptions
    say them in words) and so are the Struct's title and docstring (the tool has its own) and
    an empty ``required``.
    ``forbid_unknown_fields=True`` is ``"additionalProperties": false``.
    """
    (reference,), definitions = msgspec.json.schema_components([arguments])
    schema = dict(definitions[reference["$ref"].rsplit("/", 1)[1]])
    schema.pop("title", None)
    schema.pop("description", None)
    if not schema.get("required"):
        schema.pop("required", None)
    schema["properties"] = {name: _property(fragment) for name, fragment in schema["properties"].items()}
    return schema


def _property(fragment: Mapping[str, Any]) -> dict[str, Any]:
    ordered = {key: value for key, value in fragment.items() if key not in ("description", "default")}
    if "description" in fragment:
        ordered["description"] = fragment["description"]
    return ordered


def parse_arguments(tool: str, arguments: Mapping[str, Any], struct: type[Arguments]) -> Arguments:
    """A call's ``arguments`` as ``struct``; ToolError naming what is wrong and what is accepted."""
    try:
        return msgspec.convert(dict(arguments), struct)
    except msgspec.ValidationError as error:
        raise ToolError(_what_is_wrong(tool, arguments, struct) or f"{tool}: {error}") from None


def _what_is_wrong(tool: str, arguments: Mapping[str, Any], struct: type[msgspec.Struct]) -> str | None:
    """The first problem with ``arguments``: unknown names, missing ones, then each value in turn."""
    fields = msgspec.structs.fields(struct)
    names = [field.encode_name for field in fields]
    unknown = sorted(set(arguments) - set(names))
    if unknown and struct.__struct_config__.forbid_unknown_fields:
        return f"{tool} takes only {_listed(names)}, not {', '.join(unknown)}"
    missing = [field for field in fields if field.required and field.encode_name not in arguments]
    if missing:
        return f"{tool} needs " + "; ".join(f"{field.encode_name} ({accepted(field.type)})" for field in missing)
    for field in fields:
        if field.encode_name not in arguments:
            continue
        value = arguments[field.encode_name]
        try:
            msgspec.convert(value, field.type)
        except msgspec.ValidationError:
            return f"{tool}: {field.encode_name} must be {accepted(field.type)}, not {value!r}"
    return None


_TYPE_WORDS = {"integer": "an integer", "string": "a string", "number": "a number", "boolean": "true or false"}


def accepted(annotation: Any) -> str:
    """What a value of ``annotation`` may be, in words from its JSON schema: "an integer, 1 or more"."""
    schema = msgspec.json.schema(annotation)
    kind = schema.get("type")
    words = _TYPE_WORDS.get(kind, f"a JSON {kind}") if isinstance(kind, str) else "a value of the described type"
    if kind == "string" and schema.get("minLength") == 1:
        return "a non-empty string"
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        return f"{words} from {low} to {high}"
    if low is not None:
        return f"{words}, {low} or more"
    if high is not None:
        return f"{words}, at most {high}"
    return words


def _listed(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


class Tool(Protocol):
    spec: ToolSpec

    def title(self, arguments: Mapping[str, Any]) -> str:
        """What the client shows while the call runs, e.g. "Searching the workspace for “port”"."""
        ...

    async def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        """Run the call; raise ToolError for a call that cannot be run as asked."""
        ...


@runtime_checkable
class HintedTool(Protocol):
    """A tool whose calls come with annotations (an MCP tool), so a client can show a step as
    what it is from its start, before the call asks for permission or ends."""

    def hints(self, arguments: Mapping[str, Any]) -> ToolHints | None:
        """The annotations of the tool a call with ``arguments`` runs; None when not known."""
        ...
