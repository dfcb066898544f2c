"""MCP tools in a small context: every schema against the compact pair, and whether a model that
must find its tool by description finds it.

Forty tools with real schemas are offered: ``mcp-server-git``'s 12 and
``@modelcontextprotocol/server-everything``'s 13 as the servers list them (started for real, over
stdio), and 15 of an issue tracker and a docs server written as such servers write theirs. The
embedded model counts, with its own template and tokenizer, the prompt a reply's first round
sends (system prompt, question, ``conversation_history``) with all 40 schemas against the same
prompt with ``find_tools`` and ``call_tool`` instead, as shares of 4,096- and 8,192-token windows
(the target: what the model is shown of MCP tools costs at most 10% of 4,096 tokens).

Then a scripted model, for each of the 40 tools, asks ``find_tools`` with a query made from that
tool's description (its first sentence, without the words of the tool's name: five content words,
then only two), reads the list ``find_tools`` returns and picks the first name: how often that is
the tool (top 1), and how often the tool is listed at all (within the 8 shown). Not a test: the
figures go in docs/benchmarks.md and docs/decisions.md.

    python bench/bench_mcp_tools.py
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from imprintd import messages as msg  # noqa: E402
from imprintd import prompts  # noqa: E402
from imprintd.context.history import STRATEGY_LINE, ConversationHistoryTool  # noqa: E402
from imprintd.mcp.config import McpServerConfig  # noqa: E402
from imprintd.mcp.servers import McpServers, McpToolInfo  # noqa: E402
from imprintd.mcp.tools import (  # noqa: E402
    MCP_SHARE,
    STOP_WORDS,
    CallContext,
    CallTool,
    Catalog,
    FindTools,
    McpTool,
    schema_tokens,
    tool_name,
)
from imprintd.models.embedded import embedded_model_path  # noqa: E402
from imprintd.models.local import LocalModel  # noqa: E402
from tests.mcp.servers import EVERYTHING, everything_stdio, git_repo, git_server  # noqa: E402

QUESTION = "Which commit moved billing to port 9202, and is the issue about it closed?"

TRACKER = McpServerConfig(name="tracker", transport="stdio", command="tracker-mcp")
DOCS = McpServerConfig(name="docs", transport="stdio", command="docs-mcp")


def _s(description: str, **extra) -> dict:
    return {"type": "string", "description": description, **extra}


def _i(description: str, **extra) -> dict:
    return {"type": "integer", "description": description, **extra}


#: (server, name, description, properties, required, read-only): written as issue-tracker and
#: docs servers write theirs (GitHub's, Linear's, a docs site's), schemas and all.
SYNTHETIC = [
    (
        TRACKER,
        "get_issue",
        "Get the details of an issue: title, body, state, labels, assignees and comments.",
        {"repo": _s("owner/name of the repository"), "number": _i("the issue number", minimum=1)},
        ["repo", "number"],
        True,
    ),
    (
        TRACKER,
        "list_issues",
        "List issues of a repository, filtered by state, label or assignee, newest first.",
        {
            "repo": _s("owner/name"),
            "state": _s("open, closed or all", enum=["open", "closed", "all"]),
            "labels": {"type": "array", "items": {"type": "string"}, "description": "labels every issue must have"},
            "per_page": _i("results per page", minimum=1, maximum=100),
        },
        ["repo"],
        True,
    ),
    (
        TRACKER,
        "search_issues",
        "Search issues and pull requests across repositories with a query string.",
        {"query": _s("search query, e.g. 'port is:open'"), "sort": _s("comments, created or updated")},
        ["query"],
        True,
    ),
    (
        TRACKER,
        "create_issue",
        "Open a new issue with a title, a body and optional labels.",
        {
            "repo": _s("owner/name"),
            "title": _s("issue title"),
            "body": _s("issue body in Markdown"),
            "labels": {"type": "array", "items": {"type": "string"}},
        },
        ["repo", "title"],
        False,
    ),
    (
        TRACKER,
        "add_issue_comment",
        "Add a comment to an existing issue or pull request.",
        {"repo": _s("owner/name"), "number": _i("issue number"), "body": _s("comment text")},
        ["repo", "number", "body"],
        False,
    ),
    (
        TRACKER,
        "update_issue",
        "Change an issue's state, title, body, labels or assignees.",
        {
            "repo": _s("owner/name"),
            "number": _i("issue number"),
            "state": _s("open or closed", enum=["open", "closed"]),
            "title": _s("new title"),
        },
        ["repo", "number"],
        False,
    ),
    (
        TRACKER,
        "get_pull_request",
        "Get a pull request: its description, status checks, reviewers and merge state.",
        {"repo": _s("owner/name"), "number": _i("pull request number")},
        ["repo", "number"],
        True,
    ),
    (
        TRACKER,
        "list_pull_requests",
        "List pull requests of a repository by state and base branch.",
        {"repo": _s("owner/name"), "state": _s("open, closed or all"), "base": _s("base branch name")},
        ["repo"],
        True,
    ),
    (
        TRACKER,
        "get_pull_request_diff",
        "Get the unified diff of the changes a pull request makes.",
        {"repo": _s("owner/name"), "number": _i("pull request number")},
        ["repo", "number"],
        True,
    ),
    (
        TRACKER,
        "list_releases",
        "List the releases of a repository with their tags, notes and publication dates.",
        {"repo": _s("owner/name"), "per_page": _i("results per page")},
        ["repo"],
        True,
    ),
    (
        DOCS,
        "search_docs",
        "Search the documentation site for pages matching a query and return their titles and URLs.",
        {"query": _s("words to look for"), "limit": _i("most results", minimum=1, maximum=50)},
        ["query"],
        True,
    ),
    (
        DOCS,
        "read_page",
        "Read one documentation page as Markdown, by its URL or path.",
        {"url": _s("the page's URL or path")},
        ["url"],
        True,
    ),
    (
        DOCS,
        "list_sections",
        "List the sections and subpages of the documentation's table of contents.",
        {"root": _s("a section path to start from")},
        [],
        True,
    ),
    (
        DOCS,
        "get_api_reference",
        "Get the API reference of a class, function or endpoint: signature, parameters and examples.",
        {"symbol": _s("fully qualified name, e.g. httpx.Client.get")},
        ["symbol"],
        True,
    ),
    (
        DOCS,
        "get_changelog",
        "Get the changelog entries between two versions of the project.",
        {"since": _s("first version"), "until": _s("last version")},
        ["since"],
        True,
    ),
]


def synthetic_infos() -> list[McpToolInfo]:
    return [
        McpToolInfo(
            server=server,
            name=name,
            description=description,
            input_schema={"type": "object", "properties": properties, "required": required},
            read_only=read_only,
            destructive=False,
        )
        for server, name, description, properties, required, read_only in SYNTHETIC
    ]


async def real_infos() -> tuple[list[McpToolInfo], McpServers]:
    servers = McpServers()
    repo = git_repo(Path(tempfile.mkdtemp(prefix="bench-mcp-")) / "repo")
    configs = [git_server(repo)] + ([everything_stdio()] if EVERYTHING.is_file() else [])
    infos = await servers.tools_for(configs, session_id="bench", events=None, timeout=60)
    return infos, servers


#: Words a user would not ask by: the finder's own stop words, and the ones descriptions open with.
_STOP = STOP_WORDS | {"one", "all", "any", "each", "your", "you", "can", "returns", "return", "given", "optional"}


def query_from(info: McpToolInfo, words_kept: int = 5) -> str:
    """At most ``words_kept`` content words of the description's first sentence, none from the tool's name."""
    named = {part for part in re.split(r"[_\-\s]+", info.name.lower()) if part}
    first = re.split(r"(?<=[.!?])\s", info.description.strip(), maxsplit=1)[0]
    words = [w for w in re.findall(r"[A-Za-z][A-Za-z0-9']+", first.lower()) if w not in _STOP and w not in named]
    return " ".join(words[:words_kept])


async def main() -> None:
    real, servers = await real_infos()
    try:
        infos = real + synthetic_infos()
        infos = infos[:40]
        print(
            f"{len(infos)} tools: {len(real)} from real servers, {len(infos) - len(real)} written as servers write them"
        )
        context = CallContext(servers=servers, events=None, session_id="bench", time_left=lambda: 60.0)  # type: ignore[arg-type]
        tools = [McpTool(info, context) for info in infos]
        catalog = Catalog(tools)
        pair = [FindTools(catalog).spec, CallTool(catalog).spec]
        every = [tool.spec for tool in tools]

        model = LocalModel(str(embedded_model_path()), n_ctx=8192)
        model.load()
        history = ConversationHistoryTool.spec
        system = msg.system(prompts.system_prompt(style="written", tool_lines=(STRATEGY_LINE, prompts.CITATIONS)))
        asked = [system, msg.user(QUESTION)]
        base = model.count_prompt(asked, [history])
        with_all = model.count_prompt(asked, [history, *every])
        with_pair = model.count_prompt(asked, [history, *pair])
        all_mcp, pair_mcp = schema_tokens(model.count_prompt, every), schema_tokens(model.count_prompt, pair)
        print(f"\nprompt of the first round (system, question, conversation_history): {base:,} tokens")
        print(f"{'offered':<34}{'prompt':>8}{'MCP part':>10}{'of 4,096':>10}{'of 8,192':>10}")
        for label, prompt, part in (
            ("all 40 schemas", with_all, with_all - base),
            ("find_tools + call_tool", with_pair, with_pair - base),
        ):
            print(f"{label:<34}{prompt:>8,}{part:>10,}{part / 4096:>10.1%}{part / 8192:>10.1%}")
        print(
            f"(schemas alone, counted as fitting counts them: all {all_mcp:,}, pair {pair_mcp:,}; "
            f"the share allowed: {MCP_SHARE:.0%}, {MCP_SHARE * 4096:.0f} tokens at 4,096)"
        )
        git_only = [t.spec for t in tools if t.info.server.name == "git"]
        if git_only:
            print(f"git's {len(git_only)} schemas alone: {schema_tokens(model.count_prompt, git_only):,} tokens")

        finder = FindTools(catalog)
        for words_kept in (5, 2):
            top1 = listed = 0
            misses = []
            for tool in tools:
                query = query_from(tool.info, words_kept)
                found = (await finder.run({"query": query})).text
                names = [line.split(":", 1)[0] for line in found.splitlines() if "__" in line.split(":", 1)[0]]
                wanted = tool_name(tool.info.server.name, tool.info.name)
                top1 += bool(names) and names[0] == wanted
                listed += wanted in names
                if not names or names[0] != wanted:
                    misses.append(f"  {wanted}: “{query}” → {names[0] if names else 'nothing'}")
            print(
                f"\nfinding the tool by {words_kept} words of its description: top 1 {top1}/{len(tools)} "
                f"({top1 / len(tools):.0%}), listed {listed}/{len(tools)} ({listed / len(tools):.0%})"
            )
            if misses:
                print("missed at top 1:\n" + "\n".join(misses))
    finally:
        await servers.aclose()


if __name__ == "__main__":
    anyio.run(main)
