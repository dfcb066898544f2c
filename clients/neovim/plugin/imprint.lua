-- Imprint's user commands; the logic lives in lua/imprint/ and loads on first use.
if vim.g.loaded_imprint then
  return
end
vim.g.loaded_imprint = true

if vim.fn.has("nvim-0.11") ~= 1 then
  vim.notify("imprint: Neovim 0.11 or newer is needed (this is " .. tostring(vim.version()) .. ")",
    vim.log.levels.ERROR)
  return
end

local function imprint()
  return require("imprint")
end

local command = vim.api.nvim_create_user_command

command("Imprint", function(opts)
  if opts.range > 0 then
    imprint().ask_selection(opts.args ~= "" and opts.args or "Explain this code.", 0, opts.line1, opts.line2)
  else
    imprint().open(opts.args)
  end
end, { nargs = "*", range = true, desc = "Imprint: open the chat, or ask a question" })

command("ImprintAsk", function(opts)
  local function ask(question)
    if not question or vim.trim(question) == "" then
      return
    end
    if opts.range > 0 then
      imprint().ask_selection(question, 0, opts.line1, opts.line2)
    else
      imprint().ask(question)
    end
  end
  if opts.args ~= "" then
    ask(opts.args)
  else
    vim.ui.input({ prompt = "Ask Imprint: " }, ask)
  end
end, { nargs = "*", range = true, desc = "Imprint: ask a question (with the selected lines as context)" })

command("ImprintCancel", function() imprint().cancel() end, { desc = "Imprint: cancel the reply" })
command("ImprintSessions", function() imprint().sessions() end, { desc = "Imprint: pick a stored session" })
command("ImprintNew", function() imprint().new() end, { desc = "Imprint: start a new chat" })
command("ImprintDelete", function(opts)
  imprint().delete(opts.args ~= "" and opts.args or nil, opts.bang)
end, {
  nargs = "?", bang = true, desc = "Imprint: delete a session (default: the open one; ! skips asking)",
  complete = function()
    return vim.tbl_map(function(s) return s.sessionId end, require("imprint.sessions").cached)
  end,
})
command("ImprintRestart", function() imprint().restart() end, { desc = "Imprint: restart the daemon" })
command("ImprintLog", function() imprint().log() end, { desc = "Imprint: open the daemon's log" })
command("ImprintSources", function() imprint().sources() end, { desc = "Imprint: sources of the last answer to quickfix" })
command("ImprintContext", function() imprint().context() end, { desc = "Imprint: what fills the model's context" })

local function conversations()
  return require("imprint.conversations")
end
command("ImprintSearch", function(opts) conversations().search(opts.args) end,
  { nargs = "+", desc = "Imprint: search every stored conversation (quickfix and a picker)" })
command("ImprintRename", function(opts) conversations().rename(opts.args) end,
  { nargs = "+", desc = "Imprint: rename the open session" })
command("ImprintExport", function(opts) conversations().export(opts.args) end,
  { nargs = "?", complete = "file", desc = "Imprint: the open session as Markdown (into [file] or a new tab)" })
command("ImprintCompact", function() conversations().compact() end,
  { desc = "Imprint: write the open session's running summary now" })
command("ImprintModel", function() conversations().pick_model() end,
  { desc = "Imprint: pick a GGUF chat model found on this machine" })
