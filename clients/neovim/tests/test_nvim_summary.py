"""The running summary in the chat: with a small context, the daemon summarizes the pasted
compose file when a later question no longer fits (the scripted model of the daemon's own
summary e2e test); the chat shows a folded summary divider above that question, the lookup
as a tool step, and a reopened session shows the divider in the same place."""

from __future__ import annotations

import pytest

from tests.conversations import BILLING_QUESTION, FOLLOW_UPS, PASTE
from tests.e2e.summary_script import MAX_TOKENS, N_CTX, model

HEAD = "> **Summary of messages #"


@pytest.fixture
def daemon_env(daemon_env):
    return {**daemon_env, "IMPRINT_CHAT_N_CTX": str(N_CTX), "IMPRINT_CHAT_MAX_TOKENS": str(MAX_TOKENS)}


def divider_at(lines: list[str]) -> int:
    [row] = [index for index, line in enumerate(lines) if line.startswith(HEAD)]
    return row


def test_a_summary_shows_as_a_folded_divider_above_the_question_that_needed_it(editor, stub):
    stub.queue(*[model] * 30)
    questions = [PASTE, *(question for question, _ in FOLLOW_UPS), BILLING_QUESTION]
    for count, question in enumerate(questions, start=1):
        editor.lua("require('imprint').ask(...)", question)
        assert editor.wait_done(count)[-1]["status"] == "done", editor.notes()

    lines = editor.chat_lines()
    row = divider_at(lines)
    assert lines[row].startswith(HEAD + "1–#")
    assert lines[row + 1].startswith("> - (#1–#2) The user pasted the staging compose file.")
    # It sits right above the question whose reply wrote it, and is one closed fold.
    end = lines.index("", row)
    assert lines[end + 1 : end + 4] == ["## You", "", BILLING_QUESTION]
    assert editor.lua(
        """
        local row, last = ...
        return vim.api.nvim_win_call(require('imprint.chat')._state.win, function()
          return { vim.fn.foldclosed(row), vim.fn.foldclosedend(row) } end)
    """,
        row + 1,
        end,
    ) == [row + 1, end]
    assert lines[-1] == 'Billing listens on 8101: the compose file you pasted has `ports: ["8101:8101"]`.'
    assert (
        len(lines) - 2,  # under the blank line after "## Imprint", above the answer
        "  ✓ Searching earlier in this conversation for “billing port”",
        False,
    ) in editor.tool_lines()

    # Reopened, the session shows the divider before the first message it does not cover.
    session_id = editor.lua("return require('imprint.chat').session_id()")
    editor.command("ImprintNew")
    editor.lua("require('imprint.sessions').open(...)", session_id)
    editor.wait(f"require('imprint.chat').session_id() == '{session_id}'", "the session to open")
    reopened = editor.chat_lines()
    at = divider_at(reopened)
    assert reopened[at + 1].startswith("> - (#1–#2) The user pasted the staging compose file.")
    assert (
        editor.lua(
            """
        local row = ...
        return vim.api.nvim_win_call(require('imprint.chat')._state.win, function()
          return vim.fn.foldclosed(row) end)
    """,
            at + 1,
        )
        == at + 1
    )
