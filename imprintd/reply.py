"""One reply, as data flows through it (DESIGN.md, "The reply").

1. The question is stored first (committed before any model work), so nothing said is lost.
2. The model answers from the session's messages, streaming text to the client.
3. The answer is stored; only then is the reply acknowledged.

A cancelled or failed reply keeps the stored question and stores nothing else.
"""

from __future__ import annotations

import msgspec

from imprintd import messages as msg
from imprintd.events import ReplyEvents
from imprintd.prompts import system_prompt
from imprintd.store import ConversationStore, SessionInfo


class ReplyOutcome(msgspec.Struct, frozen=True, kw_only=True):
    session_id: str
    reply_id: str
    text: str
    sources: list = []
    stop_reason: str = "answer"


async def run_reply(chat, store: ConversationStore, info: SessionInfo, reply_id: str, request, events: ReplyEvents) -> ReplyOutcome:
    store.append(info.id, msg.user(request.text))
    events.begin(info.id, reply_id)
    model = chat.model()
    history = store.messages(info.id)
    prompt = [msg.system(system_prompt(style=request.style)), *history]
    completion = await model.complete(prompt, max_tokens=chat.settings.max_tokens, on_text=events.text)
    store.append(info.id, msg.assistant(completion.text))
    stop = "length" if completion.finish_reason == "length" else "answer"
    return ReplyOutcome(session_id=info.id, reply_id=reply_id, text=completion.text, stop_reason=stop)
