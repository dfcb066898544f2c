"""MCP tools as research tools, without a server: names, argument checks, ``find_tools``'s
ranking, fitting, and results converted from the SDK's own types (redacted, binaries described)."""

from __future__ import annotations

import base64

import mcp.types as types
import pytest

from imprintd.mcp.config import McpServerConfig
from imprintd.mcp.servers import McpServers, McpToolInfo
from imprintd.mcp.tools import (
    CallContext,
    Catalog,
    McpTool,
    check_arguments,
    convert,
    fitted,
    tool_name,
)
from imprintd.messages import ToolOrigin
from imprintd.tools.base import ToolError
from tests.standin import StandInModel

SERVER = McpServerConfig(name="tracker", transport="stdio", command="tracker")
ORIGIN = ToolOrigin(server="tracker", tool="get_issue", arguments={"id": 7})


def tool(name: str, description: str, properties: dict | None = None, required=()) -> McpTool:
    info = McpToolInfo(
        server=SERVER,
        name=name,
        description=description,
        input_schema={"type": "object", "properties": properties or {}, "required": list(required)},
        read_only=True,
        destructive=False,
    )
    context = CallContext(servers=McpServers(), events=None, session_id="s", time_left=lambda: 60.0)  # type: ignore[arg-type]
    return McpTool(info, context)


def test_names_are_server_two_underscores_tool_in_openais_alphabet():
    assert tool_name("git", "git_log") == "git__git_log"
    assert tool_name("docs", "search.pages/v2") == "docs__search_pages_v2"
    long = tool_name("server", "x" * 100)
    assert len(long) == 64 and long.startswith("server__xxx") and long[-9] == "_"
    assert tool_name("server", "x" * 100) != tool_name("server", "x" * 99 + "y")


def test_arguments_are_checked_against_the_tools_schema():
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "state": {"enum": ["open", "closed"]},
            "labels": {"type": "array"},
            "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        },
        "required": ["id"],
        "additionalProperties": False,
    }
    check_arguments("tracker__list", {"id": 3, "state": "open", "labels": [], "limit": None}, schema)
    check_arguments("tracker__list", {"id": 3.0}, schema)  # an integral number is an integer
    for arguments, message in [
        ({}, "tracker__list needs id (an integer)"),
        ({"id": "3"}, 'tracker__list: id must be an integer, not "3"'),
        ({"id": True}, "tracker__list: id must be an integer, not true"),
        ({"id": 3, "state": "gone"}, 'tracker__list: state must be one of "open", "closed", not "gone"'),
        ({"id": 3, "colour": "red"}, "tracker__list takes only id, state, labels, limit, not colour"),
        ({"id": 3, "limit": "x"}, 'tracker__list: limit must be a value as the tool\'s schema describes, not "x"'),
    ]:
        with pytest.raises(ToolError) as refused:
            check_arguments("tracker__list", arguments, schema)
        assert str(refused.value) == message


def test_find_tools_ranks_by_the_querys_terms():
    catalog = Catalog(
        [
            tool("get_issue", "Read one issue by its number: title, body, labels and comments."),
            tool("list_issues", "List the open issues of a repository, newest first."),
            tool("search_code", "Search the repository's code for a string."),
            tool("get_pull_request", "Read a pull request: its diff and review comments."),
            tool("create_issue", "Open a new issue with a title and body."),
        ]
    )
    assert [t.info.name for t in catalog.find("read the comments of issue 12")][:2] == ["get_issue", "get_pull_request"]
    assert catalog.find("search code")[0].info.name == "search_code"
    assert catalog.find("open issues list")[0].info.name == "list_issues"
    assert catalog.find("zebra") == []


def test_fitting_keeps_schemas_under_the_share_and_gives_the_pair_above_it():
    few = [tool("get_issue", "Read one issue.", {"id": {"type": "integer"}})]
    many = [
        tool(f"tool_{n}", "Does a thing with a long description. " * 8, {"x": {"type": "string"}}) for n in range(40)
    ]
    model = StandInModel(n_ctx=4096)
    assert fitted(few, n_ctx=4096, count_prompt=model.count_prompt) == few
    pair = fitted(many, n_ctx=4096, count_prompt=model.count_prompt)
    assert [t.spec.name for t in pair] == ["find_tools", "call_tool"]
    assert fitted([], n_ctx=4096, count_prompt=model.count_prompt) == []


def test_results_join_text_describe_binaries_name_uris_and_redact_secrets():
    png = base64.b64encode(b"\x89PNG" + b"\0" * 96).decode()
    result = types.CallToolResult(
        content=[
            types.TextContent(
                type="text", text="Issue 7: deploy fails; token ghp_abcdefghijklmnopqrstuvwxyz0123456789"
            ),
            types.ImageContent(type="image", data=png, mime_type="image/png"),
            types.AudioContent(type="audio", data=png, mime_type="audio/wav"),
            types.ResourceLink(
                type="resource_link", name="log", uri="https://ci.example.com/7/log", mime_type="text/plain"
            ),
            types.EmbeddedResource(
                type="resource",
                resource=types.TextResourceContents(
                    uri="file:///r/README.md", text="Read me", mime_type="text/markdown"
                ),
            ),
            types.EmbeddedResource(
                type="resource",
                resource=types.BlobResourceContents(uri="file:///r/a.zip", blob=png, mime_type="application/zip"),
            ),
        ]
    )
    converted = convert(result, ORIGIN)
    assert converted.ok and converted.origin is not None
    assert converted.origin.uri == "https://ci.example.com/7/log"
    assert converted.text.split("\n\n") == [
        "Issue 7: deploy fails; token [REDACTED]",
        "(image, image/png, 100 bytes: not shown)",
        "(audio, audio/wav, 100 bytes: not shown)",
        "(resource log, text/plain: https://ci.example.com/7/log)",
        "(resource file:///r/README.md)\nRead me",
        "(resource file:///r/a.zip, application/zip, 100 bytes: not shown)",
    ]
    assert png not in converted.text and "ghp_" not in converted.text

    failed = convert(
        types.CallToolResult(content=[types.TextContent(type="text", text="no such issue")], is_error=True), ORIGIN
    )
    assert (failed.ok, failed.text) == (False, "tracker answered get_issue with an error: no such issue")
    structured = convert(types.CallToolResult(content=[], structured_content={"state": "open"}), ORIGIN)
    assert structured.text == '{\n "state": "open"\n}'
    empty = convert(types.CallToolResult(content=[]), ORIGIN)
    assert (empty.ok, empty.text, empty.evidence) == (True, "tracker returned nothing for get_issue.", ())


@pytest.mark.parametrize(
    ("typed", "answer"), [("y\n", "allow_once"), ("a\n", "allow_always"), ("n\n", "reject"), ("\n", "reject")]
)
async def test_ask_on_a_terminal_reads_yes_always_or_no(typed, answer, monkeypatch, capsys):
    import io

    from imprintd.cli import _PrintEvents
    from imprintd.events import PermissionRequest

    monkeypatch.setattr("sys.stdin", io.StringIO(typed))
    request = PermissionRequest(
        call_id="step-1", server="git", tool="git_commit", title="Asking git: git_commit", arguments={"message": "fix"}
    )
    assert await _PrintEvents(live=False, permission="ask").ask_permission(request) == answer
    asked = capsys.readouterr().err
    assert 'Asking git: git_commit {"message": "fix"} (may change or delete things). Run it?' in asked
    assert await _PrintEvents(live=False, permission="allow").ask_permission(request) == "allow_once"
