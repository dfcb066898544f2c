"""Follow-ups on the local provider: how much of each prompt llama.cpp evaluates, in real sessions.

Drives ``Chat.reply`` (the real reply: summary step, first look, fitting, research rounds, section
workers, final answer) on the embedded SmolLM2, greedy, with the per-session model state on, and
reads what each model request cost from the daemon's usage log line (``models/base.report_usage``:
``N prompt tokens, M evaluated``). Sessions:

* **chat-only** (n_ctx 2,048): ``--follow-ups`` follow-ups of 600 characters without a workspace,
  outgrowing the context.
* **workspace** (n_ctx 4,096 and 2,048): a real repository (a copy of the installed ``httpx``
  package's source), the first look on, ``--workspace-follow-ups`` questions about it (each reply
  searches it first; the model may search and read more).
  This session is in-sample: the fitting constants were chosen on it. ``--repo anyio`` runs
  the held-out one instead: the installed ``anyio`` package's source and questions written for it,
  never used to choose a constant.

In each, before follow-ups 4, 7 and 10 (``POINTS``), a switch and a restart: another session
answers and the first session's next question is the switch; then a new ``Chat`` and model on the
same cache dir and its next question is the restart. Each is one reply that lands wherever it
lands (on a drop point or right after one), so each is reported at the three points and as their
mean, which the target reads on. ``--points 14`` (with 13 follow-ups) makes a single switch and
restart at the session's end instead, as this benchmark did before the prompt was kept put (commit 6dfdfe6): the chat-only
figures the issue keeps (0.17 / 0.08 / 0.10) were measured that way.

For each it prints two shares of prompt tokens evaluated over the follow-ups' replies: of their
*first* coordinator requests (the question and its first look are new; everything before them was
in the saved state), and of *all* their model requests (summaries, section workers, every round,
final answers from notes included). After each session a trace follows: per reply, its
first request's prompt, evaluated tokens and floor (what is new since the session's previous
request: the question and its first look), and where the prompt parts from the saved state when it
does so before the new turn (a drop, a changed system prompt or tools). Then time to first token of
the chat-only restart follow-up against a cold evaluation of the same prompt on a fresh model.

    python bench/bench_followups.py [--follow-ups 13] [--workspace-follow-ups 12] [--max-tokens 64]
        [--skip-chat] [--n-ctx 4096 ...] [--repo httpx|anyio] [--points 4 7 10]

Targets: workspace first requests ≤ 0.35, all requests ≤ 0.45, restart and switch ≤ 0.40 (the mean of three);
chat-only no worse than 0.17 / 0.08 / 0.10; first token after a restart ≤ 0.3× cold. Not a test.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import anyio  # noqa: E402

from imprintd import settings as settings_mod  # noqa: E402
from imprintd.models.base import request_scope  # noqa: E402
from imprintd.models.embedded import embedded_model_path  # noqa: E402
from imprintd.models.local import LocalModel  # noqa: E402
from imprintd.models.state_cache import common_prefix, states_folder  # noqa: E402

TTFT_TARGET = 0.3
#: ``models/base.report_usage``'s line.
USAGE = re.compile(r": (\d+) prompt tokens, (\d+) evaluated, (\d+) generated \(")
TOPICS = [
    "the billing service's retry policy",
    "how the gateway routes requests to the inventory service",
    "why the nightly export job sometimes runs twice",
    "the cache invalidation rules of the product catalogue",
    "what the on-call engineer checks first during an outage",
    "how database migrations are rolled out to staging",
    "the rate limits of the public API",
    "how feature flags are cleaned up after a release",
    "the format of the audit log entries",
    "what happens when a payment provider times out",
    "how search results are ranked for new products",
    "the backup schedule of the order database",
    "how the mobile app learns about a forced update",
    "the steps of the quarterly access review",
    "how the recommendation model is retrained",
    "why two warehouses report different stock counts",
    "how support tickets are routed to the right team",
    "the limits on file uploads in the admin panel",
]
#: Questions about httpx's source, as a user new to it asks them, one after another. The in-sample
#: session: the fitting constants were chosen by simulating it and checked on it.
WORKSPACE_QUESTIONS = [
    "What is the default timeout of an httpx client, in seconds?",
    "How many redirects does a client follow by default?",
    "Where is the default limit on keep-alive connections set?",
    "Which hash algorithms does DigestAuth support?",
    "How does httpx decode a brotli encoded response?",
    "What exception is raised when a request times out while reading?",
    "How are query parameters merged with the URL's own?",
    "Which status codes count as redirects?",
    "How does the client build the User-Agent header?",
    "What does raise_for_status do for a 404 response?",
    "How are multipart file uploads encoded?",
    "Where are proxies read from the environment?",
    "How is a cookie jar attached to a client?",
    "What does the stream method of a client return?",
    "How is the maximum URL length checked?",
    "Which transports does httpx ship with?",
    "How does httpx encode a JSON request body?",
    "What does the Limits class configure?",
    "How does a client close its transport?",
    "Which HTTP versions can a client speak?",
]
WORKSPACE_OTHERS = [
    "What does the Response class hold?",
    "And its status code?",
    "And its headers?",
    "And its encoding?",
]
#: The held-out session (``--repo anyio``): another installed package's source and questions
#: written for it after the constants were chosen, never used to choose them.
HELD_OUT_QUESTIONS = [
    "How many worker threads may run at once by default in to_thread.run_sync?",
    "How does fail_after cancel a block that runs too long?",
    "What is the default buffer size of a memory object stream?",
    "Which exception is raised when sending to a memory object stream whose receivers are closed?",
    "What delay does connect_tcp use between connection attempts in happy eyeballs?",
    "Where does anyio find out which async backend is running?",
    "What does CapacityLimiter.acquire_on_behalf_of do?",
    "How is a TLS stream wrapped around an existing byte stream?",
    "What does run_process return when the command exits?",
    "How does anyio.Path run file operations without blocking the event loop?",
    "How are exceptions from several tasks in a task group combined?",
    "What does move_on_after do when its deadline passes?",
    "How does from_thread.run call back into the event loop?",
    "Which signals can open_signal_receiver listen for?",
    "How does a Lock decide which waiting task gets it next?",
    "What does the wait method of an Event return?",
    "How does a Semaphore limit concurrent tasks?",
    "What does create_task_group return?",
    "How does anyio.sleep_forever wait?",
    "Which exception does a closed stream raise on receive?",
]
HELD_OUT_OTHERS = [
    "What does the TaskGroup class hold?",
    "And its cancel scope?",
    "And its start method?",
    "And its start_soon method?",
]
#: Workspace sessions: the installed package whose source is copied, its questions and the other
#: session's questions.
REPOS = {
    "httpx": (WORKSPACE_QUESTIONS, WORKSPACE_OTHERS),
    "anyio": (HELD_OUT_QUESTIONS, HELD_OUT_OTHERS),
}


def question(number: int, chars: int) -> str:
    """A chat-only follow-up of about ``chars`` characters, different in every reply."""
    topic = TOPICS[number % len(TOPICS)]
    text = f"Question {number}: tell me about {topic}."
    filler = (
        f" Keep in mind what we said before about {topic}, and explain it the way you would to a new"
        " colleague who joined the team this week and has not read the design notes yet."
    )
    while len(text) < chars:
        text += filler
    return text[:chars]


@dataclass
class Request:
    """One model request as the usage log line reported it."""

    coordinator: bool  # a session's coordinator round or final answer (its state is kept)
    prompt: int
    evaluated: int
    #: For coordinator requests, what the trace compares: the session, the prompt's messages,
    #: tools and tokens, and the tokens llama.cpp held after it (the prompt and the answer).
    session_id: str = ""
    messages: list = field(default_factory=list)
    tools: list = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    turn_start: int = 0


@dataclass
class Reply:
    scenario: str
    requests: list[Request] = field(default_factory=list)
    #: The running summary was written on this reply: its system prompt changed, so its first
    #: request shares only the start of the system prompt with the saved state.
    summarized: bool = False
    session_id: str = ""


class NoEvents:
    """The reply's events, dropped, but for the running summary: a reply that wrote one is marked."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply

    def begin(self, session_id, reply_id): ...
    def text(self, delta): ...
    def reasoning(self, delta): ...
    def text_was_preamble(self): ...
    def progress(self, message, percentage=None): ...
    def tool_step(self, step): ...
    async def ask_permission(self, request):
        return "reject"

    def summary(self, text, first_seq, last_seq):
        self.reply.summarized = True

    def context_usage(self, usage): ...


class Bench(logging.Handler):
    """Collects every usage log line into the reply being asked."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.replies: list[Reply] = []
        self.restarted: tuple | None = None  # (messages, tools, text, first token s, restored)
        self.model: LocalModel | None = None  # the latest, for detokenizing in the trace

    def emit(self, record: logging.LogRecord) -> None:
        match = USAGE.search(record.getMessage())
        if match and self.replies:
            # Logged in the request's own context: its scope says whose request it was.
            scope = request_scope()
            coordinator = scope is not None and scope.keep
            self.replies[-1].requests.append(Request(coordinator, int(match.group(1)), int(match.group(2))))

    def model_factory(self, chat):
        bench = self

        class Recorded(LocalModel):
            async def complete(self, messages, tools=(), *, max_tokens, timeout=None, on_text=None, **hooks):
                scope = request_scope()
                coordinator = scope is not None and scope.keep
                completion = await super().complete(
                    messages, tools, max_tokens=max_tokens, timeout=timeout, on_text=on_text, **hooks
                )
                reply = bench.replies[-1] if bench.replies else None
                if reply is not None and coordinator and reply.requests and reply.requests[-1].coordinator:
                    request = reply.requests[-1]  # logged by report_usage inside complete
                    request.session_id = scope.session_id if scope is not None else ""
                    request.messages, request.tools = list(messages), list(tools)
                    request.tokens = self.prompt_tokens(messages, tools)
                    request.held = list(self.load().held_tokens())
                    users = [n for n, message in enumerate(messages) if message.role == "user"]
                    if users:
                        # Where this turn (its question, then its first look) starts in the tokens.
                        before = self.prompt_tokens(messages[: users[-1]], tools)
                        request.turn_start = common_prefix(array("i", request.tokens), array("i", before))
                    bench.model = self
                if reply is not None and reply.scenario == "restart" and bench.restarted is None and coordinator:
                    bench.restarted = (list(messages), list(tools), completion.text, self.last_first_token_s)
                return completion

        return Recorded(
            embedded_model_path(),
            n_ctx=chat.n_ctx,
            state_cache_memory=chat.state_cache_memory,
            state_cache_disk=chat.state_cache_disk,
            state_folder=states_folder(settings_mod.cache_dir()),
        )

    def shares(
        self, scenario: str, summarized: bool | None = None
    ) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
        """(evaluated, prompt) of the scenario's replies (only those that wrote a summary, or only
        those that did not, where ``summarized`` says): first coordinator requests, all
        coordinator requests, all requests."""
        first = [0, 0]
        coordinator = [0, 0]
        every = [0, 0]
        for reply in self.replies:
            if reply.scenario != scenario or (summarized is not None and reply.summarized != summarized):
                continue
            firsts = [r for r in reply.requests if r.coordinator][:1]
            for totals, requests in (
                (first, firsts),
                (coordinator, [r for r in reply.requests if r.coordinator]),
                (every, reply.requests),
            ):
                totals[0] += sum(r.evaluated for r in requests)
                totals[1] += sum(r.prompt for r in requests)
        return (first[0], first[1]), (coordinator[0], coordinator[1]), (every[0], every[1])


def share(pair: tuple[int, int]) -> str:
    evaluated, prompt = pair
    return f"{evaluated / prompt if prompt else 0.0:.2f} ({evaluated:>5}/{prompt:<6})"


#: Switches tried, at each point, until one lands on a reply that writes no summary.
SWITCH_TRIES = 3
#: The follow-ups before which the session is switched to and then restarted: a switch or a
#: restart is one reply and lands wherever it lands (right after a drop point, or on one), so
#: each is measured at three points of the session and the target reads on their mean.
POINTS = (4, 7, 10)


async def run_session(
    bench: Bench,
    *,
    n_ctx: int,
    max_tokens: int,
    asks: list[str],
    follow_ups: int,
    workspace: Path | None,
    others: list[str],
    points: tuple[int, ...] = POINTS,
) -> None:
    """First question, ``follow_ups`` follow-ups, and before each of the ``points`` follow-ups a
    switch and a restart.

    The session asks ``asks`` in order (cycled), whatever the reply is labelled. At a point,
    another session answers once (``others``, cycled; a new session at the first point) and the
    first session's next question is the switch; then the ``Chat`` is closed, a new one made on
    the same cache dir, and the next question is the restart. A switch that lands on a reply
    writing the running summary is reported apart ("switch, summary"): its system prompt
    changed, which says nothing about the switch. Then the other session answers once more and
    the first is switched to again, up to ``SWITCH_TRIES`` times.
    """
    from imprintd.chat import Chat
    from imprintd.reply import ReplyRequest

    resolved = settings_mod.load({"chat.n_ctx": n_ctx, "chat.max_tokens": max_tokens, "chat.first_look": True})
    where = str(workspace) if workspace else None
    questions = iter(asks[n % len(asks)] for n in range(10_000))
    other_questions = iter(others[n % len(others)] for n in range(10_000))

    async def ask(chat: Chat, text: str, session: str | None, scenario: str) -> Reply:
        reply = Reply(scenario)
        bench.replies.append(reply)
        outcome = await chat.reply(ReplyRequest(text=text, session_id=session, workspace=where), NoEvents(reply))
        reply.session_id = outcome.session_id
        return reply

    chat = Chat(resolved, model_factory=bench.model_factory)
    first = (await ask(chat, next(questions), None, "first")).session_id
    other: str | None = None
    # A point past the last follow-up is made at the session's end (``--points 14`` with 13
    # follow-ups: the single switch and restart of the benchmark's first version).
    for number in range(1, follow_ups + 2):
        if number in points or (number == follow_ups + 1 and any(point > follow_ups for point in points)):
            for _ in range(SWITCH_TRIES):
                other = (await ask(chat, next(other_questions), other, "other session")).session_id
                switched = await ask(chat, next(questions), first, "switch")
                if not switched.summarized:
                    break
                switched.scenario = "switch, summary"
            chat.close()  # queued states reach the disk, as on a daemon's shutdown
            chat = Chat(resolved, model_factory=bench.model_factory)
            await ask(chat, next(questions), first, "restart")
        if number <= follow_ups:
            await ask(chat, next(questions), first, "follow-ups")
    chat.close()


def report(bench: Bench, title: str) -> None:
    print(title)
    print(f"  {'scenario':<22} {'first requests':>20} {'coordinator requests':>22} {'all requests':>20}")
    rows: list[tuple[str, str, bool | None]] = [
        ("follow-ups", "follow-ups", None),
        ("  wrote no summary", "follow-ups", False),
        ("  wrote the summary", "follow-ups", True),
        ("switch", "switch", None),
        ("switch, summary", "switch, summary", None),
        ("restart", "restart", None),
        ("  wrote the summary", "restart", True),
    ]
    for label, scenario, summarized in rows:
        count = sum(
            1
            for reply in bench.replies
            if reply.scenario == scenario and (summarized is None or reply.summarized == summarized)
        )
        if count == 0 and (summarized is not None or scenario == "switch, summary"):
            continue
        first, coordinator, every = bench.shares(scenario, summarized)
        label = f"{label} ({count})"
        print(f"  {label:<22} {share(first):>20} {share(coordinator):>22} {share(every):>20}")
    per_reply = []
    for reply in bench.replies:
        if reply.scenario == "follow-ups":
            per_reply.append(
                " + ".join(f"{r.evaluated}/{r.prompt}{'' if r.coordinator else 's'}" for r in reply.requests)
                + (" (summary written)" if reply.summarized else "")
            )
    print("  follow-ups, each reply's requests evaluated/prompt (s: side request):")
    for number, line in enumerate(per_reply, 1):
        print(f"    {number:>2}: {line}")
    for scenario in ("switch", "restart"):
        print(f"  {scenario}: {point_shares(bench, scenario)}")


def point_shares(bench: Bench, scenario: str) -> str:
    """Each of the scenario's replies' first-request share, in order, and their mean (the target
    reads on the mean: one reply lands wherever it lands, on a drop point or just after one)."""
    values = []
    for reply in bench.replies:
        first = [r for r in reply.requests if r.coordinator][:1]
        if reply.scenario == scenario and first and first[0].prompt:
            values.append(first[0].evaluated / first[0].prompt)
    if not values:
        return "none"
    each = ", ".join(f"{value:.2f}" for value in values)
    return f"{each}; mean {sum(values) / len(values):.2f} of {len(values)}"


def _same(a, b) -> bool:
    """Two messages render alike (what the prompt reads of them)."""
    return (a.role, a.prompt_content, a.tool_calls, a.tool_call_id, a.name) == (
        b.role,
        b.prompt_content,
        b.tool_calls,
        b.tool_call_id,
        b.name,
    )


def trace(bench: Bench) -> None:
    """Where each follow-up's first request's evaluated tokens go.

    Per reply (follow-ups, switch, restart): its first coordinator request's prompt tokens P and
    evaluated E; the floor, what is new since the session's previous coordinator request (this
    turn: the question and its first look, from where the turn starts in the tokens); the excess
    E - floor; the tokens it shares with what llama.cpp held after that previous request (its
    prompt and answer); and when that is less than where this turn starts, what differs: the
    first message of the earlier prompt not rendered alike here (dropped, or changed: the system
    prompt gains the summary), whether the tools changed, and the text at the token where the
    two part.
    """
    print("  trace: first requests, P prompt / E evaluated / floor (this turn) / excess E-floor;")
    print("         shared: tokens in common with the session's previous state (prompt + answer)")
    last: dict[str, Request] = {}
    totals = [0, 0, 0]
    number = 0
    for reply in bench.replies:
        coordinators = [r for r in reply.requests if r.coordinator]
        first = coordinators[0] if coordinators else None
        previous = last.get(first.session_id) if first is not None else None
        if first is not None and previous is not None and reply.scenario in ("follow-ups", "switch", "restart"):
            number += reply.scenario == "follow-ups"
            label = f"{number:>2}" if reply.scenario == "follow-ups" else reply.scenario
            floor = len(first.tokens) - first.turn_start
            shared = common_prefix(array("i", first.tokens), array("i", previous.held))
            excess = first.evaluated - floor
            if reply.scenario == "follow-ups":
                totals[0] += first.evaluated
                totals[1] += floor
                totals[2] += first.prompt
            line = (
                f"    {label}: P {first.prompt} E {first.evaluated} floor {floor} excess {excess:+d}; "
                f"shared {shared} of {len(previous.held)} held, turn starts at {first.turn_start}"
                + (" (summary written)" if reply.summarized else "")
            )
            print(line)
            if shared < first.turn_start:
                old_messages, new_messages = previous.messages, first.messages
                at = next(
                    (
                        n
                        for n in range(min(len(old_messages), len(new_messages)))
                        if not _same(old_messages[n], new_messages[n])
                    ),
                    min(len(old_messages), len(new_messages)),
                )
                what = "none (all earlier messages alike)"
                if at < len(old_messages):
                    gone = old_messages[at]
                    dropped = not any(_same(gone, m) for m in new_messages)
                    kind = "tool exchange" if gone.is_tool_exchange else gone.role
                    what = f"message {at} ({kind}, {'dropped' if dropped else 'changed'})"
                    if dropped:
                        kept = [m for m in old_messages if any(_same(m, n) for n in new_messages)]
                        what += f", {len(old_messages) - len(kept)} of the earlier {len(old_messages)} gone"
                tools = "same" if previous.tools == first.tools else "CHANGED"
                print(f"        parts at: {what}; tools {tools}")
                if bench.model is not None:
                    llama = bench.model.load().llama
                    for name, tokens in (("new", first.tokens), ("old", previous.held)):
                        text = llama.detokenize(tokens[shared : shared + 24]).decode("utf-8", "replace")
                        print(f"        {name}: {text!r}")
        if coordinators:
            last[coordinators[-1].session_id] = coordinators[-1]
    evaluated, floor, prompt = totals
    if prompt:
        print(
            f"  follow-ups' first requests: evaluated {evaluated / prompt:.2f} of the prompt, the floor "
            f"{floor / prompt:.2f} ({evaluated}/{floor}/{prompt}); excess {evaluated - floor} tokens"
        )


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--follow-ups", type=int, default=13)
    parser.add_argument("--workspace-follow-ups", type=int, default=12)
    parser.add_argument("--question-chars", type=int, default=600)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--skip-chat", action="store_true", help="only the workspace sessions")
    parser.add_argument(
        "--points",
        type=int,
        nargs="+",
        default=list(POINTS),
        help="the follow-ups before which a switch and a restart are made; past the last: at the session's end",
    )
    parser.add_argument("--n-ctx", type=int, nargs="*", default=[4096, 2048], help="workspace sessions' contexts")
    parser.add_argument(
        "--repo",
        choices=sorted(REPOS),
        default="httpx",
        help="the workspace session's package and questions: httpx (in-sample) or anyio (held out)",
    )
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="imprint-bench-followups-"))
    package = importlib.import_module(args.repo)
    version = importlib.metadata.version(args.repo)
    workspace = folder / args.repo
    shutil.copytree(Path(str(package.__file__)).parent, workspace, ignore=shutil.ignore_patterns("__pycache__"))
    questions, workspace_others = REPOS[args.repo]
    usage_logger = logging.getLogger("imprintd.models")
    usage_logger.setLevel(logging.INFO)
    started = time.perf_counter()
    others = [question(90 + n, args.question_chars) for n in range(len(args.points) * SWITCH_TRIES)]
    restarted = None
    if not args.skip_chat:
        bench = Bench()
        usage_logger.addHandler(bench)
        _isolate(folder / "chat")
        asks = [
            question(n, args.question_chars) for n in range(1, args.follow_ups + len(args.points) * SWITCH_TRIES + 2)
        ]
        await run_session(
            bench,
            n_ctx=2048,
            max_tokens=args.max_tokens,
            asks=asks,
            follow_ups=args.follow_ups,
            workspace=None,
            others=others,
            points=tuple(args.points),
        )
        usage_logger.removeHandler(bench)
        report(
            bench,
            f"chat-only, n_ctx 2048, {args.follow_ups} follow-ups of {args.question_chars} characters, "
            f"max_tokens {args.max_tokens} ({time.perf_counter() - started:.0f} s so far)",
        )
        trace(bench)
        restarted = bench.restarted
    for n_ctx in args.n_ctx:
        bench = Bench()
        usage_logger.addHandler(bench)
        _isolate(folder / f"workspace-{n_ctx}")
        await run_session(
            bench,
            n_ctx=n_ctx,
            max_tokens=args.max_tokens,
            asks=questions,
            follow_ups=args.workspace_follow_ups,
            workspace=workspace,
            others=workspace_others,
            points=tuple(args.points),
        )
        usage_logger.removeHandler(bench)
        side = sum(1 for reply in bench.replies for r in reply.requests if not r.coordinator)
        report(
            bench,
            f"workspace ({args.repo} {version} source, {'in-sample' if args.repo == 'httpx' else 'held out'}, "
            f"first look on), n_ctx {n_ctx}, {args.workspace_follow_ups} follow-ups, max_tokens {args.max_tokens}, "
            f"{side} side requests ({time.perf_counter() - started:.0f} s so far)",
        )
        trace(bench)
    if restarted is not None:
        messages, tools, text, first_token_s = restarted
        cold = LocalModel(embedded_model_path(), n_ctx=2048)
        cold.load()
        completion = await cold.complete(messages, tools, max_tokens=args.max_tokens)
        cold_first = cold.last_first_token_s or 0.0
        restored_first = first_token_s or 0.0
        print(f"time to first token, chat-only follow-up after a restart (target <= {TTFT_TARGET}x cold):")
        print(
            f"  {restored_first * 1000:.0f} ms; cold: {cold_first * 1000:.0f} ms; ratio "
            f"{restored_first / cold_first if cold_first else 0:.2f}x; same greedy answer: "
            f"{'yes' if completion.text == text else 'no'}"
        )
    print(f"({time.perf_counter() - started:.0f} s in all)")
    return 0


def _isolate(folder: Path) -> None:
    """A fresh data and cache dir: each session run starts with no saved states."""
    for name in ("DATA", "CACHE"):
        os.environ[f"IMPRINT_{name}_DIR"] = str(folder / name.lower())
    os.environ["IMPRINT_CONFIG"] = str(folder / "config.toml")


if __name__ == "__main__":
    sys.exit(anyio.run(main))
