--- Tool steps as virtual lines in the tools namespace, an icon and a highlight per state. The
--- steps of a research round are one group: one extmark whose virtual lines list them in the
--- order they started (several extmarks on one row would show newest first).
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
  return { { text, HL[state_name] or "ImprintToolRunning" } }
end

--- A group of steps shown at `row` (below it, or above it when `above`).
function M.group(row, above)
  return { row = row, above = above, lines = {}, mark = nil }
end

--- Show `group` with its lines as they are now; the extmark keeps its place as text moves.
function M.show(buf, group)
  local row, above = group.row, group.above
  if group.mark then
    local pos = api.nvim_buf_get_extmark_by_id(buf, ns.tools, group.mark, { details = true })
    row, above = pos[1], pos[3] and pos[3].virt_lines_above or false
  end
  group.mark = api.nvim_buf_set_extmark(buf, ns.tools, row, 0, {
    id = group.mark, virt_lines = group.lines, virt_lines_above = above, right_gravity = false,
  })
end

return M
