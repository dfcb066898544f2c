"""The small repo and the scripted researcher the Neovim chat tests share: a billing deployment
on port 8101, read once with a preamble said first, then answered citing note 1.

Test modules import these from here, never from one another.
"""

from __future__ import annotations

from tests.openai_stub import StubReply

PORT_FILE = "deploy/billing.yaml"
BILLING = (
    "\n".join(
        [
            "# Deployment of the billing service.",
            "apiVersion: apps/v1",
            "kind: Deployment",
            "metadata:",
            "  name: billing",
            "spec:",
            "  template:",
            "    spec:",
            "      containers:",
            "        - name: billing",
            "          port: 8101",
        ]
    )
    + "\n"
)
PREAMBLE = "Let me read the billing deployment first."
ANSWER = "Billing listens on 8101 [1]."


def write_repo(root):
    (root / "deploy").mkdir()
    (root / PORT_FILE).write_text(BILLING, encoding="utf-8")
    (root / "README.md").write_text("# shop\n\nA small shop backend.\n", encoding="utf-8")


def rounds_done(request: dict) -> int:
    messages = request["messages"]
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    return sum(1 for m in messages[last_user + 1 :] if m["role"] == "assistant" and m.get("tool_calls"))


def researcher(request: dict):
    """Reads the deployment (saying so first), then repeats the read until research stops on
    no new evidence; the tools-free final request is answered citing note 1."""
    if "tools" not in request:
        return ANSWER
    done = rounds_done(request)
    read = {"name": "read_file", "id": f"read_{done}", "arguments": {"path": PORT_FILE}}
    return StubReply(text=PREAMBLE if done == 0 else "", tool_calls=[read])
