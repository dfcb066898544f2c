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

- ADR 0141's search as it was (``history_adr0141.py``: the best two messages, places chosen by
  raw term counts, index built per reply);
- the new ranking with neighbourhood smoothing turned off (an ablation: BM25 × coverage and the
  budget filled, nothing found through neighbours);
- the new ranking (``imprintd.context.history`` on the store's index).

A question counts as recalled when the answer's message is quoted with the fact's value inside
the quote. It prints recall by kind, characters used and milliseconds per query (the old one
per query after its per-reply build, plus that build; the new one on the stored index).

Not a test: run ``python bench/bench_history_recall.py``.
"""

from __future__ import annotations

import random
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
            "ADR 0141 (best two)": lambda q: old.search_places(q),
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
        f"(ADR 0141 also builds its index once per reply: {old_build_ms:.1f} ms for this conversation; "
        "the new ranking reads the index the store keeps)"
    )
    old_all = _overall(results["ADR 0141 (best two)"][0])
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


if __name__ == "__main__":
    main()
