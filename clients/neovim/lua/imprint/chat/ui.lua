--- The chat buffer and its window: the markdown buffer (locked between replies), the window in
--- the configured layout, its winbar (title and progress), and following the end of the reply.
local api = vim.api
local config = require("imprint.config")
local state = require("imprint.chat.state")
local folds = require("imprint.chat.folds")
local keymaps = require("imprint.chat.keymaps")

local M = {}

function M.define_highlights()
  local links = {
    ImprintThinking = "Comment",
    ImprintSummary = "Comment",
    ImprintToolRunning = "DiagnosticInfo",
    ImprintToolDone = "DiagnosticOk",
    ImprintToolFailed = "DiagnosticError",
    ImprintCancelled = "WarningMsg",
    ImprintError = "ErrorMsg",
    ImprintSourceUnsupported = "Comment",
    ImprintWinbar = "WinBar",
  }
  for name, target in pairs(links) do
    api.nvim_set_hl(0, name, { link = target, default = true })
  end
end

--- The chat buffer, created on first use.
function M.buffer()
  if state.buf and api.nvim_buf_is_valid(state.buf) then
    return state.buf
  end
  local buf = api.nvim_create_buf(false, true)
  api.nvim_buf_set_name(buf, "imprint://chat")
  vim.bo[buf].buftype = "nofile"
  vim.bo[buf].bufhidden = "hide"
  vim.bo[buf].swapfile = false
  vim.bo[buf].filetype = "markdown"
  vim.bo[buf].modifiable = false
  keymaps.chat(buf)
  state.buf = buf
  return buf
end

local function size(value, total)
  if value <= 1 then
    return math.max(1, math.floor(total * value))
  end
  return math.floor(value)
end

--- Whether `win` is open and still shows `buf` (a window the chat opened may show another
--- buffer since, and is then the user's).
function M.shows(win, buf)
  return win ~= nil and buf ~= nil and api.nvim_win_is_valid(win) and api.nvim_win_get_buf(win) == buf
end

local function escape(text)
  return (text:gsub("%%", "%%%%"))
end

--- `text` cut to at most `width` display cells, ending in "…" when cut.
local function clip(text, width)
  if vim.fn.strdisplaywidth(text) <= width then
    return text
  end
  local chars = vim.fn.strchars(text)
  while chars > 0 and vim.fn.strdisplaywidth(vim.fn.strcharpart(text, 0, chars)) > width - 1 do
    chars = chars - 1
  end
  return vim.fn.strcharpart(text, 0, chars) .. "…"
end

--- "Imprint · title · what happens now", and at the right "model · share of the context",
--- fitted to `width` cells. "Imprint" always shows; then what happens now, the context share
--- and the model, leaving the title at least a few cells; the title gets the rest. Should it
--- still not fit, Neovim cuts after "Imprint" (the %< mark).
local TITLE_LEAST = 12
local SEP = " · "

local function winbar_text(width)
  local head = "Imprint"
  local now = state.progress or (state.reply and "answering…") or nil
  local model = require("imprint.client").model
  local model_name = require("imprint.client").model_name(model)
  if model_name then
    -- A local model's detected chat format, and a mark when the model thinks first:
    -- "Qwen3-4B.gguf (qwen-xml, thinks)". A remote server parses calls itself ("openai"): not shown.
    local about = {}
    if type(model.chatFormat) == "string" and model.chatFormat ~= "openai" then
      about[#about + 1] = model.chatFormat
    end
    if model.reasons == true then
      about[#about + 1] = "thinks"
    end
    if #about > 0 then
      model_name = ("%s (%s)"):format(model_name, table.concat(about, ", "))
    end
  end
  local share = require("imprint.chat.context").share(state.context)
  local title = state.title ~= "" and state.title or nil
  local room = width - vim.fn.strdisplaywidth(head)
  local reserve = title and math.min(vim.fn.strdisplaywidth(title), TITLE_LEAST) + 3 or 0
  room = room - reserve
  --- `text` whole, or cut to no less than `least` cells, or nil when there is no room for it.
  local function take(text, least)
    if not text then
      return nil
    end
    local need = vim.fn.strdisplaywidth(text) + 3
    if need <= room then
      room = room - need
      return text
    end
    if room - 3 >= least then
      local cut = clip(text, room - 3)
      room = 0
      return cut
    end
    return nil
  end
  now = take(now, 8)
  share = take(share, vim.fn.strdisplaywidth(share or ""))
  model_name = take(model_name, 8)
  room = room + reserve
  title = take(title, 2)
  local left = (title and SEP .. title or "") .. (now and SEP .. now or "")
  local right = table.concat(vim.tbl_filter(function(part) return part ~= nil end, { model_name, share }), SEP)
  return "%#ImprintWinbar#" .. head .. "%<" .. escape(left) .. (right ~= "" and "%=" .. escape(right) .. " " or "")
end

function M.update_winbar()
  if M.shows(state.win, state.buf) then
    vim.wo[state.win].winbar = winbar_text(api.nvim_win_get_width(state.win))
  end
end

local resize_watched = false

--- Fit the winbar again when the chat window's width changes.
local function watch_resize()
  if resize_watched then
    return
  end
  resize_watched = true
  api.nvim_create_autocmd("WinResized", {
    group = api.nvim_create_augroup("imprint_chat_window", { clear = true }),
    callback = function()
      if state.win and vim.tbl_contains(vim.v.event.windows or {}, state.win) then
        M.update_winbar()
      end
    end,
  })
end

local function style_window(win)
  local wo = vim.wo[win]
  wo.wrap = true
  wo.linebreak = true
  wo.number = false
  wo.relativenumber = false
  wo.signcolumn = "no"
  wo.foldmethod = "manual"
  wo.foldenable = true
  -- The chat keeps its buffer: quickfix, :cnext and the like open files in another window.
  wo.winfixbuf = true
end

local function open_window(buf)
  local opts = config.options.window
  local layout = opts.layout
  if layout == "float" then
    local width = size(opts.width, vim.o.columns)
    local height = size(opts.height, vim.o.lines)
    return api.nvim_open_win(buf, true, {
      relative = "editor", width = width, height = height, border = opts.border,
      row = math.floor((vim.o.lines - height) / 2) - 1, col = math.floor((vim.o.columns - width) / 2),
      title = " Imprint ", title_pos = "center",
    })
  elseif layout == "tab" then
    vim.cmd("tab sbuffer " .. buf)
  elseif layout == "split" then
    vim.cmd(("botright %dsplit"):format(size(opts.height, vim.o.lines)))
    api.nvim_win_set_buf(0, buf)
  else
    vim.cmd(("botright vertical %dsplit"):format(size(opts.width, vim.o.columns)))
    api.nvim_win_set_buf(0, buf)
  end
  return api.nvim_get_current_win()
end

--- Open the chat window, or focus it when it is open.
function M.open()
  M.define_highlights()
  local buf = M.buffer()
  if M.shows(state.win, buf) then
    api.nvim_set_current_win(state.win)
    return state.win
  end
  state.win = open_window(buf)
  style_window(state.win)
  M.update_winbar()
  watch_resize()
  folds.restore(state.win, buf)
  M.scroll_to_end()
  return state.win
end

function M.close()
  for _, pair in ipairs({ { state.input_win, state.input_buf }, { state.win, state.buf } }) do
    if M.shows(pair[1], pair[2]) and #api.nvim_list_wins() > 1 then
      api.nvim_win_close(pair[1], false)
    end
  end
  state.input_win, state.win = nil, nil
end

--- The line the chat window's cursor was last put on by following the reply.
local followed_line = 0

local function chat_window()
  return M.shows(state.win, state.buf) and state.win or nil
end

function M.scroll_to_end()
  local win = chat_window()
  if win then
    followed_line = api.nvim_buf_line_count(state.buf)
    api.nvim_win_set_cursor(win, { followed_line, 0 })
  end
end

--- Keep the end of the reply in view, unless the user moved up in the chat to read.
function M.follow()
  local win = chat_window()
  if win and (api.nvim_get_current_win() ~= win or api.nvim_win_get_cursor(win)[1] >= followed_line) then
    M.scroll_to_end()
  end
end

local scroll_pending = false

--- Follow the end of a streaming reply once per batch of notifications, not per delta.
function M.schedule_scroll()
  if scroll_pending then
    return
  end
  scroll_pending = true
  vim.schedule(function()
    scroll_pending = false
    M.follow()
  end)
end

-- Editing ------------------------------------------------------------------------------------

--- Run `fn` with the chat buffer modifiable, restoring the lock afterwards.
function M.edit(fn)
  local buf = M.buffer()
  local locked = not vim.bo[buf].modifiable
  vim.bo[buf].modifiable = true
  local ok, err = pcall(fn, buf)
  if locked then
    vim.bo[buf].modifiable = false
  end
  if not ok then
    error(err, 0)
  end
end

function M.is_empty(buf)
  return api.nvim_buf_line_count(buf) == 1 and api.nvim_buf_get_lines(buf, 0, 1, false)[1] == ""
end

--- Append lines at the end of the buffer; returns the row of the first.
function M.append(buf, lines)
  if M.is_empty(buf) then
    api.nvim_buf_set_lines(buf, 0, -1, false, lines)
    return 0
  end
  local count = api.nvim_buf_line_count(buf)
  api.nvim_buf_set_lines(buf, count, count, false, lines)
  return count
end

function M.split_lines(text)
  return vim.split(text, "\n", { plain = true })
end

--- Clear the transcript (a new chat).
function M.clear()
  local buf = M.buffer()
  M.edit(function()
    api.nvim_buf_set_lines(buf, 0, -1, false, {})
  end)
  for _, id in pairs(state.ns) do
    api.nvim_buf_clear_namespace(buf, id, 0, -1)
  end
  state.session_id, state.title, state.last_sources, state.workspace = nil, nil, nil, nil
  state.context, state.answers = nil, {}
  local waiting = state.recovering
  state.recovering = nil -- a new chat: questions waiting for the old session start a new one
  for _, send in ipairs(waiting or {}) do
    send()
  end
  M.update_winbar()
end

return M
