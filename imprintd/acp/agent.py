"""The ACP methods, as thin handlers over the core ``chat.Chat`` (the one the LSP server uses).

An ACP session is a stored Imprint session: ``session/new`` names it, with ``cwd`` as its
workspace, and its first ``session/prompt`` stores it (a session never asked anything leaves
nothing behind); ``session/prompt`` asks the core for a reply in it, ``session/load`` replays it,
``session/list`` and ``session/delete`` work on the same store. Nothing here decides
anything about a reply.

The MCP servers a client names in ``session/new``, ``session/load`` or ``session/resume`` are
that session's (``acp.mcp``): each of its prompts may use their tools beside those of
``chat.mcp_servers``, started when a reply first needs them and shared with other sessions that
name the same server. ``session/resume`` takes the session up again with its servers and
replays nothing; ``session/close`` ends a session's prompts and stops the servers only it used.

After ``session/new`` and ``session/load`` the agent publishes its slash commands
(``available_commands_update``, ``commands.py``); a prompt starting with one runs it instead of
asking the model. ``session_info_update`` carries the session's title: on ``session/load``, and
after a prompt that gave the session its title (its first question).

Each prompt runs as its own task. ``session/cancel`` cancels it (the core keeps the
question and stores nothing else), nothing more is sent for it, and the prompt answers
``{stopReason: "cancelled"}``. A prompt sent while another runs in the same session waits for
it (here, so that a session's first prompt stores it before the next one asks; ``Chat.reply``
takes a session's replies in turn as well), so replies in one session never interleave.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlparse

import apsw
import msgspec

from imprintd import __version__
from imprintd.acp import commands, wire
from imprintd.acp.events import SESSION_UPDATE, AcpEvents, linked_uri, source_links, stop_reason
from imprintd.acp.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, RESOURCE_NOT_FOUND, Connection, RpcError
from imprintd.acp.mcp import MCP_CAPABILITIES, session_servers
from imprintd.acp.replay import replay
from imprintd.chat import Chat, QuestionTooLong, ReplyRequest, WorkspaceMissing, workspace_folder
from imprintd.conversations.compact import CompactFailed
from imprintd.conversations.export import markdown
from imprintd.mcp.config import McpServerConfig
from imprintd.models import served
from imprintd.models.base import ModelError
from imprintd.models.identity import identify_model
from imprintd.models.on_disk import FoundModel, find_models
from imprintd.models.served import served_models
from imprintd.offload import in_worker
from imprintd.research.loop import ReplyFailed
from imprintd.store import SessionNotFound, StoreError, new_session_id

T = TypeVar("T")

logger = logging.getLogger(__name__)

#: The id of the model picker among a session's config options.
MODEL_OPTION = "model"
#: A refused choice names this many of the models offered.
OPTIONS_NAMED = 20
#: How long ``session/new`` waits for the server's model list the first time; a list that comes
#: later is offered from the next session on (and on a choice, which waits ``served.TIMEOUT_S``).
SERVED_WAIT_S = 2.0


class ServedList:
    """The ids a server lists, asked once per base URL in a thread of its own, and again on a
    choice (``refresh``). Not on every session/new: a client opens sessions often (Zed one per
    thread) while the list changes only when someone loads a model there. A failure is kept too
    (logged once), for the same reason; the picker then offers the GGUFs and the model in use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._asking: tuple[str, concurrent.futures.Future[list[str]]] | None = None

    def ids(self, base_url: str, *, refresh: bool = False) -> list[str]:
        """The ids, waiting ``SERVED_WAIT_S`` for an answer not in yet (``served.TIMEOUT_S`` on
        a ``refresh``); [] while there is none or the server could not be asked."""
        with self._lock:
            if refresh or self._asking is None or self._asking[0] != base_url:
                self._asking = (base_url, self._ask(base_url))
            future = self._asking[1]
        try:
            return future.result(timeout=served.TIMEOUT_S if refresh else SERVED_WAIT_S)
        except concurrent.futures.TimeoutError:
            logger.info("the model server at %s has not listed its models yet: the picker offers them later", base_url)
            return []
        except ModelError:
            return []

    def known(self, base_url: str) -> list[str]:
        """The ids last listed for ``base_url``, without asking; [] when none are in."""
        with self._lock:
            asking = self._asking
        if asking is None or asking[0] != base_url or not asking[1].done() or asking[1].exception() is not None:
            return []
        return asking[1].result()

    @staticmethod
    def _ask(base_url: str) -> concurrent.futures.Future[list[str]]:
        future: concurrent.futures.Future[list[str]] = concurrent.futures.Future()

        def ask() -> None:
            try:
                future.set_result(served_models(base_url))
            except ModelError as error:
                logger.warning("the model picker lists no served models: %s", error)
                future.set_exception(error)
            except Exception as error:  # noqa: BLE001 (a future must end)
                logger.warning("the model picker lists no served models: %s: %s", type(error).__name__, error)
                future.set_exception(ModelError(str(error)))

        threading.Thread(target=ask, name="imprintd-served-models", daemon=True).start()
        return future


def _model_option_alone(current: str, name: str) -> wire.ConfigOption:
    """The picker offering only the model in use."""
    return wire.ConfigOption(
        id=MODEL_OPTION,
        name="Model",
        category="model",
        current_value=current,
        options=[wire.ConfigSelectOption(value=current, name=name, description="in use")],
    )


def _model_note(model: FoundModel) -> str:
    parts = [model.quantization, f"{model.context_length:,} ctx" if model.context_length else None, model.source]
    return ", ".join(part for part in parts if part)


AGENT_CAPABILITIES = {
    "loadSession": True,
    "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
    "mcpCapabilities": MCP_CAPABILITIES,
    "sessionCapabilities": {"list": {}, "delete": {}, "resume": {}, "close": {}},
}


class Agent:
    def __init__(self, chat: Chat, connection: Connection) -> None:
        self.chat = chat
        self.connection = connection
        self._cwd: dict[str, Path] = {}  # the folder each session researches, as the client last said
        self._prompts: dict[str, list[asyncio.Task]] = {}  # running and waiting replies by session
        self._events: dict[asyncio.Task, AcpEvents] = {}  # what each of them sends
        self._unstored: set[str] = set()  # named by session/new, not yet asked anything
        self._titles: dict[str, str] = {}  # the title each session's client was last told
        self._servers: dict[str, tuple[McpServerConfig, ...]] = {}  # each session's MCP servers
        self._models: list[FoundModel] | None = None  # the chat GGUFs on this machine, found once
        self._served = ServedList()  # the ids chat.base_url's server lists, asked in the background

    @property
    def requests(self):
        return {
            "initialize": self.initialize,
            "session/new": self.new_session,
            "session/load": self.load_session,
            "session/resume": self.resume_session,
            "session/close": self.close_session,
            "session/list": self.list_sessions,
            "session/delete": self.delete_session,
            "session/prompt": self.prompt,
            "session/set_config_option": self.set_config_option,
        }

    @property
    def notifications(self):
        return {"session/cancel": self.cancel}

    # -- setup ------------------------------------------------------------------
    def initialize(self, params: wire.InitializeParams) -> wire.InitializeResult:
        client = (params.client_info or {}).get("name", "an unnamed client")
        logger.info("initialize from %s (protocol %r)", client, params.protocol_version)
        return wire.InitializeResult(
            protocol_version=wire.PROTOCOL_VERSION,
            agent_capabilities=AGENT_CAPABILITIES,
            agent_info=wire.Implementation(name="imprintd", title="Imprint", version=__version__),
            auth_methods=[],
        )

    # -- sessions ---------------------------------------------------------------
    async def new_session(self, params: wire.NewSessionParams) -> wire.NewSessionResult:
        servers = session_servers(params.mcp_servers)
        root = await in_worker(_folder, params.cwd)  # resolves it: a stat of each part
        option = await in_worker(self._model_option)
        session_id = new_session_id()
        self._unstored.add(session_id)
        self._cwd[session_id] = root
        await self._use_servers(session_id, servers)
        logger.info("session %s on %s", session_id, root)
        # After the response (sent once this returns, in the same step): the client knows the id by then.
        asyncio.get_running_loop().call_soon(self._publish_commands, session_id)
        return wire.NewSessionResult(session_id=session_id, config_options=[option])

    # -- the model picker (a config option of category "model") ------------------------
    def _model_option(self, *, ask_server: bool = False) -> wire.ConfigOption:
        """The model in use, the models ``chat.base_url``'s server lists (``models.served``),
        whatever the provider, and the GGUF chat models on this machine (``models.on_disk``), so
        either kind can be chosen at any time. The GGUFs are found once per agent: reading their
        headers takes a moment, and a new session should not wait for it. Nothing here fails a
        session: a listing that fails, or a server that is slow or hostile, leaves the model in
        use offered (``_model_option_alone``).
        Reads file headers, stats the model and may wait for the server: call it from a worker thread."""
        settings = self.chat.settings
        try:
            identity = identify_model(settings)
        except Exception as error:  # noqa: BLE001 (the picker must not cost the session)
            logger.warning("the model in use cannot be named: %s: %s", type(error).__name__, error)
            return _model_option_alone(settings.model, settings.model or "the default model")
        current = settings.model or identity.model
        try:
            if self._models is None:
                self._models = [m for m in find_models(settings.models_dir) if m.chat]
            served = self._served.ids(settings.base_url, refresh=ask_server)
        except Exception as error:  # noqa: BLE001 (the picker must not cost the session)
            logger.warning("the model picker offers only the model in use: %s: %s", type(error).__name__, error)
            return _model_option_alone(current, identity.name)
        options = [
            wire.ConfigSelectOption(value=name, name=name, description="served by chat.base_url") for name in served
        ]
        options += [
            wire.ConfigSelectOption(value=m.path, name=m.name, description=_model_note(m))
            for m in self._models
            if m.path not in served
        ]
        if current not in {option.value for option in options}:
            options.insert(0, wire.ConfigSelectOption(value=current, name=identity.name, description="in use"))
        return wire.ConfigOption(
            id=MODEL_OPTION, name="Model", category="model", current_value=current, options=options
        )

    async def set_config_option(self, params: wire.SetConfigOptionParams) -> wire.SetConfigOptionResult:
        if params.config_id != MODEL_OPTION:
            raise RpcError(
                INVALID_PARAMS, f"configId: {params.config_id!r} is not an option; the one option is 'model'."
            )
        offered = (await in_worker(lambda: self._model_option(ask_server=True))).options
        if params.value not in {option.value for option in offered}:
            listed = ", ".join(repr(option.value) for option in offered[:OPTIONS_NAMED])
            more = f" and {len(offered) - OPTIONS_NAMED:,} more" if len(offered) > OPTIONS_NAMED else ""
            raise RpcError(
                INVALID_PARAMS, f"value: {params.value!r} is not one of the models offered ({listed}{more})."
            )
        settings = self.chat.settings
        if params.value in self._served.known(settings.base_url):
            # A model the server offers: the provider becomes (or stays) openai.
            if (settings.provider, settings.model) != ("openai", params.value):
                self.chat.update_settings(
                    self.chat.resolved.apply({"chat": {"provider": "openai", "model": params.value}}, "editor")
                )
        elif params.value != settings.model and await in_worker(Path(params.value).is_file):
            self.chat.update_settings(
                self.chat.resolved.apply({"chat": {"provider": "local", "model": params.value}}, "editor")
            )
        option = await in_worker(self._model_option)
        update = wire.ConfigOptionUpdate(config_options=[option])
        asyncio.get_running_loop().call_soon(
            lambda: self.connection.notify(
                SESSION_UPDATE, wire.SessionNotification(session_id=params.session_id, update=update)
            )
        )
        return wire.SetConfigOptionResult(config_options=[option])

    async def load_session(self, params: wire.LoadSessionParams) -> None:
        servers = session_servers(params.mcp_servers)
        root = await in_worker(_folder, params.cwd)  # resolves it: a stat of each part
        if await self._is_unstored(params.session_id):
            self._cwd[params.session_id] = root
            await self._use_servers(params.session_id, servers)
            self._publish_commands(params.session_id)
            return None  # never asked anything: nothing to replay
        store, info = await _in_store(self._locate, params.session_id)
        messages = await _in_store(store.messages, info.id)
        self._cwd[info.id] = root
        await self._use_servers(info.id, servers)
        # Rendered in a worker: a session of thousands of messages is thousands of updates.
        for update in await in_worker(lambda: list(replay(messages, root))):
            self.connection.notify(SESSION_UPDATE, wire.SessionNotification(session_id=info.id, update=update))
        await self._tell_title(info.id, force=True)
        self._publish_commands(info.id)
        return None

    async def resume_session(self, params: wire.ResumeSessionParams) -> wire.ResumeSessionResult:
        """Take a session up again with the servers named now, replaying nothing (the client has
        its messages); -32002 for a session this agent neither named nor stored."""
        servers = session_servers(params.mcp_servers)
        root = await in_worker(_folder, params.cwd)  # resolves it: a stat of each part
        session_id = params.session_id
        if not await self._is_unstored(session_id):
            _, info = await _in_store(self._locate, session_id)
            session_id = info.id
        option = await in_worker(self._model_option)
        self._cwd[session_id] = root
        await self._use_servers(session_id, servers)
        logger.info("session %s resumed on %s", session_id, root)
        asyncio.get_running_loop().call_soon(self._publish_commands, session_id)
        return wire.ResumeSessionResult(config_options=[option])

    async def close_session(self, params: wire.SessionParams) -> dict:
        """End the session here: its prompts are cancelled and the servers only it used stopped.
        What is stored stays (``session/load`` or ``session/resume`` takes it up again); a session
        never asked anything is gone, as it would be at the agent's end."""
        session_id = params.session_id
        if not await self._is_unstored(session_id):
            await _in_store(self._locate, session_id)  # -32002 for a session nobody knows
        self._cancel_prompts(session_id)
        self._unstored.discard(session_id)
        self._forget(session_id)
        await self._release_servers(session_id)
        logger.info("session %s closed", session_id)
        return {}

    def _forget(self, session_id: str) -> None:
        self._cwd.pop(session_id, None)
        self._titles.pop(session_id, None)

    async def _use_servers(self, session_id: str, servers: tuple[McpServerConfig, ...]) -> None:
        """The session's MCP servers are ``servers`` from now on (its next prompt starts them).

        Those it named before and names no more are let go (``McpServers.drop``): one no other
        session uses, nor the settings, stops now rather than at the session's close."""
        dropped = [server for server in self._servers.get(session_id, ()) if server not in servers]
        if dropped:
            await self.chat.mcp.drop(dropped, session_id)
        if servers:
            self._servers[session_id] = servers
            logger.info("session %s: MCP servers %s", session_id, ", ".join(server.name for server in servers))
        else:
            self._servers.pop(session_id, None)

    async def _release_servers(self, session_id: str) -> None:
        """The session ended here: the servers it used that no other session uses (nor the
        settings) stop, and its "always" answers are forgotten (``McpServers.release``)."""
        servers = self._servers.pop(session_id, ())
        await self.chat.mcp.release((*servers, *self.chat.settings.mcp_servers), session_id=session_id)

    def _publish_commands(self, session_id: str) -> None:
        update = wire.AvailableCommandsUpdate(available_commands=list(commands.COMMANDS))
        self.connection.notify(SESSION_UPDATE, wire.SessionNotification(session_id=session_id, update=update))

    async def _tell_title(self, session_id: str, *, force: bool = False) -> None:
        """``session_info_update`` with the session's title, when the client does not have it yet."""
        try:
            _, info = await in_worker(self.chat.locate, session_id)
        except (StoreError, apsw.Error):  # deleted meanwhile, or the store failed: no title to tell
            return
        if not info.title or (not force and self._titles.get(session_id) == info.title):
            return
        self._titles[session_id] = info.title
        update = wire.SessionInfoUpdate(
            title=info.title, updated_at=datetime.fromtimestamp(info.updated_at, UTC).isoformat()
        )
        self.connection.notify(SESSION_UPDATE, wire.SessionNotification(session_id=session_id, update=update))

    async def list_sessions(self, params: wire.ListSessionsParams) -> wire.ListSessionsResult:
        if params.cursor is not None:
            raise RpcError(INVALID_PARAMS, "cursor: this agent lists every session in one page and gave no cursor.")
        wanted = await in_worker(_folder, params.cwd) if params.cwd is not None else None
        listed = []
        for info in await _in_store(self.chat.sessions):
            # ACP needs each session's folder; a session asked with none, or never asked, is left out.
            if not info.workspace or not info.message_count:
                continue
            if wanted is not None and Path(info.workspace) != wanted:
                continue
            listed.append(
                wire.SessionListing(
                    session_id=info.id,
                    cwd=info.workspace,
                    title=info.title or wire.UNSET,
                    updated_at=datetime.fromtimestamp(info.updated_at, UTC).isoformat(),
                )
            )
        return wire.ListSessionsResult(sessions=listed)

    async def delete_session(self, params: wire.SessionParams) -> dict:
        unstored = await self._is_unstored(params.session_id)
        if not unstored:
            await _in_store(self._locate, params.session_id)
        self._cancel_prompts(params.session_id)
        if not unstored:
            await _in_store(self.chat.delete_session, params.session_id)
        self._unstored.discard(params.session_id)
        self._forget(params.session_id)
        await self._release_servers(params.session_id)
        logger.info("session %s deleted", params.session_id)
        return {}

    async def _is_unstored(self, session_id: str) -> bool:
        """Named by ``session/new`` and not stored yet (its first prompt stores it)."""
        if session_id not in self._unstored:
            return False
        try:
            await in_worker(self.chat.locate, session_id)
        except SessionNotFound:
            return True
        except (StoreError, apsw.Error) as error:
            raise RpcError(INTERNAL_ERROR, f"The session store failed: {error}") from None
        self._unstored.discard(session_id)  # its first prompt stored it
        return False

    def _locate(self, session_id: str):
        try:
            return self.chat.locate(session_id)
        except SessionNotFound as error:
            raise RpcError(RESOURCE_NOT_FOUND, f"sessionId: {error}") from None
        except (StoreError, apsw.Error) as error:
            raise RpcError(INTERNAL_ERROR, f"The session store failed: {error}") from None

    # -- prompts ----------------------------------------------------------------
    def prompt(self, params: wire.PromptParams):
        """Start the prompt's task now (so a cancel right behind it finds it); answer when it ends."""
        session_id = params.session_id
        waiting = list(self._prompts.get(session_id, ()))
        reply = asyncio.ensure_future(self._prompt(params, waiting))
        self._prompts.setdefault(session_id, []).append(reply)
        return self._answer(session_id, reply)

    async def _prompt(self, params: wire.PromptParams, earlier: Sequence[asyncio.Task]):
        """The reply's outcome, or a slash command's ``PromptResult``; the session is looked up in
        the store from a worker thread (``offload``), as every store call is."""
        session_id = params.session_id
        if await self._is_unstored(session_id):
            root: Path | None = self._cwd[session_id]
        else:
            _, info = await _in_store(self._locate, session_id)
            root = self._cwd.get(info.id) or (Path(info.workspace) if info.workspace else None)
        question = question_text(params.prompt, root)
        events = AcpEvents(self.connection, session_id, root)
        task = asyncio.current_task()
        assert task is not None  # a task of prompt's
        self._events[task] = events
        command = commands.command_of(question)
        if command is not None:
            return await self._run_command(command, session_id, events)
        request = ReplyRequest(
            text=question,
            session_id=session_id,
            workspace=str(root) if root else None,
            mcp_servers=self._servers.get(session_id, ()),
        )
        return await self._reply_after(earlier, request, events)

    async def _reply_after(self, earlier: Sequence[asyncio.Task], request: ReplyRequest, events: AcpEvents):
        if earlier:
            await asyncio.wait(earlier)
        if await self._is_unstored(request.session_id or ""):
            # The session's first question: the core stores the session under the id ACP knows.
            request = msgspec.structs.replace(request, session_id=None, new_session_id=request.session_id)
        return await self.chat.reply(request, events)

    async def _answer(self, session_id: str, reply: asyncio.Task) -> wire.PromptResult:
        events: AcpEvents | None = None
        try:
            await asyncio.wait([reply])  # a cancelled reply is an answer, not an error of ours
        except asyncio.CancelledError:  # the agent is shutting down
            reply.cancel()
            raise
        finally:
            events = self._events.pop(reply, None)
            running = self._prompts.get(session_id, [])
            if reply in running:
                running.remove(reply)
            if not running:
                self._prompts.pop(session_id, None)
        if reply.cancelled():
            logger.info("prompt in session %s cancelled", session_id)
            return wire.PromptResult(stop_reason="cancelled")
        error = reply.exception()
        if error is not None:
            raise _reply_error(error)
        outcome = reply.result()
        if isinstance(outcome, wire.PromptResult):  # a slash command's
            return outcome
        assert events is not None  # registered before the reply began
        events.finish(outcome)
        await self._tell_title(session_id)
        return wire.PromptResult(stop_reason=stop_reason(outcome.stop_reason))

    # -- slash commands ---------------------------------------------------------------
    async def _run_command(self, command: str, session_id: str, events: AcpEvents) -> wire.PromptResult:
        """Run ``/command`` (``commands.py``) and answer with its result as the agent's message."""
        if await self._is_unstored(session_id):
            events.text(f"Nothing to {command} yet: this session has no messages. Ask a question first.")
            return wire.PromptResult(stop_reason="end_turn")
        store, info = await _in_store(self._locate, session_id)
        if command == "compact":
            try:
                done = await self.chat.compact(info.id, events)
            except (CompactFailed, ModelError) as error:  # said in the session; nothing was stored
                events.text(f"Compacting failed: {error}")
                return wire.PromptResult(stop_reason="end_turn")
            events.text(done.note + (f"\n\n{done.summary.text}" if done.written and done.summary else ""))
        elif command == "context":
            usage = await self.chat.context_usage(info.id)
            events.text(commands.context_text(usage))
        elif command == "sources":
            messages = await _in_store(store.messages, info.id)
            answer = next((m for m in reversed(messages) if m.role == "assistant" and m.sources), None)
            if answer is None:
                events.text("No answer in this session has sources yet.")
            else:
                events.text(f"Sources of the answer #{answer.seq}:\n")
                for link in source_links(events.root, answer.sources):
                    events.update(wire.AgentMessageChunk(content=link))
                    events.text("\n")
                unlinked = [s for s in answer.sources if s.path is None and linked_uri(s) is None]
                for source in unlinked:
                    events.text(f"[{source.number}] {source.label}\n")
        else:  # export
            view = await _in_store(self.chat.session, info.id)
            events.text(markdown(view.info, view.messages, view.summary))
        return wire.PromptResult(stop_reason="end_turn")

    def cancel(self, params: wire.SessionParams) -> None:
        if not self._cancel_prompts(params.session_id):
            logger.info("session/cancel for %s: no prompt is running", params.session_id)

    def _cancel_prompts(self, session_id: str) -> int:
        running = self._prompts.get(session_id, [])
        for reply in running:
            events = self._events.get(reply)
            if events is not None:
                events.close()  # no text after the cancel, whatever the reply reports on its way out
            reply.cancel()
        return len(running)


def question_text(blocks: Sequence[wire.ContentBlock], root: Path | None) -> str:
    """The question the core is asked: text and named links in order, attached resources after.

    Links are named by their path in the workspace (what the tools read); an embedded text
    resource (a file or selection the editor attached) follows the question with its URI.
    """
    inline: list[str] = []
    attached: list[str] = []
    for index, block in enumerate(blocks):
        if isinstance(block, wire.TextBlock):
            inline.append(block.text)
        elif isinstance(block, wire.ResourceLinkBlock):
            inline.append(f"{block.name} ({_shown_path(block.uri, root)})")
        elif isinstance(block, wire.EmbeddedResourceBlock):
            attached.append(_attachment(block.resource, root))
        else:
            kind = "image" if isinstance(block, wire.ImageBlock) else "audio"
            raise RpcError(
                INVALID_PARAMS,
                f"prompt[{index}]: {kind} content is not supported "
                "(promptCapabilities); send text, resource or resource_link blocks.",
            )
    question = _join(inline).strip()
    text = "\n\n".join(part for part in [question, *attached] if part)
    if not text.strip():
        raise RpcError(INVALID_PARAMS, "prompt: it holds no text; send at least one non-empty text or resource block.")
    return text


def _join(pieces: list[str]) -> str:
    """Pieces of one message: a line break between two that would otherwise run together.

    A space would run a path into the question's words ("see src/app.pyWhy…" or "src/app.py Why");
    a block the editor wrote with its own spacing keeps it.
    """
    joined = ""
    for piece in pieces:
        if joined and piece and not joined[-1].isspace() and not piece[0].isspace():
            joined += "\n"
        joined += piece
    return joined


def _attachment(resource: wire.ResourceContents, root: Path | None) -> str:
    where = _shown_path(resource.uri, root)
    if resource.text is not None:
        return f"Attached {where}:\n```\n{resource.text}\n```"
    kind = f" ({resource.mime_type})" if resource.mime_type else ""
    return f"Attached {where}{kind}: binary content, not read."


def _shown_path(uri: str, root: Path | None) -> str:
    """A file URI as the workspace-relative path the tools take, when it is inside the workspace."""
    try:
        parsed = urlparse(uri)
    except ValueError:  # "file://[x": shown as sent
        return uri
    if parsed.scheme != "file":
        return uri
    path = Path(unquote(parsed.path))
    fragment = f"#{parsed.fragment}" if parsed.fragment else ""
    if root is not None and path.is_relative_to(root):
        return f"{path.relative_to(root).as_posix()}{fragment}"
    return f"{path}{fragment}"


def _folder(cwd: str) -> Path:
    """``cwd`` as a resolved folder; -32602 naming it when it is not an absolute path to a folder
    (too long, a NUL, a symbolic link loop and the like included: ``chat.workspace_folder``)."""
    if not Path(cwd).is_absolute():
        raise RpcError(
            INVALID_PARAMS,
            f"cwd: {cwd[:120]!r} is not an absolute path; ACP sends the workspace folder's absolute path.",
        )
    try:
        return workspace_folder(cwd)
    except WorkspaceMissing as error:
        raise RpcError(INVALID_PARAMS, f"cwd: {error}") from None


async def _in_store(call: Callable[..., T], *args: Any) -> T:
    """``call(*args)`` in a worker thread (``offload``: a store call may wait out the busy timeout),
    its store failures as the internal error ACP clients show."""
    try:
        return await in_worker(call, *args)
    except (StoreError, apsw.Error) as error:
        raise RpcError(INTERNAL_ERROR, f"The session store failed: {error}") from None


def _reply_error(error: BaseException) -> BaseException:
    """The core's failures in words; anything else stays an internal error (logged, not shown)."""
    if isinstance(error, RpcError):  # ours already, e.g. an unknown session
        return error
    if isinstance(error, SessionNotFound):
        return RpcError(RESOURCE_NOT_FOUND, f"sessionId: {error}")
    if isinstance(error, WorkspaceMissing):
        return RpcError(INVALID_PARAMS, f"cwd: {error}")
    if isinstance(error, QuestionTooLong):
        return RpcError(INVALID_PARAMS, f"prompt: {error} (attached resources count with the text)")
    if isinstance(error, (ModelError, ReplyFailed, StoreError, apsw.Error)):
        return RpcError(INTERNAL_ERROR, str(error))
    return error
