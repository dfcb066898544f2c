"""The scripted model of the running-summary scenario over the wire (docs/decisions.md, "Running summary"): the sizes at
which the pasted compose file no longer fits at the billing question, a summarizer writing one
bullet per exchange, and a coordinator that looks the paste up with conversation_history.

The daemon's own e2e test and the Neovim client's test replay it; they import it from here.
"""

from __future__ import annotations

import re

from imprintd.context.summary import SUMMARIZER_SYSTEM
from tests.conversations import BILLING_QUESTION, FOLLOW_UPS, PASTE, PASTE_REPLY
from tests.openai_stub import StubReply

# By the remote estimate (three bytes a token) the paste and the five follow-ups fit in 3,072
# tokens with a 256-token answer allowance (the fifth follow-up's prompt needs 2,925), and the
# billing question does not (3,201): the first summary is written at the billing question.
N_CTX = 3072
MAX_TOKENS = 256
QUERY = "billing port"

_LINE = re.compile(r"^#(\d+) (user|assistant|tool)", re.MULTILINE)
#: The billing service's ports line of the compose file.
PORTS = re.compile(r'ports: \["8101:8101"\]')


def is_summarizer(body: dict) -> bool:
    return "tools" not in body and body["messages"][0]["content"] == SUMMARIZER_SYSTEM


def bullets(body: dict) -> str:
    """One bullet per exchange of the summarizer's transcript, citing message numbers."""
    groups: list[list[int]] = []
    for number, role in _LINE.findall(body["messages"][-1]["content"]):
        if role == "user" or not groups:
            groups.append([int(number)])
        else:
            groups[-1].append(int(number))
    lines = []
    for group in groups:
        span = f"#{group[0]}" if len(group) == 1 else f"#{group[0]}–#{group[-1]}"
        what = "pasted the staging compose file" if group[0] == 1 else f"talked about topic {group[0]}"
        lines.append(f"- ({span}) The user {what}.")
    return "\n".join(lines)


def model(body: dict) -> StubReply | str:
    """The scripted model as a function of each request."""
    if is_summarizer(body):
        return bullets(body)
    last = body["messages"][-1]
    if last["role"] == "tool":
        quoted = PORTS.search(last["content"])
        return f"Billing listens on 8101: the compose file you pasted has `{quoted.group() if quoted else '?'}`."
    if last["content"] == BILLING_QUESTION:
        return StubReply(
            tool_calls=[{"id": "call_hist", "name": "conversation_history", "arguments": {"query": QUERY}}]
        )
    return {PASTE: PASTE_REPLY, **dict(FOLLOW_UPS)}.get(last["content"], "ok")
