--- MCP tools in the chat: asking before a tool that may act runs (`imprint/requestPermission`,
--- answered with vim.ui.select), and naming the server a step comes from.
local M = {}

--- The choices, in order, and what each answers; dismissing the selection is a reject.
M.CHOICES = {
  { label = "Allow once", outcome = "allow_once" },
  { label = "Always allow", outcome = "allow_always" },
  { label = "Reject", outcome = "reject" },
}

--- The separator of an MCP tool's name: `git__git_log` is `git_log` of the server `git`.
local SEPARATOR = "__"

--- The question: which server's tool, what it would do, with which arguments.
function M.prompt(params)
  local effect = params.destructive and "It may change or delete things." or "It may change things."
  local ok, args = pcall(vim.json.encode, params.arguments or vim.empty_dict())
  args = ok and args or "?"
  if #args > 300 then
    args = args:sub(1, 299) .. "…"
  end
  return ("Imprint: allow the MCP server “%s” to run %s? %s %s Arguments: %s"):format(
    tostring(params.server), tostring(params.tool), tostring(params.title or ""), effect, args)
end

--- Ask the user about `params` and call `done(outcome)` once; a request for a reply the chat
--- is not showing, or one that does not fit, is rejected without asking.
function M.ask(params, done)
  local reply = require("imprint.chat.state").reply
  if type(params) ~= "table" or type(params.server) ~= "string" or type(params.tool) ~= "string"
    or not reply or reply.reply_id ~= params.replyId then
    done("reject")
    return
  end
  local labels = vim.tbl_map(function(choice) return choice.label end, M.CHOICES)
  local ok = pcall(vim.ui.select, labels, { prompt = M.prompt(params), kind = "imprint.permission" },
    function(_, index)
      done(index and M.CHOICES[index] and M.CHOICES[index].outcome or "reject")
    end)
  if not ok then
    done("reject")
  end
end

--- The MCP server of a tool named `server__tool`; nil for a workspace tool.
function M.server_of(tool)
  local at = type(tool) == "string" and tool:find(SEPARATOR, 2, true)
  return at and tool:sub(1, at - 1) or nil
end

--- A step's title: an MCP tool's names its server ("git · git_log"), unless the daemon's title
--- does ("Asking git: git_log").
function M.step_title(tool, title)
  local server = M.server_of(tool)
  if not server or title:find(server, 1, true) then
    return title
  end
  return server .. " · " .. title
end

--- How the daemon words an MCP call that did not give a result (imprintd/mcp/tools.py):
--- declined by the user, the server unavailable, timed out, refused, an error result.
local FAILED = {
  "The user declined to let %s run %s",
  "The MCP server %s is unavailable",
  "%s did not answer %s within",
  "%s refused %s:",
  "%s answered %s with an error:",
}

--- Whether the stored `result` of a call of the MCP tool `name` (`server__tool`) says it failed.
function M.call_failed(name, result)
  local server = M.server_of(name)
  if not server or type(result) ~= "string" then
    return false
  end
  local tool = name:sub(#server + #SEPARATOR + 1)
  for _, start in ipairs(FAILED) do
    if vim.startswith(result, start:format(server, tool)) then
      return true
    end
  end
  return false
end

return M
