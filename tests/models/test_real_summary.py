"""The running summary on the real embedded model: written under its grammar, it always comes
out as bullets citing each covered exchange (a small model left free wrote none that parsed)."""

from __future__ import annotations

import re

from imprintd.context.summary import update_summary
from imprintd.messages import assistant, user
from tests.models.real_model import needs_real_model
from tests.recording import RecordingEvents

FACTS = [
    ("Which port does billing use?", "Billing listens on port 8101."),
    ("Where is the gateway deployed?", "On the edge cluster in Frankfurt."),
    ("What database does bedrock run?", "Postgres 16 on bedrock."),
    ("Who owns the orders service?", "The checkout team owns orders."),
    ("How long do rollouts take?", "About five minutes per service."),
    ("Which region hosts backups?", "Backups live in eu-west-2."),
]


@needs_real_model
async def test_the_embedded_model_writes_one_bullet_per_exchange_citing_its_numbers(local_model):
    messages = []
    for question, answer in FACTS:
        messages.append(user(question, seq=len(messages) + 1))
        messages.append(assistant(answer, seq=len(messages) + 1))
    outcome = await update_summary(
        local_model, state=None, messages=messages, to_cover=messages, message_count=13, events=RecordingEvents()
    )
    assert outcome.ok, outcome.reason
    lines = outcome.state.text.splitlines()
    assert [re.match(r"- \((#\d+–#\d+)\) \S", line).group(1) for line in lines] == [
        f"#{n}–#{n + 1}" for n in range(1, 13, 2)
    ]
    assert (outcome.state.first_seq, outcome.state.last_seq) == (1, 12)
