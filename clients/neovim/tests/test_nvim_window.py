"""The chat's windows and keys, and the daemon's life: a float layout with its input float
(<CR> sends in normal mode), `q` closes and :Imprint reopens with the folds, <C-c> cancels,
:ImprintRestart, a daemon that dies mid-reply, :ImprintLog."""

from __future__ import annotations

import threading

from repo_script import PREAMBLE, researcher, write_repo

from tests.openai_stub import StubReply

FOLD_AT_THINKING = """
local chat = require('imprint.chat')
local lines = vim.api.nvim_buf_get_lines(chat.buffer(), 0, -1, false)
local row = vim.fn.index(lines, '> **Thinking**') + 1
return vim.api.nvim_win_call(chat._state.win, function() return { row, vim.fn.foldclosed(row) } end)
"""


def test_a_float_chat_sends_with_enter_closes_with_q_and_reopens_with_its_folds(bare_editor, options, stub, workspace):
    editor = bare_editor
    editor.lua("require('imprint').setup(...)", {**options, "window": {"layout": "float", "width": 0.8, "height": 0.5}})
    write_repo(workspace)
    stub.queue(*[researcher] * 6)
    nvim = editor.nvim

    nvim.input(":Imprint<CR>")
    assert editor.lua("return vim.api.nvim_win_get_config(0).relative") == "editor"
    nvim.input("i")
    assert editor.lua("return { vim.api.nvim_buf_get_name(0), vim.api.nvim_win_get_config(0).relative }") == [
        "imprint://input",
        "editor",
    ]
    nvim.input("Which port does billing use?<Esc><CR>")  # normal-mode <CR> sends
    editor.wait_done(1)
    row, closed = editor.lua(FOLD_AT_THINKING)
    assert closed == row

    nvim.input("<C-w>p")  # back to the chat float (floats are not above or below)
    assert editor.lua("return vim.api.nvim_buf_get_name(0)") == "imprint://chat"
    nvim.input("q")  # closes the chat and its input
    assert editor.lua("return #vim.api.nvim_list_wins()") == 1
    nvim.input(":Imprint<CR>")
    assert editor.lua("return vim.api.nvim_buf_get_name(0)") == "imprint://chat"
    row, closed = editor.lua(FOLD_AT_THINKING)
    assert closed == row  # the thinking block is folded again in the new window
    assert "> " + PREAMBLE in editor.chat_lines()


def test_ctrl_c_in_the_chat_cancels(editor, stub):
    release = threading.Event()
    stub.queue(StubReply(text="Slow words that wait", hold=release))
    try:
        editor.command("Imprint Say something slowly")
        editor.wait(
            "vim.api.nvim_buf_get_lines(require('imprint.chat').buffer(), -2, -1, false)[1] == 'Slow'",
            "the first delta",
        )
        editor.lua("vim.api.nvim_set_current_win(require('imprint.chat')._state.win)")
        editor.nvim.input("<C-c>")
        assert editor.lua("return _G.test_done[1].status") == "cancelled"
    finally:
        release.set()
    assert editor.chat_lines()[-3:] == ["Slow", "", "_Cancelled._"]


def test_restart_starts_a_new_daemon_and_the_session_goes_on(editor, stub):
    stub.queue("First.", "Second.")
    editor.command("Imprint One?")
    first = editor.wait_done(1)[0]
    old = editor.lua("return require('imprint.client').client_id")
    editor.command("ImprintRestart")
    new = editor.lua("return require('imprint.client').client_id")
    assert new != old
    editor.wait(f"vim.lsp.get_client_by_id({old}) == nil", "the old daemon to stop")
    editor.command("Imprint Two?")
    second = editor.wait_done(2)[1]
    assert second["status"] == "done" and second["sessionId"] == first["sessionId"]
    assert [m["content"] for m in stub.requests[1]["messages"] if m["role"] != "system"] == ["One?", "First.", "Two?"]


def test_a_daemon_that_dies_mid_reply_is_an_error_and_the_next_question_starts_it_again(editor, stub):
    release = threading.Event()
    stub.queue(StubReply(text="Words before the crash", hold=release))
    try:
        editor.command("Imprint Are you there?")
        editor.wait(
            "vim.api.nvim_buf_get_lines(require('imprint.chat').buffer(), -2, -1, false)[1] == 'Words'",
            "the first delta",
        )
        editor.lua("require('imprint.client').get().rpc.terminate()")
        [done] = editor.wait_done(1)
    finally:
        release.set()
    assert done["status"] == "error" and "the daemon exited" in done["error"]
    assert editor.chat_lines()[-1].startswith("> **Error:** the daemon exited")
    stub.queue("Back again.")
    editor.command("Imprint Are you back?")
    assert editor.wait_done(2)[1]["status"] == "done"
    assert editor.chat_lines()[-1] == "Back again."


def test_imprint_log_opens_the_daemons_log(editor, options, stub):
    stub.queue("Logged.")
    editor.command("Imprint Log something")
    editor.wait_done(1)
    editor.command("ImprintLog")
    assert editor.lua("return vim.api.nvim_buf_get_name(0)") == options["log_file"]
    assert any("imprintd" in line for line in editor.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)"))


def test_the_chat_follows_the_reply_unless_the_user_moved_up_to_read(editor, stub):
    cursor = "return vim.api.nvim_win_get_cursor(require('imprint.chat')._state.win)[1]"
    stub.queue("Line one.\n\nLine two.\n\nLine three.")
    editor.command("Imprint Follow me")
    editor.wait_done(1)
    assert editor.lua(cursor) == len(editor.chat_lines())  # followed to the end

    release = threading.Event()
    stub.queue(StubReply(text="Words\n\nthat come later", hold=release))  # the first delta is three lines
    try:
        editor.command("Imprint Now wait")
        editor.wait(
            "vim.api.nvim_buf_get_lines(require('imprint.chat').buffer(), -2, -1, false)[1] == 'that'",
            "the first delta",
        )
        # The chat is the current window (asking focused it) and follows the stream.
        assert editor.lua("return vim.api.nvim_get_current_win() == require('imprint.chat')._state.win")
        editor.wait(
            f"({cursor.removeprefix('return ')}) == vim.api.nvim_buf_line_count(require('imprint.chat').buffer())",
            "the cursor to follow the first delta",
        )
        editor.lua("vim.api.nvim_win_set_cursor(0, { 3, 0 })")  # up, to reread the first question
    finally:
        release.set()
    editor.wait_done(2)
    assert editor.chat_lines()[-3:] == ["Words", "", "that come later"]
    assert editor.lua(cursor) == 3


def test_the_log_folder_is_made_when_missing(bare_editor, options, stub, tmp_path):
    log_file = tmp_path / "state" / "nvim" / "imprintd.log"  # as on a fresh machine: no folder yet
    bare_editor.lua("require('imprint').setup(...)", {**options, "log_file": str(log_file)})
    stub.queue("Started.")
    bare_editor.command("Imprint Do you start?")
    assert bare_editor.wait_done(1)[0]["status"] == "done"
    assert log_file.is_file()
