"""Sessions and sources through the plugin against the real daemon: :ImprintSessions lists
with vim.ui.select and opens one into the chat, :ImprintDelete deletes, :ImprintNew starts
over, :ImprintSources fills the quickfix list, <CR> on a source opens the file at its line."""

from __future__ import annotations

from repo_script import BILLING, PORT_FILE, PREAMBLE, researcher, rounds_done, write_repo

from tests.openai_stub import StubReply

PICK_BY_TITLE = """
local title = ...
_G.test_select = nil
vim.ui.select = function(items, opts, on_choice)
  local shown = {}
  for _, item in ipairs(items) do table.insert(shown, opts.format_item and opts.format_item(item) or item) end
  _G.test_select = { prompt = opts.prompt, shown = shown }
  for _, item in ipairs(items) do
    if type(item) == 'table' and item.title == title then return on_choice(item) end
    if item == title then return on_choice(item) end
  end
  on_choice(nil)
end
"""


def ask(editor, question: str, count: int) -> dict:
    editor.command("Imprint " + question)
    done = editor.wait_done(count)[-1]
    assert done["status"] == "done", editor.notes()
    return done


def test_sessions_open_into_the_chat_and_delete(editor, stub):
    stub.queue("Paris.", "Berlin.")
    first = ask(editor, "Capital of France?", 1)
    editor.command("ImprintNew")
    assert editor.chat_lines() == [""]
    second = ask(editor, "Capital of Germany?", 2)
    assert first["sessionId"] != second["sessionId"]

    # Pick the first session: the chat shows its transcript and follow-ups continue it.
    editor.lua(PICK_BY_TITLE, "Capital of France?")
    editor.command("ImprintSessions")
    editor.wait(f"require('imprint.chat').session_id() == '{first['sessionId']}'", "the picked session to open")
    picked = editor.lua("return _G.test_select")
    assert picked["prompt"] == "Imprint sessions"
    assert [line.split("  ", 1)[1] for line in picked["shown"]] == [
        "Capital of Germany?  (2 messages)",
        "Capital of France?  (2 messages)",
    ]
    assert editor.chat_lines() == ["## You", "", "Capital of France?", "", "## Imprint", "", "Paris."]
    stub.queue("About 2.1 million.")
    assert ask(editor, "How many people live there?", 3)["sessionId"] == first["sessionId"]
    assert [m["content"] for m in stub.requests[-1]["messages"] if m["role"] != "system"] == [
        "Capital of France?",
        "Paris.",
        "How many people live there?",
    ]

    # Delete the open session (answering the confirmation): gone from the daemon and the chat.
    editor.lua(PICK_BY_TITLE, "Delete")
    editor.command("ImprintDelete")
    editor.wait("require('imprint.chat').session_id() == nil", "the deleted session to close")
    assert editor.chat_lines() == [""]
    listed = editor.request("imprint/sessions")["sessions"]
    assert [s["sessionId"] for s in listed] == [second["sessionId"]]
    # With a bang and an id, no question is asked.
    editor.lua("vim.ui.select = function() error('asked') end")
    editor.command("ImprintDelete! " + second["sessionId"])
    editor.wait(
        "#vim.tbl_filter(function(n) return n[1]:find('deleted session') end, _G.test_notes) == 2",
        "the second deletion",
    )
    assert editor.request("imprint/sessions")["sessions"] == []


def test_an_opened_research_session_shows_thinking_and_steps_and_its_sources_open(editor, stub, workspace):
    write_repo(workspace)
    stub.queue(*[researcher] * 6)
    done = ask(editor, "Which port does billing use?", 1)
    live = editor.chat_lines()
    editor.command("ImprintNew")

    editor.lua(PICK_BY_TITLE, "Which port does billing use?")
    editor.command("ImprintSessions")
    editor.wait(f"require('imprint.chat').session_id() == '{done['sessionId']}'", "the session to open")
    # The stored session reads as the live chat did: thinking, the step, the answer with Sources.
    assert editor.chat_lines() == live
    assert editor.tool_lines() == [(8, f"  ✓ Reading {PORT_FILE}", False)]
    assert "> " + PREAMBLE in editor.chat_lines()

    # :ImprintSources: the quickfix list holds the cited file and lines.
    editor.command("ImprintSources")
    items = editor.lua("""
        return vim.tbl_map(function(i) return { vim.api.nvim_buf_get_name(i.bufnr), i.lnum, i.end_lnum, i.text } end,
          vim.fn.getqflist())
    """)
    assert len(items) == 1
    path, lnum, end_lnum, text = items[0]
    assert path == str(workspace / PORT_FILE)
    sources_line = next(line for line in editor.chat_lines() if line.startswith("[1] "))
    start, end = sources_line.split(":", 1)[1].split(" ")[0].split("-")
    assert (lnum, end_lnum) == (int(start), int(end))
    assert lnum <= 11 <= end_lnum  # "port: 8101" is line 11
    assert text.startswith("[1] ")

    # <CR> on the [1] citation in the answer opens the file at the cited line.
    editor.command("cclose")
    editor.lua("vim.api.nvim_set_current_win(require('imprint.chat')._state.win)")
    row = editor.chat_lines().index("Billing listens on 8101 [1].") + 1
    editor.lua("vim.api.nvim_win_set_cursor(0, { ..., 24 })", row)
    editor.command('execute "normal \\<CR>"')
    assert editor.lua("return { vim.api.nvim_buf_get_name(0), vim.api.nvim_win_get_cursor(0)[1] }") == [
        str(workspace / PORT_FILE),
        int(start),
    ]


def test_sources_of_a_live_answer_reach_the_quickfix_list_and_gd_opens_them(editor, stub, workspace):
    write_repo(workspace)
    stub.queue(*[researcher] * 6)
    ask(editor, "Which port does billing use?", 1)

    editor.command("ImprintSources")
    [item] = editor.lua("return vim.fn.getqflist()")
    assert editor.lua("return vim.api.nvim_buf_get_name(...)", item["bufnr"]) == str(workspace / PORT_FILE)
    assert item["lnum"] <= 11 <= item["end_lnum"]

    editor.command("cclose")
    editor.lua("vim.api.nvim_set_current_win(require('imprint.chat')._state.win)")
    row = next(i for i, line in enumerate(editor.chat_lines(), start=1) if line.startswith("[1] "))
    editor.lua("vim.api.nvim_win_set_cursor(0, { ..., 0 })", row)
    editor.command('execute "normal gd"')
    assert editor.lua("return { vim.api.nvim_buf_get_name(0), vim.api.nvim_win_get_cursor(0)[1] }") == [
        str(workspace / PORT_FILE),
        item["lnum"],
    ]


WINDOWS = """
return vim.tbl_map(function(win)
  return vim.fn.fnamemodify(vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(win)), ':t')
end, vim.api.nvim_tabpage_list_wins(0))
"""


def test_a_quickfix_jump_from_the_input_area_leaves_it_for_questions_and_a_citation_reuses_the_file_window(
    editor, stub, workspace
):
    write_repo(workspace)
    stub.queue(*[researcher] * 6)
    nvim = editor.nvim
    nvim.input(":Imprint<CR>")
    nvim.input("i")
    nvim.input("Which port does billing use?<C-s>")
    editor.wait_done(1)
    nvim.input("<Esc>")

    # From the input area: the sources to quickfix, <CR> on the first one.
    nvim.input(":ImprintSources<CR>")
    nvim.input("<CR>")
    assert editor.lua("return vim.api.nvim_buf_get_name(0)") == str(workspace / PORT_FILE)
    input_area = "return vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(require('imprint.chat')._state.input_win))"
    assert editor.lua(input_area) == "imprint://input"
    # The file, the chat, the input area and the quickfix list.
    assert sorted(editor.lua(WINDOWS)) == ["", "billing.yaml", "chat", "input"]

    # :Imprint then i types into the input area, not into the file.
    nvim.input(":Imprint<CR>")
    nvim.input("i")
    nvim.input("typed")
    assert editor.lua("return vim.api.nvim_buf_get_name(0)") == "imprint://input"
    assert editor.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)") == ["typed"]
    assert (workspace / PORT_FILE).read_text(encoding="utf-8") == BILLING
    assert not editor.lua("return vim.bo[vim.fn.bufnr(...)].modified", str(workspace / PORT_FILE))
    nvim.input("<Esc>")

    # <CR> on the citation opens the file in the window that already shows it: no new split.
    windows = editor.lua("return #vim.api.nvim_tabpage_list_wins(0)")
    nvim.input(":Imprint<CR>")
    row = editor.chat_lines().index("Billing listens on 8101 [1].") + 1
    editor.lua("vim.api.nvim_win_set_cursor(0, { ..., 24 })", row)
    nvim.input("<CR>")
    assert editor.lua("return vim.api.nvim_buf_get_name(0)") == str(workspace / PORT_FILE)
    assert editor.lua("return #vim.api.nvim_tabpage_list_wins(0)") == windows
    assert editor.lua(WINDOWS).count("billing.yaml") == 1


def test_an_input_window_showing_another_buffer_is_not_typed_into_or_closed(editor, stub, workspace):
    write_repo(workspace)
    nvim = editor.nvim
    nvim.input(":Imprint<CR>")
    nvim.input("i<Esc>")
    # Whatever put it there ('winfixbuf' turned off, a plugin), the input window now shows a file.
    editor.command("setlocal nowinfixbuf | edit README.md")
    file_window = editor.lua("return vim.api.nvim_get_current_win()")
    nvim.input(":Imprint<CR>")
    nvim.input("i")
    nvim.input("typed")
    assert editor.lua("return vim.api.nvim_buf_get_name(0)") == "imprint://input"
    assert editor.lua("return vim.api.nvim_get_current_win()") != file_window
    assert editor.lua("return vim.api.nvim_buf_get_lines(vim.fn.bufnr('README.md'), 0, -1, false)") == [
        "# shop",
        "",
        "A small shop backend.",
    ]
    nvim.input("<Esc>")
    nvim.input(":Imprint<CR>q")  # closes the chat and its input, not the file's window
    assert editor.lua("return vim.api.nvim_win_is_valid(...)", file_window)
    assert editor.lua("return vim.api.nvim_buf_get_name(vim.api.nvim_win_get_buf(...))", file_window).endswith(
        "README.md"
    )


QUICKFIX = """
return vim.tbl_map(function(i)
  return { name = i.bufnr > 0 and vim.api.nvim_buf_get_name(i.bufnr) or '', lnum = i.lnum, end_lnum = i.end_lnum,
    text = i.text, type = i.type, valid = i.valid }
end, vim.fn.getqflist())
"""


def one_round_then(answer: str, call: dict):
    """A scripted model (queued once per request) that makes `call` in its first round and then
    answers `answer` with the tools still offered: the direct path, no research stop."""

    def model(request: dict):
        if rounds_done(request) == 0:
            return StubReply(tool_calls=[call])
        return answer

    return model


READ_DEPLOY = {"name": "read_file", "id": "read_0", "arguments": {"path": PORT_FILE}}


def test_a_direct_answer_and_its_reopened_session_put_their_cited_sources_in_the_quickfix_list(editor, stub, workspace):
    write_repo(workspace)
    stub.queue(*[one_round_then("Billing listens on 8101 [1].", READ_DEPLOY)] * 2)
    done = ask(editor, "Which port does billing use?", 1)
    stored = editor.request("imprint/session", {"sessionId": done["sessionId"]})
    [source] = stored["messages"][-1]["sources"]
    assert source["kind"] == "file" and source["cited"] is True and source["supported"] is True

    editor.command("ImprintSources")
    [item] = editor.lua(QUICKFIX)
    assert item == {
        "name": str(workspace / PORT_FILE),
        "lnum": source["startLine"],
        "end_lnum": source["endLine"],
        "text": f"[1] {source['label']}",
        "type": "",
        "valid": 1,
    }
    assert "read_file" not in item["text"]

    editor.command("cclose")
    editor.command("ImprintNew")
    editor.lua("require('imprint.sessions').open(...)", done["sessionId"])
    editor.wait(f"require('imprint.chat').session_id() == '{done['sessionId']}'", "the session to open")
    editor.command("ImprintSources")
    assert editor.lua(QUICKFIX) == [item]
    # <CR> on the citation of the reopened answer opens the file at the source's line.
    editor.command("cclose")
    editor.lua("vim.api.nvim_set_current_win(require('imprint.chat')._state.win)")
    row = editor.chat_lines().index("Billing listens on 8101 [1].") + 1
    editor.lua("vim.api.nvim_win_set_cursor(0, { ..., 24 })", row)
    editor.command('execute "normal \\<CR>"')
    assert editor.lua("return { vim.api.nvim_buf_get_name(0), vim.api.nvim_win_get_cursor(0)[1] }") == [
        str(workspace / PORT_FILE),
        source["startLine"],
    ]


def test_read_but_not_cited_and_unsupported_sources_say_so_in_the_quickfix_list(editor, stub, workspace):
    write_repo(workspace)
    stub.queue(*[one_round_then("Billing listens on its usual port.", READ_DEPLOY)] * 2)
    ask(editor, "Which port does billing use?", 1)
    editor.command("ImprintSources")
    [read] = editor.lua(QUICKFIX)
    assert read["text"].startswith("[1] deploy/billing.yaml") and read["text"].endswith(" (read, not cited)")
    assert read["valid"] == 1 and read["type"] == ""

    editor.command("cclose")
    stub.queue(*[one_round_then("Payments listen on 9999 [1].", {**READ_DEPLOY, "id": "read_1"})] * 2)
    done = ask(editor, "And payments?", 2)
    [source] = editor.request("imprint/session", {"sessionId": done["sessionId"]})["messages"][-1]["sources"]
    assert source["supported"] is False and source["reason"]
    editor.command("ImprintSources")
    [unsupported] = editor.lua(QUICKFIX)
    assert unsupported["text"] == f"[1] {source['label']} (unsupported: {source['reason']})"
    assert unsupported["type"] == "W"
    # In the chat, its Sources line is muted, with the reason after it.
    marks = editor.lua("""
        local chat = require('imprint.chat')
        return vim.tbl_map(function(m) return { m[2], m[4].hl_group, m[4].virt_text and m[4].virt_text[1][1] or '' } end,
          vim.api.nvim_buf_get_extmarks(chat.buffer(), chat.ns_hl, 0, -1, { details = true }))
    """)
    row = max(index for index, line in enumerate(editor.chat_lines()) if line.startswith("[1] "))
    assert marks == [[row, "ImprintSourceUnsupported", "  " + source["reason"]]]


def test_a_message_source_jumps_to_that_message_in_the_chat(editor, stub, workspace):
    write_repo(workspace)
    stub.queue("Noted: billing moved to 8102.")
    ask(editor, "Remember that billing moved to port 8102.", 1)
    history = {"name": "conversation_history", "id": "history_0", "arguments": {"message": 1}}
    stub.queue(*[one_round_then("You said billing moved to 8102 [1].", history)] * 2)
    done = ask(editor, "Where did I say billing moved?", 2)
    [source] = editor.request("imprint/session", {"sessionId": done["sessionId"]})["messages"][-1]["sources"]
    assert source["kind"] == "message" and source["message"] == 1

    editor.command("ImprintSources")
    editor.wait("#vim.fn.getqflist() > 0", "the quickfix list (after finding the message in the chat)")
    [item] = editor.lua(QUICKFIX)
    assert item["name"] == "imprint://chat" and item["lnum"] == 1  # the first "## You"
    assert item["text"] == f"[1] {source['label']}"

    # <CR> on the citation moves the chat to message #1.
    editor.command("cclose")
    editor.lua("vim.api.nvim_set_current_win(require('imprint.chat')._state.win)")
    row = editor.chat_lines().index("You said billing moved to 8102 [1].") + 1
    editor.lua("vim.api.nvim_win_set_cursor(0, { ..., 32 })", row)
    editor.command('execute "normal \\<CR>"')
    editor.wait("vim.api.nvim_win_get_cursor(0)[1] == 1", "the cursor to reach message #1")
    assert editor.lua("return vim.api.nvim_buf_get_name(0)") == "imprint://chat"
