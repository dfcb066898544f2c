"""The real MCP servers tests/mcp runs, and the broken ones it writes.

``mcp-server-git`` (PyPI, in the ``test`` extra) serves a real repository made in a temporary
folder; ``@modelcontextprotocol/server-everything`` (npm, installed by ``npm ci --prefix
tests/mcp_servers``) serves over stdio and streamable HTTP. The broken servers are tiny scripts:
one that hangs before answering ``initialize``, one that exits in the middle of a call, one
that writes what is not JSON, and one built on the official SDK that asks the client to
sample and to elicit whatever the client said it supports.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from imprintd.mcp.config import McpServerConfig, parse_servers

HERE = Path(__file__).resolve().parent
EVERYTHING = (
    HERE.parent / "mcp_servers" / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
)

#: The commits of the repository ``git_repo`` makes, oldest first: (message, file, text).
COMMITS = [
    ("Add the billing service on port 8101", "billing.yaml", "name: billing\nport: 8101\n"),
    ("Move billing to port 9202 behind the gateway", "billing.yaml", "name: billing\nport: 9202\n"),
    ("Document the rollout window of 5 minutes", "DEPLOY.md", "Rollouts take 5 minutes.\n"),
]


def git_repo(root: Path) -> Path:
    """A real git repository with ``COMMITS``, authored by Ada at fixed dates."""
    root.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Ada",
        "GIT_AUTHOR_EMAIL": "ada@example.com",
        "GIT_COMMITTER_NAME": "Ada",
        "GIT_COMMITTER_EMAIL": "ada@example.com",
    }
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True, env=env)
    for day, (message, name, text) in enumerate(COMMITS, start=1):
        (root / name).write_text(text, encoding="utf-8")
        subprocess.run(["git", "-C", str(root), "add", name], check=True, env=env)
        dated = {**env, "GIT_AUTHOR_DATE": f"2026-03-0{day}T10:00:00", "GIT_COMMITTER_DATE": f"2026-03-0{day}T10:00:00"}
        subprocess.run(["git", "-C", str(root), "commit", "-q", "-m", message], check=True, env=dated)
    return root


def git_server(repo: Path, name: str = "git") -> McpServerConfig:
    """``mcp-server-git`` over stdio on ``repo``, as a user configures it."""
    (server,) = parse_servers(
        {name: {"command": sys.executable, "args": ["-m", "mcp_server_git", "--repository", str(repo)]}}
    )
    return server


def everything_stdio(name: str = "everything", env: dict[str, str] | None = None) -> McpServerConfig:
    (server,) = parse_servers({name: {"command": "node", "args": [str(EVERYTHING), "stdio"], "env": env or {}}})
    return server


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class EverythingHttp:
    """server-everything over streamable HTTP on a free loopback port, while the ``with`` lasts."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.env = env or {}

    def __enter__(self) -> EverythingHttp:
        self.port = free_port()
        self.process = subprocess.Popen(
            ["node", str(EVERYTHING), "streamableHttp"],
            env={"PATH": os.environ["PATH"], **self.env, "PORT": str(self.port)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.process.stdout is not None
        for line in self.process.stdout:  # it says so once it listens
            if "listening on port" in line:
                break
        else:
            raise RuntimeError("server-everything did not start")
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def config(self, name: str = "everything") -> McpServerConfig:
        (server,) = parse_servers({name: {"url": self.url}})
        return server

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, awaiting its parent's wait, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def processes_under(folder: Path | str) -> list[int]:
    """Live processes whose command line names something in ``folder``: a server left running."""
    found = []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                line = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if str(folder) in line and alive(pid):
            found.append(pid)
    return found


def script_server(folder: Path, name: str, source: str) -> McpServerConfig:
    """A server that is the Python script ``source``, written to ``folder``."""
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    (server,) = parse_servers({name: {"command": sys.executable, "args": [str(path)]}})
    return server


#: Reads ``initialize`` and never answers it.
HANGS_AT_INITIALIZE = """
    import sys, time
    sys.stdin.readline()
    time.sleep(3600)
"""

#: A well-behaved server until its tool is called: then it exits without answering.
#: ``PID_FILE`` (argv[1]) gets its process id, so a test can tell it is gone.
EXITS_MID_CALL = """
    import json, os, sys
    with open(sys.argv[1] if len(sys.argv) > 1 else os.devnull, "w") as f:
        f.write(str(os.getpid()))

    def send(message):
        sys.stdout.write(json.dumps(message) + "\\n")
        sys.stdout.flush()

    for line in sys.stdin:
        message = json.loads(line)
        method, id = message.get("method"), message.get("id")
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}}, "serverInfo": {"name": "flaky", "version": "1"}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": id, "result": {"tools": [{
                "name": "lookup", "description": "Look up a word.",
                "inputSchema": {"type": "object", "properties": {"word": {"type": "string"}}},
                "annotations": {"readOnlyHint": True}}]}})
        elif method == "tools/call":
            os._exit(3)
        elif id is not None:
            send({"jsonrpc": "2.0", "id": id, "result": {}})
"""

#: Answers ``initialize`` with a line that is not JSON.
WRITES_GARBAGE = """
    import sys
    sys.stdin.readline()
    sys.stdout.write("this is not JSON-RPC\\n")
    sys.stdout.flush()
    sys.stdin.read()
"""

#: Built on the official SDK: ``summarize`` asks the client to sample, ``confirm`` to elicit (both
#: whatever the client said it supports); ``wait`` answers late; ``note`` has no annotations;
#: ``grow`` adds a tool and says the list changed.
ASKER = """
    from pydantic import BaseModel

    from mcp.server.mcpserver import Context, MCPServer
    from mcp.types import SamplingMessage, TextContent, ToolAnnotations

    server = MCPServer("asker")
    READ_ONLY = ToolAnnotations(readOnlyHint=True)

    @server.tool(annotations=READ_ONLY)
    async def summarize(text: str, ctx: Context) -> str:
        \"\"\"Summarize a text by asking the client's model.\"\"\"
        try:
            await ctx.session.create_message(
                messages=[SamplingMessage(role="user", content=TextContent(type="text", text=text))], max_tokens=50
            )
        except Exception as error:
            return f"sampling declined: {error}"
        return "sampled"

    class Answer(BaseModel):
        yes: bool

    @server.tool(annotations=READ_ONLY)
    async def confirm(question: str, ctx: Context) -> str:
        \"\"\"Ask the user a yes/no question.\"\"\"
        try:
            result = await ctx.elicit(question, Answer)
        except Exception as error:
            return f"elicitation declined: {error}"
        return f"elicited: {result}"

    @server.tool(annotations=READ_ONLY)
    async def wait(seconds: float) -> str:
        \"\"\"Answer after ``seconds``.\"\"\"
        import anyio

        await anyio.sleep(seconds)
        return "waited"

    @server.tool()
    async def note(text: str) -> str:
        \"\"\"Keep a note (a tool without annotations: it may write).\"\"\"
        return "noted"

    @server.tool(annotations=READ_ONLY)
    async def grow(ctx: Context) -> str:
        \"\"\"Add the tool 'extra' and tell the client the tool list changed.\"\"\"

        def extra() -> str:
            \"\"\"A tool added while the server runs.\"\"\"
            return "extra"

        server.add_tool(extra, annotations=READ_ONLY)
        await ctx.session.send_tool_list_changed()
        return "grown"

    server.run("stdio")
"""


#: Built on the official SDK: ``page`` is read-only and reaches outside (``openWorldHint``), and
#: answers a long page (``PAGE_LINES`` lines) with a link to it and one to a URI no client should open.
DOCS = """
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ResourceLink, TextContent, ToolAnnotations

    server = MCPServer("docs")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=True))
    def page(topic: str) -> list:
        \"\"\"Fetch the documentation page of a topic from the web.\"\"\"
        lines = [f"{topic} line {number}: the billing service listens on port 8101." for number in range(PAGE_LINES)]
        return [
            TextContent(type="text", text="\\n".join(lines)),
            ResourceLink(type="resource_link", name=topic, uri=f"https://docs.example.com/{topic}"),
            ResourceLink(type="resource_link", name="run", uri="command:workbench.action.terminal.new"),
        ]

    server.run("stdio")
""".replace("PAGE_LINES", "120")
