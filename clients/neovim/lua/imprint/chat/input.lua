--- The input area: a small markdown buffer under the chat (a float under a float chat) whose
--- text is sent as the next question; and a question with lines of a buffer as context.
local api = vim.api
local config = require("imprint.config")
local state = require("imprint.chat.state")
local ui = require("imprint.chat.ui")
local keymaps = require("imprint.chat.keymaps")

local M = {}

local function send()
  local buf = state.input_buf
  local text = vim.trim(table.concat(api.nvim_buf_get_lines(buf, 0, -1, false), "\n"))
  if text == "" then
    return
  end
  if state.reply then
    vim.notify("imprint: a reply is still running; :ImprintCancel stops it", vim.log.levels.WARN)
    return
  end
  api.nvim_buf_set_lines(buf, 0, -1, false, { "" })
  local input_win = api.nvim_get_current_win()
  require("imprint.chat").ask(text)
  if api.nvim_win_is_valid(input_win) then
    api.nvim_set_current_win(input_win)
  end
end

local function input_buffer()
  if state.input_buf and api.nvim_buf_is_valid(state.input_buf) then
    return state.input_buf
  end
  local buf = api.nvim_create_buf(false, true)
  api.nvim_buf_set_name(buf, "imprint://input")
  vim.bo[buf].buftype = "nofile"
  vim.bo[buf].bufhidden = "hide"
  vim.bo[buf].swapfile = false
  vim.bo[buf].filetype = "markdown"
  keymaps.input(buf, send)
  state.input_buf = buf
  return buf
end

--- Open (or focus) the input area under the chat and start insert mode.
function M.open()
  local chat_win = ui.open()
  local buf = input_buffer()
  if not ui.shows(state.input_win, buf) then
    local height = config.options.window.input_height
    if api.nvim_win_get_config(chat_win).relative ~= "" then
      local chat = api.nvim_win_get_config(chat_win)
      state.input_win = api.nvim_open_win(buf, true, {
        relative = "editor", width = chat.width, height = height, border = config.options.window.border,
        row = chat.row + chat.height + 2, col = chat.col, title = " Ask ", title_pos = "left",
      })
    else
      state.input_win = api.nvim_open_win(buf, true, { split = "below", win = chat_win, height = height })
    end
    vim.wo[state.input_win].winbar = "%#ImprintWinbar#Ask Imprint (" ..
      (config.options.keymaps.send.n or "") .. " / " .. (config.options.keymaps.send.i or "") .. " sends)"
    vim.wo[state.input_win].wrap = true
    -- The input area keeps its buffer: a quickfix jump made from it opens the file elsewhere.
    vim.wo[state.input_win].winfixbuf = true
  end
  api.nvim_set_current_win(state.input_win)
  vim.cmd("startinsert!")
end

--- A question with lines of a buffer as context: a fenced block naming the file and lines.
function M.with_selection(question, buf, first, last)
  local lines = api.nvim_buf_get_lines(buf, first - 1, last, false)
  local name = api.nvim_buf_get_name(buf)
  name = name ~= "" and vim.fn.fnamemodify(name, ":.") or "[No Name]"
  local fence = "```"
  for _, line in ipairs(lines) do
    while line:find(fence, 1, true) do
      fence = fence .. "`"
    end
  end
  local where = first == last and ("line %d"):format(first) or ("lines %d-%d"):format(first, last)
  local parts = { question, "", ("`%s` %s:"):format(name, where), fence .. (vim.bo[buf].filetype or "") }
  vim.list_extend(parts, lines)
  parts[#parts + 1] = fence
  return table.concat(parts, "\n")
end

return M
