"""A stored conversation taken out of the editor (``imprint/export``, ``imprintd export``).

Two formats:

- **Markdown**, to read or share: the title and where the session researched; the running summary
  as a note before the messages it covers; each question under ``## You``, each answer
  under ``## Imprint`` with the tool steps that led to it folded in a ``<details>`` block (each
  call in words, its result in a fenced block, clipped to ``STEP_RESULT_CHARS``), and its sources
  as ``path:line`` links relative to the workspace instead of the plain Sources lines Imprint wrote
  under the answer. A reasoning model's thoughts are left out, as they are never answer text.
  The steps are the ones the chat showed: the first look titled with the question it looked for,
  its result without the lines written for the model (``first_look.for_the_user``), and no call
  the model repeated within a reply (the chat shows none; the model was told its earlier result).
  A result is fenced with more backticks than any run inside it, so no result closes its fence.
- **JSON**, to process: exactly what ``imprint/session`` returns (the session, its stored messages,
  its summary), so a tool reading one reads the other.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from imprintd.context.history import describe_call
from imprintd.messages import Message, SourceRef, ToolCall, calls_by_id, is_first_look
from imprintd.research import first_look
from imprintd.research.citations import sources_block
from imprintd.research.loop import REPEATED
from imprintd.store import SessionInfo, StoredSummary

Format = Literal["markdown", "json"]
#: A tool step's result is shown up to this many characters in the Markdown (the JSON has all).
STEP_RESULT_CHARS = 2_000


def markdown(info: SessionInfo, messages: Sequence[Message], summary: StoredSummary | None) -> str:
    """The conversation as Markdown (the module docstring says what goes where)."""
    out = [f"# {_escape(info.title) or 'Untitled conversation'}", ""]
    facts = [f"Session `{info.id}`", f"started {_when(info.created_at)}", f"{len(messages)} messages"]
    if info.workspace:
        facts.insert(1, f"workspace `{info.workspace}`")
    out += [" · ".join(facts), ""]
    calls = calls_by_id(messages)
    # Calls the model repeated within a reply: the chat showed no step for them.
    repeats = {m.tool_call_id for m in messages if m.role == "tool" and m.content.startswith(REPEATED)}
    question = ""
    steps: list[str] = []
    # The summary goes before the first message it covers, as an abstract of what follows.
    pending = summary if summary is not None and summary.text else None
    for message in messages:
        if pending is not None and (message.seq or 0) >= pending.first_seq:
            out += [_summary_note(pending), ""]
            pending = None
        if message.role == "user":
            question = message.content
            out += [f"## You (#{message.seq})", "", message.content, ""]
        elif message.role == "tool":
            if message.tool_call_id not in repeats:
                steps.append(_step_result(message, calls, question))
        elif message.tool_calls:
            if message.content.strip():
                steps.append(message.content.strip())
            steps += [f"- {_step_title(call, question)}" for call in message.tool_calls if call.id not in repeats]
        elif message.role == "assistant":
            out += [f"## Imprint (#{message.seq})", ""]
            if steps:
                out += _folded(steps)
                steps = []
            out += [_answer_text(message), ""]
            if message.sources:
                out += _sources(message.sources), ""
    if steps:  # a reply that stopped before its answer
        out += ["## Imprint", "", *_folded(steps)]
    if pending is not None:
        out += [_summary_note(pending), ""]
    return "\n".join(out).rstrip() + "\n"


def file_name(info: SessionInfo, format: Format) -> str:
    """A file name for the export: ``imprint-`` and the title's first words, ``.md`` or ``.json``."""
    words = re.findall(r"[^\W_]+", info.title.lower())[:6]
    stem = "-".join(words)[:60].strip("-") or info.id[:8]
    return f"imprint-{stem}.{'md' if format == 'markdown' else 'json'}"


def _when(created_at: float) -> str:
    return datetime.fromtimestamp(created_at).strftime("%Y-%m-%d %H:%M")


def _escape(text: str) -> str:
    return text.replace("\n", " ").strip()


def _summary_note(summary: StoredSummary) -> str:
    quoted = "\n".join(f"> {line}" if line else ">" for line in summary.text.splitlines())
    return (
        f"> **Summary of messages #{summary.first_seq}–#{summary.last_seq}** (what Imprint keeps in view)\n>\n{quoted}"
    )


def _step_title(call: ToolCall, question: str) -> str:
    """A call in words, as the chat titled its step: the first look by the question it looked for."""
    if is_first_look(call):
        return first_look.step_title(question)
    return describe_call(call)


def _step_result(message: Message, calls: dict[str, ToolCall], question: str) -> str:
    call = calls.get(message.tool_call_id or "")
    whole = first_look.for_the_user(message.content) if call and is_first_look(call) else message.content
    text = whole
    if len(text) > STEP_RESULT_CHARS:
        text = text[:STEP_RESULT_CHARS] + f"\n… ({len(whole):,} characters in all)"
    fence = _fence(text)
    name = _step_title(call, question) if call else message.name or "tool"
    if call and is_first_look(call):
        name = name[:1].lower() + name[1:]  # "Result of looking in the workspace for …"
    return f"  Result of {name}:\n\n{fence}\n{text}\n{fence}"


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks in ``text`` (at least three), so nothing in it
    closes the block."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _folded(steps: list[str]) -> list[str]:
    count = sum(1 for step in steps if step.startswith("- "))
    label = f"{count} tool step{'s' if count != 1 else ''}" if count else "Steps"
    return ["<details>", f"<summary>{label}</summary>", "", *steps, "", "</details>", ""]


def _answer_text(message: Message) -> str:
    """The answer without the plain Sources lines Imprint wrote under it (shown as links instead)."""
    block = "\n\n" + sources_block(message.sources) if message.sources else ""
    if block and message.content.endswith(block):
        return message.content[: -len(block)]
    return message.content


def _sources(sources: Sequence[SourceRef]) -> str:
    lines = ["Sources:", ""]
    for source in sources:
        note = " (read, not cited)" if not source.cited else " (unsupported)" if source.supported is False else ""
        lines.append(f"{source.number}. {_place(source)}{note}")
    return "\n".join(lines)


def _place(source: SourceRef) -> str:
    """A file's lines as a link relative to the workspace (``[app.py:3-9](app.py#L3-L9)``), else its label."""
    if source.path is None:
        return f"#{source.message}" if source.kind == "message" and source.message else source.label
    start = source.start_line
    if start is None:
        return f"[{source.path}]({_link(source.path)})"
    end = source.end_line or start
    where = f"{source.path}:{start}" if end == start else f"{source.path}:{start}-{end}"
    anchor = f"#L{start}" if end == start else f"#L{start}-L{end}"
    return f"[{where}]({_link(source.path)}{anchor})"


def _link(path: str) -> str:
    return path.replace(" ", "%20").replace("(", "%28").replace(")", "%29")
