--- What fills the model's context (imprint/contextUsage for the reply in flight, imprint/context
--- for the next question): its share in the winbar, and the breakdown in a float.
local api = vim.api
local client = require("imprint.client")
local state = require("imprint.chat.state")
local ui = require("imprint.chat.ui")

local M = {}

local PARTS = {
  { "system", "system prompt" },
  { "tools", "tool schemas" },
  { "summary", "running summary" },
  { "earlier", "earlier messages" },
  { "question", "question" },
  { "research", "this reply's research" },
}

--- 12345 -> "12,345".
local function count(n)
  local text = tostring(math.floor(n))
  local grouped = text:reverse():gsub("(%d%d%d)", "%1,"):reverse()
  return (grouped:gsub("^,", ""))
end

--- The winbar's share: "65% of 8,192" ("~" before it when the count is an estimate).
function M.share(usage)
  if not usage or not usage.nCtx or usage.nCtx <= 0 then
    return nil
  end
  local percent = math.floor(usage.used * 100 / usage.nCtx + 0.5)
  return ("%s%d%% of %s"):format(usage.exact and "" or "~", percent, count(usage.nCtx))
end

--- Show what the session's next question would get (nothing while a reply runs: its rounds
--- report their own).
function M.refresh(session_id)
  if not session_id or not client.get() then
    return
  end
  client.request("imprint/context", { sessionId = session_id }, function(err, result)
    if err or state.session_id ~= session_id or state.reply then
      return -- the chat moved on meanwhile; a refused count leaves the last one
    end
    state.context = result
    ui.update_winbar()
  end)
end

local function ranges(list)
  if not list or #list == 0 then
    return "none"
  end
  local shown = {}
  for _, range in ipairs(list) do
    shown[#shown + 1] = range[1] == range[2] and ("#%d"):format(range[1]) or ("#%d–#%d"):format(range[1], range[2])
  end
  return table.concat(shown, ", ")
end

--- The float's lines for a usage object.
function M.lines(usage)
  local what = usage.replyId ~= nil and usage.replyId ~= vim.NIL and "This reply's latest round"
    or "The next question"
  local lines = {
    ("%s: %s of %s tokens (%d%%)%s"):format(what, count(usage.used), count(usage.nCtx),
      math.floor(usage.used * 100 / usage.nCtx + 0.5), usage.exact and "" or ", estimated"),
    ("%s more kept free for the answer"):format(count(usage.outputAllowance)),
    "",
  }
  if type(usage.nCtxSource) == "string" and usage.nCtxSource ~= "chat.n_ctx" then
    -- A served model's own, smaller window: say where it comes from.
    local window = client.context_window(usage.nCtx, usage.nCtxSource)
    table.insert(lines, 2, window:sub(1, 1):upper() .. window:sub(2))
  end
  local width = 0
  for _, part in ipairs(PARTS) do
    width = math.max(width, vim.fn.strdisplaywidth(part[2]))
  end
  for _, part in ipairs(PARTS) do
    local tokens = usage.parts and usage.parts[part[1]] or 0
    lines[#lines + 1] = ("  %s%s  %7s"):format(part[2], (" "):rep(width - vim.fn.strdisplaywidth(part[2])), count(tokens))
  end
  vim.list_extend(lines, {
    "",
    "Messages in view:     " .. ranges(usage.inView),
    "Summarized:           " .. ranges(usage.summarized),
    "Left out (no room):   " .. ranges(usage.dropped),
    "",
    usage.exact and "Counted with the model's own tokenizer." or "Estimated from the text's size (a remote model).",
  })
  return lines
end

local function show(usage)
  local lines = M.lines(usage)
  local width = 0
  for _, line in ipairs(lines) do
    width = math.max(width, vim.fn.strdisplaywidth(line))
  end
  local buf = api.nvim_create_buf(false, true)
  api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].filetype = "imprint-context"
  width = math.min(width + 2, vim.o.columns - 4)
  local win = api.nvim_open_win(buf, true, {
    relative = "editor", width = width, height = #lines, border = require("imprint.config").options.window.border,
    row = math.floor((vim.o.lines - #lines) / 2) - 1, col = math.floor((vim.o.columns - width) / 2),
    title = " Imprint context ", title_pos = "center", style = "minimal",
  })
  for _, key in ipairs({ "q", "<Esc>" }) do
    vim.keymap.set("n", key, function()
      if api.nvim_win_is_valid(win) then
        api.nvim_win_close(win, true)
      end
    end, { buffer = buf, nowait = true, silent = true, desc = "Imprint: close" })
  end
  return win
end

--- :ImprintContext: the breakdown of what fills the context, in a float: the reply in flight's
--- latest round, else what the open session's next question would get.
function M.open()
  if state.reply then
    if state.context and state.context.replyId == state.reply.reply_id then
      return show(state.context)
    end
    vim.notify("imprint: the reply has not reported its context yet", vim.log.levels.INFO)
    return nil
  end
  if not state.session_id then
    vim.notify("imprint: no session is open yet; ask a question first", vim.log.levels.INFO)
    return nil
  end
  local session_id = state.session_id
  client.request("imprint/context", { sessionId = session_id }, function(err, result)
    if err then
      vim.notify("imprint: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      return
    end
    if state.session_id == session_id and not state.reply then
      state.context = result
      ui.update_winbar()
    end
    show(result)
  end)
  return nil
end

return M
