"""LFM2's calls (``lfm2``: LFM2, LFM2.5): Python calls with keyword arguments,
``<|tool_call_start|>[f(a="v"), g()]<|tool_call_end|>``.

Everything here is pure: no model, no I/O.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from typing import Any

from imprintd.messages import ToolCall
from imprintd.models.chat_formats.calls import TOO_DEEP, CallSyntax, Collector, Slip, between, snippet
from imprintd.models.chat_formats.format import ChatFormat
from imprintd.models.chat_formats.grammar import ArgumentRules, keyword_body

CALL_START = "<|tool_call_start|>"
CALL_END = "<|tool_call_end|>"


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


def parse_pythonic(body: str, collected: Collector) -> None:
    """``[f(a="v"), g()]``: Python calls with keyword arguments."""
    body = body.strip()
    try:
        tree = ast.parse(body if body.startswith("[") else f"[{body}]", mode="eval").body
    except SyntaxError as error:
        collected.errors.append(f"the tool call is not a Python call list ({error.msg}): {snippet(body)!r}")
        return
    except (RecursionError, MemoryError, ValueError):  # nesting past what Python's parser takes
        collected.errors.append(f"the tool call is not a Python call list ({TOO_DEEP}): {snippet(body)!r}")
        return
    calls = tree.elts if isinstance(tree, ast.List) else [tree]
    for call in calls:
        if not isinstance(call, ast.Call) or call.args:
            collected.errors.append(f"a tool call must be name(argument=value, …), not {snippet(ast.unparse(call))!r}")
            continue
        try:
            arguments = {k.arg: _literal(k.value) for k in call.keywords if k.arg is not None}
        except _PythonCallError as error:
            collected.errors.append(f"the {ast.unparse(call.func)!r} call has an argument that is not a value: {error}")
            continue
        collected.add_object({"name": ast.unparse(call.func), "arguments": arguments})


def _python_value(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_python_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_python_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)


def _write_calls(calls: Sequence[ToolCall]) -> str:
    written = ", ".join(
        f"{c.name}(" + ", ".join(f"{k}={_python_value(v)}" for k, v in c.arguments.items()) + ")" for c in calls
    )
    return f"{CALL_START}[{written}]{CALL_END}"


def _grammar(rules: ArgumentRules) -> str:
    """``<|tool_call_start|>[name(a="v", n=1)]<|tool_call_end|>``."""
    call = keyword_body(rules, lambda name, value: f'"{name}=" {value}', "(", ")", "py")
    return f'"[" {call} (", " {call})* "]" "{CALL_END}"'


LFM2 = ChatFormat(
    name="lfm2",
    families="LFM2, LFM2.5",
    markers=("<|im_start|>", "List of tools: "),
    any_markers=(CALL_START, "<|tool_list_start|>"),
    syntax=CallSyntax(
        "lfm2",
        (CALL_START,),
        between(CALL_END, parse_pythonic),
        slips=(
            Slip("<|tool_response_start|>", "<|tool_response_end|>"),
            # The closer written where the opener belongs: llama.cpp's parser wants the opener.
            Slip(
                CALL_END + "[",
                CALL_END,
                call=lambda body, collected: parse_pythonic(body.removeprefix(CALL_END), collected),
                wrapped=f'{CALL_START}[name(argument="value")]{CALL_END}',
            ),
        ),
        stray=(CALL_END, "<|tool_response_end|>", "<|tool_list_start|>", "<|tool_list_end|>"),
    ),
    write_calls=_write_calls,
    grammar=_grammar,
    grammar_opening=CALL_START,
)
