--- Tool steps as virtual lines in the tools namespace: an icon and a highlight per state.
local api = vim.api
local ns = require("imprint.chat.state").ns

local M = {}

local ICONS = { started = "⋯", finished = "✓", failed = "✗" }
local HL = { started = "ImprintToolRunning", finished = "ImprintToolDone", failed = "ImprintToolFailed" }

--- The virtual line of a step.
function M.line(state_name, title, detail)
  local text = ("  %s %s"):format(ICONS[state_name] or "•", title)
  if detail and detail ~= "" then
    text = text .. " — " .. detail
  end
  return { { { text, HL[state_name] or "ImprintToolRunning" } } }
end

--- Place (or, with `id`, replace) a step's virtual line at `row`; returns the extmark id.
function M.place(buf, row, above, virt_lines, id)
  return api.nvim_buf_set_extmark(buf, ns.tools, row, 0, {
    id = id, virt_lines = virt_lines, virt_lines_above = above, right_gravity = false,
  })
end

--- Where a step's line is: its row and whether it shows above it.
function M.position(buf, id)
  local pos = api.nvim_buf_get_extmark_by_id(buf, ns.tools, id, { details = true })
  return pos[1], pos[3] and pos[3].virt_lines_above
end

return M
