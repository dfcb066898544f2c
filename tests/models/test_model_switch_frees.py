"""A local model replaced by a settings change (``chat.n_ctx``, ``chat.model``) is freed: its
Python objects and llama.cpp's weights and context, on the embedded SmolLM2.

Automatic garbage collection is off while each test runs, so what is freed is what the daemon
frees itself: a daemon may go hours without the full collection llama-cpp-python's objects
(and a reply's) need, and each switch used to keep about 80 MB.
"""

from __future__ import annotations

import gc
import weakref

import pytest

from imprintd import settings as settings_mod
from imprintd.chat import Chat
from imprintd.messages import user
from imprintd.models.local import LocalModel
from tests.helpers import ask
from tests.models.real_model import needs_real_model

pytestmark = needs_real_model


@pytest.fixture
def no_automatic_gc():
    gc.collect()
    gc.disable()
    yield
    gc.enable()


async def test_switching_n_ctx_frees_the_model_it_replaced(embedded_gguf, tmp_path, no_automatic_gc):
    built: list[LocalModel] = []

    def factory(chat_settings):
        built.append(LocalModel(embedded_gguf, n_ctx=chat_settings.n_ctx))
        return built[-1]

    resolved = settings_mod.load({}, environ={}).apply(
        {"chat.first_look": False, "chat.max_tokens": 4, "chat.n_ctx": 2048}, "test"
    )
    chat = Chat(resolved, model_factory=factory, data_dir=tmp_path / "data")
    try:
        await ask(chat, "Say hello.")
        old_llama = built[0].load().llama
        chat.update_settings(resolved.apply({"chat.n_ctx": 1024}, "test"))
        await ask(chat, "Say hello.")  # a reply on the new model; the old one's reply is long over
        retired = weakref.ref(built.pop(0))
        for thread in chat._retiring:
            thread.join(60)
        assert retired() is None
        # llama.cpp's model and context were freed with it, not left to a later collection.
        assert (old_llama._model.model, old_llama._ctx.ctx) == (None, None)
        assert built[0].load().llama._model.model is not None  # the one in use is untouched
    finally:
        chat.close()


async def test_a_model_dropped_after_its_last_request_frees_its_weights(embedded_gguf, no_automatic_gc):
    model = LocalModel(embedded_gguf, n_ctx=1024)
    await model.complete([user("Say hello.")], max_tokens=2)
    model.close_states()
    llama, freed = model.load().llama, weakref.ref(model)
    del model  # the model thread keeps no hold on its last job, and the weights go with the model
    assert freed() is None and llama._model.model is None
