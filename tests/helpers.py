"""Helpers tests share (fixtures live in ``conftest.py``): chats on the stand-in model, one
way to ask for a reply, scripted tool turns, a look inside a store's database, and the remote
provider's estimate of a request body the scripted server received.

Test modules import from here, never from one another.
"""

from __future__ import annotations

import json
import math
from typing import Any

import apsw

from imprintd import settings as settings_mod
from imprintd.chat import Chat, ReplyRequest
from imprintd.models.base import Completion, Model
from imprintd.reply import ReplyOutcome
from imprintd.store import Store
from tests.recording import RecordingEvents


def make_chat(model: Model, **settings: Any) -> Chat:
    """A Chat on ``model`` with the default settings and ``settings`` (dotted keys) applied.

    The first look is off unless a test turns it on: tests script the model's rounds, and a
    search made before them would be one more exchange in every prompt they check.
    """
    resolved = settings_mod.load({}, environ={}).apply({"chat.first_look": False, **settings}, "test")
    return Chat(resolved, model_factory=lambda chat_settings: model)


def remote_chat(stub: Any, **settings: Any) -> Chat:
    """A ``Chat`` on the scripted OpenAI-compatible server ``stub`` (model "stub", first look off)."""
    resolved = settings_mod.load({}, environ={}).apply(
        {
            "chat.provider": "openai",
            "chat.base_url": stub.base_url,
            "chat.model": "stub",
            "chat.first_look": False,
            **settings,
        },
        "test",
    )
    return Chat(resolved)


def tool_turn(*calls) -> Completion:
    """A model turn that only calls tools."""
    return Completion(text="", tool_calls=tuple(calls))


async def ask(
    chat: Chat,
    text: str,
    session_id: str | None = None,
    *,
    workspace=None,
    events: RecordingEvents | None = None,
    **kwargs: Any,
) -> tuple[ReplyOutcome, RecordingEvents]:
    """One reply to ``text`` (in session ``session_id``, on ``workspace`` if given): its outcome and events."""
    events = events or RecordingEvents()
    request = ReplyRequest(text=text, session_id=session_id, workspace=str(workspace) if workspace else None, **kwargs)
    outcome = await chat.reply(request, events)
    return outcome, events


def connection_of(store: Store) -> apsw.Connection:
    """The store's SQLite connection, to look at its tables (only tests look past its methods)."""
    with store.reading() as db:
        return db


def integrity_check(store: Store) -> str:
    """SQLite's ``PRAGMA integrity_check``: ``"ok"``, or the problems found, one a line."""
    with store.reading() as db:
        return "\n".join(str(row[0]) for row in db.execute("PRAGMA integrity_check"))


def estimated_prompt(request: dict) -> int:
    """The remote provider's estimate of one request body as it went over the wire (one token per
    started three UTF-8 bytes): 3 for the generation prompt, each tool schema as JSON, and per
    message 4 + its content + its tool calls (as JSON) + its name."""

    def estimate(text: str) -> int:
        return math.ceil(len(text.encode("utf-8")) / 3)

    total = 3 + sum(estimate(json.dumps(tool, ensure_ascii=False)) for tool in request.get("tools", ()))
    for message in request["messages"]:
        calls = "".join(
            json.dumps(
                {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}, ensure_ascii=False
            )
            for c in message.get("tool_calls", ())
        )
        total += 4 + estimate(message["content"] or "") + estimate(calls) + estimate(message.get("name", ""))
    return total
