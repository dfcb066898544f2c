"""What a chat format is: one ``ChatFormat`` entry says everything the provider needs of one way
of writing tool calls, as llama.cpp's ``common/chat.cpp`` derives a family's prompt, parser,
grammar and thinking tags from one definition.

An entry yields:

* **detection**: the markers a chat template writes when its model writes this format
  (``matches``; ``table.detect_format`` tries the entries in order);
* **the parser**: the call syntax (``calls.CallSyntax``: the openings a call starts with, the
  block parser, the slips and stray markers), which a template may vary (``syntax_in``:
  Qwen3-Coder takes a bare ``<function=…>`` as a call, Qwen3.5 does not);
* **earlier calls**: how a call is written back into a message's text where a template does not
  render ``tool_calls`` (``write_calls``), and the call ids its template accepts
  (``template_id``: Mistral's must be 9 alphanumerics);
* **the call grammar**: what follows a call's opening in the family's syntax (``grammar``) and
  which key a JSON call's arguments go under (``arguments_key``); ``build_table`` refuses an
  entry without one, so no format silently gets another's grammar;
* **reasoning**: the family's thinking markers (``reasoning``, looked for in a template before
  the others: ``reasoning_in``), and the markers that end the thoughts without closing them
  (``thoughts_end_at``), for the splitter (``reasoning_splitter``).

``CallWatch`` is what the local provider runs of it while a reply streams: it watches for the
moment a call opens and gives the grammar to finish it under.

Everything here is pure: no model, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from imprintd.messages import ToolCall, ToolSpec
from imprintd.models.chat_formats.calls import CallSyntax
from imprintd.models.chat_formats.grammar import ArgumentRules, CallOpening, find_opening, json_call_rest, literal
from imprintd.models.chat_formats.reasoning import THINK, Reasoning, ReasoningSplitter, detect_reasoning

#: Writes calls as the family's model does (an earlier call a template does not render).
Writer = Callable[[Sequence[ToolCall]], str]
#: The grammar of what follows a call's opening, in the family's syntax, from one call's rules.
GrammarBody = Callable[[ArgumentRules], str]


def same_id(call_id: str) -> str:
    """A call id as most templates take it: unchanged."""
    return call_id


@dataclass(frozen=True, kw_only=True)
class ChatFormat:
    """One way of writing tool calls and reasoning, and all the provider needs to know of it."""

    name: str
    #: The families known to write it (for the README and ``imprintd config``).
    families: str
    # -- detection
    #: Markers a template must all contain to be this format (empty: never detected, a fallback).
    markers: tuple[str, ...] = ()
    #: Markers any one of which also identifies it.
    any_markers: tuple[str, ...] = ()
    # -- the parser
    syntax: CallSyntax
    #: The syntax a given template's model writes, where the family's templates differ.
    template_syntax: Callable[[str], CallSyntax] | None = None
    # -- earlier calls
    write_calls: Writer
    #: How a call id is written for the template.
    template_id: Callable[[str], str] = same_id
    # -- the call grammar
    #: What follows a call's own opening; None only to be refused by ``build_table``.
    grammar: GrammarBody | None = None
    #: The opening the family's calls start with where the grammar takes over ("" for the JSON form).
    grammar_opening: str = ""
    #: The key a JSON call's arguments go under (Llama 3.x writes ``parameters``).
    arguments_key: str = "arguments"
    # -- reasoning
    #: The family's thinking markers.
    reasoning: Reasoning = THINK
    #: Markers that end the thoughts without closing them (Qwen3.5 may open a call first).
    thoughts_end_at: tuple[str, ...] = ()

    def matches(self, template: str) -> bool:
        """Whether ``template`` writes this format's markers."""
        if self.markers and all(marker in template for marker in self.markers):
            return True
        return any(marker in template for marker in self.any_markers)

    def syntax_in(self, template: str) -> CallSyntax:
        """The syntax a model with ``template`` writes calls in."""
        return self.template_syntax(template) if self.template_syntax is not None else self.syntax

    def reasoning_in(self, template: str) -> Reasoning | None:
        """The reasoning markers ``template`` knows, the family's own first; None: it does not reason."""
        return detect_reasoning(template, self.reasoning)

    def reasoning_splitter(self, markers: Reasoning | None, *, opened: bool) -> ReasoningSplitter:
        """What splits a reply into reasoning and answer by ``markers``; the syntax's stray markers
        are kept out of the reasoning."""
        return ReasoningSplitter(markers, opened=opened, stray=self.syntax.stray, ends=self.thoughts_end_at)

    def call_grammar(self, tools: Sequence[ToolSpec], opening: CallOpening, written: str) -> str:
        """GBNF for ``written`` followed by the rest of the call ``opening`` began: in this
        format's syntax after one of its own openings, as ``json_call_rest`` after a JSON one."""
        if self.grammar is None:
            raise ValueError(f"the chat format {self.name!r} has no call grammar")
        rules = ArgumentRules(tools)
        if opening.shape is not None:
            rest = json_call_rest(rules, opening.shape, self.arguments_key)
        else:
            rest = self.grammar(rules)
        rules.add("root", f"{literal(written)} {rest}")
        return rules.grammar()


def build_table(formats: Iterable[ChatFormat]) -> dict[str, ChatFormat]:
    """The formats by name; ``ValueError`` for an entry without a call grammar or a name taken twice."""
    table: dict[str, ChatFormat] = {}
    for chat_format in formats:
        if chat_format.grammar is None:
            raise ValueError(
                f"the chat format {chat_format.name!r} has no call grammar: its entry must say what "
                "follows a call's opening in its syntax (grammar=…)"
            )
        if chat_format.name in table:
            raise ValueError(f"two chat formats are named {chat_format.name!r}")
        table[chat_format.name] = chat_format
    return table


class CallWatch:
    """Watches a reply's text, piece by piece, for the moment it opens a tool call."""

    def __init__(self, tools: Sequence[ToolSpec], chat_format: ChatFormat) -> None:
        self._tools = tuple(tools)
        self._format: ChatFormat | None = chat_format if tools else None
        self._written = ""
        self._resume = 0

    def feed(self, piece: str) -> str | None:
        """The grammar to generate ``piece`` again under, when ``piece`` opens a call; else None.

        The grammar starts with the part of ``piece`` up to the opening's end, then the rest of
        the call. Once a call opened the watch is done: later pieces are not looked at.
        """
        if self._format is None:
            return None
        chat_format = self._format
        before = len(self._written)
        self._written += piece
        opening, self._resume = find_opening(self._written, chat_format.syntax, self._resume)
        if opening is None:
            return None
        self._format = None
        return chat_format.call_grammar(self._tools, opening, self._written[before : opening.end])

    @property
    def done(self) -> bool:
        return self._format is None
