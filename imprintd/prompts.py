"""The system prompt and the tool strategy, kept byte-stable so llama.cpp reuses its prefix.

Nothing here varies between the rounds of one reply (no times, no counters): the prompt's
leading part must render identically each round (docs/decisions.md, "Research budget"). Parts
that do vary (the summary block) go after the fixed instructions.
"""

from __future__ import annotations

from imprintd.messages import Style

BASE = (
    "You are Imprint, an assistant inside the user's code editor. You answer questions about "
    "the user's own work: the files of their workspace and this conversation. Be direct and "
    "brief; say plainly when you do not know."
)

SPOKEN = "Your answer will be spoken aloud: use two or three plain sentences, no lists, no code."

TOOL_STRATEGY = (
    "Tools: use search to find where the workspace mentions something, then read_file to read "
    "the lines that matter. Answer as soon as you have enough evidence; do not repeat a search "
    "you already made."
)

#: Every result the tools return opens with its number, the same for the whole reply
#: (``research/citations.py``); the answer cites those numbers and Imprint lists the sources.
CITATIONS = (
    "Each tool result opens with its number, like [3]. Cite the results you used as [n] right "
    "after what they support; do not list sources, they are added for you."
)


def system_prompt(*, style: Style = "written", tool_lines: tuple[str, ...] = (), summary_block: str = "") -> str:
    """The system prompt: fixed instructions first, then tool guidance, then the summary."""
    parts = [BASE]
    if style == "spoken":
        parts.append(SPOKEN)
    parts.extend(tool_lines)
    if summary_block:
        parts.append(summary_block)
    return "\n\n".join(parts)
