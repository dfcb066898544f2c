"""What switching reasoning on costs a prompt before the model writes a word (docs/decisions.md,
"Reasoning").

For each vendored template of a family that can think (tests/models/chat_formats/templates), the
same research round (system prompt, question, one call and its result, the tools offered) is
rendered with ``enable_thinking`` (or Granite's ``thinking``) on and off, and both prompts are
counted with the embedded model's tokenizer (a stand-in for each family's own: the ratio is what
matters). Run side by side in one process; prints one row per family.

    python bench/check_reasoning_room.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imprintd.messages import Message, ToolCall  # noqa: E402
from imprintd.models.embedded import embedded_model_path  # noqa: E402
from imprintd.models.templates import ChatTemplate  # noqa: E402
from imprintd.tools.workspace import ReadFileTool, SearchTool  # noqa: E402
from tests.models.chat_formats.families import FAMILIES  # noqa: E402


def main() -> None:
    from llama_cpp import Llama

    llama = Llama(model_path=str(embedded_model_path()), n_ctx=512, vocab_only=True, verbose=False)
    call = ToolCall(id="call_1", name="search", arguments={"query": "listen port"})
    messages = [
        Message(role="system", content="You answer questions about the user's workspace. Cite sources."),
        Message(role="user", content="Which port does the server listen on?"),
        Message(role="assistant", content="", tool_calls=(call,)),
        Message(role="tool", content="[1] config.toml:3: port = 8080", tool_call_id="call_1", name="search"),
    ]
    tools = (SearchTool.spec, ReadFileTool.spec)
    print(f"{'family':20} {'off':>6} {'on':>6} {'added':>6}  switch")
    for family in FAMILIES:
        counts = []
        for thinking in (False, True):
            chat = ChatTemplate(family.source, model_name=family.template, thinking=thinking)
            text = chat.render(messages, tools)
            counts.append(len(llama.tokenize(text.encode(), add_bos=False, special=True)))
        if not chat.switches and not chat.reasons:
            continue
        switch = ", ".join(chat.switches) or "none (always thinks)"
        print(f"{family.name:20} {counts[0]:6} {counts[1]:6} {counts[1] - counts[0]:6}  {switch}")


if __name__ == "__main__":
    main()
