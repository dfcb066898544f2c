--- Imprint for Neovim: chat with the imprintd daemon about your workspace.
--- `require("imprint").setup(opts)` is optional; every command works with the defaults.
local config = require("imprint.config")

local M = {}

local augroup = vim.api.nvim_create_augroup("imprint", { clear = true })

local function chat()
  return require("imprint.chat")
end

local function client()
  return require("imprint.client")
end

local autocmds_made = false

--- Progress of our client reaches the winbar; everyone else gets it through LspProgress too.
local function make_autocmds()
  if autocmds_made then
    return
  end
  autocmds_made = true
  vim.api.nvim_create_autocmd("LspProgress", {
    group = augroup,
    callback = function(event)
      if event.data and event.data.client_id == client().client_id then
        chat().on_progress(event.data.params)
      end
    end,
  })
  vim.api.nvim_create_autocmd("ColorScheme", { group = augroup, callback = function() chat().define_highlights() end })
end

--- Validate and apply options (see :h imprint-options). Changed `settings` reach a running
--- daemon at once.
function M.setup(opts)
  local previous = vim.deepcopy(config.options.settings)
  config.setup(opts)
  chat().define_highlights()
  make_autocmds()
  if client().get() and not vim.deep_equal(previous, config.options.settings) then
    client().update_settings({})
  end
end

--- Change daemon settings at runtime (sent as workspace/didChangeConfiguration); a key set to
--- vim.NIL is unset, and so is every key that disappeared from the settings.
function M.set_settings(settings)
  vim.validate("settings", settings, "table")
  client().update_settings(settings)
end

--- Open or focus the chat; with `question`, ask it.
function M.open(question)
  make_autocmds()
  if question and vim.trim(question) ~= "" then
    return chat().ask(question)
  end
  chat().open()
  local _, err = client().start()
  if err then
    vim.notify("imprint: " .. err, vim.log.levels.ERROR)
    return false
  end
  return true
end

function M.ask(question)
  make_autocmds()
  return chat().ask(question)
end

--- Ask with lines `first`..`last` of `buf` as context.
function M.ask_selection(question, buf, first, last)
  make_autocmds()
  return chat().ask(chat().with_selection(question, buf, first, last))
end

function M.cancel()
  return chat().cancel()
end

function M.new()
  if not chat().idle() then
    chat().cancel()
  end
  chat().clear()
  chat().open()
end

function M.restart()
  if not chat().idle() then
    chat().cancel()
  end
  client().stop()
  local _, err = client().start()
  if err then
    vim.notify("imprint: " .. err, vim.log.levels.ERROR)
  end
end

function M.log()
  local path = config.options.log_file or vim.lsp.get_log_path()
  vim.cmd("botright split " .. vim.fn.fnameescape(path))
  vim.bo.autoread = true
end

function M.sources()
  return chat().sources_to_quickfix()
end

--- A float with what fills the model's context (:ImprintContext).
function M.context()
  return chat().open_context()
end

function M.sessions()
  make_autocmds()
  require("imprint.sessions").pick()
end

function M.delete(session_id, force)
  require("imprint.sessions").delete(session_id, force)
end

--- A short status for statuslines: "answering", "idle" or "stopped".
function M.status()
  if not client().get() then
    return "stopped"
  end
  return chat().idle() and "idle" or "answering"
end

return M
