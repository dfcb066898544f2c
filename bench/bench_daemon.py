"""What the daemon costs on top of llama.cpp, and what it costs to start answering.

1. Daemon overhead: one reply through ``imprintd serve`` over stdio (JSON-RPC framing, the
   store, fitting, the budget, streaming notifications) against llama-cpp-python called
   directly on the prompt the daemon sends: a new session's first round (``reply.first_round``:
   its system prompt and tool lines, ``conversation_history`` offered) rendered by the GGUF's
   template, with the same greedy tokens. The bench checks that both asked as many tokens (the
   daemon's usage log line) and wrote the same text; if not, it says how they differ and exits 2.
   The direct loop runs in a thread at the daemon's model-thread priority, so both compete
   alike for a shared machine's cores. Both run warm (the model loaded), alternated, several
   times; the ratio of medians is printed, and each side's CPU time beside it (both whole
   processes). After each daemon reply the bench waits for the daemon's CPU to settle and
   prints what it used meanwhile (the previous session's state written while the model is
   idle), so that work is counted but never runs beside the direct loop. Target <= 1.05.
2. ``initialize``: the daemon against a bare pygls server answering ``initialize``, both
   measured from spawning the process to the response (imports included; both with their
   bytecode compiled, as an install leaves it) and as a round trip on a running process.
   Target <= 1.5.

    python bench/bench_daemon.py [--runs 11] [--max-tokens 48] [--only initialize|reply] [--profile PREFIX]

``--profile PREFIX`` runs the daemon with every thread under cProfile and the direct loop too,
and prints where each thread's time went. Exits 1 when a ratio misses its target.
Not a test; the machine is shared, so only the ratios mean anything.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import cProfile
import os
import pstats
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from imprintd.models.embedded import embedded_model_path  # noqa: E402
from imprintd.models.local import LocalModel  # noqa: E402
from imprintd.offload import lower_priority  # noqa: E402
from imprintd.reply import first_round  # noqa: E402
from imprintd.research.answer import cut_off_note  # noqa: E402
from tests.e2e.rawclient import RawClient  # noqa: E402

QUESTION = "Explain in a few sentences what a context window is in a language model."
N_CTX = 2048

BARE_PYGLS = textwrap.dedent("""
    from pygls.lsp.server import LanguageServer
    LanguageServer("bare", "0").start_io()
""")

#: ``imprintd serve`` with every thread profiled (the loop, the workers, the model thread), each
#: by a cProfile of its own; at exit their stats go, merged, to the file argv[1] names, and each
#: thread's own time to argv[1] + ".threads", and its stats to argv[1] + "." + its name.
PROFILED_DAEMON = textwrap.dedent("""
    import atexit, cProfile, os, pstats, runpy, sys, threading
    out = sys.argv[1]
    profiles = []
    def profile_this_thread(*_):
        profile = cProfile.Profile()
        profiles.append((threading.current_thread().name, profile))
        profile.enable()
    def dump():
        if not profiles:
            return
        merged = None
        with open(out + ".threads", "w") as lines:
            for name, profile in profiles:
                profile.disable()
                stats = pstats.Stats(profile)
                lines.write(f"{stats.total_tt:.3f} s {name}\\n")
                stats.dump_stats(f"{out}.{name}")
                merged = stats if merged is None else merged.add(stats)
        merged.dump_stats(out)
        profiles.clear()
    real_exit = os._exit
    def leave(code):
        dump()
        real_exit(code)
    os._exit = leave
    atexit.register(dump)
    threading.setprofile(profile_this_thread)
    sys.argv = ["imprintd", "serve"]
    profile_this_thread()
    runpy.run_module("imprintd", run_name="__main__", alter_sys=True)
""")

#: The usage line the daemon logs after each model request (``models.base.report_usage``).
PROMPT_TOKENS = re.compile(r": (\d+) prompt tokens, \d+ evaluated")
OVERHEAD_TARGET = 1.05
INITIALIZE_TARGET = 1.5


def daemon_env(data: str, max_tokens: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMPRINT_")}
    env.update(
        IMPRINT_DATA_DIR=data,
        IMPRINT_CONFIG=str(Path(data) / "none.toml"),
        IMPRINT_CACHE_DIR=str(Path(data) / "cache"),  # model states of its own, as a new user's
        IMPRINT_CHAT_N_CTX=str(N_CTX),
        IMPRINT_CHAT_MAX_TOKENS=str(max_tokens),
    )
    return env


def process_cpu(pid: int) -> float:
    """CPU seconds every thread of process ``pid`` has used (Linux ``schedstat``; 0 elsewhere)."""
    total = 0
    for path in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):  # a thread that ended meanwhile
            continue
    return total / 1e9


def daemon_reply(client: RawClient) -> tuple[float, float, str]:
    """(seconds, CPU seconds of the daemon's process, the reply's text)."""
    cpu = process_cpu(client.proc.pid)
    start = time.perf_counter()
    response = client.response(client.request("imprint/chat", {"text": QUESTION}), timeout=600)
    elapsed = time.perf_counter() - start
    return elapsed, process_cpu(client.proc.pid) - cpu, response["result"]["text"]


def settle(client: RawClient, quiet_ms: float = 2.0, step_s: float = 0.25, at_most_s: float = 10.0) -> float:
    """Wait until the daemon's process stops using CPU (what it does once a reply is sent: the
    previous session's state written while the model is idle); the CPU seconds it used meanwhile.
    So that work neither runs beside the direct loop nor goes uncounted."""
    start = last = process_cpu(client.proc.pid)
    deadline = time.monotonic() + at_most_s
    while time.monotonic() < deadline:
        time.sleep(step_s)
        now = process_cpu(client.proc.pid)
        if (now - last) * 1000 < quiet_ms:
            break
        last = now
    return last - start


def direct_reply(
    llama, tokens: list[int], max_tokens: int, stop_ids: set[int], profile: cProfile.Profile | None = None
) -> tuple[float, float, str, bool]:
    """(seconds, CPU seconds, text, cut at ``max_tokens``): llama-cpp-python's greedy loop on
    ``tokens``, in the calling thread (generation on one thread: ``default_threads``). The CPU is
    the whole bench process's, as the daemon's is: llama.cpp evaluates the prompt on threads of its
    own (``n_threads_batch``), which this thread's CPU time would leave out; nothing else in this
    process runs meanwhile (the main thread waits for this one)."""
    if profile is not None:
        profile.enable()
    cpu = process_cpu(os.getpid())
    start = time.perf_counter()
    out: list[int] = []
    cut = False
    for token in llama.generate(tokens, top_k=1, top_p=1.0, temp=0.0, repeat_penalty=1.0, reset=True):
        if token in stop_ids or token == llama.token_eos():
            break
        out.append(token)
        if len(out) >= max_tokens:
            cut = True
            break
    text = llama.detokenize(out, special=True).decode("utf-8", errors="replace")
    elapsed, cpu = time.perf_counter() - start, process_cpu(os.getpid()) - cpu
    if profile is not None:
        profile.disable()
    return elapsed, cpu, text, cut


def daemon_prompt_tokens(stderr: str) -> int | None:
    """The prompt tokens of the daemon's last model request, from its usage log line."""
    counts = PROMPT_TOKENS.findall(stderr)
    return int(counts[-1]) if counts else None


def direct_prompt() -> str:
    """The prompt the daemon sends for ``QUESTION`` in a new session: its system prompt with its
    tool lines, ``conversation_history`` offered, rendered by its template (``reply.first_round``)."""
    messages, tools = first_round(QUESTION)
    return LocalModel(embedded_model_path(), n_ctx=N_CTX).render_prompt(messages, tools)


def load_direct_llama():
    """llama-cpp-python loaded as the daemon loads it: the same threads, and without extra buffer
    types where this llama.cpp's AMX path would crash (see imprintd/models/local.py)."""
    import llama_cpp

    from imprintd.models.local import _has_amx, default_threads

    no_extra_buffers = _has_amx()

    class BaselineLlama(llama_cpp.Llama):
        def __setattr__(self, name, value):
            if name == "model_params" and no_extra_buffers:
                value.use_extra_bufts = False
            super().__setattr__(name, value)

    threads, threads_batch = default_threads()
    return BaselineLlama(
        model_path=str(embedded_model_path()),
        n_ctx=N_CTX,
        n_threads=threads,
        n_threads_batch=threads_batch,
        verbose=False,
    )


class NotLikeForLike(Exception):
    """The daemon and the direct loop did not ask the same prompt or write the same answer."""


def bench_overhead(runs: int, max_tokens: int, profile: str | None = None) -> float:
    """The ratio of medians (daemon / direct); NotLikeForLike when the two differ."""
    llama = load_direct_llama()
    prompt = direct_prompt()
    tokens = llama.tokenize(prompt.encode(), add_bos=False, special=True)
    stop_ids = set(llama.tokenize(b"<|im_end|>", add_bos=False, special=True))
    direct_profile = cProfile.Profile() if profile else None
    # The direct loop runs as the daemon's generation does: in a thread of its own at the model
    # thread's lower priority (``offload.lower_priority``), so that on a shared machine both
    # compete alike for the cores and the ratio measures what the daemon adds, not the priority.
    model_thread = concurrent.futures.ThreadPoolExecutor(1, "direct-model", initializer=lower_priority)
    with tempfile.TemporaryDirectory() as data:
        command = [sys.executable, "-c", PROFILED_DAEMON, f"{profile}.daemon.pstats"] if profile else None
        client = RawClient(daemon_env(data, max_tokens), command=command)
        try:
            client.initialize()
            daemon_reply(client)  # warm: the model loads on first use
            settle(client)
            model_thread.submit(direct_reply, llama, tokens, max_tokens, stop_ids).result()
            daemon_times, direct_times, daemon_cpu, direct_cpu, after_cpu = [], [], [], [], []
            for _ in range(runs):
                elapsed, cpu, daemon_text = daemon_reply(client)
                daemon_times.append(elapsed)
                daemon_cpu.append(cpu)
                after_cpu.append(settle(client))
                elapsed, cpu, direct_text, cut = model_thread.submit(
                    direct_reply, llama, tokens, max_tokens, stop_ids, direct_profile
                ).result()
                direct_times.append(elapsed)
                direct_cpu.append(cpu)
            asked = daemon_prompt_tokens(client.stderr_text())
            if profile:
                client.response(client.request("shutdown"))
                client.notify("exit")
                client.wait(60)
        finally:
            client.kill()
            model_thread.shutdown()
    # What the daemon adds after an answer cut at the output limit (``reply.run_reply``).
    expected = direct_text + (f"\n\n{cut_off_note(max_tokens)}" if cut else "")
    daemon_ms, direct_ms = statistics.median(daemon_times) * 1000, statistics.median(direct_times) * 1000
    ratio = daemon_ms / direct_ms
    print(
        f"reply through imprintd: median {daemon_ms:.0f} ms; llama-cpp-python direct: median {direct_ms:.0f} ms "
        f"({len(tokens)} prompt tokens, {max_tokens} greedy tokens at most, runs alternated)"
    )
    print(f"daemon overhead ratio: {ratio:.3f} (target <= {OVERHEAD_TARGET})")
    daemon_cpu_ms, direct_cpu_ms = statistics.median(daemon_cpu) * 1000, statistics.median(direct_cpu) * 1000
    print(
        f"CPU per reply: the daemon's process {daemon_cpu_ms:.0f} ms (every thread), the direct loop's process "
        f"{direct_cpu_ms:.0f} ms: ratio {daemon_cpu_ms / direct_cpu_ms:.3f} (not the target; less moved by load)"
    )
    total_ms = statistics.median(c + a for c, a in zip(daemon_cpu, after_cpu, strict=True)) * 1000
    print(
        f"the daemon's CPU once the reply was sent (the previous session's state written while idle): "
        f"median {statistics.median(after_cpu) * 1000:.0f} ms; reply and after together {total_ms:.0f} ms: "
        f"ratio {total_ms / direct_cpu_ms:.3f}"
    )
    if profile:
        show_profiles(profile, direct_profile, runs)
    if asked != len(tokens):
        raise NotLikeForLike(
            f"the daemon's prompt had {asked} tokens, the direct one {len(tokens)}: they do not ask the same thing"
        )
    if daemon_text != expected:
        raise NotLikeForLike(
            f"the answers differ, so the two did not evaluate the same prompt and tokens:\n"
            f"  daemon: {daemon_text!r}\n  direct: {expected!r}"
        )
    print(f"same prompt ({asked} tokens) and same text ({'cut at the limit' if cut else 'ended by the model'})")
    return ratio


def show_profiles(prefix: str, direct: cProfile.Profile | None, runs: int) -> None:
    """Where the replies' time goes: each of the daemon's threads (the loop, the model thread) and
    the direct loop, from the profiles ``--profile`` wrote (the daemon's include its start and
    the warm-up reply; waits show as ``acquire``, ``poll`` and ``get``)."""
    print(f"\nthe daemon's threads, time in each ({prefix}.daemon.pstats.threads):")
    print(Path(f"{prefix}.daemon.pstats.threads").read_text().rstrip())
    for thread in ("imprintd-model", "MainThread"):
        print(f"\n{thread} ({prefix}.daemon.pstats.{thread}), by own time:")
        pstats.Stats(f"{prefix}.daemon.pstats.{thread}").sort_stats("tottime").print_stats(12)
    if direct is not None:
        direct.dump_stats(f"{prefix}.direct.pstats")
        print(f"the direct loop, {runs} replies ({prefix}.direct.pstats), by own time:")
        pstats.Stats(direct).sort_stats("tottime").print_stats(8)


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


def bench_initialize(runs: int) -> float:
    """The ratio of medians, spawn to ``initialize`` response (imprintd / bare pygls), alternated."""
    with tempfile.TemporaryDirectory() as data:
        env = daemon_env(data, 64)
        # Both as installed, their bytecode compiled (pip compiles it; an editable install writes it
        # on first import): with PYTHONDONTWRITEBYTECODE set, imprintd compiled all its source at
        # every start while pygls read its cached bytecode.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        imprint = [sys.executable, "-m", "imprintd", "serve"]
        bare = [sys.executable, "-c", BARE_PYGLS]
        time_initialize(imprint, env)  # writes any bytecode missing
        time_initialize(bare, env)
        results: dict[str, list[tuple[float, float]]] = {"imprint": [], "bare": []}
        for _ in range(runs):
            results["imprint"].append(time_initialize(imprint, env))
            results["bare"].append(time_initialize(bare, env))
    imprint_ms = statistics.median(r[0] for r in results["imprint"]) * 1000
    bare_ms = statistics.median(r[0] for r in results["bare"]) * 1000
    warm = statistics.median(r[1] for r in results["imprint"]) / statistics.median(r[1] for r in results["bare"])
    print(
        f"initialize, spawn to response: imprintd {imprint_ms:.0f} ms, bare pygls {bare_ms:.0f} ms: "
        f"ratio {imprint_ms / bare_ms:.2f} (target <= {INITIALIZE_TARGET})"
    )
    print(f"round trip on a running server (shutdown): ratio {warm:.2f}")
    return imprint_ms / bare_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=11)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument(
        "--profile",
        metavar="PREFIX",
        help="profile the daemon's threads and the direct loop; writes PREFIX.daemon.pstats, "
        "PREFIX.daemon.pstats.threads and PREFIX.direct.pstats and prints where the time goes",
    )
    parser.add_argument("--only", choices=("initialize", "reply"), help="run one of the two benchmarks")
    args = parser.parse_args()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    missed = []
    if args.only != "reply" and bench_initialize(args.runs) > INITIALIZE_TARGET:
        missed.append(f"initialize over {INITIALIZE_TARGET}x a bare pygls server")
    if args.only != "initialize":
        try:
            if bench_overhead(args.runs, args.max_tokens, args.profile) > OVERHEAD_TARGET:
                missed.append(f"a reply over {OVERHEAD_TARGET}x llama-cpp-python directly")
        except NotLikeForLike as error:
            print(f"FAILED: not like for like: {error}", file=sys.stderr)
            return 2
    for miss in missed:
        print(f"MISSED TARGET: {miss}", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
