"""How much memory the daemon keeps for the sessions it has answered in: process RSS over 200 sessions.

Each session gets ``--replies`` replies through ``Chat`` (a real ``Store`` in a temporary data
dir) on a scripted stand-in model (``tests/standin.py``; its record of requests is emptied after
each reply, so only the daemon's own memory grows): every reply looks back with
``conversation_history`` and then answers, so a session holds four messages a reply (question,
call, result, answer: a few dozen in all, a tool result of about 2,000 characters, an answer of
about 600), and the sessions are long enough for fitting to drop earlier tool exchanges. The
process's resident set is read from ``/proc/self/status`` after the imports and the first
session (the baseline), after all sessions, and after every session is deleted.

It runs the same measurement in a fresh process for this tree and, side by side, for another
checkout (``--baseline DIR``, e.g. a ``git worktree`` of main: ``git worktree add /tmp/main
main``), the script itself taken from this tree and the code from each; and once more on this
tree with its views bound to ``--bound`` MiB instead of ``SESSION_VIEW_BYTES``, to show what the
bound holds. Prints one line per run and measure.

Not a test: ``python bench/bench_session_memory.py --baseline /tmp/main`` (a minute or two).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def rss_kib() -> int:
    """The process's resident set size now, in KiB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status (Linux only)")


def measure(sessions: int, replies: int, traced: bool) -> dict[str, float]:
    """In this process (the code on ``sys.path``): RSS after the first session, after all, and
    after deleting them; with ``traced``, the bytes Python has allocated instead (``tracemalloc``,
    started after the imports), which shows what deleting frees (RSS seldom falls: the allocator
    keeps its arenas)."""
    from imprintd.models.base import Completion
    from tests.helpers import ask, make_chat
    from tests.standin import Request, StandInModel, call

    def scripted(request: Request) -> Completion:
        last = request.messages[-1]
        if last.role == "user":  # the question: look back first
            return Completion(text="", tool_calls=(call("conversation_history", query=last.content[:60]),))
        answer = f"As said before, {last.content[:40]!r}: " + "the service listens on port 8101 and logs rotate. " * 11
        return Completion(text=answer)

    model = StandInModel(n_ctx=8192)

    def now() -> int:
        return tracemalloc.get_traced_memory()[0] // 1024 if traced else rss_kib()

    if traced:
        tracemalloc.start()

    async def run() -> dict[str, float]:
        chat = make_chat(model)
        figures: dict[str, float] = {}
        made: list[str] = []
        for number in range(sessions):
            session_id = None
            for reply in range(replies):
                model.queue(scripted, scripted)
                question = f"Session {number}, question {reply}: where does billing {reply} listen? " + "x " * 60
                outcome, _ = await ask(chat, question, session_id)
                session_id = outcome.session_id
                model.requests.clear()
            assert session_id is not None
            made.append(session_id)
            if number == 0:
                gc.collect()
                figures["first_kib"] = now()
        gc.collect()
        figures["all_kib"] = now()
        messages = sum(len(chat.session(session_id).messages) for session_id in made[-3:]) / 3
        for session_id in made:
            chat.delete_session(session_id)
        gc.collect()
        figures["deleted_kib"] = now()
        figures["messages_per_session"] = messages
        return figures

    return asyncio.run(run())


def child(tree: Path, sessions: int, replies: int, traced: bool, bound: int | None = None) -> dict[str, float]:
    """``measure`` in a fresh process on ``tree``'s code."""
    with tempfile.TemporaryDirectory() as folder:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("IMPRINT_")},
            "PYTHONPATH": str(tree),
            "IMPRINT_DATA_DIR": str(Path(folder) / "data"),
            "IMPRINT_CONFIG": str(Path(folder) / "config.toml"),
            "IMPRINT_CACHE_DIR": str(Path(folder) / "cache"),
        }
        done = subprocess.run(
            [sys.executable, __file__, "--child", "--sessions", str(sessions), "--replies", str(replies)]
            + (["--traced"] if traced else [])
            + (["--view-mib", str(bound)] if bound else []),
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"the run on {tree} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def line(name: str, sessions: int, figures: dict[str, float], what: str) -> str:
    grown = figures["all_kib"] - figures["first_kib"]
    freed = figures["all_kib"] - figures["deleted_kib"]
    return (
        f"{name:<10} {what} after 1 session {figures['first_kib'] / 1024:7.1f} MiB, after {sessions}"
        f" {figures['all_kib'] / 1024:7.1f} MiB (+{grown / 1024:.1f} MiB, {grown / max(1, sessions - 1):.0f} KiB"
        f" a session of {figures['messages_per_session']:.0f} messages), after deleting them"
        f" {figures['deleted_kib'] / 1024:7.1f} MiB ({freed / 1024:.1f} MiB freed)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--replies", type=int, default=9, help="replies a session (four messages each)")
    parser.add_argument("--baseline", type=Path, help="another checkout to measure side by side (e.g. main)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--view-mib", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument(
        "--bound", type=int, default=8, help="also run this tree with its views bound to this many MiB (0: not)"
    )
    args = parser.parse_args()
    if args.child:
        sys.path.insert(0, os.environ["PYTHONPATH"])
        if args.view_mib:
            from imprintd import session_view

            session_view.SESSION_VIEW_BYTES = args.view_mib << 20
        print(json.dumps(measure(args.sessions, args.replies, args.traced)))
        return
    runs = [("this tree", HERE, None)]
    runs += [("baseline", args.baseline.resolve(), None)] if args.baseline else []
    runs += [(f"{args.bound} MiB", HERE, args.bound)] if args.bound else []
    for traced, what in ((False, "RSS"), (True, "Python heap")):
        for name, tree, bound in runs:
            figures = child(tree, args.sessions, args.replies, traced, bound)
            print(line(name, args.sessions, figures, what), flush=True)


if __name__ == "__main__":
    main()
