"""A search tool scripted per query and a reply scope, for tests of the research loop and its budget."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from imprintd import messages as msg
from imprintd.context.originals import ReplySections
from imprintd.messages import ToolSpec
from imprintd.research.loop import ReplyScope
from imprintd.tools.base import Hit, ToolError, ToolResult
from tests.recording import RecordingEvents


class FakeSearch:
    """A search tool whose results are scripted per query; counts how often it really ran."""

    spec = ToolSpec(
        name="search",
        description="Search the workspace.",
        parameters={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    )

    def __init__(self, results: dict[str, ToolResult] | None = None) -> None:
        self.results = results or {}
        self.runs: list[str] = []

    def title(self, arguments: Mapping[str, Any]) -> str:
        return f"Searching the workspace for “{arguments.get('query', '')}”"

    async def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        query = arguments.get("query")
        if not isinstance(query, str):
            raise ToolError("query must be a string")
        self.runs.append(query)
        if query in self.results:
            return self.results[query]
        hit = Hit(
            id=f"h{len(self.runs)}",
            path=f"src/{query.replace(' ', '_')}.py",
            start_line=1,
            end_line=3,
            score=1.0,
            excerpt=f"passage about {query}",
        )
        return ToolResult(
            text=f"[hit {hit.id}] {hit.path}:1-3\n{hit.excerpt}", subject=query, evidence=(hit.id,), hits=(hit,)
        )


def scope(model, events=None, **overrides) -> ReplyScope:
    values = dict(
        model=model,
        events=events or RecordingEvents(),
        sections=ReplySections("r1"),
        max_tokens=256,
        analysis_workers=2,
        token_budget=65536,
        time_budget=300.0,
    )
    values.update(overrides)
    return ReplyScope(**values)


SYSTEM = msg.system("You are Imprint.")
