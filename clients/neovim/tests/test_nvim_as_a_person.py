"""One scenario driven as a person would, with keys typed into Neovim (pynvim `input`):
open the chat, press `i`, type a question, send it with <C-s>, read the answer, go up to
the chat and open the source with <CR>. The screen text of each step is saved under
clients/neovim/test-output/ (git-ignored) for the README and for review."""

from __future__ import annotations

from conftest import PLUGIN
from repo_script import ANSWER, PORT_FILE, researcher, write_repo

OUTPUT = PLUGIN / "test-output"

SCREEN = """
vim.cmd.redraw()
local rows = {}
for row = 1, vim.o.lines do
  local cells = {}
  for col = 1, vim.o.columns do cells[#cells + 1] = vim.fn.screenstring(row, col) end
  rows[#rows + 1] = (table.concat(cells):gsub('%s+$', ''))
end
return rows
"""


def screen(editor, name: str) -> list[str]:
    rows = editor.lua(SCREEN)
    OUTPUT.mkdir(exist_ok=True)
    (OUTPUT / f"{name}.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return rows


def test_a_person_asks_reads_the_answer_and_opens_its_source(editor, stub, workspace):
    write_repo(workspace)
    stub.queue(*[researcher] * 6)
    nvim = editor.nvim

    nvim.input(":Imprint<CR>")
    assert editor.lua("return vim.bo.filetype") == "markdown"
    nvim.input("i")  # the input area opens under the chat, in insert mode
    assert nvim.api.get_mode()["mode"] == "i"
    assert editor.lua("return vim.api.nvim_buf_get_name(0)") == "imprint://input"
    nvim.input("Which port does billing use?")
    screen(editor, "1-typing")
    nvim.input("<C-s>")
    editor.wait_done(1)
    nvim.input("<Esc>")

    shown = "\n".join(screen(editor, "2-answered"))
    assert "## You" in shown and "Which port does billing use?" in shown
    assert ANSWER in shown and f"[1] {PORT_FILE}:" in shown
    assert f"✓ Reading {PORT_FILE}" in shown  # the tool step's virtual line
    assert "> **Thinking**" in shown and "Let me read" not in shown  # the preamble is folded
    assert editor.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)") == [""]  # the input emptied

    nvim.input("<C-w>k")  # up to the chat
    assert editor.lua("return vim.api.nvim_buf_get_name(0)") == "imprint://chat"
    nvim.input("G")  # the last line: "[1] deploy/billing.yaml:…"
    nvim.input("<CR>")
    opened = screen(editor, "3-source")
    assert editor.lua("return vim.api.nvim_buf_get_name(0)") == str(workspace / PORT_FILE)
    line = editor.lua("return vim.api.nvim_win_get_cursor(0)[1]")
    assert line <= 11 and "port: 8101" in "\n".join(opened)
