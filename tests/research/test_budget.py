"""Research is charged for the work each request does.

Validation list: a cached prefix is not charged again; unused output is refunded; the whole
allowance must fit before a request starts; a prefix longer than the prompt never makes a
charge negative; a different tool offer or model shares nothing; every coordinator and
section-worker request is reserved and settled, and the budget equals the total less the
charges plus the refunds.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import msgspec
import pytest

from imprintd.messages import Message, ToolSpec, assistant, system, tool_result, user
from imprintd.models.base import Completion, Usage
from imprintd.research.budget import HEADER_TOKENS, BudgetExhausted, ResearchBudget, charged_complete
from tests.lock import lock_held_elsewhere
from tests.standin import StandInModel, call

SEARCH = ToolSpec(
    name="search",
    description="Search the workspace.",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}},
)
READ = ToolSpec(
    name="read_file",
    description="Read a file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}},
)
TOOLS = [SEARCH, READ]


def generated(tokens: int) -> Completion:
    return Completion(text="x", usage=Usage(prompt_tokens=0, evaluated_tokens=0, generated_tokens=tokens))


def round_one() -> list[Message]:
    return [system("You are Imprint. " * 40), user("where is the gateway port set?", seq=1)]


def round_two() -> list[Message]:
    asked = call("search", query="gateway port")
    return [
        *round_one(),
        assistant("", tool_calls=(asked,)),
        tool_result(asked, "[hit abc] src/config.py:1-2\nGATEWAY_PORT = 8443"),
    ]


def assert_balanced(budget: ResearchBudget) -> None:
    assert budget.remaining == budget.total - budget.charged + budget.refunded
    reserved = sum(e.amount for e in budget.ledger if e.kind == "reserve")
    refunded = sum(e.amount for e in budget.ledger if e.kind == "refund")
    assert (reserved, refunded) == (budget.charged, budget.refunded)
    if budget.ledger:
        assert budget.ledger[-1].remaining == budget.remaining


def test_first_request_is_charged_its_whole_prompt_and_allowance(model):
    budget = ResearchBudget(65_536)
    reservation = budget.reserve(model, round_one(), TOOLS, 1024)
    prompt = model.count_prompt(round_one(), TOOLS)
    assert (reservation.prompt_tokens, reservation.shared_tokens) == (prompt, 0)
    assert reservation.prompt_charge == prompt and reservation.allowance == 1024
    assert budget.remaining == 65_536 - prompt - 1024


def test_cached_prefix_is_not_charged_again(model):
    budget = ResearchBudget(65_536)
    budget.settle(budget.reserve(model, round_one(), TOOLS, 1024), generated(20))
    second = budget.reserve(model, round_two(), TOOLS, 1024)
    shared = model.count_prompt(round_one(), TOOLS)
    whole = model.count_prompt(round_two(), TOOLS)
    assert second.shared_tokens == shared
    # Only what follows the shared messages, plus the 16 header tokens kept charged.
    assert second.prompt_charge == whole - (shared - HEADER_TOKENS)
    added = model.count_message(round_two()[2]) + model.count_message(round_two()[3])
    assert second.prompt_charge < added + HEADER_TOKENS + 1
    assert second.prompt_charge < whole / 4


def test_unused_output_is_refunded(model):
    budget = ResearchBudget(10_000)
    reservation = budget.reserve(model, round_one(), TOOLS, 1024)
    budget.settle(reservation, generated(100))
    assert budget.refunded == 924
    assert budget.remaining == 10_000 - reservation.prompt_charge - 100
    assert_balanced(budget)


def test_failed_request_refunds_its_whole_allowance(model):
    budget = ResearchBudget(10_000)
    reservation = budget.reserve(model, round_one(), TOOLS, 1024)
    budget.settle(reservation, None)
    assert budget.remaining == 10_000 - reservation.prompt_charge
    assert_balanced(budget)


def test_refund_never_exceeds_the_allowance_nor_goes_negative(model):
    budget = ResearchBudget(10_000)
    over = budget.reserve(model, round_one(), TOOLS, 100)
    budget.settle(over, generated(150))  # tool calls written can count beyond the text
    assert budget.refunded == 0
    odd = budget.reserve(model, round_one(), TOOLS, 100)
    budget.settle(odd, generated(-5))
    assert budget.ledger[-1].amount == 100
    assert_balanced(budget)


def test_the_whole_allowance_must_fit_before_a_request_starts(model):
    prompt = model.count_prompt(round_one(), TOOLS)
    budget = ResearchBudget(prompt + 1024)
    with pytest.raises(BudgetExhausted) as refused:
        budget.reserve(model, round_one(), TOOLS, 1025)
    assert f"needs {prompt + 1025:,} tokens" in str(refused.value)
    assert f"{prompt + 1024:,} remain" in str(refused.value)
    assert refused.value.needed == prompt + 1025 and refused.value.remaining == prompt + 1024
    # Nothing was charged, and the refused request left no prefix behind.
    assert budget.remaining == prompt + 1024 and budget.ledger == [] and budget.charged == 0
    exact = budget.reserve(model, round_one(), TOOLS, 1024)
    assert budget.remaining == 0 and exact.prompt_charge == prompt


def test_a_request_fitting_only_by_its_new_part_still_starts(model):
    scratch = ResearchBudget(65_536)
    scratch.settle(scratch.reserve(model, round_one(), TOOLS, 1024), generated(1024))
    charge = scratch.measure(model, round_two(), TOOLS)[2]
    first = model.count_prompt(round_one(), TOOLS)
    whole = model.count_prompt(round_two(), TOOLS)
    budget = ResearchBudget(first + 1024 + charge + 1024)
    budget.settle(budget.reserve(model, round_one(), TOOLS, 1024), generated(1024))
    assert budget.remaining == charge + 1024 < whole + 1024
    budget.reserve(model, round_two(), TOOLS, 1024)
    assert budget.remaining == 0


def test_prefix_longer_than_the_prompt_never_makes_a_charge_negative(model):
    class InflatedPrefix(StandInModel):
        """A template whose prefix renders longer than the whole prompt (a generation prompt
        or header the full prompt does not repeat)."""

        def count_prompt(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
            whole = super().count_prompt(messages, tools)
            return whole + 500 if len(messages) < len(round_two()) else whole

    inflated = InflatedPrefix()
    budget = ResearchBudget(65_536)
    budget.settle(budget.reserve(inflated, round_one(), TOOLS, 64), generated(0))
    second = budget.reserve(inflated, round_two(), TOOLS, 64)
    assert second.shared_tokens > second.prompt_tokens
    assert second.prompt_charge == 0
    # The same request again: it shares everything and is charged the kept header tokens.
    budget.settle(second, generated(0))
    plain = ResearchBudget(65_536)
    plain.settle(plain.reserve(model, round_two(), TOOLS, 64), generated(0))
    again = plain.reserve(model, round_two(), TOOLS, 64)
    assert again.prompt_charge == HEADER_TOKENS
    assert_balanced(budget)
    assert_balanced(plain)


def test_a_different_tool_offer_shares_nothing(model):
    budget = ResearchBudget(65_536)
    budget.settle(budget.reserve(model, round_one(), TOOLS, 64), generated(0))
    other_offer = budget.reserve(model, round_two(), [SEARCH], 64)
    assert other_offer.shared_tokens == 0
    assert other_offer.prompt_charge == model.count_prompt(round_two(), [SEARCH])
    reordered = budget.reserve(model, round_two(), [READ, SEARCH], 64)
    assert reordered.shared_tokens == 0


def test_a_different_model_shares_nothing(model):
    budget = ResearchBudget(65_536)
    budget.settle(budget.reserve(model, round_one(), TOOLS, 64), generated(0))
    other = StandInModel(model_id="other")
    moved = budget.reserve(other, round_two(), TOOLS, 64)
    assert moved.shared_tokens == 0
    assert moved.prompt_charge == other.count_prompt(round_two(), TOOLS)


def test_a_changed_early_message_shares_nothing(model):
    budget = ResearchBudget(65_536)
    budget.settle(budget.reserve(model, round_one(), TOOLS, 64), generated(0))
    rewritten = [system("A rewritten summary changes the instructions."), *round_two()[1:]]
    assert budget.reserve(model, rewritten, TOOLS, 64).shared_tokens == 0


def test_after_a_failed_request_the_next_one_is_charged_in_full(model):
    budget = ResearchBudget(65_536)
    budget.settle(budget.reserve(model, round_one(), TOOLS, 64), None)
    assert budget.reserve(model, round_two(), TOOLS, 64).shared_tokens == 0


def test_settling_twice_is_an_error(model):
    budget = ResearchBudget(65_536)
    reservation = budget.reserve(model, round_one(), TOOLS, 64)
    budget.settle(reservation, generated(1))
    with pytest.raises(ValueError, match="not open"):
        budget.settle(reservation, generated(1))


async def test_every_coordinator_and_worker_request_of_a_research_run_is_reserved_and_settled():
    """The research loop itself: a coordinator round whose search result is too long to show,
    section workers on it, then a coordinator round that answers. The stand-in's usage is real
    (tool calls it writes are counted), so every charge and refund can be checked."""
    from imprintd import messages as msg
    from imprintd.context import sections as sec
    from imprintd.research.loop import research
    from imprintd.tools.base import ToolResult
    from tests.helpers import tool_turn
    from tests.research.fakes import SYSTEM, FakeSearch, scope
    from tests.standin import count_text

    model = StandInModel(n_ctx=2048)
    log = "".join(f"{n:05d} routine entry nothing to see\n" for n in range(600)) + "FATAL: disk full on db-7\n"
    search = FakeSearch({"errors": ToolResult(text=log, subject="errors", evidence=("log",))})
    asked = call("search", query="errors")
    written: list[str] = []

    def reply(request):
        if request.tools:
            out = tool_turn(asked) if not written else Completion(text="db-7 ran out of disk.")
        else:
            out = Completion(text=f"notes {len(written)}: routine")
        written.append(out.text + "".join(msgspec.json.encode(c).decode() for c in out.tool_calls))
        return out

    model.queue(*[reply] * 20)
    outcome = await research(
        scope(model, max_tokens=256),
        system=SYSTEM,
        history=[],
        question=msg.user("what failed?", seq=1),
        tools=[search],
    )
    budget = outcome.budget
    assert outcome.stop == "answer"
    kinds = ["worker" if r.max_tokens == sec.NOTES_MAX_TOKENS else "coordinator" for r in model.requests]
    assert kinds[0] == kinds[-1] == "coordinator" and kinds.count("worker") >= 2
    # Every request was reserved before it ran and settled after, in order, nothing left open.
    reserves = [e for e in budget.ledger if e.kind == "reserve"]
    refunds = [e for e in budget.ledger if e.kind == "refund"]
    assert [e.number for e in reserves] == [e.number for e in refunds] == list(range(1, len(model.requests) + 1))
    assert budget.open_reservations == ()
    assert [r.allowance for r in budget.reservations] == [r.max_tokens for r in model.requests]
    assert [r.prompt_tokens for r in budget.reservations] == [
        model.count_prompt(r.messages, r.tools) for r in model.requests
    ]
    # Each refund is the allowance less what the model wrote (tool calls included).
    assert [e.amount for e in refunds] == [
        r.allowance - min(count_text(text), r.allowance) for r, text in zip(budget.reservations, written, strict=False)
    ]
    assert_balanced(budget)
    # The model holds the prefix of the last request it ran: workers share the first worker's
    # instructions, and the coordinator round after them shares nothing with the round before.
    shared = [r.shared_tokens for r in budget.reservations]
    assert shared[0] == 0 and shared[1] == 0 and all(s > 0 for s in shared[2:-1])
    assert shared[-1] == 0
    assert budget.reservations[-1].prompt_charge == model.count_prompt(
        model.requests[-1].messages, model.requests[-1].tools
    )


# -- charged once the request holds the inference lock ----------------------------------------------------
async def test_a_request_is_measured_and_charged_only_once_it_holds_the_inference_lock():
    model = StandInModel()
    model.queue("ok")
    budget = ResearchBudget(10_000)
    results = []

    async def run() -> None:
        results.append(await charged_complete(budget, model, [user("hi")], (), max_tokens=16, timeout=30))

    async with anyio.create_task_group() as group:
        async with lock_held_elsewhere():
            group.start_soon(run)
            await anyio.wait_all_tasks_blocked()
            # Another reply's request holds the lock (and may change what a local model holds):
            # nothing is measured or charged while this one waits.
            assert budget.reservations == []
    assert results[0].text == "ok"
    assert len(budget.reservations) == 1 and budget.open_reservations == ()


async def test_a_request_whose_deadline_passes_in_the_queue_is_never_charged():
    model = StandInModel()
    model.queue("never")
    budget = ResearchBudget(10_000)
    async with lock_held_elsewhere():
        completion = await charged_complete(budget, model, [user("hi")], (), max_tokens=16, timeout=0.05)
    assert completion.finish_reason == "deadline"
    assert budget.reservations == [] and budget.remaining == 10_000
