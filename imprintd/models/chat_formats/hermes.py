"""The ``<tool_call>`` formats: Hermes (JSON inside the tags) and Qwen's XML (inside them too).

=========  ==========================================================  ==============================
format     a call as the model writes it                               families
=========  ==========================================================  ==============================
hermes     ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``    Qwen2.5, Qwen3, Granite 4, Hermes
qwen-xml   ``<tool_call><function=f><parameter=x>v</parameter>…``      Qwen3.5, Qwen3-Coder
=========  ==========================================================  ==============================

One block parser reads both: a block whose body opens with ``<function=`` is XML. Hermes is also
what a template that renders tool schemas without any known markers is taken to write (the most
common training), and ``json_fallback.py`` reads ``<tool_call>`` blocks with the same parser.

Everything here is pure: no model, no I/O.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from imprintd.messages import ToolCall, ToolSpec
from imprintd.models.chat_formats.calls import (
    HERMES_CLOSE,
    HERMES_OPEN,
    TOO_DEEP,
    CallSyntax,
    Collector,
    Slip,
    format_call,
    loads_json,
    snippet,
)
from imprintd.models.chat_formats.format import ChatFormat
from imprintd.models.chat_formats.grammar import ArgumentRules, literal, rule_name
from imprintd.models.chat_formats.reasoning import THINK

TOOL_RESPONSE_OPEN = "<tool_response>"
TOOL_RESPONSE_CLOSE = "</tool_response>"
XML_FUNCTION_OPEN = "<function="
XML_FUNCTION_CLOSE = "</function>"
_XML_FUNCTION = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|$)", re.S)
_XML_PARAMETER = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?(?:</parameter>|(?=<parameter=)|$)", re.S)


# -- parsing -----------------------------------------------------------------------------------


def hermes_block(text: str, start: int, opening: str, collected: Collector) -> int:
    """A ``<tool_call>`` block: JSON, or Qwen's XML, up to ``</tool_call>``."""
    body_start = start + len(opening)
    end = text.find(HERMES_CLOSE, body_start)
    # A reply cut off (length, or an end-of-turn before the closing tag) leaves the last
    # block open; its body is still the model's call.
    body = text[body_start:] if end < 0 else text[body_start:end]
    if body.lstrip().startswith(XML_FUNCTION_OPEN):  # Qwen3.5 / Qwen3-Coder write XML inside the tags
        parse_qwen_xml_body(body, collected)
    else:
        collected.add_json(body.strip(), allow_list=False)
    return len(text) if end < 0 else end + len(HERMES_CLOSE)


def _tool_schema(collected: Collector, name: str) -> Mapping[str, Any]:
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


def parse_qwen_xml_body(body: str, collected: Collector) -> None:
    """``<function=name><parameter=x>value</parameter>…</function>`` (Qwen3.5, Qwen3-Coder)."""
    functions = list(_XML_FUNCTION.finditer(body.strip()))
    if not functions:
        collected.errors.append(f"the tool call names no function: {snippet(body)!r}")
    for function in functions:
        name = function[1]
        schema = _tool_schema(collected, name)
        try:
            arguments = {m[1]: _typed(m[2], schema.get(m[1], {})) for m in _XML_PARAMETER.finditer(function[2])}
        except json.JSONDecodeError as error:
            collected.errors.append(f"the arguments of the {name!r} call cannot be read ({error.msg})")
            continue
        collected.add_object({"name": name, "arguments": arguments})


HERMES_SYNTAX = CallSyntax(
    "hermes",
    (HERMES_OPEN,),
    hermes_block,
    slips=(Slip(TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE),),
    stray=(HERMES_CLOSE, TOOL_RESPONSE_CLOSE),
)


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
QWEN_XML_SYNTAX = CallSyntax(
    "qwen-xml",
    (HERMES_OPEN,),
    hermes_block,
    slips=(Slip(TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE), _bare_function(accepted=False)),
    stray=_QWEN_STRAY,
)
#: Qwen3-Coder (no ``<think>`` in its template): a bare ``<function=…>`` is a call.
QWEN_CODER_SYNTAX = dataclasses.replace(
    QWEN_XML_SYNTAX, slips=(Slip(TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE), _bare_function(accepted=True))
)


def _qwen_syntax(template: str) -> CallSyntax:
    """Qwen3-Coder's template (``qwen-xml`` without ``<think>``) takes a bare ``<function=…>`` as a
    call, as llama.cpp does; Qwen3.5's does not."""
    return QWEN_XML_SYNTAX if THINK.open in template else QWEN_CODER_SYNTAX


# -- writing earlier calls -------------------------------------------------------------------------


def _write_hermes(calls: Sequence[ToolCall]) -> str:
    return "\n".join(f"{HERMES_OPEN}\n{format_call(c)}\n{HERMES_CLOSE}" for c in calls)


def _xml_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _write_qwen_xml(calls: Sequence[ToolCall]) -> str:
    return "\n".join(
        f"{HERMES_OPEN}\n<function={c.name}>\n"
        + "".join(f"<parameter={k}>\n{_xml_value(v)}\n</parameter>\n" for k, v in c.arguments.items())
        + f"</function>\n{HERMES_CLOSE}"
        for c in calls
    )


# -- the call grammar ------------------------------------------------------------------------------


def hermes_grammar(rules: ArgumentRules) -> str:
    """``<tool_call> {"name": ...} </tool_call>``, maybe more of them."""
    block = f'ws "{{" ws "\\"name\\"" ws ":" ws {rules.named_call()} ws {literal(HERMES_CLOSE)}'
    rules.add("call-block", block)
    return f'call-block ("\\n"? {literal(HERMES_OPEN)} call-block)*'


def _qwen_xml_grammar(rules: ArgumentRules) -> str:
    """``<tool_call><function=name><parameter=x>value</parameter></function></tool_call>``."""
    rules.add("xml-value", "[^<]+")
    choices = []
    for tool in rules.tools:
        names = list(tool.parameters.get("properties", {}))
        parameters = " | ".join(
            f'"<parameter=" {literal(name)} ">\\n" xml-value "\\n</parameter>\\n"' for name in names
        )
        rule = f"xml-{rule_name(tool.name)}"
        rules.add(rule, f'"<function=" {literal(tool.name)} ">\\n" ({parameters or chr(34) * 2})* "</function>"')
        choices.append(rule)
    rules.add("xml-call", " | ".join(choices))
    return f'"\\n"? xml-call "\\n"? {literal(HERMES_CLOSE)}'


# -- the entries -----------------------------------------------------------------------------------

HERMES = ChatFormat(
    name="hermes",
    families="Qwen2.5, Qwen3, Granite 4, SmolLM3, Hermes",
    markers=(HERMES_OPEN,),
    syntax=HERMES_SYNTAX,
    write_calls=_write_hermes,
    grammar=hermes_grammar,
    grammar_opening=HERMES_OPEN,
)
QWEN_XML = ChatFormat(
    name="qwen-xml",
    families="Qwen3.5, Qwen3-Coder",
    markers=(HERMES_OPEN, XML_FUNCTION_OPEN, "<parameter="),
    syntax=QWEN_XML_SYNTAX,
    template_syntax=_qwen_syntax,
    write_calls=_write_qwen_xml,
    grammar=_qwen_xml_grammar,
    grammar_opening=HERMES_OPEN,
    # Qwen3.5 may open a call before it closes its thoughts: llama.cpp's parser ends them there.
    thoughts_end_at=(HERMES_OPEN,),
)
