"""Does conversation_history bring back the message that answers the question?

Builds a generated conversation in a real ``Store`` (a temporary data dir): dated sessions of
short chatty turns, long pastes (compose files, logs, env files), tool calls and results, and
planted facts of four kinds, each asked about at the end:

- ``restated``: the user states a fact about a person or project; the question names them but
  asks in other words ("Where does Maya Okafor live now?" after "… just moved to Lisbon …"), and
  the same names come up in small talk elsewhere;
- ``answer``: the user asks something, the assistant's reply answers it without repeating the
  question's words; the later question repeats the first one's words, so only the question
  matches and the answer is its neighbour;
- ``paste``: a value deep inside a long pasted file, asked about by its key's words;
- ``date``: something done on a given day, asked about by verb and date ("what did I order on
  November 12").

For every question it runs, side by side on the same messages:

- the first search as it was (``history_adr0141.py``: the best two messages, places chosen by
  raw term counts, index built per reply);
- the new ranking with neighbourhood smoothing turned off (an ablation: BM25 × coverage and the
  budget filled, nothing found through neighbours);
- the new ranking (``imprintd.context.history`` on the store's index).

A question counts as recalled when the answer's message is quoted with the fact's value inside
the quote. It prints recall by kind, characters used and milliseconds per query (the old one
per query after its per-reply build, plus that build; the new one on the stored index).

With ``--replay`` it replays the same conversation instead through the daemon (``Chat``, the
remote provider on a loopback OpenAI-compatible stub, default settings), in a session with a
workspace (service settings, notes on the chat's topics, the team), twice side by side, turn by
turn: the first look off and on, each turn and each question on one side and then the other (which
goes first alternating), so a machine that slows down during the run slows both. Each planned turn is a reply (the stub says the planned answer; a planned tool
exchange is the model's own workspace ``search``), then each question is asked in the same
session, the stub calling ``conversation_history`` with it. A question counts as recalled when the
tool's output as it reached the model quotes the fact's value inside the answer's message. It
prints recall by kind, the replay's and the questions' seconds, the CPU seconds of both (the
process's, the stub's threads included: steadier than wall time when other work shares the
cores), and the ratios on vs off.

Not a test: run ``python bench/bench_history_recall.py`` (``--replay``: several minutes;
``--limit N`` replays the first N turns only and asks about them; ``--profile PREFIX`` writes
cProfile statistics of each run to ``PREFIX-off.prof`` and ``PREFIX-on.prof``).
"""

from __future__ import annotations

import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import history_adr0141 as adr0141  # noqa: E402

from imprintd.context import history as current  # noqa: E402
from imprintd.messages import Message, ToolCall, assistant, tool_result, user  # noqa: E402
from imprintd.store import Store  # noqa: E402

SEED = 13
SESSIONS = 16
DAY = 86_400.0
START = time.mktime((2026, 10, 5, 9, 0, 0, 0, 0, -1))

FIRST = [
    "Maya",
    "Tomas",
    "Ines",
    "Jonah",
    "Priya",
    "Lukas",
    "Aiko",
    "Mateo",
    "Zara",
    "Felix",
    "Nadia",
    "Oskar",
    "Leila",
    "Ravi",
    "Elena",
    "Hugo",
    "Sana",
    "Theo",
    "Mira",
    "Dario",
]
LAST = [
    "Okafor",
    "Lindqvist",
    "Moreau",
    "Tanaka",
    "Haddad",
    "Kowalski",
    "Brennan",
    "Alvarez",
    "Novak",
    "Castell",
    "Ibsen",
    "Farrow",
]
CITIES = [
    "Lisbon",
    "Porto",
    "Ghent",
    "Leipzig",
    "Tromso",
    "Bergen",
    "Tallinn",
    "Ljubljana",
    "Graz",
    "Turku",
    "Aarhus",
    "Utrecht",
    "Lyon",
    "Bilbao",
    "Krakow",
    "Brno",
    "Cork",
    "Galway",
    "Basel",
    "Lucerne",
    "Innsbruck",
    "Salzburg",
    "Trieste",
    "Verona",
    "Zadar",
    "Split",
    "Riga",
    "Vilnius",
]
JOBS = [
    "radiographer",
    "anaesthetist",
    "midwife",
    "pharmacist",
    "physiotherapist",
    "paramedic",
    "dietitian",
    "audiologist",
    "orthoptist",
    "phlebotomist",
    "sonographer",
    "perfusionist",
]
PROJECTS = [
    "harbor",
    "lantern",
    "quarry",
    "meadow",
    "cinder",
    "falcon",
    "juniper",
    "pebble",
    "tundra",
    "willow",
    "saffron",
    "comet",
    "ember",
    "glacier",
    "orchid",
    "prism",
    "basalt",
    "heron",
    "marigold",
    "sextant",
]
DATABASES = ["Postgres", "MariaDB", "CockroachDB", "SQLite", "ClickHouse", "DuckDB", "ScyllaDB", "FoundationDB"]
BOOKS = [
    "The Overstory",
    "Piranesi",
    "Klara and the Sun",
    "The Dispossessed",
    "Middlemarch",
    "Stoner",
    "Gilead",
    "The Remains of the Day",
    "Pachinko",
    "Station Eleven",
    "A Gentleman in Moscow",
    "Hamnet",
]
SERVICES = [
    "billing",
    "invoicing",
    "ledger",
    "payouts",
    "checkout",
    "catalog",
    "inventory",
    "shipping",
    "search",
    "pricing",
    "loyalty",
    "refunds",
    "reports",
    "audit",
    "tenancy",
    "identity",
]
REASONS = [
    "the endless touring",
    "a falling-out over money",
    "a wrist injury",
    "a new baby",
    "the move abroad",
    "burnout after the album",
    "a day job he loved more",
    "creative differences",
]
ITEMS = [
    "kettle",
    "desk",
    "lamp",
    "bike",
    "helmet",
    "rain",
    "jacket",
    "blender",
    "standing",
    "mat",
    "coffee",
    "grinder",
    "backpack",
    "monitor",
    "arm",
    "toaster",
]
CHAT = [
    "Morning! How is it going?",
    "Fine, thanks. Busy day ahead?",
    "Quite busy, meetings all afternoon.",
    "Good luck with them.",
    "Thanks, I will need it.",
    "Any plans for the evening?",
    "Maybe a walk if it stays dry.",
    "Sounds nice.",
    "The weather has been odd lately.",
    "True, warm one day and cold the next.",
    "I should get back to work.",
    "Talk later then.",
    "Did you sleep well?",
    "Not really, the neighbours were loud.",
    "That is annoying.",
    "Coffee first, then the rest of the day.",
]
TOPICS = [
    "service",
    "config",
    "deploy",
    "cluster",
    "node",
    "memory",
    "cache",
    "queue",
    "worker",
    "schedule",
    "retry",
    "timeout",
    "latency",
    "release",
    "branch",
    "commit",
    "review",
    "test",
    "build",
    "image",
    "volume",
    "network",
    "proxy",
    "gateway",
    "certificate",
    "port",
]


@dataclass
class Fact:
    kind: str
    question: str
    value: str
    seq: int = 0  # the answer's message, once stored


class Builder:
    """Collects (day, message) pairs and the facts planted in them."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.messages: list[tuple[int, Message]] = []
        self.facts: list[tuple[Fact, int]] = []  # fact, index of its answer in ``messages``
        self.day = 0

    def say(self, message: Message) -> int:
        self.messages.append((self.day, message))
        return len(self.messages) - 1

    def chatter(self, turns: int, names: list[str]) -> None:
        for i in range(turns):
            if names and self.rng.random() < 0.25:
                name = self.rng.choice(names)
                text = self.rng.choice(
                    [
                        f"Had lunch with {name} today, it was nice.",
                        f"{name} says hi, by the way.",
                        f"I owe {name} a call this week.",
                        f"Saw {name} at the market this morning.",
                    ]
                )
            elif self.rng.random() < 0.3:
                text = " ".join(self.rng.choice(TOPICS) for _ in range(self.rng.randint(8, 30))).capitalize() + "."
            else:
                text = self.rng.choice(CHAT)
            self.say((user if i % 2 == 0 else assistant)(text))

    def elaboration(self, longest: int) -> str:
        words = [self.rng.choice(TOPICS) for _ in range(self.rng.randint(0, longest // 7))]
        return (" " + " ".join(words).capitalize() + ".") if words else ""


def build(rng: random.Random) -> tuple[list[tuple[int, Message]], list[tuple[Fact, int]]]:
    b = Builder(rng)
    people = [f"{f} {last}" for f, last in zip(rng.sample(FIRST, 20), rng.choices(LAST, k=20), strict=True)]
    firsts = [p.split()[0] for p in people]
    cities, jobs, books = rng.sample(CITIES, len(CITIES)), list(JOBS), list(BOOKS)
    ports = rng.sample(range(8100, 8999), 200)
    plans: list[Callable[[], None]] = []

    def restated(i: int) -> Callable[[], None]:
        person, first = people[i % 20], firsts[i % 20]
        kind = i // 20 % 4
        if kind == 0:
            city = cities.pop()
            fact, question, value = (
                f"My friend {person} just moved to {city} for a new job.",
                f"Where does {first} live now?",
                city,
            )
        elif kind == 1:
            job = jobs.pop() if jobs else "nurse"
            fact, question, value = f"{person} works as a {job} these days.", f"What is {first}'s profession?", job
        elif kind == 2:
            book = books.pop() if books else "Moby Dick"
            fact, question, value = (
                f"{first} lent me {book}, apparently a must-read.",
                f"Which novel did {first} recommend?",
                book,
            )
        else:
            project, database = PROJECTS[i % 20], rng.choice(DATABASES)
            fact = f"For the {project} project we settled on {database} for storage."
            question, value = f"What did we pick as the {project} database?", database

        def plan() -> None:
            b.facts.append((Fact("restated", question, value), b.say(user(fact))))
            b.say(assistant(rng.choice(["Noted.", "Good to know.", "Got it, I will remember that."])))

        return plan

    # Every (kind, subject) once, so each question has one answer.
    answers = [("port", s) for s in SERVICES] + [("timeout", s) for s in SERVICES]
    answers += [("ttl", s) for s in SERVICES] + [("band", p) for p in range(20)]
    rng.shuffle(answers)

    def answer(i: int) -> Callable[[], None]:
        kind, subject = answers[i]
        port = ports[i]
        if kind == "port":
            question, reply = (
                f"Which port should the {subject} service listen on?",
                f"Use {port}; the one below it is taken.",
            )
            later, value = f"{subject} service port", str(port)
        elif kind == "timeout":
            question, reply = (
                f"What timeout do you suggest for the {subject} client?",
                f"{port % 50 + 5} seconds, with two retries and jitter.",
            )
            later, value = f"timeout for the {subject} client", f"{port % 50 + 5} seconds"
        elif kind == "ttl":
            question, reply = f"How long should the {subject} cache TTL be?", f"{port % 40 + 2} minutes is plenty."
            later, value = f"cache TTL for {subject}", f"{port % 40 + 2} minutes"
        else:
            question = f"Any idea why {firsts[subject]} quit the band?"
            reply = f"From what you told me, it was {REASONS[subject % 8]}."
            later, value = f"why did {firsts[subject]} quit the band", REASONS[subject % 8]

        def plan() -> None:
            b.say(user(question))
            index = b.say(assistant(reply + b.elaboration(1_200)))
            b.facts.append((Fact("answer", later, value), index))

        return plan

    settings = [(s, name) for s in SERVICES for name in ("queue depth", "pool size", "flush interval")]
    rng.shuffle(settings)

    def paste(i: int) -> Callable[[], None]:
        (service, setting), port = settings[i], ports[100 + i]
        key = f"{service}_{setting}".upper().replace(" ", "_")
        lines = [
            f"{TOPICS[j % len(TOPICS)].upper()}_{SERVICES[j % len(SERVICES)].upper()}_LIMIT={rng.randint(1, 999)}"
            for j in range(rng.randint(60, 200))
        ]
        lines.insert(rng.randint(20, len(lines) - 1), f"{key}={port}")
        text = "Here is the env file for staging:\n" + "\n".join(lines)

        def plan() -> None:
            b.facts.append((Fact("paste", f"{service} {setting} setting", f"{key}={port}"), b.say(user(text))))
            b.say(assistant("Thanks, I have the env file." + b.elaboration(600)))

        return plan

    def dated(i: int) -> Callable[[], None]:
        item = ITEMS[i % len(ITEMS)]
        verb, past = [("order", "Ordered"), ("return", "Returned"), ("repair", "Repaired")][i % 3]

        def plan() -> None:
            month_day = time.strftime("%B %-d", time.localtime(START + b.day * 3 * DAY))
            index = b.say(user(f"{past} a new {item} today, finally."))
            b.facts.append((Fact("date", f"what did I {verb} on {month_day}", item), index))
            b.say(assistant("Nice, enjoy it."))

        return plan

    plans += [restated(i) for i in range(80)] + [answer(i) for i in range(60)]
    plans += [paste(i) for i in range(40)] + [dated(i) for i in range(16 * 3)]
    rng.shuffle(plans)
    # Dated facts: at most one of each verb a day, so "what did I order on …" has one answer.
    per_session = -(-len(plans) // SESSIONS)
    for session in range(SESSIONS):
        b.day = session
        for plan in plans[session * per_session : (session + 1) * per_session]:
            b.chatter(rng.randint(0, 4), firsts)
            plan()
        if session % 3 == 0:  # a compose file and a tool exchange now and then
            call = ToolCall(id=f"call_{session}", name="search_workspace", arguments={"query": rng.choice(TOPICS)})
            b.say(user("Can you look up how we deploy the gateway?"))
            b.say(assistant("", tool_calls=(call,)))
            b.say(tool_result(call, " ".join(rng.choice(TOPICS) for _ in range(400))))
            b.say(assistant("We deploy it with the release pipeline." + b.elaboration(800)))
    return b.messages, b.facts


def dedupe_dates(facts: list[tuple[Fact, int]]) -> list[tuple[Fact, int]]:
    """Keep one date question per verb and day (two orders on one day would have two answers)."""
    seen, kept = set(), []
    for fact, index in facts:
        if fact.kind == "date":
            key = fact.question.split(" on ")
            if tuple(key) in seen:
                continue
            seen.add(tuple(key))
        kept.append((fact, index))
    return kept


def store_conversation(store: Store, messages: list[tuple[int, Message]], clock: list[float]) -> list[Message]:
    session = store.create_session()
    stored: list[Message] = []
    for day, message in messages:
        clock[0] = START + day * 3 * DAY + len(stored)  # sessions every third day
        stored += store.extend(session.id, [message])
    return stored, session.id


def recalled(places, seq: int, content: str, value: str) -> bool:
    at = content.find(value)
    return any(p.seq == seq and p.start <= at and at + len(value) <= p.end for p in places)


def main() -> None:
    rng = random.Random(SEED)
    planned, facts = build(rng)
    facts = dedupe_dates(facts)
    clock = [START]
    with tempfile.TemporaryDirectory() as directory:
        store = Store.open(Path(directory) / "bench.sqlite3", clock=lambda: clock[0])
        stored, session_id = store_conversation(store, planned, clock)
        for fact, index in facts:
            fact.seq = stored[index].seq
        chars = sum(len(m.content) for m in stored)
        with store.reading() as db:
            days = len(
                {time.strftime("%F", time.localtime(t)) for (t,) in db.execute("SELECT created_at FROM messages")}
            )
        kinds = sorted({fact.kind for fact, _ in facts})
        print(
            f"conversation: {len(stored)} messages, {chars:,} characters, {days} dated sessions; "
            f"{len(facts)} questions ({', '.join(f'{k} {sum(f.kind == k for f, _ in facts)}' for k in kinds)})"
        )

        build_start = time.perf_counter()
        old = adr0141.ConversationHistory(stored)
        old.build_index()
        old_build_ms = (time.perf_counter() - build_start) * 1000
        new = current.ConversationHistory(stored, store.history_index(session_id))

        smoothing = current._smooth
        flat = current.ConversationHistory(stored, store.history_index(session_id))
        rankers = {
            "first search (best two)": lambda q: old.search_places(q),
            "new, no smoothing": lambda q: _without_smoothing(flat, q, smoothing),
            "new": lambda q: new.search_places(q),
        }
        results = {}
        for name, search in rankers.items():
            hits: dict[str, list[bool]] = {k: [] for k in kinds}
            lengths, times = [], []
            for fact, index in facts:
                start = time.perf_counter()
                found = search(fact.question)
                times.append(time.perf_counter() - start)
                lengths.append(len(found.text))
                hits[fact.kind].append(recalled(found.places, fact.seq, stored[index].content, fact.value))
            results[name] = (hits, lengths, times)
        store.close()

    width = max(len(name) for name in results)
    header = f"{'ranking':<{width}}  " + "  ".join(f"{k:>8}" for k in kinds) + "       all   chars used   ms/query"
    print(header)
    for name, (hits, lengths, times) in results.items():
        every = [h for k in kinds for h in hits[k]]
        cells = "  ".join(f"{sum(hits[k]) / len(hits[k]):>8.0%}" for k in kinds)
        print(
            f"{name:<{width}}  {cells}  {sum(every) / len(every):>8.0%}   "
            f"{statistics.mean(lengths):>10,.0f}   {statistics.mean(times) * 1000:>8.2f}"
        )
    print(
        f"(the first search also builds its index once per reply: {old_build_ms:.1f} ms for this conversation; "
        "the new ranking reads the index the store keeps)"
    )
    old_all = _overall(results["first search (best two)"][0])
    new_all = _overall(results["new"][0])
    print(f"recall of the answer's message: {old_all:.0%} -> {new_all:.0%} ({new_all / old_all:.2f}x)")


def _overall(hits: dict[str, list[bool]]) -> float:
    every = [h for values in hits.values() for h in values]
    return sum(every) / len(every)


def _without_smoothing(history, query, smoothing):
    """The new ranking with S(i) = own(i): what BM25 × coverage and filling the budget do alone."""
    current._smooth = lambda own, count: dict(own)
    try:
        return history.search_places(query)
    finally:
        current._smooth = smoothing


# --- the replay: a session with a workspace, through the daemon ---------------------------------

#: What the replay's workspace holds: the services' settings, notes on the topics the chat talks
#: about, and the team; so most questions' first looks find something, as in a real project.
ROSTER_ROLES = ["owns", "reviews", "deploys", "on call for"]


def write_workspace(root: Path, rng: random.Random) -> None:
    for service in SERVICES:
        lines = [f"name: {service}", f"port: {rng.randint(8100, 8999)}", f"timeout: {rng.randint(5, 60)}s"]
        lines += [f"cache_ttl: {rng.randint(2, 40)}m", "queue depth: 64", "pool size: 8", "flush interval: 5s"]
        (root / "services").mkdir(parents=True, exist_ok=True)
        (root / "services" / f"{service}.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "docs").mkdir(exist_ok=True)
    for topic in TOPICS:
        words = [rng.choice(TOPICS + SERVICES) for _ in range(400)]
        text = "\n".join(" ".join(words[i : i + 12]) for i in range(0, len(words), 12))
        (root / "docs" / f"{topic}.md").write_text(f"# {topic}\n\n{text}\n", encoding="utf-8")
    team = [f"{first} {last} {rng.choice(ROSTER_ROLES)} {rng.choice(SERVICES)}" for first in FIRST for last in LAST[:3]]
    (root / "TEAM.md").write_text("# Team\n\n" + "\n".join(team) + "\n", encoding="utf-8")


@dataclass
class Turn:
    """One planned reply: the question and what the stub model does, round by round."""

    question: Message
    rounds: list[dict]  # {"text": ...} or {"call": name, "arguments": {...}}
    #: Planned messages of this turn by their index in the plan: the user's and the answer's.
    planned: dict[int, str]


def turns_of(planned: list[tuple[int, Message]]) -> list[tuple[int, Turn]]:
    """(day, turn) for every user message of the plan, with the assistant messages after it."""
    out: list[tuple[int, Turn]] = []
    for index, (day, message) in enumerate(planned):
        if message.role == "user":
            out.append((day, Turn(message, [], {index: "user"})))
        elif message.role == "assistant" and message.tool_calls:
            call = message.tool_calls[0]
            # The model's own call: a search of the workspace, as the plan's tool exchange was.
            out[-1][1].rounds.append({"call": "search", "arguments": dict(call.arguments)})
        elif message.role == "assistant":
            out[-1][1].rounds.append({"text": message.content})
            out[-1][1].planned[index] = "assistant"
    return out


class Scripted:
    """The stub model: each reply's rounds in order; a summary request gets a summary."""

    def __init__(self) -> None:
        self.rounds: list[dict] = []
        self.tool_outputs: list[str] = []

    def __call__(self, request: dict):
        from imprintd.context.summary import SUMMARIZER_SYSTEM
        from tests.openai_stub import StubReply

        messages = request["messages"]
        if messages and messages[0]["role"] == "system" and messages[0]["content"] == SUMMARIZER_SYSTEM:
            return StubReply(text="- The user and the assistant chatted about services and friends (#1).")
        if messages[-1]["role"] == "tool" and not str(messages[-1].get("tool_call_id", "")).startswith("call_look"):
            self.tool_outputs.append(str(messages[-1]["content"]))
        step = self.rounds.pop(0) if self.rounds else {"text": "Done."}
        if "call" in step:
            return StubReply(tool_calls=[{"name": step["call"], "arguments": step["arguments"]}])
        return StubReply(text=step["text"] or "OK.")


class _Always(list):
    """The stub's queue of replies, never empty: every request is answered by ``script``."""

    def __init__(self, script: Scripted) -> None:
        super().__init__()
        self.script = script

    def __bool__(self) -> bool:
        return True

    def pop(self, index=-1):  # noqa: ANN001 - the stub's list interface
        return self.script


def quoted_in(output: str, seq: int, value: str) -> bool:
    """Whether ``output`` (conversation_history's text as the model read it) quotes ``value``
    inside message ``seq``'s block."""
    # Each message's block begins with its header, numbered as a research result: ``[3] #12 user``.
    for match in re.finditer(rf"(?m)^(?:\[\d+\] )?#{seq} ", output):
        following = re.search(r"(?m)^(?:\[\d+\] )?#\d+ ", output[match.end() :])
        block = output[match.start() : match.end() + (following.start() if following else len(output))]
        if value in block:
            return True
    return False


class ReplaySide:
    """One side of the replay: a ``Chat`` with the remote provider on its own loopback stub, its
    own data dir and workspace (the same files), the first look on or off. ``turn`` replays one
    planned turn, ``ask`` asks one question with the stub calling ``conversation_history`` with
    it; each times itself (wall and the process's CPU: the other side waits meanwhile), the
    bench's own reading back of what a reply stored left out (the whole session, larger with
    the looks: not the daemon's cost)."""

    def __init__(self, first_look: bool, directory: Path, profile: bool = False) -> None:
        from imprintd import settings as settings_mod
        from imprintd.chat import Chat
        from tests.openai_stub import OpenAIStub

        self.first_look = first_look
        self.workspace = directory / "workspace"
        write_workspace(self.workspace, random.Random(SEED))
        self.script = Scripted()
        # The stub keeps no request: 13,000 prompts kept (larger with the looks) slowed the
        # process's garbage collection, a cost of the bench, not of the daemon.
        self.stub = OpenAIStub(record=False).__enter__()
        self.stub.replies = _Always(self.script)
        values = {"chat.provider": "openai", "chat.base_url": self.stub.base_url, "chat.model": "stub"}
        resolved = settings_mod.load({}, environ={}).apply({**values, "chat.first_look": first_look}, "bench")
        self.clock = [START]
        self.chat = Chat(resolved, data_dir=directory)
        self.chat._store = Store.open(directory / "imprint.sqlite3", clock=lambda: self.clock[0])  # dated days
        self.session_id: str | None = None
        self.seq_of: dict[int, int] = {}  # a planned message's index → its stored seq
        self.count = 0
        self.hits: dict[str, list[bool]] = {}
        #: Seconds: the replay's wall and CPU, the questions' wall and CPU.
        self.replayed = self.replayed_cpu = self.asked = self.asked_cpu = 0.0
        self.profiler = None
        if profile:
            import cProfile

            self.profiler = cProfile.Profile()

    async def _timed(self, request) -> tuple[object, float, float]:
        from tests.recording import RecordingEvents

        if self.profiler is not None:
            self.profiler.enable()
        started, started_cpu = time.perf_counter(), time.process_time()
        outcome = await self.chat.reply(request, RecordingEvents())
        wall, cpu = time.perf_counter() - started, time.process_time() - started_cpu
        if self.profiler is not None:
            self.profiler.disable()
        return outcome, wall, cpu

    async def turn(self, day: int, turn: Turn) -> None:
        from imprintd.chat import ReplyRequest

        self.clock[0] = START + day * 3 * DAY + self.count
        self.script.rounds = list(turn.rounds) or [{"text": "OK."}]
        request = ReplyRequest(
            text=turn.question.content,
            session_id=self.session_id,
            workspace=str(self.workspace) if not self.session_id else None,
        )
        outcome, wall, cpu = await self._timed(request)
        self.replayed += wall
        self.replayed_cpu += cpu
        self.session_id = outcome.session_id
        stored = self.chat.session(self.session_id).messages[self.count :]
        self.count += len(stored)
        for index, role in turn.planned.items():
            found = [m for m in stored if m.role == role and not m.tool_calls]
            self.seq_of[index] = (found[0] if role == "user" else found[-1]).seq

    async def ask(self, fact: Fact, index: int) -> None:
        from imprintd.chat import ReplyRequest

        self.clock[0] += 1
        self.script.rounds = [
            {"call": "conversation_history", "arguments": {"query": fact.question}},
            {"text": "Done."},
        ]
        self.script.tool_outputs = []
        _, wall, cpu = await self._timed(ReplyRequest(text=fact.question, session_id=self.session_id))
        self.asked += wall
        self.asked_cpu += cpu
        output = "\n".join(self.script.tool_outputs)
        self.hits.setdefault(fact.kind, []).append(quoted_in(output, self.seq_of[index], fact.value))

    def close(self) -> None:
        self.chat.close()
        self.stub.__exit__(None, None, None)


async def replay(planned, facts, directory: Path, limit: int | None = None, profile: bool = False) -> list[ReplaySide]:
    """The conversation replayed through ``Chat`` in a session with a workspace, the first look
    off and on side by side, turn by turn (each turn and each question on one side and then the
    other, which goes first alternating): a machine that slows down or speeds up during the run
    does so for both. Then each question is asked on both. Returns the two sides, off first.

    ``limit``: replay only that many turns, and ask only the questions about what they said."""
    import os

    os.environ["IMPRINT_CACHE_DIR"] = str(directory / "cache")
    sides = [
        ReplaySide(first_look, directory / ("on" if first_look else "off"), profile) for first_look in (False, True)
    ]
    try:
        for number, (day, turn) in enumerate(turns_of(planned)[:limit]):
            for side in sides if number % 2 == 0 else sides[::-1]:
                await side.turn(day, turn)
        asked = [(fact, index) for fact, index in facts if index in sides[0].seq_of]  # said in the turns replayed
        for number, (fact, index) in enumerate(asked):
            for side in sides if number % 2 == 0 else sides[::-1]:
                await side.ask(fact, index)
    finally:
        for side in sides:
            side.close()
    return sides


def main_replay(limit: int | None = None, profile: str | None = None) -> None:
    """Both sides, turn by turn; ``profile``: cProfile each side, stats written to ``profile``-off/-on.prof."""
    import anyio

    rng = random.Random(SEED)
    planned, facts = build(rng)
    facts = dedupe_dates(facts)
    turns = f", the first {limit} turns" if limit else ""
    print(
        f"replay: {len(planned)} messages, {len(facts)} questions{turns}, remote provider on a loopback stub, "
        "a session with a workspace, the first look off and on turn by turn"
    )
    with tempfile.TemporaryDirectory() as directory:
        off, on = anyio.run(replay, planned, facts, Path(directory), limit, bool(profile))
    for side in (off, on):
        if profile and side.profiler is not None:
            side.profiler.dump_stats(f"{profile}-{'on' if side.first_look else 'off'}.prof")
    kinds = sorted(off.hits)
    print(f"{'first look':<10}  " + "  ".join(f"{k:>8}" for k in kinds) + "    recall   replay s   questions s   cpu s")
    for side in (off, on):
        cells = "  ".join(f"{sum(side.hits[k]) / len(side.hits[k]):>8.1%}" for k in kinds)
        print(
            f"{'on' if side.first_look else 'off':<10}  {cells}  {_overall(side.hits):>8.3f}   {side.replayed:>8.1f}"
            f"   {side.asked:>11.1f}   {side.replayed_cpu + side.asked_cpu:>5.1f}"
        )
    recall_on, recall_off = _overall(on.hits), _overall(off.hits)
    print(
        f"first look on vs off: recall {recall_on:.3f} vs {recall_off:.3f} ({recall_on - recall_off:+.3f}); "
        f"replay {on.replayed / off.replayed:.2f}x, questions {on.asked / off.asked:.2f}x, "
        f"all {(on.replayed + on.asked) / (off.replayed + off.asked):.2f}x, "
        f"CPU {(on.replayed_cpu + on.asked_cpu) / (off.replayed_cpu + off.asked_cpu):.2f}x"
    )


def _option(name: str) -> str | None:
    """``--name VALUE`` from the command line, or None."""
    arguments = sys.argv[1:]
    return arguments[arguments.index(name) + 1] if name in arguments[:-1] else None


if __name__ == "__main__":
    if "--replay" in sys.argv[1:]:
        limit = _option("--limit")
        main_replay(int(limit) if limit else None, _option("--profile"))
    else:
        main()
