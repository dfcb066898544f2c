"""A follow-up in a workspace session reuses what the reply before evaluated, read from the real
daemon's usage log line (embedded SmolLM2 over stdio, first look on, greedy).

The follow-up's first request must reuse at least the whole last prompt of the reply before: the
prompt renders what the model read (tool results as numbered, the answer without its Sources)
and offers the same system prompt and tools from the first reply on (docs/decisions.md, "A
prompt that stays put").
"""

from __future__ import annotations

import os
import re

from tests.e2e.rawclient import RawClient
from tests.models.real_model import needs_real_model

pytestmark = needs_real_model

#: ``models/base.report_usage``: one line per model request.
USAGE = re.compile(r": (\d+) prompt tokens, (\d+) evaluated, (\d+) generated \(")


def usage_lines(log) -> list[tuple[int, int]]:
    """(prompt tokens, evaluated) of every model request logged so far, in order."""
    return [
        (int(m.group(1)), int(m.group(2)))
        for m in (USAGE.search(line) for line in log.read_text(encoding="utf-8").splitlines())
        if m
    ]


def test_a_workspace_follow_up_reuses_the_reply_before_it(tmp_path, workspace):
    log = tmp_path / "imprintd.log"
    env = {key: value for key, value in os.environ.items() if not key.startswith("IMPRINT_")}
    env.update(
        {
            "IMPRINT_DATA_DIR": str(tmp_path / "data"),
            "IMPRINT_CONFIG": str(tmp_path / "config.toml"),
            "IMPRINT_CACHE_DIR": str(tmp_path / "cache"),
            "IMPRINT_CHAT_PROVIDER": "local",
            "IMPRINT_CHAT_N_CTX": "4096",
            "IMPRINT_CHAT_MAX_TOKENS": "48",
            "IMPRINT_CHAT_FIRST_LOOK": "true",
        }
    )
    client = RawClient(env, args=("serve", "--log-file", str(log)))
    try:
        client.initialize()
        first = client.response(
            client.request("imprint/chat", {"text": "Which port does billing use?", "workspace": str(workspace)}),
            timeout=600,
        )
        assert "result" in first, first
        session = first["result"]["sessionId"]
        before = usage_lines(log)
        assert before, log.read_text(encoding="utf-8")
        second = client.response(
            client.request(
                "imprint/chat",
                {"text": "How long do billing rollouts take?", "sessionId": session, "workspace": str(workspace)},
            ),
            timeout=600,
        )
        assert "result" in second, second
        after = usage_lines(log)
    finally:
        client.kill()
    last_prompt, _ = before[-1]
    prompt, evaluated = after[len(before)]  # the follow-up's first request
    reused = prompt - evaluated
    assert reused > 0 and evaluated < prompt, (before, after)
    # Everything the reply before's last request read is served, not evaluated again.
    assert reused >= last_prompt, (before, after)
