"""Chat through the plugin against the real daemon: streaming into the chat buffer, the
preamble folded as thinking, tool steps as virtual lines, progress through LspProgress,
cancel, the selection as context, and settings (initializationOptions, didChangeConfiguration,
a refused value as an ERROR notification)."""

from __future__ import annotations

import re

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

    editor.command("Imprint")
    editor.lua("vim.api.nvim_win_set_width(require('imprint.chat')._state.win, 90)")  # room for it all
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
    # The one read (the repeats were answered from before) as a finished step, under the blank
    # line that ends the thinking block, so above the answer.
    assert editor.tool_lines() == [(8, f"  ✓ Reading {PORT_FILE}", False)]
    # Progress reached LspProgress (fidget.nvim, lualine) with the daemon's messages.
    progress = editor.lua("return _G.test_progress")
    messages = [p["message"] for p in progress if p["client"] == "imprintd"]
    assert f"Reading {PORT_FILE}" in messages
    assert "Writing the answer from the research notes…" in messages
    assert progress[-1]["kind"] == "end"
    winbars = editor.lua("return _G.test_winbars")
    # The question may be shortened ("…") to leave room for the step and the context share.
    reading = re.compile(rf"%#ImprintWinbar#Imprint%< · Which port does b[^·]* · Reading {re.escape(PORT_FILE)}%=.*")
    assert any(reading.fullmatch(winbar.strip()) for winbar in winbars), winbars
    # The winbar is back to its idle text (the model and its context share at the right).
    winbar = editor.lua("return vim.wo[require('imprint.chat')._state.win].winbar")
    assert winbar.split("%=")[0] == "%#ImprintWinbar#Imprint%< · Which port does billing use?"


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


def held_answer(release, text: str, arrived=None):
    """A scripted reply that holds the model's answer until the test releases it (and sets
    `arrived` when the model is asked)."""

    def answer(request: dict) -> str:
        if arrived is not None:
            arrived.set()
        release.wait(60)
        return text

    return answer


FINISHED_STEPS = """(function()
  local chat, count = require('imprint.chat'), 0
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(chat.buffer(), chat.ns_tools, 0, -1, { details = true })) do
    for _, line in ipairs(m[4].virt_lines or {}) do
      if line[1][1]:find('✓', 1, true) then count = count + 1 end
    end
  end
  return count
end)()"""


def chat_column(rows: list[str]) -> list[str]:
    """The chat window's part of each screen row (the chat is the right-hand split)."""
    return [row.split("│", 1)[1] if "│" in row else "" for row in rows]


def test_research_steps_show_in_the_order_they_ran_while_research_goes_on_and_when_reopened(editor, stub, workspace):
    import threading

    write_repo(workspace)
    arrived, release = threading.Event(), threading.Event()
    search = {"name": "search", "id": "call_a", "arguments": {"query": "billing port"}}
    read_deploy = {"name": "read_file", "id": "call_b", "arguments": {"path": PORT_FILE}}
    read_readme = {"name": "read_file", "id": "call_c", "arguments": {"path": "README.md"}}
    stub.queue(
        StubReply(text="Let me search first.", tool_calls=[search]),
        StubReply(text="Now the deployment.", tool_calls=[read_deploy]),
        StubReply(tool_calls=[read_readme]),  # a round that writes no text
        held_answer(release, ANSWER, arrived),
    )
    expected = [
        "+--  2 lines: > **Thinking**",
        "  ✓ Searching the workspace for “billing port”",
        "+--  2 lines: > **Thinking**",
        f"  ✓ Reading {PORT_FILE}",
        "  ✓ Reading README.md",
    ]

    def shown() -> list[str]:
        wanted = ("+--", "  ✓", "  ⋯")
        return [line.rstrip("·") for line in chat_column(editor.screen()) if line.startswith(wanted)]

    editor.command("Imprint")
    editor.lua("vim.api.nvim_win_set_width(require('imprint.chat')._state.win, 90)")  # whole step lines
    try:
        editor.command("Imprint Which port does billing use?")
        editor.wait(FINISHED_STEPS + " == 3", "three finished steps")
        assert arrived.wait(30), "the answer was never asked for"
        # While the answer is still being written: every step is on screen, oldest first, each
        # under the thinking of its round.
        assert shown() == expected
    finally:
        release.set()
    [done] = editor.wait_done(1)
    assert shown() == expected
    assert ANSWER in editor.chat_lines()

    editor.command("ImprintNew")
    editor.lua("require('imprint.sessions').open(...)", done["sessionId"])
    editor.wait(f"require('imprint.chat').session_id() == '{done['sessionId']}'", "the session to open")
    assert shown() == expected


def test_the_winbar_drops_finished_indexing_once_the_answer_streams_and_keeps_its_name_before_a_long_title(
    editor, stub, workspace
):
    import threading

    write_repo(workspace)  # files to index: the first reply reports indexing them
    release = threading.Event()
    stub.queue(StubReply(text="Billing listens on 8101.", hold=release))
    question = "Which port does the billing service listen on, and where in the deployment is that set?"
    try:
        editor.command("Imprint " + question)
        editor.wait(
            "vim.api.nvim_buf_get_lines(require('imprint.chat').buffer(), -2, -1, false)[1] == 'Billing'",
            "the first delta",
        )
        progress = [p["message"] for p in editor.lua("return _G.test_progress") if p["client"] == "imprintd"]
        assert "Indexing the workspace: 2 of 2 files" in progress  # what the winbar showed before
        shown = editor.winbar()
        assert "Indexing" not in shown
        width = editor.lua("return vim.api.nvim_win_get_width(require('imprint.chat')._state.win)")
        assert width < len(question)
        # The name first, the title cut to fit, what happens now last.
        assert shown.startswith("Imprint · Which port") and shown.endswith("… · answering…"), shown
        assert len(shown) <= width
    finally:
        release.set()
    editor.wait_done(1)
    assert editor.winbar().startswith("Imprint · Which port") and "…" in editor.winbar()
    # Wider, the whole title shows.
    editor.command("set columns=200")
    editor.lua("vim.api.nvim_win_set_width(require('imprint.chat')._state.win, 190)")
    editor.wait("vim.wo[require('imprint.chat')._state.win].winbar:find('set%?') ~= nil", "the winbar to widen")
    assert editor.winbar().startswith("Imprint · " + question)


def test_cancelling_the_first_question_before_any_text_keeps_its_session_for_the_next(editor, stub):
    import threading

    arrived, release = threading.Event(), threading.Event()

    def held(request: dict) -> str:
        arrived.set()
        release.wait(60)
        return "Never shown."

    stub.queue(held, "A short one instead.")
    # As when the cancel beats the round's imprint/contextUsage (say, while the workspace is
    # indexed): no notification names the new session.
    editor.lua("require('imprint.chat').on_context_usage = function() end")
    try:
        editor.command("Imprint Tell me a long story")
        assert arrived.wait(30), "the question never reached the model"
        # The daemon stored the question in a new session, and no notification named it yet.
        assert editor.lua("return require('imprint.chat').session_id()") is None
        editor.lua(LOG_HAS)
        editor.lua("vim.lsp.log.set_level('debug')")
        editor.command("ImprintCancel")
        editor.wait("_G.log_has('Received cancellation ack')", "the daemon's -32800 answer to the cancelled request")
    finally:
        release.set()
    # Asked at once, while the chat may still be finding the cancelled question's session.
    editor.command("Imprint Then a short one")
    done = editor.wait_done(2)
    assert [d["status"] for d in done] == ["cancelled", "done"], editor.notes()
    session_id = done[1]["sessionId"]
    assert editor.lua("return require('imprint.chat').session_id()") == session_id
    stored = editor.request("imprint/session", {"sessionId": session_id})
    assert [(m["role"], m["content"]) for m in stored["messages"]] == [
        ("user", "Tell me a long story"),
        ("user", "Then a short one"),
        ("assistant", "A short one instead."),
    ]
    assert len(editor.request("imprint/sessions")["sessions"]) == 1
    # The model saw the cancelled question as part of the same conversation.
    assert [m["content"] for m in stub.requests[-1]["messages"] if m["role"] == "user"] == [
        "Tell me a long story",
        "Then a short one",
    ]


RECORD_NOTIFY = """
_G.test_sent = {}
local c = require('imprint.client').get()
local notify = c.notify
c.notify = function(self, method, params)
  if method == 'workspace/didChangeConfiguration' then table.insert(_G.test_sent, params.settings) end
  return notify(self, method, params)
end
"""


def test_a_setting_that_disappears_or_is_set_to_nil_is_sent_as_null_and_the_daemon_goes_back_to_its_own(
    bare_editor, options, stub
):
    from imprintd.settings import ChatSettings

    default = ChatSettings().max_tokens
    editor = bare_editor
    editor.lua("require('imprint').setup(...)", {**options, "settings": {"chat": {"max_tokens": 77, "n_ctx": 8192}}})
    stub.queue("one", "two", "three", "four")
    editor.command("Imprint hi")
    editor.wait_done(1)
    assert stub.requests[0]["max_tokens"] == 77
    editor.lua(RECORD_NOTIFY)

    # setup() again without max_tokens: it went away, so it is sent as null.
    editor.lua("require('imprint').setup(...)", {**options, "settings": {"chat": {"n_ctx": 8192}}})
    assert editor.lua("return _G.test_sent") == [{"chat": {"n_ctx": 8192, "max_tokens": None}}]
    editor.command("Imprint again")
    editor.wait_done(2)
    assert stub.requests[1]["max_tokens"] == default

    # set_settings: a value, then vim.NIL to unset it.
    editor.lua("require('imprint').set_settings({ chat = { max_tokens = 55 } })")
    editor.command("Imprint three")
    editor.wait_done(3)
    assert stub.requests[2]["max_tokens"] == 55
    editor.lua("require('imprint').set_settings({ chat = { max_tokens = vim.NIL } })")
    assert editor.lua("return _G.test_sent")[-1] == {"chat": {"n_ctx": 8192, "max_tokens": None}}
    assert editor.lua("return require('imprint.config').options.settings") == {"chat": {"n_ctx": 8192}}
    editor.command("Imprint four")
    editor.wait_done(4)
    assert stub.requests[3]["max_tokens"] == default
    assert not [message for message, level in editor.notes() if level == 4], editor.notes()
