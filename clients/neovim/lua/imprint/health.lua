--- :checkhealth imprint — Neovim version, the daemon on PATH and its version, a daemon that
--- starts and answers `initialize`, and the model in use as that answer names it; each failure
--- says what to do.
local config = require("imprint.config")

local M = {}

local health = vim.health
local TIMEOUT_MS = 20000

--- The command without the trailing serve/--stdio/--log-file: what `--version` and `config` follow.
local function base_command()
  local base = {}
  for _, part in ipairs(config.options.cmd) do
    if part == "serve" or part == "--stdio" then
      break
    end
    base[#base + 1] = part
  end
  return base
end

local function run(args)
  local ok, process = pcall(vim.system, args, { text = true, env = config.options.cmd_env })
  if not ok then
    return nil, tostring(process)
  end
  local done = process:wait(TIMEOUT_MS)
  if done.code ~= 0 then
    return nil, vim.trim(done.stderr ~= "" and done.stderr or done.stdout or ("exit code " .. done.code))
  end
  return vim.trim(done.stdout)
end

local function check_neovim()
  if vim.fn.has("nvim-0.11") == 1 then
    health.ok("Neovim " .. tostring(vim.version()))
  else
    health.error("Neovim " .. tostring(vim.version()) .. " is too old", { "Imprint needs Neovim 0.11 or newer" })
  end
end

--- @return boolean found
local function check_executable()
  local exe = config.options.cmd[1]
  local path = vim.fn.exepath(exe)
  if path == "" then
    health.error(("`%s` (cmd[1]) is not found or not executable"):format(exe), {
      "Install the daemon: `pip install imprintd` (or `pipx install imprintd`)",
      "Or point the plugin at it: require('imprint').setup({ cmd = { '/path/to/imprintd', 'serve' } })",
    })
    return false
  end
  health.ok(("`%s` found: %s"):format(exe, path))
  local version, err = run(vim.list_extend(base_command(), { "--version" }))
  if version then
    health.ok("version: " .. version)
  else
    health.error("`--version` failed: " .. err, { "Reinstall imprintd; `imprintd --version` must print its version" })
  end
  return true
end

--- What the daemon's initialize said of its model, when it said (an older daemon does not).
local reported

--- Start a throwaway daemon with the plugin's command and ask it `initialize`.
local function check_initialize()
  reported = nil
  local messages = {}
  local exited
  local dispatchers = {
    notification = function(method, params)
      if method == "window/showMessage" then
        messages[#messages + 1] = params.message
      end
    end,
    server_request = function()
      return vim.NIL
    end,
    on_exit = function(code)
      exited = code
    end,
  }
  local ok, rpc = pcall(vim.lsp.rpc.start, config.command(), dispatchers, { env = config.options.cmd_env })
  if not ok then
    health.error("the daemon did not start: " .. tostring(rpc), { "Run the command in a shell to see why" })
    return
  end
  local answer, failure
  local settings = config.options.settings
  rpc.request("initialize", {
    processId = vim.fn.getpid(),
    rootUri = vim.uri_from_fname(config.root_dir()),
    capabilities = vim.empty_dict(),
    initializationOptions = next(settings) and settings or vim.empty_dict(),
  }, function(err, result)
    failure, answer = err, result
  end)
  vim.wait(TIMEOUT_MS, function()
    return answer ~= nil or failure ~= nil or exited ~= nil
  end, 20)
  if answer then
    local info = answer.serverInfo or {}
    health.ok(("the daemon starts and answers initialize (%s %s)"):format(info.name or "?", info.version or "?"))
    local experimental = answer.capabilities and answer.capabilities.experimental
    reported = type(experimental) == "table" and experimental.imprint or nil
    if type(reported) == "table" then
      local imprint_client = require("imprint.client")
      health.ok(("model in use: %s (%s, %s), as the daemon reports it"):format(
        imprint_client.model_name(reported) or "(none set)", reported.provider or "?",
        imprint_client.context_window(reported.nCtx, reported.nCtxSource)))
      if reported.chatFormat ~= nil then -- a daemon before chat formats does not say
        local format = reported.chatFormat ~= vim.NIL and reported.chatFormat or "not known (the model cannot be read)"
        health.ok(("chat format: %s; the model %s"):format(format,
          reported.reasons == true and "reasons before it answers" or "answers without reasoning"))
      end
    end
    rpc.notify("initialized", vim.empty_dict())
    vim.wait(200, function() return #messages > 0 end, 20) -- a refused setting comes right after
    for _, message in ipairs(messages) do
      health.error("the daemon refused a setting: " .. message, { "Fix `settings` in require('imprint').setup()" })
    end
    rpc.request("shutdown", nil, function()
      rpc.notify("exit")
    end)
    vim.wait(5000, function() return exited ~= nil end, 20)
  elseif failure then
    health.error("initialize failed: " .. (failure.message or vim.inspect(failure)), { ":ImprintLog shows the daemon's log" })
  elseif exited then
    health.error(("the daemon exited (code %d) before answering initialize"):format(exited),
      { "Run `" .. table.concat(config.command(), " ") .. "` in a shell to see why", ":ImprintLog shows the daemon's log" })
  else
    health.error(("no answer to initialize within %d s"):format(TIMEOUT_MS / 1000), { ":ImprintLog shows the daemon's log" })
  end
  if not rpc.is_closing() then
    rpc.terminate()
  end
end

local function check_model()
  local out, err = run(vim.list_extend(base_command(), { "config" }))
  if not out then
    health.error("`imprintd config` failed: " .. err, { "Check the config file and IMPRINT_* variables it names" })
    return
  end
  for line in vim.gsplit(out, "\n", { plain = true }) do
    local model = line:match("^model in use%s+(.*)$")
    if model then
      health.ok("model in use: " .. model)
      return
    end
  end
  health.warn("`imprintd config` does not name the model in use", { "Update imprintd" })
end

local function check_client()
  local client = require("imprint.client").get()
  if client then
    -- The running daemon's model has learned a served model's window by now, where it is smaller.
    local imprint_client = require("imprint.client")
    local model = imprint_client.model
    health.info(("the plugin's daemon is running (client id %d, workspace %s%s)"):format(client.id,
      client.root_dir or "?", model and (", model %s, %s"):format(imprint_client.model_name(model) or "(none set)",
        imprint_client.context_window(model.nCtx, model.nCtxSource)) or ""))
  else
    health.info("the plugin's daemon is not running (it starts with the first :Imprint)")
  end
end

function M.check()
  health.start("Neovim")
  check_neovim()
  health.start("imprintd")
  if check_executable() then
    check_initialize()
    if type(reported) ~= "table" then
      check_model() -- a daemon that does not report its model: what `imprintd config` says
    end
  end
  check_client()
end

return M
