"""Section analysis (docs/decisions.md, "Section analysis"): coverage, sizing, sequential rotating workers, explicit limits,
exact rereads, progress apart from the reply text, budget and cancellation."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import anyio
import pytest

from imprintd.context import sections as sec
from imprintd.context.originals import READ_MAX_CHARS, ReadChatSectionTool, ReplySections, SectionArchive, SectionError
from imprintd.context.sections import (
    CLIP_CHARS,
    NOTES_MAX_TOKENS,
    OVERLAP_CHARS,
    USER_KIND,
    AnalysisError,
    analyze,
    kind_label,
    plan_sections,
    prepare_tool_result,
    split_sections,
    tool_kind,
)
from imprintd.research.budget import ResearchBudget
from imprintd.tools.base import ToolError
from tests.standin import Fail, Hang, Request, StandInModel

QUESTION = "Which port does the gateway use?"
KIND = tool_kind("search_workspace")


# -- helpers -----------------------------------------------------------------------------------------
@dataclass
class RecordingEvents:
    progress_calls: list[tuple[str, int | None]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)

    def text(self, delta: str) -> None:
        self.texts.append(delta)

    def text_was_preamble(self) -> None:
        self.texts.append("<preamble>")

    def progress(self, message: str, percentage: int | None = None) -> None:
        self.progress_calls.append((message, percentage))

    def tool_step(self, step) -> None:
        pass

    def summary(self, text: str, first_seq: int, last_seq: int) -> None:
        pass

    def context_usage(self, usage) -> None:
        pass

    async def ask_permission(self, request) -> str:
        return "reject"


@dataclass
class FakeBudget:
    """Records reserve/settle; raises from reserve once ``refuse_after`` reservations were made."""

    calls: list[tuple] = field(default_factory=list)
    refuse_after: int | None = None

    def reserve(self, model, messages, tools, max_tokens):
        reserved = sum(1 for call in self.calls if call[0] == "reserve")
        if self.refuse_after is not None and reserved >= self.refuse_after:
            raise RuntimeError("research token budget spent")
        self.calls.append(("reserve", len(messages), tuple(tools), max_tokens))
        return f"r{reserved + 1}"

    def settle(self, reservation, completion):
        self.calls.append(("settle", reservation, None if completion is None else completion.text))


@dataclass
class CountingModel(StandInModel):
    prompt_counts: int = 0

    def count_prompt(self, messages, tools=()):
        self.prompt_counts += 1
        return super().count_prompt(messages, tools)


def section_number(request: Request) -> int:
    return int(re.search(r"Section (\d+) of \d+", request.messages[1].content).group(1))


def notes_so_far(request: Request) -> str:
    return re.search(r"Your notes so far:\n(.*?)\n\nSection \d+ of", request.messages[1].content, re.S).group(1)


def section_text(request: Request) -> str:
    return re.search(r"<<<\n(.*)\n>>>", request.messages[1].content, re.S).group(1)


def fact_keeper(request: Request) -> str:
    """A worker that rewrites its notes: earlier facts kept, this section's facts added."""
    facts = re.findall(r"FACT-[\w-]+", notes_so_far(request)) + re.findall(r"FACT-[\w-]+", section_text(request))
    unique = list(dict.fromkeys(facts))
    return f"- section {section_number(request)} read. " + " ".join(unique)


def tagger(request: Request) -> str:
    """A worker whose notes just name the section it last read."""
    return f"NOTE-s{section_number(request)}"


def lines_text(count: int, width: int = 60) -> str:
    return "".join(f"line {index:05d}: " + "lorem ipsum dolor " * (width // 18) + "\n" for index in range(count))


def text_needing(model, sections: int, *, kind: str = KIND, question: str = QUESTION, width: int = 60) -> str:
    """A text that the planner splits into exactly ``sections`` sections for ``model``."""
    context = min(sec.WORKER_CONTEXT_TOKENS, model.n_ctx)
    worker_question = sec._bounded(question if kind != USER_KIND else "")
    low, high = 1, 64
    while (
        len(
            plan_sections(
                model, lines_text(high, width), question=worker_question, label=kind_label(kind), worker_context=context
            )
        )
        < sections
    ):
        high *= 2
    while low < high:  # the fewest lines that need that many sections
        middle = (low + high) // 2
        planned = len(
            plan_sections(
                model,
                lines_text(middle, width),
                question=worker_question,
                label=kind_label(kind),
                worker_context=context,
            )
        )
        if planned < sections:
            low = middle + 1
        else:
            high = middle
    text = lines_text(low, width)
    if kind == USER_KIND:
        return text
    assert (
        len(plan_sections(model, text, question=worker_question, label=kind_label(kind), worker_context=context))
        == sections
    )
    return text


async def run_analysis(model, source, *, workers=2, kind=KIND, events=None, sections=None, budget=None):
    return await analyze(
        model,
        source,
        kind=kind,
        question=QUESTION,
        workers=workers,
        events=events or RecordingEvents(),
        sections=sections or ReplySections("reply-1"),
        budget=budget,
    )


# -- splitting ---------------------------------------------------------------------------------------
def rebuild(text: str, ranges: list[tuple[int, int]]) -> str:
    return text[ranges[0][0] : ranges[0][1]] + "".join(text[start + OVERLAP_CHARS : end] for start, end in ranges[1:])


@pytest.mark.parametrize(
    "text",
    [
        "plain words and more words\n" * 200,
        "日本語のテキストと絵文字🙂👍🏽、改行なしで続く長い文章。" * 60,
        ("émoji 🧪 mixed 中文 text with spaces " * 40 + "\n") * 5,
        "x" * 5000,
    ],
)
def test_sections_cover_every_character_with_the_overlap(text):
    ranges = split_sections(text, 500)
    assert ranges[0][0] == 0 and ranges[-1][1] == len(text)
    for (_start, end), (next_start, _) in zip(ranges, ranges[1:], strict=False):
        assert next_start == end - OVERLAP_CHARS
    assert all(0 < end - start <= 500 for start, end in ranges)
    assert rebuild(text, ranges) == text


def test_sections_prefer_a_newline_then_whitespace_then_cut_hard():
    with_newline = "a" * 420 + "\n" + "b b b " * 40
    assert split_sections(with_newline, 500)[0] == (0, 421)
    with_space = "a" * 430 + " " + "b" * 300
    assert split_sections(with_space, 500)[0] == (0, 431)
    early_newline = "a" * 100 + "\n" + "c" * 600  # too early in the window: not a boundary
    assert split_sections(early_newline, 500)[0] == (0, 500)
    assert split_sections("", 500) == []
    with pytest.raises(ValueError):
        split_sections("abc", 2 * OVERLAP_CHARS)


def test_non_ascii_offsets_count_characters():
    text = "🙂" * 1000
    ranges = split_sections(text, 300)
    assert all(text[start:end] == "🙂" * (end - start) for start, end in ranges)
    assert rebuild(text, ranges) == text


# -- sizing ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_ctx", [8192, 4096, 2048, 1536, 1024])
async def test_every_worker_prompt_fits_the_worker_context_with_notes_headroom(n_ctx):
    model = CountingModel(n_ctx=n_ctx)
    source = lines_text(600) + "日本語のテキスト🙂 " * 800

    def long_notes(request: Request) -> str:  # notes as long as a worker may write
        return " ".join(f"n{section_number(request)}x{index}" for index in range(1000))

    planned = plan_sections(model, source, question=QUESTION, label=kind_label(KIND), worker_context=min(4096, n_ctx))
    model.prompt_counts = 0
    model.queue(*[long_notes] * len(planned))
    analysis = await run_analysis(model, source, workers=2)

    context = min(4096, n_ctx)
    assert list(analysis.sections) == planned and len(model.requests) == len(planned)
    # Below 1,536 tokens the notes get an eighth of the context (a small server window).
    allowance = NOTES_MAX_TOKENS if context >= sec.SMALL_WORKER_CONTEXT else context // 8
    assert sec.notes_tokens(context) == allowance
    for request in model.requests:
        assert model.count_prompt(request.messages) + allowance <= context
        assert request.max_tokens == allowance
        assert request.tools == []
        assert request.timeout == sec.WORKER_TIMEOUT_S
    assert rebuild(source, list(analysis.sections)) == source


async def test_planning_measures_a_few_times_per_section():
    model = CountingModel()
    source = lines_text(4000)
    model.queue(*[tagger] * 64)
    analysis = await run_analysis(model, source)
    # Planning: one fixed measurement plus one or two per section; one exact check per request.
    assert model.prompt_counts <= 3 * len(analysis.sections) + 2


# -- workers -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("workers", [1, 2, 3])
async def test_assignments_rotate_and_each_worker_rewrites_its_own_notes(workers):
    model = StandInModel(n_ctx=1536)
    source = text_needing(model, 7)
    model.queue(*[tagger] * 7)
    analysis = await run_analysis(model, source, workers=workers)

    assert [section_number(request) for request in model.requests] == list(range(1, 8))
    for index, request in enumerate(model.requests):
        number = index + 1
        earlier = number - workers
        expected = f"NOTE-s{earlier}" if earlier >= 1 else "(none yet: this is your first section)"
        assert notes_so_far(request) == expected
        start, end = analysis.sections[index]
        assert section_text(request) == source[start:end]
        assert f"characters {start}–{end}" in request.messages[1].content
    assert [w.worker for w in analysis.workers] == list(range(1, workers + 1))
    for notes in analysis.workers:
        assert notes.sections == tuple(range(notes.worker, 8, workers))
        assert notes.notes == f"NOTE-s{notes.sections[-1]}"


async def test_workers_run_strictly_one_at_a_time_and_in_order():
    model = StandInModel(n_ctx=1536)
    source = text_needing(model, 5)
    model.queue(*[tagger] * 5)
    events = RecordingEvents()
    await run_analysis(model, source, workers=3, events=events)
    assert not model.overlapped
    assert [section_number(r) for r in model.requests] == [1, 2, 3, 4, 5]
    assert events.progress_calls == [(f"Analyzing section {n} of 5", 100 * (n - 1) // 5) for n in range(1, 6)]
    assert events.texts == []


async def test_a_fact_only_in_the_last_section_reaches_the_coordinator():
    model = StandInModel(n_ctx=1536)
    source = text_needing(model, 5) + "The gateway moved: FACT-port-7311 is final.\n"
    sections_needed = len(plan_sections(model, source, question=QUESTION, label=kind_label(KIND), worker_context=1536))
    model.queue(*[fact_keeper] * sections_needed)
    analysis = await run_analysis(model, source, workers=2)
    text = analysis.coordinator_text()
    assert "FACT-port-7311" in text
    assert "FACT-port-7311" not in source[: analysis.sections[-1][0]]
    assert "a tool result of search_workspace" in text.lower()
    assert analysis.source_id in text and "read_chat_section" in text
    assert f"{len(source)} characters" in text and f"{sections_needed} overlapping sections" in text


async def test_the_users_own_message_keeps_head_and_tail_and_workers_see_them():
    model = StandInModel(n_ctx=1536)
    body = text_needing(model, 3, kind=USER_KIND)
    source = "Please summarize the log below and tell me the port.\n" + body + "\nWhat is the final port?"
    sections_needed = len(
        plan_sections(model, source, question=sec._bounded(source), label="user message", worker_context=1536)
    )
    model.queue(*[tagger] * sections_needed)
    analysis = await run_analysis(model, source, workers=2, kind=USER_KIND)
    assert analysis.head == source[: sec.HEAD_CHARS] and analysis.tail == source[-sec.TAIL_CHARS :]
    for request in model.requests:
        question = request.messages[1].content.split("Your notes so far:")[0]
        assert "Please summarize the log below" in question and "What is the final port?" in question
    text = analysis.coordinator_text()
    assert text.startswith("[Section analysis] The user's message was too long")
    assert "Please summarize the log below" in text and "What is the final port?" in text
    assert "Notes of worker 1 on sections 1 (" in text


# -- explicit limits ---------------------------------------------------------------------------------
async def test_a_source_over_a_million_characters_fails_before_any_request():
    model = StandInModel()
    with pytest.raises(AnalysisError, match="1,000,001 characters, more than the 1,000,000 allowed"):
        await run_analysis(model, "x" * 1_000_001)
    assert model.requests == []


async def test_past_64_sections_the_first_64_are_read_and_the_rest_named_up_front():
    model = StandInModel()
    sections = ReplySections()
    events = RecordingEvents()
    source = lines_text(14_000)
    model.queue(*[tagger] * 64)
    analysis = await run_analysis(model, source, sections=sections, events=events)
    assert len(model.requests) == 64 and sections.sections_used == 64
    assert analysis.cut == "section_limit" and analysis.needed > 64 and len(analysis.sections) == 64
    read_to = analysis.sections[-1][1]
    assert analysis.read_to == read_to < len(source)
    # Said before the first worker ran, with the characters that will not be read.
    first = events.progress_calls[0][0]
    assert (
        first.startswith(
            f"The search_workspace result needs {analysis.needed} sections: this reply may analyze 64 more"
        )
        and "chat.analysis_context" in first
    )
    assert f"Characters {read_to:,}–{len(source):,} will not be read." in first
    assert events.progress_calls[1][0] == f"Analyzing section 1 of {analysis.needed}"
    assert f"Characters {read_to:,}–{len(source):,} of the search_workspace result" in analysis.unread_sentence()
    text = analysis.coordinator_text()
    assert f"only characters 0–{read_to} were read, in 64 of the {analysis.needed} sections" in text
    assert f"Characters {read_to}–{len(source)} were NOT read" in text


async def test_the_section_limit_is_per_reply_across_analyses(monkeypatch):
    model = StandInModel(n_ctx=1536)
    source = text_needing(model, 3)
    sections = ReplySections("reply-1")
    model.queue(*[tagger] * 5)
    await run_analysis(model, source, sections=sections)
    assert sections.sections_used == 3
    monkeypatch.setattr(sec, "MAX_SECTIONS", 5)
    second = await run_analysis(model, source, sections=sections)
    assert len(model.requests) == 5 and sections.sections_used == 5
    assert second.cut == "section_limit" and len(second.sections) == 2 and second.needed == 3
    assert [w.notes for w in second.workers] == ["NOTE-s1", "NOTE-s2"]  # the notes read are kept
    # Another reply has its own count.
    model.queue(*[tagger] * 3)
    assert (await run_analysis(model, source, sections=ReplySections("reply-2"))).complete


async def test_a_million_characters_are_reachable_with_a_larger_worker_context():
    """chat.analysis_context lets 64 sections cover the record's 1,000,000 characters."""
    model = StandInModel(n_ctx=32_768)
    source = ("The quick brown fox jumps over the lazy dog near port 8101. " * 16_667)[:1_000_000]
    default = plan_sections(model, source, question=QUESTION, label="x", worker_context=sec.WORKER_CONTEXT_TOKENS)
    assert len(default) > 64  # the record's 4,096-token workers cannot reach it
    model.queue(*[tagger] * 64)
    budget = ResearchBudget(16_777_216)
    analysis = await analyze(
        model,
        source,
        kind=KIND,
        question=QUESTION,
        workers=2,
        events=RecordingEvents(),
        sections=ReplySections("r"),
        budget=budget,
        worker_context=16_384,
    )
    assert analysis.complete and analysis.read_to == 1_000_000 and len(analysis.sections) <= 64
    assert len(model.requests) == len(analysis.sections)
    assert all(model.count_prompt(r.messages) + NOTES_MAX_TOKENS <= 16_384 for r in model.requests)


async def test_a_token_budget_too_small_is_said_up_front_and_the_notes_read_are_kept():
    model = StandInModel(n_ctx=1536)
    source = text_needing(model, 6)
    events = RecordingEvents()
    model.queue(*[tagger] * 6)
    _, prompts = sec._plan(
        model,
        source,
        question=sec._bounded(QUESTION),
        label=kind_label(KIND),
        worker_context=min(sec.WORKER_CONTEXT_TOKENS, model.n_ctx),
    )
    budget = ResearchBudget(prompts[0] + prompts[1] + 2 * NOTES_MAX_TOKENS + 10)  # estimated: two sections
    analysis = await run_analysis(model, source, budget=budget, events=events)
    assert analysis.cut == "token_budget" and analysis.needed == 6
    read = len(analysis.sections)
    # At least what the estimate promised (it gives no credit for a shared prefix or unused
    # allowance), and never a request the budget refused.
    assert 2 <= read < 6 and len(model.requests) == read
    last = {number % 2: f"NOTE-s{number}" for number in range(1, read + 1)}
    assert [w.notes for w in analysis.workers] == [last[1], last[0]]  # each worker's latest notes
    first = events.progress_calls[0][0]
    assert first.startswith(
        "The search_workspace result needs 6 sections: the research token budget "
        f"({budget.total:,} tokens, {budget.total:,} left) covers about 2;"
    )
    assert "chat.research_token_budget = " in first
    # An estimate, said as one; what was read in the end is said when reading stops.
    assert (
        f"Characters from about {analysis_ranges(model, source)[1][1]:,} to {len(source):,} will likely not be read."
        in first
    )
    assert events.progress_calls[-1][0].startswith(f"Read {read} of 6 sections of the search_workspace result")
    assert budget.open_reservations == () and budget.remaining >= 0
    assert analysis.read_to == analysis.sections[-1][1]
    assert f"the research token budget ran out after {read} of 6 sections" in analysis.unread_sentence()


def analysis_ranges(model, source) -> list[tuple[int, int]]:
    return plan_sections(
        model,
        source,
        question=sec._bounded(QUESTION),
        label=kind_label(KIND),
        worker_context=min(sec.WORKER_CONTEXT_TOKENS, model.n_ctx),
    )


async def test_the_time_budget_ends_reading_keeping_the_sections_read():
    model = StandInModel(n_ctx=1536)
    source = text_needing(model, 4)
    clock = {"left": 100.0}

    def slow(request: Request) -> str:
        clock["left"] -= 40.0  # each section "takes" 40 of the seconds left
        return tagger(request)

    model.queue(*[slow] * 4)
    analysis = await analyze(
        model,
        source,
        kind=KIND,
        question=QUESTION,
        workers=2,
        events=RecordingEvents(),
        sections=ReplySections("r"),
        time_left=lambda: clock["left"],
    )
    # 100 s: two sections (60 s then 20 s left, less than a section takes): the rest unread.
    assert analysis.cut == "time_budget" and len(analysis.sections) == 2 and len(model.requests) == 2
    assert "the research time budget ran out after 2 of 4 sections" in analysis.unread_sentence()
    assert "chat.research_time_budget" in analysis.unread_sentence()


async def test_a_worker_cut_by_the_time_budget_leaves_its_section_unread():
    model = StandInModel(n_ctx=1536)
    source = text_needing(model, 3)
    model.queue(tagger, Hang("half a note"))
    left = {"value": 0.2}
    analysis = await analyze(
        model,
        source,
        kind=KIND,
        question=QUESTION,
        workers=2,
        events=RecordingEvents(),
        sections=ReplySections("r"),
        time_left=lambda: left["value"],
    )
    assert [r.timeout for r in model.requests] == [0.2, 0.2]  # the time left, not the worker's 120 s
    assert analysis.cut == "time_budget" and len(analysis.sections) == 1
    assert [w.notes for w in analysis.workers] == ["NOTE-s1"]


async def test_a_failing_worker_ends_reading_keeping_the_sections_read():
    model = StandInModel(n_ctx=1536)
    source = text_needing(model, 4)
    events = RecordingEvents()
    model.queue(tagger, Fail("server error 502"))
    analysis = await run_analysis(model, source, events=events)
    assert analysis.cut == "worker_failed" and len(analysis.sections) == 1 and analysis.needed == 4
    assert [w.notes for w in analysis.workers] == ["NOTE-s1"]
    assert analysis.failure == "worker 2 on section 2: server error 502"
    sentence = analysis.unread_sentence()
    assert sentence == (
        f"Characters {analysis.read_to:,}–{len(source):,} of the search_workspace result ({len(source):,} "
        "characters) were not read: a note-taking worker's model request failed (worker 2 on section 2: "
        "server error 502) after 1 of 4 sections."
    )
    assert len(model.requests) == 2
    # Progress named only the sections that ran, then what was read in the end.
    said = [message for message, _ in events.progress_calls]
    assert said[-3:] == [
        "Analyzing section 1 of 4",
        "Analyzing section 2 of 4",
        f"Read 1 of 4 sections of the search_workspace result (characters 0–{analysis.read_to:,} of "
        f"{len(source):,}): a note-taking worker's model request failed.",
    ]


async def test_a_worker_past_its_own_deadline_ends_reading_and_names_a_smaller_worker_context(monkeypatch):
    monkeypatch.setattr(sec, "WORKER_TIMEOUT_S", 0.01)
    model = StandInModel(n_ctx=8192)
    source = text_needing(model, 3)
    model.queue(tagger, tagger, Hang("partial notes"))
    analysis = await run_analysis(model, source)
    assert [r.timeout for r in model.requests] == [0.01] * 3
    assert analysis.cut == "worker_timeout" and len(analysis.sections) == 2
    assert analysis.failure == "worker 1 on section 3, after 0.01 s"
    assert "A smaller chat.analysis_context (2,048: sections of about half the size" in analysis.unread_sentence()


async def test_empty_notes_end_reading():
    model = StandInModel(n_ctx=1536)
    source = text_needing(model, 2)
    model.queue("   ")
    analysis = await run_analysis(model, source)
    assert analysis.cut == "empty_notes" and analysis.sections == () and analysis.workers == ()
    assert "a note-taking worker wrote no notes (worker 1 on section 1) after 0 of 2 sections" in (
        analysis.unread_sentence()
    )


async def test_a_context_too_small_for_any_section_fails_explicitly():
    model = StandInModel(n_ctx=300)
    with pytest.raises(AnalysisError, match="no room for a section"):
        await run_analysis(model, lines_text(200))
    assert model.requests == []


async def test_workers_outside_1_to_8_are_refused():
    with pytest.raises(ValueError):
        await run_analysis(StandInModel(), "text", workers=0)
    with pytest.raises(ValueError):
        await run_analysis(StandInModel(), "text", workers=9)


# -- budget and cancellation ----------------------------------------------------------------------------
async def test_budget_is_reserved_and_settled_once_per_worker_request():
    model = StandInModel(n_ctx=1536)
    source = text_needing(model, 3)
    model.queue(*[tagger] * 3)
    budget = FakeBudget()
    await run_analysis(model, source, budget=budget)
    assert budget.calls == [
        ("reserve", 2, (), NOTES_MAX_TOKENS),
        ("settle", "r1", "NOTE-s1"),
        ("reserve", 2, (), NOTES_MAX_TOKENS),
        ("settle", "r2", "NOTE-s2"),
        ("reserve", 2, (), NOTES_MAX_TOKENS),
        ("settle", "r3", "NOTE-s3"),
    ]


async def test_a_failed_request_is_settled_with_no_output_and_a_refused_reservation_propagates():
    model = StandInModel(n_ctx=1536)
    source = text_needing(model, 3)
    model.queue(tagger, Fail())
    budget = FakeBudget()
    assert (await run_analysis(model, source, budget=budget)).cut == "worker_failed"
    assert budget.calls[-1] == ("settle", "r2", None)

    model = StandInModel(n_ctx=1536)
    model.queue(*[tagger] * 3)
    with pytest.raises(RuntimeError, match="budget spent"):
        await run_analysis(model, source, budget=FakeBudget(refuse_after=1))
    assert len(model.requests) == 1


async def test_cancellation_closes_the_running_worker_before_another_section_starts():
    model = StandInModel(n_ctx=1536)
    source = text_needing(model, 4)
    started = anyio.Event()

    def hang(request: Request):
        started.set()
        return Hang("half a note")

    model.queue(tagger, hang, tagger, tagger)
    budget, events, outcome = FakeBudget(), RecordingEvents(), {}

    async def run() -> None:
        try:
            await run_analysis(model, source, events=events, budget=budget)
        except anyio.get_cancelled_exc_class():
            outcome["cancelled"] = True
            raise

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await started.wait()
        group.cancel_scope.cancel()

    assert outcome == {"cancelled": True}
    assert len(model.requests) == 2 and not model.busy
    assert [message for message, _ in events.progress_calls] == ["Analyzing section 1 of 4", "Analyzing section 2 of 4"]
    assert budget.calls[-1] == ("settle", "r2", None)


# -- rereads, the archive and the tool ---------------------------------------------------------------------
def test_rereads_return_exact_characters():
    sections = ReplySections()
    text = "héllo wörld 🙂 中文 " * 500
    source_id = sections.register(text, "user message")
    assert len(source_id) >= 12
    for start, length in [(0, 1), (5, 100), (13, 4000), (len(text) - 3, 10)]:
        assert sections.read(source_id, start, length) == text[start : start + length]
    assert sections.register(text, "again") != source_id


@pytest.mark.parametrize(
    "source_id, start, length, message",
    [
        ("nope", 0, 10, "unknown source id 'nope'"),
        ("ID", -1, 10, "start must be 0 or more"),
        ("ID", 100, 10, "start 100 is past the end of the tool result, which has 100 characters"),
        ("ID", 0, 0, "length must be at least 1"),
        ("ID", 0, -5, "length must be at least 1"),
        ("ID", 0, 4001, "at most 4000 characters per read"),
    ],
)
def test_bad_rereads_name_what_is_wrong(source_id, start, length, message):
    sections = ReplySections()
    real = sections.register("x" * 100, "tool result")
    with pytest.raises(SectionError, match=re.escape(message)):
        sections.read(real if source_id == "ID" else source_id, start, length)


def test_the_archive_reads_recent_replies_and_expires_old_ones():
    archive = SectionArchive(max_replies=3)
    ids = {}
    for reply in ("r1", "r2", "r3", "r4"):
        ids[reply] = archive.open(reply).register(f"text of {reply}", "user message")
    assert archive.open("r4").read(ids["r4"], 0, 4) == "text"  # opening again returns the same registry
    assert archive.read("r2", ids["r2"], 8, 2) == "r2"
    assert len(archive) == 3
    with pytest.raises(SectionError, match="reply 'r1' has expired"):
        archive.read("r1", ids["r1"], 0, 4)
    with pytest.raises(SectionError, match="unknown reply id 'zz'"):
        archive.read("zz", ids["r2"], 0, 4)
    with pytest.raises(SectionError, match="unknown source id"):
        archive.read("r3", ids["r2"], 0, 4)  # a source of another reply
    source_id = archive.open("r5").register("kept elsewhere", "user message")
    assert archive.read("r5", source_id, 5, 9) == "elsewhere"
    with pytest.raises(SectionError, match="reply 'r2' has expired"):
        archive.get("r2")


def test_the_archive_bounds_the_characters_it_keeps():
    archive = SectionArchive(max_replies=10, max_chars=250)
    for reply in ("a", "b", "c"):
        archive.open(reply).register("y" * 100, "tool result")
    archive.open("d")
    with pytest.raises(SectionError, match="expired"):
        archive.get("a")
    assert archive.get("b") and archive.get("d")


async def test_the_tool_rereads_only_its_own_reply():
    mine, other = ReplySections("mine"), ReplySections("other")
    text = "ünïcode 🙂 " * 1000
    source_id = mine.register(text, "search_workspace result")
    foreign = other.register("secret", "user message")
    tool = ReadChatSectionTool(mine)
    assert tool.spec.name == "read_chat_section"
    assert tool.spec.parameters["required"] == ["source_id", "start", "length"]
    assert tool.spec.parameters["properties"]["length"]["maximum"] == READ_MAX_CHARS

    result = await tool.run({"source_id": source_id, "start": 10, "length": 500})
    assert result.ok and result.text == text[10:510]
    assert result.evidence == (f"section:{source_id}:10:510",)
    assert (
        tool.title({"source_id": source_id, "start": 10, "length": 500})
        == "Rereading characters 10–510 of the analyzed search_workspace result"
    )
    assert tool.title({"start": "?"}) == "Rereading part of an analyzed source"

    for arguments, message in [
        ({"source_id": foreign, "start": 0, "length": 6}, "unknown source id"),
        (
            {"source_id": source_id, "start": 0, "length": 5000},
            "read_chat_section: length must be an integer from 1 to 4000, not 5000",
        ),
        ({"source_id": source_id, "start": 0}, "read_chat_section needs length (an integer from 1 to 4000)"),
        (
            {"source_id": source_id, "start": 0, "length": 5, "path": "/etc/passwd"},
            "read_chat_section takes only source_id, start and length, not path",
        ),
        (
            {"source_id": source_id, "start": "0", "length": 5},
            "read_chat_section: start must be an integer, 0 or more, not '0'",
        ),
        ({"source_id": source_id, "start": True, "length": 5}, "start must be an integer, 0 or more, not True"),
        ({"source_id": source_id, "start": 0, "length": 10.0}, "length must be an integer from 1 to 4000, not 10.0"),
        ({"source_id": None, "start": 0, "length": 5}, "read_chat_section: source_id must be a string, not None"),
    ]:
        with pytest.raises(ToolError, match=re.escape(message)):
            await tool.run(arguments)


# -- tool results with analysis on and off ------------------------------------------------------------------
def test_tool_results_are_whole_when_they_fit_analyzed_when_not_and_clipped_with_analysis_off():
    long = "z" * 10_000
    assert prepare_tool_result(long, workers=2, fits=lambda text: True) == long
    assert prepare_tool_result(long, workers=2, fits=lambda text: False) is None
    clipped = prepare_tool_result(long, workers=0, fits=lambda text: True)
    assert clipped.startswith("z" * CLIP_CHARS) and not clipped.startswith("z" * (CLIP_CHARS + 1))
    assert "clipped" in clipped and "10000 characters" in clipped
    assert prepare_tool_result("short", workers=0, fits=lambda text: False) == "short"
