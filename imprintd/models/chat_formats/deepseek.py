"""DeepSeek's calls (``deepseek-r1``: the DeepSeek-R1 distills): ``<｜tool▁calls▁begin｜>``, then
per call R1's ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>name`` and fenced JSON arguments (V3's
``name<｜tool▁sep｜>{json}`` is read too).

Everything here is pure: no model, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from imprintd.messages import ToolCall
from imprintd.models.chat_formats.calls import CallSyntax, Collector, Slip, between, loads_json, snippet
from imprintd.models.chat_formats.format import ChatFormat
from imprintd.models.chat_formats.grammar import ArgumentRules, literal

DEEPSEEK_CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
DEEPSEEK_CALLS_END = "<｜tool▁calls▁end｜>"
DEEPSEEK_CALL_BEGIN = "<｜tool▁call▁begin｜>"
DEEPSEEK_CALL_END = "<｜tool▁call▁end｜>"
DEEPSEEK_SEP = "<｜tool▁sep｜>"


def _calls(body: str, collected: Collector) -> None:
    """R1's ``function<｜tool▁sep｜>name`` + fenced JSON, or V3's ``name<｜tool▁sep｜>{json}``, per call."""
    for part in body.split(DEEPSEEK_CALL_BEGIN):
        part = part.split(DEEPSEEK_CALL_END)[0].strip()
        if not part:
            continue
        kind, sep, rest = part.partition(DEEPSEEK_SEP)
        if not sep:
            collected.errors.append(f"the tool call has no name: {snippet(part)!r}")
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


def _write_calls(calls: Sequence[ToolCall]) -> str:
    written = "".join(
        f"{DEEPSEEK_CALL_BEGIN}function{DEEPSEEK_SEP}{c.name}\n```json\n"
        f"{json.dumps(c.arguments, ensure_ascii=False)}\n```{DEEPSEEK_CALL_END}"
        for c in calls
    )
    return DEEPSEEK_CALLS_BEGIN + written + DEEPSEEK_CALLS_END


def _grammar(rules: ArgumentRules) -> str:
    """``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name`` + fenced JSON arguments."""
    one = rules.per_tool(
        "deepseek-call",
        f'{literal(DEEPSEEK_CALL_BEGIN + "function" + DEEPSEEK_SEP)} {{bare}} "\\n```json\\n" {{arguments}} '
        f'"\\n```" {literal(DEEPSEEK_CALL_END)}',
    )
    return f"{one}+ {literal(DEEPSEEK_CALLS_END)}"


DEEPSEEK_R1 = ChatFormat(
    name="deepseek-r1",
    families="DeepSeek-R1 distills (Qwen, Llama)",
    any_markers=("tool▁calls▁begin",),
    syntax=CallSyntax(
        "deepseek-r1",
        (DEEPSEEK_CALLS_BEGIN, DEEPSEEK_CALL_BEGIN),
        between(DEEPSEEK_CALLS_END, _calls),
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
    write_calls=_write_calls,
    grammar=_grammar,
    grammar_opening=DEEPSEEK_CALLS_BEGIN,
)
