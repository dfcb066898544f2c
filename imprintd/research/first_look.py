"""The first look: the workspace is searched with the question before the model's first round
(docs/decisions.md, "First look").

Small local models rarely call tools; asked about a workspace they answer from what they
believe. Editors' assistants retrieve context before the model runs for that reason. So before
the first round of a reply with a workspace, the research loop runs the workspace ``search``
itself, with the question's words (and, for a follow-up, those of the exchange it follows), and
the model starts with the best hits as this reply's first research result: a tool exchange like
any other, numbered and cited, fitted and charged like research. The model may still search and
read more. The result ends with the hits' lines that match the question best, each constant
they use followed by the line that binds it (the value asked for is often a constant's, bound in
another file). A look that finds nothing, or that does not fit whole beside the question, leaves
nothing: no exchange in the prompt, none stored.

The look is the daemon's, not the model's: ``conversation_history`` does not search it
(``context/history.py``), since its query is the user's own words and would outrank what was
said; it is recognised by its call id (``messages.FIRST_LOOK_CALL_PREFIX``, ``messages.is_first_look``).

The query, its bounds and those lines are decided here; the loop runs it (``research/loop.py``).
"""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from imprintd.messages import FIRST_LOOK_CALL_PREFIX, Message
from imprintd.offload import in_worker
from imprintd.store.history_terms import is_stopword
from imprintd.tools.base import Hit, Tool, ToolError, ToolResult
from imprintd.tools.index import binding_of
from imprintd.tools.workspace import SearchTool, format_hits

#: The share of the prompt's room (the context less the output allowance) the first look may
#: fill: it is evidence to start from, not the whole of the research.
SHARE = 0.25
#: The share in a room under ``SMALL_ROOM`` tokens. The look is new on every reply, so its share
#: of each prompt is the least a follow-up evaluates; in a small room a quarter of it is a third
#: of the prompt (with the question), and the saved state cannot help with that part.
SMALL_SHARE = 0.2
SMALL_ROOM = 4096
#: Words a follow-up takes from the exchange it follows, after the question's own.
FOLLOW_UP_WORDS = 12
#: Words in all: the workspace search uses at most 32.
MAX_WORDS = 24
#: Lines of the hits repeated at the end of the look, those sharing the most (and the rarest)
#: words with the query: where a small model looks last, the line that answers is most often one.
BEST_LINES = 5
#: A line scoring under this share of the best line's score is not a best line: it shares too
#: little with the question to point at the answer, and a small model copies values from any line
#: it is shown (ftp's default port given as 80, the port a comment about http's names).
MIN_SCORE_SHARE = 0.5
#: A best line longer than this is cut (it is a pointer into the hit above, not the hit).
BEST_LINE_CHARS = 160
BEST_LINES_HEADING = "The lines above that match the question best:"
#: The look's last line, before the question: a small model that reaches the end of a long
#: result has lost the question asked before it, and answers something else (or loops).
ASK_AGAIN = "Answer this question from the results above:"
#: A question longer than this is cut where the look repeats it.
ASK_AGAIN_CHARS = 500
#: A step title shows at most this many characters of the question.
TITLE_CHARS = 80
#: Constants the best lines use whose definitions follow them (``MAX_URL_LENGTH`` in
#: ``if len(url) > MAX_URL_LENGTH:``): the value a question asks for is where the name is bound.
DEFINITIONS = 3

#: A constant's name: capitals and digits with at least one underscore (``DEFAULT_LIMITS``).
_CONSTANT = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")
#: How much more a line counts that binds a query word's name to a value written out.
BINDING_WEIGHT = 1.5
#: ``name = value``, ``name: type = value``, ``"key": value`` and ``key=value`` (an argument).
_BINDING = re.compile(r"[\"']?([\w.-]+)[\"']?\s*(?::[^=]*?)?(?<![=!<>])=(?!=)\s*(.+)|[\"']([\w.-]+)[\"']\s*:\s*(.+)")
#: A value written out: a number, a quoted string, True or False.
_LITERAL = re.compile(r"(?<![\w.])\d|[\"']|\b(?:True|False|true|false)\b")

_WORD = re.compile(r"[^\W_](?:[\w.]*[^\W_])?")
# From a word's start only, and possessive: tried from every letter, a long word was quadratic.
_COMPOUND = re.compile(r"(?<![^\W_])[^\W_]++(?:-[^\W_]++)+")
#: Question words the conversation's stop words do not need but a workspace search does.
_ALSO_COMMON = frozenset(
    ["many", "much", "any", "some", "all", "also", "should", "may", "might", "must", "just", "only"]
)


def new_call_id() -> str:
    """A fresh id for one reply's first look (ids stay unique across a session's replies)."""
    return FIRST_LOOK_CALL_PREFIX + secrets.token_hex(4)


def step_title(question: str) -> str:
    """The look's step title: what the user asked, on one line and cut to ``TITLE_CHARS``; not the
    query, which carries words of the exchange before a follow-up."""
    asked = " ".join(question.split())
    if len(asked) > TITLE_CHARS:
        asked = asked[: TITLE_CHARS - 1].rstrip() + "…"
    return f"Looking in the workspace for “{asked}”"


def for_the_user(stored: str) -> str:
    """A stored look's result as the user is shown it: the hits, without the footer written for the
    model (the best lines again and the question asked again, ``_fit``)."""
    end = stored.rfind(f"\n\n{ASK_AGAIN} ")
    if end == -1:
        return stored
    best = stored.rfind(f"\n\n{BEST_LINES_HEADING}", 0, end)
    return stored[: best if best != -1 else end]


def content_words(text: str) -> list[str]:
    """The words of ``text`` worth searching for: stop words and single letters left out, in order, once each."""
    words = [word for word in _WORD.findall(text) if len(word) > 1 and not _common(word.lower())]
    # A hyphenated word is also searched written as one, as code names it (keep-alive: keepalive).
    words += [compound.replace("-", "") for compound in _COMPOUND.findall(text)]
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
    """Tokens the first look's result may take in the prompt: ``SHARE`` of the room, or
    ``SMALL_SHARE`` of a room under ``SMALL_ROOM`` tokens."""
    room = n_ctx - max_tokens
    return int(room * (SMALL_SHARE if room < SMALL_ROOM else SHARE))


class FirstLookSearch:
    """The workspace ``search``, as the first look runs it: its best hits within ``share`` tokens.

    The lowest-ranked hits go until the result fits; the result ends with their best lines and
    the ``question`` asked again. The title says it was Imprint's look, not a call the model made.
    """

    def __init__(self, search: Tool, count_text: Callable[[str], int], share: int, question: str) -> None:
        self.search = search
        self.spec = search.spec
        self._count = count_text
        self._share = share
        self._question = question
        self._looked: tuple[dict[str, Any], ToolResult] | None = None

    async def look(self, arguments: Mapping[str, Any]) -> ToolResult:
        """The look's result, searched once: ``run`` with the same arguments returns it again.

        The loop asks first, and runs the look as a call only when it found something: a look
        that finds nothing (or fails) would be an exchange saying so in every later prompt.
        """
        if self._looked is None or self._looked[0] != dict(arguments):
            try:
                result = await self._search(arguments)
            except ToolError as error:
                result = ToolResult(ok=False, text=f"Error: {error}")
            self._looked = (dict(arguments), result)
        return self._looked[1]

    def title(self, arguments: Mapping[str, Any]) -> str:
        return step_title(self._question)

    async def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        if self._looked is not None and self._looked[0] == dict(arguments):
            return self._looked[1]
        return await self._search(arguments)

    async def _search(self, arguments: Mapping[str, Any]) -> ToolResult:
        result = await self.search.run(arguments)
        words = content_words(str(arguments.get("query", "")))
        hits = list(result.hits)
        if not hits:
            return result
        best = best_lines(hits, words)
        definitions = await self._definitions(_constants_used(best, hits))
        question = " ".join(self._question.split())
        if len(question) > ASK_AGAIN_CHARS:
            question = question[: ASK_AGAIN_CHARS - 1] + "…"
        # Each try renders and counts the whole result: a worker's work, not the event loop's.
        return await in_worker(self._fit, result, hits, words, best, definitions, question)

    def _fit(
        self,
        result: ToolResult,
        hits: list[Hit],
        words: list[str],
        best: list[str],
        definitions: dict[str, Hit],
        question: str,
    ) -> ToolResult:
        """The result with the lowest-ranked hits left out until it fits the look's share."""
        while True:
            shown_best, bindings = best_lines_text(best, definitions)
            footer = "\n\n".join(part for part in (shown_best, f"{ASK_AGAIN} {question}") if part)
            # A binding the best lines show is a hit of its own, after the search's: numbered,
            # so an answer can cite the file that holds the value.
            shown = hits + bindings
            text = f"{format_hits(shown)}\n\n{footer}"
            if len(hits) == 1 or self._count(text) <= self._share:
                break
            hits.pop()
            best = best_lines(hits, words)
        return msgspec.structs.replace(
            result, text=text, hits=tuple(shown), evidence=tuple(hit.id for hit in shown), footer=footer
        )

    async def _definitions(self, names: Sequence[str]) -> dict[str, Hit]:
        """The line binding each name, as a one-line hit, where the workspace has one."""
        found = {}
        if isinstance(self.search, SearchTool):
            for name in names:
                hit = await self.search.definition(name)
                # One that only names another thing (``= UseClientDefault()``) answers nothing.
                if hit is not None and _LITERAL.search(hit.excerpt.partition("=")[2]):
                    found[name] = hit
        return found


def _lines(hits: Sequence[Hit]) -> list[tuple[str, int, str]]:
    """(path, line number, stripped text) of every non-blank line of the hits' excerpts."""
    return [
        (hit.path, hit.start_line + offset, text.strip())
        for hit in hits
        for offset, text in enumerate(hit.excerpt.split("\n"))
        if text.strip()
    ]


def _binding(line: str) -> tuple[str, str]:
    """The name a line binds and the value it binds it to, or ("", "")."""
    match = _BINDING.match(line)
    if match is None:
        return "", ""
    return (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))


def _pointer(path: str, number: int, text: str) -> str:
    """A line as the look names it: ``path:line: text``, cut past ``BEST_LINE_CHARS``."""
    cut = text if len(text) <= BEST_LINE_CHARS else text[: BEST_LINE_CHARS - 1] + "…"
    return f"{path}:{number}: {cut}"


def _constants_used(best: Sequence[str], hits: Sequence[Hit]) -> list[str]:
    """The constants the best lines use but do not bind, and the hits do not bind either."""
    bound = {
        match.group()
        for _, _, text in _lines(hits)
        for match in _CONSTANT.finditer(text)
        if re.match(binding_of(match.group()), text)
    }
    names: list[str] = []
    for pointer in best:
        text = pointer.split(": ", 1)[1]
        names.extend(name for name in _CONSTANT.findall(text) if name not in bound)
    return list(dict.fromkeys(names))[:DEFINITIONS]


def best_lines_text(best: Sequence[str], definitions: Mapping[str, Hit] | None = None) -> tuple[str, list[Hit]]:
    """The heading and the best lines (``best_lines``' ``best``), or nothing without any; and the
    bindings shown among them.

    After a line that uses a constant, the line that binds it (``definitions``: the constant's
    name to that line's hit), once.
    """
    lines, bindings = [], []
    for line in best:
        lines.append(line)
        for name in _CONSTANT.findall(line.split(": ", 1)[1]):
            binding = (definitions or {}).get(name)
            if binding is not None and binding not in bindings:
                bindings.append(binding)
                lines.append(_pointer(binding.path, binding.start_line, binding.excerpt))
    return ("\n".join([BEST_LINES_HEADING, *lines]) if lines else ""), bindings


def best_lines(hits: Sequence[Hit], words: Sequence[str], limit: int = BEST_LINES) -> list[str]:
    """``path:line: text`` for the hits' lines that share the most query words, rarest counting most.

    A word counts in a line that contains it anywhere (``timeout`` in ``DEFAULT_TIMEOUT_CONFIG``);
    its weight is the log of how rare it is among the hits' lines. Only lines scoring at least
    ``MIN_SCORE_SHARE`` of the best line's score are chosen. Ties keep the search's order.
    """
    terms = list(dict.fromkeys(word.lower() for word in words if len(word) > 2))
    lines = _lines(hits)
    lowered = [text.lower() for _, _, text in lines]
    weights = {}
    for term in terms:
        holding = sum(term in line for line in lowered)
        if holding:
            weights[term] = math.log(1 + len(lines) / holding)
    scores = [sum(weight for term, weight in weights.items() if term in line) for line in lowered]
    for index, line in enumerate(lowered):
        # A line binding a name the question uses to a value (``retries: int = 0``) states it.
        name, value = _binding(line)
        if name and _LITERAL.search(value) and any(term in name for term in weights):
            scores[index] *= BINDING_WEIGHT
    ranked = sorted(range(len(lines)), key=lambda index: -scores[index])
    enough = MIN_SCORE_SHARE * scores[ranked[0]] if ranked else 0.0
    chosen: list[str] = []
    seen: set[str] = set()
    for index in ranked:
        path, number, text = lines[index]
        if scores[index] <= 0 or scores[index] < enough or len(chosen) == limit:
            break
        if text in seen:
            continue
        seen.add(text)
        chosen.append(_pointer(path, number, text))
    return chosen
