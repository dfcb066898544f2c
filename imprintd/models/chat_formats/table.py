"""The chat-format table: every format's entry (``format.ChatFormat``, each defined in its
family's module), the order templates are matched in, and the names the wire uses.

Each entry says how to recognize it in a chat template (the markers the template writes, as
llama.cpp's ``common/chat.cpp`` detects them), how its model writes a call and how that is
parsed, how an earlier call is written back, which call ids its template accepts, the grammar a
call is finished under and the family's reasoning markers (docs/decisions.md, "Chat formats").
The format's ``name`` is the ``chatFormat`` the wire reports, for a model in use
(``imprint/modelChanged``) as for a GGUF on disk (``imprint/models``). The table is built
checked (``format.build_table``): an entry without a call grammar fails the import.

===============  =========================================================  ====================
format           a call as the model writes it                              families
===============  =========================================================  ====================
hermes           ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``   Qwen2.5, Qwen3,
                                                                            Granite 4, SmolLM3
qwen-xml         ``<tool_call><function=f><parameter=x>v</parameter>…``     Qwen3.5, Qwen3-Coder
llama3-json      ``{"name": …, "parameters": {…}}``, maybe after            Llama 3.x
                 ``<|python_tag|>``
mistral          ``[TOOL_CALLS][{"name": …, "arguments": {…}}]``            Mistral 7B v0.3, Nemo
mistral-args     ``[TOOL_CALLS]name[ARGS]{…}``                              Ministral 3
granite          ``<|tool_call|>[{"name": …, "arguments": {…}}]``           Granite 3.x
phi4-mini        ``functools[{…}]`` or ``<|tool_call|>{…}<|/tool_call|>``   Phi-4-mini
lfm2             ``<|tool_call_start|>[f(a="v")]<|tool_call_end|>``         LFM2, LFM2.5
gemma4           ``<|tool_call>call:f{a:<|"|>v<|"|>}<tool_call|>``          Gemma 4
deepseek-r1      ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function…``  DeepSeek-R1 distills
json-fallback    a bare or fenced ``{"name": …, "arguments": {…}}``         any template that
                                                                            renders no tools
===============  =========================================================  ====================

Everything here is pure: no model, no I/O.
"""

from __future__ import annotations

from imprintd.models.chat_formats.deepseek import DEEPSEEK_R1
from imprintd.models.chat_formats.format import ChatFormat, build_table
from imprintd.models.chat_formats.gemma4 import GEMMA4
from imprintd.models.chat_formats.granite import GRANITE
from imprintd.models.chat_formats.hermes import HERMES, QWEN_XML
from imprintd.models.chat_formats.json_fallback import JSON_FALLBACK
from imprintd.models.chat_formats.lfm2 import LFM2
from imprintd.models.chat_formats.llama3 import LLAMA3_JSON
from imprintd.models.chat_formats.mistral import MISTRAL, MISTRAL_ARGS
from imprintd.models.chat_formats.phi4 import PHI4_MINI

#: Detection order: the most specific markers first (``[ARGS]`` before ``[TOOL_CALLS]``, the XML
#: form before plain ``<tool_call>``).
FORMATS: tuple[ChatFormat, ...] = (
    MISTRAL_ARGS,
    MISTRAL,
    GEMMA4,
    DEEPSEEK_R1,
    LFM2,
    PHI4_MINI,
    GRANITE,
    QWEN_XML,
    HERMES,
    LLAMA3_JSON,
)
BY_NAME: dict[str, ChatFormat] = build_table((*FORMATS, JSON_FALLBACK))


def marked_format(template: str) -> ChatFormat | None:
    """The first format whose markers ``template`` writes; None when none does."""
    return next((f for f in FORMATS if f.matches(template)), None)


def detect_format(template: str, renders_tools: bool) -> ChatFormat:
    """The format a model with ``template`` writes calls in: the first whose markers the template
    writes; else Hermes where the template renders tool schemas (the most common training), and
    ``json-fallback`` for a template that knows no tool calls."""
    return marked_format(template) or (HERMES if renders_tools else JSON_FALLBACK)
