"""The ``imprintd`` command: ``serve`` (the daemon, default), ``acp``, ``ask``, ``sessions``, ``search``,
``export``, ``models``, ``mcp``, ``config``."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from imprintd import __version__
from imprintd import settings as settings_mod
from imprintd.printable import without_controls
from imprintd.private import private_file
from imprintd.redact import MaskSecrets

DESCRIPTION = """\
Imprint's chat daemon. Editors start `imprintd serve` (or `imprintd --stdio`) like a
language server and speak JSON-RPC with LSP framing on stdin/stdout; see protocol.md.
Agent Client Protocol clients (Zed, CodeCompanion, avante) start `imprintd acp`.
From a shell, `imprintd ask "QUESTION"` answers once and prints the answer."""


def _parser() -> argparse.ArgumentParser:
    # SUPPRESS: the same options sit on every subcommand; an unset one must not erase a set one.
    common = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    common.add_argument(
        "--set",
        dest="overrides",
        action="append",
        metavar="KEY=VALUE",
        help="override a setting, e.g. --set chat.n_ctx=4096 (repeatable)",
    )
    common.add_argument("--model", help="chat.model: a GGUF path (local) or a model name (openai)")
    common.add_argument("--provider", choices=("local", "openai"), help="chat.provider")
    common.add_argument("--log-file", help="also write the log to this file")
    common.add_argument("-v", "--verbose", action="store_true", help="log debug detail to stderr")

    parser = argparse.ArgumentParser(
        prog="imprintd", description=DESCRIPTION, parents=[common], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"imprintd {__version__}")
    parser.add_argument("--stdio", action="store_true", help="serve on stdin/stdout (what LSP clients pass)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = commands.add_parser(
        "serve",
        parents=[common],
        help="run the daemon on stdin/stdout (the default)",
        description="Run the daemon: JSON-RPC with LSP framing on stdin/stdout.",
    )
    serve.add_argument("--stdio", action="store_true", help="accepted for LSP clients; stdio is the only transport")

    commands.add_parser(
        "acp",
        parents=[common],
        help="speak the Agent Client Protocol on stdin/stdout",
        description="Run as an ACP agent (Zed, CodeCompanion, avante): newline-delimited "
        "JSON-RPC on stdin/stdout, logs on stderr. Settings come from the config "
        "file, IMPRINT_* environment variables and the options below.",
    )

    ask = commands.add_parser(
        "ask",
        parents=[common],
        help="ask one question and print the answer",
        description="Ask one question; the answer streams to stdout, the session id to stderr.",
    )
    ask.add_argument("question", help="what to ask")
    ask.add_argument("--session", help="continue this session (an id from `imprintd sessions`)")
    ask.add_argument("--workspace", help="a folder the answer may search and read (e.g. --workspace .)")
    ask.add_argument("--spoken", action="store_true", help="ask for a short spoken-style answer")
    ask.add_argument("--no-persist", action="store_true", help="keep this conversation in memory only")
    ask.add_argument(
        "--allow-tools",
        action="store_true",
        help="let MCP tools that may act (not marked read-only) run without asking; without it they are "
        "asked about on a terminal (y: once, a: always this session, n: no) and refused when stdin is not one",
    )

    commands.add_parser(
        "sessions", parents=[common], help="list stored sessions", description="List stored sessions, newest first."
    )
    search = commands.add_parser(
        "search",
        parents=[common],
        help="search every stored conversation",
        description="Search every stored conversation, best match first: one line per message found "
        "(session id, message number, date, role, title, the words around the match [marked]).",
    )
    search.add_argument("query", help="words to look for (stems match: 'billing' finds 'billed')")
    search.add_argument("--workspace", help="only sessions of this folder or a folder inside it")
    search.add_argument("--since", help="only messages stored on or after this local date (YYYY-MM-DD)")
    search.add_argument("--until", help="only messages stored on or before this local date (YYYY-MM-DD)")
    search.add_argument("--limit", type=int, default=20, help="at most this many results (1-100, default 20)")
    search.add_argument("--offset", type=int, default=0, help="skip this many results (the next page)")
    search.add_argument("--json", action="store_true", help="print the result as imprint/searchConversations does")
    export = commands.add_parser(
        "export",
        parents=[common],
        help="write a stored conversation as Markdown or JSON",
        description="Write a stored conversation as Markdown (questions, answers, tool steps folded, "
        "sources as links, the running summary as a note) or JSON (what imprint/session returns).",
    )
    export.add_argument("session", help="the session's id (from `imprintd sessions` or `imprintd search`)")
    export.add_argument("--format", choices=("md", "json"), default="md", help="md (the default) or json")
    export.add_argument("-o", "--output", help="write to this file instead of stdout")
    models = commands.add_parser(
        "models",
        parents=[common],
        help="list the GGUF chat models on this machine",
        description="List the GGUF models found in chat.models_dir, LM Studio's folder, the Hugging Face "
        "cache, Ollama's store and llama.cpp's cache, read from their headers: chat models first (use one "
        "with --model PATH or the chat.model setting), then files that are not chat models, with why.",
    )
    models.add_argument("--json", action="store_true", help="print imprint/models' list as JSON")
    commands.add_parser(
        "mcp",
        parents=[common],
        help="list the MCP servers of chat.mcp_servers, their state and their tools",
        description="Start each MCP server of chat.mcp_servers, list its state and its tools (read-only "
        "ones marked), then stop it.",
    )
    commands.add_parser(
        "config",
        parents=[common],
        help="show the effective settings and where each came from",
        description="Show the effective settings, where each value came from, and the model in use.",
    )
    return parser


def _cli_values(args: argparse.Namespace) -> dict[str, str]:
    values: dict[str, str] = {}
    for item in getattr(args, "overrides", []):
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"imprintd: --set expects KEY=VALUE, got {item!r}")
        values[key.strip()] = value
    if getattr(args, "model", None) is not None:
        values["chat.model"] = args.model
    if getattr(args, "provider", None) is not None:
        values["chat.provider"] = args.provider
    return values


#: Where the remote provider's API key comes from (``models.remote.API_KEY_ENV``; not imported
#: from there so that starting the CLI does not load httpx).
API_KEY_ENV = "IMPRINT_CHAT_API_KEY"

#: Commands that run as a long-lived process an editor starts (and whose stderr it keeps).
_DAEMONS = ("serve", "acp")


def _configure_logging(args: argparse.Namespace, command: str) -> None:
    """The daemon logs what it does (editors keep its stderr); shell commands only warn.

    ``-v`` adds debug detail; ``--log-file`` also writes the log to a file, at the same level.
    """
    verbose = getattr(args, "verbose", False)
    level = logging.DEBUG if verbose else logging.INFO if command in _DAEMONS else logging.WARNING
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if getattr(args, "log_file", None):
        from imprintd.tools.paths import OWN_FILES

        # Under -v the log holds conversation text: only this user may read it, and no tool.
        try:
            private_file(Path(args.log_file))
            handlers.append(logging.FileHandler(args.log_file, encoding="utf-8"))
        except OSError as error:
            raise SystemExit(
                f"imprintd: --log-file {args.log_file} cannot be used: {error.strerror or error}"
            ) from None
        OWN_FILES.add(args.log_file)
    # The API key never reaches a log line, whoever wrote it (a server's error body can echo it).
    masking = MaskSecrets([os.environ.get(API_KEY_ENV, "")])
    for handler in handlers:
        handler.addFilter(masking)
    logging.basicConfig(level=level, handlers=handlers, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not verbose:
        logging.getLogger("pygls").setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    command = args.command or "serve"
    _configure_logging(args, command)
    resolved = settings_mod.load(_cli_values(args))
    if command == "acp":
        from imprintd.acp import serve as serve_acp
        from imprintd.chat import Chat
        from imprintd.offload import favour_the_loop

        favour_the_loop()

        for error in resolved.errors:  # no client message for it in ACP: the log says it
            logging.getLogger("imprintd.acp").error("settings: %s", error)
        return serve_acp(Chat(resolved))
    if command != "serve" and resolved.errors:
        for error in resolved.errors:
            print(f"imprintd: {error}", file=sys.stderr)
        return 2
    if command == "serve":
        # What the daemon imports (lsprotocol's types above all) lives as long as the process:
        # some 100,000 objects that the collector would walk again and again while they are
        # created, a tenth of the time to answer initialize. They are kept out of collections.
        gc.disable()
        from imprintd.chat import Chat
        from imprintd.offload import favour_the_loop
        from imprintd.server import serve

        gc.freeze()
        gc.enable()
        favour_the_loop()
        return serve(Chat(resolved))
    if command == "config":
        from imprintd.models.factory import describe_model

        print(
            settings_mod.describe(
                resolved,
                [
                    ("model in use", describe_model(resolved.settings.chat)),
                    ("chat format", _describe_format(resolved)),
                    ("config file", str(settings_mod.config_file())),
                    ("data dir", str(settings_mod.data_dir())),
                ],
            )
        )
        return 0
    if command == "sessions":
        return _sessions(resolved)
    if command == "search":
        return _search(resolved, args)
    if command == "export":
        return _export(resolved, args)
    if command == "models":
        return _models(resolved, args)
    if command == "mcp":
        return _mcp(resolved)
    return _ask(resolved, args)


def _describe_format(resolved: settings_mod.Resolved) -> str:
    """How the model writes tool calls and whether it reasons, as detected (loads no weights)."""
    from imprintd.chat import Chat

    identity = Chat(resolved).model_identity()
    if identity.chat_format is None:
        return "unknown (the model cannot be read; see the model in use)"
    if identity.chat_format == "openai":
        return "openai (the server parses tool calls; reasoning it sends as reasoning_content is kept apart)"
    thinks = "reasons before it answers" if identity.reasons else "answers without reasoning"
    return f"{identity.chat_format}; the model {thinks}"


def _sessions(resolved: settings_mod.Resolved) -> int:
    from datetime import datetime

    from imprintd.chat import Chat
    from imprintd.store import StoreError

    chat = Chat(resolved)
    try:
        try:
            listed = chat.sessions()
        except StoreError as error:  # e.g. a data dir that cannot be used: say which and why
            print(f"imprintd: {error}", file=sys.stderr)
            return 1
        if not listed:
            print('No sessions yet. Start one with: imprintd ask "QUESTION"')
        for info in listed:
            when = datetime.fromtimestamp(info.updated_at).strftime("%Y-%m-%d %H:%M")
            print(f"{info.id}  {when}  {info.message_count:>4} messages  {without_controls(info.title)}")
    finally:
        chat.close()
    return 0


def _search(resolved: settings_mod.Resolved, args: argparse.Namespace) -> int:
    from datetime import datetime

    import msgspec

    from imprintd import protocol as wire
    from imprintd.chat import Chat
    from imprintd.conversations.search import SearchError, plain
    from imprintd.store import StoreError

    chat = Chat(resolved)
    try:
        try:
            page = chat.search_conversations(
                args.query,
                workspace=args.workspace,
                since=args.since,
                until=args.until,
                limit=args.limit,
                offset=args.offset,
            )
        except (SearchError, StoreError) as error:
            print(f"imprintd: {error}", file=sys.stderr)
            return 2 if isinstance(error, SearchError) else 1
        if args.json:
            result = wire.SearchConversationsResult.from_core(args.query, page)
            print(msgspec.json.encode(result).decode())
            return 0
        if not page.hits:
            print(f"Nothing stored matches {args.query!r}.", file=sys.stderr)
            return 1
        for hit in page.hits:
            when = datetime.fromtimestamp(hit.created_at).strftime("%Y-%m-%d %H:%M")
            title, snippet = without_controls(hit.title), without_controls(plain(hit.snippet))
            print(f"{hit.session_id}  #{hit.seq:<4} {when}  {hit.role:<9} {title}  |  {snippet}")
        if page.next_offset is not None:
            print(f"(more found: --offset {page.next_offset} shows the next {args.limit})", file=sys.stderr)
    finally:
        chat.close()
    return 0


def _export(resolved: settings_mod.Resolved, args: argparse.Namespace) -> int:
    from imprintd import protocol as wire
    from imprintd.chat import Chat
    from imprintd.store import StoreError

    chat = Chat(resolved)
    try:
        try:
            view = chat.session(args.session)
        except StoreError as error:  # SessionNotFound included: it names the id
            print(f"imprintd: {error}", file=sys.stderr)
            return 1
        exported = wire.ExportResult.from_view(
            view.info, view.messages, view.summary, "markdown" if args.format == "md" else "json"
        )
    finally:
        chat.close()
    if not args.output:
        # JSON escapes control characters itself; Markdown printed keeps its lines and tabs only.
        sys.stdout.write(without_controls(exported.text, keep_lines=True))
        return 0
    try:
        Path(args.output).write_text(exported.text, encoding="utf-8")
    except OSError as error:
        print(f"imprintd: cannot write {args.output}: {error.strerror or error}", file=sys.stderr)
        return 1
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def _models(resolved: settings_mod.Resolved, args: argparse.Namespace) -> int:
    import msgspec

    from imprintd import protocol as wire
    from imprintd.models.on_disk import find_models

    found = find_models(resolved.settings.chat.models_dir)
    if args.json:
        print(msgspec.json.encode([wire.ModelOnDisk.from_core(m) for m in found]).decode())
        return 0
    if not found:
        print(
            "No GGUF models found (looked in chat.models_dir, LM Studio, the Hugging Face cache, Ollama, "
            "llama.cpp's cache). Set chat.models_dir to a folder of .gguf files.",
            file=sys.stderr,
        )
        return 1
    for model in found:
        size = f"{model.size / (1 << 30):.1f} GiB" if model.size >= 1 << 30 else f"{model.size / (1 << 20):.0f} MiB"
        if model.chat:
            context = f"{model.context_length:,} ctx" if model.context_length else "ctx ?"
            details = f"{model.quantization or '?'}, {size}, {context}, {model.chat_format}, {model.source}"
            print(f"{model.name}  ({details})\n    {model.path}")
        else:
            print(f"not a chat model: {model.name}  ({size}, {model.source}): {model.reason}\n    {model.path}")
    return 0


def _mcp(resolved: settings_mod.Resolved) -> int:
    """``imprintd mcp``: each configured server started, its state and its tools, then stopped."""
    import anyio

    from imprintd.mcp.servers import START_TIMEOUT_S, McpServers

    servers = resolved.settings.chat.mcp_servers
    if not servers:
        print(
            "No MCP servers configured. Add some to chat.mcp_servers, e.g. in config.toml:\n"
            '[chat.mcp_servers.git]\ncommand = "uvx"\nargs = ["mcp-server-git", "--repository", "."]',
            file=sys.stderr,
        )
        return 1

    async def listed():
        mcp = McpServers()
        mcp.configure(servers)
        try:
            tools = await mcp.tools_for(servers, session_id="imprintd-mcp", events=None, timeout=START_TIMEOUT_S)
            return mcp.status(), tools
        finally:
            await mcp.aclose()

    rows, tools = anyio.run(listed)
    for row in rows:
        print(f"{row.name}  {row.state}  ({row.target})" + (f": {row.detail}" if row.detail else ""))
        for tool in (tool for tool in tools if tool.server.name == row.name):
            mark = "read-only" if tool.read_only and not tool.destructive else "asks first"
            print(
                f"    {row.name}__{tool.name}  [{mark}]  {tool.description.splitlines()[0] if tool.description else ''}"
            )
    return 0 if all(row.state == "ready" for row in rows) else 1


def _ask(resolved: settings_mod.Resolved, args: argparse.Namespace) -> int:
    import os

    import anyio

    from imprintd.chat import Chat, QuestionTooLong, ReplyRequest, WorkspaceMissing
    from imprintd.models.base import ModelError
    from imprintd.research.loop import ReplyFailed
    from imprintd.store import StoreError

    chat = Chat(resolved)
    events = _PrintEvents(
        live=sys.stdout.isatty(),
        thoughts=sys.stderr.isatty(),
        permission="allow" if args.allow_tools else "ask" if sys.stdin.isatty() else "reject",
    )
    request = ReplyRequest(
        text=args.question,
        session_id=args.session,
        persist=not args.no_persist,
        style="spoken" if args.spoken else "written",
        workspace=os.path.abspath(args.workspace) if args.workspace else None,
    )

    async def reply():
        try:
            return await chat.reply(request, events)
        finally:
            await chat.mcp.aclose()  # every MCP server started for the reply stops with it

    try:
        outcome = anyio.run(reply)
    except (WorkspaceMissing, QuestionTooLong) as error:
        print(f"imprintd: {error}", file=sys.stderr)
        return 2
    except (ModelError, StoreError, ReplyFailed) as error:
        print(f"\nimprintd: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nimprintd: interrupted; the question is stored.", file=sys.stderr)
        return 130
    finally:
        chat.close()
    if outcome.text and not events.printed:
        sys.stdout.write(without_controls(outcome.text, keep_lines=True))
    elif outcome.text.startswith(events.printed) and len(outcome.text) > len(events.printed):
        # e.g. a Sources list added after the stream
        sys.stdout.write(without_controls(outcome.text[len(events.printed) :], keep_lines=True))
    sys.stdout.write("\n")
    print(f"session {outcome.session_id}", file=sys.stderr)
    return 0


#: How a reasoning model's thoughts are shown on a terminal's stderr: dimmed, under a heading.
DIM, RESET = "\x1b[2m", "\x1b[0m"


class _PrintEvents:
    """Reply text to stdout as it streams, on a terminal; progress and tool steps to stderr.

    What a model wrote is printed as text: without control characters (``printable``), so an
    answer cannot clear the terminal or move its cursor. Streamed text can turn out to be preamble (a research round that went on to call tools),
    so piped output gets only the answer, written once the reply is done. A reasoning model's
    thoughts are never on stdout: they stream dimmed to stderr when it is a terminal
    (``thoughts``), and are left out when it is not (a script reading stderr wants its lines).
    """

    def __init__(self, live: bool, thoughts: bool = False, permission: str = "reject") -> None:
        self.live = live
        self.thoughts = thoughts
        #: MCP tools that may act: "ask" on the terminal, "allow" (--allow-tools), or "reject".
        self.permission = permission
        #: What was printed of the current part.
        self.printed = ""
        #: Thoughts are being printed (their heading is out, their last line not yet ended).
        self.thinking = False

    def reasoning(self, delta: str) -> None:
        if not self.thoughts or not delta:
            return
        if not self.thinking:
            self.thinking = True
            sys.stderr.write(f"{DIM}Thinking…\n")
        sys.stderr.write(f"{DIM}{without_controls(delta, keep_lines=True)}{RESET}")
        sys.stderr.flush()

    def _end_thoughts(self) -> None:
        if self.thinking:
            self.thinking = False
            sys.stderr.write(f"{RESET}\n")
            sys.stderr.flush()

    def begin(self, session_id: str, reply_id: str) -> None:
        pass

    def text(self, delta: str) -> None:
        if delta:
            self._end_thoughts()
        if not self.live:
            return
        self.printed += delta
        sys.stdout.write(without_controls(delta, keep_lines=True))
        sys.stdout.flush()

    def text_was_preamble(self) -> None:
        self._end_thoughts()
        if self.printed:
            sys.stdout.write("\n\n")  # the answer starts on its own paragraph
            self.printed = ""

    def progress(self, message: str, percentage: int | None = None) -> None:
        self._end_thoughts()
        print(f"[{without_controls(message)}]", file=sys.stderr)

    def tool_step(self, step) -> None:
        self._end_thoughts()
        if step.state != "started":
            detail = f" - {step.detail}" if step.detail else ""
            print(without_controls(f"[{step.title}: {step.state}{detail}]"), file=sys.stderr)

    def summary(self, text: str, first_seq: int, last_seq: int) -> None:
        print(f"[summarized messages #{first_seq}-#{last_seq}]", file=sys.stderr)

    def context_usage(self, usage) -> None:
        pass  # a shell user sees the answer; `imprintd config` says the model and its window

    def notice(self, message: str) -> None:
        self._end_thoughts()
        print(f"[{message}]", file=sys.stderr)

    async def ask_permission(self, request) -> str:
        if self.permission == "allow":
            return "allow_once"
        if self.permission != "ask":
            print(
                f"[{request.title}: refused, it may act and stdin is not a terminal to ask on; "
                "--allow-tools lets it run]",
                file=sys.stderr,
            )
            return "reject"
        import json

        import anyio

        self._end_thoughts()
        shown = json.dumps(request.arguments, ensure_ascii=False)
        what = "may change or delete things" if request.destructive else "may change things"
        question = f"\n{request.title} {shown} ({what}). Run it? [y]es once, [a]lways this session, [n]o: "

        def ask() -> str:
            sys.stderr.write(question)
            sys.stderr.flush()
            answer = sys.stdin.readline().strip().lower()
            return {"y": "allow_once", "yes": "allow_once", "a": "allow_always", "always": "allow_always"}.get(
                answer, "reject"
            )

        return await anyio.to_thread.run_sync(ask, abandon_on_cancel=True)
