"""The running summary of what no longer fits (docs/decisions.md, "Running summary").

At the start of a reply, before research, the reply checks whether the conversation's own
text (the user's and the assistant's messages after what the summary covers, without tool
exchanges, plus the question) fits beside the current summary block. Only when it does not:

1. ``plan_coverage`` chooses the oldest uncovered exchanges until the newest ones fill at
   most half the room left beside a full-size summary (900 tokens reserved), so the next
   summary waits until the conversation has grown by that half again.
2. ``update_summary`` asks the model for one bullet per newly covered exchange (at most 300
   output tokens, 120 seconds including the wait for the model), given the summary so far;
   a local model writes them under a grammar (``bullet_grammar``) that allows exactly those
   bullets, each opening with its exchange's message numbers.
   Long messages are clipped head and tail, tool results are named rather than included.
   The bullets are appended; past 2,000 characters the oldest go first.
3. ``summary_block`` puts the summary in the system prompt under "Earlier in this
   conversation", with the covered range and a deterministic list of covered material.

If the model fails, times out or the request cannot fit, the previous summary stays, the
reply falls back to fitting's dropping, and no new attempt is made until six more messages
have been added (``retry_at``); a summary skipped because the reply had no time left sets no
retry point. A question too big for the context alone is left out of the plan (it is
analyzed in sections whatever the history holds). Secrets are redacted (SECURITY.md, "Secrets") in everything the summarizer
reads and in what it writes.

A state with empty ``text`` covers nothing, whatever its numbers say: it only carries the
retry point of a first attempt that failed (the store requires numbers of real messages).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import anyio
import msgspec

from imprintd.context.history import TOOL_NAME, describe_call
from imprintd.events import ReplyEvents
from imprintd.messages import Message, ToolSpec, calls_by_id, is_first_look
from imprintd.models.base import Model, ModelError, side_requests
from imprintd.offload import in_worker
from imprintd.redact import EXCERPT_MARGIN, redact, redact_head, redact_tail
from imprintd.store import StoredSummary

SUMMARY_RESERVE_TOKENS = 900
SUMMARY_CAP_CHARS = 2_000
SUMMARY_OUTPUT_TOKENS = 300
SUMMARY_TIMEOUT_S = 120
RETRY_AFTER_MESSAGES = 6

#: A user message longer than this is "pasted" material the covered-material list names.
LONG_PASTE_CHARS = 1_000
#: Head and tail kept of a long message in the summarizer's transcript, harder at each level
#: when the request would not fit the model.
CLIP_LEVELS: tuple[tuple[int, int], ...] = ((600, 400), (300, 200), (150, 100), (60, 40))
#: The covered-material list shows the latest this many items, so the block stays near its
#: reserve however long the conversation grows.
MATERIAL_LIMIT = 12
#: A last guard in case a model does not honour its own timeout.
_DEADLINE_GRACE_S = 5

PROGRESS = "Summarizing the earlier conversation…"
HEADING = "Earlier in this conversation"

SUMMARIZER_SYSTEM = (
    "You keep a running summary of a conversation between a user and an assistant, so the "
    "assistant can go on after older messages leave its view. You write only new bullets for "
    "the messages you are given; the summary so far stays as it is. Keep names, numbers, "
    "decisions, preferences and corrections. Say what was pasted or looked up instead of "
    "copying it. Never write passwords, keys or tokens."
)
EXAMPLE = (
    "- (#1–#2) The user pasted the staging compose file; the assistant noted its services and ports.\n"
    "- (#3–#4) The user asked which database bedrock runs; the assistant said Postgres 16."
)


class SummaryOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What one summary attempt left: the state to store, and whether it succeeded.

    On failure ``state`` is the previous summary (or an empty one) with ``retry_at`` set, and
    ``reason`` says what went wrong; the reply then falls back to fitting's dropping.
    """

    ok: bool
    state: StoredSummary | None
    reason: str = ""


# --- what is covered -------------------------------------------------------------------------


def covered_through(state: StoredSummary | None) -> int:
    """The last message number the summary covers; 0 when there is no summary text."""
    return state.last_seq if state is not None and state.text else 0


def should_attempt(state: StoredSummary | None, message_count: int) -> bool:
    """False while a failed attempt's retry point (six messages later) has not been reached."""
    return state is None or state.retry_at is None or message_count >= state.retry_at


def conversation_text(
    messages: Sequence[Message], summary: StoredSummary | None, question: Message | None = None
) -> list[Message]:
    """The user's and assistant's messages after what the summary covers, without tool exchanges."""
    covered = covered_through(summary)
    return [
        m for m in _uncovered(messages, covered, question) if m.role in ("user", "assistant") and not m.is_tool_exchange
    ]


def _uncovered(messages: Sequence[Message], covered: int, question: Message | None) -> list[Message]:
    asked = question.seq if question is not None else None
    return [
        m
        for m in messages
        if m.role != "system" and (m.seq is None or m.seq > covered) and (asked is None or m.seq != asked)
    ]


def bullet_grammar(to_cover: Sequence[Message]) -> str:
    """The GBNF a local model's summary is written under: one bullet per exchange, in order.

    Each bullet opens with its exchange's message numbers, ``- (#12)`` or ``- (#12–#13)``, and
    goes on with a line of the model's own words; nothing else can be written (a small model
    left free wrote prose, repeated itself or cited no number, and no summary came of it).
    """
    rules = []
    for index, group in enumerate(exchanges(to_cover), 1):
        numbers = [m.seq for m in group if m.seq is not None]
        if not numbers:
            continue
        cited = f"#{numbers[0]}" if len(numbers) == 1 else f"#{numbers[0]}–#{numbers[-1]}"
        rules.append(f'bullet{index} ::= "- ({cited}) " line "\\n"')
    names = " ".join(rule.split(" ", 1)[0] for rule in rules)
    return "\n".join([f"root ::= {names}", *rules, "line ::= [^\\n]+"])


def exchanges(messages: Sequence[Message]) -> list[list[Message]]:
    """Messages grouped as exchanges: a user message up to the next one, as fitting drops them."""
    groups: list[list[Message]] = []
    for message in messages:
        if message.role == "user" or not groups:
            groups.append([message])
        else:
            groups[-1].append(message)
    return groups


# --- does it fit, and what to cover ----------------------------------------------------------


def conversation_fits(
    model: Model,
    *,
    system: Message,
    summary: StoredSummary | None,
    messages: Sequence[Message],
    question: Message,
    tools: Sequence[ToolSpec],
    max_tokens: int,
) -> bool:
    """Does the conversation's own text fit beside the current summary block in ``model.n_ctx``?

    ``system`` may already hold the summary block (as the reply builds it); if it does not,
    the block is added for the measurement.
    """
    prompt = [_with_block(system, summary, messages), *conversation_text(messages, summary, question), question]
    return model.count_prompt(prompt, tools) + max_tokens <= model.n_ctx


def plan_coverage(
    model: Model,
    *,
    system: Message,
    summary: StoredSummary | None,
    messages: Sequence[Message],
    question: Message,
    tools: Sequence[ToolSpec],
    max_tokens: int,
) -> list[Message] | None:
    """The messages the summary should newly cover, in order; None while the text fits.

    Covers the oldest uncovered exchanges, whole (tool exchanges included), until the newest
    ones' text takes at most half the room left beside a full-size summary:
    room = n_ctx − max_tokens − system − tools − question − 900. Always at least one
    exchange when the text does not fit; an empty list when there is nothing left to cover.

    A question too big for the context even alone is left out: it goes to section analysis
    whatever the history holds, so summarizing for it would cover exact earlier messages for
    a drop that is only temporary.
    """
    if model.count_prompt([system, question], tools) + max_tokens > model.n_ctx:
        question = Message(role="user", content="", seq=question.seq)
    if conversation_fits(
        model, system=system, summary=summary, messages=messages, question=question, tools=tools, max_tokens=max_tokens
    ):
        return None
    groups = exchanges(_uncovered(messages, covered_through(summary), question))
    if not groups:
        return []
    half = (
        headroom(
            model,
            system=_without_block(system, summary, messages),
            question=question,
            tools=tools,
            max_tokens=max_tokens,
        )
        // 2
    )
    costs = [_text_cost(model, group) for group in groups]
    cover = 1
    remaining = sum(costs[1:])
    while cover < len(groups) and remaining > half:
        remaining -= costs[cover]
        cover += 1
    return [m for group in groups[:cover] for m in group]


def headroom(model: Model, *, system: Message, question: Message, tools: Sequence[ToolSpec], max_tokens: int) -> int:
    """Room for the conversation's text beside a full-size summary (may be negative)."""
    return model.n_ctx - max_tokens - model.count_prompt([system, question], tools) - SUMMARY_RESERVE_TOKENS


def _text_cost(model: Model, group: Sequence[Message]) -> int:
    return sum(model.count_message(m) for m in group if m.role in ("user", "assistant") and not m.is_tool_exchange)


def _with_block(system: Message, summary: StoredSummary | None, messages: Sequence[Message]) -> Message:
    block = _block_for(summary, messages)
    if not block or block in system.content:
        return system
    return msgspec.structs.replace(system, content=f"{system.content}\n\n{block}")


def _without_block(system: Message, summary: StoredSummary | None, messages: Sequence[Message]) -> Message:
    block = _block_for(summary, messages)
    if not block or block not in system.content:
        return system
    content = system.content.replace(f"\n\n{block}", "").replace(block, "")
    return msgspec.structs.replace(system, content=content)


def _block_for(summary: StoredSummary | None, messages: Sequence[Message]) -> str:
    if summary is None or not summary.text:
        return ""
    covered = [m for m in messages if m.seq is not None and summary.first_seq <= m.seq <= summary.last_seq]
    return summary_block(summary, covered_material(covered))


# --- the summarizer's request ----------------------------------------------------------------


def summarizer_request(
    summary_so_far: str,
    to_cover: Sequence[Message],
    *,
    clip_chars: tuple[int, int] = CLIP_LEVELS[0],
    context: Sequence[Message] = (),
) -> list[Message]:
    """The request that asks for one bullet per newly covered exchange, everything redacted.

    ``context`` may hold earlier messages, to name tool results whose call is not covered.
    """
    numbers = [m.seq for m in to_cover if m.seq is not None]
    first, last = (min(numbers), max(numbers)) if numbers else (0, 0)
    calls = calls_by_id([*context, *to_cover])
    transcript = "\n\n".join(
        "\n".join(_transcript_line(m, calls, clip_chars) for m in group) for group in exchanges(to_cover)
    )
    so_far = summary_so_far.strip() or "(none yet)"
    content = (
        f"Summary so far:\n{so_far}\n\n"
        f"Messages #{first} to #{last}:\n\n{transcript}\n\n"
        f'Write one bullet per exchange from #{first} to #{last}, in order, each starting with "- " '
        "and citing its message numbers like (#12), in this form:\n"
        f"{EXAMPLE}\n"
        "Write only the new bullets."
    )
    return [Message(role="system", content=SUMMARIZER_SYSTEM), Message(role="user", content=redact(content))]


def fit_summarizer_request(
    model: Model, summary_so_far: str, to_cover: Sequence[Message], *, context: Sequence[Message] = ()
) -> list[Message] | None:
    """The least clipped request that fits the model with its output; None if none does."""
    for clip in CLIP_LEVELS:
        request = summarizer_request(summary_so_far, to_cover, clip_chars=clip, context=context)
        if model.count_prompt(request) + SUMMARY_OUTPUT_TOKENS <= model.n_ctx:
            return request
    return None


def _transcript_line(message: Message, calls, clip_chars: tuple[int, int]) -> str:
    number = f"#{message.seq}" if message.seq is not None else "#?"
    if message.role == "tool":
        call = calls.get(message.tool_call_id or "")
        name = describe_call(call) if call else message.name or "tool"
        return f"{number} tool result: {name} ({len(message.content):,} characters)"
    text = redacted_clip(message.content, *clip_chars)
    if message.tool_calls:
        called = "; ".join(describe_call(c) for c in message.tool_calls)
        return f"{number} {message.role}: " + (f"{text}\n(called {called})" if text.strip() else f"called {called}")
    return f"{number} {message.role}: {text}"


def redacted_clip(text: str, head: int, tail: int) -> str:
    """``clip(redact(text), head, tail)``, without redacting the middle that clipping drops."""
    if len(text) <= head + tail + 2 * EXCERPT_MARGIN:
        return clip(redact(text), head, tail)
    omitted = len(text) - head - tail
    return f"{redact_head(text, head)}\n[… {omitted:,} characters omitted …]\n{redact_tail(text, tail)}"


def clip(text: str, head: int, tail: int) -> str:
    """``text`` with its middle replaced by "[… N characters omitted …]" when it is long."""
    marker_room = 40  # no point clipping fewer characters than the marker takes
    if len(text) <= head + tail + marker_room:
        return text
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[… {omitted:,} characters omitted …]\n{text[len(text) - tail :]}"


# --- the summary text ------------------------------------------------------------------------

_BULLET = re.compile(r"^\s*(?:[-*•+–]|\d+[.)])\s+(.*\S)\s*$")


def bullets(text: str) -> list[str]:
    """The bullet lines of a model's output, as "- …"; indented continuation lines are joined."""
    found: list[str] = []
    for line in text.splitlines():
        match = _BULLET.match(line)
        if match:
            found.append(f"- {match.group(1)}")
        elif found and line[:1].isspace() and line.strip():
            found[-1] = f"{found[-1]} {line.strip()}"
    return found


def append_bullets(existing: str, new: str) -> str:
    """``existing`` plus the bullets of ``new`` (redacted); past 2,000 characters the oldest go."""
    lines = [line for line in existing.splitlines() if line.strip()]
    lines += [redact(bullet) for bullet in bullets(new)]
    while len(lines) > 1 and len("\n".join(lines)) > SUMMARY_CAP_CHARS:
        lines.pop(0)
    text = "\n".join(lines)
    if len(text) > SUMMARY_CAP_CHARS:  # one bullet longer than the cap on its own
        text = text[: SUMMARY_CAP_CHARS - 1] + "…"
    return text


def listable(message: Message) -> bool:
    """Whether the covered material can name ``message``, or needs it to name a result: a long paste,
    a tool result but a first look's, a call that made one (``covered_material`` lists what this
    keeps; a reply reads only these of the covered messages: ``store.listable``, ``reply.read_session``).

    A first look is the daemon's search with the user's words, not something said or found by the
    model's own call: listing it would push those out (and each one listed cost a redaction every
    reply: docs/decisions.md, "The first look leaves no litter"); its call names nothing listed, and
    there is one a reply.
    """
    if message.role == "user":
        return len(message.content) > LONG_PASTE_CHARS
    if message.role == "tool":
        return not is_first_look(message)
    return any(not is_first_look(call) for call in message.tool_calls)


def covered_material(messages: Sequence[Message]) -> list[str]:
    """What a later turn may ask about: long pastes by number and first line, tool results by query."""
    calls = calls_by_id(messages)
    items: list[str] = []
    for message in messages:
        if message.seq is None or message.role not in ("user", "tool") or not listable(message):
            continue
        if message.role == "user":
            first = _first_line(message.content)
            items.append(
                f"#{message.seq} pasted by the user ({len(message.content):,} characters), beginning “{first}”"
            )
            continue
        call = calls.get(message.tool_call_id or "")
        if (call.name if call else message.name) == TOOL_NAME:
            continue  # an earlier look-back only quotes other messages
        name = describe_call(call) if call else message.name or "tool"
        items.append(f"#{message.seq} tool result: {redact(name)} ({len(message.content):,} characters)")
    return items


#: Characters of a paste ``_first_line`` reads before it splits the whole paste.
_FIRST_LINE_SCAN = 4_096


def _first_line(text: str, limit: int = 80) -> str:
    # Lines of a paste's first few KB that end within them are the paste's own: every reply
    # lists the session's pastes, so a megabyte paste is not split into lines each time.
    head = text[:_FIRST_LINE_SCAN]
    lines = head.splitlines() if len(head) == len(text) else head.splitlines()[:-1]
    line = next((line.strip() for line in lines if line.strip()), None)
    if line is None:
        line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    line = redact_head(line, limit + 1)
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def summary_block(state: StoredSummary | None, material: Sequence[str], *, lookup_guidance: bool = True) -> str:
    """The summary as the system prompt carries it; empty when there is none.

    ``lookup_guidance=False`` leaves out the line about conversation_history, for the final
    answer after a research stop, which is written without tools.
    """
    if state is None or not state.text:
        return ""
    parts = [f"{HEADING} (messages #{state.first_seq}–#{state.last_seq}, summarized; no longer shown):", state.text]
    if material:
        shown = list(material[-MATERIAL_LIMIT:])
        more = len(material) - len(shown)
        parts.append("Covered material:" + (f" (the latest {len(shown)}; {more} earlier not listed)" if more else ""))
        parts += [f"- {item}" for item in shown]
    if lookup_guidance:
        parts.append(
            "The exact words of these messages remain available: use conversation_history "
            "to search them or to read a message by its number."
        )
    return "\n".join(parts)


# --- writing it ----------------------------------------------------------------------------


async def update_summary(
    model: Model,
    *,
    state: StoredSummary | None,
    messages: Sequence[Message],
    to_cover: Sequence[Message],
    message_count: int,
    events: ReplyEvents,
    timeout: float = SUMMARY_TIMEOUT_S,
) -> SummaryOutcome:
    """One attempt to cover ``to_cover``: one model request, new bullets appended, one event.

    Cancellation propagates (nothing is written). Any other failure returns the previous
    summary with a retry point ``message_count + 6``.
    """
    so_far = state.text if state is not None and state.text else ""
    numbers = [m.seq for m in to_cover if m.seq is not None]
    if not numbers:
        return SummaryOutcome(ok=False, state=state, reason="nothing to cover")
    timeout = max(0.0, min(timeout, SUMMARY_TIMEOUT_S))
    if timeout <= 0:
        # Not the model's failure: the next reply, with time of its own, may try again.
        return SummaryOutcome(ok=False, state=state, reason="no time left in the reply's time budget")
    events.progress(PROGRESS)
    request = await in_worker(fit_summarizer_request, model, so_far, to_cover, context=messages)
    if request is None:
        return _failed(state, numbers, message_count, "the summary request does not fit the model")
    with anyio.move_on_after(timeout + _DEADLINE_GRACE_S) as guard:
        try:
            with side_requests():  # the session's state is restored after it, not replaced by it
                completion = await model.complete(
                    request,
                    (),
                    max_tokens=SUMMARY_OUTPUT_TOKENS,
                    timeout=timeout,
                    on_retry=events.progress,
                    grammar=bullet_grammar(to_cover),
                )
        except ModelError as error:
            return _failed(state, numbers, message_count, f"the model failed: {error}")
    if guard.cancelled_caught or completion.finish_reason == "deadline":
        # A partial summary would replace the summary so far with whatever was written
        # before the deadline: keep the previous one instead.
        return _failed(state, numbers, message_count, f"no summary within {timeout:g} seconds")
    written = bullets(completion.text)
    last: int | None = max(numbers)
    if completion.finish_reason == "length":
        written = written[:-1]  # the last bullet was cut off by the output limit
        # Only the exchanges whose bullets were written are covered; the rest stay in the
        # prompt (or wait for the next summary).
        last = covered_by(written, to_cover)
    if not written or last is None:
        return _failed(state, numbers, message_count, "the model wrote no complete bullet")
    text = append_bullets(so_far, "\n".join(written))
    first = state.first_seq if so_far and state is not None else min(numbers)
    new = StoredSummary(text=text, first_seq=first, last_seq=last, retry_at=None)
    events.summary(new.text, new.first_seq, new.last_seq)
    return SummaryOutcome(ok=True, state=new)


_CITED = re.compile(r"#(\d+)(?:\s*[–—-]\s*#?(\d+))?")


def covered_by(written: Sequence[str], to_cover: Sequence[Message]) -> int | None:
    """The last message number covered by the bullets ``written`` of a cut-off summary.

    The exchanges of ``to_cover`` up to the last one a bullet cites (``(#12)``, ``(#3–#4)``)
    are covered; bullets that cite no number cover one exchange each, in order. None when no
    exchange is covered.
    """
    groups = [[m.seq for m in group if m.seq is not None] for group in exchanges(to_cover)]
    cited: set[int] = set()
    for bullet in written:
        for match in _CITED.finditer(bullet):
            first = int(match.group(1))
            last = int(match.group(2) or first)
            cited.update(range(first, min(last, first + 10_000) + 1))
    if cited:
        reached = [index for index, group in enumerate(groups) if cited & set(group)]
        count = reached[-1] + 1 if reached else 0
    else:
        count = min(len(written), len(groups))
    covered = [seq for group in groups[:count] for seq in group]
    return max(covered) if covered else None


def _failed(state: StoredSummary | None, numbers: Sequence[int], message_count: int, reason: str) -> SummaryOutcome:
    retry_at = message_count + RETRY_AFTER_MESSAGES
    if state is not None:
        kept = msgspec.structs.replace(state, retry_at=retry_at)
    else:
        # No summary yet: an empty one, which covers nothing, carries the retry point.
        kept = StoredSummary(text="", first_seq=min(numbers), last_seq=min(numbers), retry_at=retry_at)
    return SummaryOutcome(ok=False, state=kept, reason=reason)
