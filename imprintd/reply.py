"""One reply, as data flows through it (docs/architecture.md, "One reply").

1. The question is stored first (committed before any model work), so nothing said is lost;
   then the session is read as far as the prompt can use it (``read_session``: after the running
   summary's range, and of that range what its covered material names), so a reply costs the
   same however long the session has grown.
2. Summary step (docs/decisions.md, "Running summary"): only when the conversation's own text no longer fits beside
   the summary, the oldest exchanges are summarized; on failure fitting's dropping stands.
3. Research (``research/loop.py``): fit, charge, generate, run tools, until an answer or a stop.
4. A stop other than an answer writes the final answer from notes, within its own
   120 s. Either way the answer's citations of this reply's numbered results become its
   sources, checked and listed after it (``research/citations.py``). What was not read or done
   (characters a section analysis left unread, a round the model failed) is named after the
   answer, with the setting that would help; a direct answer cut off by the output limit says so.
5. The reply and its tool exchanges are stored, each as the user is shown it and, where that
   differs, as the model read or wrote it (``Message.model_text``: numbered tool results, the
   answer without the daemon's notes and ``Sources:``), so the next reply's prompt repeats this
   one's; the answer with its sources and a reasoning model's thoughts (``Message.reasoning``,
   streamed through ``ReplyEvents.reasoning``, never answer text); only then is the reply
   acknowledged. An answer the model left empty (it only thought) is stored and shown as
   ``NO_ANSWER``: an empty assistant message would be sent back to the model in every later
   prompt, and some templates refuse one (Ministral 3).

``chat.research_time_budget`` bounds steps 2–3 (``research/clock.py``), from when the
workspace index is up to date, less a share kept for the final answer.

A cancelled reply, and one that failed before anything was gathered, keeps the stored
question and stores nothing else; any other stop ends in an answer from what was gathered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import msgspec

from imprintd import messages as msg
from imprintd import prompts
from imprintd.context import summary as summaries
from imprintd.context import usage
from imprintd.context.fitting import fit_prompt
from imprintd.context.history import (
    STRATEGY_LINE,
    ConversationHistoryTool,
    session_history,
)
from imprintd.context.originals import ReplySections
from imprintd.context.usage import ContextUsage
from imprintd.events import ReplyEvents
from imprintd.mcp import tools as mcp_tools
from imprintd.mcp.config import McpServerConfig
from imprintd.messages import Message, SourceRef, Style, ToolSpec
from imprintd.models.base import Model, learn_window, output_allowance
from imprintd.offload import in_worker
from imprintd.research import citations
from imprintd.research import clock as clocks
from imprintd.research.answer import coverage_note, cut_off_note, final_answer
from imprintd.research.clock import ReplyClock
from imprintd.research.loop import ReplyScope, Stop, research
from imprintd.session_view import SessionView
from imprintd.settings import ChatSettings
from imprintd.store import ConversationStore, SessionInfo, StoredSummary
from imprintd.tools.base import Tool
from imprintd.tools.workspace import WORKSPACE_SPECS

#: Said after an answer the repetition guard cut (``models/repetition.py``).
REPEATED_ITSELF = "(The model started repeating itself here, so the answer was cut off.)"
#: The answer when the model wrote none (a reasoning model that only thought): never stored empty.
NO_ANSWER = "(The model wrote no answer.)"
#: The same, when it thought first: its thinking is shown folded above this.
NO_ANSWER_AFTER_THINKING = "(The model thought it over but wrote no answer.)"


class ReplyRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A question to answer, as a front door hands it to ``Chat.reply``."""

    text: str
    session_id: str | None = None
    #: With no ``session_id``: the id the new session is stored under (default a random one).
    #: ACP names a session at ``session/new`` and stores it with its first question.
    new_session_id: str | None = None
    style: Style = "written"
    persist: bool = True
    workspace: str | None = None
    #: MCP servers this request may use beside those of ``chat.mcp_servers`` (ACP passes a
    #: session's ``mcpServers`` here).
    mcp_servers: tuple[McpServerConfig, ...] = ()


async def _no_mcp_tools(events: ReplyEvents, time_left: Callable[[], float]) -> list[mcp_tools.McpTool]:
    return []


@dataclass(frozen=True, kw_only=True)
class ReplyContext:
    """What one reply works with, prepared by ``Chat.reply``; nothing here reaches back into it."""

    store: ConversationStore
    session: SessionInfo
    reply_id: str
    request: ReplyRequest
    settings: ChatSettings
    #: The question when it was stored with its new session (``start_session``); else ``run_reply`` stores it.
    question: Message | None = None
    #: The chat model, loaded on first use (after the question is stored: a model that cannot
    #: be loaded fails the reply, not the question).
    load_model: Callable[[], Model]
    #: Search and read tools over the request's workspace, its index brought up to date.
    workspace_tools: Callable[[ReplyEvents], Awaitable[list[Tool]]]
    #: This reply's analyzed originals (``read_chat_section``).
    sections: ReplySections
    #: The tools of the MCP servers of the settings and the request, those servers started
    #: (``mcp/servers.py``); what the model is offered of them is fitted here.
    mcp_tools: Callable[[ReplyEvents, Callable[[], float]], Awaitable[list[mcp_tools.McpTool]]] = _no_mcp_tools


class ReplyOutcome(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    reply_id: str
    text: str
    sources: tuple[SourceRef, ...] = ()
    stop_reason: Stop = "answer"


async def run_reply(context: ReplyContext, events: ReplyEvents) -> ReplyOutcome:
    store, info, reply_id, request = context.store, context.session, context.reply_id, context.request
    question = context.question
    if question is None:
        # Not waiting for the disk: the answer's commit will (``ConversationStore``).
        question = await in_worker(store.append, info.id, msg.user(request.text), wait_for_disk=False)
    events.begin(info.id, reply_id)
    model = context.load_model()
    settings = context.settings
    # A served model's window is asked before anything is fitted to it (once per model).
    await learn_window(model, events)
    state, earlier, seqs = await in_worker(read_session, store, info.id, question)
    view = await in_worker(store.view, info.id)

    workspace_tools = await context.workspace_tools(events)
    clock = ReplyClock(settings.research_time_budget)  # indexing is not the reply's to bound
    # Offered from a session's first reply on, so the system prompt and tools never change
    # between its replies and each reply's saved state serves the next (docs/decisions.md,
    # "A prompt that stays put").
    index = await in_worker(store.history_index, info.id)
    # Built on the model's first call only, from what the session's last build had not seen.
    history_tool = ConversationHistoryTool(lambda: session_history(store.view(info.id), question.seq or 0, index))
    servers_tools = await context.mcp_tools(events, clock.research_left)
    # All their schemas, or the compact pair when those would take too much of the window.
    offered_mcp = await in_worker(
        lambda: mcp_tools.fitted(servers_tools, n_ctx=model.n_ctx, count_prompt=model.count_prompt)
    )
    tools: list[Tool] = [*workspace_tools, history_tool, *offered_mcp]
    specs = [tool.spec for tool in tools]
    tool_lines = _tool_lines(workspace=bool(workspace_tools))

    summary = await _summary_step(
        model,
        store,
        info,
        state,
        earlier,
        question,
        request.style,
        tool_lines,
        specs,
        output_allowance(model, settings.max_tokens),
        events,
        clock,
    )
    system, history, layout = compose_prompt(request.style, tool_lines, summary, earlier, seqs=seqs)

    scope = ReplyScope(
        model=model,
        events=events,
        sections=context.sections,
        max_tokens=settings.max_tokens,
        analysis_workers=settings.analysis_workers,
        token_budget=settings.research_token_budget,
        time_budget=settings.research_time_budget,
        clock=clock,
        analysis_context=settings.analysis_context,
        layout=layout,
        style=request.style,
        first_look=settings.first_look,
        view=view,
    )
    outcome = await research(scope, system=system, history=history, question=question, tools=tools)
    # What a turn may write now: research may have learned the server's window on the way.
    max_tokens = output_allowance(model, settings.max_tokens)

    sources: tuple[SourceRef, ...] = ()
    reasoning = ""
    coverage = "\n".join(part for part in (outcome.failure, coverage_note(outcome.analyses)) if part)
    if outcome.answer is not None:
        passages = outcome.numbering.by_number()
        text = citations.plain(outcome.answer.text, passages, request.style)  # as it streamed
        written = outcome.answer.text  # as the model wrote it, citations and all
        reasoning = outcome.answer.reasoning
        thought_to_limit = not text.strip() and bool(reasoning) and outcome.stop == "length"
        if not text.strip():
            text = (
                thought_to_limit_note(max_tokens)
                if thought_to_limit
                else NO_ANSWER_AFTER_THINKING
                if reasoning
                else NO_ANSWER
            )
            written = text  # the placeholder stands in for the empty answer in later prompts too
            events.text(text)
        if outcome.stop == "length" and not thought_to_limit:
            coverage = "\n".join(part for part in (cut_off_note(max_tokens), coverage) if part)
        elif outcome.stop == "repetition":
            # What streamed went on into the loop; the result's text is the answer to show.
            coverage = "\n".join(part for part in (REPEATED_ITSELF, coverage) if part)
        if coverage:
            events.text("\n\n" + coverage)
            text += "\n\n" + coverage
        sources = tuple(citations.sources(outcome.answer.text, passages, passages.values()))
        if sources and request.style != "spoken":
            block = "\n\n" + citations.sources_block(sources)
            events.text(block)
            text += block
    else:
        final = await final_answer(
            model,
            events,
            system_prompt=prompts.system_prompt(style=request.style),
            summary_block=_summary_block(summary, earlier, lookup_guidance=False),
            earlier=history,
            question=_final_question(outcome),
            steps=outcome.steps,
            style=request.style,
            max_tokens=max_tokens,
            timeout=clocks.FINAL_TIMEOUT_S,  # its own deadline, whatever research left
            coverage=coverage,
            numbering=outcome.numbering,
            question_analysis=outcome.question_analysis,
            question_seq=question.seq,
        )
        text, sources, reasoning, written = final.text, final.sources, final.reasoning, final.model_text
    # The reply, all or nothing; the answer keeps its sources and what the model thought. Later
    # prompts render what the model wrote, without the daemon's notes and Sources block, so
    # they repeat this reply's last prompt and answer token for token (``Message.model_text``).
    answer = msgspec.structs.replace(
        msg.assistant(text, sources=sources), reasoning=reasoning, model_text=written if written != text else None
    )
    await in_worker(store.extend, info.id, [*outcome.exchange, answer])
    return ReplyOutcome(session_id=info.id, reply_id=reply_id, text=text, sources=sources, stop_reason=outcome.stop)


def thought_to_limit_note(max_tokens: int) -> str:
    """The answer of a model that spent its whole output allowance thinking."""
    return (
        f"(The model spent the output limit of {max_tokens:,} tokens thinking and wrote no answer; raising "
        'chat.max_tokens, or setting chat.reasoning to "off", would leave it room to answer.)'
    )


def next_question_usage(
    model: Model,
    *,
    stored: Sequence[Message],
    summary: StoredSummary | None,
    workspace: bool,
    style: Style = "written",
    max_tokens: int,
    mcp_specs: Sequence[ToolSpec] = (),
    view: SessionView | None = None,
) -> ContextUsage:
    """What the next question's first round would get, without asking one (it counts 0 tokens).

    Composed as ``run_reply`` composes a round (the tools it would offer, the summary as it stands,
    fitting), before any summary step the question might bring about. ``mcp_specs``: what the
    model would be offered of the MCP servers' tools (``mcp.tools.fitted``); ``view``: the
    session's, which ``stored`` is read from (fitting keeps what it derives there). Counts: call it
    from a worker thread.
    """
    specs = [*(WORKSPACE_SPECS if workspace else ()), ConversationHistoryTool.spec, *mcp_specs]
    tool_lines = _tool_lines(workspace=workspace)
    system, history, layout = compose_prompt(style, tool_lines, summary, stored)
    max_tokens = output_allowance(model, max_tokens)
    fitted = fit_prompt(
        model, system=system, history=history, current=[], tools=specs, max_tokens=max_tokens, view=view
    )
    return usage.measure(
        model, fitted.messages, current=0, tools=specs, max_tokens=max_tokens, layout=layout, used=fitted.prompt_tokens
    )


def first_round(question: str, *, style: Style = "written") -> tuple[list[Message], list[ToolSpec]]:
    """The messages and tools of a new session's first round without a workspace, as ``run_reply``
    composes them (the system prompt and its tool lines, the question, ``conversation_history``
    offered): what ``bench/bench_daemon.py`` renders to ask llama.cpp directly what the daemon asks."""
    system, _, _ = compose_prompt(style, _tool_lines(workspace=False), None, [])
    return [system, msg.user(question)], [ConversationHistoryTool.spec]


def read_session(
    store: ConversationStore, session_id: str, question: Message
) -> tuple[StoredSummary | None, list[Message], range]:
    """What a reply's prompt can use of its session, read once: the running summary, the earlier
    messages ``compose_prompt`` and the summary step need, and every earlier message's number.

    The messages are those after the summary's range, and of that range only what its covered
    material can name (``store.listable``): the summary stands for the rest, so the reply reads
    as much each time however long the session grows, and its prompt is the one the whole
    session would give. Blocking: call it from a worker thread.
    """
    state = store.summary(session_id)
    covered = summaries.covered_through(state)
    listed = store.listable(session_id, 0, covered, rule=summaries.listable) if covered else []
    after = [m for m in store.messages(session_id, after=covered) if (m.seq or 0) < (question.seq or 0)]
    oldest = store.oldest_seq(session_id) or 1
    return state, [*listed, *after], range(oldest, question.seq or oldest)


def compose_prompt(
    style: Style,
    tool_lines: tuple[str, ...],
    summary: StoredSummary | None,
    earlier: Sequence[Message],
    *,
    seqs: Sequence[int] | None = None,
) -> tuple[Message, list[Message], usage.Layout]:
    """The system message, the history research is given (what the summary does not cover), and
    where they came from.

    ``earlier``: every message before the question, or what ``read_session`` reads of them, then
    with ``seqs``, the number of every message before the question.
    """
    covered = summary.last_seq if summary and summary.text else 0
    block = _summary_block(summary, earlier)
    system = msg.system(prompts.system_prompt(style=style, tool_lines=tool_lines, summary_block=block))
    history = [m for m in earlier if (m.seq or 0) > covered]
    layout = usage.Layout(
        system_base=msg.system(prompts.system_prompt(style=style, tool_lines=tool_lines)),
        earlier=seqs if seqs is not None else tuple(m.seq for m in earlier if m.seq is not None),
        summarized=(summary.first_seq, summary.last_seq) if summary and summary.text else None,
    )
    return system, history, layout


def _tool_lines(*, workspace: bool) -> tuple[str, ...]:
    return ((prompts.TOOL_STRATEGY,) if workspace else ()) + (STRATEGY_LINE, prompts.CITATIONS)


async def _summary_step(
    model: Model,
    store: ConversationStore,
    info: SessionInfo,
    state: StoredSummary | None,
    earlier: Sequence[Message],
    question: Message,
    style: Style,
    tool_lines: tuple[str, ...],
    specs,
    max_tokens: int,
    events: ReplyEvents,
    clock: ReplyClock,
) -> StoredSummary | None:
    """Summarize the oldest exchanges when the conversation's text no longer fits (docs/decisions.md, "Running summary").

    Within its own 120 s and the time research has left (the reply's time budget). ``earlier``
    as ``read_session`` reads it: what the summary covers matters only for its material.
    """
    # Messages added so far is the question's number: a persist-false session keeps only its
    # newest 400 messages, so their count would stop growing and the retry point never come.
    count = question.seq or len(earlier) + 1
    if not summaries.should_attempt(state, count):
        return state
    block = _summary_block(state, earlier)
    system = msg.system(prompts.system_prompt(style=style, tool_lines=tool_lines, summary_block=block))
    to_cover = await in_worker(
        lambda: summaries.plan_coverage(
            model, system=system, summary=state, messages=earlier, question=question, tools=specs, max_tokens=max_tokens
        )
    )
    if not to_cover:
        return state
    timeout = min(summaries.SUMMARY_TIMEOUT_S, clock.research_left())
    outcome = await summaries.update_summary(
        model, state=state, messages=earlier, to_cover=to_cover, message_count=count, events=events, timeout=timeout
    )
    if outcome.state is not None:
        await in_worker(store.save_summary, info.id, outcome.state)
    return outcome.state


def _summary_block(state: StoredSummary | None, earlier: Sequence[Message], *, lookup_guidance: bool = True) -> str:
    if state is None or not state.text:
        return ""
    covered = [m for m in earlier if m.seq is not None and state.first_seq <= m.seq <= state.last_seq]
    return summaries.summary_block(state, summaries.covered_material(covered), lookup_guidance=lookup_guidance)


def _final_question(outcome) -> str:
    """The question for the tools-free final turn: an analyzed one without its reread guidance,
    and without its workers' notes, which are among the numbered notes."""
    if outcome.question_analysis is not None:
        return outcome.question_analysis.coordinator_text(reread=False, notes=False)
    return outcome.question.content
