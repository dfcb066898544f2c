"""Searching, renaming, exporting and compacting conversations, and picking a model, through the
plugin against the real daemon: :ImprintSearch, :ImprintRename, :ImprintExport,
:ImprintCompact, :ImprintModel."""

from __future__ import annotations

from tests.e2e.summary_script import bullets, is_summarizer

PICK_FIRST = """
_G.test_select = nil
vim.ui.select = function(items, opts, on_choice)
  local shown = {}
  for _, item in ipairs(items) do table.insert(shown, opts.format_item(item)) end
  _G.test_select = { prompt = opts.prompt, shown = shown, kind = opts.kind }
  -- The first item, or the first shown with _G.test_pick in it.
  for i, line in ipairs(shown) do
    if not _G.test_pick or line:find(_G.test_pick, 1, true) then return on_choice(items[i]) end
  end
end
"""


def ask(editor, question: str, count: int) -> dict:
    editor.command("Imprint " + question)
    done = editor.wait_done(count)[-1]
    assert done["status"] == "done", editor.notes()
    return done


def test_search_fills_quickfix_and_opens_the_session_at_the_message(editor, stub):
    stub.queue("Paris.", "Billing listens on port 8101.", "Deploys go through the gateway.")
    first = ask(editor, "Capital of France?", 1)
    editor.command("ImprintNew")
    ask(editor, "Which port does billing use?", 2)
    editor.command("ImprintNew")
    ask(editor, "How do we deploy?", 3)

    editor.lua(PICK_FIRST)
    editor.lua(
        "vim.api.nvim_create_autocmd('User', {pattern = 'ImprintSearchOpened', callback = function(a) _G.test_opened = a.data end})"
    )
    editor.command("ImprintSearch capital France")
    editor.wait("_G.test_opened ~= nil", "the chosen hit to open")
    picked = editor.lua("return _G.test_select")
    assert picked["prompt"] == "Imprint: capital France" and picked["kind"] == "imprint_search"
    assert picked["shown"][0].endswith("Capital of France?  #1 user: [Capital] of [France]?")
    quickfix = editor.lua("return vim.fn.getqflist({title = 1, items = 1})")
    assert quickfix["title"] == "Imprint search: capital France"
    assert [item["text"] for item in quickfix["items"]] == picked["shown"]
    opened = editor.lua("return _G.test_opened")
    assert opened["sessionId"] == first["sessionId"] and opened["seq"] == 1
    assert editor.lua("return require('imprint.chat').session_id()") == first["sessionId"]
    lines = editor.chat_lines()
    assert lines[opened["row"]] == "Capital of France?"
    marks = editor.lua(
        "local buf = require('imprint.chat').buffer()"
        " return vim.api.nvim_buf_get_extmarks(buf, require('imprint.conversations').ns, 0, -1, {})"
    )
    assert [mark[1] for mark in marks] == [opened["row"]]
    cursor = editor.lua("return vim.api.nvim_win_get_cursor(vim.fn.win_findbuf(require('imprint.chat').buffer())[1])")
    assert cursor[0] == opened["row"] + 1

    editor.command("ImprintSearch zebra")
    editor.wait(
        "#vim.tbl_filter(function(n) return n[1]:find('nothing stored matches zebra') end, _G.test_notes) == 1",
        "the nothing-found note",
    )


def test_rename_export_and_compact_the_open_session(editor, stub, tmp_path):
    def model(body: dict):
        return bullets(body) if is_summarizer(body) else "An answer."

    stub.queue(*[model] * 4)
    done = ask(editor, "Here is the staging compose file.", 1)
    sid = done["sessionId"]
    ask(editor, "What about topic three?", 2)

    editor.lua("vim.api.nvim_win_set_width(require('imprint.chat')._state.win, 100)")
    assert editor.winbar().startswith("Imprint · Here is the staging compose file.")
    editor.command("ImprintRename Staging notes")
    editor.wait(
        "#vim.tbl_filter(function(n) return n[1]:find('renamed to Staging notes') end, _G.test_notes) == 1",
        "the rename",
    )
    assert editor.request("imprint/session", {"sessionId": sid})["session"]["title"] == "Staging notes"
    # The winbar names the session by its new title at once, not once the session is reopened.
    assert editor.winbar().startswith("Imprint · Staging notes")

    target = tmp_path / "out.md"
    editor.command(f"ImprintExport {target}")
    editor.wait(f"vim.fn.filereadable('{target}') == 1", "the export file")
    text = target.read_text(encoding="utf-8")
    assert text.startswith("# Staging notes\n") and "## You (#3)\n\nWhat about topic three?" in text

    # The chat buffer is Markdown too, so wait for the new tab, not for a filetype.
    editor.command("ImprintExport")
    editor.wait("vim.fn.tabpagenr('$') == 2", "the export buffer's tab")
    assert editor.lua("return vim.api.nvim_buf_get_lines(0, 0, 1, false)[1]") == "# Staging notes"
    assert editor.lua("return vim.bo.filetype") == "markdown"

    editor.wait("require('imprint.chat')._state.context ~= nil", "the next question's share")
    before = editor.lua("return require('imprint.chat')._state.context")
    assert before["parts"]["summary"] == 0
    editor.command("ImprintCompact")
    editor.wait(
        "#vim.tbl_filter(function(n) return n[1]:find('summary now covers') end, _G.test_notes) == 1", "the compaction"
    )
    summary = editor.request("imprint/summary", {"sessionId": sid})["summary"]
    assert (summary["firstSeq"], summary["lastSeq"]) == (1, 2)
    # The chat shows the new summary at once, folded before the first message it does not cover,
    # as the reopened session would show it; the exchanges stay as they were.
    head = "> **Summary of messages #1–#2**"
    editor.wait(
        f"vim.tbl_contains(vim.api.nvim_buf_get_lines(require('imprint.chat').buffer(), 0, -1, false), '{head}')",
        "the summary in the chat",
    )
    lines = editor.chat_lines()
    row = lines.index(head)
    assert lines[row + 1] == "> - (#1–#2) The user pasted the staging compose file."
    assert lines[row + 2 : row + 6] == ["", "## You", "", "What about topic three?"]
    assert lines[:3] == ["## You", "", "Here is the staging compose file."]
    assert editor.lua("return require('imprint.chat').session_id()") == sid
    # The winbar's share is what the next question gets now, the summary included.
    editor.wait(
        "(require('imprint.chat')._state.context or { parts = { summary = 0 } }).parts.summary > 0",
        "the share counted again",
    )
    now = editor.request("imprint/context", {"sessionId": sid})
    assert editor.lua("return require('imprint.chat')._state.context")["used"] == now["used"]
    assert editor.lua("return require('imprint.chat.context').share(require('imprint.chat')._state.context)") in (
        editor.winbar()
    )


def test_model_offers_the_served_models_and_the_chat_ggufs_of_models_dir_and_picking_one_sets_chat_model(
    editor, stub, tmp_path
):
    import shutil

    from imprintd.models.embedded import find_embedded_model

    embedded = find_embedded_model()
    assert embedded is not None, "the embedded model comes with the test dependencies"
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(embedded, folder / "smol.gguf")
    (folder / "notes.gguf").write_bytes(b"not a model")
    editor.command("Imprint")
    editor.lua("vim.api.nvim_win_set_width(require('imprint.chat')._state.win, 100)")
    editor.lua(f"require('imprint').set_settings({{ chat = {{ models_dir = '{folder}' }} }})")
    editor.lua(PICK_FIRST + "_G.test_pick = 'served by'")
    editor.command("ImprintModel")
    editor.wait("_G.test_select ~= nil", "the model picker")
    picked = editor.lua("return _G.test_select")
    assert picked["kind"] == "imprint_model" and picked["prompt"].startswith("Imprint model (now stub)")
    # The scripted server's /v1/models first (provider openai), then the chat GGUFs; notes.gguf not offered.
    assert picked["shown"][0] == "stub  (served by chat.base_url)"
    mine = [line for line in picked["shown"] if "models_dir" in line]
    assert mine == ["smol.gguf  (Q4_1, 94 MiB, 8192 ctx, models_dir)"]  # the name the status line gives it in use
    settings = "(function() local s = require('imprint.config').options.settings or {{}} return s.chat and {} end)()"
    editor.wait(settings.format("s.chat.provider == 'openai' and s.chat.model == 'stub'"), "the served model picked")

    editor.lua(PICK_FIRST + "_G.test_pick = 'models_dir'")
    editor.command("ImprintModel")
    editor.wait("_G.test_select ~= nil", "the model picker again")
    editor.wait(
        settings.format(f"s.chat.provider == 'local' and s.chat.model == '{folder / 'smol.gguf'}'"),
        "chat.model to be the picked file",
    )
    # The winbar names the model in use by the name the daemon sent, the one the picker offered it by.
    editor.wait("require('imprint.client').model.model == 'smol.gguf'", "imprint/modelChanged")
    offered_as = mine[0].split("  (")[0]
    assert editor.lua("return require('imprint.client').model.name") == offered_as
    assert editor.winbar().rstrip().endswith(f"{offered_as} (json-fallback)"), editor.winbar()


def test_a_local_model_in_use_is_named_in_the_winbar_by_the_daemons_name_with_no_listing_asked(
    bare_editor, options, tmp_path
):
    import shutil

    from imprintd.models.embedded import find_embedded_model

    embedded = find_embedded_model()
    assert embedded is not None, "the embedded model comes with the test dependencies"
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(embedded, folder / "smol.gguf")
    env = {**options["cmd_env"], "IMPRINT_CHAT_PROVIDER": "local", "IMPRINT_CHAT_MODEL": str(folder / "smol.gguf")}
    editor = bare_editor
    # Every request the plugin makes, by method: an imprint/models would scan the disk for a name.
    editor.lua(
        """
        _G.test_asked = {}
        local client = require('imprint.client')
        local request = client.request
        client.request = function(method, ...)
          table.insert(_G.test_asked, method)
          return request(method, ...)
        end
        """
    )
    editor.lua(
        "require('imprint').setup(...)", {**options, "cmd_env": env, "settings": {"chat": {"models_dir": str(folder)}}}
    )
    editor.command("Imprint")
    editor.lua("vim.api.nvim_win_set_width(require('imprint.chat')._state.win, 100)")
    editor.wait("require('imprint.client').model ~= nil", "initialize")
    model = editor.lua("return require('imprint.client').model")
    assert model["model"] == "smol.gguf"
    # The name the daemon sent is the one shown, the same string its imprint/models entry gives it.
    listed = editor.request("imprint/models")
    [entry] = [m for m in listed["models"] if m["path"] == str(folder / "smol.gguf")]
    assert model["name"] == entry["name"]
    assert editor.lua("return require('imprint.client').model_name()") == entry["name"]
    assert editor.winbar().rstrip().endswith(f"{entry['name']} (json-fallback)"), editor.winbar()
    assert "imprint/models" not in editor.lua("return _G.test_asked"), "the disk was not scanned for a name"


def test_an_older_daemon_without_a_name_is_shown_by_its_model(bare_editor):
    editor = bare_editor
    assert editor.lua("return require('imprint.client').model_name({ provider = 'local', model = 'smol.gguf' })") == (
        "smol.gguf"
    )
    assert editor.lua("return require('imprint.client').model_name({ provider = 'local', model = '' })") is None
    assert (
        editor.lua(
            "return require('imprint.client').model_name({ provider = 'local', model = 'sha256-c5', name = 'qwen2.5:0.5b' })"
        )
        == "qwen2.5:0.5b"
    )


def test_a_reopened_session_lists_the_steps_the_live_reply_showed(editor):
    """The first look titled Looking, as live; a repeated identical call left out."""
    steps = editor.lua(
        """
        local _, _, placed = require('imprint.chat.render').session({
          { seq = 1, role = 'user', content = 'Which port?' },
          { seq = 2, role = 'assistant', content = '', toolCalls = {
            { id = 'call_look1a2b', name = 'search', arguments = { query = 'billing port' } } } },
          { seq = 3, role = 'tool', content = 'billing.yaml:3 port: 8101', toolCallId = 'call_look1a2b' },
          { seq = 4, role = 'assistant', content = '', toolCalls = {
            { id = 'call_0', name = 'search', arguments = { query = 'port' } } } },
          { seq = 5, role = 'tool', content = 'x', toolCallId = 'call_0' },
          -- The same call again: answered from before, stored, never a step of the live reply.
          { seq = 6, role = 'assistant', content = '', toolCalls = {
            { id = 'call_1', name = 'search', arguments = { query = 'port' } } } },
          { seq = 7, role = 'tool', content = '(Same call as before; its result again.)\\nx', toolCallId = 'call_1' },
          { seq = 8, role = 'assistant', content = '8101.' },
        }, vim.NIL)
        return vim.tbl_map(function(step) return step.title end, placed)
        """
    )
    # The look is titled with the question asked, as live, not with its query.
    assert steps == ["Looking in the workspace for “Which port?”", "Searching the workspace for “port”"]
