"""protocol.md is the contract: it must name exactly the methods the daemon registers."""

from __future__ import annotations

import re
from pathlib import Path

from imprintd import protocol as wire
from imprintd.chat import Chat
from imprintd.models.chat_formats.table import BY_NAME
from imprintd.server import build_server

DOC = (Path(__file__).parent.parent / "protocol.md").read_text(encoding="utf-8")


def documented(kind: str) -> set[str]:
    return set(re.findall(rf"^## (imprint/\w+) \({kind}", DOC, flags=re.MULTILINE))


def test_documented_requests_are_exactly_the_registered_ones():
    server = build_server(Chat())
    registered = {name for name in server.protocol.fm.features if name.startswith("imprint/")}
    assert documented("request") == registered == set(wire.REQUESTS)


def test_documented_notifications_are_exactly_the_ones_sent():
    assert documented("notification") == set(wire.NOTIFICATIONS)


def test_every_custom_method_has_an_example_exchange():
    for method in [*wire.REQUESTS, *wire.NOTIFICATIONS]:
        section = DOC.split(f"## {method} (", 1)[1].split("\n## ", 1)[0]
        assert "```" in section or method == wire.REPLY_DELTA and "replyDelta" in DOC, method


def test_the_chat_formats_documented_are_exactly_the_tables():
    """``chatFormat`` has one vocabulary (``initialize``, ``imprint/modelChanged``, ``imprint/models``):
    the chat-format table's names, which protocol.md lists."""
    listed = DOC.split("one of\nthe chat formats:", 1)[1].split("(", 1)[0]
    assert sorted(re.findall(r"`([\w.-]+)`", listed)) == sorted(BY_NAME)
    for stale in ("`chatml`", "`llama-3`"):  # the template families listed once
        assert stale not in DOC


def test_lifecycle_methods_are_documented():
    for method in ("initialize", "initialized", "shutdown", "exit", "workspace/didChangeConfiguration"):
        assert f"`{method}`" in DOC


async def test_the_failed_tool_step_example_is_what_the_daemon_sends(tmp_path):
    import json

    from imprintd.tools.base import ToolError
    from imprintd.tools.workspace import ReadFileTool

    line = next(line for line in DOC.splitlines() if '"state": "failed"' in line)
    example = json.loads(line.removeprefix("<-- "))["params"]
    tool = ReadFileTool(tmp_path)
    arguments = {"path": "../etc/passwd"}
    try:
        await tool.run(arguments)
    except ToolError as error:
        detail = f"Error: {error}"
    assert (example["title"], example["detail"]) == (tool.title(arguments), detail)


def test_the_section_retention_documented_is_the_archives():
    from imprintd.context import originals

    section = DOC.split("## imprint/read_chat_section (", 1)[1].split("\n## ", 1)[0]
    text = " ".join(section.split())
    assert f"the last {originals.ARCHIVE_REPLIES} replies" in text
    assert f"{originals.ARCHIVE_MAX_CHARS:,} characters" in text
