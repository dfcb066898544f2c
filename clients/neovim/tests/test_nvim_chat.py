"""Chat through the plugin against the real daemon: streaming into the chat buffer, the
preamble folded as thinking, tool steps as virtual lines, progress through LspProgress,
cancel, the selection as context, and settings (initializationOptions, didChangeConfiguration,
a refused value as an ERROR notification)."""

from __future__ import annotations

from repo_script import ANSWER, PORT_FILE, PREAMBLE, researcher, write_repo

from tests.openai_stub import StubReply


def test_a_direct_answer_streams_into_the_chat_buffer_and_the_result_text_stays(editor, stub):
    stub.queue("The capital of France is Paris.")

    editor.command("Imprint What is the capital of France?")
    [done] = editor.wait_done(1)

    assert done["status"] == "done"
    assert editor.chat_lines() == [
        "## You",
        "",
        "What is the capital of France?",
        "",
        "## Imprint",
        "",
        "The capital of France is Paris.",
    ]
    assert stub.requests[0]["messages"][-1] == {"role": "user", "content": "What is the capital of France?"}
    # The buffer is markdown, locked once the reply is done, and shown in the chat window.
    assert editor.lua(
        "local b = require('imprint.chat').buffer() return {vim.bo[b].filetype, vim.bo[b].modifiable}"
    ) == ["markdown", False]
    stored = editor.request("imprint/session", {"sessionId": done["sessionId"]})
    assert [(m["role"], m["content"]) for m in stored["messages"]] == [
        ("user", "What is the capital of France?"),
        ("assistant", "The capital of France is Paris."),
    ]

    # A follow-up goes into the same session: the model sees the first exchange.
    stub.queue("About 2.1 million people.")
    editor.command("Imprint How many people live there?")
    editor.wait_done(2)
    history = [(m["role"], m["content"]) for m in stub.requests[1]["messages"] if m["role"] != "system"]
    assert history == [
        ("user", "What is the capital of France?"),
        ("assistant", "The capital of France is Paris."),
        ("user", "How many people live there?"),
    ]
    assert editor.chat_lines()[-9:] == [
        "The capital of France is Paris.",
        "",
        "## You",
        "",
        "How many people live there?",
        "",
        "## Imprint",
        "",
        "About 2.1 million people.",
    ]


def test_research_folds_the_preamble_shows_tool_steps_and_progress_and_ends_with_the_result(editor, stub, workspace):
    write_repo(workspace)
    stub.queue(*[researcher] * 6)
    # Registered after the plugin's own LspProgress autocmd, so it sees the winbar it set.
    editor.lua("""
        _G.test_winbars = {}
        vim.api.nvim_create_autocmd('LspProgress', { callback = function()
          local win = require('imprint.chat')._state.win
          if win then table.insert(_G.test_winbars, vim.wo[win].winbar) end
        end })
    """)

    editor.command("Imprint Which port does billing use?")
    [done] = editor.wait_done(1)
    assert done["status"] == "done", editor.notes()

    stored = editor.request("imprint/session", {"sessionId": done["sessionId"]})
    result_text = stored["messages"][-1]["content"]  # the stored answer is the result's text
    assert result_text.startswith(ANSWER + "\n\nSources:\n[1] " + PORT_FILE + ":")
    assert editor.chat_lines() == [
        "## You",
        "",
        "Which port does billing use?",
        "",
        "## Imprint",
        "",
        "> **Thinking**",
        "> " + PREAMBLE,
        "",
        *result_text.split("\n"),
    ]
    # The preamble is one closed fold in the chat window, highlighted as thinking.
    assert editor.lua("""
        local chat = require('imprint.chat')
        return vim.api.nvim_win_call(chat._state.win, function() return { vim.fn.foldclosed(7), vim.fn.foldclosedend(7) } end)
    """) == [7, 8]
    # The one read (the repeats were answered from before) as a finished step, above the answer.
    assert editor.tool_lines() == [(9, f"  ✓ Reading {PORT_FILE}", True)]
    # Progress reached LspProgress (fidget.nvim, lualine) with the daemon's messages.
    progress = editor.lua("return _G.test_progress")
    messages = [p["message"] for p in progress if p["client"] == "imprintd"]
    assert f"Reading {PORT_FILE}" in messages
    assert "Writing the answer from the research notes…" in messages
    assert progress[-1]["kind"] == "end"
    winbars = editor.lua("return _G.test_winbars")
    assert f"%#ImprintWinbar#Imprint · Which port does billing use? · Reading {PORT_FILE}" in winbars
    # The winbar is back to its idle text.
    assert (
        editor.lua("return vim.wo[require('imprint.chat')._state.win].winbar")
        == "%#ImprintWinbar#Imprint · Which port does billing use?"
    )


LOG_HAS = """
_G.log_has = function(text)
  local file = io.open(vim.lsp.get_log_path())
  if not file then return false end
  local content = file:read('*a')
  file:close()
  return content:find(text, 1, true) ~= nil
end
"""


def test_cancel_mid_reply_leaves_the_buffer_consistent_and_the_next_question_is_answered(editor, stub):
    import threading

    release = threading.Event()
    stub.queue(StubReply(text="Partial words that never end", hold=release))
    try:
        editor.command("Imprint Tell me a long story")
        editor.wait(
            "vim.api.nvim_buf_get_lines(require('imprint.chat').buffer(), -2, -1, false)[1] == 'Partial'",
            "the first delta",
        )
        session_id = editor.lua("return require('imprint.chat').session_id()")
        editor.lua(LOG_HAS)
        editor.lua("vim.lsp.log.set_level('debug')")  # Neovim logs the -32800 it swallows
        editor.command("ImprintCancel")
        assert editor.lua("return require('imprint.chat').idle()") is True
        # Release the model only once the daemon answered -32800, so the cancel is what ended it.
        editor.wait("_G.log_has('Received cancellation ack')", "the daemon's -32800 answer to the cancelled request")
    finally:
        release.set()
    assert editor.chat_lines() == [
        "## You",
        "",
        "Tell me a long story",
        "",
        "## Imprint",
        "",
        "Partial",
        "",
        "_Cancelled._",
    ]
    assert editor.lua("return _G.test_done[1].status") == "cancelled"

    stub.queue("A short one instead.")
    editor.command("Imprint Then a short one")
    done = editor.wait_done(2)
    assert done[1]["status"] == "done" and done[1]["sessionId"] == session_id
    assert editor.chat_lines()[6:] == [
        "Partial",
        "",
        "_Cancelled._",
        "",
        "## You",
        "",
        "Then a short one",
        "",
        "## Imprint",
        "",
        "A short one instead.",
    ]
    # The cancelled question stays stored, nothing of its reply does; the model saw it.
    stored = editor.request("imprint/session", {"sessionId": session_id})
    assert [(m["role"], m["content"]) for m in stored["messages"]] == [
        ("user", "Tell me a long story"),
        ("user", "Then a short one"),
        ("assistant", "A short one instead."),
    ]
    assert not any("Partial" in (m.get("content") or "") for m in stub.requests[-1]["messages"])


def test_the_selection_goes_with_the_question_as_a_fenced_block(editor, stub, workspace):
    source = workspace / "app.py"
    source.write_text("import os\n\ndef port():\n    return int(os.environ['PORT'])\n", encoding="utf-8")
    stub.queue("It reads PORT from the environment.")

    editor.command("edit app.py")
    editor.command("3,4ImprintAsk What does this return?")
    editor.wait_done(1)

    sent = stub.requests[0]["messages"][-1]["content"]
    assert sent == (
        "What does this return?\n\n`app.py` lines 3-4:\n```python\ndef port():\n    return int(os.environ['PORT'])\n```"
    )
    lines = editor.chat_lines()
    assert lines[:3] == ["## You", "", "What does this return?"] and "```python" in lines
    assert lines[-1] == "It reads PORT from the environment."

    # Without a question, vim.ui.input asks for one (dressing.nvim, snacks.input show it).
    stub.queue("It imports os.")
    editor.lua("vim.ui.input = function(opts, on_confirm) _G.test_prompt = opts.prompt on_confirm('And this?') end")
    editor.command("wincmd p")  # asking focused the chat; back to the file
    assert editor.lua("return vim.fn.expand('%')") == "app.py"
    editor.command("1ImprintAsk")
    editor.wait_done(2)
    assert editor.lua("return _G.test_prompt") == "Ask Imprint: "
    assert stub.requests[1]["messages"][-1]["content"] == "And this?\n\n`app.py` line 1:\n```python\nimport os\n```"


def test_settings_go_as_initialization_options_change_at_runtime_and_a_refusal_is_an_error(bare_editor, options, stub):
    editor = bare_editor
    editor.lua("require('imprint').setup(...)", {**options, "settings": {"chat": {"max_tokens": 77}}})
    stub.queue("one", "two")
    editor.command("Imprint hi")
    editor.wait_done(1)
    assert stub.requests[0]["max_tokens"] == 77

    editor.lua("require('imprint').set_settings({ chat = { max_tokens = 55, n_ctx = 10 } })")
    editor.command("Imprint again")
    editor.wait_done(2)
    assert stub.requests[1]["max_tokens"] == 55
    errors = [message for message, level in editor.notes() if level == 4]  # vim.log.levels.ERROR
    assert any("chat.n_ctx = 10" in message and message.startswith("imprintd: ") for message in errors), errors


def test_setup_names_the_bad_key(bare_editor):
    def error_of(opts_lua: str) -> str:
        return bare_editor.lua(f"local ok, err = pcall(require('imprint').setup, {opts_lua}) return err")

    assert "window.layout" in error_of("{ window = { layout = 'sideways' } }")
    assert "split" in error_of("{ window = { layout = 'sideways' } }")
    assert "unknown option 'windw'" in error_of("{ windw = {} }")
    assert "cmd" in error_of("{ cmd = 'imprintd' }")
    assert "keymaps.send" in error_of("{ keymaps = { send = 3 } }")
    assert error_of("{ window = 3 }").startswith("imprint: window: expected table")


def test_a_missing_command_is_an_error_and_the_chat_stays_usable(bare_editor, options, stub):
    editor = bare_editor
    editor.lua("require('imprint').setup(...)", {**options, "cmd": ["imprintd-not-installed", "serve"]})
    editor.command("Imprint hello?")
    [done] = editor.wait_done(1)
    assert done["status"] == "error"
    assert "'imprintd-not-installed' is not an executable" in editor.chat_lines()[-1]
    # Pointing at the daemon makes the next question work.
    editor.lua("require('imprint').setup(...)", options)
    stub.queue("Hello.")
    editor.command("Imprint hello again?")
    assert editor.wait_done(2)[1]["status"] == "done"
    assert editor.chat_lines()[-1] == "Hello."


def test_opening_the_chat_with_a_missing_command_says_so(bare_editor, options):
    bare_editor.lua("require('imprint').setup(...)", {**options, "cmd": ["imprintd-not-installed", "serve"]})
    bare_editor.command("Imprint")
    errors = [message for message, level in bare_editor.notes() if level == 4]
    assert errors and "'imprintd-not-installed' is not an executable" in errors[0]
    assert "set `cmd`" in errors[0]
