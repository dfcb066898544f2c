"""How well does the lexical check tell a right citation from a wrong one?

Replays 30 researched replies through the real core (``Chat.reply``: the research loop, the
real workspace tools over a temporary service repo, numbering, the citation filter, the check)
with a scripted model: each reply searches for and reads the files that hold two facts (and,
in some replies, one unrelated file), then answers in sentences that each state a fact and
cite one result by the number the model was shown. The script knows which citations are right
(the cited read holds the fact the sentence states) and which are wrong (it cites another
result): 30 replies, 90 citing sentences, a third of them citing the wrong read. ``supported``
belongs to a source, so a source counts as rightly cited when every sentence citing it is right. Sentences are written in the ways
answers are: with the value ("8101"), with the name (``TIMEOUT_SECONDS``), in plain words
("the invoice job renders the monthly invoices") and in other words than the file's ("it
answers on eighty-one-oh-one"); half the wrong citations go to a look-alike file (the other
deployment), which may share a word by chance.

It prints, side by side on the same citations:

- the first check (a citation is valid when its number is in range; every valid
  citation counts as supported);
- the lexical check (``research/citations.py``: ``supported`` from the sentence's numbers,
  identifiers, quoted strings, else its longer words).

For each: precision and recall of ``supported`` (a right citation is the positive class) and of
``supported: false`` (finding the wrong ones). Not a test: run ``python bench/bench_citations.py``.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from imprintd import settings as settings_mod  # noqa: E402
from imprintd.chat import Chat  # noqa: E402
from imprintd.events import ReplyEvents, ToolStep  # noqa: E402
from imprintd.messages import Message, ToolCall, ToolSpec  # noqa: E402
from imprintd.models.base import Completion, Usage  # noqa: E402
from imprintd.reply import ReplyRequest  # noqa: E402
from imprintd.store import StoredSummary  # noqa: E402

# --- the workspace: eight files, each holding facts an answer can state -----------------------

FILES = {
    "deploy/billing.yaml": (
        "# The billing service's deployment.\nkind: Deployment\nmetadata:\n  name: billing\nspec:\n"
        "  replicas: 2\n  template:\n    spec:\n      containers:\n        - name: billing\n"
        "          image: shop/billing:2.3\n          port: 8101\n"
    ),
    "src/billing/client.py": (
        '"""HTTP client for the billing service."""\n\nclass BillingClient:\n'
        "    # Requests to billing give up after this many seconds.\n    TIMEOUT_SECONDS = 7.5\n"
        "    MAX_RETRIES = 3\n"
    ),
    "src/billing/invoice.py": (
        '"""Monthly invoices, rendered by the invoice job from the charges of the month."""\n\n'
        "def render(charges):\n    total = sum(c.amount_cents for c in charges)\n"
        '    return f"Total: {total / 100:.2f} EUR"\n'
    ),
    "src/inventory/stock.py": (
        '"""Stock levels and reservations."""\n\nRESERVATION_MINUTES = 15\n\n'
        "def reserve(sku: str, count: int) -> bool:\n    return count > 0\n"
    ),
    "config/logging.toml": '[logging]\nlevel = "info"\nformat = "json"\nrotate_days = 14\n',
    "docs/payments-faq.md": (
        "# Payments FAQ\n\nWhen a card fails, dunning starts: the customer gets three reminder mails over "
        "ten days.\nA chargeback freezes the charge until support resolves it.\n"
    ),
    "deploy/gateway.yaml": (
        "# The gateway's deployment.\nkind: Deployment\nmetadata:\n  name: gateway\nspec:\n  replicas: 3\n"
        "  template:\n    spec:\n      containers:\n        - name: gateway\n          port: 8080\n"
    ),
    "src/notifications/mailer.py": (
        '"""Sends order and invoice mail through the SMTP relay."""\n\nSMTP_HOST = "relay.internal"\nSMTP_PORT = 2525\n'
    ),
}


@dataclass(frozen=True)
class Fact:
    path: str
    query: str
    #: Ways an answer states it: with the value, with a name, in plain words, and in other words
    #: than the file's (which the lexical check cannot follow).
    sentences: tuple[str, ...]


FACTS = [
    Fact(
        "deploy/billing.yaml",
        "billing port",
        (
            "Billing listens on port 8101",
            "The billing container image is shop/billing:2.3",
            "Billing runs 2 replicas",
            "It answers on eighty-one-oh-one",
        ),
    ),
    Fact(
        "src/billing/client.py",
        "billing client timeout",
        (
            "The billing client gives up after 7.5 seconds",
            "The limit is TIMEOUT_SECONDS on BillingClient",
            "Requests to billing give up after a few seconds",
            "Calls are abandoned quickly when nothing comes back",
        ),
    ),
    Fact(
        "src/billing/invoice.py",
        "monthly invoices",
        (
            "Invoices total the amount_cents of the month's charges",
            "The invoice job renders the monthly invoices",
            "Totals are shown in EUR",
            "Each month a statement is produced",
        ),
    ),
    Fact(
        "src/inventory/stock.py",
        "stock reservations",
        (
            "Reservations last 15 minutes",
            "The hold is RESERVATION_MINUTES",
            "Stock reservations expire after a while",
            "Held items are let go after a quarter hour",
        ),
    ),
    Fact(
        "config/logging.toml",
        "logging level",
        (
            'Logs are written as "json"',
            "Logs rotate every 14 days",
            "Logging is set to the info level",
            "Output is machine-readable",
        ),
    ),
    Fact(
        "docs/payments-faq.md",
        "card fails dunning",
        (
            "A failed card starts dunning with three reminder mails",
            "A chargeback freezes the charge",
            "Customers are reminded over ten days",
            "Declined payments lead to follow-up emails",
        ),
    ),
    Fact(
        "deploy/gateway.yaml",
        "gateway port",
        (
            "The gateway listens on port 8080",
            "The gateway runs 3 replicas",
            "The gateway has its own deployment",
            "Traffic enters on eighty-eighty",
        ),
    ),
    Fact(
        "src/notifications/mailer.py",
        "smtp relay mail",
        (
            'Mail goes through "relay.internal"',
            "The relay listens on SMTP_PORT 2525",
            "Mail goes out over SMTP",
            "Outgoing messages use a local relay host",
        ),
    ),
]

# --- the scripted model ------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    sentence: str
    fact: int  # the fact the sentence states
    cites: int  # the fact whose read it cites (== fact: a right citation)


@dataclass(frozen=True)
class Reply:
    facts: tuple[int, ...]  # read, in order
    claims: tuple[Claim, ...]


class ScriptedModel:
    """Round k of a reply reads ``facts[k]`` (a search, then the read of its file, in one round);
    then it answers with the claims, citing each read by the number it was shown."""

    model_id = "bench-scripted"
    n_ctx = 32768
    native_tools = True
    exact_counts = True

    def __init__(self) -> None:
        self.reply: Reply | None = None

    def count_text(self, text: str) -> int:
        return math.ceil(len(text.encode()) / 3)

    def count_message(self, message: Message) -> int:
        return (
            4
            + self.count_text(message.content)
            + self.count_text(json.dumps([c.arguments for c in message.tool_calls]))
        )

    def count_prompt(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()) -> int:
        return (
            3 + sum(map(self.count_message, messages)) + sum(self.count_text(json.dumps(t.as_openai())) for t in tools)
        )

    async def complete(
        self, messages, tools=(), *, max_tokens, timeout=None, on_text=None, on_start=None, **ignored
    ) -> Completion:
        assert self.reply is not None
        if on_start is not None:
            await on_start()  # the research budget charges the request here, as a real model's would
        usage = Usage(prompt_tokens=self.count_prompt(messages, tools), evaluated_tokens=0, generated_tokens=1)
        rounds = sum(1 for m in messages if m.role == "assistant" and m.tool_calls and m.seq is None)
        if rounds < len(self.reply.facts):
            fact = FACTS[self.reply.facts[rounds]]
            calls = (
                ToolCall(id=f"s{rounds}", name="search", arguments={"query": fact.query}),
                ToolCall(id=f"r{rounds}", name="read_file", arguments={"path": fact.path}),
            )
            return Completion(text="", tool_calls=calls, usage=usage)
        numbers = read_numbers(messages)
        text = " ".join(f"{claim.sentence} [{numbers[FACTS[claim.cites].path]}]." for claim in self.reply.claims)
        if on_text is not None:
            on_text(text)
        return Completion(text=text, usage=usage)


def read_numbers(messages: Sequence[Message]) -> dict[str, int]:
    """The number each file's read was shown under: ``[n] path:1–k`` opening a read's result."""
    numbers: dict[str, int] = {}
    reads = {c.id for m in messages for c in m.tool_calls if c.name == "read_file"}
    for message in messages:
        if message.role == "tool" and message.tool_call_id in reads and message.content.startswith("["):
            number, rest = message.content[1:].split("] ", 1)
            numbers.setdefault(rest.split(":", 1)[0], int(number))
    return numbers


class Quiet(ReplyEvents):
    def begin(self, session_id: str, reply_id: str) -> None: ...
    def text(self, delta: str) -> None: ...
    def text_was_preamble(self) -> None: ...
    def progress(self, message: str, percentage: int | None = None) -> None: ...
    def tool_step(self, step: ToolStep) -> None: ...
    async def ask_permission(self, request) -> str:
        return "reject"

    def summary(self, summary: StoredSummary) -> None: ...


# --- the 30 replies ----------------------------------------------------------------------------


#: Files that are easy to mix up: a wrong citation of one often goes to the other.
CONFUSABLE = {0: 6, 6: 0, 1: 7, 7: 1, 2: 5, 5: 2, 3: 4, 4: 3}


def replies() -> list[Reply]:
    """Reply i reads facts a and b (every other reply, b is a's look-alike; every third reply
    one more file) and states three claims, about a, b and a; the wordings rotate, and every
    third claim cites the other read."""
    made = []
    count = len(FACTS)
    for i in range(30):
        a = i % count
        b = CONFUSABLE[a] if i % 2 == 0 else (a + 3) % count
        facts = (a, b, (a + 5) % count) if i % 3 == 0 else (a, b)
        claims = []
        for k, fact in enumerate((a, b, a)):
            wording = FACTS[fact].sentences[(i + k) % len(FACTS[fact].sentences)]
            wrong = (i + k) % 3 == 2
            claims.append(Claim(wording, fact, (b if fact == a else a) if wrong else fact))
        made.append(Reply(facts, tuple(claims)))
    return made


# --- running it -------------------------------------------------------------------------------


@dataclass
class Tally:
    true_pos: int = 0  # a right citation called supported
    false_pos: int = 0  # a wrong one called supported
    false_neg: int = 0  # a right one called unsupported
    true_neg: int = 0  # a wrong one called unsupported

    def add(self, right: bool, supported: bool) -> None:
        if right and supported:
            self.true_pos += 1
        elif supported:
            self.false_pos += 1
        elif right:
            self.false_neg += 1
        else:
            self.true_neg += 1

    def rates(self) -> tuple[float, float, float, float]:
        def ratio(a: int, b: int) -> float:
            return a / b if b else float("nan")

        return (
            ratio(self.true_pos, self.true_pos + self.false_pos),
            ratio(self.true_pos, self.true_pos + self.false_neg),
            ratio(self.true_neg, self.true_neg + self.false_neg),
            ratio(self.true_neg, self.true_neg + self.false_pos),
        )


async def run(root: Path) -> tuple[Tally, Tally, list[str]]:
    model = ScriptedModel()
    # The scripted rounds are the reply's whole research: no first look before them.
    resolved = settings_mod.load({}, environ={}).apply({"chat.n_ctx": 32768, "chat.first_look": False}, "bench")
    chat = Chat(resolved, model_factory=lambda chat_settings: model)
    lexical, records, misses = Tally(), Tally(), []
    for number, reply in enumerate(replies(), start=1):
        model.reply = reply
        request = ReplyRequest(text=f"Question {number} about the shop.", persist=False, workspace=str(root))
        outcome = await chat.reply(request, Quiet())
        assert outcome.stop_reason == "answer", outcome.stop_reason
        # ``supported`` is a source's: it is right when every sentence citing it is.
        for source in outcome.sources:
            citing = [claim for claim in reply.claims if FACTS[claim.cites].path == source.path]
            right = all(claim.cites == claim.fact for claim in citing)
            lexical.add(right, bool(source.supported))
            records.add(right, True)
            if bool(source.supported) != right:
                sentences = "; ".join(repr(claim.sentence) for claim in citing)
                misses.append(f"{'right' if right else 'wrong'}ly cited {source.path}: {sentences}")
    return lexical, records, misses


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        os.environ["IMPRINT_DATA_DIR"] = str(base / "data")
        os.environ["IMPRINT_CACHE_DIR"] = str(base / "cache")
        root = base / "workspace"
        for relative, text in FILES.items():
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_text(text, encoding="utf-8")
        lexical, records, misses = asyncio.run(run(root))
    total = lexical.true_pos + lexical.false_pos + lexical.false_neg + lexical.true_neg
    wrong = lexical.true_neg + lexical.false_pos
    claims = sum(len(reply.claims) for reply in replies())
    wrong_claims = sum(claim.cites != claim.fact for reply in replies() for claim in reply.claims)
    print(
        f"30 replies, {claims} citing sentences ({wrong_claims} citing the wrong read), {total} cited sources "
        f"({total - wrong} cited rightly, {wrong} by at least one wrong sentence)\n"
    )
    print(f"{'check':<34} {'supported: precision':>21} {'recall':>7} {'unsupported: precision':>23} {'recall':>7}")
    for name, tally in (("records (valid number = supported)", records), ("lexical (research/citations.py)", lexical)):
        cells = [("—" if math.isnan(rate) else f"{rate:.0%}") for rate in tally.rates()]
        print(f"{name:<34} {cells[0]:>21} {cells[1]:>7} {cells[2]:>23} {cells[3]:>7}")
    print("\nMisjudged by the lexical check:")
    for miss in misses:
        print(f"  {miss}")


if __name__ == "__main__":
    main()
