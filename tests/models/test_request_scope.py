"""Which session a model request serves, as the local provider's state cache is told it.

``Chat.reply`` names the reply's session for every request it makes (persist false for a
session kept in memory); the summary and section workers are side requests; concurrent
replies each see their own session.
"""

from __future__ import annotations

import anyio

from imprintd.context import sections as sec
from imprintd.context import summary as summaries
from imprintd.context.originals import SectionArchive
from imprintd.messages import assistant, user
from imprintd.models.base import RequestScope, request_scope, session_requests, side_requests
from tests.helpers import ask, make_chat
from tests.recording import RecordingEvents
from tests.standin import StandInModel


class ScopedModel(StandInModel):
    """The stand-in, noting the scope each request was made in."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.scopes: list[RequestScope | None] = []

    async def complete(self, messages, tools=(), **kwargs):
        self.scopes.append(request_scope())
        return await super().complete(messages, tools, **kwargs)


def test_outside_a_reply_there_is_no_scope():
    assert request_scope() is None
    with side_requests():
        assert request_scope() is None
    with session_requests("s", persist=True):
        assert request_scope() == RequestScope(session_id="s", persist=True, keep=True)
        with side_requests():
            assert request_scope() == RequestScope(session_id="s", persist=True, keep=False)
        assert request_scope().keep
    assert request_scope() is None


async def test_a_reply_names_its_session_and_whether_it_is_stored():
    model = ScopedModel()
    model.queue("stored answer", "memory answer")
    chat = make_chat(model)
    stored, _ = await ask(chat, "first")
    in_memory, _ = await ask(chat, "second", persist=False)
    assert model.scopes == [
        RequestScope(session_id=stored.session_id, persist=True),
        RequestScope(session_id=in_memory.session_id, persist=False),
    ]
    assert request_scope() is None


async def test_the_summary_and_section_workers_are_side_requests():
    model = ScopedModel()
    model.queue("- (#1–#2) The user asked about billing.", "notes: port 8101")
    with session_requests("s", persist=True):
        numbered = [user("What does billing do?", seq=1), assistant("It charges the orders.", seq=2)]
        await summaries.update_summary(
            model, state=None, messages=numbered, to_cover=numbered, message_count=3, events=RecordingEvents()
        )
        await sec.analyze(
            model,
            "billing listens on port 8101\n" * 4,
            kind=sec.tool_kind("read_file"),
            question="Which port?",
            workers=1,
            events=RecordingEvents(),
            sections=SectionArchive().open("reply"),
        )
    assert [scope.keep for scope in model.scopes] == [False, False]
    assert {scope.session_id for scope in model.scopes} == {"s"}


async def test_concurrent_replies_each_see_their_own_session():
    model = ScopedModel()
    model.queue("a", "b")
    chat = make_chat(model)
    sessions = {name: (await ask(chat, f"start {name}"))[0].session_id for name in ("alice", "bob")}
    model.scopes.clear()
    asked: list[str] = []

    def answer(request):
        asked.append(request.messages[-1].content)
        return "answer"

    model.queue(*[answer] * 6)

    async def replies(name: str) -> None:
        for number in range(3):
            await ask(chat, f"{name} {number}", sessions[name])

    async with anyio.create_task_group() as group:
        group.start_soon(replies, "alice")
        group.start_soon(replies, "bob")
    assert len(asked) == len(model.scopes) == 6
    assert {question.split()[0] for question in asked} == {"alice", "bob"}
    for question, scope in zip(asked, model.scopes, strict=True):
        assert scope.session_id == sessions[question.split()[0]]
