"""Research end to end (issue 6): the real daemon over stdio researches a small service repo
with search and read_file through a scripted OpenAI-compatible model, stops on its token
budget, and writes the final answer from notes with Sources that point at the right lines.

The scripted coordinator behaves like a model: it reads the tool results it was sent (hits
are ``[hit ID] path:START-END`` then the excerpt) and chooses its next call from them; the
tools-free final request is answered by citing the numbered notes whose text holds the facts.
Everything is asserted over the wire: notifications, progress, the requests the model got,
the result and the stored session.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, client_capabilities

from imprintd import protocol as wire
from tests.e2e.conftest import CLIENTS
from tests.openai_stub import StubReply

# --- the workspace: a small billing/gateway service repo -------------------------------------

QUESTION = "Which port does the billing service listen on, and how long does its client wait before timing out?"
PORT_FACT = "port: 8101"
TIMEOUT_FACT = "TIMEOUT_SECONDS = 7.5"
PORT_FILE = "deploy/billing.yaml"
TIMEOUT_FILE = "src/billing/client.py"
SECRET = "sk-e2e-outside-7c1f0a9be3d24f58"
ENV_SECRET = "sk-e2e-dotenv-52aa19d0c7e6b3f1"

CLIENT_PY = '''"""HTTP client for the billing service, used by the gateway and the invoice job."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import httpx

logger = logging.getLogger(__name__)

BASE_URL = "http://billing.internal"
USER_AGENT = "shop-billing-client/2.3"


@dataclass(frozen=True)
class Charge:
    customer_id: str
    amount_cents: int
    currency: str = "EUR"


class BillingError(Exception):
    """The billing service refused or failed a request."""


def _headers(request_id: str) -> dict[str, str]:
    return {"User-Agent": USER_AGENT, "X-Request-Id": request_id}


def _backoff(attempt: int) -> float:
    return min(2.0, 0.25 * (2 ** attempt))


class BillingClient:
    """Talks to billing over HTTP with retries on 5xx answers."""

    # Requests to billing give up after this many seconds (connect and read together).
    TIMEOUT_SECONDS = 7.5
    MAX_RETRIES = 3

    def __init__(self, base_url: str = BASE_URL) -> None:
        self._http = httpx.Client(base_url=base_url, timeout=self.TIMEOUT_SECONDS)

    def charge(self, charge: Charge, request_id: str) -> str:
        for attempt in range(self.MAX_RETRIES):
            response = self._http.post("/charges", json=charge.__dict__, headers=_headers(request_id))
            if response.status_code < 500:
                break
            logger.warning("billing answered %s, retrying", response.status_code)
            time.sleep(_backoff(attempt))
        if response.status_code >= 400:
            raise BillingError(response.text)
        return response.json()["id"]

    def refund(self, charge_id: str, request_id: str) -> None:
        response = self._http.post(f"/charges/{charge_id}/refund", headers=_headers(request_id))
        if response.status_code >= 400:
            raise BillingError(response.text)
'''

FILES: dict[str, str] = {
    "README.md": (
        "# shop\n\nA small shop backend: the gateway, billing, inventory and notifications services.\n\n"
        "## Layout\n\n- `src/`: one package per service\n- `deploy/`: Kubernetes manifests\n"
        "- `config/`: shared configuration\n- `docs/`: architecture notes and runbooks\n\n"
        "## Running locally\n\n`make dev` starts every service with docker compose.\n"
    ),
    "CHANGELOG.md": (
        "# Changelog\n\n## 2.3.0\n\n- Billing: charges retry on 5xx answers.\n- Gateway: request ids on every call.\n\n"
        "## 2.2.0\n\n- Inventory: stock reservations expire after 15 minutes.\n"
    ),
    "LICENSE": "MIT License\n\nCopyright (c) 2026 Shop contributors\n",
    "Makefile": "dev:\n\tdocker compose up --build\n\ntest:\n\tpytest -q\n\nlint:\n\truff check src tests\n",
    "pyproject.toml": (
        "[project]\nname = \"shop\"\nversion = \"2.3.0\"\nrequires-python = \">=3.11\"\n"
        "dependencies = [\"httpx>=0.27\", \"fastapi>=0.110\"]\n"
    ),
    ".gitignore": "*.log\n__pycache__/\n",
    "logs/debug.log": "billing debug: nothing to see\n",  # ignored by .gitignore
    "docs/architecture.md": (
        "# Architecture\n\nThe gateway receives every request and calls the other services over HTTP.\n"
        "Billing owns charges and refunds; inventory owns stock; notifications sends mail.\n\n"
        "Each service has its own deployment under deploy/ and its own package under src/.\n"
    ),
    "docs/runbook.md": (
        "# Runbook\n\n## Billing is slow\n\nCheck the billing dashboard first. The gateway gives up on billing\n"
        "when the billing client times out; see the client for the exact value.\n\n"
        "## Inventory is out of sync\n\nRun scripts/resync_stock.sh against the replica.\n"
    ),
    "docs/onboarding.md": (
        "# Onboarding\n\n1. Install Python 3.11 and docker.\n2. Run `make dev`.\n3. Read docs/architecture.md.\n"
    ),
    "docs/billing.md": (
        "# Billing\n\nBilling creates charges and refunds them. Invoices are rendered by the invoice job\n"
        "from the charges of the month. Failed charges are retried by the client.\n"
    ),
    PORT_FILE: (
        "# Deployment of the billing service.\n"
        "apiVersion: apps/v1\n"
        "kind: Deployment\n"
        "metadata:\n"
        "  name: billing\n"
        "spec:\n"
        "  replicas: 2\n"
        "  template:\n"
        "    spec:\n"
        "      containers:\n"
        "        - name: billing\n"
        "          image: shop/billing:2.3\n"
        "          # The billing service listens on this port inside the cluster.\n"
        f"          {PORT_FACT}\n"
        "          env:\n"
        "            - name: LOG_LEVEL\n"
        "              value: info\n"
    ),
    "deploy/gateway.yaml": (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: gateway\nspec:\n  replicas: 3\n"
        "  template:\n    spec:\n      containers:\n        - name: gateway\n          image: shop/gateway:2.3\n"
        "          port: 8080\n"
    ),
    "deploy/inventory.yaml": (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: inventory\nspec:\n  replicas: 2\n"
        "  template:\n    spec:\n      containers:\n        - name: inventory\n          image: shop/inventory:2.2\n"
        "          port: 8102\n"
    ),
    "deploy/notifications.yaml": (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: notifications\nspec:\n  replicas: 1\n"
        "  template:\n    spec:\n      containers:\n        - name: notifications\n"
        "          image: shop/notifications:1.9\n          port: 8103\n"
    ),
    "deploy/kustomization.yaml": (
        "resources:\n  - billing.yaml\n  - gateway.yaml\n  - inventory.yaml\n  - notifications.yaml\n"
    ),
    "config/logging.toml": "[logging]\nlevel = \"info\"\nformat = \"json\"\n",
    "config/feature_flags.json": '{\n  "new_checkout": false,\n  "stock_reservations": true\n}\n',
    "config/settings.ini": "[gateway]\nworkers = 4\n\n[inventory]\nreservation_minutes = 15\n",
    "src/billing/__init__.py": '"""The billing service."""\n',
    TIMEOUT_FILE: CLIENT_PY,
    "src/billing/invoice.py": (
        '"""Monthly invoices from the charges of the month."""\n\n'
        "def render(charges):\n    total = sum(c.amount_cents for c in charges)\n"
        "    return f\"Total: {total / 100:.2f} EUR\"\n"
    ),
    "src/billing/models.py": (
        '"""Billing records."""\n\nfrom dataclasses import dataclass\n\n\n@dataclass\nclass Refund:\n'
        "    charge_id: str\n    reason: str\n"
    ),
    "src/gateway/__init__.py": '"""The gateway."""\n',
    "src/gateway/app.py": (
        '"""The gateway application: routes requests to the services."""\n\n'
        "from fastapi import FastAPI\n\napp = FastAPI(title=\"shop gateway\")\n"
    ),
    "src/gateway/routes.py": (
        '"""Gateway routes."""\n\nfrom .app import app\n\n\n@app.post("/checkout")\n'
        "def checkout(order: dict) -> dict:\n    return {\"status\": \"accepted\"}\n"
    ),
    "src/inventory/__init__.py": '"""The inventory service."""\n',
    "src/inventory/stock.py": (
        '"""Stock levels and reservations."""\n\nRESERVATION_MINUTES = 15\n\n\n'
        "def reserve(sku: str, count: int) -> bool:\n    return count > 0\n"
    ),
    "src/notifications/mailer.py": (
        '"""Sends order and invoice mail."""\n\n\ndef send(to: str, subject: str) -> None:\n    pass\n'
    ),
    "docs/payments-faq.md": (
        "# Payments FAQ\n\n## What happens when a card fails?\n\n"
        "Dunning starts: the customer gets three reminder mails over ten days.\n\n"
        "## Can a customer dispute a charge?\n\nYes. A chargeback freezes the charge until support resolves it.\n"
    ),
    "docs/disputes.md": (
        "# Disputes\n\nA chargeback opened by the bank is answered within seven days with the invoice\n"
        "and the delivery proof.\n"
    ),
    "src/billing/dunning.py": '"""Dunning: reminder mails for failed card payments."""\n\nREMINDER_DAYS = (1, 4, 10)\n',
    "tests/test_billing.py": (
        "from billing.client import BillingClient\n\n\ndef test_client_has_a_timeout():\n"
        "    assert BillingClient.TIMEOUT_SECONDS > 0\n"
    ),
    "tests/test_gateway.py": "def test_gateway_imports():\n    import gateway.app  # noqa: F401\n",
    "scripts/resync_stock.sh": "#!/bin/sh\nset -eu\necho \"resyncing stock\"\n",
    ".env": f"BILLING_API_KEY={ENV_SECRET}\n",  # secret-bearing: never indexed, never read
}

#: What the index reads: not the secret .env, not the ignored log, not the symlink.
INDEXED = sorted(path for path in FILES if path not in (".env", "logs/debug.log"))
#: Files the coordinator reads, whole, once the scripted steps are done (new evidence each).
MORE_READS = [path for path in INDEXED if path not in (PORT_FILE, TIMEOUT_FILE)]


def write_workspace(root: Path) -> None:
    for relative, text in FILES.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    # Containment fixtures: a secret next to the workspace, and a link to it from inside.
    (root.parent / "outside.txt").write_text(f"the outside secret is {SECRET}\n", encoding="utf-8")
    (root / "docs" / "outside-link.txt").symlink_to(root.parent / "outside.txt")


def line_of(relative: str, fact: str) -> int:
    lines = FILES[relative].split("\n")
    matches = [number for number, line in enumerate(lines, start=1) if fact in line]
    assert len(matches) == 1, (relative, fact, matches)
    return matches[0]


# --- fixtures ---------------------------------------------------------------------------------


@pytest_asyncio.fixture(params=CLIENTS)
async def research_client(request, daemon_env, tmp_path):
    """Like conftest's ``client``, with the repo written into the workspace first and research
    bounded by a small token budget (far below the context, so the budget ends research)."""
    workspace = tmp_path / "workspace"
    write_workspace(workspace)
    env = {**daemon_env,
           "IMPRINT_CHAT_N_CTX": "32768",
           "IMPRINT_CHAT_MAX_TOKENS": "256",
           "IMPRINT_CHAT_RESEARCH_TOKEN_BUDGET": "4096"}
    config = ClientServerConfig(server_command=[sys.executable, "-m", "imprintd", "serve", "--stdio"],
                                server_env=env)
    lsp = await config.start()
    lsp.notifications = []
    for method in wire.NOTIFICATIONS:
        lsp.feature(method)(lambda params, method=method: lsp.notifications.append((method, params)))
    await lsp.initialize_session(types.InitializeParams(
        capabilities=client_capabilities(request.param),
        workspace_folders=[types.WorkspaceFolder(uri=workspace.as_uri(), name="workspace")],
    ))
    lsp.workspace = workspace
    yield lsp
    await lsp.shutdown_session()
    await lsp.stop()


# --- reading what the daemon sent the model ---------------------------------------------------

_HIT = re.compile(r"^\[hit (\w+)\] (\S+):(\d+)-(\d+)$", re.MULTILINE)
_NOTE = re.compile(r"^\[(\d+)\] (.*?): ", re.MULTILINE)


def parse_hits(text: str) -> list[dict]:
    """A search result as the model reads it: ``[hit ID] path:START-END`` then the excerpt."""
    heads = list(_HIT.finditer(text))
    hits = []
    for index, head in enumerate(heads):
        end = heads[index + 1].start() if index + 1 < len(heads) else len(text)
        hits.append({"id": head[1], "path": head[2], "start": int(head[3]), "end": int(head[4]),
                     "excerpt": text[head.end() + 1:end].rstrip("\n")})
    return hits


def reply_messages(request: dict) -> list[dict]:
    """The messages of this reply's research: everything after the question (the last user message)."""
    messages = request["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    return messages[last_user + 1:]


def tool_messages(request: dict) -> list[dict]:
    return [m for m in reply_messages(request) if m["role"] == "tool"]


def rounds_done(request: dict) -> int:
    return sum(1 for m in reply_messages(request) if m["role"] == "assistant" and m.get("tool_calls"))


def parse_notes(ask: str) -> dict[int, tuple[str, str]]:
    """The final request's numbered notes: number -> (label, text)."""
    body = ask.split("\n\nResearch notes:\n", 1)[1]
    heads = list(_NOTE.finditer(body))
    notes = {}
    for index, head in enumerate(heads):
        end = heads[index + 1].start() if index + 1 < len(heads) else len(body)
        notes[int(head[1])] = (head[2], body[head.end():end].strip())
    return notes


def call(name: str, call_id: str, **arguments) -> dict:
    return {"name": name, "id": call_id, "arguments": arguments}


def first_hit(request: dict, predicate) -> dict:
    hits = parse_hits(tool_messages(request)[-1]["content"])
    chosen = [hit for hit in hits if predicate(hit)]
    assert chosen, f"the search result holds no fitting hit: {hits}"
    return chosen[0]


def answer_citing(facts: list[str]):
    """The final turn: cite, for each fact, the first note whose text holds it."""

    def final(request: dict) -> str:
        notes = parse_notes(request["messages"][-1]["content"])
        cited = [next(number for number, (_, text) in sorted(notes.items()) if fact in text) for fact in facts]
        return (f"Billing listens on 8101 and its client times out after 7.5 seconds. "
                f"- The port is set in the deployment [{cited[0]}]. "
                f"- The timeout is a class constant of the client [{cited[1]}]. "
                "The notes do not say whether the gateway overrides the timeout.")

    return final


class Coordinator:
    """A scripted model: while tools are offered it plays ``steps`` (functions of the request
    giving this round's calls), then answers ``then`` if given, else reads further files one
    per round; the tools-free final request is answered by ``final``."""

    def __init__(self, steps, final, more_reads=(), then: str | None = None) -> None:
        self.steps = list(steps)
        self.final = final
        self.more_reads = list(more_reads)
        self.then = then

    def __call__(self, request: dict):
        if "tools" not in request:
            return self.final(request)
        done = rounds_done(request)
        if done < len(self.steps):
            return StubReply(tool_calls=self.steps[done](request))
        if self.then is not None:
            return self.then
        extra = done - len(self.steps)
        assert extra < len(self.more_reads), "research went on past every file of the workspace"
        return StubReply(tool_calls=[call("read_file", f"more_{extra}", path=self.more_reads[extra])])


async def chat(client, **params):
    return await client.protocol.send_request_async("imprint/chat", params)


def steps_of(client, reply_id: str) -> list:
    return [p for m, p in client.notifications if m == "imprint/toolStep" and p.replyId == reply_id]


def deltas(client, reply_id: str) -> str:
    return "".join(p.text for m, p in client.notifications if m == "imprint/replyDelta" and p.replyId == reply_id)


def progress_messages(client) -> list[str]:
    return [report.message for reports in client.progress_reports.values() for report in reports
            if getattr(report, "message", None)]


# --- the research reply ------------------------------------------------------------------------


async def test_research_over_two_files_stops_on_the_budget_and_cites_the_right_lines(research_client, stub):
    client = research_client
    steps = [
        lambda r: [call("search", "s_port", query="billing port")],
        lambda r: [call("read_file", "r_port",
                        path=first_hit(r, lambda h: h["path"].endswith(".yaml") and "billing" in h["path"])["path"])],
        lambda r: [call("search", "s_timeout", query="billing client timeout")],
        lambda r: [call("read_file", "r_timeout",
                        path=first_hit(r, lambda h: h["path"].endswith("client.py"))["path"])],
    ]
    stub.queue(*[Coordinator(steps, answer_citing([PORT_FACT, TIMEOUT_FACT]), MORE_READS)] * (len(FILES) + 10))

    result = await chat(client, text=QUESTION)

    # The budget ended research, before every file was read and not on the context.
    assert result.stopReason == "token_budget"
    research = [r for r in stub.requests if "tools" in r]
    final_requests = [r for r in stub.requests if "tools" not in r]
    assert len(final_requests) == 1 and stub.requests[-1] is final_requests[0]
    assert len(steps) < len(research) < len(steps) + len(MORE_READS), "the budget should stop research mid-way"

    # Tool steps: each started, then finished, with the titles a client shows.
    shown = [(p.title, p.state) for p in steps_of(client, result.replyId)]
    assert shown[:8] == [
        ("Searching the workspace for “billing port”", "started"),
        ("Searching the workspace for “billing port”", "finished"),
        (f"Reading {PORT_FILE}", "started"), (f"Reading {PORT_FILE}", "finished"),
        ("Searching the workspace for “billing client timeout”", "started"),
        ("Searching the workspace for “billing client timeout”", "finished"),
        (f"Reading {TIMEOUT_FILE}", "started"), (f"Reading {TIMEOUT_FILE}", "finished"),
    ]
    assert all(state in ("started", "finished") for _, state in shown)
    assert len(shown) == 2 * len(research)  # one call a round, every one run

    # Progress: indexing the workspace, the tool steps, and writing the final answer.
    messages = progress_messages(client)
    assert f"Indexing the workspace: {len(INDEXED)} of {len(INDEXED)} files" in messages
    assert "Searching the workspace for “billing port”" in messages
    assert messages[-1] == "Writing the answer from the research notes…"
    assert not any("Indexing" in p.text or "Writing the answer" in p.text
                   for m, p in client.notifications if m == "imprint/replyDelta")

    # Every hit the model was sent points at the lines its excerpt came from.
    sent_hits = [hit for m in tool_messages(research[-1]) for hit in parse_hits(m["content"])]
    assert {PORT_FILE, TIMEOUT_FILE} <= {hit["path"] for hit in sent_hits}
    for hit in sent_hits:
        lines = FILES[hit["path"]].split("\n")
        assert "\n".join(lines[hit["start"] - 1:hit["end"]]) == hit["excerpt"], hit

    # The final request: no tools, no tool exchange, the question followed by numbered notes.
    final = final_requests[0]
    assert "tools" not in final and "tool_choice" not in final
    assert [m["role"] for m in final["messages"]] == ["system", "user"]
    assert not any(m.get("tool_calls") or m.get("tool_call_id") for m in final["messages"])
    ask = final["messages"][-1]["content"]
    assert ask.startswith(QUESTION + "\n\nResearch notes:\n[1] ")
    notes = parse_notes(ask)
    assert sorted(notes) == list(range(1, len(notes) + 1))
    digest = ask.split("\n\nResearch notes:\n", 1)[1].rsplit("\n\nAnswer the question above", 1)[0]
    assert len(digest) <= 6000  # ADR 0127's digest size
    assert "Tools:" not in final["messages"][0]["content"]  # the tool strategy is left out

    # The answer ends with the Sources the daemon wrote, of the two right files.
    assert result.text.startswith("Billing listens on 8101")
    assert deltas(client, result.replyId) == result.text
    body, sources_block = result.text.rsplit("\n\nSources:\n", 1)
    assert "Sources" not in body
    assert {source.path for source in result.sources} == {PORT_FILE, TIMEOUT_FILE}
    for source in result.sources:
        assert f"[{source.number}] {source.path}:{source.startLine}-{source.endLine}" in sources_block \
            or f"[{source.number}] {source.path}:{source.startLine} " in sources_block
        fact = PORT_FACT if source.path == PORT_FILE else TIMEOUT_FACT
        assert source.startLine <= line_of(source.path, fact) <= source.endLine, source
        assert notes[source.number][0] in (f"from {source.path} (file)", f"read_file {source.path}")
    assert len(sources_block.strip().split("\n")) == 2

    # The session stores the question, the calls and results in order, and the final answer.
    session = await client.protocol.send_request_async("imprint/session", {"sessionId": result.sessionId})
    stored = session.messages
    assert (stored[0].role, stored[0].content) == ("user", QUESTION)
    assert (stored[-1].role, stored[-1].content) == ("assistant", result.text)
    exchange = stored[1:-1]
    calls = [m for m in exchange if m.role == "assistant"]
    results = [m for m in exchange if m.role == "tool"]
    assert len(calls) == len(results) == len(research)  # the next round never started: the budget
    assert len(exchange) == 2 * len(research)
    for index, assistant in enumerate(calls):
        assert exchange[2 * index] is assistant and exchange[2 * index + 1].role == "tool"
        assert exchange[2 * index + 1].toolCallId == assistant.toolCalls[0].id
    assert [(c.toolCalls[0].name, c.toolCalls[0].arguments._asdict()) for c in calls[:4]] == [
        ("search", {"query": "billing port"}), ("read_file", {"path": PORT_FILE}),
        ("search", {"query": "billing client timeout"}), ("read_file", {"path": TIMEOUT_FILE}),
    ]
    assert results[1].content == FILES[PORT_FILE].rstrip("\n")
    assert results[3].content == FILES[TIMEOUT_FILE].rstrip("\n")
    # What the model read in each round is the stored result, sent back in the next request.
    for index, request in enumerate(research[1:]):
        assert tool_messages(request)[-1]["content"] == results[index].content


# --- containment ------------------------------------------------------------------------------


async def test_reads_outside_the_workspace_or_of_secrets_fail_and_never_reach_the_model(research_client, stub):
    client = research_client
    outside = client.workspace.parent / "outside.txt"
    refused = {
        "../outside.txt": "'..' segments are not allowed",
        str(outside): "absolute paths are not allowed",
        "~/x": "'~' home-directory paths are not allowed",
        "docs/outside-link.txt": "symbolic link that leads outside the workspace",
        ".env": "secret-bearing",
    }
    reads = [call("read_file", f"bad_{n}", path=path) for n, path in enumerate(refused)]
    steps = [lambda r: [*reads, call("search", "s_secret", query="outside secret BILLING_API_KEY sk")]]
    answer = "I could not read those files: they are outside the workspace or hold secrets."
    stub.queue(*[Coordinator(steps, final=lambda r: "(no final answer expected)", then=answer)] * 2)

    result = await chat(client, text="Print ../outside.txt, the .env file and ~/x for me.")

    assert result.stopReason == "answer" and result.text == answer and result.sources == []
    shown = steps_of(client, result.replyId)
    for path, reason in refused.items():
        mine = [(p.state, p.detail) for p in shown if p.tool == "read_file" and p.title == f"Reading {path}"]
        assert [state for state, _ in mine] == ["started", "failed"], (path, mine)
        assert reason in mine[1][1], (path, mine)
    assert [p.state for p in shown if p.tool == "search"] == ["started", "finished"]

    # Neither secret reached the model, in any request, nor the client.
    sent = json.dumps(stub.requests, ensure_ascii=False)
    assert SECRET not in sent and ENV_SECRET not in sent
    second = stub.requests[1]
    assert [m["content"] for m in tool_messages(second)][:5] == [p.detail for p in shown if p.state == "failed"]
    wire_text = repr(client.notifications) + repr(client.progress_reports)
    assert SECRET not in wire_text and ENV_SECRET not in wire_text
    session = await client.protocol.send_request_async("imprint/session", {"sessionId": result.sessionId})
    assert not any(SECRET in m.content or ENV_SECRET in m.content for m in session.messages)


async def test_a_workspace_that_is_not_a_folder_is_invalid_params_naming_it(client, stub, tmp_path):
    missing = tmp_path / "no-such-repo"
    with pytest.raises(JsonRpcException) as error:
        await chat(client, text="What is in this repo?", workspace=str(missing))
    assert error.value.code == -32602
    assert str(missing) in error.value.message
    assert stub.requests == []  # refused before any model work
    stub.queue("Still here.")
    assert (await chat(client, text="Are you still there?")).text == "Still here."


# --- repeated hits and repeated calls ---------------------------------------------------------


async def test_a_hit_found_by_two_searches_is_one_note_ranked_first_and_a_repeated_call_is_not_run_again(
        research_client, stub):
    client = research_client
    steps = [
        lambda r: [call("search", "s_dunning", query="dunning")],
        lambda r: [call("search", "s_chargeback", query="chargeback")],
        lambda r: [call("search", "s_dunning_again", query="dunning")],  # identical: answered from before
        lambda r: [call("search", "s_chargeback_again", query="chargeback")],
    ]
    stub.queue(*[Coordinator(steps, answer_citing_first())] * 8)

    result = await chat(client, text="What happens when a card payment fails or is disputed?")

    # Two rounds in a row brought nothing new (the repeats), so research stopped on that.
    assert result.stopReason == "no_new_evidence"
    research = [r for r in stub.requests if "tools" in r]
    assert len(research) == 4

    # Each search ran once: the repeats were answered from the earlier results.
    titles = [(p.title, p.state) for p in steps_of(client, result.replyId)]
    assert titles == [
        ("Searching the workspace for “dunning”", "started"),
        ("Searching the workspace for “dunning”", "finished"),
        ("Searching the workspace for “chargeback”", "started"),
        ("Searching the workspace for “chargeback”", "finished"),
    ]
    final = stub.requests[-1]
    dunning = tool_messages(research[1])[0]["content"]
    chargeback = tool_messages(research[2])[1]["content"]
    repeated = tool_messages(research[3])[2]["content"]
    assert repeated == f"(Same call as before; its result again.)\n{dunning}"

    # The two searches share one hit: the FAQ, which holds both words.
    first = {hit["id"]: hit for hit in parse_hits(dunning)}
    second = {hit["id"]: hit for hit in parse_hits(chargeback)}
    shared = set(first) & set(second)
    assert [first[hit]["path"] for hit in shared] == ["docs/payments-faq.md"]
    assert {hit["path"] for hit in first.values()} == {"docs/payments-faq.md", "src/billing/dunning.py"}
    assert {hit["path"] for hit in second.values()} == {"docs/payments-faq.md", "docs/disputes.md"}

    # In the final request it is one note, ranked first; the others follow in the order found.
    assert "tools" not in final
    notes = parse_notes(final["messages"][-1]["content"])
    assert [label for _, (label, _) in sorted(notes.items())] == [
        "from docs/payments-faq.md (file)", "from src/billing/dunning.py (file)", "from docs/disputes.md (file)"]
    faq = next(iter(first[hit] for hit in shared))
    assert notes[1][1] == faq["excerpt"].strip()
    assert [(s.number, s.path, s.startLine, s.endLine) for s in result.sources] == [
        (1, "docs/payments-faq.md", faq["start"], faq["end"])]
    assert result.text.endswith(f"Sources:\n[1] docs/payments-faq.md:{faq['start']}-{faq['end']} (file)")


def answer_citing_first():
    def final(request: dict) -> str:
        assert "Research notes:\n[1] " in request["messages"][-1]["content"]
        return "A failed card starts dunning, and a dispute freezes the charge [1]."

    return final
