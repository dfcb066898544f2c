"""What switching ``chat.n_ctx`` back and forth keeps in memory: the process's resident memory
after each switch and the reply that follows it, on the embedded SmolLM2-135M (greedy).

Each switch replaces the local model (a new context size is a new model); the one it replaced
should be freed once its last reply is over. Garbage collection runs as it does in the daemon
(automatically, nothing forced here). Prints one line per switch and the growth from the first
reply to the last. Not a test; to compare, run another checkout's copy of this script (it puts
its own checkout first on the path and prints which ``imprintd`` it ran).

    nice -n 5 python bench/bench_model_switch.py [--switches 8]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from imprintd import settings as settings_mod  # noqa: E402
from imprintd.chat import Chat, ReplyRequest  # noqa: E402
from tests.recording import RecordingEvents  # noqa: E402


def resident_mib() -> float:
    """The process's resident memory (``VmRSS``), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def main(switches: int) -> None:
    import imprintd

    print(f"imprintd from {Path(imprintd.__file__).parent}")
    with tempfile.TemporaryDirectory() as data:
        resolved = settings_mod.load({}, environ={}).apply(
            {"chat.provider": "local", "chat.model": "", "chat.first_look": False, "chat.max_tokens": 4}, "bench"
        )
        chat = Chat(resolved, data_dir=Path(data))
        sizes = [2048, 1024]
        first = None
        try:
            for switch in range(switches + 1):
                n_ctx = sizes[switch % 2]
                chat.update_settings(chat.resolved.apply({"chat.n_ctx": n_ctx}, "bench"))
                await chat.reply(ReplyRequest(text="Say hello."), RecordingEvents())
                rss = resident_mib()
                first = rss if first is None else first
                print(f"switch {switch:2} (n_ctx {n_ctx}): RSS {rss:7.1f} MiB")
        finally:
            chat.close()
        print(f"growth over {switches} switches: {rss - first:+.1f} MiB ({rss / first:.2f}x)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switches", type=int, default=8)
    asyncio.run(main(parser.parse_args().switches))
