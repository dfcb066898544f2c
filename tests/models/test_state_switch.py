"""A model replaced on a settings change leaves nothing behind: its states are closed (memory
freed, writer ended) off the event loop, and shutdown waits for that."""

from __future__ import annotations

import threading

from imprintd import settings as settings_mod
from imprintd.chat import Chat
from tests.standin import StandInModel


class ClosingModel(StandInModel):
    """The stand-in with per-session states to close."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = threading.Event()
        self.closed_on: threading.Thread | None = None

    def set_state_limits(self, *, memory_bytes: int, disk_bytes: int) -> None:
        pass

    def forget_session(self, session_id: str) -> None:
        pass

    def close_states(self) -> None:
        self.closed_on = threading.current_thread()
        self.closed.set()

    def make_way(self, scope) -> None:
        pass


def test_switching_model_or_context_closes_the_old_models_states():
    built: list[ClosingModel] = []

    def factory(chat_settings):
        built.append(ClosingModel())
        return built[-1]

    resolved = settings_mod.load({}, environ={})
    chat = Chat(resolved, model_factory=factory)
    first = chat.model()
    assert chat.model() is first and not first.closed.is_set()  # the same settings: the same model
    chat.update_settings(resolved.apply({"chat.n_ctx": 2048}, "test"))
    second = chat.model()
    assert second is not first
    assert first.closed.wait(30)
    assert first.closed_on is not threading.main_thread()  # not on the caller's (the event loop's) thread
    chat.update_settings(resolved.apply({"chat.n_ctx": 2048, "chat.model": "/elsewhere.gguf"}, "test"))
    third = chat.model()
    assert second.closed.wait(30) and not third.closed.is_set()
    chat.close()
    assert third.closed.is_set()


def test_a_factory_that_hands_back_the_same_model_keeps_it_open():
    model = ClosingModel()
    resolved = settings_mod.load({}, environ={})
    chat = Chat(resolved, model_factory=lambda chat_settings: model)
    assert chat.model() is model
    chat.update_settings(resolved.apply({"chat.n_ctx": 2048}, "test"))
    assert chat.model() is model
    assert chat._retiring == [] and not model.closed.is_set()
