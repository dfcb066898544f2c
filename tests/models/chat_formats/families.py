"""The families the conformance suite checks: each vendored template, what should be detected in
it, and its model's own tool-call output.

Samples marked ``test-chat.cpp`` are from llama.cpp's parser tests (``tests/test-chat.cpp``, MIT,
as vendored in the llama-cpp-python 0.3.36 sdist on PyPI), with their tool names; the others
follow the format as the family's template writes an earlier call.

Three templates (``*.reconstructed.jinja``) are not the models' own files, which no package this
project can use ships, but reconstructions that write each format as its model card documents
it (see each file's header): Phi-4-mini's, Gemma 3's and Mistral 7B v0.3's. So every chat
format is checked, and run end to end, with a template of its family.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates"


@dataclass(frozen=True)
class Family:
    name: str
    template: str
    #: The chat format detected (``chat_formats/table.py``).
    format: str
    #: Whether the model reasons with chat.reasoning on / off.
    reasons_on: bool
    reasons_off: bool
    #: A call as the model writes it, and the (name, arguments) it holds.
    sample: str = ""
    call: tuple[str, dict] = ("", {})
    #: A reply with reasoning as the model writes it (after the generation prompt).
    thinking: str = ""

    @property
    def source(self) -> str:
        return (TEMPLATES / self.template).read_text(encoding="utf-8")


THINK_REPLY = "<think>\nThe port is in config.\n</think>\n\nIt is 8080."

FAMILIES = (
    Family(
        "qwen3",
        "Qwen-Qwen3-0.6B.jinja",
        "hermes",
        True,
        False,
        '<tool_call>\n{"name": "get_time", "arguments": {"city": "Paris"}}\n</tool_call>',
        ("get_time", {"city": "Paris"}),
        THINK_REPLY,
    ),
    Family(
        "qwen2.5",
        "Qwen-Qwen2.5-7B-Instruct.jinja",
        "hermes",
        False,
        False,
        '<tool_call>\n{"name": "get_time", "arguments": {"city": "Paris"}}\n</tool_call>',
        ("get_time", {"city": "Paris"}),
    ),
    Family(
        "qwen3.5",
        "Qwen3.5-4B.jinja",
        "qwen-xml",
        True,
        False,
        # test-chat.cpp (Qwen3-Coder / Qwen3.5 XML form)
        "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>",
        ("special_function", {"arg1": 1}),
        "The port is in config.\n</think>\n\nIt is 8080.",  # the prompt opened <think>
    ),
    Family(
        "qwen3-coder",
        "Qwen3-Coder.jinja",
        "qwen-xml",
        False,
        False,
        "<tool_call>\n<function=get_time>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
        ("get_time", {"city": "Paris"}),
    ),
    Family(
        "llama3.2",
        "meta-llama-Llama-3.2-3B-Instruct.jinja",
        "llama3-json",
        False,
        False,
        '{"name": "get_time", "parameters": {"city": "Paris"}}',
        ("get_time", {"city": "Paris"}),
    ),
    Family(
        "llama3.1",
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        "llama3-json",
        False,
        False,
        '<|python_tag|>{"name": "get_time", "parameters": {"city": "Paris"}}',
        ("get_time", {"city": "Paris"}),
    ),
    Family(
        "granite3.3",
        "ibm-granite-granite-3.3-2B-Instruct.jinja",
        "granite",
        True,
        False,
        '<|tool_call|>[{"name": "get_time", "arguments": {"city": "Paris"}}]',
        ("get_time", {"city": "Paris"}),
        THINK_REPLY,
    ),
    Family(
        "granite4",
        "ibm-granite-granite-4.0.jinja",
        "hermes",
        False,
        False,
        '<tool_call>\n{"name": "get_time", "arguments": {"city": "Paris"}}\n</tool_call>',
        ("get_time", {"city": "Paris"}),
    ),
    Family(
        "mistral-nemo",
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        "mistral",
        False,
        False,
        # test-chat.cpp
        '[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, "id": "123456789"}]',
        ("special_function", {"arg1": 1}),
    ),
    Family(
        "ministral3",
        "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
        "mistral-args",
        True,
        True,  # no switch: it always reasons
        # test-chat.cpp
        '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}',
        ("special_function", {"arg1": 1}),
        "[THINK]The port is in config.[/THINK]It is 8080.",
    ),
    Family(
        "gemma4",
        "google-gemma-4-31B-it.jinja",
        "gemma4",
        True,
        False,
        # test-chat.cpp
        '<|tool_call>call:get_time{city:<|"|>Paris<|"|>}<tool_call|>',
        ("get_time", {"city": "Paris"}),
        "<|channel>thought\nThe port is in config.<channel|>It is 8080.",
    ),
    Family(
        "smollm3",
        "HuggingFaceTB-SmolLM3-3B.jinja",
        "json-fallback",  # this template (Unsloth's edit) renders no tools
        True,
        False,
        '<tool_call>\n{"name": "get_time", "arguments": {"city": "Paris"}}\n</tool_call>',
        ("get_time", {"city": "Paris"}),
        THINK_REPLY,
    ),
    Family(
        "lfm2",
        "LFM2-8B-A1B.jinja",
        "lfm2",
        False,
        False,
        # test-chat.cpp
        '<|tool_call_start|>[get_time(city="Paris")]<|tool_call_end|>',
        ("get_time", {"city": "Paris"}),
    ),
    Family(
        "lfm2.5",
        "LFM2.5-8B-A1B.jinja",
        "lfm2",
        True,
        True,
        '<|tool_call_start|>[get_time(city="Paris")]<|tool_call_end|>',
        ("get_time", {"city": "Paris"}),
        THINK_REPLY,
    ),
    Family(
        "lfm2.5-instruct",
        "LFM2.5-Instruct.jinja",
        "lfm2",
        False,
        False,
        '<|tool_call_start|>[get_time(city="Paris")]<|tool_call_end|>',
        ("get_time", {"city": "Paris"}),
    ),
    Family(
        "deepseek-r1-qwen",
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
        "deepseek-r1",
        True,
        False,
        # test-chat.cpp
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>special_function\n"
        '```json\n{"arg1": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        ("special_function", {"arg1": 1}),
        "The port is in config.\n</think>\n\nIt is 8080.",  # the prompt opened <think>
    ),
    Family(
        "deepseek-r1-llama",
        "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
        "deepseek-r1",
        True,
        True,
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>special_function\n"
        '```json\n{"arg1": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        ("special_function", {"arg1": 1}),
        THINK_REPLY,
    ),
    Family("gemma2", "google-gemma-2-2b-it.jinja", "json-fallback", False, False),
    Family("phi3.5", "microsoft-Phi-3.5-mini-instruct.jinja", "json-fallback", False, False),
    # Reconstructions (see the module's docstring).
    Family(
        "phi4-mini",
        "microsoft-Phi-4-mini-instruct.reconstructed.jinja",
        "phi4-mini",
        False,
        False,
        'functools[{"name": "special_function", "arguments": {"arg1": 1}}]',
        ("special_function", {"arg1": 1}),
    ),
    Family(
        "gemma3",
        "google-gemma-3-it.reconstructed.jinja",
        "json-fallback",
        False,
        False,
        '```json\n{"name": "get_time", "arguments": {"city": "Paris"}}\n```',
        ("get_time", {"city": "Paris"}),
    ),
    Family(
        "mistral-7b-v0.3",
        "mistralai-Mistral-7B-Instruct-v0.3.reconstructed.jinja",
        "mistral",
        False,
        False,
        '[TOOL_CALLS] [{"name": "get_time", "arguments": {"city": "Paris"}}]',
        ("get_time", {"city": "Paris"}),
    ),
)
