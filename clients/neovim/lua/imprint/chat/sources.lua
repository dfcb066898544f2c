--- The sources of answers. The daemon sends each answer's sources as structure (the result's
--- `sources`, a stored answer's `sources`): a file's lines, an earlier message of the
--- conversation, or section notes. A Sources line or a "[n]" citation under the cursor opens
--- its source: a file at its line in a window other than the chat, a message by moving to it in
--- the chat. The latest answer's sources fill the quickfix list, cited apart from read, an
--- unsupported citation marked with the daemon's reason. Answers without structure (an older
--- daemon) are read from their Sources lines.
local api = vim.api
local client = require("imprint.client")
local state = require("imprint.chat.state")
local ui = require("imprint.chat.ui")

local M = {}

local function resolve(path, workspace)
  if path:sub(1, 1) == "/" then
    return path
  end
  return vim.fs.joinpath(workspace or state.workspace or client.root_dir(), path)
end

local function present(value)
  return value ~= nil and value ~= vim.NIL
end

--- The message a source stands for (kind "message", or notes on a user's message), or nil.
local function message_of(source)
  return present(source.message) and source.message or nil
end

--- The answer starting at `row` (0-based) has `sources`: remembered for <CR> and the quickfix,
--- and the Sources line of an unsupported citation muted, with the daemon's reason after it.
function M.remember(buf, row, sources, workspace)
  local mark = api.nvim_buf_set_extmark(buf, state.ns.marks, row, 0, {})
  table.insert(state.answers, { mark = mark, sources = sources, workspace = workspace })
  local unsupported = {}
  for _, source in ipairs(sources) do
    if source.supported == false then
      unsupported[source.number] = source
    end
  end
  if next(unsupported) == nil then
    return
  end
  local lines = api.nvim_buf_get_lines(buf, row, -1, false)
  local listed = false
  for index, line in ipairs(lines) do
    if line == "## You" then
      break
    end
    listed = listed or line == "Sources:"
    local source = listed and unsupported[tonumber(line:match("^%[(%d+)%]"))]
    if source then
      local reason = present(source.reason) and source.reason ~= "" and source.reason or "unsupported"
      api.nvim_buf_set_extmark(buf, state.ns.hl, row + index - 1, 0, {
        end_col = #line, hl_group = "ImprintSourceUnsupported",
        virt_text = { { "  " .. reason, "ImprintSourceUnsupported" } }, virt_text_pos = "eol",
      })
    end
  end
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

--- The remembered answer the 0-based `row` is in, or nil.
local function answer_at(buf, row)
  local found
  for _, answer in ipairs(state.answers) do
    local start = api.nvim_buf_get_extmark_by_id(buf, state.ns.marks, answer.mark, {})[1]
    if start and start <= row then
      found = { answer = answer, start = start }
    end
  end
  if not found then
    return nil
  end
  for _, line in ipairs(api.nvim_buf_get_lines(buf, found.start, row + 1, false)) do
    if line == "## You" then
      return nil -- the cursor is in a later exchange
    end
  end
  return found.answer
end

--- The source under the cursor: on a Sources line, or a "[n]" citation whose Sources line
--- follows in the same reply. Returns the source and the workspace its path is relative to.
function M.at_cursor()
  local buf = ui.buffer()
  local row, col = unpack(api.nvim_win_get_cursor(0))
  local line = api.nvim_buf_get_lines(buf, row - 1, row, false)[1] or ""
  local number = tonumber(line:match("^%[(%d+)%]")) or citation_at(line, col)
  local answer = number and answer_at(buf, row - 1)
  if answer then
    for _, source in ipairs(answer.sources) do
      if source.number == number then
        return source, answer.workspace
      end
    end
  end
  local source = parse_source_line(line)
  if source then
    return source
  end
  if not number then
    return nil
  end
  for _, later in ipairs(api.nvim_buf_get_lines(buf, row, -1, false)) do
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

--- Where each of `seqs` is in the chat buffer: the "## You" line of a question, the
--- "## Imprint" line of the exchange an answer (or its research) belongs to. Found from the
--- stored session, matching its questions to the buffer's from the end (a question the daemon
--- never got, as when it could not start, is in the buffer only). `callback(rows)`, 1-based.
function M.locate_messages(seqs, callback)
  local session_id = state.session_id
  if not session_id then
    return callback({})
  end
  client.request("imprint/session", { sessionId = session_id }, function(err, result)
    if err or state.session_id ~= session_id then
      return callback({})
    end
    local lines = api.nvim_buf_get_lines(ui.buffer(), 0, -1, false)
    local headings = {} -- 1-based rows of "## You", with the question's first line after them
    for index, line in ipairs(lines) do
      if line == "## You" then
        headings[#headings + 1] = index
      end
    end
    local question_row = {} -- user seq -> row of its heading
    local h = #headings
    for index = #result.messages, 1, -1 do
      local m = result.messages[index]
      if m.role == "user" then
        local first = m.content:match("^[^\n]*")
        while h > 0 and lines[headings[h] + 2] ~= first do
          h = h - 1
        end
        if h == 0 then
          break
        end
        question_row[m.seq] = headings[h]
        h = h - 1
      end
    end
    local rows, asked = {}, nil
    local wanted = {}
    for _, seq in ipairs(seqs) do
      wanted[seq] = true
    end
    for _, m in ipairs(result.messages) do
      if m.role == "user" then
        asked = question_row[m.seq]
      end
      if wanted[m.seq] and asked then
        if m.role == "user" then
          rows[m.seq] = asked
        else
          for index = asked + 1, #lines do
            if lines[index] == "## Imprint" then
              rows[m.seq] = index
              break
            end
          end
        end
      end
    end
    callback(rows)
  end)
end

--- Move to message `seq` in the chat window.
local function open_message(seq)
  M.locate_messages({ seq }, function(rows)
    local row = rows[seq]
    if not row then
      vim.notify(("imprint: message #%d is not in the chat"):format(seq), vim.log.levels.INFO)
      return
    end
    local win = ui.open()
    api.nvim_win_set_cursor(win, { row, 0 })
    vim.cmd("normal! zt")
  end)
end

--- Whether a file can be opened in `win`: a split (not a float) showing a file buffer, not
--- the chat or its input, and free to change its buffer.
local function editable(win)
  local buf = api.nvim_win_get_buf(win)
  return api.nvim_win_get_config(win).relative == "" and vim.bo[buf].buftype == ""
    and buf ~= state.buf and buf ~= state.input_buf and not vim.wo[win].winfixbuf
end

--- Where a source opens: the window already showing its file, else the window used last,
--- else any window for files; nil when there is none.
local function target_window(path)
  local wins = api.nvim_tabpage_list_wins(0)
  for _, win in ipairs(wins) do
    if editable(win) and vim.fs.normalize(api.nvim_buf_get_name(api.nvim_win_get_buf(win))) == path then
      return win
    end
  end
  local number = vim.fn.winnr("#")
  local previous = number > 0 and vim.fn.win_getid(number) or 0
  if previous ~= 0 and editable(previous) then
    return previous
  end
  for _, win in ipairs(wins) do
    if editable(win) then
      return win
    end
  end
  return nil
end

--- Open a source: a file at its line in a window other than the chat, a message in the chat.
function M.open(source, workspace)
  if not present(source.path) then
    local seq = message_of(source)
    if seq then
      return open_message(seq)
    end
    local uri = M.linked_uri(source)
    if uri then -- an MCP result that names a web page: the system's browser opens it
      return vim.ui.open(uri)
    end
    vim.notify("imprint: " .. (source.label or "this source") .. " has no place to open", vim.log.levels.INFO)
    return
  end
  local path = vim.fs.normalize(resolve(source.path, workspace))
  local target = target_window(path)
  if target then
    api.nvim_set_current_win(target)
  else
    vim.cmd("leftabove vsplit")
  end
  vim.cmd.edit(vim.fn.fnameescape(path))
  local last = api.nvim_buf_line_count(0)
  local line = present(source.startLine) and source.startLine or 1
  api.nvim_win_set_cursor(0, { math.min(line, last), 0 })
  vim.cmd("normal! zz")
end

function M.open_at_cursor()
  local source, workspace = M.at_cursor()
  if not source then
    vim.notify("imprint: no source under the cursor (a Sources line or a [n] citation)", vim.log.levels.INFO)
    return
  end
  M.open(source, workspace)
end

--- The sources of the latest answer: the result's when it came in this chat (or the stored
--- answer's), else the last Sources list in the transcript.
function M.latest()
  if state.last_sources then
    return state.last_sources.sources, state.last_sources.workspace
  end
  local lines = api.nvim_buf_get_lines(ui.buffer(), 0, -1, false)
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

--- The web address an MCP tool's result names (http or https only: a server names what it
--- likes), or nil.
function M.linked_uri(source)
  local origin = present(source.origin) and source.origin or nil
  local uri = origin and present(origin.uri) and origin.uri or nil
  if type(uri) == "string" and (uri:lower():match("^https?://")) then
    return uri
  end
  return nil
end

--- A quickfix item's text: "[3] services/billing.yaml:1–4" (an MCP result's web address after
--- it), then "read, not cited" or why the citation is unsupported.
local function item_text(source)
  local text = ("[%d] %s"):format(source.number, source.label or source.path or "")
  if M.linked_uri(source) then
    text = text .. " <" .. M.linked_uri(source) .. ">"
  end
  if source.cited == false then
    text = text .. " (read, not cited)"
  elseif source.supported == false then
    local reason = present(source.reason) and source.reason ~= "" and ": " .. source.reason or ""
    text = text .. " (unsupported" .. reason .. ")"
  end
  return text
end

--- Fill the quickfix list with the latest answer's sources.
function M.to_quickfix()
  local sources, workspace = M.latest()
  if #sources == 0 then
    vim.notify("imprint: the chat has no sources yet (answers after research list them)", vim.log.levels.INFO)
    return false
  end
  local seqs = {}
  for _, source in ipairs(sources) do
    if not present(source.path) and message_of(source) then
      seqs[#seqs + 1] = message_of(source)
    end
  end
  local function fill(rows)
    local items = {}
    for _, source in ipairs(sources) do
      local item = { text = item_text(source), type = source.supported == false and "W" or "" }
      if present(source.path) then
        item.filename = resolve(source.path, workspace)
        item.lnum = present(source.startLine) and source.startLine or 1
        item.end_lnum = present(source.endLine) and source.endLine or nil
      elseif message_of(source) and rows[message_of(source)] then
        item.bufnr, item.lnum = ui.buffer(), rows[message_of(source)]
      else
        item.valid = 0 -- nowhere to jump: listed for what it says
      end
      items[#items + 1] = item
    end
    vim.fn.setqflist({}, " ", { title = "Imprint sources", items = items })
    vim.cmd("botright copen")
  end
  if #seqs > 0 then
    M.locate_messages(seqs, fill)
  else
    fill({})
  end
  return true
end

return M
