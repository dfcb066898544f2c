"""The reply's time budget: ``chat.research_time_budget`` bounds the whole reply.

See docs/decisions.md, "When research stops".

The clock starts when the reply's workspace index is up to date. Everything the reply does
after that counts against it: the running summary (ADR 0141), coordinator rounds and their tools, section
analysis (ADR 0093) and the final answer written from notes (ADR 0127). A share of the
budget is kept for that final answer: research (summary, rounds, section workers) may use
the budget less this reserve, and the final answer gets whatever is left of the whole
budget, at most its own 120 seconds. So a reply ends within about the budget, whatever the
model does.

    clock = ReplyClock(300.0)    # once the reply's tools are ready
    clock.research_left()        # seconds research may still use (≤ 0: stop)
    clock.final_left()           # seconds the final answer may use

Reading the time needs a running event loop (``anyio.current_time``).
"""

from __future__ import annotations

import anyio

#: The final answer's own limit (ADR 0101, kept by ADR 0127); the budget can only shorten it.
FINAL_TIMEOUT_S = 120.0
#: The share of the time budget kept for the final answer, at most FINAL_TIMEOUT_S.
FINAL_SHARE = 0.2


class ReplyClock:
    """One reply's time budget; see the module docstring."""

    def __init__(self, budget_s: float) -> None:
        if budget_s <= 0:
            raise ValueError(f"a time budget must be positive, not {budget_s}")
        self.budget_s = float(budget_s)
        self.final_reserve_s = min(FINAL_TIMEOUT_S, self.budget_s * FINAL_SHARE)
        self.started = anyio.current_time()

    def elapsed(self) -> float:
        return anyio.current_time() - self.started

    def research_left(self) -> float:
        """Seconds research may still use: the budget less the final answer's reserve."""
        return self.budget_s - self.final_reserve_s - self.elapsed()

    def final_left(self) -> float:
        """Seconds the final answer may use: what is left of the whole budget, at most 120."""
        return max(0.0, min(FINAL_TIMEOUT_S, self.budget_s - self.elapsed()))
