"""What the daemon says about its model and its context, as the plugin shows it: the model
from initialize (then imprint/modelChanged) in the winbar and :checkhealth, not the plugin's
settings; the share of the context in the winbar from imprint/contextUsage while a reply runs
and imprint/context after it; :ImprintContext's float with the breakdown."""

from __future__ import annotations

import threading

from conftest import PLUGIN
from repo_script import ANSWER, researcher, write_repo

OUTPUT = PLUGIN / "test-output"

RECORD_USAGE = """
_G.test_usage = {}
local chat = require('imprint.chat')
local on_context_usage = chat.on_context_usage
chat.on_context_usage = function(params)
  table.insert(_G.test_usage, params)
  on_context_usage(params)
end
"""

#: The chat window's winbar as drawn, as a Lua expression (what ``editor.winbar()`` returns).
WINBAR = (
    "vim.api.nvim_eval_statusline(vim.wo[require('imprint.chat')._state.win].winbar,"
    " { winid = require('imprint.chat')._state.win, use_winbar = true, maxwidth = 90 }).str"
)


def share(usage: dict) -> str:
    percent = int(usage["used"] * 100 / usage["nCtx"] + 0.5)
    return f"{'' if usage['exact'] else '~'}{percent}% of {usage['nCtx']:,}"


def test_the_winbar_names_the_model_the_daemon_reports_and_follows_a_change(editor, stub):
    stub.queue("Hello.")
    editor.command("Imprint")
    editor.lua("vim.api.nvim_win_set_width(require('imprint.chat')._state.win, 90)")
    editor.command("Imprint hi")
    editor.wait_done(1)
    # The model is set in the daemon's environment (IMPRINT_CHAT_MODEL), never in the plugin.
    assert editor.lua("return vim.tbl_isempty(require('imprint.config').options.settings)") is True
    assert editor.lua("return require('imprint.client').model") == {
        "provider": "openai",
        "model": "stub",
        "name": "stub",
        "nCtx": 8192,
        "nCtxSource": "chat.n_ctx",
        "chatFormat": "openai",
        "reasons": False,
    }  # serverNCtx is null (the stub serves no window), which Neovim drops
    assert editor.winbar().startswith("Imprint · hi") and "stub · " in editor.winbar()
    editor.wait("require('imprint.chat')._state.context ~= nil", "the next question's share")
    assert "of 8,192" in editor.winbar()

    editor.lua("require('imprint').set_settings({ chat = { model = 'qwen3.5-4b', n_ctx = 4096 } })")
    editor.wait("require('imprint.client').model.model == 'qwen3.5-4b'", "imprint/modelChanged")
    assert editor.lua("return require('imprint.client').model") == {
        "provider": "openai",
        "model": "qwen3.5-4b",
        "name": "qwen3.5-4b",
        "nCtx": 4096,
        "nCtxSource": "chat.n_ctx",
        "chatFormat": "openai",
        "reasons": False,
    }
    assert "qwen3.5-4b" in editor.winbar()
    # The context share is of the new window at once, not at the next question.
    editor.wait(f"{WINBAR}:find('of 4,096', 1, true) ~= nil", "the winbar's share of the new window")


def test_checkhealth_names_the_model_from_initialize(editor):
    editor.command("checkhealth imprint")
    report = "\n".join(editor.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)"))
    assert "OK model in use: stub (openai, context 8,192 tokens), as the daemon reports it" in report, report
    assert "OK chat format: openai; the model answers without reasoning" in report, report


def test_the_winbar_shows_the_context_share_of_each_round_then_of_the_next_question(editor, stub, workspace):
    write_repo(workspace)
    arrived, release = threading.Event(), threading.Event()

    def held(request: dict):
        arrived.set()
        release.wait(60)
        return researcher(request)

    stub.queue(researcher, held, *[researcher] * 5)
    editor.lua(RECORD_USAGE)
    editor.command("Imprint")
    editor.lua("vim.api.nvim_win_set_width(require('imprint.chat')._state.win, 90)")
    try:
        editor.command("Imprint Which port does billing use?")
        assert arrived.wait(30), "the second round never reached the model"
        editor.wait("#_G.test_usage >= 2", "the second round's context usage")
        live = editor.lua("return _G.test_usage")[-1]
        assert live["used"] > live["parts"]["system"] > 0 and live["parts"]["research"] > 0
        assert sum(live["parts"].values()) == live["used"]
        assert editor.winbar().endswith(share(live) + " "), editor.winbar()
        # :ImprintContext during the reply shows that round.
        editor.command("ImprintContext")
        shown = editor.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)")
        assert shown[0].startswith(f"This reply's latest round: {live['used']:,} of 8,192 tokens")
        editor.command("close")
    finally:
        release.set()
    [done] = editor.wait_done(1)
    assert ANSWER in editor.chat_lines()

    # After the reply: what the next question would get, as imprint/context answers it.
    nxt = editor.request("imprint/context", {"sessionId": done["sessionId"]})
    editor.wait(
        f"require('imprint.chat')._state.context and require('imprint.chat')._state.context.used == {nxt['used']}",
        "the next question's context",
    )
    assert nxt.get("replyId") is None and nxt["parts"]["question"] == 0  # Neovim drops a null field
    assert editor.winbar().endswith(share(nxt) + " ")
    editor.command("ImprintContext")
    editor.wait("vim.bo.filetype == 'imprint-context'", "the context float")
    lines = editor.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)")
    assert lines[0] == (
        f"The next question: {nxt['used']:,} of 8,192 tokens ({int(nxt['used'] * 100 / 8192 + 0.5)}%), estimated"
    )
    assert lines[1] == f"{nxt['outputAllowance']:,} more kept free for the answer"
    parts = {line.rsplit(None, 1)[0].strip(): line.split()[-1] for line in lines[3:9]}
    assert parts["earlier messages"] == f"{nxt['parts']['earlier']:,}"
    assert parts["tool schemas"] == f"{nxt['parts']['tools']:,}"
    assert "Messages in view:     #1–#" in "\n".join(lines)
    assert lines[-1] == "Estimated from the text's size (a remote model)."
    OUTPUT.mkdir(exist_ok=True)  # the screen, for the README and for review
    (OUTPUT / "context-float.txt").write_text("\n".join(editor.screen()) + "\n", encoding="utf-8")
    assert editor.lua("return vim.api.nvim_win_get_config(0).relative") == "editor"
    editor.nvim.input("q")
    assert editor.lua("return vim.bo.filetype") != "imprint-context"


def test_a_served_models_smaller_window_is_shown_with_where_it_comes_from(editor, stub):
    # llama-server's /props, as the scripted server answers it: one slot's window, half of chat.n_ctx.
    stub.endpoints["GET /props"] = (200, {"default_generation_settings": {"n_ctx": 4096, "params": {"n_predict": -1}}})
    stub.queue("Paris.")
    editor.command("Imprint")
    editor.command("Imprint Capital of France?")
    editor.wait_done(1)
    assert "Paris." in "\n".join(editor.chat_lines())
    editor.wait("require('imprint.client').model.nCtx == 4096", "imprint/modelChanged with the server's window")
    model = editor.lua("return require('imprint.client').model")
    assert (model["nCtxSource"], model["serverNCtx"]) == ("llama-server /props n_ctx", 4096)
    # What reached the model was fitted to that window: at most a quarter of it for the answer.
    assert 0 < stub.requests[0]["max_tokens"] <= 4096 // 4
    editor.wait("require('imprint.chat')._state.context ~= nil", "the next question's share")
    assert "of 4,096" in editor.winbar()
    editor.command("ImprintContext")
    editor.wait("vim.bo.filetype == 'imprint-context'", "the context float")
    lines = editor.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)")
    assert lines[0].startswith("The next question: ") and " of 4,096 tokens (" in lines[0], lines
    assert lines[1] == "Context 4,096 tokens (llama-server /props n_ctx)", lines
    kept = editor.lua("return require('imprint.chat')._state.context")["outputAllowance"]
    assert 0 < kept <= 1024 and lines[2] == f"{kept:,} more kept free for the answer", lines
    editor.nvim.input("q")
    # :checkhealth names the running daemon's window and where it comes from.
    editor.command("checkhealth imprint")
    report = "\n".join(editor.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)"))
    assert ", model stub, context 4,096 tokens (llama-server /props n_ctx))" in report, report
