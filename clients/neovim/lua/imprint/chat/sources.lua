--- The sources of answers: a Sources line or a "[n]" citation under the cursor opens its file
--- at the line in a window other than the chat, and the latest answer's sources fill the
--- quickfix list.
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
function M.at_cursor()
  local buf = ui.buffer()
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

--- Open a source's file at its line in a window other than the chat.
function M.open(source, workspace)
  local path = vim.fs.normalize(resolve(source.path, workspace))
  local target = target_window(path)
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

function M.open_at_cursor()
  local source = M.at_cursor()
  if not source then
    vim.notify("imprint: no source under the cursor (a Sources line or a [n] citation)", vim.log.levels.INFO)
    return
  end
  M.open(source)
end

--- The sources of the latest answer: the result's when it came in this chat, else the
--- last Sources list in the transcript.
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

--- Fill the quickfix list with the latest answer's sources.
function M.to_quickfix()
  local sources, workspace = M.latest()
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

return M
