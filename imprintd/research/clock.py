"""The reply's time budget: ``chat.research_time_budget`` bounds the whole reply.

See docs/decisions.md, "When research stops".

The clock starts when the reply's workspace index is up to date. The running summary,
coordinator rounds and their tools, and section analysis count
against it: research may use the budget less a share kept for the final answer (20%, at
most 120 s). The final answer written from notes (docs/decisions.md, "Final answer from notes")
then keeps its own 120-second deadline, whatever research left: a slow local model writing it is not cut short
by time research spent. So a reply ends within the budget less that share plus 120 s (the
defaults: 240 s of research, then at most 120 s of answer), whatever the model does.

    clock = ReplyClock(300.0)    # once the reply's tools are ready
    clock.research_left()        # seconds research may still use (≤ 0: stop)

Reading the time needs a running event loop (``anyio.current_time``).
"""

from __future__ import annotations

import anyio

#: The final answer's own limit, whatever research left.
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
