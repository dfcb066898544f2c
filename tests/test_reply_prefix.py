"""The next prompt repeats what the model read (docs/decisions.md, "A prompt that stays put").

A workspace session on the stand-in model with the first look on and a tool call of the model's
own: the last prompt of a reply plus the answer the model generated must be where the next
reply's first prompt starts, rendered by a real chat template (Qwen2.5's, vendored for the
chat-format tests) so the check is on the text the model's tokenizer reads, tools included.
"""

from __future__ import annotations

from pathlib import Path

from imprintd.models.templates import ChatTemplate
from tests.helpers import ask, make_chat, tool_turn
from tests.standin import Request, StandInModel, call

TEMPLATE = Path(__file__).parent / "models" / "chat_formats" / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja"


def template() -> ChatTemplate:
    return ChatTemplate(TEMPLATE.read_text(encoding="utf-8"), model_name="qwen2.5", eos_token="<|im_end|>")


def rendered(chat_template: ChatTemplate, request: Request) -> str:
    return chat_template.render(request.messages, request.tools)


def as_read(request: Request) -> list[tuple]:
    """Each message of a prompt as the model reads it."""
    return [(m.role, m.prompt_content, m.tool_calls, m.tool_call_id) for m in request.messages]


async def test_a_reply_s_last_prompt_and_answer_start_the_next_reply_s_first_prompt(workspace):
    model = StandInModel(n_ctx=16384)
    chat = make_chat(model, **{"chat.first_look": True})
    first_answer = "Billing listens on port 8101 [1]; rollouts take 5 minutes [2]."
    model.queue(tool_turn(call("read_file", path="docs/deploy.md")), first_answer)
    outcome, _ = await ask(chat, "Which port does the billing service use?", workspace=workspace)
    second_answer = "Two replicas [1]."
    model.queue(tool_turn(call("search", query="replicas")), second_answer)
    await ask(chat, "And how many billing replicas run?", outcome.session_id, workspace=workspace)
    model.queue("Shop billing.")
    await ask(chat, "Which image does it run?", outcome.session_id, workspace=workspace)

    requests = model.requests  # reply 1: two rounds; reply 2: two rounds; reply 3: one
    assert len(requests) == 5
    # Both replies ran the first look and a call of the model's own, and cited numbered results.
    assert sum(1 for m in requests[1].messages if m.role == "tool") == 2
    stored = chat.session(outcome.session_id).messages
    assert "Sources:" in stored[5].content and "Sources:" not in stored[5].prompt_content

    chat_template = template()
    for last, answer, following in (
        (requests[1], first_answer, requests[2]),
        (requests[3], second_answer, requests[4]),
    ):
        # Message for message: nothing the model read is rendered differently later.
        assert as_read(following)[: len(last.messages) + 1] == [*as_read(last), ("assistant", answer, (), None)]
        # And token for token: the same system prompt and tools, the same text.
        assert following.tools == last.tools
        assert rendered(chat_template, following).startswith(rendered(chat_template, last) + answer)


async def test_a_reply_without_an_answer_renders_the_placeholder_it_stored(workspace):
    model = StandInModel()
    chat = make_chat(model)
    model.queue("")
    outcome, _ = await ask(chat, "Which port does billing use?", workspace=workspace)
    model.queue("8101.")
    await ask(chat, "And now?", outcome.session_id, workspace=workspace)
    answer = chat.session(outcome.session_id).messages[1]
    assert answer.content == answer.prompt_content == "(The model wrote no answer.)"
    assert model.requests[1].messages[2].prompt_content == "(The model wrote no answer.)"


async def test_the_first_reply_already_offers_conversation_history_and_its_strategy_line(workspace):
    model = StandInModel()
    chat = make_chat(model)
    model.queue("One.", "Two.")
    outcome, _ = await ask(chat, "Which port does billing use?", workspace=workspace)
    await ask(chat, "And the image?", outcome.session_id, workspace=workspace)
    first, second = model.requests
    assert "conversation_history" in [tool.name for tool in first.tools]
    assert "use conversation_history" in first.system
    assert (first.system, first.tools) == (second.system, second.tools)
