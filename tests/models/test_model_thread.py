"""The embedded model generates at a lower priority than the event loop.

Read from ``/proc`` during a real reply: the threads that process the prompt (the model thread
and the OpenMP team llama.cpp creates from it, which inherits its name and priority) run
``MODEL_NICENESS`` levels below the process, and the loop thread does not.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from imprintd.messages import Message
from imprintd.offload import MODEL_NICENESS
from tests.models.real_model import needs_real_model

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priority is Linux's")


def threads() -> dict[int, tuple[str, int, int]]:
    """Each thread of this process: its name, CPU ticks used so far, nice value."""
    found = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            name = (task / "comm").read_text().strip()
        except OSError:  # ended meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after the name, which may hold spaces
        # Fields 14, 15 (utime, stime) and 19 (nice) of proc(5), counted from the state (3).
        found[int(task.name)] = (name, int(fields[11]) + int(fields[12]), int(fields[16]))
    return found


@needs_real_model
async def test_the_prompt_is_processed_by_threads_at_a_lower_priority_than_the_loop(local_model):
    process = os.getpriority(os.PRIO_PROCESS, 0)
    lowered = min(19, process + MODEL_NICENESS)
    # A long prompt: processing it keeps the OpenMP team busy for a measurable while.
    question = "Summarize: " + " ".join(f"service{n} listens on port {8000 + n}." for n in range(120))
    before = threads()
    during: list[dict[int, tuple[str, int, int]]] = []

    def on_text(piece: str) -> None:  # the first piece: the prompt was processed just now
        if not during:
            during.append(threads())

    completion = await local_model.complete([Message(role="user", content=question)], max_tokens=4, on_text=on_text)
    assert completion.usage.evaluated_tokens > 1000
    assert during, "no text reached on_text"
    seen = during[0]
    model_threads = {tid: info for tid, info in seen.items() if info[0] == "imprintd-model"}
    # The model thread and the team it created: at least as many as prompt processing uses.
    assert len(model_threads) >= local_model._n_threads_batch, seen
    assert {nice for _, _, nice in model_threads.values()} == {lowered}, seen
    assert seen[threading.get_native_id()][2] == process  # the loop thread keeps the process's
    # The threads at the lowered priority did the work: nearly all the CPU time the process used
    # between the request and its first token.
    used = {tid: ticks - before.get(tid, ("", 0, 0))[1] for tid, (_, ticks, _) in seen.items()}
    by_model = sum(used[tid] for tid in model_threads)
    assert by_model >= 0.8 * sum(used.values()), (used, model_threads)
