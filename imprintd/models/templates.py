"""A GGUF's chat template, rendered for every prompt the daemon makes.

``ChatTemplate`` renders core messages through the template in a Jinja sandbox set up as
llama-cpp-python's and Hugging Face's are (``trim_blocks``, ``lstrip_blocks``, ``loopcontrols``,
the ``{% generation %}`` tag ignored, ``tojson`` not escaping HTML). What it learns of the
template once, by rendering probes, decides how messages are handed over:

* whether it renders tool schemas at all (else the tools are described in the system prompt and
  calls are JSON in text, ``json-fallback``), and which call format it writes
  (``chat_formats/table.py``, ``template_format`` for a template not in use);
* whether it renders earlier calls from ``tool_calls``, with their arguments as a mapping or as a
  JSON string; where it renders none, the calls are written into the message's text in the
  family's own syntax, and where it drops the text written beside a call, that text goes in an
  assistant message of its own;
* its reasoning markers, whether ``enable_thinking`` (or Granite's ``thinking``) switches them,
  and whether the generation prompt already opens them.

What every template is given: ``tools`` only when there are some (``tools is defined`` must
not hold for None); tool-call ids in the form the format demands (Mistral: 9 alphanumerics);
never an empty assistant message. A conversation a template refuses is tried once more with
consecutive same-role messages merged and a user turn first; a template that still refuses
raises ``ModelError`` naming the model, the template's own message and the setting to change.

Counting (``count_renders``) never renders a message where a template forbids it: a message's
tokens are the difference between two whole renders, with a lead-in the template accepts.

A reply is read back with the template's markers too: ``reasoning_splitter`` and
``reply_filter`` keep the family's reasoning, calls, slips and stray markers out of the answer.

Everything here is pure: no model, no I/O.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.meta
from jinja2.sandbox import ImmutableSandboxedEnvironment

from imprintd.messages import Message, ToolCall, ToolSpec
from imprintd.models.base import ModelError
from imprintd.models.chat_formats.calls import VisibleTextFilter, tools_prompt
from imprintd.models.chat_formats.format import ChatFormat
from imprintd.models.chat_formats.json_fallback import JSON_FALLBACK
from imprintd.models.chat_formats.reasoning import REASONING_SWITCHES, Reasoning, ReasoningSplitter
from imprintd.models.chat_formats.table import detect_format, marked_format

#: What a model's turn says when it said nothing (templates such as Ministral 3 refuse an empty
#: assistant message, and an empty turn tells the model nothing either).
EMPTY_REPLY = "(no reply)"
#: The lead-in counts are measured after (its content does not matter).
LEAD_SYSTEM = Message(role="system", content="You are a helpful assistant.")
LEAD_USER = Message(role="user", content="Hello.")
#: What stands first when a conversation a template refuses does not start with a user turn.
EARLIER = "(earlier conversation left out)"
#: What to change when a template cannot render a conversation.
SETTING_HINT = "set chat.model to a GGUF whose chat template renders it (or report the model)"

_PROBE_TOOL = ToolSpec(
    name="imprint_probe_tool_5e1c", description="Probe.", parameters={"type": "object", "properties": {}}
)
_PROBE_CALL = ToolCall(id="probecall1", name="imprint_probe_tool_5e1c", arguments={"probe_key": "probe_value_7a2d"})
_PROBE_TEXT = "probe_text_3b9f"


class _IgnoreGeneration(jinja2.ext.Extension):
    """Hugging Face's ``{% generation %}`` tag: its body is rendered as is."""

    tags = {"generation"}

    def parse(self, parser: Any) -> Any:
        parser.stream.skip(1)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _tojson(
    value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _environment() -> ImmutableSandboxedEnvironment:
    """The Jinja sandbox a chat template runs in, set up as llama-cpp-python's and Hugging Face's."""
    environment = ImmutableSandboxedEnvironment(
        loader=jinja2.BaseLoader(),
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_IgnoreGeneration, jinja2.ext.loopcontrols],
    )
    environment.filters["tojson"] = _tojson
    return environment


class TemplateError(ModelError):
    """A chat template refused a conversation."""


class ChatTemplate:
    """One model's chat template and what it was found to need."""

    def __init__(
        self,
        source: str,
        *,
        model_name: str,
        bos_token: str = "",
        eos_token: str = "",
        today: datetime | None = None,
        thinking: bool = False,
    ) -> None:
        environment = _environment()
        self.source = source
        self.model_name = model_name
        try:
            self._template = environment.from_string(source)
            variables = jinja2.meta.find_undeclared_variables(environment.parse(source))
        except jinja2.TemplateError as error:
            raise TemplateError(f"the chat template of {model_name} does not parse ({error}); {SETTING_HINT}") from None
        self._bos, self._eos = bos_token, eos_token
        day = today or datetime.now()
        # Templates may print the date; a fixed one keeps the prompt byte-stable, so its prefix is reused.
        self._strftime = day.strftime
        #: The template variables that switch reasoning, as the template reads them.
        self.switches = tuple(name for name in REASONING_SWITCHES if name in variables)
        self.thinking = thinking
        self.renders_tools = self._probe_tools()
        self.format: ChatFormat = detect_format(source, self.renders_tools)
        #: Whether tools reach the model through the template (else the system prompt describes them).
        self.native = self.renders_tools
        #: The syntax calls are parsed in: the family's, and JSON in text where the system
        #: prompt asked for it.
        syntax = self.format.syntax_in(source)
        if not self.native and self.format is not JSON_FALLBACK:
            syntax = dataclasses.replace(syntax, json_calls=True)
        self.call_format = (
            self.format if syntax is self.format.syntax else dataclasses.replace(self.format, syntax=syntax)
        )
        self.arguments_as_string, self.renders_calls, self.drops_text_beside_calls = self._probe_calls()
        #: The reasoning markers the template knows: looked for in every reply, even with the
        #: thinking switched off (a model may think anyway).
        self.markers = self.format.reasoning_in(source)
        self.reasoning, self.opens_reasoning = self._probe_reasoning()

    # -- facts -------------------------------------------------------------------------------
    @property
    def reasons(self) -> bool:
        """Whether the model thinks before it answers, as the template is rendered."""
        return self.reasoning is not None

    def _probe_tools(self) -> bool:
        try:
            text = self.render_dicts([{"role": "user", "content": "hi"}], [_PROBE_TOOL.as_openai()], generation=True)
        except TemplateError:  # a template that fails on tools does not support them
            return False
        return _PROBE_TOOL.name in text

    def _probe_calls(self) -> tuple[bool, bool, bool]:
        """(arguments as a JSON string, renders ``tool_calls`` at all, drops the text beside a call)."""
        tools = [_PROBE_TOOL.as_openai()] if self.native else None
        for as_string in (False, True):
            messages = [
                {"role": "user", "content": "hi"},
                self._call_dict(_PROBE_TEXT, (_PROBE_CALL,), as_string),
                {
                    "role": "tool",
                    "content": "ok",
                    "tool_call_id": self.format.template_id(_PROBE_CALL.id),
                    "name": _PROBE_CALL.name,
                },
            ]
            try:
                text = self.render_dicts(messages, tools, generation=True)
            except TemplateError:
                continue
            # A mapping printed as Python (``{'probe_key': …}``, DeepSeek-R1) wants the JSON string.
            if "probe_value_7a2d" in text and "'probe_key'" not in text:
                return as_string, True, _PROBE_TEXT not in text
        return False, False, False

    def _probe_reasoning(self) -> tuple[Reasoning | None, bool]:
        markers = self.markers
        if markers is None:
            return None, False
        prompt = [{"role": "user", "content": "hi"}]
        try:
            chosen = self.render_dicts(prompt, None, generation=True).rstrip()
            other = self._render_switched(prompt, not self.thinking).rstrip() if self.switches else chosen
        except TemplateError:
            return markers, False
        if chosen.endswith(markers.close):
            return None, False  # the prompt closed the thoughts: the model answers at once
        if self.switches and chosen != other and not self.thinking:
            return None, False  # switched off
        return markers, chosen.endswith(markers.open)

    # -- reading a reply ---------------------------------------------------------------------
    def reasoning_splitter(self) -> ReasoningSplitter:
        """What splits this model's reply into reasoning and answer; the family's stray markers
        are kept out of the reasoning."""
        return self.call_format.reasoning_splitter(self.markers, opened=self.opens_reasoning)

    def reply_filter(self, tools: Sequence[ToolSpec]) -> VisibleTextFilter:
        """What keeps this model's markup out of the answer as it streams: its calls, its slips,
        its stray markers and its reasoning markers written after the first block."""
        markers = (self.markers.open, self.markers.close) if self.markers is not None else ()
        return VisibleTextFilter(tools, self.call_format.syntax, markers=markers)

    # -- rendering ---------------------------------------------------------------------------
    def render(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (), *, generation: bool = True) -> str:
        """The prompt for ``messages`` (and ``tools``); ``TemplateError`` if the template refuses it.

        A conversation the template refuses is tried again in the shapes the strictest templates
        take, each only when the one before is refused: same-role messages merged and a user turn
        first; then tool exchanges written as text too; then the system message in the first
        user turn (templates without a system role, Gemma 2).
        """
        schemas = [t.as_openai() for t in tools] if tools and self.native else None
        dicts = self.template_messages(messages, tools)
        folded = normalize(self.template_messages(messages, tools, fold=True))
        shapes = [dicts, normalize(dicts), folded, system_in_first_user(folded)]
        first: TemplateError | None = None
        tried: list[list[dict[str, Any]]] = []
        for shape in shapes:
            if shape in tried:
                continue
            tried.append(shape)
            try:
                return self.render_dicts(shape, schemas, generation=generation)
            except TemplateError as error:
                first = first or error
        assert first is not None
        raise first

    def render_dicts(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *, generation: bool
    ) -> str:
        return self._render(messages, tools, generation, self.thinking)

    def _render_switched(self, messages: list[dict[str, Any]], thinking: bool) -> str:
        return self._render(messages, None, True, thinking)

    def _render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, generation: bool, thinking: bool
    ) -> str:
        def raise_exception(message: str) -> None:
            raise ValueError(message)

        context: dict[str, Any] = {
            "messages": messages,
            "bos_token": self._bos,
            "eos_token": self._eos,
            "add_generation_prompt": generation,
            "raise_exception": raise_exception,
            "strftime_now": self._strftime,
        }
        if tools:  # absent, not None: templates test ``tools is defined``
            context["tools"] = tools
        for switch in self.switches:
            context[switch] = thinking
        try:
            return self._template.render(**context)
        except Exception as error:  # jinja2's errors and the template's own raise_exception
            raise TemplateError(
                f"the chat template of {self.model_name} could not render the conversation ({error}); {SETTING_HINT}"
            ) from None

    # -- messages as the template takes them -----------------------------------------------------
    def template_messages(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (), *, fold: bool = False
    ) -> list[dict[str, Any]]:
        """``messages`` as this template takes them; with ``fold``, tool exchanges as plain text."""
        out: list[dict[str, Any]] = []
        for message in messages:
            out.extend(self._template_message(message, fold or not self.renders_calls))
        if tools and not self.native:
            # The template cannot show tools: describe them at the end of the first system
            # message (or in one of their own), keeping everything before it byte-stable.
            block = tools_prompt(tools)
            if out and out[0]["role"] == "system":
                out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{block}" if out[0]["content"] else block}
            else:
                out.insert(0, {"role": "system", "content": block})
        return out

    def _template_message(self, message: Message, fold: bool) -> list[dict[str, Any]]:
        """A core message as this template takes it (one, or two where a call's text would be lost).

        Templates that render ``tool_calls`` get them OpenAI/HF-shaped (arguments as the template
        reads them), and ``tool`` messages. Otherwise (``fold``) a past call is written into the
        text as the family writes calls, and a tool result is a user message naming the tool,
        which every template renders.
        """
        content = message.prompt_content
        if message.role == "tool":
            if fold:
                return [{"role": "user", "content": f"Result of the {message.name or 'tool'} call:\n{content}"}]
            return [
                {
                    "role": "tool",
                    "content": content,
                    "tool_call_id": self.format.template_id(message.tool_call_id or ""),
                    "name": message.name or "",
                }
            ]
        if not message.tool_calls:
            return [{"role": message.role, "content": content or _empty(message)}]
        if fold:
            calls = self.format.write_calls(message.tool_calls)
            return [{"role": message.role, "content": f"{content}\n{calls}" if content else calls}]
        if content and self.drops_text_beside_calls:
            return [
                {"role": "assistant", "content": content},
                self._call_dict("", message.tool_calls, self.arguments_as_string),
            ]
        return [self._call_dict(content, message.tool_calls, self.arguments_as_string)]

    def _call_dict(self, content: str, calls: Sequence[ToolCall], as_string: bool) -> dict[str, Any]:
        return {
            "role": "assistant",
            "content": content,
            "tool_calls": [
                {
                    "id": self.format.template_id(c.id),
                    "type": "function",
                    "function": {
                        "name": c.name,
                        "arguments": json.dumps(c.arguments, ensure_ascii=False) if as_string else c.arguments,
                    },
                }
                for c in calls
            ],
        }

    # -- counting ----------------------------------------------------------------------------------
    def count_renders(self, message: Message) -> tuple[str, str]:
        """Two renders whose difference is what ``message`` adds to a prompt: (without, with).

        The message follows a lead-in the template accepts: a user turn before an assistant
        message, an exchange before a user message, the call it answers before a tool result, a
        user turn after a system message where the template needs one (Qwen3.5). Lead-ins
        without a system message come first: templates move it (Mistral writes it into the last
        user turn) or add a default one when there is none, which both renders then hold. The
        first lead-in both of whose renders the template takes and that adds text is used;
        ``TemplateError`` when none does.
        """
        call = ToolCall(id=message.tool_call_id or "call", name=message.name or "tool", arguments={})
        caller = Message(role="assistant", tool_calls=(call,))
        answer = Message(role="assistant", content="Hi.")
        Lead = list[tuple[list[Message], list[Message]]]
        by_role: dict[str, Lead] = {
            "system": [([], []), ([], [LEAD_USER])],
            "tool": [([LEAD_USER, caller], []), ([LEAD_SYSTEM, LEAD_USER, caller], [])],
            "assistant": [([LEAD_USER], []), ([LEAD_SYSTEM, LEAD_USER], [])],
        }
        leads = by_role.get(message.role, [([LEAD_USER, answer], []), ([LEAD_SYSTEM], [])])
        failure: TemplateError | None = None
        found: tuple[str, str] | None = None
        for lead, trail in leads:
            try:
                base = self.render([*lead, *trail], generation=False) if lead or trail else ""
                full = self.render([*lead, message, *trail], generation=False)
            except TemplateError as error:
                failure = failure or error
                continue
            if len(full) > len(base):
                return base, full
            found = found or (base, full)
        if found is not None:
            return found
        assert failure is not None
        raise failure


#: How many templates' formats ``template_format`` remembers (by digest: the sources are not kept).
FORMATS_REMEMBERED = 64
_formats_seen: dict[bytes, ChatFormat] = {}
_formats_lock = threading.Lock()  # listings run in worker threads


def template_format(source: str) -> ChatFormat:
    """The chat format of a GGUF whose chat template is ``source``, as the model reports it once in
    use (``ChatTemplate.format``; ``json-fallback`` for a template that does not compile, as
    ``LocalModel.chat_format`` says then), told without loading it (``on_disk.py``'s listing).

    A template whose markers name its format is only compiled; one whose markers leave it open
    is rendered to see whether it shows tool schemas (Hermes) or not. Quantizations of one model
    share a template: each template is looked at once.
    """
    digest = hashlib.blake2b(source.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    with _formats_lock:
        known = _formats_seen.get(digest)
    if known is None:
        known = _unloaded_format(source)
        with _formats_lock:
            if len(_formats_seen) >= FORMATS_REMEMBERED:
                del _formats_seen[next(iter(_formats_seen))]
            _formats_seen[digest] = known
    return known


def _unloaded_format(source: str) -> ChatFormat:
    marked = marked_format(source)
    try:
        if marked is None:
            return ChatTemplate(source, model_name="the model").format
        _environment().from_string(source)
    # A template nested past what Jinja's parser takes raises RecursionError: it does not compile either.
    except (TemplateError, jinja2.TemplateError, RecursionError, MemoryError):
        return JSON_FALLBACK
    return marked


def _empty(message: Message) -> str:
    return EMPTY_REPLY if message.role == "assistant" else ""


def system_in_first_user(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with a leading system message written at the top of the first user turn."""
    if len(messages) < 2 or messages[0]["role"] != "system" or messages[1]["role"] != "user":
        return messages
    system, first = messages[0], messages[1]
    return [{**first, "content": f"{system['content']}\n\n{first['content']}"}, *messages[2:]]


def normalize(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` in the shape the strictest templates (Gemma, Mistral) accept: system first,
    then turns alternating from a user turn; consecutive same-role messages merged."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        last = out[-1] if out else None
        mergeable = role in ("user", "assistant") and "tool_calls" not in message
        if last is not None and mergeable and last["role"] == role and "tool_calls" not in last:
            out[-1] = {**last, "content": f"{last['content']}\n\n{message['content']}"}
            continue
        out.append(message)
    first = next((i for i, m in enumerate(out) if m["role"] != "system"), None)
    if first is not None and out[first]["role"] != "user":
        out.insert(first, {"role": "user", "content": EARLIER})
    return out
