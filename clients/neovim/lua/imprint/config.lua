--- Options of the Imprint plugin: defaults, validation (each error names its key) and merging.
local M = {}

local LAYOUTS = { split = true, vsplit = true, float = true, tab = true }

--- @class imprint.Options
M.defaults = {
  -- The daemon's command; `--log-file` is appended when `log_file` is set.
  cmd = { "imprintd", "serve" },
  -- Extra environment for the daemon (nil: inherit Neovim's).
  cmd_env = nil,
  -- The folder the daemon researches: a path, or a function returning one (nil: the cwd).
  root_dir = nil,
  -- Where the daemon writes its log (false: only Neovim's LSP log gets its stderr).
  log_file = vim.fn.stdpath("log") .. "/imprintd.log",
  -- Editor settings sent as `initializationOptions`, e.g. { chat = { n_ctx = 4096 } }.
  settings = {},
  -- MCP servers whose tools replies may use, by name, in the shape editors write them (sent
  -- as the setting `chat.mcp_servers`): { git = { command = "uvx", args = { "mcp-server-git" } } }
  -- or { docs = { url = "https://…/mcp", headers = { Authorization = "…" } } }. nil: none from here.
  mcp_servers = nil,
  -- "written" answers, or "spoken" (two or three plain sentences).
  style = "written",
  -- false: new sessions live in the daemon's memory only.
  persist = true,
  window = {
    layout = "vsplit", -- "split" | "vsplit" | "float" | "tab"
    width = 0.4, -- columns of a vsplit/float: a fraction of the screen or a count
    height = 0.4, -- rows of a split/float: a fraction of the screen or a count
    border = "rounded", -- float border
    input_height = 4, -- rows of the input area
  },
  keymaps = {
    -- In the chat buffer.
    input = "i", -- open the input area
    cancel = "<C-c>",
    open_source = { "<CR>", "gd" },
    close = "q",
    -- In the input area.
    send = { n = "<CR>", i = "<C-s>" },
  },
}

M.options = vim.deepcopy(M.defaults)

local function is_size(value)
  return type(value) == "number" and value > 0
end

local function is_keys(value)
  if value == false or type(value) == "string" then
    return true
  end
  if type(value) ~= "table" then
    return false
  end
  for _, key in pairs(value) do
    if type(key) ~= "string" then
      return false
    end
  end
  return true
end

local function is_cmd(value)
  if type(value) ~= "table" or #value == 0 then
    return false
  end
  for _, part in ipairs(value) do
    if type(part) ~= "string" then
      return false
    end
  end
  return true
end

local SERVER_FIELDS = { command = "string", args = "table", env = "table", url = "string", headers = "table",
  type = "string", disabled = "boolean" }

--- A table of MCP servers by name, each with a `command` (stdio) or a `url` (http, sse); the
--- daemon checks the rest and names what it refuses.
local function is_mcp_servers(value)
  if type(value) ~= "table" then
    return false
  end
  for name, server in pairs(value) do
    if type(name) ~= "string" or type(server) ~= "table" or (server.command == nil and server.url == nil) then
      return false
    end
    for field, field_value in pairs(server) do
      if SERVER_FIELDS[field] == nil or type(field_value) ~= SERVER_FIELDS[field] then
        return false
      end
    end
  end
  return true
end

--- Every known key with its validator; a key not listed here is an error naming it.
local SCHEMA = {
  cmd = { is_cmd, "a non-empty list of strings, e.g. { 'imprintd', 'serve' }" },
  cmd_env = { "table", true },
  root_dir = { { "string", "function" }, true },
  log_file = { function(v) return v == false or type(v) == "string" end, "a path or false" },
  settings = { "table" },
  mcp_servers = { is_mcp_servers,
    "a table of servers by name, each { command = '…', args = { … }, env = { … } } or { url = '…', headers = { … } }" },
  style = { function(v) return v == "written" or v == "spoken" end, "'written' or 'spoken'" },
  persist = { "boolean" },
  window = {
    layout = { function(v) return LAYOUTS[v] == true end, "one of 'split', 'vsplit', 'float', 'tab'" },
    width = { is_size, "a positive number" },
    height = { is_size, "a positive number" },
    border = { { "string", "table" } },
    input_height = { is_size, "a positive number" },
  },
  keymaps = {
    input = { is_keys, "a key, a list of keys, or false" },
    cancel = { is_keys, "a key, a list of keys, or false" },
    open_source = { is_keys, "a key, a list of keys, or false" },
    close = { is_keys, "a key, a list of keys, or false" },
    send = { function(v) return type(v) == "table" and is_keys(v.n or false) and is_keys(v.i or false) end,
      "{ n = key, i = key }" },
  },
}

local function check(schema, value, prefix)
  for key, _ in pairs(value) do
    if schema[key] == nil then
      error(("imprint: unknown option '%s%s'"):format(prefix, key), 0)
    end
  end
  for key, rule in pairs(schema) do
    local name = prefix .. key
    local nested = rule[1] == nil -- a table of rules for a table of options
    local ok, err = pcall(vim.validate, name, value[key], nested and "table" or rule[1],
      value[key] == nil or rule[2] == true, type(rule[2]) == "string" and rule[2] or nil)
    if not ok then
      error("imprint: " .. err, 0)
    end
    if nested and value[key] ~= nil then
      check(rule, value[key], name .. ".")
    end
  end
end

--- Validate `user` options (errors name the key) and merge them over the defaults.
--- @param user table|nil
--- @return imprint.Options
function M.setup(user)
  user = user or {}
  vim.validate("options", user, "table")
  check(SCHEMA, user, "")
  local merged = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), user)
  -- Lists replace, never merge element-wise.
  if user.cmd then
    merged.cmd = vim.deepcopy(user.cmd)
  end
  if merged.mcp_servers ~= nil then
    merged.settings.chat = merged.settings.chat or {}
    merged.settings.chat.mcp_servers = M.mcp_shape(merged.mcp_servers)
  end
  M.options = merged
  return merged
end

--- `servers` as they go to the daemon: an empty table is a JSON object (`{}`), not a list.
function M.mcp_shape(servers)
  local shaped = vim.empty_dict()
  for name, server in pairs(servers) do
    local entry = vim.deepcopy(server)
    for _, field in ipairs({ "env", "headers" }) do
      if entry[field] ~= nil and next(entry[field]) == nil then
        entry[field] = vim.empty_dict()
      end
    end
    shaped[name] = entry
  end
  return shaped
end

--- The daemon's full command line.
function M.command()
  local cmd = vim.deepcopy(M.options.cmd)
  local log_file = M.options.log_file
  if log_file then
    -- The daemon cannot start when its log's folder is missing (a fresh ~/.local/state).
    vim.fn.mkdir(vim.fs.dirname(log_file), "p")
    vim.list_extend(cmd, { "--log-file", log_file })
  end
  return cmd
end

--- The folder the daemon researches.
function M.root_dir()
  local root = M.options.root_dir
  if type(root) == "function" then
    root = root()
  end
  return vim.fs.normalize(root or vim.fn.getcwd())
end

return M
