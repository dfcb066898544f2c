"""What the daemon costs on top of llama.cpp, and what it costs to start answering.

1. Daemon overhead: one reply through ``imprintd serve`` over stdio (JSON-RPC framing, the
   store, fitting, the budget, streaming notifications) against llama-cpp-python called
   directly with the same rendered prompt and the same greedy tokens. Both run warm (the
   model loaded), alternated, several times; the ratio of medians is printed. Target ≤ 1.10.
2. ``initialize``: the daemon against a bare pygls server answering ``initialize``, both
   measured from spawning the process to the response (imports included) and as a round
   trip on a running process. Target ≤ 1.5.

    python bench/bench_daemon.py [--runs 5] [--max-tokens 48]

Not a test; the machine is shared, so only the ratios mean anything.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from imprintd import prompts  # noqa: E402
from imprintd.messages import system, user  # noqa: E402
from imprintd.models.embedded import embedded_model_path  # noqa: E402
from imprintd.models.local import LocalModel  # noqa: E402
from tests.e2e.rawclient import RawClient  # noqa: E402

QUESTION = "Explain in a few sentences what a context window is in a language model."
N_CTX = 2048

BARE_PYGLS = textwrap.dedent("""
    from pygls.lsp.server import LanguageServer
    LanguageServer("bare", "0").start_io()
""")


def daemon_env(data: str, max_tokens: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMPRINT_")}
    env.update(
        IMPRINT_DATA_DIR=data,
        IMPRINT_CONFIG=str(Path(data) / "none.toml"),
        IMPRINT_CHAT_N_CTX=str(N_CTX),
        IMPRINT_CHAT_MAX_TOKENS=str(max_tokens),
    )
    return env


def daemon_reply(client: RawClient) -> tuple[float, str]:
    start = time.perf_counter()
    response = client.response(client.request("imprint/chat", {"text": QUESTION}), timeout=600)
    elapsed = time.perf_counter() - start
    return elapsed, response["result"]["text"]


def direct_reply(llama, tokens: list[int], max_tokens: int, stop_ids: set[int]) -> tuple[float, str]:
    start = time.perf_counter()
    out: list[int] = []
    for token in llama.generate(tokens, top_k=1, top_p=1.0, temp=0.0, repeat_penalty=1.0, reset=True):
        if token in stop_ids or token == llama.token_eos():
            break
        out.append(token)
        if len(out) >= max_tokens:
            break
    text = llama.detokenize(out).decode("utf-8", errors="replace")
    return time.perf_counter() - start, text


def bench_overhead(runs: int, max_tokens: int) -> float:
    import llama_cpp

    path = embedded_model_path()
    renderer = LocalModel(path, n_ctx=N_CTX)
    prompt = renderer.render_prompt([system(prompts.system_prompt()), user(QUESTION)])
    from imprintd.models.local import _has_amx, default_threads

    no_extra_buffers = _has_amx()

    class BaselineLlama(llama_cpp.Llama):
        # The same load the daemon does: without extra buffer types where this llama.cpp's AMX
        # path would crash (see imprintd/models/local.py), and the same threads.
        def __setattr__(self, name, value):
            if name == "model_params" and no_extra_buffers:
                value.use_extra_bufts = False
            super().__setattr__(name, value)

    threads, threads_batch = default_threads()
    llama = BaselineLlama(
        model_path=str(path), n_ctx=N_CTX, n_threads=threads, n_threads_batch=threads_batch, verbose=False
    )
    tokens = llama.tokenize(prompt.encode(), add_bos=False, special=True)
    stop_ids = {t for t in llama.tokenize(b"<|im_end|>", add_bos=False, special=True)}
    with tempfile.TemporaryDirectory() as data:
        client = RawClient(daemon_env(data, max_tokens))
        try:
            client.initialize()
            daemon_reply(client)  # warm: the model loads on first use
            direct_reply(llama, tokens, max_tokens, stop_ids)
            daemon_times, direct_times = [], []
            for _ in range(runs):
                elapsed, daemon_text = daemon_reply(client)
                daemon_times.append(elapsed)
                elapsed, direct_text = direct_reply(llama, tokens, max_tokens, stop_ids)
                direct_times.append(elapsed)
        finally:
            client.kill()
    same = daemon_text.strip() == direct_text.strip()
    ratio = statistics.median(daemon_times) / statistics.median(direct_times)
    print(
        f"reply through imprintd: median {statistics.median(daemon_times) * 1000:.0f} ms; "
        f"llama-cpp-python direct: median {statistics.median(direct_times) * 1000:.0f} ms "
        f"({len(tokens)} prompt tokens, same text: {same})"
    )
    print(f"daemon overhead ratio: {ratio:.3f} (target <= 1.10)")
    if not same:
        print(f"  daemon: {daemon_text!r}\n  direct: {direct_text!r}")
    return ratio


def time_initialize(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(spawn → initialize response, a second round trip on the running process) in seconds."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    _round_trip(proc, 1)
    cold = time.perf_counter() - start
    warm_start = time.perf_counter()
    _round_trip(proc, 2, method="shutdown")
    warm = time.perf_counter() - warm_start
    proc.kill()
    proc.wait()
    return cold, warm


def _round_trip(proc, request_id: int, method: str = "initialize") -> None:
    import json

    params = {"processId": None, "rootUri": None, "capabilities": {}} if method == "initialize" else None
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()
    proc.stdin.write(f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    proc.stdin.flush()
    length = 0
    while (line := proc.stdout.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    proc.stdout.read(length)


def bench_initialize(runs: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as data:
        env = daemon_env(data, 64)
        imprint = [sys.executable, "-m", "imprintd", "serve"]
        bare = [sys.executable, "-c", BARE_PYGLS]
        results = {"imprint": [], "bare": []}
        for _ in range(runs):
            results["imprint"].append(time_initialize(imprint, env))
            results["bare"].append(time_initialize(bare, env))
    cold = statistics.median(r[0] for r in results["imprint"]) / statistics.median(r[0] for r in results["bare"])
    warm = statistics.median(r[1] for r in results["imprint"]) / statistics.median(r[1] for r in results["bare"])
    print(
        f"initialize, spawn to response: imprintd {statistics.median(r[0] for r in results['imprint']) * 1000:.0f} ms, "
        f"bare pygls {statistics.median(r[0] for r in results['bare']) * 1000:.0f} ms: ratio {cold:.2f} (target <= 1.5)"
    )
    print(f"round trip on a running server (shutdown): ratio {warm:.2f}")
    return cold, warm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()
    bench_initialize(args.runs)
    bench_overhead(args.runs, args.max_tokens)


if __name__ == "__main__":
    main()
