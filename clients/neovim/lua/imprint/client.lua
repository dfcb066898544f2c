--- The one imprintd client: started with vim.lsp.start (attached to no buffer), settings as
--- initializationOptions, runtime settings changes as workspace/didChangeConfiguration, and
--- the daemon's notifications routed to the chat.
local config = require("imprint.config")

local M = {}

M.NAME = "imprintd"

--- @type integer|nil
M.client_id = nil

--- The model the daemon answers with, as it reports it: { provider, model, name, nCtx, nCtxSource,
--- serverNCtx, chatFormat, reasons } (initialize's capabilities.experimental.imprint, then
--- imprint/modelChanged); nil before it said.
M.model = nil

--- The name a model ({ provider, model, name }, the one in use by default) is shown by: the `name`
--- the daemon reports, the same string :ImprintModel offers it by (imprint/models); an older
--- daemon sends none, and its `model` is shown. nil when no model is set.
function M.model_name(model)
  model = model or M.model
  if not model then
    return nil
  end
  local name = type(model.name) == "string" and model.name or model.model
  if type(name) ~= "string" or name == "" then
    return nil
  end
  return name
end

--- "context 8,192 tokens", or "context 1,024 tokens (llama-server /props n_ctx)": the window
--- prompts are fitted to (`n_ctx`), and where it comes from (`source`) when that is not chat.n_ctx.
function M.context_window(n_ctx, source)
  local text = tostring(math.floor(n_ctx or 0)):reverse():gsub("(%d%d%d)", "%1,"):reverse():gsub("^,", "")
  if type(source) == "string" and source ~= "" and source ~= "chat.n_ctx" then
    return ("context %s tokens (%s)"):format(text, source)
  end
  return ("context %s tokens"):format(text)
end

--- Functions waiting for the client to finish `initialize`.
local waiting = {}

--- The settings the running daemon was last sent, as dotted keys.
local sent = {}

--- Settings whose value is a table of its own (servers by name), sent and unset whole.
local WHOLE = { ["chat.mcp_servers"] = true }

--- `settings` as dotted keys: { chat = { n_ctx = 1 } } and { ["chat.n_ctx"] = 1 } give the same.
local function flatten(settings, prefix, out)
  out = out or {}
  for key, value in pairs(settings) do
    local name = prefix and (prefix .. "." .. key) or key
    if type(value) == "table" and not WHOLE[name] then
      flatten(value, name, out)
    else
      out[name] = value
    end
  end
  return out
end

--- `settings` without the keys set to vim.NIL (a setting being unset), and those keys.
local function without_unset(settings, prefix, unset)
  local kept = vim.empty_dict() -- an empty group encodes as {}, not []
  for key, value in pairs(settings) do
    local name = prefix and (prefix .. "." .. key) or key
    if value == vim.NIL then
      unset[#unset + 1] = name
    elseif type(value) == "table" and not WHOLE[name] then
      kept[key] = without_unset(value, name, unset)
    else
      kept[key] = value
    end
  end
  return kept
end

--- What to send for `settings`: them, and null for every key the daemon was sent before that
--- is gone now (or unset with vim.NIL), so it goes back to the daemon's own value.
local function payload(settings, unset)
  local out = vim.deepcopy(settings)
  local now = flatten(settings)
  local gone = vim.deepcopy(unset)
  for name in pairs(sent) do
    if now[name] == nil and not vim.tbl_contains(gone, name) then
      gone[#gone + 1] = name
    end
  end
  table.sort(gone)
  for _, name in ipairs(gone) do
    local parts = vim.split(name, ".", { plain = true })
    local group = out
    for index = 1, #parts - 1 do
      if type(group[parts[index]]) ~= "table" then
        group[parts[index]] = {}
      end
      group = group[parts[index]]
    end
    group[parts[#parts]] = vim.NIL
  end
  return out, now
end

local LEVELS = { [1] = vim.log.levels.ERROR, [2] = vim.log.levels.WARN, [3] = vim.log.levels.INFO, [4] = vim.log.levels.DEBUG }

--- A Lua `{}` encodes as JSON `[]`, which the daemon refuses where it expects an object.
local function object(value)
  if next(value) == nil then
    return vim.empty_dict()
  end
  return value
end
M.object = object

local function chat()
  return require("imprint.chat")
end

local handlers = {
  ["imprint/replyDelta"] = function(_, params)
    chat().on_delta(params)
  end,
  ["imprint/replyPreamble"] = function(_, params)
    chat().on_preamble(params)
  end,
  ["imprint/replyReasoning"] = function(_, params)
    chat().on_reasoning(params)
  end,
  ["imprint/toolStep"] = function(_, params)
    chat().on_tool_step(params)
  end,
  ["imprint/summaryUpdated"] = function(_, params)
    chat().on_summary(params)
  end,
  ["imprint/contextUsage"] = function(_, params)
    chat().on_context_usage(params)
  end,
  -- A request: the answer is this handler's result. It runs in a coroutine, so it waits for
  -- the user's choice (vim.ui.select may answer at once, or later).
  ["imprint/requestPermission"] = function(_, params)
    local co, answered = coroutine.running(), nil
    require("imprint.permissions").ask(params, function(outcome)
      if answered ~= nil then
        return
      end
      answered = outcome
      if co and coroutine.status(co) == "suspended" then
        coroutine.resume(co)
      end
    end)
    if answered == nil then
      coroutine.yield()
    end
    return { outcome = answered }
  end,
  ["imprint/modelChanged"] = function(_, params)
    M.model = params
    chat().on_model()
  end,
  -- A refused setting (or any daemon message) reaches the user through vim.notify.
  ["window/showMessage"] = function(_, params)
    vim.notify("imprintd: " .. params.message, LEVELS[params.type] or vim.log.levels.INFO)
  end,
}

--- The handlers given to vim.lsp.start (exposed for the benchmark).
M.handlers = handlers

local function flush_waiting(client, err)
  local pending = waiting
  waiting = {}
  for _, fn in ipairs(pending) do
    fn(client, err)
  end
end

--- The running client, or nil.
--- @return vim.lsp.Client|nil
function M.get()
  local client = M.client_id and vim.lsp.get_client_by_id(M.client_id)
  if client and not client:is_stopped() then
    return client
  end
  return nil
end

--- Start the daemon unless it runs. Returns the client id, or nil and why not.
--- @return integer|nil, string|nil
function M.start()
  if M.get() then
    return M.client_id
  end
  local cmd = config.command()
  if vim.fn.executable(cmd[1]) ~= 1 then
    return nil, ("cannot start the daemon: '%s' is not an executable on PATH. Install it with "
      .. "`pip install imprintd`, or set `cmd` in require('imprint').setup()"):format(cmd[1])
  end
  local root = config.root_dir()
  sent = flatten(config.options.settings)
  local id = vim.lsp.start({
    name = M.NAME,
    cmd = cmd,
    cmd_env = config.options.cmd_env,
    root_dir = root,
    init_options = object(config.options.settings),
    settings = object(config.options.settings),
    -- It answers imprint/requestPermission (without this the daemon runs no tool that may act).
    capabilities = vim.tbl_deep_extend("force", vim.lsp.protocol.make_client_capabilities(),
      { experimental = { imprint = { permissionRequests = true } } }),
    handlers = handlers,
    on_init = function(client, result)
      local experimental = result and result.capabilities and result.capabilities.experimental
      M.model = type(experimental) == "table" and type(experimental.imprint) == "table" and experimental.imprint
        or nil
      chat().on_model()
      flush_waiting(client, nil)
    end,
    on_exit = function(code, signal, client_id)
      vim.schedule(function()
        if client_id == M.client_id then
          M.client_id = nil
          M.model = nil
          flush_waiting(nil, ("the daemon exited (code %d) before it answered initialize; "
            .. ":ImprintLog shows why"):format(code))
          chat().on_daemon_exit(code, signal)
        end
      end)
    end,
  }, { attach = false, silent = true, reuse_client = function() return false end })
  if not id then
    return nil, ("cannot start the daemon with `%s`; :ImprintLog and :checkhealth imprint show why")
      :format(table.concat(cmd, " "))
  end
  M.client_id = id
  return id
end

--- Call `fn(client)` once the daemon has answered initialize (starting it if needed);
--- `fn(nil, err)` when it cannot be started.
--- @param fn fun(client: vim.lsp.Client|nil, err: string|nil)
function M.with_client(fn)
  local _, err = M.start()
  if err then
    fn(nil, err)
    return
  end
  local client = M.get()
  if client and client.initialized then
    fn(client)
  else
    table.insert(waiting, fn)
  end
end

--- Send a request once the client is ready; `callback(err, result)` gets a table error
--- `{ message = ... }` when the daemon cannot be started.
--- @return nil
function M.request(method, params, callback, on_sent)
  M.with_client(function(client, err)
    if not client then
      callback({ message = err })
      return
    end
    local ok, request_id = client:request(method, params, function(rpc_err, result)
      callback(rpc_err, result)
    end)
    if not ok then
      callback({ message = "the daemon is not running; :ImprintRestart starts it again" })
    elseif on_sent then
      on_sent(request_id)
    end
  end)
end

function M.cancel(request_id)
  local client = M.get()
  if client and request_id then
    client:cancel_request(request_id)
  end
end

--- Merge `settings` into the current ones (a key set to vim.NIL is removed) and send them to
--- the running daemon, with null for each key it had that is gone.
function M.update_settings(settings)
  local unset = {}
  config.options.settings =
    without_unset(vim.tbl_deep_extend("force", config.options.settings, settings), nil, unset)
  local client = M.get()
  if client then
    local values, now = payload(config.options.settings, unset)
    client.settings = object(config.options.settings)
    client:notify("workspace/didChangeConfiguration", { settings = object(values) })
    sent = now
  end
end

--- Stop the daemon (gracefully: shutdown, then exit).
function M.stop()
  local client = M.get()
  M.client_id = nil
  if client then
    client:stop()
  end
end

--- The folder the running daemon researches (its first workspace folder).
function M.root_dir()
  local client = M.get()
  return (client and client.root_dir) or config.root_dir()
end

return M
