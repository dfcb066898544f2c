--- What the chat holds, shared by its modules: the buffer and windows, the open session, the
--- reply in flight (nil when idle), and the extmark namespaces.
local api = vim.api

local M = {
  buf = nil, ---@type integer|nil
  win = nil, ---@type integer|nil
  input_buf = nil, ---@type integer|nil
  input_win = nil, ---@type integer|nil
  session_id = nil, ---@type string|nil
  title = nil, ---@type string|nil
  workspace = nil, ---@type string|nil  the folder source paths are relative to
  reply = nil, ---@type table|nil
  last_sources = nil, ---@type table|nil  { sources = {...}, workspace = "..." }
  progress = nil, ---@type string|nil
  context = nil, ---@type table|nil  the latest imprint/contextUsage or imprint/context of the session
  answers = {}, ---@type table[]  { mark, sources, workspace } per answer with sources, in order
  cancelled = {}, ---@type table<string, true>  reply ids whose late notifications are dropped
  recovering = nil, ---@type function[]|nil  questions waiting while a cancelled one's session is found
  compacting = {}, ---@type table<string, true>  sessions whose :ImprintCompact runs (its summary is no reply's)
}

--- Namespaces (not state, but every module needs them).
M.ns = {
  tools = api.nvim_create_namespace("imprint_tools"),
  blocks = api.nvim_create_namespace("imprint_blocks"),
  marks = api.nvim_create_namespace("imprint_marks"),
  hl = api.nvim_create_namespace("imprint_highlights"),
}

--- Lines the transcript writes in more than one place.
M.THINKING_HEAD = "> **Thinking**"
--- The winbar while a reasoning model's thoughts stream.
M.THINKING = "Thinking…"
M.CANCELLED = "_Cancelled._"

return M
