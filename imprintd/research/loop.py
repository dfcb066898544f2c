"""The research loop: rounds of fit, charge, generate and run tools, until an answer or a stop.

See docs/decisions.md, "When research stops", and docs/architecture.md, "One reply".

Each coordinator round fits the prompt ("Fitting"), checks and charges the research token
budget ("Research budget"), lets the model write or call tools, and runs the calls in the reply's
own scope. A current tool result is passed whole when it fits and analyzed in sections
when it does not ("Section analysis"); the user's own oversized message is analyzed the same way. Each
place a result shows opens with its number, given once per reply (``research/citations.py``),
and the model's text streams with citations of numbers no result has removed.
Research stops on an answer, the token budget, the time budget, two rounds without new
evidence, a full context, or a model failure after something was gathered (a round's error
after the provider's retries, a section worker that fails or runs past its 120 s); every
stop but an answer is followed by the final answer written from notes
(``research/answer.py``, "Final answer from notes"), which says what was not read or done. A reply fails
(``ReplyFailed``, or the model's error) only when nothing was gathered to answer from.

The time budget (``research/clock.py``) bounds the whole reply: rounds and section workers
get only the time research has left, keeping the final answer's share. An analysis that a
budget or a failing worker cuts short keeps the notes of the sections read
(``sections.analyze``) and research stops on it; the final answer is written from those
notes and says which characters were not read. Every request is charged once it holds the
inference lock (``budget.charged_complete``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

import msgspec

from imprintd import messages as msg
from imprintd.context import sections as sec
from imprintd.context import usage
from imprintd.context.fitting import Fitted, fit_prompt
from imprintd.context.originals import ReadChatSectionTool, ReplySections
from imprintd.events import ReplyEvents, StepState, ToolStep
from imprintd.messages import Message, Style, ToolCall
from imprintd.models.base import Completion, ContextExceeded, Model, ModelError, output_allowance, tell_window
from imprintd.offload import in_worker
from imprintd.research import first_look, preview
from imprintd.research.budget import BudgetExhausted, ResearchBudget, charged_complete
from imprintd.research.citations import CitationFilter, Numbering
from imprintd.research.clock import ReplyClock
from imprintd.research.notes import ToolStepRecord
from imprintd.session_view import SessionView
from imprintd.tools.base import CALL_STEP, HintedTool, Tool, ToolError, ToolHints, ToolResult

Stop = Literal[
    "answer", "length", "repetition", "token_budget", "time_budget", "no_new_evidence", "context_full", "model_error"
]

#: Rounds in a row that add no new hit or read before research stops (docs/decisions.md, "When research stops").
NO_NEW_EVIDENCE_PATIENCE = 2
#: What the model is told before the result of a call identical to an earlier one of this reply.
REPEATED = "(Same call as before; its result again.)"


class ReplyFailed(Exception):
    """The reply cannot be written and nothing was gathered to write it from (an oversized
    message with analysis off, a model that fails before any evidence); says why."""


class Research(msgspec.Struct, kw_only=True):
    """How research ended and what it did."""

    stop: Stop
    answer: Completion | None = None
    #: Every tool call of this reply with its result (None: not run), for notes.
    steps: list[ToolStepRecord] = msgspec.field(default_factory=list)
    #: The assistant tool calls and full tool results, in order, to store with the reply.
    exchange: list[Message] = msgspec.field(default_factory=list)
    #: The question as the model saw it (an analyzed message becomes its notes).
    question: Message | None = None
    #: The analysis that stands in for an oversized question, if there was one.
    question_analysis: sec.Analysis | None = None
    #: Every section analysis of this reply, in order (complete or cut short).
    analyses: list[sec.Analysis] = msgspec.field(default_factory=list)
    #: The reply's token budget, with its ledger of every request reserved and settled.
    budget: ResearchBudget | None = None
    #: What a model failure left undone, in words for the answer ("" when none stopped research).
    failure: str = ""
    #: The numbers of every result the coordinator saw (``research/citations.py``).
    numbering: Numbering = msgspec.field(default_factory=Numbering)


class ReplyScope(msgspec.Struct, kw_only=True):
    """What one reply works with; tools and sections belong to this reply alone."""

    model: Model
    events: ReplyEvents
    sections: ReplySections
    max_tokens: int
    analysis_workers: int
    token_budget: int
    time_budget: float
    #: The reply's clock, started with the reply; None: research starts one of ``time_budget``.
    clock: ReplyClock | None = None
    #: ``chat.analysis_context``: the most tokens of one section worker's context.
    analysis_context: int = sec.WORKER_CONTEXT_TOKENS
    #: Where the prompt's messages come from, for ``ReplyEvents.context_usage``; None: the
    #: system message has no summary and the history is every earlier message.
    layout: usage.Layout | None = None
    #: A spoken answer is read aloud: citations are kept out of its streamed text.
    style: Style = "written"
    #: ``chat.first_look``: search the workspace with the question before the first round.
    first_look: bool = False
    #: The session's view, whose stored messages the history is: fitting keeps what it derives
    #: from them there. None: each fit derives it.
    view: SessionView | None = None


class _Cut(Exception):
    """A budget ran out while analyzing: research stops on it (the notes read are kept)."""

    def __init__(self, stop: Stop) -> None:
        super().__init__(stop)
        self.stop = stop


async def research(
    scope: ReplyScope, *, system: Message, history: Sequence[Message], question: Message, tools: Sequence[Tool]
) -> Research:
    loop = _Loop(scope, system, list(history), question, list(tools))
    return await loop.run()


class _Loop:
    def __init__(
        self, scope: ReplyScope, system: Message, history: list[Message], question: Message, tools: list[Tool]
    ) -> None:
        self.scope, self.system, self.history = scope, system, history
        self.tools = {tool.spec.name: tool for tool in tools}
        self.current: list[Message] = [question]
        #: What the user asked, as written: an oversized question is replaced in ``current`` by
        #: its analysis, but workers on a tool result still need the question itself.
        self.asked = question.content
        self.budget = ResearchBudget(scope.token_budget)
        self.outcome = Research(stop="answer", question=question, budget=self.budget)
        self.numbering = self.outcome.numbering
        self.clock = scope.clock or ReplyClock(scope.time_budget)
        self.layout = scope.layout or usage.Layout(
            system_base=system, earlier=tuple(m.seq for m in history if m.seq is not None)
        )
        self.seen: set[str] = set()
        #: Each call run in this reply, by its name and arguments: its result, and the text
        #: the model was shown for it (whole, analyzed or clipped), for an identical call.
        self.results: dict[str, ToolResult] = {}
        self.shown: dict[str, str] = {}
        self.analyzed: dict[str, sec.Analysis] = {}
        #: A budget ran out while a tool result was being analyzed: research stops on it.
        self.cut: Stop | None = None
        #: Tool steps reported so far: each step's id is its number in the reply, because
        #: models reuse call ids across rounds ("call_0" every round) and clients key steps by id.
        self.step_count = 0
        #: False once the reread tool's schema alone would have filled the context.
        self.reread = True

    @property
    def model(self) -> Model:
        return self.scope.model

    @property
    def max_tokens(self) -> int:
        """A turn's output allowance: ``chat.max_tokens``, less when the server's window is small
        (``output_allowance``; the window may be learned in the middle of the reply)."""
        return output_allowance(self.model, self.scope.max_tokens)

    def offered(self) -> list[Tool]:
        tools = list(self.tools.values())
        if self._may_reread():
            tools.append(ReadChatSectionTool(self.scope.sections))
        return tools

    def _may_reread(self) -> bool:
        return self.reread and bool(self.scope.sections.chars) and "read_chat_section" not in self.tools

    async def run(self) -> Research:
        await self._first_look()
        stale_rounds = 0
        rounds = 0
        #: The round was refused as too long for the server's window (or cut to fit it): the
        #: model has learned the window, and the round is fitted again and asked once more.
        refitted = False
        while True:
            try:
                fitted = await self._fit()
            except _Cut as cut:  # a budget or a failing worker ended the oversized question's analysis
                return self._stop(cut.stop)
            if fitted is None:
                return self._stop("context_full")
            tools = self.offered()
            specs = [tool.spec for tool in tools]
            left = self.clock.research_left()
            if left <= 0:
                return self._stop("time_budget")
            rounds += 1
            self.scope.events.context_usage(await self._usage(fitted, specs))
            # A number that names no result of this reply never reaches the client.
            stream = CitationFilter(self._citable, self.scope.events.text)
            try:
                completion = await charged_complete(
                    self.budget,
                    self.model,
                    fitted.messages,
                    specs,
                    max_tokens=self.max_tokens,
                    timeout=left,
                    on_text=stream,
                    on_retry=self.scope.events.progress,
                    # Shown folded, never as the answer; charged with the round's output.
                    on_reasoning=self.scope.events.reasoning,
                )
            except BudgetExhausted:
                return self._stop("token_budget")
            except ModelError as error:
                if isinstance(error, ContextExceeded) and not refitted:
                    refitted = True
                    rounds -= 1  # the same round, fitted again
                    stream.close()
                    self.scope.events.text_was_preamble()  # whatever streamed was not the answer
                    tell_window(self.model, self.scope.events)
                    continue
                if not self._gathered():
                    raise
                stream.close()
                self.scope.events.text_was_preamble()  # whatever streamed was not the answer
                done = {1: "the question's analysis", 2: "round 1"}.get(rounds, f"rounds 1–{rounds - 1}")
                self.outcome.failure = (
                    f"Research stopped early: the model failed in round {rounds} ({error}), so this answer is "
                    f"written from what {done} found."
                )
                return self._stop("model_error")
            finally:
                stream.close()
            refitted = False
            if completion.finish_reason == "deadline":
                self.scope.events.text_was_preamble()  # the final answer from notes follows
                return self._stop("time_budget")
            if not completion.tool_calls and not completion.tool_call_error:
                self.outcome.answer = completion
                finish = completion.finish_reason
                return self._stop(
                    "length" if finish == "length" else "repetition" if finish == "repetition" else "answer"
                )
            self.scope.events.text_was_preamble()  # the round goes on to its tool calls
            found_new = await self._run_calls(completion, {tool.spec.name: tool for tool in tools})
            if self.cut is not None:
                return self._stop(self.cut)
            stale_rounds = 0 if found_new else stale_rounds + 1
            if stale_rounds >= NO_NEW_EVIDENCE_PATIENCE:
                return self._stop("no_new_evidence")

    def _gathered(self) -> bool:
        """Has this reply anything to write an answer from: a result read, or notes of an analysis?"""
        question = self.outcome.question_analysis
        if question is not None and question.workers:
            return True
        return any(
            record.result is not None
            and record.result.ok
            # An empty read or search ("No results for …") saw nothing, whatever its text says.
            and bool(
                record.analysis.workers
                if record.analysis is not None
                else record.result.hits or record.result.sources or record.result.evidence
            )
            for record in self.outcome.steps
        )

    def _citable(self, number: int) -> bool:
        return self.scope.style != "spoken" and self.numbering.get(number) is not None

    def _stop(self, stop: Stop) -> Research:
        self.outcome.stop = stop
        self.outcome.question = self.current[0]
        return self.outcome

    # -- fitting ----------------------------------------------------------------
    async def _fit_offered(self) -> Fitted:
        # Counting can tokenize a long stored session the first time (and load the model), so
        # it runs in a worker thread: other requests keep being answered meanwhile.
        fitted = await self._fit_with([tool.spec for tool in self.offered()])
        if not fitted.fits and self._may_reread():
            # The reread tool's schema (a few hundred tokens) must not alone fill the context:
            # research goes on from the notes without it.
            self.reread = False
            fitted = await self._fit_with([tool.spec for tool in self.offered()])
        return fitted

    async def _fit_with(self, specs: list) -> Fitted:
        return await in_worker(
            lambda: fit_prompt(
                self.model,
                system=self.system,
                history=self.history,
                current=self.current,
                tools=specs,
                max_tokens=self.max_tokens,
                view=self.scope.view,
            )
        )

    async def _usage(self, fitted: Fitted, specs) -> usage.ContextUsage:
        """What fills the context of the round about to be sent: ``fitted``, counted by the model."""
        current = len(self.current)
        return await in_worker(
            lambda: usage.measure(
                self.model,
                fitted.messages,
                current=current,
                tools=specs,
                max_tokens=self.max_tokens,
                layout=self.layout,
                used=fitted.prompt_tokens,
            )
        )

    async def _fit(self) -> Fitted | None:
        """Fit this round's prompt; analyze an oversized question once; None when full.

        Raises _Cut when a budget ends the question's analysis before its end.
        """
        fitted = await self._fit_offered()
        if fitted.fits:
            return fitted
        if len(self.current) > 1:
            return None  # research filled the context: answer from notes
        question = self.current[0]
        if self.scope.analysis_workers <= 0:
            raise ReplyFailed(
                f"The message is too long for the model's context ({fitted.prompt_tokens} tokens with "
                f"{self.max_tokens} reserved for the answer, in {self.model.n_ctx}), and section "
                "analysis is off (chat.analysis_workers = 0)."
            )
        try:
            window = self.model.n_ctx
            analysis = await self._analyze(question.content, sec.USER_KIND, question.content)
            if analysis.cut in sec.FAILURE_CUTS and not analysis.workers and self.model.n_ctx < window:
                # The workers' requests taught the model a smaller window (a server's refusal or
                # cut prompt): sections planned for the old one are planned again, once.
                self.outcome.analyses.remove(analysis)
                analysis = await self._analyze(question.content, sec.USER_KIND, question.content)
        except sec.AnalysisError as error:
            raise ReplyFailed(str(error)) from None
        if analysis.cut in sec.FAILURE_CUTS and not analysis.workers:
            # Nothing of the message was read and nothing else gathered yet: the one case that fails.
            raise ReplyFailed(analysis.unread_sentence())
        numbers = [passage.number for passage in self.numbering.analysis(analysis, message=question.seq)]
        self.current[0] = msg.user(analysis.coordinator_text(numbers=numbers), seq=question.seq)
        self.outcome.question_analysis = analysis
        stop = _cut_stop(analysis.cut)
        if stop is not None:
            raise _Cut(stop)
        fitted = await self._fit_offered()  # the offer now includes read_chat_section, if it fits
        if not self.reread:
            self.current[0] = msg.user(analysis.coordinator_text(reread=False, numbers=numbers), seq=question.seq)
            fitted = await self._fit_offered()
        return fitted if fitted.fits else None

    async def _analyze(self, text: str, kind: str, question: str) -> sec.Analysis:
        """An analysis, complete or cut short; AnalysisError when the source cannot be analyzed at all."""
        analysis = await sec.analyze(
            self.model,
            text,
            kind=kind,
            question=question,
            workers=self.scope.analysis_workers,
            events=self.scope.events,
            sections=self.scope.sections,
            budget=self.budget,
            time_left=self.clock.research_left,
            worker_context=self.scope.analysis_context,
        )
        self.outcome.analyses.append(analysis)
        return analysis

    # -- tools ------------------------------------------------------------------
    async def _first_look(self) -> None:
        """Search the workspace with the question before the first round (``first_look.py``).

        Skipped with the setting off, without a workspace, for a question with nothing to
        search for, for a question too long to leave the first look its share (it is the
        subject itself, and section analysis reads it), when the look finds nothing, and when
        it does not fit whole beside the system prompt, the question and the tools: the look
        is shown whole or leaves nothing (no step, no numbers, nothing stored), so what is
        stored is what the model read, and no section worker reads the daemon's own look.
        """
        search = self.tools.get("search")
        if not self.scope.first_look or search is None:
            return
        question = self.current[0]
        share = first_look.token_share(self.model.n_ctx, self.max_tokens)
        if len(question.content) > share * 8 or await in_worker(self.model.count_message, question) > share:
            return
        terms = first_look.query(question.content, self.history)
        if terms is None:
            return
        looking = first_look.FirstLookSearch(search, self.model.count_text, share, question.content)
        call = ToolCall(id=first_look.new_call_id(), name="search", arguments={"query": terms})
        looked = await looking.look(call.arguments)
        if not looked.hits:
            return  # found nothing: nothing to show, store or search later (docs/decisions.md)
        if not await in_worker(self._fits_whole, call, looked):
            return  # a look the model would get cut, or not at all, is not run (docs/decisions.md)
        await self._run_calls(Completion(text="", tool_calls=(call,)), {"search": looking})

    def _fits_whole(self, call: ToolCall, result: ToolResult) -> bool:
        """Would ``result`` be shown as it is (numbered; clipped with analysis off), and the round fit?

        Both of the loop's tests: ``_for_prompt``'s (the result beside the prompt so far) and
        fitting's (the whole round with every earlier message dropped), so neither analyzes nor
        drops what this says fits.
        """
        shown = self.numbering.preview().result(call, result)[0]
        if self.scope.analysis_workers <= 0:
            shown = sec.clip_tool_result(shown)
        specs = [tool.spec for tool in self.offered()]
        asked = [self.system, *self.current, msg.assistant("", tool_calls=(call,))]
        answer_room = self.model.n_ctx - self.max_tokens
        shown_message = msg.tool_result(call, shown)
        beside = self.model.count_prompt(asked, specs) + self.model.count_message(shown_message)
        return beside <= answer_room and self.model.count_prompt([*asked, shown_message], specs) <= answer_room

    async def _run_calls(self, completion: Completion, tools: dict[str, Tool]) -> bool:
        """Run this round's calls; True when any of them brought evidence not seen before."""
        call_message = msg.assistant(completion.text, tool_calls=completion.tool_calls)
        if completion.reasoning:  # kept with the turn it led to; never rendered back, never a note
            call_message = msgspec.structs.replace(call_message, reasoning=completion.reasoning)
        self.current.append(call_message)
        if completion.tool_calls:
            # Only a turn that ran tools is a tool exchange to store: a turn whose only call
            # was malformed would be stored as a bare assistant message before the answer.
            self.outcome.exchange.append(call_message)
        if completion.tool_call_error:
            # The malformed call was not run; the model is told what was wrong (not stored).
            self.current.append(
                msg.user(
                    f"Your tool call could not be run: {completion.tool_call_error} "
                    "Call a tool with valid JSON arguments, or answer the question."
                )
            )
        found_new = False
        for call in completion.tool_calls:
            key = _call_key(call)
            repeated = key in self.results
            result = self.results[key] if repeated else await self._run(call, tools, key)
            new = set(result.evidence) - self.seen
            self.seen |= new
            found_new = found_new or bool(new)
            if repeated:
                # Answered from the earlier call: the model is shown what it was shown then
                # (an oversized result is not analyzed a second time).
                # Notes see the result itself, so a repeat merges with the first into one note.
                self.outcome.steps.append(ToolStepRecord(call=call, result=result, analysis=self.analyzed.get(key)))
                self._shown(call, f"{REPEATED}\n{result.text}", f"{REPEATED}\n{self.shown[key]}")
                continue
            shown, analysis = await self._for_prompt(call, result)
            self.outcome.steps.append(ToolStepRecord(call=call, result=result, analysis=analysis))
            if key in self.results:
                self.shown[key] = shown
                if analysis is not None:
                    self.analyzed[key] = analysis
            self._shown(call, result.text, shown)
        return found_new

    def _shown(self, call: ToolCall, text: str, shown: str) -> None:
        """A result as the model is shown it this round, and as it is stored: the user keeps the
        tool's own ``text``; ``model_text`` keeps what the model read (numbered, analyzed or
        clipped), so the next reply's prompt repeats this one token for token and the model's
        saved state serves it (docs/decisions.md, "A prompt that stays put")."""
        self.current.append(msg.tool_result(call, shown))
        stored = msg.tool_result(call, text)
        if msg.is_first_look(call):
            # The daemon's look, not a tool the user asked about: stored once, as read (numbered,
            # as the answer cites it), so the session does not hold each look twice.
            stored = msg.tool_result(call, shown)
        elif shown != text:
            stored = msgspec.structs.replace(stored, model_text=shown)
        self.outcome.exchange.append(stored)

    async def _run(self, call: ToolCall, tools: dict[str, Tool], key: str) -> ToolResult:
        """Run ``call``; its result is kept under ``key`` for an identical call (unknown tools are not)."""
        tool = tools.get(call.name)
        events = self.scope.events
        self.step_count += 1
        step_id = f"step-{self.step_count}"
        if tool is None:
            names = ", ".join(tools) or "none"
            result = ToolResult(ok=False, text=f"There is no tool named {call.name!r}; the tools are: {names}.")
            events.tool_step(
                ToolStep(
                    call_id=step_id,
                    tool=call.name,
                    title=f"Calling {call.name}",
                    state="failed",
                    detail=result.text,
                    arguments=dict(call.arguments),
                )
            )
            return result
        title = _title(tool, call)
        hints = _hints(tool, call)
        events.tool_step(
            ToolStep(
                call_id=step_id,
                tool=call.name,
                title=title,
                state="started",
                arguments=dict(call.arguments),
                hints=hints,
            )
        )
        step = CALL_STEP.set(step_id)
        try:
            result = await tool.run(call.arguments)
        except ToolError as error:
            result = ToolResult(ok=False, text=f"Error: {error}")
        finally:
            CALL_STEP.reset(step)
        state: StepState = "finished" if result.ok else "failed"
        detail = "" if result.ok else result.text
        # What the client may show of a finished step's result; the result itself is stored.
        shown = await in_worker(preview.preview, result.content) if result.ok else ""
        events.tool_step(
            ToolStep(
                call_id=step_id,
                tool=call.name,
                title=title,
                state=state,
                detail=detail,
                arguments=dict(call.arguments),
                hints=hints,
                preview=shown,
                resources=preview.links(result.resources) if result.ok else (),
            )
        )
        self.results[key] = result
        return result

    async def _for_prompt(self, call: ToolCall, result: ToolResult) -> tuple[str, sec.Analysis | None]:
        """The result whole when it fits, analyzed in sections when not (clipped with analysis off).

        Returns the text the model is shown and the analysis that wrote it, if any. An analysis
        a budget cut short ends research after this round (``self.cut``); its notes are kept.
        """
        if call.name == "read_chat_section" or not result.ok:
            # Rereads are bounded already; analyzing them again would loop.
            return self.numbering.result(call, result)[0], None
        numbered = self.numbering.preview().result(call, result)[0]
        specs = [tool.spec for tool in self.offered()]
        base = await in_worker(self.model.count_prompt, [self.system, *self.current], specs) + self.max_tokens

        def fits(text: str) -> bool:
            return base + self.model.count_message(msg.tool_result(call, text)) <= self.model.n_ctx

        prepared = await in_worker(sec.prepare_tool_result, numbered, workers=self.scope.analysis_workers, fits=fits)
        if prepared is not None:
            self.numbering.result(call, result)  # shown: its numbers are given now
            return prepared, None
        if len(numbered) <= sec.header_chars(len(result.text), sec.tool_kind(call.name)):
            # Analysis would show more than the result itself: pass it whole (the next round's
            # fit then says whether research filled the context).
            self.numbering.result(call, result)
            return numbered, None
        try:
            analysis = await self._analyze(result.text, sec.tool_kind(call.name), self.asked)
        except sec.AnalysisError as error:
            # Too big to analyze at all: the model is told so, and research goes on without it.
            return f"(This result could not be shown: {error}.)", None
        stop = _cut_stop(analysis.cut)
        if stop is not None:
            self.cut = stop  # research ends after this round; the final answer reads the notes
        if analysis.cut in sec.FAILURE_CUTS and not self._gathered():
            raise ReplyFailed(analysis.unread_sentence())
        numbers = [passage.number for passage in self.numbering.analysis(analysis, result=result)]
        return analysis.coordinator_text(numbers=numbers), analysis


def _cut_stop(cut: str) -> Stop | None:
    """The stop an analysis cut short calls for; None when it was read whole or hit the section limit."""
    if cut in ("token_budget", "time_budget"):
        return cut  # type: ignore[return-value]
    return "model_error" if cut in sec.FAILURE_CUTS else None


def _call_key(call: ToolCall) -> str:
    """Calls with the same name and arguments are the same call."""
    return f"{call.name}\0{json.dumps(call.arguments, sort_keys=True, ensure_ascii=False)}"


def _hints(tool: Tool, call: ToolCall) -> ToolHints | None:
    """The annotations of the tool ``call`` runs (an MCP tool's), for the client from the step's start."""
    if not isinstance(tool, HintedTool):
        return None
    try:
        return tool.hints(call.arguments)
    except Exception:  # hints must never fail a call, as a title must not
        return None


def _title(tool: Tool, call: ToolCall) -> str:
    try:
        return tool.title(call.arguments)
    except Exception:  # a title must never fail a call; arguments are checked by run
        return f"Calling {call.name}"
