--- The reply in flight: the question and an empty answer written at the end, the daemon's
--- notifications for that reply (deltas appended with one nvim_buf_set_text each, a preamble
--- part turned into a folded thinking block, a reasoning model's thoughts gathered while the
--- winbar says "Thinking…" and written as a folded thinking block before the text they led to,
--- tool steps, a summary divider, progress), and its
--- end: the result's text in place of what streamed, an error, or a cancel the plugin closes
--- out itself.
local api = vim.api
local config = require("imprint.config")
local client = require("imprint.client")
local state = require("imprint.chat.state")
local ui = require("imprint.chat.ui")
local folds = require("imprint.chat.folds")
local steps = require("imprint.chat.steps")

local ns = state.ns
local split_lines = ui.split_lines

local M = {}

local function mark_row(buf, id)
  return api.nvim_buf_get_extmark_by_id(buf, ns.marks, id, {})[1]
end

--- Write the question and the empty answer; returns the reply's state.
local function begin_exchange(question)
  local buf = ui.buffer()
  local lines = ui.is_empty(buf) and {} or { "" }
  vim.list_extend(lines, { "## You", "" })
  vim.list_extend(lines, split_lines(question))
  vim.list_extend(lines, { "", "## Imprint", "", "" })
  local reply
  ui.edit(function()
    local first = ui.append(buf, lines)
    local row = first + #lines - 1
    reply = {
      part = 0,
      row = row, -- where the next delta goes
      col = 0,
      has_text = false, -- whether the current part has text
      thought = {}, -- the current part's reasoning, in pieces, not yet written
      steps = {}, -- callId -> { group = the round's steps, index = its line in them }
      group = nil, -- the steps of the current round
      exchange_mark = api.nvim_buf_set_extmark(buf, ns.marks, first + (lines[1] == "" and 1 or 0), 0, {}),
      part_mark = api.nvim_buf_set_extmark(buf, ns.marks, row, 0, { right_gravity = false }),
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

--- Write the part's reasoning gathered so far as a folded thinking block where the part
--- begins (before its text, which has not come yet) and move the part's start after it.
local function write_thought(reply)
  if #reply.thought == 0 then
    return
  end
  local text = table.concat(reply.thought)
  reply.thought = {}
  if vim.trim(text) == "" then
    return
  end
  local buf = state.buf
  local first = mark_row(buf, reply.part_mark)
  local block = folds.quoted(state.THINKING_HEAD, split_lines(vim.trim(text)))
  api.nvim_buf_set_lines(buf, first, first, false, vim.list_extend(vim.list_extend({}, block), { "" }))
  folds.add(buf, first, block, "ImprintThinking")
  reply.row = reply.row + #block + 1
  api.nvim_buf_set_extmark(buf, ns.marks, first + #block + 1, 0, { id = reply.part_mark, right_gravity = false })
end

--- A notification of part `part` came: the reply's current part is that one.
local function to_part(reply, part)
  if part ~= reply.part then
    write_thought(reply)
    reply.part, reply.has_text = part, false
  end
end

--- imprint/replyReasoning: what a reasoning model thinks before it writes. Gathered, with
--- "Thinking…" in the winbar, and written folded once the part's text, tool steps, preamble
--- or the result come: a closed fold shows nothing of it while it grows.
function M.on_reasoning(params)
  local reply = state.reply
  if not adopt(reply, params) then
    return
  end
  to_part(reply, params.part or 0)
  reply.thought[#reply.thought + 1] = params.text
  if state.progress ~= state.THINKING then
    state.progress = state.THINKING
    ui.update_winbar()
  end
end

--- imprint/replyDelta: append the text at the end with one nvim_buf_set_text.
function M.on_delta(params)
  local reply = state.reply
  if not adopt(reply, params) then
    return
  end
  to_part(reply, params.part or 0)
  write_thought(reply)
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
  if state.progress then
    -- Text streams: the work the progress named (indexing, a tool step) is over.
    state.progress = nil
    ui.update_winbar()
  end
  ui.schedule_scroll()
end

--- imprint/replyPreamble: the part's text was not the answer; it becomes a folded
--- "Thinking" block and later text starts after it.
function M.on_preamble(params)
  local reply = state.reply
  if not adopt(reply, params) or params.part ~= reply.part then
    return
  end
  write_thought(reply)
  if not reply.has_text then
    -- A part that only thought (then called tools): its thoughts are folded already.
    reply.part = params.part + 1
    return
  end
  local buf = state.buf
  local first = mark_row(buf, reply.part_mark)
  local text_lines = api.nvim_buf_get_lines(buf, first, reply.row + 1, false)
  local block = folds.quoted(state.THINKING_HEAD, text_lines)
  local replacement = vim.list_extend(vim.list_extend({}, block), { "", "" })
  api.nvim_buf_set_lines(buf, first, reply.row + 1, false, replacement)
  folds.add(buf, first, block, "ImprintThinking")
  reply.row, reply.col = first + #replacement - 1, 0
  api.nvim_buf_set_extmark(buf, ns.marks, reply.row, 0, { id = reply.part_mark, right_gravity = false })
  reply.part, reply.has_text = params.part + 1, false
end

--- imprint/toolStep: a virtual line per call, updated as its state changes. A round's steps
--- come after its preamble, so they are shown under the blank line that ends that thinking
--- block (or the "## Imprint" heading): the next round's preamble folds the lines after it,
--- never that one.
function M.on_tool_step(params)
  local reply = state.reply
  if not adopt(reply, params) then
    return
  end
  write_thought(reply)
  local buf = state.buf
  local line = steps.line(params.state, require("imprint.permissions").step_title(params.tool, params.title),
    params.detail)
  local known = reply.steps[params.callId]
  if known then
    known.group.lines[known.index] = line
    steps.show(buf, known.group)
    return
  end
  local group = reply.group
  if not group or group.part ~= reply.part then
    if reply.has_text then
      -- Text of this part came first: below it (above the empty line it ended with).
      group = steps.group(reply.row, reply.col == 0)
    else
      group = steps.group(mark_row(buf, reply.part_mark) - 1, false)
    end
    group.part = reply.part
    reply.group = group
  end
  group.lines[#group.lines + 1] = line
  reply.steps[params.callId] = { group = group, index = #group.lines }
  steps.show(buf, group)
end

--- imprint/summaryUpdated: a folded summary divider above the current question.
function M.on_summary(params)
  if state.compacting[params.sessionId] then
    return -- :ImprintCompact's summary, no reply's: the session is shown again once it is stored
  end
  local reply = state.reply
  if not adopt(reply, params) then
    return
  end
  local buf = state.buf
  local summary = params.summary
  local at = mark_row(buf, reply.exchange_mark)
  local head = ("> **Summary of messages #%d–#%d**"):format(summary.firstSeq, summary.lastSeq)
  local block = folds.quoted(head, split_lines(summary.text))
  api.nvim_buf_set_lines(buf, at, at, false, vim.list_extend(vim.list_extend({}, block), { "" }))
  folds.add(buf, at, block, "ImprintSummary")
  reply.row = reply.row + #block + 1
end

--- imprint/contextUsage: what fills the context of the reply's latest round (the winbar's
--- share). It comes before the round's request goes to the model, so it also names a new
--- session before any text does.
function M.on_context_usage(params)
  if not adopt(state.reply, params) then
    return
  end
  state.context = params
  ui.update_winbar()
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
  ui.update_winbar()
end

local function finish(reply, status, err)
  if state.reply ~= reply then
    return
  end
  state.reply = nil
  state.progress = nil
  vim.bo[state.buf].modifiable = false
  ui.update_winbar()
  ui.follow()
  api.nvim_exec_autocmds("User", {
    pattern = "ImprintReplyDone",
    modeline = false,
    data = { status = status, sessionId = reply.session_id, replyId = reply.reply_id, error = err },
  })
  -- The winbar's share: what the next question would get, no longer this reply's last round.
  require("imprint.chat.context").refresh(state.session_id)
end

local function on_result(reply, err, result)
  if state.reply ~= reply then
    return -- cancelled meanwhile: the plugin closed it out already
  end
  local buf = state.buf
  write_thought(reply)
  if err then
    local message = type(err) == "table" and (err.message or vim.inspect(err)) or tostring(err)
    local lines = reply.has_text and { "", "", "> **Error:** " .. message } or { "> **Error:** " .. message }
    pcall(api.nvim_buf_set_text, buf, reply.row, reply.col, reply.row, reply.col, lines)
    api.nvim_buf_set_extmark(buf, ns.hl, reply.row + #lines - 1, 0,
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
    require("imprint.chat.sources").remember(buf, first, result.sources, reply.workspace)
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
  ui.open()
  local reply = begin_exchange(question)
  reply.question = question
  state.reply = reply
  ui.scroll_to_end() -- a new question shows its answer
  if not state.title then
    state.title = question:match("^[^\n]*") -- the winbar fits it to the window
  end
  ui.update_winbar()
  local function send()
    if reply.cancelled then
      return -- cancelled while the previous question's session was being found
    end
    reply.new_session = state.session_id == nil
    reply.sent_at = vim.uv.gettimeofday()
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
  end
  if state.recovering then
    table.insert(state.recovering, send) -- the question goes on in the session being found
  else
    send()
  end
  return true
end

--- The session a cancelled first question started, found in the daemon's list: it was never
--- named to the chat when the cancel came before any notification, yet the daemon stored the
--- question in it. A question asked meanwhile waits, so it goes on in that session.
local function recover_session(question, sent_at)
  local waiting = {}
  state.recovering = waiting
  local function done(session_id)
    if state.recovering ~= waiting then
      return -- the chat was cleared meanwhile
    end
    state.recovering = nil
    if session_id and state.session_id == nil then
      state.session_id = session_id
    end
    for _, send in ipairs(waiting) do
      send()
    end
  end
  client.request("imprint/sessions", vim.empty_dict(), function(err, result)
    local candidate
    for _, session in ipairs(not err and result.sessions or {}) do
      -- Newest first; a session holding just the question, started after it was sent.
      if session.messageCount == 1 and session.createdAt >= sent_at - 1 then
        candidate = session
        break
      end
    end
    if not candidate then
      return done(nil) -- the cancel came before the daemon stored anything
    end
    client.request("imprint/session", { sessionId = candidate.sessionId }, function(view_err, view)
      local first = not view_err and view.messages[1]
      done(first and first.role == "user" and first.content == question and candidate.sessionId or nil)
    end)
  end)
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
  write_thought(reply)
  if reply.reply_id then
    state.cancelled[reply.reply_id] = true
  end
  local buf = state.buf
  local lines = reply.has_text and { "", "", state.CANCELLED } or { state.CANCELLED }
  if not pcall(api.nvim_buf_set_text, buf, reply.row, reply.col, reply.row, reply.col, lines) then
    resync(reply)
    api.nvim_buf_set_text(buf, reply.row, reply.col, reply.row, reply.col, lines)
  end
  local row = reply.row + #lines - 1
  api.nvim_buf_set_extmark(buf, ns.hl, row, 0, { end_col = #state.CANCELLED, hl_group = "ImprintCancelled" })
  finish(reply, "cancelled")
  if reply.new_session and reply.session_id == nil then
    recover_session(reply.question, reply.sent_at)
  end
  return true
end

--- The daemon exited: close out a reply in flight so the next question works.
function M.on_daemon_exit(code, signal)
  state.compacting = {} -- a compaction the daemon did not answer is over too
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

return M
