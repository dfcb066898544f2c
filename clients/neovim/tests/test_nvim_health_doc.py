"""`:checkhealth imprint` against the real daemon and with a missing command; the vimdoc's
helptags build without error or duplicate tag, and every command and option has its tag."""

from __future__ import annotations

import re

import pytest
from conftest import PLUGIN, copy_doc
from pynvim.api.common import NvimError


def health_report(editor) -> list[str]:
    editor.command("checkhealth imprint")
    return editor.lua("return vim.api.nvim_buf_get_lines(0, 0, -1, false)")


def test_checkhealth_reports_ok_with_the_daemon(editor):
    report = "\n".join(health_report(editor))
    (PLUGIN / "test-output").mkdir(exist_ok=True)
    (PLUGIN / "test-output" / "checkhealth.txt").write_text(report + "\n", encoding="utf-8")
    assert "ERROR" not in report, report
    assert re.search(r"OK Neovim 0\.1[1-9]", report), report
    assert re.search(r"OK `.*python.*` found: /", report), report
    assert re.search(r"OK version: imprintd \d", report), report
    assert re.search(r"OK the daemon starts and answers initialize \(imprintd \d", report), report
    assert "OK model in use: " in report and "stub" in report, report


def test_checkhealth_is_an_error_with_advice_when_cmd_is_not_found(bare_editor, options):
    bare_editor.lua("require('imprint').setup(...)", {**options, "cmd": ["imprintd-not-installed", "serve"]})
    report = "\n".join(health_report(bare_editor))
    assert "ERROR `imprintd-not-installed` (cmd[1]) is not found or not executable" in report, report
    assert "pip install imprintd" in report and "cmd = {" in report, report
    assert "answers initialize" not in report


def test_checkhealth_reports_a_refused_setting(bare_editor, options):
    bare_editor.lua("require('imprint').setup(...)", {**options, "settings": {"chat": {"n_ctx": 10}}})
    report = "\n".join(health_report(bare_editor))
    assert "OK the daemon starts and answers initialize" in report, report
    assert re.search(r"ERROR the daemon refused a setting: .*chat\.n_ctx", report), report


def test_helptags_build_without_error_and_name_every_command_and_option(bare_editor, tmp_path):
    copy = copy_doc(tmp_path)
    bare_editor.command("helptags " + str(copy / "doc"))  # E154 on a duplicate tag raises
    tags = [line.split("\t")[0] for line in (copy / "doc" / "tags").read_text().splitlines()]
    assert len(tags) == len(set(tags))
    commands = re.findall(r'command\("(\w+)"', (PLUGIN / "plugin" / "imprint.lua").read_text())
    assert commands and all(f":{name}" in tags for name in commands), (commands, tags)
    for option in (
        "cmd",
        "cmd_env",
        "root_dir",
        "log_file",
        "settings",
        "mcp_servers",
        "style",
        "persist",
        "window",
        "keymaps",
    ):
        assert f"imprint-opt-{option}" in tags
    bare_editor.command("set rtp^=" + str(copy))
    for tag in (":ImprintAsk", "imprint-health", "hl-ImprintThinking", "ImprintReplyDone"):
        bare_editor.command("help " + tag)
    with pytest.raises(NvimError):
        bare_editor.command("help imprint-no-such-tag")
