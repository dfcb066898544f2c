"""The chat service: settings, sessions (stored or in memory), the model, and replies.

This is the core every front door shares (the LSP-framed server, ``imprintd acp``, the CLI);
it never imports one. A handler asks it for a reply, a session, a summary, a history search
or a section read, and translates the answer to its wire. See docs/architecture.md.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable
from pathlib import Path

import anyio
import msgspec

from imprintd import settings as settings_mod
from imprintd.context.history import ConversationHistory, HistoryError
from imprintd.context.sections import SectionArchive
from imprintd.context.usage import ContextUsage
from imprintd.events import ReplyEvents
from imprintd.messages import Message
from imprintd.models.base import Model
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
)
from imprintd.tools.base import Tool
from imprintd.tools.index import WorkspaceIndex
from imprintd.tools.workspace import workspace_tools

logger = logging.getLogger(__name__)

ModelFactory = Callable[[ChatSettings], Model]

#: Settings that change which model is loaded; others apply to the next reply as they are.
_MODEL_KEYS = ("provider", "model", "base_url", "n_ctx")


class WorkspaceMissing(ValueError):
    """The workspace a request names is not a folder; the message says which."""


def _index_progress(events: ReplyEvents):
    """A progress callback for the indexing thread: reports reach the loop, a few per run."""
    last = [-1]

    def report(done: int, total: int) -> None:
        if not total:
            return  # nothing changed since the last reply: nothing to show
        percentage = done * 100 // total if total else 100
        if percentage // 10 != last[0] // 10 or done == total:
            last[0] = percentage
            anyio.from_thread.run_sync(events.progress, f"Indexing the workspace: {done} of {total} files", percentage)

    return report


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


def _default_model_factory(chat: ChatSettings) -> Model:
    from imprintd.models.factory import create_model

    return create_model(chat)


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
        self._data_dir = data_dir
        self._store: Store | None = None
        self.memory = MemoryStore()
        self.workspace: str | None = None
        self.sections = SectionArchive()
        self._indexes: dict[Path, WorkspaceIndex] = {}
        self._index_locks: dict[Path, anyio.Lock] = {}

    # -- settings and parts -------------------------------------------------
    @property
    def settings(self) -> ChatSettings:
        return self.resolved.settings.chat

    def update_settings(self, resolved: Resolved) -> None:
        self.resolved = resolved

    @property
    def store(self) -> Store:
        """The database, opened on first use so that ``initialize`` never waits on disk."""
        if self._store is None:
            path = (self._data_dir or settings_mod.data_dir()) / "imprint.sqlite3"
            self._store = Store.open(path)
        return self._store

    def _index_path(self) -> Path:
        folder = settings_mod.cache_dir()
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as error:  # IMPRINT_CACHE_DIR=/dev/null, a read-only folder
            raise StoreError(
                f"the cache folder {folder} cannot be used: {error.strerror or error}. "
                "Set IMPRINT_CACHE_DIR to a folder this user can write."
            ) from None
        return folder / "workspace-index.sqlite3"

    def model(self) -> Model:
        """The chat model for the current settings; created once, recreated when they change."""
        key = tuple(getattr(self.settings, name) for name in _MODEL_KEYS)
        if self._model is None or key != self._model_settings:
            self._model = self._model_factory(self.settings)
            self._model_settings = key
        return self._model

    def workspace_root(self, workspace: str | None) -> Path | None:
        """The folder a reply may search: ``workspace``, else the editor's; WorkspaceMissing if not a folder."""
        folder = workspace or self.workspace
        if not folder:
            return None
        root = Path(folder).expanduser().resolve()
        if not root.is_dir():
            raise WorkspaceMissing(f"The workspace folder {folder} does not exist or is not a folder.")
        return root

    async def workspace_tools(self, workspace: str | None, events: ReplyEvents) -> list[Tool]:
        """Search and read tools over ``workspace`` (or the editor's), its index brought up to date.

        Indexing runs in a worker thread, reporting progress, so other requests keep being
        served; replies on the same workspace wait for one another's indexing.
        """
        root = self.workspace_root(workspace)
        if root is None:
            return []
        index = self._indexes.get(root)
        if index is None:
            index = self._indexes[root] = WorkspaceIndex(self._index_path(), root)
        lock = self._index_locks.setdefault(root, anyio.Lock())
        async with lock:
            await anyio.to_thread.run_sync(index.update, _index_progress(events))
        return workspace_tools(index, root)

    def close(self) -> None:
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

    def session(self, session_id: str) -> SessionView:
        store, info = self.locate(session_id)
        return SessionView(info=info, messages=store.messages(info.id), summary=store.summary(info.id))

    def summary(self, session_id: str) -> StoredSummary | None:
        """The session's running summary; None before one was written."""
        store, info = self.locate(session_id)
        return store.summary(info.id)

    def conversation_history(
        self, session_id: str, *, query: str | None = None, message: int | None = None, offset: int = 0
    ) -> str:
        """Search (``query``) or read one message (``message`` from ``offset``), as the model's tool does.

        HistoryError when both or neither are given, or the read is out of range.
        """
        if (query is None) == (message is None):
            raise HistoryError("give either query (to search) or message (to read), not both")
        store, info = self.locate(session_id)
        history = ConversationHistory(store.messages(info.id), store.history_index(info.id))
        if query is not None:
            return history.search(query)
        assert message is not None  # one of the two, checked above
        return history.read(message, offset)

    async def context_usage(self, session_id: str) -> ContextUsage:
        """What the session's next question would get of the context, without asking one.

        Counted by the model in use (loaded if it was not), in a worker thread.
        """
        store, info = self.locate(session_id)
        stored, summary = store.messages(info.id), store.summary(info.id)
        session_folder = info.workspace if info.workspace and Path(info.workspace).is_dir() else None
        try:
            workspace = self.workspace_root(session_folder) is not None
        except WorkspaceMissing:
            workspace = False  # the question would be refused; what it would get is without tools
        model, settings = self.model(), self.settings
        return await anyio.to_thread.run_sync(
            lambda: next_question_usage(
                model, stored=stored, summary=summary, workspace=workspace, max_tokens=settings.max_tokens
            )
        )

    def read_chat_section(self, reply_id: str, source_id: str, start: int, length: int) -> SectionText:
        """Exact characters of an original a reply analyzed in sections; SectionError if gone or out of range."""
        text = self.sections.read(reply_id, source_id, start, length)
        total = self.sections.get(reply_id).length(source_id)
        return SectionText(text=text, start=start, end=start + len(text), total=total)

    # -- replies ------------------------------------------------------------
    async def reply(self, request: ReplyRequest, events: ReplyEvents) -> ReplyOutcome:
        """Answer ``request`` in its session; see ``imprintd.reply`` for the steps."""
        root = self.workspace_root(request.workspace)  # refuse a bad request before anything is stored
        if request.session_id:
            store, info = self.locate(request.session_id)
            if not request.workspace and info.workspace and Path(info.workspace).is_dir():
                # A follow-up researches the folder its session was started on, unless told otherwise.
                request = msgspec.structs.replace(request, workspace=info.workspace)
        else:
            store = self.store if request.persist else self.memory
            info = store.create_session(workspace=str(root) if root else None, session_id=request.new_session_id)
        reply_id = uuid.uuid4().hex
        context = ReplyContext(
            store=store,
            session=info,
            reply_id=reply_id,
            request=request,
            settings=self.settings,
            load_model=self.model,
            sections=self.sections.open(reply_id),
            workspace_tools=functools.partial(self.workspace_tools, request.workspace),
        )
        return await run_reply(context, events)
