"""A served model whose window is smaller than ``chat.n_ctx``, on a real server.

llama-cpp-python's own OpenAI-compatible server on the embedded SmolLM2 GGUF with ``--n_ctx
1024``, under Imprint's default settings (``chat.n_ctx`` 8,192): the server answers none of the
window endpoints, and refuses an over-long streamed request by ending the stream without a word.
A 4,200-character question must still be answered: the refusal is heard (asked once without
streaming), the window learned, the round fitted again and the question read in sections, and
the model info names the window and where it came from. The question is about the shortest the
server refuses with Imprint's prompt around it (3,600 characters are answered directly): each
more section read is another worker request of a few seconds.
"""

from __future__ import annotations

from imprintd import protocol as wire
from imprintd import settings as settings_mod
from imprintd.chat import Chat
from imprintd.models.remote import RemoteModel
from tests.helpers import ask
from tests.models.llama_server import API_KEY, running_server
from tests.models.real_model import needs_real_model

pytestmark = needs_real_model

SERVER_WINDOW = 1024
QUESTION = (
    "Please read this incident report and tell me the root cause. "
    + " ".join(
        f"At step {n} the billing service retried the payment job for customer {n * 7} and logged a timeout "
        "from the ledger database."
        for n in range(70)
    )
)[:4200]


async def test_a_long_question_answers_within_the_servers_smaller_window(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("IMPRINT_CHAT_API_KEY", API_KEY)
    with running_server(tmp_path_factory, SERVER_WINDOW) as base_url:
        resolved = settings_mod.load({}, environ={}).apply(
            {"chat.provider": "openai", "chat.base_url": base_url, "chat.model": "smollm2"}, "test"
        )
        assert resolved.settings.chat.n_ctx == 8192 and resolved.settings.chat.max_tokens == 1024  # the defaults
        chat = Chat(resolved)
        try:
            outcome, events = await ask(chat, QUESTION)
            model = chat.model()
            assert isinstance(model, RemoteModel)
            # The answer is stored, not "the stream ended before the reply finished".
            stored = chat.session(outcome.session_id).messages
            assert [m.role for m in stored] == ["user", "assistant"] and stored[1].content == outcome.text
            assert outcome.text.strip()
            # Learned from the server's refusal, and every prompt after it fitted to the window.
            assert (model.n_ctx, model.window_source, model.server_n_ctx) == (
                SERVER_WINDOW,
                "the server's refusal",
                SERVER_WINDOW,
            )
            usages = [usage for kind, usage in events.log if kind == "context_usage"]
            assert usages[0].n_ctx == 8192  # the first round, before the server said anything
            for usage in usages[1:]:
                assert (usage.n_ctx, usage.n_ctx_source) == (SERVER_WINDOW, "the server's refusal")
                assert usage.used + usage.output_allowance <= SERVER_WINDOW
            # The question was read in sections sized for the window, and the answer written from the notes.
            assert any(message.startswith("Analyzing section 1 of") for message in events.progress_messages)
            assert "Writing the answer from the research notes…" in events.progress_messages
            [notice] = [payload for kind, payload in events.log if kind == "notice"]
            assert "1,024 tokens" in notice and "chat.n_ctx (8,192)" in notice and "--n_ctx" in notice
            info = wire.ModelInfo.from_core(chat.model_identity())
            assert (info.n_ctx, info.n_ctx_source, info.server_n_ctx) == (
                SERVER_WINDOW,
                "the server's refusal",
                SERVER_WINDOW,
            )
        finally:
            chat.close()
