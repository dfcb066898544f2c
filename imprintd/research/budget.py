"""The research token budget, charged for the work each request does (docs/decisions.md,
"Research budget").

A research request (coordinator round or section worker) is charged the prompt tokens the
model will actually evaluate, plus its whole output allowance, reserved before it starts.
What the model holds is the prefix of the last request it ran, whatever that request was
(a section worker replaces a coordinator round's prefix, and the reverse):

* a model that can say so (``reusable_prefix``: the local provider, from llama.cpp's own
  evaluated tokens, or the session's saved state it will restore first) is charged exactly
  the tokens past that prefix;
* any other (remote) is charged its formatted prompt tokens past the leading messages it
  shares with the previous request of this reply to that model, when both offered the same
  tools (tool schemas render first), less 16 tokens kept charged for the next turn's header
  that a rendered prefix adds.
 When it finishes,
the allowance it did not generate is refunded. A request starts only when its charge and
whole allowance fit in what remains, so no request crosses the budget.

Every research request goes through ``charged_complete``, which reserves once the request
holds the inference lock (``Model.complete``'s ``on_start``): a local model's held prefix is
measured when no other reply's request can change it before this one runs::

    completion = await charged_complete(budget, model, messages, tools, max_tokens=max_tokens)
    # BudgetExhausted: refused unsent, nothing charged; ModelError: refunded in full
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import anyio
import anyio.to_thread
import msgspec

from imprintd.messages import Message, ToolSpec
from imprintd.models.base import Completion, Model, RetryCallback, TextCallback
from imprintd.offload import in_worker

#: Of the shared prefix, this many tokens stay charged: the next turn's header
#: that a rendered prefix adds (and the generation prompt a prefix count includes).
HEADER_TOKENS = 16


class BudgetExhausted(Exception):
    """The next request does not fit in what remains; nothing was charged for it."""

    def __init__(self, needed: int, prompt_charge: int, allowance: int, remaining: int) -> None:
        super().__init__(
            f"the research token budget is spent: the next request needs {needed:,} tokens "
            f"({prompt_charge:,} of new prompt and {allowance:,} of output allowance) "
            f"but {remaining:,} remain"
        )
        self.needed = needed
        self.prompt_charge = prompt_charge
        self.allowance = allowance
        self.remaining = remaining


class Reservation(msgspec.Struct, frozen=True, kw_only=True):
    """What one request was charged before it started."""

    number: int  # 1-based, in the order requests were reserved
    model_id: str
    prompt_tokens: int  # the whole formatted prompt
    shared_tokens: int  # the formatted prefix it shares with the previous request (0: none)
    prompt_charge: int
    allowance: int

    @property
    def charge(self) -> int:
        return self.prompt_charge + self.allowance


class LedgerEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One movement of the budget; ``amount`` is taken (reserve) or given back (refund)."""

    kind: Literal["reserve", "refund"]
    number: int
    amount: int
    remaining: int  # after this entry


def _tools_key(tools: Sequence[ToolSpec]) -> bytes:
    # Tool schemas render into the prompt before the messages; a different offer (or order)
    # changes the rendered prefix, so it shares nothing.
    return msgspec.json.encode(list(tools))


def _common_leading(previous: Sequence[Message], current: Sequence[Message]) -> int:
    count = 0
    for before, now in zip(previous, current, strict=False):
        if before != now:
            break
        count += 1
    return count


class ResearchBudget:
    """``chat.research_token_budget`` for one reply; see the module docstring."""

    def __init__(self, total: int) -> None:
        if total < 0:
            raise ValueError(f"a research token budget cannot be negative ({total})")
        self.total = total
        self.remaining = total
        self.charged = 0  # prompt charges plus allowances reserved
        self.refunded = 0
        self.ledger: list[LedgerEntry] = []
        self.reservations: list[Reservation] = []  # every request reserved, in order
        # The last request reserved per model: (its number, its tool offer, its messages). A
        # model holds the prefix of the last request it ran, so a coordinator round after
        # section workers shares nothing with the round before them.
        self._previous: dict[str, tuple[int, bytes, tuple[Message, ...]]] = {}
        #: The request that did not fit, if one was refused (research stops on it).
        self.refused: BudgetExhausted | None = None
        self._open: dict[int, Reservation] = {}
        self._keys: dict[int, str] = {}
        self._count = 0

    @property
    def open_reservations(self) -> tuple[Reservation, ...]:
        """Requests reserved and not yet settled (empty when research ended cleanly)."""
        return tuple(self._open.values())

    def measure(self, model: Model, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> tuple[int, int, int]:
        """(whole prompt, shared prefix, charge) for a request, without reserving it."""
        exact = getattr(model, "reusable_prefix", None)
        if callable(exact):
            prompt, held = exact(messages, tools)
            return prompt, held, max(0, prompt - held)
        prompt = model.count_prompt(messages, tools)
        shared = 0
        previous = self._previous.get(model.model_id)
        if previous is not None and previous[1] == _tools_key(tools):
            common = _common_leading(previous[2], messages)
            if common:
                shared = model.count_prompt(messages[:common], tools)  # the one extra count
        return prompt, shared, max(0, prompt - max(0, shared - HEADER_TOKENS))

    def reserve(
        self, model: Model, messages: Sequence[Message], tools: Sequence[ToolSpec], max_tokens: int
    ) -> Reservation:
        """Charge a request before it starts, or raise BudgetExhausted and charge nothing."""
        if max_tokens < 0:
            raise ValueError(f"an output allowance cannot be negative ({max_tokens})")
        prompt, shared, charge = self.measure(model, messages, tools)
        if charge + max_tokens > self.remaining:
            self.refused = BudgetExhausted(charge + max_tokens, charge, max_tokens, self.remaining)
            raise self.refused
        self._count += 1
        reservation = Reservation(
            number=self._count,
            model_id=model.model_id,
            prompt_tokens=prompt,
            shared_tokens=shared,
            prompt_charge=charge,
            allowance=max_tokens,
        )
        self.remaining -= reservation.charge
        self.charged += reservation.charge
        self.ledger.append(
            LedgerEntry(kind="reserve", number=reservation.number, amount=reservation.charge, remaining=self.remaining)
        )
        self._open[reservation.number] = reservation
        self.reservations.append(reservation)
        self._keys[reservation.number] = model.model_id
        self._previous[model.model_id] = (reservation.number, _tools_key(tools), tuple(messages))
        return reservation

    def settle(self, reservation: Reservation, completion: Completion | None) -> None:
        """Refund the allowance the request did not generate (all of it when it failed).

        ``completion.usage.generated_tokens`` counts tool calls written, so a coordinator turn
        pays for its calls. A refund never exceeds the allowance.
        """
        if self._open.pop(reservation.number, None) is None:
            raise ValueError(f"research request #{reservation.number} is not open (settled twice?)")
        key = self._keys.pop(reservation.number)
        if completion is None:
            generated = 0
            # The model's cache may hold anything now (a partial evaluation, nothing): the
            # next request shares nothing with this one, the conservative charge.
            if self._previous.get(key, (None,))[0] == reservation.number:
                del self._previous[key]
        else:
            generated = max(0, completion.usage.generated_tokens)
        refund = reservation.allowance - min(generated, reservation.allowance)
        self.remaining += refund
        self.refunded += refund
        self.ledger.append(
            LedgerEntry(kind="refund", number=reservation.number, amount=refund, remaining=self.remaining)
        )


async def charged_complete(
    budget: Any,
    model: Model,
    messages: Sequence[Message],
    tools: Sequence[ToolSpec],
    *,
    max_tokens: int,
    timeout: float | None,
    on_text: TextCallback | None = None,
    on_retry: RetryCallback | None = None,
    started: Callable[[], None] | None = None,
    on_reasoning: TextCallback | None = None,
) -> Completion:
    """``model.complete`` charged to ``budget`` (a ``ResearchBudget``, or None for no budget).

    The reservation is made once the request holds the inference lock, in a worker thread
    (measuring tokenizes the prompt); ``started`` is called after it, when the request really
    starts. A request whose deadline passes in the queue is never charged. Settled on success,
    failure and cancellation alike. A reasoning model's thinking is output like any other: it
    is in ``generated_tokens``, so it is charged (not refunded) like the answer's text.
    """
    reservation: Reservation | None = None

    async def start() -> None:
        nonlocal reservation
        if budget is not None:
            # Shielded: a reservation once made must be known here, to be settled.
            with anyio.CancelScope(shield=True):
                reservation = await in_worker(budget.reserve, model, messages, tools, max_tokens)
        if started is not None:
            started()

    completion: Completion | None = None
    try:
        completion = await model.complete(
            messages,
            tools,
            max_tokens=max_tokens,
            timeout=timeout,
            on_text=on_text,
            on_start=start,
            on_retry=on_retry,
            on_reasoning=on_reasoning,
        )
        return completion
    finally:
        if reservation is not None:
            budget.settle(reservation, completion)
