"""Editor settings over the wire: initializationOptions and didChangeConfiguration, refusals shown."""

from __future__ import annotations

import sys

import pytest_asyncio
from lsprotocol import types
from pytest_lsp import ClientServerConfig, client_capabilities


@pytest_asyncio.fixture
async def configured(daemon_env):
    config = ClientServerConfig(server_command=[sys.executable, "-m", "imprintd", "serve"], server_env=daemon_env)
    lsp = await config.start()
    await lsp.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("neovim"),
            initialization_options={"chat": {"max_tokens": 77, "analysis_workers": 99}},
        )
    )
    yield lsp
    await lsp.shutdown_session()
    await lsp.stop()


async def test_editor_settings_apply_and_refusals_are_shown(configured, stub):
    stub.queue("one", "two")
    await configured.protocol.send_request_async("imprint/chat", {"text": "hi"})
    assert stub.requests[0]["max_tokens"] == 77  # from initializationOptions
    [shown] = [m for m in configured.messages if "analysis_workers" in m.message]
    assert shown.type == types.MessageType.Error and "99" in shown.message and "0 to 8" in shown.message

    configured.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"imprint": {"chat": {"max_tokens": 55, "n_ctx": 10}}})
    )
    await configured.protocol.send_request_async("imprint/chat", {"text": "again"})
    assert stub.requests[1]["max_tokens"] == 55
    # The refusal was sent while the notification was handled, so before the chat's result.
    assert any("chat.n_ctx = 10" in m.message and "keeping 8192" in m.message for m in configured.messages)


async def test_a_key_sent_as_null_goes_back_to_the_environment_or_default(configured, stub, daemon_env):
    stub.queue("one", "two", "three")
    configured.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"chat": {"model": "editor-model", "max_tokens": 55}})
    )
    await configured.protocol.send_request_async("imprint/chat", {"text": "hi"})
    assert (stub.requests[0]["model"], stub.requests[0]["max_tokens"]) == ("editor-model", 55)

    configured.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"chat": {"model": None, "max_tokens": None}})
    )
    await configured.protocol.send_request_async("imprint/chat", {"text": "again"})
    # chat.model comes from IMPRINT_CHAT_MODEL; max_tokens (77 at initialize) from the default.
    assert daemon_env["IMPRINT_CHAT_MODEL"] == "stub"
    assert (stub.requests[1]["model"], stub.requests[1]["max_tokens"]) == ("stub", 1024)
    assert not [m for m in configured.messages if "max_tokens" in m.message or "chat.model" in m.message]
