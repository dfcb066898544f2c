"""The research scenario the LSP and ACP end-to-end tests share: a small billing/gateway service
repo written into the workspace, and a scripted coordinator that reads what the daemon sent the
model (numbered search hits and reads, numbered notes) to choose its next calls and cite them.

Test modules import these from here, never from one another.
"""

from __future__ import annotations

import re
from pathlib import Path

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
        '[project]\nname = "shop"\nversion = "2.3.0"\nrequires-python = ">=3.11"\n'
        'dependencies = ["httpx>=0.27", "fastapi>=0.110"]\n'
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
    "config/logging.toml": '[logging]\nlevel = "info"\nformat = "json"\n',
    "config/feature_flags.json": '{\n  "new_checkout": false,\n  "stock_reservations": true\n}\n',
    "config/settings.ini": "[gateway]\nworkers = 4\n\n[inventory]\nreservation_minutes = 15\n",
    "src/billing/__init__.py": '"""The billing service."""\n',
    TIMEOUT_FILE: CLIENT_PY,
    "src/billing/invoice.py": (
        '"""Monthly invoices from the charges of the month."""\n\n'
        "def render(charges):\n    total = sum(c.amount_cents for c in charges)\n"
        '    return f"Total: {total / 100:.2f} EUR"\n'
    ),
    "src/billing/models.py": (
        '"""Billing records."""\n\nfrom dataclasses import dataclass\n\n\n@dataclass\nclass Refund:\n'
        "    charge_id: str\n    reason: str\n"
    ),
    "src/gateway/__init__.py": '"""The gateway."""\n',
    "src/gateway/app.py": (
        '"""The gateway application: routes requests to the services."""\n\n'
        'from fastapi import FastAPI\n\napp = FastAPI(title="shop gateway")\n'
    ),
    "src/gateway/routes.py": (
        '"""Gateway routes."""\n\nfrom .app import app\n\n\n@app.post("/checkout")\n'
        'def checkout(order: dict) -> dict:\n    return {"status": "accepted"}\n'
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
    "scripts/resync_stock.sh": '#!/bin/sh\nset -eu\necho "resyncing stock"\n',
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


# --- reading what the daemon sent the model ---------------------------------------------------

_HIT = re.compile(r"^\[(\d+)\] (\S+):(\d+)(?:–(\d+))?$", re.MULTILINE)
_NOTE = re.compile(r"^\[(\d+)\] (.*?): ", re.MULTILINE)


def parse_hits(text: str) -> list[dict]:
    """A search result as the model reads it: per hit ``[n] path:START–END`` then the excerpt
    (a read looks the same: its number and range, then the lines)."""
    heads = list(_HIT.finditer(text))
    hits = []
    for index, head in enumerate(heads):
        end = heads[index + 1].start() if index + 1 < len(heads) else len(text)
        hits.append(
            {
                "number": int(head[1]),
                "path": head[2],
                "start": int(head[3]),
                "end": int(head[4] or head[3]),
                "excerpt": text[head.end() + 1 : end].rstrip("\n"),
            }
        )
    return hits


def reply_messages(request: dict) -> list[dict]:
    """The messages of this reply's research: everything after the question (the last user message)."""
    messages = request["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    return messages[last_user + 1 :]


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
        notes[int(head[1])] = (head[2], body[head.end() : end].strip())
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
        return (
            f"Billing listens on 8101 and its client times out after 7.5 seconds. "
            f"- The port is set in the deployment [{cited[0]}]. "
            f"- The timeout is a class constant of the client [{cited[1]}]. "
            "The notes do not say whether the gateway overrides the timeout."
        )

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


#: The coordinator's rounds that find both facts: search the port, read the billing deployment,
#: search the timeout, read the client (each read chosen from the hits the model was shown).
BILLING_STEPS = [
    lambda r: [call("search", "s_port", query="billing port")],
    lambda r: [
        call(
            "read_file",
            "r_port",
            path=first_hit(r, lambda h: h["path"].endswith(".yaml") and "billing" in h["path"])["path"],
        )
    ],
    lambda r: [call("search", "s_timeout", query="billing client timeout")],
    lambda r: [call("read_file", "r_timeout", path=first_hit(r, lambda h: h["path"].endswith("client.py"))["path"])],
]


def billing_research() -> list[Coordinator]:
    """Replies for the stub: a coordinator that finds both facts, then reads on until a budget stops
    it, and whose final answer cites the notes holding them (one per request the daemon may make)."""
    return [Coordinator(BILLING_STEPS, answer_citing([PORT_FACT, TIMEOUT_FACT]), MORE_READS)] * (len(FILES) + 10)
