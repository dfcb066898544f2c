"""A reasoning model through the plugin against the real daemon: its thoughts are a
closed "Thinking" fold before the text they led to, never the answer, live and when the session
is opened again; the winbar says "Thinking…" while they stream, and names the chat format."""

from __future__ import annotations

from repo_script import PORT_FILE, write_repo

from tests.openai_stub import StubReply


def fold_of(editor, row: int) -> list[int]:
    """``foldclosed`` and ``foldclosedend`` of 1-based ``row`` in the chat window (-1: not folded)."""
    return editor.lua(
        """
        local row = ...
        local chat = require('imprint.chat')
        return vim.api.nvim_win_call(chat._state.win, function()
          return { vim.fn.foldclosed(row), vim.fn.foldclosedend(row) }
        end)
        """,
        row,
    )


def test_thoughts_fold_before_the_answer_and_come_back_folded_when_the_session_is_opened(editor, stub):
    stub.queue(StubReply(reasoning="The user asks for a capital.\nFrance: Paris.", text="Paris."))
    editor.lua("""
        _G.test_thinking = {}
        local reply = require('imprint.chat.reply')
        local on_reasoning = reply.on_reasoning
        require('imprint.chat').on_reasoning = function(params)
          on_reasoning(params)
          table.insert(_G.test_thinking, vim.wo[require('imprint.chat')._state.win].winbar)
        end
    """)
    editor.command("Imprint What is the capital of France?")
    [done] = editor.wait_done(1)
    assert done["status"] == "done", editor.notes()

    expected = [
        "## You",
        "",
        "What is the capital of France?",
        "",
        "## Imprint",
        "",
        "> **Thinking**",
        "> The user asks for a capital.",
        "> France: Paris.",
        "",
        "Paris.",
    ]
    assert editor.chat_lines() == expected
    assert fold_of(editor, 7) == [7, 9]  # closed, highlighted as thinking
    assert fold_of(editor, 11) == [-1, -1]  # the answer is not folded
    winbars = editor.lua("return _G.test_thinking")
    assert winbars and all("Thinking…" in winbar.split("%=")[0] for winbar in winbars)

    stored = editor.request("imprint/session", {"sessionId": done["sessionId"]})
    assert stored["messages"][-1]["content"] == "Paris."
    assert stored["messages"][-1]["reasoning"] == "The user asks for a capital.\nFrance: Paris."

    editor.command("ImprintNew")
    editor.lua("require('imprint.chat').show_session(...)", stored)
    assert editor.chat_lines() == expected
    assert fold_of(editor, 7) == [7, 9]


def test_a_round_that_only_thought_then_read_shows_its_thoughts_folded_above_its_step(editor, stub, workspace):
    write_repo(workspace)
    stub.queue(
        StubReply(
            reasoning="I should read the deployment.",
            tool_calls=[{"name": "read_file", "arguments": {"path": PORT_FILE}}],
        ),
        StubReply(reasoning="It says 8101.", text="Billing listens on 8101."),
    )
    editor.command("Imprint Which port does billing use?")
    [done] = editor.wait_done(1)
    assert done["status"] == "done", editor.notes()
    lines = editor.chat_lines()
    assert lines[6:12] == [
        "> **Thinking**",
        "> I should read the deployment.",
        "",
        "> **Thinking**",
        "> It says 8101.",
        "",
    ]
    assert lines[12].startswith("Billing listens on 8101."), lines
    assert fold_of(editor, 7) == [7, 8] and fold_of(editor, 10) == [10, 11]
    # The step sits under the first round's thoughts, before the second round's.
    assert editor.tool_lines() == [(8, f"  ✓ Reading {PORT_FILE}", False)]


def test_the_winbar_names_a_local_models_chat_format_and_whether_it_thinks(editor, stub):
    editor.command("Imprint")
    editor.lua("vim.api.nvim_win_set_width(require('imprint.chat')._state.win, 120)")
    # As imprint/modelChanged would report a local reasoning model.
    editor.lua("""
        require('imprint.client').model = { provider = 'local', model = 'Qwen3-4B.gguf', nCtx = 8192,
          chatFormat = 'qwen-xml', reasons = true }
        require('imprint.chat').on_model()
    """)
    assert "Qwen3-4B.gguf (qwen-xml, thinks)" in editor.winbar()
    editor.lua("""
        require('imprint.client').model = { provider = 'local', model = 'SmolLM2.gguf', nCtx = 8192,
          chatFormat = 'json-fallback', reasons = false }
        require('imprint.chat').on_model()
    """)
    assert "SmolLM2.gguf (json-fallback)" in editor.winbar()
