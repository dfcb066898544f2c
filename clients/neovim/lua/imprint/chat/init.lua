--- The chat: one markdown transcript ("## You" / "## Imprint") with the streamed reply,
--- thinking (preamble and a reasoning model's thoughts) and summary blocks as closed folds,
--- tool steps as virtual lines,
--- progress in the winbar, sources that open with <CR>/gd, and the input area.
---
--- This module is what the rest of the plugin calls; each concern lives in its own module:
---   state    what the chat holds (buffer, windows, session, the reply in flight), namespaces
---   ui       the buffer, its window and winbar, following the reply
---   folds    thinking and summary blocks as manual folds
---   steps    tool steps as virtual lines
---   reply    the reply in flight: asking, streaming notifications, the result, cancel
---   render   a stored session shown as the live chat showed it
---   sources  opening a source under the cursor, the quickfix list
---   context  what fills the model's context: the winbar's share, the :ImprintContext float
---   input    the input area, a question with a selection
---   keymaps  the buffer-local keys
local state = require("imprint.chat.state")
local ui = require("imprint.chat.ui")
local reply = require("imprint.chat.reply")
local render = require("imprint.chat.render")
local sources = require("imprint.chat.sources")
local input = require("imprint.chat.input")
local context = require("imprint.chat.context")

local M = {}

M._state = state
M.ns_tools = state.ns.tools
M.ns_blocks = state.ns.blocks
M.ns_marks = state.ns.marks
M.ns_hl = state.ns.hl

-- The buffer and its window.
M.define_highlights = ui.define_highlights
M.buffer = ui.buffer
M.open = ui.open
M.close = ui.close
M.scroll_to_end = ui.scroll_to_end
M.clear = ui.clear

-- The reply in flight and the daemon's notifications for it.
M.ask = reply.ask
M.cancel = reply.cancel
M.idle = reply.idle
M.on_delta = reply.on_delta
M.on_preamble = reply.on_preamble
M.on_reasoning = reply.on_reasoning
M.on_tool_step = reply.on_tool_step
M.on_summary = reply.on_summary
M.on_progress = reply.on_progress
M.on_daemon_exit = reply.on_daemon_exit
M.on_context_usage = reply.on_context_usage

--- The daemon named its model (initialize, imprint/modelChanged): the winbar shows it, and
--- the context share is counted again (the window or the tokenizer may have changed).
function M.on_model()
  ui.update_winbar()
  context.refresh(state.session_id)
end

--- The winbar again (the model in use has its listed name now).
M.update_winbar = ui.update_winbar

--- A session was renamed (:ImprintRename): the winbar shows its new title when the chat shows it.
function M.on_renamed(session)
  if state.session_id == session.sessionId then
    state.title = session.title
    ui.update_winbar()
  end
end

--- :ImprintCompact runs for `session_id` (`running`), or has ended: meanwhile the summary the
--- daemon sends for it belongs to no reply (a question asked meanwhile must not take its id).
function M.set_compacting(session_id, running)
  state.compacting[session_id] = running or nil
end

--- The open session's running summary was written (:ImprintCompact): the chat shows the session
--- again from the store, the summary folded before the first message it does not cover, and the
--- winbar's share is counted again. Not while a reply streams: it shows when the session is opened.
function M.show_compacted(session_id)
  if state.session_id ~= session_id or state.reply then
    return
  end
  require("imprint.client").request("imprint/session", { sessionId = session_id }, function(err, result)
    if err then
      vim.notify("imprint: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
    elseif state.session_id == session_id and not state.reply then
      render.show(result, { in_place = true })
    end
  end)
end

-- What fills the context.
M.open_context = context.open

-- Stored sessions (render_session is exposed for the benchmark).
M.render_session = render.session
M.show_session = render.show

--- The session open in the chat, or nil.
function M.session_id()
  return state.session_id
end

-- Sources.
M.source_at_cursor = sources.at_cursor
M.open_source = sources.open
M.open_source_at_cursor = sources.open_at_cursor
M.latest_sources = sources.latest
M.sources_to_quickfix = sources.to_quickfix

-- The input area.
M.open_input = input.open
M.with_selection = input.with_selection

return M
