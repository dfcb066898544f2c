--- Searching, renaming, exporting and compacting conversations, and picking a model:
--- :ImprintSearch, :ImprintRename, :ImprintExport, :ImprintCompact, :ImprintModel.
local client = require("imprint.client")
local chat = require("imprint.chat")

local M = {}

--- Where :ImprintSearch marks the message it opened at.
M.ns = vim.api.nvim_create_namespace("imprint_search")

local function report(err)
  vim.notify("imprint: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
end

--- A hit on one line: date, session title, message number and role, the snippet with [matches].
function M.format_hit(hit)
  local parts = {}
  for _, part in ipairs(hit.snippet) do
    parts[#parts + 1] = part.match and ("[" .. part.text .. "]") or part.text
  end
  local title = hit.title ~= "" and hit.title or "(untitled)"
  return ("%s  %s  #%d %s: %s"):format(os.date("%Y-%m-%d", math.floor(hit.createdAt)), title, hit.seq, hit.role,
    table.concat(parts))
end

--- The first line of the message `seq` in the chat buffer, found by its text (0-based row), or nil.
local function row_of(buf, message)
  local first = vim.split(vim.trim(message.content or ""), "\n", { plain = true })[1]
  if not first or first == "" then
    return nil
  end
  for row, line in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    if line == first then
      return row - 1
    end
  end
  return nil
end

--- Open the hit's session in the chat, the cursor on its message, the message marked.
function M.open_hit(hit)
  client.request("imprint/session", { sessionId = hit.sessionId }, function(err, result)
    if err then
      return report(err)
    end
    chat.show_session(result)
    chat.open()
    local buf = chat.buffer()
    local message
    for _, m in ipairs(result.messages) do
      if m.seq == hit.seq then
        message = m
      end
    end
    local row = message and row_of(buf, message)
    vim.api.nvim_buf_clear_namespace(buf, M.ns, 0, -1)
    if row then
      local lines = #vim.split(vim.trim(message.content), "\n", { plain = true })
      local last = math.min(row + lines, vim.api.nvim_buf_line_count(buf))
      vim.api.nvim_buf_set_extmark(buf, M.ns, row, 0, { end_row = last, hl_group = "Search", hl_eol = true })
      for _, win in ipairs(vim.fn.win_findbuf(buf)) do
        vim.api.nvim_win_set_cursor(win, { row + 1, 0 })
      end
    end
    vim.api.nvim_exec_autocmds("User", { pattern = "ImprintSearchOpened", modeline = false,
      data = { sessionId = hit.sessionId, seq = hit.seq, row = row } })
  end)
end

--- :ImprintSearch {query}: every stored conversation; the hits go to the quickfix list and a picker.
function M.search(query)
  if not query or vim.trim(query) == "" then
    vim.notify("imprint: :ImprintSearch {words} searches every stored conversation", vim.log.levels.WARN)
    return
  end
  client.request("imprint/searchConversations", { query = query, limit = 50 }, function(err, result)
    if err then
      return report(err)
    end
    if #result.hits == 0 then
      vim.notify("imprint: nothing stored matches " .. query, vim.log.levels.INFO)
      return
    end
    local items = {}
    for _, hit in ipairs(result.hits) do
      items[#items + 1] = { text = M.format_hit(hit), user_data = { sessionId = hit.sessionId, seq = hit.seq } }
    end
    vim.fn.setqflist({}, " ", { title = "Imprint search: " .. query, items = items })
    vim.ui.select(result.hits, { prompt = "Imprint: " .. query, format_item = M.format_hit,
      kind = "imprint_search" }, function(choice)
      if choice then
        M.open_hit(choice)
      end
    end)
  end)
end

local function open_session()
  local session_id = chat.session_id()
  if not session_id then
    vim.notify("imprint: no session is open; ask a question or :ImprintSessions first", vim.log.levels.WARN)
  end
  return session_id
end

--- :ImprintRename {title}: the open session's new title.
function M.rename(title)
  local session_id = open_session()
  if not session_id then
    return
  end
  client.request("imprint/renameSession", { sessionId = session_id, title = title }, function(err, result)
    if err then
      return report(err)
    end
    chat.on_renamed(result.session)
    vim.notify("imprint: renamed to " .. result.session.title, vim.log.levels.INFO)
  end)
end

--- :ImprintExport [file]: the open session as Markdown, into `file` or a new buffer.
function M.export(file)
  local session_id = open_session()
  if not session_id then
    return
  end
  client.request("imprint/export", { sessionId = session_id, format = "markdown" }, function(err, result)
    if err then
      return report(err)
    end
    local lines = vim.split(result.text, "\n", { plain = true })
    if lines[#lines] == "" then
      table.remove(lines)
    end
    if file and file ~= "" then
      local ok, problem = pcall(vim.fn.writefile, lines, vim.fn.expand(file))
      if not ok or problem ~= 0 then
        return report({ message = "cannot write " .. file })
      end
      vim.notify("imprint: wrote " .. file, vim.log.levels.INFO)
      return
    end
    vim.cmd("tabnew")
    local buf = vim.api.nvim_get_current_buf()
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
    vim.bo[buf].filetype = "markdown"
    vim.bo[buf].modified = false
    pcall(vim.api.nvim_buf_set_name, buf, result.fileName)
  end)
end

--- :ImprintCompact: write the open session's running summary now.
function M.compact()
  local session_id = open_session()
  if not session_id then
    return
  end
  vim.notify("imprint: summarizing the conversation…", vim.log.levels.INFO)
  chat.set_compacting(session_id, true)
  client.request("imprint/compact", { sessionId = session_id }, function(err, result)
    chat.set_compacting(session_id, false)
    if err then
      return report(err)
    end
    vim.notify("imprint: " .. result.note, vim.log.levels.INFO)
    if result.compacted then
      chat.show_compacted(session_id)
    end
  end)
end

--- :ImprintModel: pick a model: with provider openai, those the server lists (the provider stays);
--- then the GGUF chat models found on this machine (the provider becomes local). It becomes chat.model.
function M.pick_model()
  client.request("imprint/models", vim.empty_dict(), function(err, result)
    if err then
      return report(err)
    end
    local offered = {}
    for _, id in ipairs(result.served ~= vim.NIL and result.served or {}) do
      offered[#offered + 1] = { name = id, path = id, provider = "openai" }
    end
    for _, m in ipairs(result.models) do
      if m.chat then -- a file that is not a chat model is listed by the daemon, never offered
        offered[#offered + 1] = vim.tbl_extend("force", m, { provider = "local" })
      end
    end
    if #offered == 0 then
      vim.notify("imprint: no GGUF chat models found; set chat.models_dir to a folder of .gguf files",
        vim.log.levels.INFO)
      return
    end
    vim.ui.select(offered, {
      prompt = "Imprint model (now " .. (client.model_name(result.current) or "none set") .. ")",
      kind = "imprint_model",
      format_item = function(m)
        if m.provider == "openai" then
          return ("%s  (served by chat.base_url)"):format(m.name)
        end
        local ctx = m.contextLength ~= vim.NIL and (", %d ctx"):format(m.contextLength) or ""
        -- Rounded as the CLI and VS Code show it.
        return ("%s  (%s, %d MiB%s, %s)"):format(m.name, m.quantization ~= vim.NIL and m.quantization or "?",
          math.floor(m.size / 1048576 + 0.5), ctx, m.source)
      end,
    }, function(choice)
      if choice then
        require("imprint").set_settings({ chat = { provider = choice.provider, model = choice.path } })
      end
    end)
  end)
end

return M
