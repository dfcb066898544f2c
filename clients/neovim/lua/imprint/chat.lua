--- The chat buffer: one markdown transcript ("## You" / "## Imprint"), the streamed reply,
--- thinking (preamble) and summary blocks as closed folds, tool steps as virtual lines,
--- progress in the winbar, sources that open with <CR>/gd, and the input area.
local api = vim.api
local config = require("imprint.config")
local client = require("imprint.client")

local M = {}

M.ns_tools = api.nvim_create_namespace("imprint_tools")
M.ns_blocks = api.nvim_create_namespace("imprint_blocks")
M.ns_marks = api.nvim_create_namespace("imprint_marks")
M.ns_hl = api.nvim_create_namespace("imprint_highlights")

local THINKING_HEAD = "> **Thinking**"
local CANCELLED = "_Cancelled._"
local STEP_ICONS = { started = "⋯", finished = "✓", failed = "✗" }
local STEP_HL = { started = "ImprintToolRunning", finished = "ImprintToolDone", failed = "ImprintToolFailed" }

--- What the chat holds. `reply` is the reply in flight, nil when idle.
local state = {
  buf = nil, ---@type integer|nil
  win = nil, ---@type integer|nil
  input_buf = nil, ---@type integer|nil
  input_win = nil, ---@type integer|nil
  session_id = nil, ---@type string|nil
  title = nil, ---@type string|nil
  workspace = nil, ---@type string|nil  the folder source paths are relative to
  reply = nil, ---@type table|nil
  last_sources = nil, ---@type table|nil  { sources = {...}, workspace = "..." }
  progress = nil, ---@type string|nil
  cancelled = {}, ---@type table<string, true>  reply ids whose late notifications are dropped
}
M._state = state

-- Highlights ---------------------------------------------------------------------------------

function M.define_highlights()
  local links = {
    ImprintThinking = "Comment",
    ImprintSummary = "Comment",
    ImprintToolRunning = "DiagnosticInfo",
    ImprintToolDone = "DiagnosticOk",
    ImprintToolFailed = "DiagnosticError",
    ImprintCancelled = "WarningMsg",
    ImprintError = "ErrorMsg",
    ImprintWinbar = "WinBar",
  }
  for name, target in pairs(links) do
    api.nvim_set_hl(0, name, { link = target, default = true })
  end
end

-- Folds: thinking and summary blocks ---------------------------------------------------------
-- A block is an extmark in ns_blocks (its highlight and its extent) and a closed manual fold
-- in each chat window. Manual folds cost nothing per edit (an expression fold would be
-- evaluated on every streamed delta), move with the lines around them, and can be made in
-- Insert mode, where Neovim updates no computed folds.

--- Fold rows `first`..`last` (0-based) closed in window `win`.
local function fold_rows(win, first, last)
  api.nvim_win_call(win, function()
    vim.cmd(("%d,%dfold"):format(first + 1, last + 1))
  end)
end

--- Mark `lines` (already in the buffer at `first_row`) as a block: highlighted, folded.
local function add_block(buf, first_row, lines, hl)
  local last_row = first_row + #lines - 1
  api.nvim_buf_set_extmark(buf, M.ns_blocks, first_row, 0, {
    end_row = last_row, end_col = #lines[#lines], hl_group = hl, hl_eol = true,
    right_gravity = false, end_right_gravity = true,
  })
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    fold_rows(win, first_row, last_row)
  end
end

--- Make a window's folds again from the blocks (a window opened on the chat buffer).
local function restore_folds(win, buf)
  api.nvim_win_call(win, function()
    vim.cmd("normal! zE")
  end)
  for _, mark in ipairs(api.nvim_buf_get_extmarks(buf, M.ns_blocks, 0, -1, { details = true })) do
    fold_rows(win, mark[2], mark[4].end_row)
  end
end

-- Buffer and windows -------------------------------------------------------------------------

local function set_keys(buf, modes, keys, fn, desc)
  if not keys then
    return
  end
  for _, key in ipairs(type(keys) == "table" and keys or { keys }) do
    vim.keymap.set(modes, key, fn, { buffer = buf, nowait = true, silent = true, desc = desc })
  end
end

local function chat_keymaps(buf)
  local keys = config.options.keymaps
  set_keys(buf, "n", keys.input, M.open_input, "Imprint: write a question")
  set_keys(buf, { "n", "i" }, keys.cancel, M.cancel, "Imprint: cancel the reply")
  set_keys(buf, "n", keys.open_source, M.open_source_at_cursor, "Imprint: open the source under the cursor")
  set_keys(buf, "n", keys.close, M.close, "Imprint: close the chat")
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
  chat_keymaps(buf)
  state.buf = buf
  return buf
end

local function size(value, total)
  if value <= 1 then
    return math.max(1, math.floor(total * value))
  end
  return math.floor(value)
end

local function winbar_text()
  local text = "Imprint"
  if state.title and state.title ~= "" then
    text = text .. " · " .. state.title
  end
  if state.progress then
    text = text .. " · " .. state.progress
  elseif state.reply then
    text = text .. " · answering…"
  end
  return "%#ImprintWinbar#" .. text:gsub("%%", "%%%%")
end

local function update_winbar()
  if state.win and api.nvim_win_is_valid(state.win) then
    vim.wo[state.win].winbar = winbar_text()
  end
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
  wo.winbar = winbar_text()
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
  if state.win and api.nvim_win_is_valid(state.win) and api.nvim_win_get_buf(state.win) == buf then
    api.nvim_set_current_win(state.win)
    return state.win
  end
  state.win = open_window(buf)
  style_window(state.win)
  restore_folds(state.win, buf)
  M.scroll_to_end()
  return state.win
end

function M.close()
  for _, win in ipairs({ state.input_win, state.win }) do
    if win and api.nvim_win_is_valid(win) and #api.nvim_list_wins() > 1 then
      api.nvim_win_close(win, false)
    end
  end
  state.input_win, state.win = nil, nil
end

--- The line the chat window's cursor was last put on by following the reply.
local followed_line = 0

local function chat_window()
  local win = state.win
  if win and api.nvim_win_is_valid(win) and api.nvim_win_get_buf(win) == state.buf then
    return win
  end
  return nil
end

function M.scroll_to_end()
  local win = chat_window()
  if win then
    followed_line = api.nvim_buf_line_count(state.buf)
    api.nvim_win_set_cursor(win, { followed_line, 0 })
  end
end

--- Keep the end of the reply in view, unless the user moved up in the chat to read.
local function follow()
  local win = chat_window()
  if win and (api.nvim_get_current_win() ~= win or api.nvim_win_get_cursor(win)[1] >= followed_line) then
    M.scroll_to_end()
  end
end

local scroll_pending = false

--- Follow the end of a streaming reply once per batch of notifications, not per delta.
local function schedule_scroll()
  if scroll_pending then
    return
  end
  scroll_pending = true
  vim.schedule(function()
    scroll_pending = false
    follow()
  end)
end

local function quoted(head, text_lines)
  local lines = { head }
  for _, line in ipairs(text_lines) do
    lines[#lines + 1] = line == "" and ">" or "> " .. line
  end
  return lines
end

-- Editing ------------------------------------------------------------------------------------

--- Run `fn` with the chat buffer modifiable, restoring the lock afterwards.
local function edit(fn)
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

local function is_empty(buf)
  return api.nvim_buf_line_count(buf) == 1 and api.nvim_buf_get_lines(buf, 0, 1, false)[1] == ""
end

--- Append lines at the end of the buffer; returns the row of the first.
local function append(buf, lines)
  if is_empty(buf) then
    api.nvim_buf_set_lines(buf, 0, -1, false, lines)
    return 0
  end
  local count = api.nvim_buf_line_count(buf)
  api.nvim_buf_set_lines(buf, count, count, false, lines)
  return count
end

local function split_lines(text)
  return vim.split(text, "\n", { plain = true })
end

local function mark_row(buf, id)
  return api.nvim_buf_get_extmark_by_id(buf, M.ns_marks, id, {})[1]
end

--- Clear the transcript (a new chat).
function M.clear()
  local buf = M.buffer()
  edit(function()
    api.nvim_buf_set_lines(buf, 0, -1, false, {})
  end)
  for _, ns in ipairs({ M.ns_tools, M.ns_blocks, M.ns_marks, M.ns_hl }) do
    api.nvim_buf_clear_namespace(buf, ns, 0, -1)
  end
  state.session_id, state.title, state.last_sources, state.workspace = nil, nil, nil, nil
  update_winbar()
end

-- The reply in flight ------------------------------------------------------------------------

--- Write the question and the empty answer; returns the reply's state.
local function begin_exchange(question)
  local buf = M.buffer()
  local lines = is_empty(buf) and {} or { "" }
  vim.list_extend(lines, { "## You", "" })
  vim.list_extend(lines, split_lines(question))
  vim.list_extend(lines, { "", "## Imprint", "", "" })
  local reply
  edit(function()
    local first = append(buf, lines)
    local row = first + #lines - 1
    reply = {
      part = 0,
      row = row, -- where the next delta goes
      col = 0,
      has_text = false, -- whether the current part has text
      steps = {}, -- callId -> extmark id
      exchange_mark = api.nvim_buf_set_extmark(buf, M.ns_marks, first + (lines[1] == "" and 1 or 0), 0, {}),
      part_mark = api.nvim_buf_set_extmark(buf, M.ns_marks, row, 0, { right_gravity = false }),
      workspace = state.workspace or client.root_dir(),
    }
  end)
  -- The buffer stays modifiable while the reply streams: one edit per delta, no toggling.
  vim.bo[buf].modifiable = true
  return reply
end

--- Whether a notification belongs to the reply in flight (the first one names it).
local function adopt(reply, params)
  if reply == nil then
    return false
  end
  if reply.reply_id == nil then
    if state.cancelled[params.replyId] then
      return false
    end
    reply.reply_id, reply.session_id = params.replyId, params.sessionId
    state.session_id = params.sessionId
    return true
  end
  return params.replyId == reply.reply_id
end

--- Find where the reply's text ends when the buffer was edited under it.
local function resync(reply)
  local buf = state.buf
  reply.row = api.nvim_buf_line_count(buf) - 1
  reply.col = #api.nvim_buf_get_lines(buf, reply.row, reply.row + 1, false)[1]
end

local one_line = {}

--- imprint/replyDelta: append the text at the end with one nvim_buf_set_text.
function M.on_delta(params)
  local reply = state.reply
  if not adopt(reply, params) then
    return
  end
  local part = params.part or 0
  if part ~= reply.part then
    reply.part, reply.has_text = part, false
  end
  local text = params.text
  local lines
  if text:find("\n", 1, true) then
    lines = split_lines(text)
  else
    one_line[1] = text
    lines = one_line
  end
  local buf = state.buf
  if not pcall(api.nvim_buf_set_text, buf, reply.row, reply.col, reply.row, reply.col, lines) then
    resync(reply) -- the transcript was edited under the reply: append at its end
    api.nvim_buf_set_text(buf, reply.row, reply.col, reply.row, reply.col, lines)
  end
  if #lines == 1 then
    reply.col = reply.col + #text
  else
    reply.row = reply.row + #lines - 1
    reply.col = #lines[#lines]
  end
  reply.has_text = true
  schedule_scroll()
end

--- imprint/replyPreamble: the part's text was not the answer; it becomes a folded
--- "Thinking" block and later text starts after it.
function M.on_preamble(params)
  local reply = state.reply
  if not adopt(reply, params) or params.part ~= reply.part then
    return
  end
  local buf = state.buf
  local first = mark_row(buf, reply.part_mark)
  local text_lines = api.nvim_buf_get_lines(buf, first, reply.row + 1, false)
  local block = quoted(THINKING_HEAD, text_lines)
  local replacement = vim.list_extend(vim.list_extend({}, block), { "", "" })
  api.nvim_buf_set_lines(buf, first, reply.row + 1, false, replacement)
  add_block(buf, first, block, "ImprintThinking")
  reply.row, reply.col = first + #replacement - 1, 0
  api.nvim_buf_set_extmark(buf, M.ns_marks, reply.row, 0, { id = reply.part_mark, right_gravity = false })
  reply.part, reply.has_text = params.part + 1, false
end

local function step_line(state_name, title, detail)
  local text = ("  %s %s"):format(STEP_ICONS[state_name] or "•", title)
  if detail and detail ~= "" then
    text = text .. " — " .. detail
  end
  return { { { text, STEP_HL[state_name] or "ImprintToolRunning" } } }
end

--- imprint/toolStep: a virtual line per call, updated as its state changes.
function M.on_tool_step(params)
  local reply = state.reply
  if not adopt(reply, params) then
    return
  end
  local buf = state.buf
  local lines = step_line(params.state, params.title, params.detail)
  local id = reply.steps[params.callId]
  local row, above
  if id then
    local pos = api.nvim_buf_get_extmark_by_id(buf, M.ns_tools, id, { details = true })
    row, above = pos[1], pos[3] and pos[3].virt_lines_above
  else
    -- Before the text still to come when the current line is empty, else below the text so far.
    row, above = reply.row, reply.col == 0
  end
  reply.steps[params.callId] = api.nvim_buf_set_extmark(buf, M.ns_tools, row, 0, {
    id = id, virt_lines = lines, virt_lines_above = above, right_gravity = false,
  })
end

--- imprint/summaryUpdated: a folded summary divider above the current question.
function M.on_summary(params)
  local reply = state.reply
  if not adopt(reply, params) then
    return
  end
  local buf = state.buf
  local summary = params.summary
  local at = mark_row(buf, reply.exchange_mark)
  local head = ("> **Summary of messages #%d–#%d**"):format(summary.firstSeq, summary.lastSeq)
  local block = quoted(head, split_lines(summary.text))
  api.nvim_buf_set_lines(buf, at, at, false, vim.list_extend(vim.list_extend({}, block), { "" }))
  add_block(buf, at, block, "ImprintSummary")
  reply.row = reply.row + #block + 1
end

--- $/progress of our client: shown in the chat window's winbar.
function M.on_progress(params)
  local value = params.value or {}
  if value.kind == "end" then
    state.progress = nil
  else
    local message = value.message or value.title or ""
    if value.percentage then
      message = ("%s (%d%%)"):format(message, value.percentage)
    end
    state.progress = message
  end
  update_winbar()
end

local function finish(reply, status, err)
  if state.reply ~= reply then
    return
  end
  state.reply = nil
  state.progress = nil
  vim.bo[state.buf].modifiable = false
  update_winbar()
  follow()
  api.nvim_exec_autocmds("User", {
    pattern = "ImprintReplyDone",
    modeline = false,
    data = { status = status, sessionId = reply.session_id, replyId = reply.reply_id, error = err },
  })
end

local function on_result(reply, err, result)
  if state.reply ~= reply then
    return -- cancelled meanwhile: the plugin closed it out already
  end
  local buf = state.buf
  if err then
    local message = type(err) == "table" and (err.message or vim.inspect(err)) or tostring(err)
    local lines = reply.has_text and { "", "", "> **Error:** " .. message } or { "> **Error:** " .. message }
    pcall(api.nvim_buf_set_text, buf, reply.row, reply.col, reply.row, reply.col, lines)
    api.nvim_buf_set_extmark(buf, M.ns_hl, reply.row + #lines - 1, 0,
      { end_col = #lines[#lines], hl_group = "ImprintError" })
    finish(reply, "error", message)
    return
  end
  -- The result's text is the answer: it replaces whatever streamed since the last preamble.
  local first = mark_row(buf, reply.part_mark)
  api.nvim_buf_set_lines(buf, first, -1, false, split_lines(result.text))
  reply.session_id, reply.reply_id = result.sessionId, result.replyId
  state.session_id = result.sessionId
  if #result.sources > 0 then
    state.last_sources = { sources = result.sources, workspace = reply.workspace }
  end
  finish(reply, "done")
end

--- Ask `question` in the current session (a new one when none is open).
--- @return boolean sent
function M.ask(question)
  if question == nil or vim.trim(question) == "" then
    vim.notify("imprint: the question is empty", vim.log.levels.WARN)
    return false
  end
  if state.reply then
    vim.notify("imprint: a reply is still running; :ImprintCancel stops it", vim.log.levels.WARN)
    return false
  end
  M.open()
  local reply = begin_exchange(question)
  state.reply = reply
  M.scroll_to_end() -- a new question shows its answer
  if not state.title then
    state.title = question:match("^[^\n]*"):sub(1, 60)
  end
  update_winbar()
  local params = { text = question, style = config.options.style, persist = config.options.persist,
    sessionId = state.session_id }
  client.request("imprint/chat", params, function(err, result)
    on_result(reply, err, result)
  end, function(request_id)
    reply.request_id = request_id
    if reply.cancelled then
      client.cancel(request_id)
    end
  end)
  return true
end

--- Cancel the reply in flight. Neovim never calls the callback of a cancelled request, so the
--- chat closes the reply out itself.
--- @return boolean cancelled
function M.cancel()
  local reply = state.reply
  if not reply then
    vim.notify("imprint: no reply is running", vim.log.levels.INFO)
    return false
  end
  reply.cancelled = true
  client.cancel(reply.request_id)
  if reply.reply_id then
    state.cancelled[reply.reply_id] = true
  end
  local buf = state.buf
  local lines = reply.has_text and { "", "", CANCELLED } or { CANCELLED }
  if not pcall(api.nvim_buf_set_text, buf, reply.row, reply.col, reply.row, reply.col, lines) then
    resync(reply)
    api.nvim_buf_set_text(buf, reply.row, reply.col, reply.row, reply.col, lines)
  end
  local row = reply.row + #lines - 1
  api.nvim_buf_set_extmark(buf, M.ns_hl, row, 0, { end_col = #CANCELLED, hl_group = "ImprintCancelled" })
  finish(reply, "cancelled")
  return true
end

--- The daemon exited: close out a reply in flight so the next question works.
function M.on_daemon_exit(code, signal)
  local reply = state.reply
  if reply then
    on_result(reply, { message = ("the daemon exited (code %d, signal %d); :ImprintLog shows why")
      :format(code or -1, signal or 0) })
  end
end

--- Whether no reply is in flight.
function M.idle()
  return state.reply == nil
end

-- Sessions -----------------------------------------------------------------------------------

local TOOL_TITLES = {
  search = function(args) return ("Searching the workspace for “%s”"):format(args.query or "") end,
  read_file = function(args) return "Reading " .. (args.path or "") end,
  conversation_history = function(args)
    return args.query and ("Searching earlier in this conversation for “%s”"):format(args.query)
      or ("Reading message #%s"):format(tostring(args.message or "?"))
  end,
}

local function tool_title(call)
  local title = TOOL_TITLES[call.name]
  local args = type(call.arguments) == "table" and call.arguments or {}
  return title and title(args) or (call.name .. " " .. vim.json.encode(call.arguments or vim.empty_dict()))
end

--- The transcript of a stored session: lines, folded blocks and tool steps to place.
--- Exposed for the benchmark.
function M.render_session(messages, summary)
  local lines, blocks, steps = {}, {}, {}
  local function add(new)
    for _, line in ipairs(new) do
      lines[#lines + 1] = line
    end
  end
  local function add_quoted(head, text, hl)
    local block = quoted(head, split_lines(text))
    blocks[#blocks + 1] = { row = #lines, lines = block, hl = hl }
    add(block)
    add({ "" })
  end
  -- How each call ended, from its stored result. A repeated call was answered from before
  -- and, as in the live reply, is no step of its own.
  local results = {} -- toolCallId -> "finished" | "failed" | "repeat"
  for _, m in ipairs(messages) do
    if m.role == "tool" and m.toolCallId then
      results[m.toolCallId] = vim.startswith(m.content, "(Same call as before") and "repeat"
        or vim.startswith(m.content, "Error:") and "failed" or "finished"
    end
  end
  local last_role
  local summary_placed = summary == nil or summary == vim.NIL
  for _, m in ipairs(messages) do
    if not summary_placed and m.seq > summary.lastSeq then
      if #lines > 0 then
        add({ "" })
      end
      add_quoted(("> **Summary of messages #%d–#%d**"):format(summary.firstSeq, summary.lastSeq), summary.text,
        "ImprintSummary")
      summary_placed = true
      last_role = nil
    end
    if m.role == "user" then
      if last_role == "user" then
        add({ "", "## Imprint", "", CANCELLED })
      end
      if #lines > 0 and lines[#lines] ~= "" then
        add({ "" })
      end
      add({ "## You", "" })
      add(split_lines(m.content))
      last_role = "user"
    elseif m.role == "assistant" then
      if last_role ~= "assistant" then
        add({ "", "## Imprint", "" })
      end
      local calls = m.toolCalls or {}
      if #calls > 0 then
        if m.content ~= "" then
          add_quoted(THINKING_HEAD, m.content, "ImprintThinking")
        end
        for _, call in ipairs(calls) do
          local outcome = results[call.id] or "finished"
          if outcome ~= "repeat" then
            steps[#steps + 1] = { row = #lines, state = outcome, title = tool_title(call) }
          end
        end
      else
        add(split_lines(m.content))
      end
      last_role = "assistant"
    end
  end
  if last_role == "user" then
    add({ "", "## Imprint", "", CANCELLED })
  end
  return lines, blocks, steps
end

--- Show a stored session (an `imprint/session` result) in the chat buffer.
function M.show_session(result)
  if state.reply then
    M.cancel()
  end
  M.clear()
  local buf = M.buffer()
  local lines, blocks, steps = M.render_session(result.messages, result.summary)
  edit(function()
    api.nvim_buf_set_lines(buf, 0, -1, false, lines)
    for _, block in ipairs(blocks) do
      add_block(buf, block.row, block.lines, block.hl)
    end
  end)
  local last = #lines - 1
  for _, step in ipairs(steps) do
    api.nvim_buf_set_extmark(buf, M.ns_tools, math.min(step.row, last), 0, {
      virt_lines = step_line(step.state, step.title), virt_lines_above = step.row <= last,
      right_gravity = false,
    })
  end
  local session = result.session
  state.session_id = session.sessionId
  state.title = session.title
  state.workspace = session.workspace ~= vim.NIL and session.workspace or nil
  M.open()
  update_winbar()
  M.scroll_to_end()
end

--- The session open in the chat, or nil.
function M.session_id()
  return state.session_id
end

-- Sources ------------------------------------------------------------------------------------

local function resolve(path, workspace)
  if path:sub(1, 1) == "/" then
    return path
  end
  return vim.fs.joinpath(workspace or state.workspace or client.root_dir(), path)
end

--- The source a Sources line names: "[n] path:start-end (label)" or "[n] path:start (label)".
local function parse_source_line(line)
  local number, path, start, finish_line = line:match("^%[(%d+)%]%s+(.-):(%d+)%-(%d+)")
  if not number then
    number, path, start = line:match("^%[(%d+)%]%s+(.-):(%d+)")
  end
  if not number then
    return nil
  end
  return { number = tonumber(number), path = path, startLine = tonumber(start),
    endLine = tonumber(finish_line or start), label = line:match("%((.-)%)%s*$") or path }
end

--- The citation "[n]" under the cursor column, if any.
local function citation_at(line, col)
  local from = 1
  while true do
    local s, e, number = line:find("%[(%d+)%]", from)
    if not s then
      return nil
    end
    if col + 1 >= s and col + 1 <= e then
      return tonumber(number)
    end
    from = e + 1
  end
end

--- The source under the cursor: on a Sources line, or a "[n]" citation whose Sources line
--- follows in the same reply.
function M.source_at_cursor()
  local buf = M.buffer()
  local row, col = unpack(api.nvim_win_get_cursor(0))
  local line = api.nvim_buf_get_lines(buf, row - 1, row, false)[1] or ""
  local source = parse_source_line(line)
  if source then
    return source
  end
  local number = citation_at(line, col)
  if not number then
    return nil
  end
  local rest = api.nvim_buf_get_lines(buf, row, -1, false)
  for _, later in ipairs(rest) do
    if later == "## You" then
      break
    end
    local found = parse_source_line(later)
    if found and found.number == number then
      return found
    end
  end
  return nil
end

--- Open a source's file at its line in a window other than the chat.
function M.open_source(source, workspace)
  local path = resolve(source.path, workspace)
  local target
  for _, win in ipairs(api.nvim_tabpage_list_wins(0)) do
    local cfg = api.nvim_win_get_config(win)
    if win ~= state.win and win ~= state.input_win and cfg.relative == "" then
      target = win
      break
    end
  end
  if target then
    api.nvim_set_current_win(target)
  else
    vim.cmd("leftabove vsplit")
  end
  vim.cmd.edit(vim.fn.fnameescape(path))
  local last = api.nvim_buf_line_count(0)
  api.nvim_win_set_cursor(0, { math.min(source.startLine, last), 0 })
  vim.cmd("normal! zz")
end

function M.open_source_at_cursor()
  local source = M.source_at_cursor()
  if not source then
    vim.notify("imprint: no source under the cursor (a Sources line or a [n] citation)", vim.log.levels.INFO)
    return
  end
  M.open_source(source)
end

--- The sources of the latest answer: the result's when it came in this chat, else the
--- last Sources list in the transcript.
function M.latest_sources()
  if state.last_sources then
    return state.last_sources.sources, state.last_sources.workspace
  end
  local lines = api.nvim_buf_get_lines(M.buffer(), 0, -1, false)
  local found = {}
  for index = #lines, 1, -1 do
    local source = parse_source_line(lines[index])
    if source then
      table.insert(found, 1, source)
    elseif #found > 0 then
      break
    end
  end
  return found, state.workspace
end

--- Fill the quickfix list with the latest answer's sources.
function M.sources_to_quickfix()
  local sources, workspace = M.latest_sources()
  if #sources == 0 then
    vim.notify("imprint: the chat has no sources yet (answers after research list them)", vim.log.levels.INFO)
    return false
  end
  local items = {}
  for _, source in ipairs(sources) do
    items[#items + 1] = { filename = resolve(source.path, workspace), lnum = source.startLine,
      end_lnum = source.endLine, text = ("[%d] %s"):format(source.number, source.label) }
  end
  vim.fn.setqflist({}, " ", { title = "Imprint sources", items = items })
  vim.cmd("botright copen")
  return true
end

-- Input area ---------------------------------------------------------------------------------

local function send_input()
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
  M.ask(text)
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
  local keys = config.options.keymaps
  set_keys(buf, "n", keys.send.n, send_input, "Imprint: send the question")
  set_keys(buf, "i", keys.send.i, send_input, "Imprint: send the question")
  set_keys(buf, { "n", "i" }, keys.cancel, M.cancel, "Imprint: cancel the reply")
  set_keys(buf, "n", keys.close, M.close, "Imprint: close the chat")
  state.input_buf = buf
  return buf
end

--- Open (or focus) the input area under the chat and start insert mode.
function M.open_input()
  local chat_win = M.open()
  local buf = input_buffer()
  if not (state.input_win and api.nvim_win_is_valid(state.input_win)) then
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
