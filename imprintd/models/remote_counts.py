"""The remote estimate of a prompt's tokens (docs/decisions.md, "Counting tokens"), its caches and its calibration, for
``remote.py``'s ``RemoteModel`` (``EstimatedCounts`` is its counting half).

A served model's tokenizer is not available locally, so counting is the explicit UTF-8-byte
estimate; ``chat.n_ctx`` is the budget:

* text: ``ceil(utf8_bytes / 3)`` tokens. Three bytes per token over-counts English BPE text
  (about four bytes per token) and stays close for code and non-Latin text, so fitting errs on
  the side of room to spare;
* a message: its content, tool calls (as JSON) and name, plus ``MESSAGE_OVERHEAD`` for the role
  header and end marker a template adds;
* a prompt: the sum of its messages, each tool schema as its OpenAI JSON, plus
  ``PROMPT_OVERHEAD`` for the generation prompt. The estimate is additive by construction, so
  ``count_prompt == PROMPT_OVERHEAD + tools + sum(count_message)`` exactly.

The server's own ``usage.prompt_tokens`` of a prompt it took whole calibrates the estimate (a
factor within ``CALIBRATION_RANGE``), and a refusal for length or a prompt it cut raises it.
"""

from __future__ import annotations

import json
import math

import msgspec

from imprintd.messages import Message, ToolSpec

#: UTF-8 bytes per estimated token.
BYTES_PER_TOKEN = 3
#: Estimated tokens a message adds beyond its text: role header, separators, end marker.
MESSAGE_OVERHEAD = 4
#: Estimated tokens of the generation prompt that ends every formatted prompt.
PROMPT_OVERHEAD = 3
#: Message estimates kept (``count_message``), each by the hashes of what it read (the text
#: itself is not kept); the whole cache is dropped when it is full. Tool schemas' as many.
COUNT_CACHE_SIZE = 8_192
#: The calibration of the estimate from the server's counts stays within these factors.
CALIBRATION_RANGE = (0.5, 4.0)
#: Prompts smaller than this many estimated tokens do not calibrate (the overheads dominate).
CALIBRATE_FROM_TOKENS = 128
#: The margin kept over the server's own count when calibrating, and after it cut or refused a prompt.
CALIBRATION_MARGIN = 1.05
TRUNCATION_MARGIN = 1.25


def estimate_tokens(text: str) -> int:
    """The remote estimate for plain text: one token per started group of three UTF-8 bytes."""
    return math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN)


class EstimatedCounts:
    """The estimate of a remote model's messages, tools and text, cached and calibrated."""

    #: False: the UTF-8-byte estimate; True while the server counts (``server_counts``).
    exact_counts = False

    def __init__(self) -> None:
        #: Estimates by the hashes of what they read (text, name, calls): fitting and the usage
        #: report count a prompt several times a round, every round (``Model.count_message``:
        #: cached). Hashes, not the strings: a deleted session's text is not held by the cache.
        self._counts: dict[tuple[int, ...], int] = {}
        #: Tool schemas' estimates by object (the specs are constants; each entry holds its spec,
        #: so an ``id`` is never reused under it).
        self._tools: dict[int, tuple[ToolSpec, int]] = {}
        #: The estimate times this is the count (``usage.prompt_tokens`` over the estimate).
        self.calibration = 1.0

    def count_text(self, text: str) -> int:
        return self._calibrated(estimate_tokens(text))

    def _calibrated(self, raw: int) -> int:
        return raw if self.calibration == 1.0 else math.ceil(raw * self.calibration)

    def count_message(self, message: Message) -> int:
        key = self._key_of(message)
        count = self._counts.get(key)
        if count is None:
            count = self._estimate(message)
            if len(self._counts) >= COUNT_CACHE_SIZE:
                self._counts.clear()
            self._counts[key] = count
        return self._calibrated(count)

    @staticmethod
    def _key_of(message: Message) -> tuple[int, ...]:
        """What the estimate reads of ``message``, as hashes and lengths: Python's string hash
        (keyed per process) is kept by the string, so a message counted again costs a lookup,
        not a pass over its text."""
        text, name = message.prompt_content, message.name or ""
        calls = msgspec.json.encode(message.tool_calls) if message.tool_calls else b""
        return hash(text), len(text), hash(name), hash(calls), len(calls)

    @staticmethod
    def _estimate(message: Message) -> int:
        calls = "".join(
            json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False) for c in message.tool_calls
        )
        return (
            MESSAGE_OVERHEAD
            + estimate_tokens(message.prompt_content)
            + estimate_tokens(calls)
            + estimate_tokens(message.name or "")
        )

    def count_tool(self, tool: ToolSpec) -> int:
        held = self._tools.get(id(tool))
        if held is not None and held[0] is tool:
            return self._calibrated(held[1])
        count = estimate_tokens(json.dumps(tool.as_openai(), ensure_ascii=False))
        if len(self._tools) >= COUNT_CACHE_SIZE:
            self._tools.clear()
        self._tools[id(tool)] = (tool, count)
        return self._calibrated(count)

    def _recalibrate(self, prompt: int | None, estimate: int) -> None:
        """After the server refused a prompt for length, or cut it to fit: bring the estimate to
        its count of that prompt (``prompt``, when it said one), else allow a quarter more."""
        if prompt and estimate:
            # The server's own count: the estimate is brought to it (and not below where it was).
            ratio = prompt / max(1.0, self._raw_prompt_estimate(estimate)) * CALIBRATION_MARGIN
        else:
            ratio = self.calibration * TRUNCATION_MARGIN  # no count given: allow a quarter more
        self.calibration = min(CALIBRATION_RANGE[1], max(self.calibration, ratio))

    def _raw_prompt_estimate(self, calibrated: int) -> float:
        return calibrated / self.calibration

    def _calibrate(self, prompt_tokens: int, estimate: int) -> None:
        """Bring the estimate to the server's own count of a prompt it took whole."""
        if self.exact_counts:
            return  # counted by the server already
        raw = self._raw_prompt_estimate(estimate)
        if raw < CALIBRATE_FROM_TOKENS:
            return
        low, high = CALIBRATION_RANGE
        self.calibration = min(high, max(low, prompt_tokens / raw * CALIBRATION_MARGIN))
