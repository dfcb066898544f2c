"""What keeping a session's model state costs a coordinator round.

Runs the same session of growing coordinator rounds three times side by side (round by round in
turn, each run on its own model), on the embedded SmolLM2-135M (greedy, chat.n_ctx 2048 by
default):

(a) **off**: the state cache off, nothing copied: the baseline;
(b) **eager**: after every round a copy of llama.cpp's sequence state is taken and kept before
    the round returns (what the local provider did before: ``save_sequence`` under the model lock);
(c) **now**: the local provider as it is: a round returns uncopied, and the state is copied only
    when another request replaces it (here: a side request after the last round, timed apart;
    then one more round of the session, which restores its state: the tokens it reuses).

Reports per run the median round time and its ratio to (a), the copy's time and size per round
in (b), bytes per held token against the KV arithmetic ``n_layer × n_embd_kv × 2 (K and V) × 2
bytes (f16)``, and the same arithmetic for a 4B model at 8k (Qwen3-4B's shape). Not a test.

    nice -n 5 python bench/bench_state_save.py [--rounds 8] [--n-ctx 2048]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from imprintd.messages import Message, assistant, system, user  # noqa: E402
from imprintd.models.base import session_requests, side_requests  # noqa: E402
from imprintd.models.embedded import embedded_model_path  # noqa: E402
from imprintd.models.local import LocalModel  # noqa: E402
from imprintd.models.state_cache import SavedState  # noqa: E402

SYSTEM = system("You are Imprint, an assistant for the user's own work. Answer in a few plain sentences. " * 8)
#: A 4B model's KV shape (Qwen3-4B: 36 layers, 8 KV heads of 128), f16, at 8,192 tokens.
FOUR_B = {"n_layer": 36, "n_embd_kv": 8 * 128, "n_ctx": 8192, "bytes": 2}


def question(number: int) -> str:
    return f"Question {number}: which settings of the billing service changed in release {number}, and why? " * 3


class Session:
    """One run's session on its own model: its messages, round times and copy times."""

    def __init__(self, model: LocalModel, eager: bool) -> None:
        self.model, self.eager = model, eager
        self.messages: list[Message] = [SYSTEM]
        self.times: list[float] = []
        self.copies: list[float] = []

    async def round(self, number: int, max_tokens: int) -> None:
        """One coordinator round, timed with the eager copy after it when ``eager``."""
        model = self.model
        self.messages.append(user(question(number)))
        started = time.perf_counter()
        with session_requests("bench", persist=False):
            completion = await model.complete(self.messages, max_tokens=max_tokens)
        if self.eager:
            copy_started = time.perf_counter()
            saved = model.load().save_sequence(lambda size: None)  # fresh memory, as it was then
            assert saved is not None and model.states is not None
            tokens, data = saved
            model.states.keep(
                SavedState(session_id="bench", tokens=tokens, data=data, serial=model.states.new_serial()),
                persist=False,
            )
            self.copies.append(time.perf_counter() - copy_started)
        self.times.append(time.perf_counter() - started)
        self.messages.append(assistant(completion.text))


def kv_bytes_per_token(model: LocalModel) -> tuple[int, int, int]:
    """(n_layer, n_embd_kv, f16 bytes per token for K and V) of the loaded model."""
    from llama_cpp import llama_cpp as lib

    handle = model.load().llama._model.model
    layers = lib.llama_model_n_layer(handle)
    embd_kv = lib.llama_model_n_embd(handle) // lib.llama_model_n_head(handle) * lib.llama_model_n_head_kv(handle)
    return layers, embd_kv, layers * embd_kv * 2 * 2


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--n-ctx", type=int, default=2048)
    args = parser.parse_args()
    path = embedded_model_path()

    def build(memory: int) -> LocalModel:
        model = LocalModel(path, n_ctx=args.n_ctx, state_cache_memory=memory, state_cache_disk=0)
        model.load()
        return model

    runs = {
        "off": Session(build(0), False),
        "eager": Session(build(1 << 30), True),
        "now": Session(build(1 << 30), False),
    }
    for run in runs.values():  # warm-up, so no timed round pays first-use costs
        with session_requests("warm-up", persist=False):
            await run.model.complete([SYSTEM, user("Hello.")], max_tokens=1)
    # Round by round in turn, so a machine busy with other work slows the three runs alike.
    for number in range(args.rounds):
        for run in runs.values():
            await run.round(number, args.max_tokens)

    now = runs["now"].model
    held = now.load().held_tokens()
    started = time.perf_counter()
    with session_requests("bench", persist=False), side_requests():
        await now.complete([system("Take notes."), user("unrelated words " * 40)], max_tokens=1)
    displaced_s = time.perf_counter() - started
    assert now.states is not None
    copied = sum(state.nbytes for state in now.states._memory.values() if state.session_id == "bench")

    off = runs["off"].times
    print(f"{args.rounds} coordinator rounds, n_ctx {args.n_ctx}, {len(held)} tokens held at the end")
    for name, run in runs.items():
        ratios = [mine / base for mine, base in zip(run.times, off, strict=True)]
        print(
            f"  {name:>5}: median round {statistics.median(run.times) * 1000:7.1f} ms, "
            f"median ratio to off {statistics.median(ratios):.3f} (on a busy machine mostly its noise)"
        )
    copies = runs["eager"].copies
    share = statistics.median(c / t for c, t in zip(copies, runs["eager"].times, strict=True))
    print(
        f"  eager copy per round: median {statistics.median(copies) * 1000:.1f} ms "
        f"({share:.1%} of its round), last {copies[-1] * 1000:.1f} ms ({copied / 1e6:.1f} MB for {len(held)} tokens)"
    )
    print(
        f"  now: copies on the rounds' path 0; the side request after them (copy included) {displaced_s * 1000:.0f} ms"
    )
    # The session's next round after the side request restores its own state.
    before = len(held)
    runs["now"].messages.append(user(question(args.rounds)))
    with session_requests("bench", persist=False):
        after = await now.complete(runs["now"].messages, max_tokens=args.max_tokens)
    reused = after.usage.prompt_tokens - after.usage.evaluated_tokens
    print(
        f"  now: the round after it restored {now.last_restore}; reused {reused} of "
        f"{after.usage.prompt_tokens} prompt tokens ({before} were held before the side request)"
    )
    layers, embd_kv, per_token = kv_bytes_per_token(now)
    print(
        f"KV arithmetic, this model: {layers} layers x {embd_kv} x 2 x 2 bytes = {per_token} bytes a token; "
        f"measured {copied / max(1, len(held)):.0f}"
    )
    four_b = FOUR_B["n_layer"] * FOUR_B["n_embd_kv"] * 2 * FOUR_B["bytes"] * FOUR_B["n_ctx"]
    print(
        f"4B model at 8k: 36 x 8192 x 1024 x 2 x 2 bytes = {four_b / 2**30:.2f} GiB a copy; "
        f"at this run's copy rate {copied / max(1e-9, copies[-1]) / 1e9:.1f} GB/s that is "
        f"{four_b / max(1.0, copied / max(1e-9, copies[-1])):.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
