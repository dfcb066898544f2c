--- Stored sessions: list them with vim.ui.select (so telescope / fzf-lua ui-select work),
--- open one into the chat, delete one.
local client = require("imprint.client")
local chat = require("imprint.chat")

local M = {}

--- The last listing, for command-line completion of session ids.
M.cached = {}

local function report(err)
  vim.notify("imprint: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
end

--- `callback(sessions)` with the stored sessions, newest first.
function M.list(callback)
  client.request("imprint/sessions", vim.empty_dict(), function(err, result)
    if err then
      return report(err)
    end
    M.cached = result.sessions
    callback(result.sessions)
  end)
end

function M.format(session)
  local title = session.title ~= "" and session.title or "(untitled)"
  return ("%s  %s  (%d messages)"):format(os.date("%Y-%m-%d %H:%M", math.floor(session.updatedAt)), title,
    session.messageCount)
end

--- Open a stored session into the chat buffer; `on_done()` after it shows.
function M.open(session_id, on_done)
  client.request("imprint/session", { sessionId = session_id }, function(err, result)
    if err then
      return report(err)
    end
    chat.show_session(result)
    if on_done then
      on_done()
    end
  end)
end

--- Pick a session with vim.ui.select and open it.
function M.pick()
  M.list(function(sessions)
    if #sessions == 0 then
      vim.notify("imprint: no stored sessions yet; :Imprint asks a first question", vim.log.levels.INFO)
      return
    end
    vim.ui.select(sessions, { prompt = "Imprint sessions", format_item = M.format, kind = "imprint_session" },
      function(choice)
        if choice then
          M.open(choice.sessionId)
        end
      end)
  end)
end

local function delete_now(session_id)
  client.request("imprint/deleteSession", { sessionId = session_id }, function(err)
    if err then
      return report(err)
    end
    if chat.session_id() == session_id then
      chat.clear()
    end
    vim.notify("imprint: deleted session " .. session_id, vim.log.levels.INFO)
    vim.api.nvim_exec_autocmds("User", { pattern = "ImprintSessionDeleted", modeline = false,
      data = { sessionId = session_id } })
  end)
end

--- Delete a session (default: the one open in the chat); asks first unless `force`.
function M.delete(session_id, force)
  session_id = session_id or chat.session_id()
  if not session_id then
    vim.notify("imprint: no session is open; :ImprintDelete {id} names one", vim.log.levels.WARN)
    return
  end
  if force then
    return delete_now(session_id)
  end
  vim.ui.select({ "Delete", "Keep" }, { prompt = ("Delete Imprint session %s?"):format(session_id) },
    function(choice)
      if choice == "Delete" then
        delete_now(session_id)
      end
    end)
end

return M
