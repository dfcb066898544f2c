--- A stored session (an `imprint/session` result) as the live chat showed it: the transcript,
--- thinking (preambles and a reasoning model's thoughts) and summary blocks folded, and each
--- tool call as a finished or failed step.
local api = vim.api
local state = require("imprint.chat.state")
local ui = require("imprint.chat.ui")
local folds = require("imprint.chat.folds")
local steps = require("imprint.chat.steps")

local split_lines = ui.split_lines

local M = {}

local TOOL_TITLES = {
  search = function(args) return ("Searching the workspace for “%s”"):format(args.query or "") end,
  read_file = function(args) return "Reading " .. (args.path or "") end,
  conversation_history = function(args)
    return args.query and ("Searching earlier in this conversation for “%s”"):format(args.query)
      or ("Reading message #%s"):format(tostring(args.message or "?"))
  end,
}

--- The call id prefix of the daemon's own first look (imprintd/messages.py, FIRST_LOOK_CALL_PREFIX).
local FIRST_LOOK_ID = "call_look"

--- A step title shows at most this many characters of the question (first_look.py, TITLE_CHARS).
local LOOK_TITLE_CHARS = 80

--- The first look's step title: the question as asked, on one line, cut as the daemon cuts it.
local function look_title(question)
  local asked = table.concat(vim.split(vim.trim(question or ""), "%s+", { trimempty = true }), " ")
  if vim.fn.strchars(asked) > LOOK_TITLE_CHARS then
    asked = vim.trim(vim.fn.strcharpart(asked, 0, LOOK_TITLE_CHARS - 1)) .. "…"
  end
  return ("Looking in the workspace for “%s”"):format(asked)
end

local function tool_title(call, question)
  local title = TOOL_TITLES[call.name]
  local args = type(call.arguments) == "table" and call.arguments or {}
  if call.name == "search" and type(call.id) == "string" and vim.startswith(call.id, FIRST_LOOK_ID) then
    -- Worded as the live step was: the first look is Imprint's own search, not the model's,
    -- titled with the question (its query also carries words of the exchange before).
    return look_title(question)
  end
  if not title then
    local server = require("imprint.permissions").server_of(call.name)
    if server then -- an MCP tool: its server, then the tool's own name
      return server .. " · " .. call.name:sub(#server + 3)
    end
  end
  return title and title(args) or (call.name .. " " .. vim.json.encode(call.arguments or vim.empty_dict()))
end

--- The transcript of a stored session: lines, folded blocks, tool steps to place, and the
--- answers that have sources ({ row, sources }).
function M.session(messages, summary)
  local lines, blocks, placed, answers = {}, {}, {}, {}
  local function add(new)
    for _, line in ipairs(new) do
      lines[#lines + 1] = line
    end
  end
  local function add_quoted(head, text, hl)
    local block = folds.quoted(head, split_lines(text))
    blocks[#blocks + 1] = { row = #lines, lines = block, hl = hl }
    add(block)
    add({ "" })
  end
  -- How each call ended, from its stored result. A repeated call was answered from before
  -- and, as in the live reply, is no step of its own.
  -- Keyed by the calling message's seq and the call id: models reuse ids between rounds ("call_0"),
  -- and a result answers the call of that id in the message just before it.
  local results = {} -- "seq:toolCallId" -> "finished" | "failed" | "repeat"
  local caller, called = nil, {} -- the latest message with calls, and its calls' tools by id
  for _, m in ipairs(messages) do
    if m.role == "assistant" and #(m.toolCalls or {}) > 0 then
      caller, called = m.seq, {}
      for _, call in ipairs(m.toolCalls) do
        called[call.id] = call.name
      end
    end
    if m.role == "tool" and m.toolCallId and caller then
      local mcp_failed = require("imprint.permissions").call_failed(called[m.toolCallId], m.content)
      results[caller .. ":" .. m.toolCallId] = vim.startswith(m.content, "(Same call as before") and "repeat"
        or (vim.startswith(m.content, "Error:") or mcp_failed) and "failed" or "finished"
    end
  end
  local last_role
  local question = "" -- the question a reply answered: its first look is titled with it
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
        add({ "", "## Imprint", "", state.CANCELLED })
      end
      if #lines > 0 and lines[#lines] ~= "" then
        add({ "" })
      end
      add({ "## You", "" })
      add(split_lines(m.content))
      question = m.content
      last_role = "user"
    elseif m.role == "assistant" then
      if last_role ~= "assistant" then
        add({ "", "## Imprint", "" })
      end
      local calls = m.toolCalls or {}
      if type(m.reasoning) == "string" and vim.trim(m.reasoning) ~= "" then
        add_quoted(state.THINKING_HEAD, vim.trim(m.reasoning), "ImprintThinking")
      end
      if #calls > 0 then
        if m.content ~= "" then
          add_quoted(state.THINKING_HEAD, m.content, "ImprintThinking")
        end
        for _, call in ipairs(calls) do
          local outcome = results[m.seq .. ":" .. call.id] or "finished"
          if outcome ~= "repeat" then
            -- Under the blank line that ends the thinking block (or the heading), as live.
            placed[#placed + 1] = { row = #lines - 1, state = outcome, title = tool_title(call, question) }
          end
        end
      else
        if type(m.sources) == "table" and #m.sources > 0 then
          answers[#answers + 1] = { row = #lines, sources = m.sources }
        end
        add(split_lines(m.content))
      end
      last_role = "assistant"
    end
  end
  if last_role == "user" then
    add({ "", "## Imprint", "", state.CANCELLED })
  end
  return lines, blocks, placed, answers
end

--- Show a stored session in the chat buffer. `opts.in_place`: the session the chat shows, shown
--- again (its new summary) without opening or focusing the chat window.
function M.show(result, opts)
  local chat = require("imprint.chat")
  if state.reply then
    chat.cancel()
  end
  ui.clear()
  local buf = ui.buffer()
  local lines, blocks, placed, answers = M.session(result.messages, result.summary)
  local session = result.session
  local workspace = session.workspace ~= vim.NIL and session.workspace or nil
  ui.edit(function()
    api.nvim_buf_set_lines(buf, 0, -1, false, lines)
    for _, block in ipairs(blocks) do
      folds.add(buf, block.row, block.lines, block.hl)
    end
  end)
  local group
  for _, step in ipairs(placed) do
    if not group or group.row ~= step.row then
      if group then
        steps.show(buf, group)
      end
      group = steps.group(step.row, false)
    end
    group.lines[#group.lines + 1] = steps.line(step.state, step.title)
  end
  if group then
    steps.show(buf, group)
  end
  local sources = require("imprint.chat.sources")
  for _, answer in ipairs(answers) do
    sources.remember(buf, answer.row, answer.sources, workspace)
  end
  local latest = answers[#answers]
  state.last_sources = latest and { sources = latest.sources, workspace = workspace } or nil
  state.session_id = session.sessionId
  state.title = session.title
  state.workspace = workspace
  if not (opts and opts.in_place) then
    ui.open()
  end
  ui.update_winbar()
  ui.scroll_to_end()
  require("imprint.chat.context").refresh(session.sessionId)
end

return M
