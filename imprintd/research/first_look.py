"""The first look: the workspace is searched with the question before the model's first round
(docs/decisions.md, "First look").

Small local models rarely call tools; asked about a workspace they answer from what they
believe. Editors' assistants retrieve context before the model runs for that reason. So before
the first round of a reply with a workspace, the research loop runs the workspace ``search``
itself, with the question's words (and, for a follow-up, those of the exchange it follows), and
the model starts with the best hits as this reply's first research result: a tool exchange like
any other, numbered and cited, fitted and charged like research. The model may still search and
read more.

The query and its bounds are decided here; the loop runs it (``research/loop.py``).
"""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from imprintd.context.history import is_stopword
from imprintd.messages import Message
from imprintd.tools.base import Hit, Tool, ToolResult
from imprintd.tools.workspace import format_hits

#: How the first look's call ids begin: the shape of the ids Imprint gives parsed calls
#: (``call_`` and hex digits), with a letter no hex id has, so it never takes a model's id.
CALL_ID_PREFIX = "call_look"
#: The share of the prompt's room (the context less the output allowance) the first look may
#: fill: it is evidence to start from, not the whole of the research.
SHARE = 0.25
#: Words a follow-up takes from the exchange it follows, after the question's own.
FOLLOW_UP_WORDS = 12
#: Words in all: the workspace search uses at most 32.
MAX_WORDS = 24
#: Lines of the hits repeated at the end of the look, those sharing the most (and the rarest)
#: words with the query: where a small model looks last, the line that answers is most often one.
BEST_LINES = 5
#: A best line longer than this is cut (it is a pointer into the hit above, not the hit).
BEST_LINE_CHARS = 160
BEST_LINES_HEADING = "The lines above that match the question best:"

_WORD = re.compile(r"[^\W_](?:[\w.]*[^\W_])?")
#: Question words the conversation's stop words do not need but a workspace search does.
_ALSO_COMMON = frozenset(
    ["many", "much", "any", "some", "all", "also", "should", "may", "might", "must", "just", "only"]
)


def new_call_id() -> str:
    """A fresh id for one reply's first look (ids stay unique across a session's replies)."""
    return CALL_ID_PREFIX + secrets.token_hex(4)


def is_first_look(call_id: str) -> bool:
    return call_id.startswith(CALL_ID_PREFIX)


def content_words(text: str) -> list[str]:
    """The words of ``text`` worth searching for: stop words and single letters left out, in order, once each."""
    words = [word for word in _WORD.findall(text) if len(word) > 1 and not _common(word.lower())]
    return list(dict.fromkeys(words))


def query(question: str, earlier: Sequence[Message]) -> str | None:
    """The first look's search query, or None when the question has nothing to search for.

    A follow-up ("and its port?") adds the words of the exchange it follows: the last question
    and answer before it.
    """
    own = content_words(question)
    if not own:
        return None
    words = own
    exchange = _last_exchange(earlier)
    if exchange:
        extra = [word for word in content_words(" ".join(m.content for m in exchange)) if word not in own]
        words = own + extra[:FOLLOW_UP_WORDS]
    return " ".join(words[:MAX_WORDS])


def _common(word: str) -> bool:
    return is_stopword(word) or word in _ALSO_COMMON


def _last_exchange(earlier: Sequence[Message]) -> list[Message]:
    """The last user question before this one and the assistant's answer to it."""
    for index in range(len(earlier) - 1, -1, -1):
        if earlier[index].role == "user":
            answer = [m for m in earlier[index + 1 :] if m.role == "assistant" and not m.tool_calls][-1:]
            return [earlier[index], *answer]
    return []


def token_share(n_ctx: int, max_tokens: int) -> int:
    """Tokens the first look's result may take in the prompt."""
    return int((n_ctx - max_tokens) * SHARE)


class FirstLookSearch:
    """The workspace ``search``, as the first look runs it: its best hits within ``share`` tokens.

    The lowest-ranked hits go until the result fits; the title says it was Imprint's look,
    not a call the model made.
    """

    def __init__(self, search: Tool, count_text: Callable[[str], int], share: int) -> None:
        self.search = search
        self.spec = search.spec
        self._count = count_text
        self._share = share

    def title(self, arguments: Mapping[str, Any]) -> str:
        return f"Looking in the workspace for “{arguments.get('query', '')}”"

    async def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        result = await self.search.run(arguments)
        words = content_words(str(arguments.get("query", "")))
        hits = list(result.hits)
        if not hits:
            return result
        while True:
            footer = best_lines_text(hits, words)
            text = format_hits(hits) + (f"\n\n{footer}" if footer else "")
            if len(hits) == 1 or self._count(text) <= self._share:
                break
            hits.pop()
        return msgspec.structs.replace(
            result, text=text, hits=tuple(hits), evidence=tuple(hit.id for hit in hits), footer=footer
        )


def best_lines_text(hits: Sequence[Hit], words: Sequence[str]) -> str:
    """The heading and the best lines (``best_lines``), or nothing when no line shares a word."""
    lines = best_lines(hits, words)
    return "\n".join([BEST_LINES_HEADING, *lines]) if lines else ""


def best_lines(hits: Sequence[Hit], words: Sequence[str], limit: int = BEST_LINES) -> list[str]:
    """``path:line: text`` for the hits' lines that share the most query words, rarest counting most.

    A word counts in a line that contains it anywhere (``timeout`` in ``DEFAULT_TIMEOUT_CONFIG``);
    its weight is the log of how rare it is among the hits' lines. Ties keep the search's order.
    """
    terms = list(dict.fromkeys(word.lower() for word in words if len(word) > 2))
    lines = [
        (hit.path, hit.start_line + offset, text.strip())
        for hit in hits
        for offset, text in enumerate(hit.excerpt.split("\n"))
        if text.strip()
    ]
    lowered = [text.lower() for _, _, text in lines]
    weights = {}
    for term in terms:
        holding = sum(term in line for line in lowered)
        if holding:
            weights[term] = math.log(1 + len(lines) / holding)
    scores = [sum(weight for term, weight in weights.items() if term in line) for line in lowered]
    ranked = sorted(range(len(lines)), key=lambda index: -scores[index])
    chosen: list[str] = []
    seen: set[str] = set()
    for index in ranked:
        path, number, text = lines[index]
        if scores[index] <= 0 or len(chosen) == limit:
            break
        if text in seen:
            continue
        seen.add(text)
        cut = text if len(text) <= BEST_LINE_CHARS else text[: BEST_LINE_CHARS - 1] + "…"
        chosen.append(f"{path}:{number}: {cut}")
    return chosen
