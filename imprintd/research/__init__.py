"""Research: the loop, its token budget (ADR 0157), and notes for the final answer (ADR 0127)."""
