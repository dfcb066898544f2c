--- Thinking and summary blocks: a block is an extmark in the blocks namespace (its highlight
--- and its extent) and a closed manual fold in each chat window. Manual folds cost nothing per
--- edit (an expression fold would be evaluated on every streamed delta), move with the lines
--- around them, and can be made in Insert mode, where Neovim updates no computed folds.
local api = vim.api
local ns = require("imprint.chat.state").ns

local M = {}

--- Fold rows `first`..`last` (0-based) closed in window `win`.
local function fold_rows(win, first, last)
  api.nvim_win_call(win, function()
    vim.cmd(("%d,%dfold"):format(first + 1, last + 1))
  end)
end

--- Mark `lines` (already in the buffer at `first_row`) as a block: highlighted, folded.
function M.add(buf, first_row, lines, hl)
  local last_row = first_row + #lines - 1
  api.nvim_buf_set_extmark(buf, ns.blocks, first_row, 0, {
    end_row = last_row, end_col = #lines[#lines], hl_group = hl, hl_eol = true,
    right_gravity = false, end_right_gravity = true,
  })
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    fold_rows(win, first_row, last_row)
  end
end

--- Make a window's folds again from the blocks (a window opened on the chat buffer).
function M.restore(win, buf)
  api.nvim_win_call(win, function()
    vim.cmd("normal! zE")
  end)
  for _, mark in ipairs(api.nvim_buf_get_extmarks(buf, ns.blocks, 0, -1, { details = true })) do
    fold_rows(win, mark[2], mark[4].end_row)
  end
end

--- A block's lines: `head`, then `text_lines` quoted.
function M.quoted(head, text_lines)
  local lines = { head }
  for _, line in ipairs(text_lines) do
    lines[#lines + 1] = line == "" and ">" or "> " .. line
  end
  return lines
end

return M
