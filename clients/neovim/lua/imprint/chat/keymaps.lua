--- Buffer-local keys of the chat buffer and the input area, from `keymaps` in the options.
local config = require("imprint.config")

local M = {}

local function chat()
  return require("imprint.chat")
end

local function set_keys(buf, modes, keys, fn, desc)
  if not keys then
    return
  end
  for _, key in ipairs(type(keys) == "table" and keys or { keys }) do
    vim.keymap.set(modes, key, fn, { buffer = buf, nowait = true, silent = true, desc = desc })
  end
end

function M.chat(buf)
  local keys = config.options.keymaps
  set_keys(buf, "n", keys.input, function() chat().open_input() end, "Imprint: write a question")
  set_keys(buf, { "n", "i" }, keys.cancel, function() chat().cancel() end, "Imprint: cancel the reply")
  set_keys(buf, "n", keys.open_source, function() chat().open_source_at_cursor() end,
    "Imprint: open the source under the cursor")
  set_keys(buf, "n", keys.close, function() chat().close() end, "Imprint: close the chat")
end

function M.input(buf, send)
  local keys = config.options.keymaps
  set_keys(buf, "n", keys.send.n, send, "Imprint: send the question")
  set_keys(buf, "i", keys.send.i, send, "Imprint: send the question")
  set_keys(buf, { "n", "i" }, keys.cancel, function() chat().cancel() end, "Imprint: cancel the reply")
  set_keys(buf, "n", keys.close, function() chat().close() end, "Imprint: close the chat")
end

return M
