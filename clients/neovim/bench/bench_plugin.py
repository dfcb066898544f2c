"""What the Neovim plugin costs, against the least Neovim itself must do, run side by side.

1. Streaming: 10,000 deltas of one reply through the plugin's ``imprint/replyDelta`` handler
   (into the chat buffer shown in its window, folds and all) against appending the same text
   to a plain buffer with one ``nvim_buf_set_text`` per delta and no other work. Target ≤ 2×.
2. Opening a 2,000-message session (1,000 exchanges, 300 of them with research: thinking,
   a tool call, its result) from the real daemon: end to end (request, the daemon reading
   SQLite, JSON over stdio, rendering) and the rendering alone, against writing the same lines
   with one ``nvim_buf_set_lines``. Target: end to end ≤ 1 s.

    python clients/neovim/bench/bench_plugin.py [--runs 5]

Not a test; the machine is shared, so only the ratios (medians of alternated runs) mean much.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

PLUGIN = Path(__file__).resolve().parents[1]
REPO = PLUGIN.parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(PLUGIN / "tests"))

import pynvim  # noqa: E402
from conftest import nvim_binary  # noqa: E402

from imprintd.messages import ToolCall, assistant, tool_result, user  # noqa: E402
from imprintd.store import Store  # noqa: E402

DELTAS = 10_000
MESSAGES = 2_000

STREAM = """
local n = ...
local chat, client = require('imprint.chat'), require('imprint.client')
local real_request = client.request
vim.notify = function() end
local handler = client.handlers['imprint/replyDelta']
local deltas = {}
for i = 1, n do
  deltas[i] = (i % 12 == 0) and ' word' .. i .. '.\\n' or ' word' .. i
end
_G.bench = {}
local run = 0

function _G.bench.plugin()
  run = run + 1
  local reply_id = 'reply-' .. run -- a cancelled reply's id stays refused
  chat.clear()
  client.request = function() end -- no daemon: the deltas are fed to the handler directly
  assert(chat.ask('How does the streaming cost compare?'), 'ask refused')
  assert(chat._state.reply, 'no reply')
  client.request = real_request
  local ctx = { method = 'imprint/replyDelta', client_id = 1 }
  local t0 = vim.uv.hrtime()
  for i = 1, n do
    handler(nil, { sessionId = 's', replyId = reply_id, part = 0, text = deltas[i] }, ctx)
  end
  local elapsed = vim.uv.hrtime() - t0
  chat.cancel()
  local lines = vim.api.nvim_buf_get_lines(chat.buffer(), 0, -1, false)
  assert(#lines > n / 12 and lines[#lines - 2]:find('word' .. n, 1, true), 'the deltas did not all arrive')
  return elapsed / 1e9
end

-- The baseline buffer is shown in a window too, like the chat; the chat's window stays current.
local base_buf = vim.api.nvim_create_buf(false, true)
vim.api.nvim_open_win(base_buf, false, { split = 'below', win = 0 })
function _G.bench.baseline()
  vim.api.nvim_buf_set_lines(base_buf, 0, -1, false, {})
  local row, col, one = 0, 0, {}
  local t0 = vim.uv.hrtime()
  for i = 1, n do
    local text = deltas[i]
    local lines
    if text:find('\\n', 1, true) then lines = vim.split(text, '\\n', { plain = true }) else one[1] = text lines = one end
    vim.api.nvim_buf_set_text(base_buf, row, col, row, col, lines)
    if #lines == 1 then col = col + #text else row = row + #lines - 1 col = #lines[#lines] end
  end
  local elapsed = vim.uv.hrtime() - t0
  assert(vim.api.nvim_buf_get_lines(base_buf, -2, -1, false)[1]:find('word' .. n, 1, true))
  return elapsed / 1e9
end
"""

OPEN = """
local chat, sessions = require('imprint.chat'), require('imprint.sessions')
local id = ...
local base_buf = vim.api.nvim_create_buf(false, true)

function _G.bench.open_end_to_end()
  local done
  local t0 = vim.uv.hrtime()
  sessions.open(id, function() done = vim.uv.hrtime() end)
  assert(vim.wait(60000, function() return done ~= nil end, 1), 'the session did not open')
  return (done - t0) / 1e9
end

local result
function _G.bench.fetch()
  local c = require('imprint.client').get()
  result = c:request_sync('imprint/session', { sessionId = id }, 60000).result
  return #result.messages
end

function _G.bench.open_render()
  local t0 = vim.uv.hrtime()
  chat.show_session(result)
  return (vim.uv.hrtime() - t0) / 1e9
end

function _G.bench.open_baseline()
  local lines = chat.render_session(result.messages, result.summary)
  vim.api.nvim_buf_set_lines(base_buf, 0, -1, false, {})
  local t0 = vim.uv.hrtime()
  vim.api.nvim_buf_set_lines(base_buf, 0, -1, false, lines)
  return (vim.uv.hrtime() - t0) / 1e9, #lines
end
"""


def build_session(data_dir: Path) -> str:
    """1,000 exchanges (2,000 messages): 700 direct, 300 with research in between."""
    store = Store.open(data_dir / "imprint.sqlite3")
    session = store.create_session(title="A long conversation", workspace=str(data_dir))
    messages = []
    answer = (
        "The billing service listens on port 8101 inside the cluster; the gateway reaches it "
        "through the service name.\n\n- The port is set in deploy/billing.yaml.\n"
        "- The client gives up after 7.5 seconds.\n\nSources:\n[1] deploy/billing.yaml:10-14 (file)"
    )
    research = 0
    while len(messages) < MESSAGES:
        number = len(messages) // 2
        messages.append(user(f"Question {number}: which port does billing use, and why that one?"))
        if research < 300 and number % 3 == 0:
            research += 1
            call = ToolCall(id=f"call_{number}", name="read_file", arguments={"path": "deploy/billing.yaml"})
            messages.append(assistant("Let me read the deployment first.", tool_calls=(call,)))
            messages.append(tool_result(call, "apiVersion: apps/v1\n" + "  port: 8101\n" * 40))
        messages.append(assistant(answer))
    # Count only user and final answers toward the 2,000 when research adds messages.
    store.extend(session.id, messages[:MESSAGES])
    store.close()
    return session.id


def median_pair(nvim, plugin: str, baseline: str, runs: int) -> tuple[float, float]:
    ours, base = [], []
    for _ in range(runs):
        ours.append(nvim.exec_lua(f"return _G.bench.{plugin}()"))
        base.append(nvim.exec_lua(f"return _G.bench.{baseline}()"))
    return statistics.median(ours), statistics.median(base)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        session_id = build_session(tmp_path / "data")
        env = {
            "PYTHONPATH": str(REPO),
            "IMPRINT_DATA_DIR": str(tmp_path / "data"),
            "IMPRINT_CONFIG": str(tmp_path / "config.toml"),
            "IMPRINT_CACHE_DIR": str(tmp_path / "cache"),
        }
        for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
            os.environ[name] = str(tmp_path / "xdg" / name.lower())
        nvim = pynvim.attach(
            "child",
            argv=[
                nvim_binary(),
                "--embed",
                "--headless",
                "-u",
                "NONE",
                "-i",
                "NONE",
                "--cmd",
                "set columns=160 lines=50",
            ],
        )
        try:
            nvim.command("set rtp^=" + str(PLUGIN))
            nvim.command("runtime plugin/imprint.lua")
            nvim.exec_lua(
                "require('imprint').setup(...)",
                {
                    "cmd": [sys.executable, "-m", "imprintd", "serve"],
                    "cmd_env": env,
                    "root_dir": str(tmp_path),
                    "log_file": str(tmp_path / "imprintd.log"),
                },
            )

            nvim.exec_lua(STREAM, DELTAS)
            ours, base = median_pair(nvim, "plugin", "baseline", args.runs)
            print(
                f"{DELTAS:,} deltas: plugin handler {ours * 1000:.1f} ms, one nvim_buf_set_text each "
                f"{base * 1000:.1f} ms; ratio {ours / base:.2f} (target <= 2)"
            )

            nvim.exec_lua(OPEN, session_id)
            nvim.exec_lua("require('imprint').open()")
            count = nvim.exec_lua("return _G.bench.fetch()")
            end_to_end, base = median_pair(nvim, "open_end_to_end", "open_baseline", args.runs)
            render, _ = median_pair(nvim, "open_render", "open_baseline", args.runs)
            lines = nvim.exec_lua("local _, n = _G.bench.open_baseline() return n")
            print(
                f"opening a {count:,}-message session ({lines:,} lines): end to end {end_to_end * 1000:.0f} ms "
                f"(target <= 1000), rendering {render * 1000:.1f} ms, one nvim_buf_set_lines {base * 1000:.1f} ms; "
                f"ratio end to end {end_to_end / base:.1f}, rendering {render / base:.1f}"
            )
        finally:
            nvim.exec_lua(
                "local c = require('imprint.client').get() if c then c:stop() "
                "vim.wait(5000, function() return c:is_stopped() end, 10) end"
            )
            nvim.close()


if __name__ == "__main__":
    main()
