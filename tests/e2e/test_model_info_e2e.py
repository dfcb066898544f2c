"""The daemon says which model it answers with: in ``initialize``'s result, and in
``imprint/modelChanged`` when a settings change alters it (whatever set it: config file,
environment, ``initializationOptions`` or the editor's later settings)."""

from __future__ import annotations

import asyncio
import sys

from lsprotocol import types
from pytest_lsp import ClientServerConfig, client_capabilities

from imprintd import __version__
from imprintd.models.embedded import find_embedded_model


async def started(env: dict[str, str], options=None):
    lsp = await ClientServerConfig(server_command=[sys.executable, "-m", "imprintd", "serve"], server_env=env).start()
    lsp.changes = []
    lsp.changed = asyncio.Event()

    @lsp.feature("imprint/modelChanged")
    def on_model_changed(params) -> None:
        lsp.changes.append(params)
        lsp.changed.set()

    result = await lsp.initialize_session(
        types.InitializeParams(capabilities=client_capabilities("visual-studio-code"), initialization_options=options)
    )
    return lsp, result


async def announced(lsp, count: int) -> None:
    """Wait until ``count`` ``imprint/modelChanged`` have come, however close together.

    Not ``wait_for_notification`` in a loop: two notifications read in one go are both handled
    before the second wait begins, and that wait would never end.
    """

    async def enough() -> None:
        while len(lsp.changes) < count:
            lsp.changed.clear()
            await lsp.changed.wait()

    await asyncio.wait_for(enough(), 60)


async def test_initialize_names_the_model_the_config_file_set_and_changes_are_announced(daemon_env, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[chat]\nmodel = "qwen3.5-4b"\nn_ctx = 4096\n', encoding="utf-8")
    env = {k: v for k, v in daemon_env.items() if k not in ("IMPRINT_CHAT_MODEL", "IMPRINT_CHAT_N_CTX")}
    lsp, result = await started({**env, "IMPRINT_CONFIG": str(config)})
    try:
        assert (result.server_info.name, result.server_info.version) == ("imprintd", __version__)
        assert result.capabilities.experimental == {
            "imprint": {
                "provider": "openai",
                "model": "qwen3.5-4b",
                "name": "qwen3.5-4b",
                "nCtx": 4096,
                "nCtxSource": "chat.n_ctx",
                "serverNCtx": None,
                "chatFormat": "openai",
                "reasons": False,
            }
        }

        def change(settings) -> None:
            lsp.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=settings))

        change({"chat": {"n_ctx": 16384}})
        change({"chat": {"max_tokens": 512}})  # not the model: nothing to announce
        change({"chat": {"n_ctx": 10}})  # refused: the model stays as it is
        change({"imprint": {"chat": {"model": "qwen3.5-9b"}}})
        await announced(lsp, 2)
        # Notifications are handled in order, so the two in between would have come before the last.
        assert [(c.provider, c.model, c.nCtx, c.chatFormat) for c in lsp.changes] == [
            ("openai", "qwen3.5-4b", 16384, "openai"),
            ("openai", "qwen3.5-9b", 16384, "openai"),
        ]
    finally:
        await lsp.shutdown_session()
        await lsp.stop()


async def test_initialization_options_are_in_the_result_and_the_embedded_model_is_named_by_its_file(daemon_env):
    lsp, result = await started(daemon_env, {"chat": {"provider": "local", "model": "", "n_ctx": 2048}})
    try:
        embedded = find_embedded_model()
        assert embedded is not None  # the test extra installs it
        # The chat format is read from the GGUF's template without loading it (SmolLM2 has no
        # tool syntax of its own, and does not reason).
        imprint = result.capabilities.experimental["imprint"]
        assert {k: v for k, v in imprint.items() if k != "chatFormat"} == {
            "provider": "local",
            "model": embedded.name,
            "name": embedded.name,
            "nCtx": 2048,
            "nCtxSource": "chat.n_ctx",
            "serverNCtx": None,
            "reasons": False,
        }
        assert isinstance(imprint["chatFormat"], str) and imprint["chatFormat"]
        lsp.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"chat": {"model": "/models/Qwen3.5-4B-Q4_K_M.gguf"}})
        )
        await announced(lsp, 1)
        # A GGUF that is not there: its format cannot be told (the first reply names the problem).
        assert [(c.provider, c.model, c.nCtx, c.chatFormat, c.reasons) for c in lsp.changes] == [
            ("local", "Qwen3.5-4B-Q4_K_M.gguf", 2048, None, False)
        ]
    finally:
        await lsp.shutdown_session()
        await lsp.stop()


async def test_a_served_models_smaller_window_is_announced_and_told_once(daemon_env, stub):
    # llama-server's /props: 2,048 tokens a slot, less than chat.n_ctx (8,192).
    stub.endpoints["GET /props"] = (200, {"default_generation_settings": {"n_ctx": 2048}, "total_slots": 4})
    stub.queue("Port 8101.", "Host db1.")
    lsp, result = await started(daemon_env)
    try:
        told = result.capabilities.experimental["imprint"]
        # initialize answers at once, without asking the server: the setting until the first use.
        assert (told["nCtx"], told["nCtxSource"], told["serverNCtx"]) == (8192, "chat.n_ctx", None)
        first = await lsp.protocol.send_request_async("imprint/chat", {"text": "Which port?"})
        await announced(lsp, 1)
        change = lsp.changes[0]
        assert (change.nCtx, change.nCtxSource, change.serverNCtx) == (2048, "llama-server /props n_ctx", 2048)
        await lsp.protocol.send_request_async("imprint/chat", {"text": "Which host?", "sessionId": first.sessionId})
        # Told once, not per reply (the client records every window/showMessage).
        [warning] = [m.message for m in lsp.messages if m.type == types.MessageType.Warning]
        assert "2,048 tokens (llama-server /props n_ctx)" in warning and "llama-server with a larger -c" in warning
        assert [request["max_tokens"] for request in stub.requests] == [512, 512]
    finally:
        await lsp.shutdown_session()
        await lsp.stop()


async def test_the_model_in_use_and_its_listed_entry_go_by_one_name(daemon_env, tmp_path):
    """An Ollama blob and a Hugging Face snapshot file, chosen as the model: ``initialize``,
    ``imprint/modelChanged`` and ``imprint/models`` all name it as the picker lists it."""
    import json

    from tests.models.test_on_disk import CHAT, gguf

    home = tmp_path / "home"
    ollama = home / ".ollama" / "models"
    blob = gguf(ollama / "blobs" / "sha256-5eed", {**CHAT, "general.name": "Smollm2 135M 8k Lc100K Mix1 Ep2"})
    manifest = ollama / "manifests" / "registry.ollama.ai" / "library" / "smollm2" / "135m"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(
        json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:5eed"}]})
    )
    snapshot = home / ".cache" / "huggingface" / "hub" / "models--org--SmolLM2-GGUF" / "snapshots" / "rev"
    hub_file = gguf(snapshot / "smollm2-q8_0.gguf", CHAT)
    env = {k: v for k, v in daemon_env.items() if not k.startswith(("HF_", "OLLAMA_"))}
    lsp, result = await started({**env, "HOME": str(home)}, {"chat": {"provider": "local", "model": str(blob)}})
    try:
        assert result.capabilities.experimental["imprint"]["name"] == "smollm2:135m"
        listed = await lsp.protocol.send_request_async("imprint/models", {})
        assert listed.current.name == "smollm2:135m"
        assert {m.path: m.name for m in listed.models} == {
            str(blob): "smollm2:135m",
            str(hub_file): "org/SmolLM2-GGUF/smollm2-q8_0.gguf",
        }
        lsp.workspace_did_change_configuration(
            types.DidChangeConfigurationParams(settings={"chat": {"model": str(hub_file)}})
        )
        await announced(lsp, 1)
        assert [(c.model, c.name) for c in lsp.changes] == [("smollm2-q8_0.gguf", "org/SmolLM2-GGUF/smollm2-q8_0.gguf")]
    finally:
        await lsp.shutdown_session()
        await lsp.stop()


async def test_a_qwen35_gguf_has_one_chat_format_in_use_and_in_the_models_list(daemon_env, tmp_path):
    """A Qwen3.5 GGUF (its template writes ``<|im_start|>`` and calls in XML): ``initialize``,
    ``imprint/models``' current model and its listed entry all say ``qwen-xml``, the chat-format
    table's name, read from the header alone (no weights: there are none)."""
    from tests.models.chat_formats.families import TEMPLATES
    from tests.models.test_on_disk import CHAT, gguf

    folder = tmp_path / "models"
    template = (TEMPLATES / "Qwen3.5-4B.jinja").read_text(encoding="utf-8")
    qwen = gguf(folder / "Qwen3.5-4B-Q4_K_M.gguf", {**CHAT, "tokenizer.chat_template": template})
    env = {k: v for k, v in daemon_env.items() if not k.startswith(("HF_", "OLLAMA_", "LLAMA_CACHE"))}
    env = {**env, "HOME": str(tmp_path / "home"), "IMPRINT_CHAT_MODELS_DIR": str(folder)}
    lsp, result = await started(env, {"chat": {"provider": "local", "model": str(qwen)}})
    try:
        assert result.capabilities.experimental["imprint"]["chatFormat"] == "qwen-xml"
        listed = await lsp.protocol.send_request_async("imprint/models", {})
        assert listed.current.chatFormat == "qwen-xml"
        assert [(m.path, m.chatFormat) for m in listed.models] == [(str(qwen), "qwen-xml")]
    finally:
        await lsp.shutdown_session()
        await lsp.stop()
