"""The chat service: settings, sessions (stored or in memory), the model, and replies.

This is the core every front door shares (the LSP-framed server, ``imprintd acp``, the CLI);
it never imports one. A handler asks it for a reply, a session, a summary, a history search
or a section read, and translates the answer to its wire. See docs/architecture.md.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import gc
import logging
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec

from imprintd import messages as msg
from imprintd import session_lock
from imprintd import settings as settings_mod
from imprintd.context.history import ConversationHistory, HistoryError
from imprintd.context.originals import SectionArchive
from imprintd.context.sections import MAX_SOURCE_CHARS
from imprintd.context.usage import ContextUsage
from imprintd.conversations.compact import Compacted
from imprintd.conversations.compact import compact as compact_session
from imprintd.conversations.search import SearchPage
from imprintd.conversations.search import search as search_conversations
from imprintd.conversations.titles import clean_title
from imprintd.events import ReplyEvents, ToolStep
from imprintd.mcp.config import McpServerConfig
from imprintd.mcp.servers import START_SHARE, START_TIMEOUT_S, McpServers
from imprintd.mcp.tools import CallContext, McpTool, fitted
from imprintd.messages import Message
from imprintd.models.base import (
    Model,
    ModelError,
    RequestScope,
    ServerConnections,
    SessionStates,
    learn_window,
    server_window,
    session_requests,
    window_source,
)
from imprintd.models.identity import ModelIdentity, identify_model
from imprintd.models.on_disk import FoundModel, find_models
from imprintd.models.state_cache import delete_session_files, states_folder
from imprintd.offload import in_worker
from imprintd.private import private_folder
from imprintd.reply import ReplyContext, ReplyOutcome, ReplyRequest, next_question_usage, run_reply
from imprintd.settings import ChatSettings, Resolved
from imprintd.store import (
    ConversationStore,
    MemoryStore,
    SessionInfo,
    SessionNotFound,
    Store,
    StoredSummary,
    StoreError,
    new_session_id,
)
from imprintd.tools.base import Tool
from imprintd.tools.index import LIMITED_BY_BYTES, LIMITED_BY_FILES, LIMITED_BY_TIME, IndexLimits, WorkspaceIndex
from imprintd.tools.paths import OWN_FILES
from imprintd.tools.workspace import workspace_tools

logger = logging.getLogger(__name__)

ModelFactory = Callable[[ChatSettings], Model]

#: Settings that change which model is loaded; others apply to the next reply as they are.
_MODEL_KEYS = ("provider", "model", "base_url", "n_ctx", "reasoning")
#: Seconds shutdown waits for each model replaced on a settings change to finish closing.
RETIRE_WAIT_S = 10.0


class WorkspaceMissing(ValueError):
    """The workspace a request names cannot be used as one; the message says which and why."""


class QuestionTooLong(ValueError):
    """A question longer than section analysis reads (``MAX_SOURCE_CHARS``): refused before
    anything is stored, since no reply could read it."""


def _is_dir(path: str) -> bool:
    return Path(path).is_dir()


def workspace_folder(folder: str) -> Path:
    """``folder`` as the real folder it names, or WorkspaceMissing saying why it cannot be one.

    A path from a client is not trusted to be a path: too long for the system, holding a NUL,
    a symbolic link loop, something other than a folder. Each is refused in words (a front
    door answers -32602 naming its field), never as an internal error.
    """
    shown = _shown_path(folder)
    if "\x00" in folder:
        raise WorkspaceMissing(f"the workspace folder {shown} contains a NUL character; give the folder's path.")
    try:
        root = Path(folder).expanduser().resolve(strict=True)
    except RuntimeError:  # Python 3.11 reports a symlink loop (ELOOP) this way; so does a missing home
        raise WorkspaceMissing(f"the workspace folder {shown} cannot be resolved: a symbolic link loop.") from None
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            why = "the path is too long for this system"
        elif error.errno == errno.ELOOP:
            why = "a symbolic link loop"
        elif error.errno in (errno.ENOENT, errno.ENOTDIR):
            raise WorkspaceMissing(f"the workspace folder {shown} does not exist or is not a folder.") from None
        else:
            why = error.strerror or str(error)
        raise WorkspaceMissing(f"the workspace folder {shown} cannot be resolved: {why}.") from None
    if not root.is_dir():
        raise WorkspaceMissing(f"the workspace folder {shown} does not exist or is not a folder.")
    return root


def _shown_path(folder: str, limit: int = 120) -> str:
    """A client's path fit for an error message: control characters visible, a long one cut."""
    text = repr(folder)[1:-1] if any(ord(c) < 32 for c in folder) else folder
    return text if len(text) <= limit else f"{text[: limit - 1]}… ({len(folder):,} characters)"


#: Indexing before a reply takes at most this share of ``chat.research_time_budget``; the
#: reply then searches what is indexed, and the next one goes on indexing.
INDEX_TIME_SHARE = 0.5


def _limit_note(limited_by: str, settings: ChatSettings) -> str:
    if limited_by == LIMITED_BY_FILES:
        return f"first {settings.index_max_files:,} files of a larger folder (chat.index_max_files)"
    if limited_by == LIMITED_BY_BYTES:
        return f"first {settings.index_max_bytes:,} bytes of files of a larger folder (chat.index_max_bytes)"
    return ""


def _index_progress(events: ReplyEvents, index: WorkspaceIndex, settings: ChatSettings):
    """A progress callback for the indexing thread: reports reach the loop, a few per run."""
    last = [-1]

    def report(done: int, total: int) -> None:
        note = _limit_note(index.limited_by, settings)
        if not total:
            if note and done == 0:  # nothing changed, but the index is not the whole folder
                anyio.from_thread.run_sync(events.progress, f"Indexing the workspace: {note}, up to date", 100)
            return  # nothing changed since the last reply: nothing to show
        percentage = done * 100 // total if total else 100
        if percentage // 10 != last[0] // 10 or done == total:
            last[0] = percentage
            what = f"{note}: {done} of {total} files" if note else f"{done} of {total} files"
            anyio.from_thread.run_sync(events.progress, f"Indexing the workspace: {what}", percentage)

    return report


def _broad_folder(root: Path) -> str:
    """Which broad folder ``root`` is ("the root folder", "your home folder"); "" for any other."""
    if root == Path(root.anchor):
        return "the root folder"
    try:
        home = Path.home().resolve()
    except (RuntimeError, OSError):
        return ""
    return "your home folder" if root == home else ""


class SessionView(msgspec.Struct, frozen=True, kw_only=True):
    """A session as stored: its info, numbered messages (tool exchanges included) and summary."""

    info: SessionInfo
    messages: list[Message]
    summary: StoredSummary | None


class SectionText(msgspec.Struct, frozen=True, kw_only=True):
    """Exact characters ``start``..``end`` of an analyzed original of ``total`` characters."""

    text: str
    start: int
    end: int
    total: int


def _model_key(chat: ChatSettings) -> tuple:
    """What a model is built from: settings that differ here need another model."""
    return tuple(getattr(chat, name) for name in _MODEL_KEYS)


def _default_model_factory(chat: ChatSettings) -> Model:
    from imprintd.models.factory import create_model

    return create_model(chat)


class SessionTurns:
    """One reply at a time per session, in the order they were asked (anyio's lock is FIFO).

    This daemon's queue only: a stored session's turn across processes is ``session_lock``'s,
    taken inside this one. A session's lock exists only while a reply holds or awaits it.
    """

    def __init__(self) -> None:
        self._locks: dict[str, anyio.Lock] = {}

    @contextlib.asynccontextmanager
    async def turn(self, session_id: str) -> AsyncIterator[None]:
        lock = self._locks.setdefault(session_id, anyio.Lock())
        try:
            async with lock:
                yield
        finally:
            statistics = lock.statistics()
            if not statistics.locked and not statistics.tasks_waiting and self._locks.get(session_id) is lock:
                del self._locks[session_id]


def _less_time(settings: ChatSettings, waited: float) -> ChatSettings:
    """``settings`` with the time a reply waited for another process taken off its time budget
    (at least the setting's smallest, 1 s, is left)."""
    if waited <= 0:
        return settings
    return msgspec.structs.replace(settings, research_time_budget=max(1.0, settings.research_time_budget - waited))


@contextlib.asynccontextmanager
async def _durable_if_unanswered(store: ConversationStore) -> AsyncIterator[None]:
    """Around a reply whose question was stored without waiting for the disk: one that ends
    without an answer (failed, refused, cancelled) makes the question durable before that is
    answered, as the answer's commit would have."""
    try:
        yield
    except BaseException:
        with anyio.CancelScope(shield=True):
            try:
                await in_worker(store.make_durable)
            except StoreError as error:  # the reply's own failure is the one to answer
                logger.warning("could not make the question durable: %s", error)
        raise


class _Quiet:
    """ReplyEvents for counting what a next question would get: nothing is reported, nothing may act."""

    def tool_step(self, step: ToolStep) -> None:
        pass

    def progress(self, message: str, percentage: int | None = None) -> None:
        pass

    async def ask_permission(self, request: Any) -> Any:
        return "reject"


_QUIET: Any = _Quiet()


class Chat:
    """One per process: holds the settings, the stores and the (lazily loaded) model."""

    def __init__(
        self,
        resolved: Resolved | None = None,
        *,
        model_factory: ModelFactory = _default_model_factory,
        data_dir: Path | None = None,
    ) -> None:
        self.resolved = resolved or settings_mod.load()
        self._model_factory = model_factory
        self._model: Model | None = None
        self._model_settings: tuple | None = None
        self._model_choosing = threading.Lock()  # the loop and worker threads may ask for it at once
        self._retiring: list[threading.Thread] = []  # models replaced on a settings change, closing
        self._retired: list[weakref.ref[SessionStates]] = []  # those not freed yet (``_free_retired``)
        self._data_dir = data_dir
        self._store: Store | None = None
        self._store_opening = threading.Lock()  # worker threads may ask for it at once
        self.memory = MemoryStore()
        self.workspace: str | None = None
        self.sections = SectionArchive()
        self._indexes: dict[Path, WorkspaceIndex] = {}
        self._index_locks: dict[Path, anyio.Lock] = {}
        self._turns = SessionTurns()
        #: The MCP servers of the settings and of sessions, started when first needed; front
        #: doors ``await chat.mcp.aclose()`` before they end.
        self.mcp = McpServers()
        self.mcp.configure(self.settings.mcp_servers)

    # -- settings and parts -------------------------------------------------
    @property
    def settings(self) -> ChatSettings:
        return self.resolved.settings.chat

    def update_settings(self, resolved: Resolved) -> None:
        self.resolved = resolved
        self.mcp.configure(self.settings.mcp_servers)

    def mcp_servers_for(self, extra: tuple[McpServerConfig, ...] = ()) -> tuple[McpServerConfig, ...]:
        """The MCP servers a reply may use: the settings', then ``extra`` (a session's); a
        session's server takes the place of a configured one of the same name."""
        by_name = {server.name: server for server in (*self.settings.mcp_servers, *extra)}
        return tuple(by_name.values())

    async def mcp_tools(
        self,
        servers: tuple[McpServerConfig, ...],
        session_id: str,
        events: ReplyEvents | None,
        time_left: Callable[[], float],
    ) -> list[McpTool]:
        """The tools of ``servers`` for a reply of ``session_id``, those servers started (each
        within ``START_TIMEOUT_S`` and the reply's time); a server that fails is reported once
        through ``events`` and left out. ``events`` None: only counted, nothing reported or run."""
        if not servers:
            return []
        # Starting takes at most half of what research has left: the reply goes on without a slow one.
        timeout = max(1.0, min(START_TIMEOUT_S, time_left() * START_SHARE))
        infos = await self.mcp.tools_for(servers, session_id=session_id, events=events, timeout=timeout)
        context = CallContext(servers=self.mcp, events=events or _QUIET, session_id=session_id, time_left=time_left)
        return [McpTool(info, context) for info in infos]

    @property
    def store(self) -> Store:
        """The database, opened on first use so that ``initialize`` never waits on disk."""
        with self._store_opening:
            if self._store is None:
                path = self._data_folder() / "imprint.sqlite3"
                OWN_FILES.add(path, database=True)
                self._store = Store.open(path)
            return self._store

    def _data_folder(self) -> Path:
        return self._data_dir or settings_mod.data_dir()

    def _index_path(self) -> Path:
        folder = settings_mod.cache_dir()
        try:
            private_folder(folder)
        except OSError as error:  # IMPRINT_CACHE_DIR=/dev/null, a read-only folder
            raise StoreError(
                f"the cache folder {folder} cannot be used: {error.strerror or error}. "
                "Set IMPRINT_CACHE_DIR to a folder this user can write."
            ) from None
        path = folder / "workspace-index.sqlite3"
        OWN_FILES.add(path, database=True)
        return path

    def model(self) -> Model:
        """The chat model for the current settings; created once, recreated when they change."""
        settings = self.settings
        with self._model_choosing:
            key = _model_key(settings)
            if self._model is None or key != self._model_settings:
                retired, self._model = self._model, self._model_factory(settings)
                self._model_settings = key
                if isinstance(retired, SessionStates) and retired is not self._model:
                    self._retire(retired)
                if isinstance(retired, ServerConnections) and retired is not self._model:
                    retired.close_connections()  # once the replies still using it are done
            model = self._model
        if isinstance(model, SessionStates):
            model.set_state_limits(memory_bytes=settings.state_cache_memory, disk_bytes=settings.state_cache_disk)
        if isinstance(model, ServerConnections):
            model.set_parallel(settings.remote_parallel)
        return model

    def _model_when_asked(self) -> Callable[[], Model]:
        """``model()`` now, in the calling (worker) thread, as a call that gives its outcome later:
        building a model and trimming its saved states touch files, which the loop must not wait
        for, and a model that cannot be built fails the reply where it asks (its question kept)."""
        try:
            model = self.model()
        except Exception as error:  # noqa: BLE001 (raised again where the reply asks for it)
            failure = error

            def fail() -> Model:
                raise failure

            return fail
        return lambda: model

    def _retire(self, model: SessionStates) -> None:
        """Close a replaced model's states (memory, writer thread) off the event loop: closing
        waits for a generation still running on it and for its queued writes. Then free it
        (``_free_retired``): its weights would otherwise stay in memory after every switch."""
        retired = weakref.ref(model)
        self._retired = [ref for ref in self._retired if ref() is not None] + [retired]

        held = [model]  # the thread's only hold on it, let go before it is looked for
        del model

        def close() -> None:
            closing = held.pop()
            closing.close_states()
            del closing
            self._free_retired()

        thread = threading.Thread(target=close, name="imprintd-retire-model", daemon=True)
        thread.start()
        self._retiring = [t for t in self._retiring if t.is_alive()] + [thread]

    def _free_retired(self) -> None:
        """Free the models settings changes replaced, once nothing uses them.

        A reply's objects (its scope, loop, research) refer to one another and to the model it
        asked, so a retired model outlives its last reply until a full garbage collection,
        which a long-running daemon may not run for hours; a local model's weights are freed
        when it is (``LocalModel.load``). So one is run here while a retired model is still
        held: when it is retired, and after each reply until it is gone. Call it off the loop.
        """
        if not any(ref() is not None for ref in self._retired):
            return
        gc.collect()
        self._retired = [ref for ref in self._retired if ref() is not None]

    def model_identity(self, settings: ChatSettings | None = None) -> ModelIdentity:
        """The model ``settings`` name (the current ones by default) as clients show it, with
        its chat format and whether it reasons.

        Both are asked of the model built for those settings, which answers them without
        loading weights (a local model reads its GGUF's template). Settings that are no longer
        current (a change announced after later ones came) get a model built for the question
        alone, not kept. A model that cannot be built, or a GGUF that is not there, leaves them
        unknown rather than failing: its error comes with the first reply. A remote model says
        it reasons once its server has sent reasoning.
        """
        chat = settings or self.settings
        identity = identify_model(chat)
        if not identity.model or (chat.provider == "local" and chat.model and not Path(chat.model).is_file()):
            return identity
        try:
            model = self.model() if _model_key(chat) == _model_key(self.settings) else self._model_factory(chat)
            chat_format, reasons = model.chat_format, model.reasons
        except (ModelError, OSError, ValueError) as error:
            logger.info("the chat format of %s cannot be told yet: %s", identity.model, error)
            return identity
        return msgspec.structs.replace(
            identity,
            chat_format=chat_format,
            reasons=reasons,
            n_ctx=model.n_ctx,
            n_ctx_source=window_source(model),
            server_n_ctx=server_window(model),
        )

    async def learn_window(self) -> None:
        """Ask a served model's server for its window now (short; nothing for a local model), so
        what the model info says is the window in use. Never fails: the reply reports failures."""
        try:
            model = await in_worker(self.model)
        except ModelError:
            return
        await learn_window(model)

    def workspace_root(self, workspace: str | None) -> Path | None:
        """The folder a reply may search: ``workspace``, else the editor's; WorkspaceMissing if not a folder."""
        folder = workspace or self.workspace
        if not folder:
            return None
        return workspace_folder(folder)

    async def workspace_tools(self, workspace: str | None, events: ReplyEvents) -> list[Tool]:
        """Search and read tools over ``workspace`` (or the editor's), its index brought up to date.

        Indexing runs in a worker thread, reporting progress, so other requests keep being
        served; replies on the same workspace wait for one another's indexing.
        """
        root = await in_worker(self.workspace_root, workspace)  # resolves it: a stat of each part
        if root is None:
            return []
        index = self._indexes.get(root)
        if index is None:
            index = self._indexes[root] = WorkspaceIndex(self._index_path(), root)
        settings = self.settings
        if broad := _broad_folder(root):
            events.progress(
                f"The workspace is {broad} ({root}): Imprint searches only the first "
                f"{settings.index_max_files:,} files and {settings.index_max_bytes:,} bytes it finds there "
                "(chat.index_max_files, chat.index_max_bytes). Open a project folder for answers about one project."
            )
        lock = self._index_locks.setdefault(root, anyio.Lock())
        async with lock:
            limits = IndexLimits(
                max_files=settings.index_max_files,
                max_bytes=settings.index_max_bytes,
                deadline=time.monotonic() + settings.research_time_budget * INDEX_TIME_SHARE,
            )
            started = time.monotonic()
            stats = await anyio.to_thread.run_sync(index.update, _index_progress(events, index, settings), limits)
        if stats.limited_by == LIMITED_BY_TIME:
            events.progress(
                f"Indexing the workspace stopped after {time.monotonic() - started:.0f} s "
                f"({INDEX_TIME_SHARE:.0%} of chat.research_time_budget): this reply searches what is "
                "indexed so far, and the next one goes on indexing."
            )
        return workspace_tools(index, root)

    def close(self) -> None:
        if isinstance(self._model, SessionStates):
            self._model.close_states()  # states still queued reach the disk for the next start
        if isinstance(self._model, ServerConnections):
            self._model.close_connections()
        for thread in self._retiring:
            thread.join(RETIRE_WAIT_S)
        for index in self._indexes.values():
            index.close()
        self._indexes.clear()
        if self._store is not None:
            self._store.close()
            self._store = None

    # -- sessions -----------------------------------------------------------
    def locate(self, session_id: str) -> tuple[ConversationStore, SessionInfo]:
        """The store holding ``session_id`` and its info; raises SessionNotFound."""
        try:
            return self.memory, self.memory.session(session_id)
        except SessionNotFound:
            return self.store, self.store.session(session_id)

    def sessions(self) -> list[SessionInfo]:
        listed = self.store.sessions() + self.memory.sessions()
        return sorted(listed, key=lambda info: info.updated_at, reverse=True)

    def delete_session(self, session_id: str) -> None:
        store, _ = self.locate(session_id)
        store.delete_session(session_id)
        if store is not self.memory:
            session_lock.forget(self._data_folder(), session_id)
        # Its model states go with it: those of the model in use, and files of earlier runs.
        if isinstance(self._model, SessionStates):
            self._model.forget_session(session_id)
        delete_session_files(states_folder(settings_mod.cache_dir()), session_id)

    def session(self, session_id: str) -> SessionView:
        store, info = self.locate(session_id)
        return SessionView(info=info, messages=store.messages(info.id), summary=store.summary(info.id))

    def summary(self, session_id: str) -> StoredSummary | None:
        """The session's running summary; None before one was written."""
        store, info = self.locate(session_id)
        return store.summary(info.id)

    def search_conversations(self, query: str, **filters: Any) -> SearchPage:
        """Every stored session's messages matching ``query`` (``conversations.search``; ``stop``
        among ``filters`` ends it early); SearchError."""
        return search_conversations(self.store, query, **filters)

    def rename_session(self, session_id: str, title: str) -> SessionInfo:
        """Give the session ``title`` (ValueError when it is blank or too long); returns its info."""
        store, info = self.locate(session_id)
        return store.rename_session(info.id, clean_title(title))

    async def compact(self, session_id: str, events: ReplyEvents) -> Compacted:
        """Write the session's running summary now (``conversations.compact``), in the session's
        turn so it never interleaves with a reply; stores it and returns it. CompactFailed."""
        await in_worker(self.locate, session_id)
        async with self._turns.turn(session_id):
            store, info = await in_worker(self.locate, session_id)
            async with self._stored_turn(info.id, store):
                return await self._compact_in_turn(store, info, events)

    async def _compact_in_turn(self, store: ConversationStore, info: SessionInfo, events: ReplyEvents) -> Compacted:
        messages, state = await in_worker(lambda: (store.messages(info.id), store.summary(info.id)))
        events.begin(info.id, uuid.uuid4().hex)
        model = self.model()
        await learn_window(model, events)
        done = await compact_session(model, messages, state, events)
        if done.written and done.summary is not None:
            await in_worker(store.save_summary, info.id, done.summary)
        return done

    def models_on_disk(self) -> list[FoundModel]:
        """GGUF models on this machine (``models.on_disk``): ``chat.models_dir`` first, then where other
        tools keep theirs. Reads file headers: call it from a worker thread."""
        return find_models(self.settings.models_dir)

    def conversation_history(
        self,
        session_id: str,
        *,
        query: str | None = None,
        message: int | None = None,
        offset: int = 0,
        stop: threading.Event | None = None,
    ) -> str:
        """Search (``query``) or read one message (``message`` from ``offset``), as the model's tool does.

        HistoryError when both or neither are given, or the read is out of range. Once ``stop``
        is set (the request was cancelled), the store's reads end with ``ReadStopped``.
        """
        if (query is None) == (message is None):
            raise HistoryError("give either query (to search) or message (to read), not both")
        store, info = self.locate(session_id)
        with store.stopped_by(stop):
            history = ConversationHistory(store.messages(info.id), store.history_index(info.id))
            if query is not None:
                return history.search(query)
            assert message is not None  # one of the two, checked above
            return history.read(message, offset)

    async def context_usage(self, session_id: str, extra_servers: tuple[McpServerConfig, ...] = ()) -> ContextUsage:
        """What the session's next question would get of the context, without asking one.

        Counted by the model in use (loaded if it was not), in a worker thread, with a served
        model's window asked first. The MCP servers of the settings (and ``extra_servers``, a
        session's) are started to count what their tools would take, fitted as a reply fits them.
        """
        await self.learn_window()
        store, info = await in_worker(self.locate, session_id)
        view, summary = await in_worker(lambda: (store.view(info.id), store.summary(info.id)))
        stored = view.messages()
        settings = self.settings
        servers = self.mcp_servers_for(extra_servers)
        tools = await self.mcp_tools(servers, info.id, None, lambda: settings.research_time_budget)

        def usage() -> ContextUsage:
            model = self.model()  # builds it when the settings changed: a local one reads its GGUF
            session_folder = info.workspace if info.workspace and Path(info.workspace).is_dir() else None
            try:
                workspace = self.workspace_root(session_folder) is not None
            except WorkspaceMissing:
                workspace = False  # the question would be refused; what it would get is without tools
            offered = fitted(tools, n_ctx=model.n_ctx, count_prompt=model.count_prompt)
            return next_question_usage(
                model,
                stored=stored,
                summary=summary,
                workspace=workspace,
                max_tokens=settings.max_tokens,
                mcp_specs=[tool.spec for tool in offered],
                view=view,
            )

        return await in_worker(usage)  # builds the model, stats the folders, counts the prompt

    def read_chat_section(self, reply_id: str, source_id: str, start: int, length: int) -> SectionText:
        """Exact characters of an original a reply analyzed in sections; SectionError if gone or out of range."""
        text = self.sections.read(reply_id, source_id, start, length)
        total = self.sections.get(reply_id).length(source_id)
        return SectionText(text=text, start=start, end=start + len(text), total=total)

    # -- replies ------------------------------------------------------------
    async def reply(self, request: ReplyRequest, events: ReplyEvents) -> ReplyOutcome:
        """Answer ``request`` in its session; see ``imprintd.reply`` for the steps.

        Replies in one session take turns in the order they were asked: each question is
        stored and answered only after the one before it, so the model answering it sees the
        earlier question with its answer. One cancelled while it waits stores nothing. In a stored
        session, replies of other processes on the data folder take turns with these too
        (``session_lock``): one that waits past the time budget is refused with SessionBusy.
        """
        # Refuse a request that cannot be answered before anything is stored: a refused
        # question stores nothing.
        if len(request.text) > MAX_SOURCE_CHARS:
            raise QuestionTooLong(
                f"the question is {len(request.text):,} characters, more than the {MAX_SOURCE_CHARS:,} "
                "a reply can read (section analysis stops there); nothing was stored. "
                "Send the part that matters, or ask about a file in the workspace instead."
            )
        try:
            if request.session_id:
                # The turn is taken before anything is awaited, so replies take turns in the order
                # they were sent; an unknown session (nobody's turn ahead) is refused at once in it.
                async with self._turns.turn(request.session_id):
                    await in_worker(self.workspace_root, request.workspace)  # refused before anything is stored
                    store, _ = await in_worker(self.locate, request.session_id)
                    async with self._stored_turn(request.session_id, store) as waited:
                        self._make_way(request.session_id, store)
                        return await self._reply_in_turn(request.session_id, request, events, waited.seconds)
            root = await in_worker(self.workspace_root, request.workspace)
            store = await in_worker(lambda: self.store) if request.persist else self.memory  # opens it first
            session_id = request.new_session_id or new_session_id()
            async with self._turns.turn(session_id), self._stored_turn(session_id, store) as waited:
                self._make_way(session_id, store)
                # The session and its question in one commit (``start_session``), inside its turns,
                # not waiting for the disk: the answer's commit will (``ConversationStore``).
                info, question = await in_worker(
                    store.start_session,
                    msg.user(request.text),
                    workspace=str(root) if root else None,
                    session_id=session_id,
                    wait_for_disk=False,
                )
                return await self._reply_in_turn(
                    session_id, request, events, waited.seconds, new=(store, info, question)
                )
        finally:
            if self._retired:  # a model replaced while this reply may have held it
                with anyio.CancelScope(shield=True):
                    await in_worker(self._free_retired)

    def _make_way(self, session_id: str, store: ConversationStore) -> None:
        """In ``session_id``'s turn, before its question is stored: a local model starts keeping the
        state of the session its context holds, which this reply's first request would replace,
        while the question's commit waits on the disk (``LocalModel.make_way``)."""
        model = self._model  # as built so far: a model not loaded yet holds nothing
        if isinstance(model, SessionStates):
            model.make_way(RequestScope(session_id=session_id, persist=store is not self.memory))

    @contextlib.asynccontextmanager
    async def _stored_turn(self, session_id: str, store: ConversationStore) -> AsyncIterator[session_lock.Waited]:
        """Inside this daemon's turn (``SessionTurns``), the turn other processes on the data folder
        honour (``session_lock``): taken for a stored session only, waiting at most the reply's time
        budget; SessionBusy past it, before anything is stored."""
        if store is self.memory:  # no other process can see it
            yield session_lock.Waited()
            return
        wait_s = self.settings.research_time_budget
        async with session_lock.session_turn(self._data_folder(), session_id, wait_s) as waited:
            yield waited

    async def _reply_in_turn(
        self,
        session_id: str,
        request: ReplyRequest,
        events: ReplyEvents,
        waited: float = 0.0,
        *,
        new: tuple[ConversationStore, SessionInfo, Message] | None = None,
    ) -> ReplyOutcome:
        # ``new``: a session just stored with its question (``start_session``), as it stands.
        question: Message | None = None
        if new is not None:
            store, info, question = new
        else:
            store, info = await in_worker(self.locate, session_id)  # as it is now: earlier turns added to it
        async with _durable_if_unanswered(store):
            return await self._reply_to(store, info, question, request, events, waited)

    async def _reply_to(
        self,
        store: ConversationStore,
        info: SessionInfo,
        question: Message | None,
        request: ReplyRequest,
        events: ReplyEvents,
        waited: float,
    ) -> ReplyOutcome:
        if request.session_id and not request.workspace and info.workspace and await in_worker(_is_dir, info.workspace):
            # A follow-up researches the folder its session was started on, unless told otherwise.
            request = msgspec.structs.replace(request, workspace=info.workspace)
        reply_id = uuid.uuid4().hex
        context = ReplyContext(
            store=store,
            session=info,
            reply_id=reply_id,
            request=request,
            question=question,
            settings=_less_time(self.settings, waited),
            load_model=await in_worker(self._model_when_asked),
            sections=self.sections.open(reply_id),
            workspace_tools=functools.partial(self.workspace_tools, request.workspace),
            mcp_tools=functools.partial(self.mcp_tools, self.mcp_servers_for(request.mcp_servers), info.id),
        )
        # Every model request of this reply serves this session (the local model keeps its state).
        with session_requests(info.id, persist=store is not self.memory):
            return await run_reply(context, events)
