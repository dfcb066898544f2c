"""The research budget charges what the embedded model actually evaluates.

llama.cpp keeps the prefix of the last prompt it evaluated, whatever request it came from. A
coordinator round, two section workers, then a coordinator round that extends the first: the
workers replaced the first round's prefix, so the last round is evaluated almost in full. Each
request's prompt charge must match llama.cpp's evaluated tokens within 16, on the embedded
SmolLM2 with a 2,048-token context and a few output tokens.
"""

from __future__ import annotations

from imprintd.context import sections as sec
from imprintd.messages import ToolCall, ToolSpec, assistant, system, tool_result, user
from imprintd.research.budget import ResearchBudget
from tests.models.real_model import needs_real_model

SEARCH = ToolSpec(
    name="search",
    description="Search the workspace for a phrase.",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
)
INSTRUCTIONS = "You are Imprint, a research assistant. Search before answering and cite files. " * 4


def coordinator_rounds():
    asked = ToolCall(id="call_1", name="search", arguments={"query": "billing port"})
    first = [system(INSTRUCTIONS), user("Which port does the billing service use?")]
    second = [
        *first,
        assistant("", tool_calls=(asked,)),
        tool_result(asked, "services/billing.yaml:1-4\nname: billing\nport: 8101\nreplicas: 2\n" * 6),
    ]
    return first, second


def worker(number: int) -> list:
    text = "".join(
        f"line {n}: the {n}th service listens on port {8000 + n}\n" for n in range(number * 20, number * 20 + 20)
    )
    return sec.worker_messages(
        question="Which port does the billing service use?",
        notes="",
        text=text,
        number=number,
        count=2,
        start=0,
        end=len(text),
        label="search result",
        total=len(text),
    )


@needs_real_model
async def test_each_charge_matches_what_llama_cpp_evaluated(local_model):
    budget = ResearchBudget(1_000_000)
    first, second = coordinator_rounds()
    plan = [(first, [SEARCH]), (worker(1), []), (worker(2), []), (second, [SEARCH]), (second, [SEARCH])]
    charges, evaluated = [], []
    for messages, tools in plan:
        reservation = budget.reserve(local_model, messages, tools, 4)
        completion = None
        try:
            completion = await local_model.complete(messages, tools, max_tokens=4)
        finally:
            budget.settle(reservation, completion)
        charges.append(reservation.prompt_charge)
        evaluated.append(completion.usage.evaluated_tokens)
    print(f"\n[real budget] charged {charges}; llama.cpp evaluated {evaluated}")
    for charge, actual in zip(charges, evaluated, strict=False):
        assert abs(charge - actual) <= 16
    # The round after the workers is evaluated (and charged) nearly whole; the repeat of it
    # shares all but what the model wrote.
    assert charges[3] > 0.8 * local_model.count_prompt(second, [SEARCH])
    assert charges[4] < 0.2 * charges[3]
