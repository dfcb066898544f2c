"""Research: the loop, its token budget, and notes for the final answer (docs/architecture.md,
"research/: rounds, budget and the final answer")."""
