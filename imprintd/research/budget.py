"""The research token budget, charged for the work each request does (ADR 0157).

A research request (coordinator round or section worker) is charged its formatted prompt
tokens past the leading messages it shares with the previous request on the same model
and tool offer, less 16 tokens kept charged for the next turn's header that a rendered
prefix adds, plus its whole output allowance, reserved before it starts. When it finishes,
the allowance it did not generate is refunded. A request starts only when its charge and
whole allowance fit in what remains, so no request crosses the budget.

Usage, for every research request::

    reservation = budget.reserve(model, messages, tools, max_tokens)  # or BudgetExhausted
    completion = None
    try:
        completion = await model.complete(messages, tools, max_tokens=max_tokens)
    finally:
        budget.settle(reservation, completion)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec

from imprintd.messages import Message, ToolSpec
from imprintd.models.base import Completion, Model

#: ADR 0157: of the shared prefix, this many tokens stay charged: the next turn's header
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
    for before, now in zip(previous, current):
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
        # The last request reserved per (model id, tool offer): the prefix a next request on
        # the same pair can share. Keyed by both, as the record words it, so a coordinator
        # round still shares with the previous round after section workers (no tools) ran;
        # ADR 0157 lists a model used by other work between rounds as an invalidation case.
        self._previous: dict[tuple[str, bytes], tuple[int, tuple[Message, ...]]] = {}
        self._open: dict[int, Reservation] = {}
        self._keys: dict[int, tuple[str, bytes]] = {}
        self._count = 0

    @property
    def open_reservations(self) -> tuple[Reservation, ...]:
        """Requests reserved and not yet settled (empty when research ended cleanly)."""
        return tuple(self._open.values())

    def measure(self, model: Model, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> tuple[int, int, int]:
        """(whole prompt, shared prefix, charge) for a request, without reserving it."""
        prompt = model.count_prompt(messages, tools)
        shared = 0
        previous = self._previous.get((model.model_id, _tools_key(tools)))
        if previous is not None:
            common = _common_leading(previous[1], messages)
            if common:
                shared = model.count_prompt(messages[:common], tools)  # the one extra count
        return prompt, shared, max(0, prompt - max(0, shared - HEADER_TOKENS))

    def reserve(self, model: Model, messages: Sequence[Message], tools: Sequence[ToolSpec],
                max_tokens: int) -> Reservation:
        """Charge a request before it starts, or raise BudgetExhausted and charge nothing."""
        if max_tokens < 0:
            raise ValueError(f"an output allowance cannot be negative ({max_tokens})")
        prompt, shared, charge = self.measure(model, messages, tools)
        if charge + max_tokens > self.remaining:
            raise BudgetExhausted(charge + max_tokens, charge, max_tokens, self.remaining)
        self._count += 1
        reservation = Reservation(number=self._count, model_id=model.model_id, prompt_tokens=prompt,
                                  shared_tokens=shared, prompt_charge=charge, allowance=max_tokens)
        self.remaining -= reservation.charge
        self.charged += reservation.charge
        self.ledger.append(LedgerEntry(kind="reserve", number=reservation.number,
                                       amount=reservation.charge, remaining=self.remaining))
        self._open[reservation.number] = reservation
        self.reservations.append(reservation)
        self._keys[reservation.number] = key = (model.model_id, _tools_key(tools))
        self._previous[key] = (reservation.number, tuple(messages))
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
        self.ledger.append(LedgerEntry(kind="refund", number=reservation.number,
                                       amount=refund, remaining=self.remaining))
