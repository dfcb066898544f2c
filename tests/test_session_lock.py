"""Two processes answering in one stored session take turns (``imprintd.session_lock``).

Two ``Chat`` objects on one data folder stand for two daemons (the file lock belongs to an
open file, so they exclude each other as two processes do); a subprocess holds the lock where
a real other process is needed: one that outlives the time budget, one that is killed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from imprintd import session_lock
from imprintd.chat import ReplyRequest
from tests.helpers import ask, make_chat
from tests.recording import RecordingEvents
from tests.standin import StandInModel

pytestmark = pytest.mark.skipif(session_lock.fcntl is None, reason="no flock here: turns are one daemon's")

ROOT = Path(__file__).resolve().parents[1]


def answer_to(request) -> str:
    return f"Answer to {request.messages[-1].content}."


class HeldModel(StandInModel):
    """The stand-in, its first request held inside the model call until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__(replies=[answer_to, answer_to])
        self.inside = anyio.Event()
        self.release = anyio.Event()

    async def complete(self, messages, tools=(), **kwargs):
        if not self.inside.is_set():
            self.inside.set()
            await self.release.wait()
        return await super().complete(messages, tools, **kwargs)


def stored(chat, session_id: str) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in chat.session(session_id).messages]


def holder(data: Path, session_id: str) -> subprocess.Popen:
    """Another process holding the session's turn until it is killed (it says so first)."""
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from imprintd.session_lock import lock_path, try_lock
        fd = try_lock(lock_path(Path(sys.argv[1]), sys.argv[2]))
        print("held" if fd is not None else "busy", flush=True)
        sys.stdin.read()
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script, str(data), session_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "held"
    return process


async def test_two_daemons_in_one_session_store_question_answer_question_answer(monkeypatch):
    first_model, second_model = HeldModel(), StandInModel(replies=[answer_to])
    first, second = make_chat(first_model), make_chat(second_model)
    found_busy = anyio.Event()
    real_try_lock = session_lock.try_lock

    def noting_try_lock(path):
        fd = real_try_lock(path)
        if fd is None:
            found_busy.set()
        return fd

    monkeypatch.setattr(session_lock, "try_lock", noting_try_lock)
    outcomes = {}

    async def first_reply() -> None:
        request = ReplyRequest(text="Q1", new_session_id="shared")
        outcomes["Q1"] = await first.reply(request, RecordingEvents())

    async def second_reply() -> None:
        outcomes["Q2"], _ = await ask(second, "Q2", "shared")

    # fail_after only keeps a broken turn from hanging the suite; nothing waits on time.
    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(first_reply)
            await first_model.inside.wait()  # the first daemon's reply is inside its model call
            group.start_soon(second_reply)
            await found_busy.wait()  # the second daemon found the session's turn taken
            assert stored(second, "shared") == [("user", "Q1")]  # its question waits, unstored
            assert second_model.requests == []
            first_model.release.set()

    assert outcomes["Q1"].text == "Answer to Q1."
    assert outcomes["Q2"].text == "Answer to Q2."
    expected = [("user", "Q1"), ("assistant", "Answer to Q1."), ("user", "Q2"), ("assistant", "Answer to Q2.")]
    assert stored(first, "shared") == expected
    # The second daemon's model saw the first exchange whole, its own question last.
    shown = [(m.role, m.content) for m in second_model.requests[0].messages if m.role != "system"]
    assert shown == expected[:3]
    first.close()
    second.close()


async def test_a_turn_held_past_the_time_budget_refuses_the_reply_and_stores_nothing(isolated_dirs):
    model = StandInModel(replies=[answer_to])
    chat = make_chat(model, **{"chat.research_time_budget": 1})
    outcome, _ = await ask(chat, "Q1")
    session_id = outcome.session_id
    process = holder(isolated_dirs, session_id)
    try:
        with pytest.raises(session_lock.SessionBusy) as refused:
            await ask(chat, "Q2", session_id)
    finally:
        process.kill()
        process.wait()
    message = str(refused.value)
    assert "another Imprint process is answering in this session" in message
    assert "stored nothing" in message and "chat.research_time_budget" in message
    assert stored(chat, session_id) == [("user", "Q1"), ("assistant", "Answer to Q1.")]
    assert len(model.requests) == 1
    chat.close()


async def test_a_killed_process_leaves_no_turn_behind(isolated_dirs):
    model = StandInModel(replies=[answer_to, answer_to])
    chat = make_chat(model, **{"chat.research_time_budget": 1})
    outcome, _ = await ask(chat, "Q1")
    session_id = outcome.session_id
    process = holder(isolated_dirs, session_id)
    process.kill()  # SIGKILL: nothing of it runs to let go of the lock
    process.wait()

    answered, _ = await ask(chat, "Q2", session_id)

    assert answered.text == "Answer to Q2."
    assert stored(chat, session_id)[2:] == [("user", "Q2"), ("assistant", "Answer to Q2.")]
    chat.close()


async def test_a_session_in_memory_takes_no_file_lock(isolated_dirs):
    chat = make_chat(StandInModel(replies=[answer_to, answer_to]))
    outcome, _ = await ask(chat, "Q1", persist=False)
    await ask(chat, "Q2", outcome.session_id)
    assert not (isolated_dirs / session_lock.FOLDER_NAME).exists()
    assert stored(chat, outcome.session_id)[3] == ("assistant", "Answer to Q2.")
    chat.close()


def test_any_session_id_makes_a_file_name_in_the_turns_folder(tmp_path):
    for session_id in ("../../etc/passwd", "a/b\\c", "\x00", "é" * 300):
        path = session_lock.lock_path(tmp_path, session_id)
        assert path.parent == tmp_path / session_lock.FOLDER_NAME
        assert len(path.name) == 64 + len(".lock")
