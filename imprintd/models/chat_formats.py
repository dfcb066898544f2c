"""The chat-format table: how each model family writes tool calls and reasoning.

One entry per format. Each says how to recognize it in a chat template (the markers the template
writes, as llama.cpp's ``common/chat.cpp`` detects them), how its model writes a call (the
openings a call starts with and the parser for the block that follows), how an earlier call is
written back when a template does not render ``tool_calls`` itself, which tool-call ids its
template accepts, how the call grammar (``call_grammar.py``) opens a call, and the family's
slips and stray markers (markup written out of place, which never shows: ``toolcalls.Slip``,
``CallSyntax.stray``; docs/decisions.md, "Chat formats"). Reasoning
markers are detected apart (``detect_reasoning``): the same call syntax comes with or without
a thinking model (Qwen2.5 and Qwen3 both write Hermes calls).

===============  =========================================================  ====================
format           a call as the model writes it                              families
===============  =========================================================  ====================
hermes           ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``   Qwen2.5, Qwen3,
                                                                            Granite 4, SmolLM3
qwen-xml         ``<tool_call><function=f><parameter=x>v</parameter>…``     Qwen3.5, Qwen3-Coder
llama3-json      ``{"name": …, "parameters": {…}}``, maybe after            Llama 3.x
                 ``<|python_tag|>``
mistral          ``[TOOL_CALLS][{"name": …, "arguments": {…}}]``            Mistral 7B v0.3, Nemo
mistral-args     ``[TOOL_CALLS]name[ARGS]{…}``                              Ministral 3
granite          ``<|tool_call|>[{"name": …, "arguments": {…}}]``           Granite 3.x
phi4-mini        ``functools[{…}]`` or ``<|tool_call|>{…}<|/tool_call|>``   Phi-4-mini
lfm2             ``<|tool_call_start|>[f(a="v")]<|tool_call_end|>``         LFM2, LFM2.5
gemma4           ``<|tool_call>call:f{a:<|"|>v<|"|>}<tool_call|>``          Gemma 4
deepseek-r1      ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function…``  DeepSeek-R1 distills
json-fallback    a bare or fenced ``{"name": …, "arguments": {…}}``         any template that
                                                                            renders no tools
===============  =========================================================  ====================

Everything here is pure: no model, no I/O.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from imprintd.messages import ToolCall, ToolSpec
from imprintd.models.toolcalls import (
    HERMES,
    HERMES_CLOSE,
    HERMES_OPEN,
    JSON_IN_TEXT,
    TOO_DEEP,
    TOOL_RESPONSE_CLOSE,
    TOOL_RESPONSE_OPEN,
    CallSyntax,
    MarkerEraser,
    Slip,
    SpaceTrimmer,
    _Collector,
    _partial_suffix,
    _snippet,
    format_call,
    loads_json,
    raw_decode_json,
)

# -- parsing the call blocks ---------------------------------------------------------------------


def _tool_schema(collected: _Collector, name: str) -> Mapping[str, Any]:
    """The JSON schema of ``name``'s parameters, when the collector was given the tools themselves."""
    tools = collected.tool_names
    tool = tools.get(name) if isinstance(tools, Mapping) else None
    return tool.parameters.get("properties", {}) if isinstance(tool, ToolSpec) else {}


def _typed(value: str, schema: Mapping[str, Any]) -> Any:
    """A parameter written as text (XML forms), read as its schema's type: strings stay text."""
    if schema.get("type") == "string":
        return value
    try:
        return loads_json(value)
    except json.JSONDecodeError as error:
        if error.msg == TOO_DEEP:
            raise
        return value


XML_FUNCTION_OPEN = "<function="
XML_FUNCTION_CLOSE = "</function>"
_XML_FUNCTION = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|$)", re.S)
_XML_PARAMETER = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?(?:</parameter>|(?=<parameter=)|$)", re.S)


def parse_qwen_xml_body(body: str, collected: _Collector) -> None:
    """``<function=name><parameter=x>value</parameter>…</function>`` (Qwen3.5, Qwen3-Coder)."""
    functions = list(_XML_FUNCTION.finditer(body.strip()))
    if not functions:
        collected.errors.append(f"the tool call names no function: {_snippet(body)!r}")
    for function in functions:
        name = function[1]
        schema = _tool_schema(collected, name)
        try:
            arguments = {m[1]: _typed(m[2], schema.get(m[1], {})) for m in _XML_PARAMETER.finditer(function[2])}
        except json.JSONDecodeError as error:
            collected.errors.append(f"the arguments of the {name!r} call cannot be read ({error.msg})")
            continue
        collected.add_object({"name": name, "arguments": arguments})


def _json_after(close: str = "") -> Callable[[str, int, str, _Collector], int]:
    """A block that is one JSON value (a call, or a list of calls) after the opening, then ``close``."""

    def block(text: str, start: int, opening: str, collected: _Collector) -> int:
        at = _skip(text, start + len(opening))
        while True:
            try:
                value, end = raw_decode_json(text, at)
            except json.JSONDecodeError as error:
                collected.errors.append(
                    f"the tool call is not valid JSON ({error.msg} at character {error.pos - at}): "
                    f"{_snippet(text[at:])!r}"
                )
                return len(text)
            for item in value if isinstance(value, list) else [value]:
                collected.add_object(item)
            end = _skip(text, end)
            if not text.startswith(";", end):  # Llama 3.x may chain calls with semicolons
                break
            at = _skip(text, end + 1)
        if close and text.startswith(close, end):
            end += len(close)
        return end

    return block


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def _mistral_block(text: str, start: int, opening: str, collected: _Collector) -> int:
    """``[TOOL_CALLS][{…}]`` (Mistral 7B v0.3, Nemo) or ``[TOOL_CALLS]name[ARGS]{…}`` (Ministral 3)."""
    at = _skip(text, start + len(opening))
    if text[at : at + 1] in ("[", "{"):
        return _json_after()(text, at, "", collected)
    args = text.find("[ARGS]", at)
    if args < 0:
        collected.errors.append(f"the tool call has no [ARGS] after its name: {_snippet(text[at:])!r}")
        return len(text)
    name = text[at:args].split("[CALL_ID]")[0].strip()
    at = _skip(text, args + len("[ARGS]"))
    try:
        arguments, end = raw_decode_json(text, at)
    except json.JSONDecodeError as error:
        collected.errors.append(
            f"the arguments of the {name!r} call are not valid JSON ({error.msg}): {_snippet(text[at:])!r}"
        )
        return len(text)
    collected.add_object({"name": name, "arguments": arguments})
    return end


class _PythonCallError(ValueError):
    pass


def _literal(node: ast.AST) -> Any:
    """A Python (or JSON) literal from its syntax tree: ``True``/``true``, ``None``/``null``, …"""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        names = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}
        if node.id in names:
            return names[node.id]
        raise _PythonCallError(f"{node.id} is not a value")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _literal(node.operand)
        if isinstance(value, int | float):
            return -value
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        return {
            _literal(k) if k is not None else None: _literal(v) for k, v in zip(node.keys, node.values, strict=True)
        }
    raise _PythonCallError(f"{ast.unparse(node)} is not a value")


def parse_pythonic(body: str, collected: _Collector) -> None:
    """``[f(a="v"), g()]``: Python calls with keyword arguments (LFM2, LFM2.5)."""
    body = body.strip()
    try:
        tree = ast.parse(body if body.startswith("[") else f"[{body}]", mode="eval").body
    except SyntaxError as error:
        collected.errors.append(f"the tool call is not a Python call list ({error.msg}): {_snippet(body)!r}")
        return
    except (RecursionError, MemoryError, ValueError):  # nesting past what Python's parser takes
        collected.errors.append(f"the tool call is not a Python call list ({TOO_DEEP}): {_snippet(body)!r}")
        return
    calls = tree.elts if isinstance(tree, ast.List) else [tree]
    for call in calls:
        if not isinstance(call, ast.Call) or call.args:
            collected.errors.append(f"a tool call must be name(argument=value, …), not {_snippet(ast.unparse(call))!r}")
            continue
        try:
            arguments = {k.arg: _literal(k.value) for k in call.keywords if k.arg is not None}
        except _PythonCallError as error:
            collected.errors.append(f"the {ast.unparse(call.func)!r} call has an argument that is not a value: {error}")
            continue
        collected.add_object({"name": ast.unparse(call.func), "arguments": arguments})


def _between(close: str, parse: Callable[[str, _Collector], None]) -> Callable[[str, int, str, _Collector], int]:
    """A block running from its opening to ``close`` (or the end), its body read by ``parse``."""

    def block(text: str, start: int, opening: str, collected: _Collector) -> int:
        body_start = start + len(opening)
        end = text.find(close, body_start)
        parse(text[body_start:] if end < 0 else text[body_start:end], collected)
        return len(text) if end < 0 else end + len(close)

    return block


GEMMA_QUOTE = '<|"|>'
_GEMMA_KEY = re.compile(r"([{,]\s*)([A-Za-z_][\w.-]*)\s*:")


def gemma_to_json(body: str) -> str:
    """Gemma 4's argument object as JSON: ``{a:<|"|>v<|"|>,n:1}`` → ``{"a": "v", "n": 1}``."""
    out: list[str] = []
    position = 0
    while True:
        start = body.find(GEMMA_QUOTE, position)
        if start < 0:
            out.append(_GEMMA_KEY.sub(r'\1"\2":', body[position:]))
            return "".join(out)
        end = body.find(GEMMA_QUOTE, start + len(GEMMA_QUOTE))
        end = len(body) if end < 0 else end
        out.append(_GEMMA_KEY.sub(r'\1"\2":', body[position:start]))
        out.append(json.dumps(body[start + len(GEMMA_QUOTE) : end], ensure_ascii=False))
        position = end + len(GEMMA_QUOTE)


def _gemma_call(body: str, collected: _Collector) -> None:
    """``call:name{…}`` (Gemma 4)."""
    body = body.strip()
    brace = body.find("{")
    if not body.startswith("call:") or brace < 0:
        collected.errors.append(f"the tool call must read call:name{{…}}: {_snippet(body)!r}")
        return
    name = body[len("call:") : brace].strip()
    try:
        arguments = loads_json(gemma_to_json(body[brace:]))
    except json.JSONDecodeError as error:
        collected.errors.append(f"the arguments of the {name!r} call cannot be read ({error.msg}): {_snippet(body)!r}")
        return
    collected.add_object({"name": name, "arguments": arguments})


DEEPSEEK_CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
DEEPSEEK_CALLS_END = "<｜tool▁calls▁end｜>"
DEEPSEEK_CALL_BEGIN = "<｜tool▁call▁begin｜>"
DEEPSEEK_CALL_END = "<｜tool▁call▁end｜>"
DEEPSEEK_SEP = "<｜tool▁sep｜>"


def _deepseek_calls(body: str, collected: _Collector) -> None:
    """R1's ``function<｜tool▁sep｜>name`` + fenced JSON, or V3's ``name<｜tool▁sep｜>{json}``, per call."""
    for part in body.split(DEEPSEEK_CALL_BEGIN):
        part = part.split(DEEPSEEK_CALL_END)[0].strip()
        if not part:
            continue
        kind, sep, rest = part.partition(DEEPSEEK_SEP)
        if not sep:
            collected.errors.append(f"the tool call has no name: {_snippet(part)!r}")
            continue
        if kind.strip() == "function":
            name, _, rest = rest.partition("\n")
        else:
            name = kind
        rest = rest.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
        try:
            arguments = loads_json(rest) if rest else {}
        except json.JSONDecodeError as error:
            collected.errors.append(f"the arguments of the {name.strip()!r} call are not valid JSON ({error.msg})")
            continue
        collected.add_object({"name": name.strip(), "arguments": arguments})


# -- writing calls as each family does (earlier calls, where a template does not render them) -----


def _arguments_json(call: ToolCall) -> str:
    return json.dumps(call.arguments, ensure_ascii=False)


def _python_value(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_python_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_python_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)


def _gemma_value(value: Any) -> str:
    if isinstance(value, str):
        return GEMMA_QUOTE + value + GEMMA_QUOTE
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_gemma_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_gemma_value(v) for v in value) + "]"
    return json.dumps(value)


def _xml_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


Writer = Callable[[Sequence[ToolCall]], str]

_WRITERS: dict[str, Writer] = {
    "hermes": lambda calls: "\n".join(f"{HERMES_OPEN}\n{format_call(c)}\n</tool_call>" for c in calls),
    "qwen-xml": lambda calls: "\n".join(
        f"{HERMES_OPEN}\n<function={c.name}>\n"
        + "".join(f"<parameter={k}>\n{_xml_value(v)}\n</parameter>\n" for k, v in c.arguments.items())
        + "</function>\n</tool_call>"
        for c in calls
    ),
    "llama3-json": lambda calls: "; ".join(
        json.dumps({"name": c.name, "parameters": c.arguments}, ensure_ascii=False) for c in calls
    ),
    "mistral": lambda calls: (
        "[TOOL_CALLS]" + json.dumps([{"name": c.name, "arguments": c.arguments} for c in calls], ensure_ascii=False)
    ),
    "mistral-args": lambda calls: "".join(f"[TOOL_CALLS]{c.name}[ARGS]{_arguments_json(c)}" for c in calls),
    "granite": lambda calls: (
        "<|tool_call|>" + json.dumps([{"name": c.name, "arguments": c.arguments} for c in calls], ensure_ascii=False)
    ),
    "phi4-mini": lambda calls: (
        "functools" + json.dumps([{"name": c.name, "arguments": c.arguments} for c in calls], ensure_ascii=False)
    ),
    "lfm2": lambda calls: (
        "<|tool_call_start|>["
        + ", ".join(
            f"{c.name}(" + ", ".join(f"{k}={_python_value(v)}" for k, v in c.arguments.items()) + ")" for c in calls
        )
        + "]<|tool_call_end|>"
    ),
    "gemma4": lambda calls: "".join(f"<|tool_call>call:{c.name}{_gemma_value(c.arguments)}<tool_call|>" for c in calls),
    "deepseek-r1": lambda calls: (
        DEEPSEEK_CALLS_BEGIN
        + "".join(
            f"{DEEPSEEK_CALL_BEGIN}function{DEEPSEEK_SEP}{c.name}\n```json\n{_arguments_json(c)}\n```{DEEPSEEK_CALL_END}"
            for c in calls
        )
        + DEEPSEEK_CALLS_END
    ),
    "json-fallback": lambda calls: "\n".join(format_call(c) for c in calls),
}


# -- ids -------------------------------------------------------------------------------------------


def mistral_id(call_id: str) -> str:
    """A call id as Mistral's templates demand it: exactly 9 letters and digits, the same for the
    same id (a call and its result must agree, and a prompt must stay byte-stable)."""
    if len(call_id) == 9 and call_id.isascii() and call_id.isalnum():
        return call_id
    return hashlib.sha256(call_id.encode("utf-8")).hexdigest()[:9]


# -- the table ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChatFormat:
    """One way of writing tool calls, and what the rest of the provider needs to know of it."""

    name: str
    #: The families known to write it (for the README and ``imprintd config``).
    families: str
    syntax: CallSyntax
    #: Markers a template must all contain to be this format (empty: never detected, a fallback).
    markers: tuple[str, ...] = ()
    #: Markers any one of which also identifies it.
    any_markers: tuple[str, ...] = ()
    #: How a call id is written for the template (Mistral's must be 9 alphanumerics).
    template_id: Callable[[str], str] = lambda call_id: call_id
    #: Where the call grammar starts a call, and how it writes one (``call_grammar.py``).
    grammar_opening: str = ""

    def write_calls(self, calls: Sequence[ToolCall]) -> str:
        """``calls`` as this family's model writes them (an earlier call a template does not render)."""
        return _WRITERS[self.name](calls)

    def matches(self, template: str) -> bool:
        if self.markers and all(marker in template for marker in self.markers):
            return True
        return any(marker in template for marker in self.any_markers)


def _syntax(
    name: str,
    openings: tuple[str, ...],
    block: Any,
    json_calls: bool = False,
    *,
    slips: tuple[Slip, ...] = (),
    stray: tuple[str, ...] = (),
) -> CallSyntax:
    return CallSyntax(name, openings, block, json_calls, slips, stray)


#: ``<function=name>…</function>`` without ``<tool_call>`` around it: llama.cpp takes it as a
#: call for Qwen3-Coder (a template without ``<think>``), not for Qwen3.5, whose parser wants
#: the wrapper (``common/parsers/qwen3-coder.cpp``).
def _bare_function(accepted: bool) -> Slip:
    return Slip(
        XML_FUNCTION_OPEN,
        XML_FUNCTION_CLOSE,
        call=parse_qwen_xml_body,
        accepted=accepted,
        wrapped="<tool_call><function=name><parameter=…>…</parameter></function></tool_call>",
    )


_QWEN_STRAY = (HERMES_CLOSE, TOOL_RESPONSE_CLOSE, XML_FUNCTION_CLOSE, "</parameter>")
#: Qwen3.5 (a thinking template): a bare ``<function=…>`` is cut and the model told.
QWEN_XML_SYNTAX = _syntax(
    "qwen-xml",
    (HERMES_OPEN,),
    HERMES.block,
    slips=(Slip(TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE), _bare_function(accepted=False)),
    stray=_QWEN_STRAY,
)
#: Qwen3-Coder (no ``<think>`` in its template): a bare ``<function=…>`` is a call.
QWEN_CODER_SYNTAX = dataclasses.replace(
    QWEN_XML_SYNTAX, slips=(Slip(TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE), _bare_function(accepted=True))
)

HERMES_FORMAT = ChatFormat(
    "hermes", "Qwen2.5, Qwen3, Granite 4, SmolLM3, Hermes", HERMES, (HERMES_OPEN,), grammar_opening=HERMES_OPEN
)
QWEN_XML = ChatFormat(
    "qwen-xml",
    "Qwen3.5, Qwen3-Coder",
    QWEN_XML_SYNTAX,
    (HERMES_OPEN, XML_FUNCTION_OPEN, "<parameter="),
    grammar_opening=HERMES_OPEN,
)
LLAMA3_JSON = ChatFormat(
    "llama3-json",
    "Llama 3.1, 3.2, 3.3",
    _syntax(
        "llama3-json",
        ("<|python_tag|>",),
        _json_after("<|eom_id|>"),
        json_calls=True,
        stray=("<|eom_id|>", "<|eot_id|>"),
    ),
    any_markers=("<|python_tag|>",),
    markers=("<|start_header_id|>", '"parameters"'),
    grammar_opening="",
)
_MISTRAL_SLIPS = (Slip("[TOOL_RESULTS]", "[/TOOL_RESULTS]"),)
_MISTRAL_STRAY = ("[/TOOL_RESULTS]", "[ARGS]", "[CALL_ID]", "[/TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]")
MISTRAL = ChatFormat(
    "mistral",
    "Mistral 7B v0.3, Mistral Nemo",
    _syntax("mistral", ("[TOOL_CALLS]",), _mistral_block, slips=_MISTRAL_SLIPS, stray=_MISTRAL_STRAY),
    ("[TOOL_CALLS]",),
    template_id=mistral_id,
    grammar_opening="[TOOL_CALLS]",
)
MISTRAL_ARGS = ChatFormat(
    "mistral-args",
    "Ministral 3, Mistral Small 3.2, Devstral",
    _syntax("mistral-args", ("[TOOL_CALLS]",), _mistral_block, slips=_MISTRAL_SLIPS, stray=_MISTRAL_STRAY),
    ("[TOOL_CALLS]", "[ARGS]"),
    template_id=mistral_id,
    grammar_opening="[TOOL_CALLS]",
)
GRANITE = ChatFormat(
    "granite",
    "Granite 3.x",
    _syntax("granite", ("<|tool_call|>",), _json_after()),
    ("<|tool_call|>",),
    grammar_opening="<|tool_call|>",
)
PHI4_MINI = ChatFormat(
    "phi4-mini",
    "Phi-4-mini",
    _syntax(
        "phi4-mini",
        ("functools", "<|tool_call|>"),
        _json_after("<|/tool_call|>"),
        stray=("<|/tool_call|>", "<|tool|>", "<|/tool|>"),
    ),
    # llama.cpp's template writes the calls' markers; the model's own (Hugging Face) template
    # only ``<|tool|>…<|/tool|>`` around the offered tools.
    any_markers=("functools", "<|/tool_call|>", "<|/tool|>"),
    grammar_opening="functools",
)
LFM2_CALL_END = "<|tool_call_end|>"
LFM2 = ChatFormat(
    "lfm2",
    "LFM2, LFM2.5",
    _syntax(
        "lfm2",
        ("<|tool_call_start|>",),
        _between(LFM2_CALL_END, parse_pythonic),
        slips=(
            Slip("<|tool_response_start|>", "<|tool_response_end|>"),
            # The closer written where the opener belongs: llama.cpp's parser wants the opener.
            Slip(
                LFM2_CALL_END + "[",
                LFM2_CALL_END,
                call=lambda body, collected: parse_pythonic(body.removeprefix(LFM2_CALL_END), collected),
                wrapped='<|tool_call_start|>[name(argument="value")]<|tool_call_end|>',
            ),
        ),
        stray=(LFM2_CALL_END, "<|tool_response_end|>", "<|tool_list_start|>", "<|tool_list_end|>"),
    ),
    ("<|im_start|>", "List of tools: "),
    any_markers=("<|tool_call_start|>", "<|tool_list_start|>"),
    grammar_opening="<|tool_call_start|>",
)
GEMMA4 = ChatFormat(
    "gemma4",
    "Gemma 4",
    _syntax(
        "gemma4",
        ("<|tool_call>",),
        _between("<tool_call|>", _gemma_call),
        slips=(Slip("<|tool_response>", "<tool_response|>"),),
        stray=(
            GEMMA_QUOTE,
            "<tool_call|>",
            "<tool_response|>",
            "<|channel>",
            "<channel|>",
            "<|tool>",
            "<tool|>",
            "<|think|>",
            "<|turn>",
            "<turn|>",
        ),
    ),
    ("<|tool_call>", "call:"),
    grammar_opening="<|tool_call>",
)
DEEPSEEK_R1 = ChatFormat(
    "deepseek-r1",
    "DeepSeek-R1 distills (Qwen, Llama)",
    _syntax(
        "deepseek-r1",
        (DEEPSEEK_CALLS_BEGIN, DEEPSEEK_CALL_BEGIN),
        _between(DEEPSEEK_CALLS_END, _deepseek_calls),
        slips=(
            Slip("<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>"),
            Slip("<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>"),
        ),
        stray=(
            DEEPSEEK_CALLS_END,
            DEEPSEEK_CALL_END,
            DEEPSEEK_SEP,
            "<｜tool▁outputs▁end｜>",
            "<｜tool▁output▁end｜>",
            "<｜end▁of▁sentence｜>",
        ),
    ),
    any_markers=("tool▁calls▁begin",),
    grammar_opening=DEEPSEEK_CALLS_BEGIN,
)
JSON_FALLBACK = ChatFormat(
    "json-fallback", "any template that renders no tools (Gemma 3, Phi-3.5, …)", JSON_IN_TEXT, grammar_opening=""
)

#: Detection order: the most specific markers first (``[ARGS]`` before ``[TOOL_CALLS]``, the XML
#: form before plain ``<tool_call>``).
FORMATS: tuple[ChatFormat, ...] = (
    MISTRAL_ARGS,
    MISTRAL,
    GEMMA4,
    DEEPSEEK_R1,
    LFM2,
    PHI4_MINI,
    GRANITE,
    QWEN_XML,
    HERMES_FORMAT,
    LLAMA3_JSON,
)
BY_NAME: dict[str, ChatFormat] = {f.name: f for f in (*FORMATS, JSON_FALLBACK)}


def call_syntax(chat_format: ChatFormat, template: str) -> CallSyntax:
    """The syntax a model with ``template`` writes calls in: its format's, except that a
    Qwen3-Coder template (``qwen-xml`` without ``<think>``) takes a bare ``<function=…>`` as a
    call, as llama.cpp does."""
    if chat_format.syntax is QWEN_XML_SYNTAX and THINK.open not in template:
        return QWEN_CODER_SYNTAX
    return chat_format.syntax


def detect_format(template: str, renders_tools: bool) -> ChatFormat:
    """The format a model with ``template`` writes calls in: the first whose markers the template
    writes; else Hermes where the template renders tool schemas (the most common training), and
    ``json-fallback`` for a template that knows no tool calls."""
    return next((f for f in FORMATS if f.matches(template)), HERMES_FORMAT if renders_tools else JSON_FALLBACK)


# -- reasoning --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reasoning:
    """How a family marks its thoughts: they run from ``open`` to ``close``."""

    open: str
    close: str


THINK = Reasoning("<think>", "</think>")
MISTRAL_THINK = Reasoning("[THINK]", "[/THINK]")
GEMMA_THOUGHT = Reasoning("<|channel>thought", "<channel|>")

#: The template variables that switch a family's reasoning on or off.
REASONING_SWITCHES = ("enable_thinking", "thinking")


def detect_reasoning(template: str) -> Reasoning | None:
    """The reasoning markers ``template`` knows, or None for a model that does not reason."""
    if "[THINK]" in template:
        return MISTRAL_THINK
    if "<|channel>" in template and "thought" in template:
        return GEMMA_THOUGHT
    if "<think>" in template:
        return THINK
    return None


class ReasoningSplitter:
    """Splits streamed text into reasoning and answer by a family's markers.

    ``feed`` returns ``(reasoning, text)`` safe to pass on now, holding back a tail that may
    still become a marker. ``opened``: the prompt already opened the reasoning (a template whose
    generation prompt ends with ``<think>``), so the reply starts inside it. Only the first
    block counts: what follows the closing marker (or one of ``ends``) is the answer (the
    answer's filter removes stray markers there). ``stray``: markers removed from the reasoning (the family's closers
    and channel markers; the opening marker written again).

    Linear in the reply: the tail held is bounded by a marker's length, and the reasoning's
    trailing whitespace (which the thoughts end without) is held as pieces.
    """

    def __init__(
        self,
        markers: Reasoning | None,
        *,
        opened: bool = False,
        stray: Sequence[str] = (),
        ends: Sequence[str] = (),
    ) -> None:
        self._markers = markers
        #: Markers that end the thoughts without closing them: they and what follows are the
        #: answer (Qwen3.5's ``<tool_call>``, as llama.cpp's parser reads it).
        self._ends = tuple(ends)
        self._state = "none" if markers is None else "before"
        #: The prompt opened the thoughts: a reply that does not open them again starts inside.
        self._opened = opened
        self._pending = ""
        self._erase = MarkerEraser((*stray, markers.open) if markers is not None else stray)
        self._space = SpaceTrimmer()

    def __copy__(self) -> ReasoningSplitter:
        clone = object.__new__(ReasoningSplitter)
        clone.__dict__.update(self.__dict__)
        clone._erase = copy.copy(self._erase)
        clone._space = copy.copy(self._space)
        return clone

    def feed(self, piece: str) -> tuple[str, str]:
        if self._state in ("none", "after"):
            return "", piece
        self._pending += piece
        return self._split(final=False)

    def finish(self) -> tuple[str, str]:
        return self._split(final=True)

    def _split(self, *, final: bool) -> tuple[str, str]:
        markers = self._markers
        if markers is None or self._state == "after":
            text, self._pending = self._pending, ""
            return "", text
        if self._state == "before":
            # Leading whitespace is dropped as it comes (the answer drops it too).
            self._pending = self._pending.lstrip()
            pending = self._pending
            if pending.startswith(markers.open):
                self._pending = pending[len(markers.open) :]
                self._state = "inside"
            elif not final and markers.open.startswith(pending):
                return "", ""  # may still become the opening marker
            elif self._opened:
                self._state = "inside"
            else:
                self._state = "after"
                self._pending = ""
                return "", pending
        pending = self._pending
        end = pending.find(markers.close)
        answer = end + len(markers.close)
        for marker in self._ends:
            at = pending.find(marker)
            if at >= 0 and (end < 0 or at < end):
                end = answer = at
        if end >= 0:
            self._pending = ""
            self._state = "after"
            return self._thought(pending[:end], last=True), pending[answer:]
        if final:
            self._pending = ""
            return self._thought(pending, last=True), ""
        cut = len(pending) - max(_partial_suffix(pending, marker) for marker in (markers.close, *self._ends))
        self._pending = pending[cut:]
        return self._thought(pending[:cut], last=False), ""

    def _thought(self, piece: str, *, last: bool) -> str:
        """``piece`` of the reasoning as it is kept: stray markers out, no leading whitespace,
        trailing whitespace only once more follows."""
        if last:
            return self._space.finish(self._erase.feed(piece) + self._erase.finish())
        return self._space.feed(self._erase.feed(piece))


def split_reasoning(
    text: str, markers: Reasoning | None, *, opened: bool = False, stray: Sequence[str] = ()
) -> tuple[str, str]:
    """``(reasoning, answer)`` of a whole reply (``ReasoningSplitter`` at once)."""
    splitter = ReasoningSplitter(markers, opened=opened, stray=stray)
    reasoning, answer = splitter.feed(text)
    more_reasoning, more_answer = splitter.finish()
    return (reasoning + more_reasoning).rstrip(), answer + more_answer
