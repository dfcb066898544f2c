"""Reading a GGUF header: ours (``imprintd.models.gguf_header``) against llama.cpp's ``gguf`` package.

The embedded SmolLM2's header (a 49,152-token vocabulary and its merges) read whole by each,
several times, and a models listing of 20 header-only copies by ours
(docs/decisions.md, "One GGUF header reader"). ``gguf`` is not a dependency: install it
(``pip install gguf``) to measure it; without it only ours is measured. Each reader's import is
timed in a fresh process.

    python bench/bench_gguf_header.py [--runs 5]

Not a test; the machine is shared, so only the ratios mean anything.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from imprintd.models.embedded import embedded_model_path  # noqa: E402
from imprintd.models.gguf_header import read_metadata  # noqa: E402
from imprintd.models.on_disk import find_models  # noqa: E402

LISTED = 20


def median_ms(read, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        read()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def import_ms(module: str) -> float:
    """Seconds a fresh interpreter takes to import ``module``, in ms (the bare interpreter's start subtracted)."""

    def run(code: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
        return time.perf_counter() - start

    return (min(run(f"import {module}") for _ in range(3)) - min(run("pass") for _ in range(3))) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    path = embedded_model_path()
    ours = median_ms(lambda: read_metadata(path), args.runs)
    print(
        f"ours: {ours:.1f} ms a header (median of {args.runs}); import {import_ms('imprintd.models.gguf_header'):.0f} ms"
    )
    with path.open("rb") as handle:
        head = handle.read(4 << 20)  # the header and more: ours reads no further
    with tempfile.TemporaryDirectory() as folder:
        for index in range(LISTED):
            (Path(folder) / f"model-{index}.gguf").write_bytes(head)
        listing = median_ms(lambda: find_models(folder, env={}, home=Path(folder) / "home"), args.runs)
    print(f"ours: a listing of {LISTED} files {listing:.0f} ms ({listing / LISTED:.1f} ms a file)")
    if importlib.util.find_spec("gguf") is None:
        print("gguf is not installed (pip install gguf): not measured")
        return 0
    import gguf

    def theirs() -> None:
        gguf.GGUFReader(path).fields["tokenizer.chat_template"].contents()

    measured = median_ms(theirs, max(1, args.runs // 2))
    print(
        f"gguf.GGUFReader: {measured:.0f} ms a header; import {import_ms('gguf'):.0f} ms; {measured / ours:.0f}x ours"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
