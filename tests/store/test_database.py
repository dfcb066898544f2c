"""The SQLite store and the in-memory store (docs/architecture.md, "Storage")."""

from __future__ import annotations

import hashlib
import itertools
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import apsw
import msgspec
import pytest

from imprintd import session_view
from imprintd.context.summary import LONG_PASTE_CHARS, listable
from imprintd.messages import Message, SourceRef, ToolCall, assistant, tool_result, user
from imprintd.settings import data_dir
from imprintd.store import (
    MEMORY_MESSAGE_LIMIT,
    MEMORY_TOOL_RESULT_LIMIT,
    MIGRATIONS,
    ConversationStore,
    MemoryStore,
    SessionNotFound,
    Store,
    StoredSummary,
    StoreError,
    migrations,
)
from imprintd.store import database as store_module
from tests.helpers import connection_of, integrity_check
from tests.store.disk_syncs import counting_syncs


class Ticks:
    """A clock that moves one second per reading, so ordering never depends on real time."""

    def __init__(self) -> None:
        self._counter = itertools.count(1_000)

    def __call__(self) -> float:
        return float(next(self._counter))


@pytest.fixture
def db() -> Iterator[Store]:
    opened = Store.open(clock=Ticks())
    yield opened
    opened.close()


@pytest.fixture(params=["sqlite", "memory"])
def any_store(request) -> Iterator[ConversationStore]:
    if request.param == "memory":
        yield MemoryStore(clock=Ticks())
        return
    opened = Store.open(clock=Ticks())
    yield opened
    opened.close()


def exchange_with_tool() -> list[Message]:
    call = ToolCall(id="call_1", name="search_workspace", arguments={"query": "billing port", "limit": 3})
    return [
        user("What port does billing use?"),
        assistant("", tool_calls=(call,)),
        tool_result(call, "compose.yaml:12: billing: ports: ['8101:8101']"),
        assistant("Billing listens on 8101 (compose.yaml:12)."),
    ]


def snapshot(directory: Path) -> dict[str, tuple[int, str]]:
    return {
        str(path.relative_to(directory)): (path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest())
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


# --- behaviour both stores share ------------------------------------------------------------


def test_both_stores_implement_the_protocol(db):
    assert isinstance(db, ConversationStore)
    assert isinstance(MemoryStore(), ConversationStore)


def test_messages_round_trip_with_tool_calls_and_results(any_store):
    session = any_store.create_session(workspace="/home/u/project")
    sent = exchange_with_tool()
    acknowledged = [any_store.append(session.id, message) for message in sent]

    expected = [msgspec.structs.replace(message, seq=seq) for seq, message in enumerate(sent, start=1)]
    assert acknowledged == expected
    assert any_store.messages(session.id) == expected
    stored_call = any_store.messages(session.id)[1].tool_calls[0]
    assert stored_call.arguments == {"query": "billing port", "limit": 3}
    assert any_store.messages(session.id)[2].tool_call_id == "call_1"
    assert any_store.messages(session.id)[2].name == "search_workspace"


def test_seq_is_numbered_per_session_and_replaces_a_given_seq(any_store):
    first = any_store.create_session()
    second = any_store.create_session()
    assert [any_store.append(first.id, user(f"a{i}")).seq for i in range(3)] == [1, 2, 3]
    assert any_store.append(second.id, user("b", seq=99)).seq == 1
    assert [m.seq for m in any_store.messages(first.id)] == [1, 2, 3]
    assert [m.seq for m in any_store.messages(second.id)] == [1]


def test_concurrent_appends_get_distinct_seqs(any_store):
    session = any_store.create_session()

    def writer(name: str) -> None:
        for number in range(25):
            any_store.append(session.id, user(f"{name} {number}"))

    threads = [threading.Thread(target=writer, args=(f"t{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stored = any_store.messages(session.id)
    assert [m.seq for m in stored] == list(range(1, 101))
    assert len({m.content for m in stored}) == 100


def test_two_connections_to_one_file_number_in_turn(db):
    session = db.create_session()
    with Store.open(db.path) as other:
        assert db.append(session.id, user("a")).seq == 1
        assert other.append(session.id, user("b")).seq == 2
        assert db.append(session.id, user("c")).seq == 3
        assert [m.content for m in other.messages(session.id)] == ["a", "b", "c"]


def test_sessions_newest_updated_first(any_store):
    old = any_store.create_session(title="old")
    middle = any_store.create_session(title="middle")
    new = any_store.create_session(title="new")
    assert [s.id for s in any_store.sessions()] == [new.id, middle.id, old.id]

    any_store.append(old.id, user("bump"))
    assert [s.id for s in any_store.sessions()] == [old.id, new.id, middle.id]
    info = any_store.session(old.id)
    assert info.updated_at > info.created_at
    assert info.message_count == 1


def test_session_info(any_store):
    created = any_store.create_session(title="Ports", workspace="/w")
    assert len(created.id) == 32 and created.id != any_store.create_session().id
    assert any_store.session(created.id) == created
    assert created.persist is isinstance(any_store, Store)


def test_title_comes_from_the_first_user_message(any_store):
    session = any_store.create_session()
    any_store.append(session.id, Message(role="system", content="You are helpful."))
    assert any_store.session(session.id).title == ""
    any_store.append(session.id, user("\n  Why does the build fail?  \nHere is the log: ..."))
    any_store.append(session.id, user("A later question"))
    assert any_store.session(session.id).title == "Why does the build fail?"

    long = any_store.create_session()
    any_store.append(long.id, user("x" * 200))
    title = any_store.session(long.id).title
    assert len(title) == 80 and title.endswith("…")

    named = any_store.create_session(title="Given")
    any_store.append(named.id, user("question"))
    assert any_store.session(named.id).title == "Given"


def test_summary_save_replace_load(any_store):
    session = any_store.create_session()
    assert any_store.summary(session.id) is None
    first = StoredSummary(text="- (#1) user asked about ports", first_seq=1, last_seq=4, retry_at=None)
    any_store.save_summary(session.id, first)
    assert any_store.summary(session.id) == first

    failed = StoredSummary(text=first.text, first_seq=1, last_seq=4, retry_at=16)
    any_store.save_summary(session.id, failed)
    assert any_store.summary(session.id) == failed

    with pytest.raises(ValueError):
        any_store.save_summary(session.id, StoredSummary(text="", first_seq=5, last_seq=4))


def test_unknown_session_is_named(any_store):
    missing = "0123456789abcdef"
    calls = [
        lambda: any_store.session(missing),
        lambda: any_store.delete_session(missing),
        lambda: any_store.append(missing, user("hi")),
        lambda: any_store.messages(missing),
        lambda: any_store.summary(missing),
        lambda: any_store.save_summary(missing, StoredSummary(text="", first_seq=1, last_seq=1)),
    ]
    for call in calls:
        with pytest.raises(SessionNotFound, match=missing) as caught:
            call()
        assert caught.value.session_id == missing
        assert isinstance(caught.value, StoreError)


def test_delete_session(any_store):
    kept = any_store.create_session()
    gone = any_store.create_session()
    any_store.append(gone.id, user("bye"))
    any_store.delete_session(gone.id)
    assert [s.id for s in any_store.sessions()] == [kept.id]
    with pytest.raises(SessionNotFound):
        any_store.messages(gone.id)


# --- the SQLite store -------------------------------------------------------------------------


def test_open_uses_the_data_dir(isolated_dirs):
    assert not isolated_dirs.exists()
    with Store.open() as opened:
        assert opened.path == data_dir() / "imprint.sqlite3" == isolated_dirs / "imprint.sqlite3"
        assert opened.path.is_file()
        assert opened.path.stat().st_mode & 0o077 == 0  # conversations are private


def test_pragmas_are_set(db):
    connection = connection_of(db)
    assert connection.pragma("journal_mode") == "wal"
    assert connection.pragma("synchronous") == 2  # FULL
    assert connection.pragma("foreign_keys") == 1
    assert connection.pragma("busy_timeout") == 5_000
    assert integrity_check(db) == "ok"


def test_delete_cascades_messages_and_summary(db):
    session = db.create_session()
    other = db.create_session()
    for message in exchange_with_tool():
        db.append(session.id, message)
        db.append(other.id, message)
    db.save_summary(session.id, StoredSummary(text="s", first_seq=1, last_seq=2))
    db.save_summary(other.id, StoredSummary(text="s", first_seq=1, last_seq=2))

    def count(table: str, session_id: str) -> int:
        return (
            connection_of(db).execute(f"SELECT count(*) FROM {table} WHERE session_id = ?", (session_id,)).fetchone()[0]
        )

    assert count("messages", session.id) == 4 and count("chat_summaries", session.id) == 1
    db.delete_session(session.id)
    assert count("messages", session.id) == 0
    assert count("chat_summaries", session.id) == 0
    assert connection_of(db).execute("SELECT count(*) FROM sessions WHERE id = ?", (session.id,)).fetchone()[0] == 0
    assert count("messages", other.id) == 4 and count("chat_summaries", other.id) == 1


def test_writes_are_committed_before_returning(db):
    session = db.create_session()
    db.append(session.id, user("committed?"))
    db.save_summary(session.id, StoredSummary(text="s", first_seq=1, last_seq=1))
    assert not connection_of(db).in_transaction
    # A second connection sees the rows without the first one doing anything more.
    reader = apsw.Connection(str(db.path))
    try:
        assert reader.execute("SELECT content FROM messages").fetchall() == [("committed?",)]
        assert reader.execute("SELECT text FROM chat_summaries").fetchall() == [("s",)]
    finally:
        reader.close()


def test_reopening_keeps_data(isolated_dirs):
    with Store.open() as first:
        session = first.create_session(title="Kept", workspace="/w")
        sent = [first.append(session.id, message) for message in exchange_with_tool()]
        summary = StoredSummary(text="- (#1) ports", first_seq=1, last_seq=2, retry_at=8)
        first.save_summary(session.id, summary)
        info = first.session(session.id)
    with Store.open() as second:
        assert second.sessions() == [info]
        assert second.messages(session.id) == sent
        assert second.summary(session.id) == summary
        assert second.append(session.id, user("next")).seq == 5


def test_migrations_run_once_and_set_user_version(isolated_dirs, monkeypatch):
    with Store.open() as opened:
        assert connection_of(opened).pragma("user_version") == len(MIGRATIONS) == 7
        tables = {
            row[0] for row in connection_of(opened).execute("SELECT name FROM sqlite_schema WHERE type = 'table'")
        }
        assert {
            "sessions",
            "messages",
            "chat_summaries",
            "history_sessions",
            "history_windows",
            "history_postings",
        } <= tables

    runs: list[int] = []

    def migration_next(connection: apsw.Connection) -> None:
        runs.append(1)
        connection.execute("CREATE TABLE later (x INTEGER)")

    monkeypatch.setattr(migrations, "MIGRATIONS", [*MIGRATIONS, migration_next])
    for _ in range(2):
        with Store.open() as opened:
            assert connection_of(opened).pragma("user_version") == 8
            assert connection_of(opened).execute("SELECT count(*) FROM later").fetchone() == (0,)
    assert runs == [1]


def test_pending_migrations_share_one_transaction(isolated_dirs, monkeypatch):
    def adds_a_table(connection: apsw.Connection) -> None:
        connection.execute("CREATE TABLE half_done (x INTEGER)")

    def fails(connection: apsw.Connection) -> None:
        raise RuntimeError("migration 3 broke")

    monkeypatch.setattr(migrations, "MIGRATIONS", [*MIGRATIONS, adds_a_table, fails])
    with pytest.raises(RuntimeError, match="migration 3 broke"):
        Store.open()

    reader = apsw.Connection(str(isolated_dirs / "imprint.sqlite3"))
    try:
        assert reader.pragma("user_version") == 0
        assert reader.execute("SELECT count(*) FROM sqlite_schema").fetchone() == (0,)
    finally:
        reader.close()


def test_a_newer_database_is_refused(isolated_dirs):
    path = isolated_dirs / "imprint.sqlite3"
    with Store.open():
        pass
    writer = apsw.Connection(str(path))
    writer.pragma("user_version", 8)
    writer.close()
    before = snapshot(isolated_dirs)

    with pytest.raises(StoreError) as caught:
        Store.open()
    message = str(caught.value)
    assert str(path) in message
    assert "version 8" in message and f"up to {len(MIGRATIONS)}" in message
    assert "Upgrade imprintd" in message and "IMPRINT_DATA_DIR" in message
    assert snapshot(isolated_dirs) == before


def test_a_file_that_is_not_a_database_is_refused(isolated_dirs):
    isolated_dirs.mkdir()
    path = isolated_dirs / "imprint.sqlite3"
    path.write_bytes(b"not a database, just some text that is long enough" * 20)
    with pytest.raises(StoreError, match="IMPRINT_DATA_DIR") as caught:
        Store.open()
    assert str(path) in str(caught.value)


def test_transaction_rolls_back_on_error(db):
    session = db.create_session()
    with pytest.raises(RuntimeError), db.transaction() as connection:
        connection.execute("DELETE FROM sessions")
        raise RuntimeError("abandon")
    assert [s.id for s in db.sessions()] == [session.id]
    assert not connection_of(db).in_transaction


def test_tool_calls_are_stored_as_json(db):
    session = db.create_session()
    db.append(session.id, exchange_with_tool()[1])
    db.append(session.id, user("no calls"))
    rows = connection_of(db).execute("SELECT tool_calls FROM messages ORDER BY seq").fetchall()
    assert rows == [
        ('[{"id":"call_1","name":"search_workspace","arguments":{"query":"billing port","limit":3}}]',),
        ("[]",),
    ]


# --- the in-memory store ----------------------------------------------------------------------


def test_memory_store_keeps_the_newest_400_messages():
    memory = MemoryStore(clock=Ticks())
    session = memory.create_session()
    for number in range(1, MEMORY_MESSAGE_LIMIT + 51):
        assert memory.append(session.id, user(f"message {number}")).seq == number
    kept = memory.messages(session.id)
    assert len(kept) == MEMORY_MESSAGE_LIMIT == 400
    assert [m.seq for m in kept] == list(range(51, 451))
    assert kept[0].content == "message 51"
    assert memory.session(session.id).message_count == 400
    assert memory.append(session.id, user("next")).seq == 451


def test_memory_store_clips_tool_results():
    memory = MemoryStore()
    session = memory.create_session()
    call = ToolCall(id="c", name="read_file")
    long = "".join(f"line {i}\n" for i in range(2_000))
    stored = memory.append(session.id, tool_result(call, long))
    assert len(stored.content) == MEMORY_TOOL_RESULT_LIMIT == 4_000
    assert long.startswith(stored.content.rsplit("\n[clipped", 1)[0])
    assert f"{len(long):,} characters" in stored.content
    assert memory.messages(session.id)[-1] == stored

    exact = "y" * 4_000
    assert memory.append(session.id, tool_result(call, exact)).content == exact
    # Only tool results are clipped.
    assert memory.append(session.id, user(long)).content == long


def test_memory_store_does_not_touch_the_data_dir(isolated_dirs):
    def exercise(memory: MemoryStore) -> None:
        session = memory.create_session(title="voice")
        for message in exchange_with_tool():
            memory.append(session.id, message)
        memory.save_summary(session.id, StoredSummary(text="s", first_seq=1, last_seq=2))
        memory.messages(session.id)
        memory.sessions()
        memory.delete_session(session.id)

    exercise(MemoryStore())
    assert not isolated_dirs.exists()

    with Store.open() as persistent:
        persistent.append(persistent.create_session().id, user("on disk"))
    before = snapshot(isolated_dirs)
    assert before
    exercise(MemoryStore())
    assert snapshot(isolated_dirs) == before


def test_memory_sessions_are_not_in_the_database(db):
    memory = MemoryStore()
    ephemeral = memory.create_session()
    assert ephemeral.persist is False
    assert db.sessions() == []
    with pytest.raises(SessionNotFound):
        db.session(ephemeral.id)


def test_extend_stores_all_messages_in_one_transaction_or_none(isolated_dirs):
    with Store.open() as store:
        session = store.create_session()
        stored = store.extend(session.id, [user("q"), assistant("a")])
        assert [m.seq for m in stored] == [1, 2]
        bad = Message(role="narrator", content="x")  # refused by the schema's CHECK
        with pytest.raises(apsw.ConstraintError):
            store.extend(session.id, [assistant("kept?"), bad])
        assert [m.content for m in store.messages(session.id)] == ["q", "a"]
        assert store.session(session.id).title == "q"


def test_memory_extend_numbers_and_titles_like_append():
    memory = MemoryStore()
    session = memory.create_session()
    stored = memory.extend(session.id, [user("first line\nmore"), assistant("a")])
    assert [m.seq for m in stored] == [1, 2]
    assert memory.session(session.id).title == "first line" and memory.session(session.id).message_count == 2


# --- an answer's sources -----------------------------------------------------------------------

SOURCES = (
    SourceRef(
        number=3,
        kind="file",
        label="deploy/billing.yaml:1–4",
        path="deploy/billing.yaml",
        start_line=1,
        end_line=4,
        supported=False,
        reason="The cited text shares no number …",
    ),
    SourceRef(number=5, kind="message", label="message #1", message=1, cited=False, supported=None),
)


def test_an_answer_keeps_its_sources_in_both_stores(any_store):
    session = any_store.create_session()
    any_store.append(session.id, user("Which port?"))
    stored = any_store.append(session.id, assistant("8101 [3].", sources=SOURCES))
    assert stored.sources == SOURCES
    assert [m.sources for m in any_store.messages(session.id)] == [(), SOURCES]


def test_sources_survive_reopening(isolated_dirs):
    with Store.open() as first:
        session = first.create_session()
        first.extend(session.id, [user("Which port?"), assistant("8101 [3].", sources=SOURCES)])
    with Store.open() as second:
        assert second.messages(session.id)[-1].sources == SOURCES


def test_a_database_from_before_sources_is_migrated_and_its_answers_have_none(isolated_dirs, monkeypatch):
    monkeypatch.setattr(migrations, "MIGRATIONS", MIGRATIONS[:2])
    with Store.open() as old:
        session = old.create_session()
        connection_of(old).execute(
            "INSERT INTO messages (session_id, seq, role, content, created_at) VALUES (?, 1, 'assistant', 'old', 1.0)",
            (session.id,),
        )
    monkeypatch.setattr(migrations, "MIGRATIONS", MIGRATIONS)
    with Store.open() as upgraded:
        assert connection_of(upgraded).pragma("user_version") == len(MIGRATIONS)
        assert [(m.content, m.sources) for m in upgraded.messages(session.id)] == [("old", ())]
        upgraded.append(session.id, assistant("new", sources=SOURCES))
        assert upgraded.messages(session.id)[-1].sources == SOURCES


def test_what_the_model_saw_and_its_reasoning_are_kept_in_both_stores(any_store):
    session = any_store.create_session()
    shown = assistant("8101 [1].\n\nSources:\n[1] a.py:1-2")
    seen = Message(role="assistant", content=shown.content, model_text="8101 [1].", reasoning="The port is 8101.")
    any_store.append(session.id, user("Which port?"))
    stored = any_store.append(session.id, seen)
    assert (stored.model_text, stored.reasoning, stored.prompt_content) == (
        "8101 [1].",
        "The port is 8101.",
        "8101 [1].",
    )
    assert any_store.messages(session.id)[-1] == stored
    assert any_store.messages(session.id)[0].prompt_content == "Which port?"


def test_a_database_from_before_model_text_is_migrated_with_none(isolated_dirs, monkeypatch):
    monkeypatch.setattr(migrations, "MIGRATIONS", MIGRATIONS[:3])
    with Store.open() as old:
        session = old.create_session()
        connection_of(old).execute(
            "INSERT INTO messages (session_id, seq, role, content, created_at) VALUES (?, 1, 'assistant', 'old', 1.0)",
            (session.id,),
        )
    monkeypatch.setattr(migrations, "MIGRATIONS", MIGRATIONS)
    with Store.open() as upgraded:
        [message] = upgraded.messages(session.id)
        assert (message.content, message.model_text, message.reasoning) == ("old", None, "")


def is_user(message: Message) -> bool:
    return message.role == "user"


def every(message: Message) -> bool:
    return True


def listing_session(store: ConversationStore) -> str:
    """A paste, a short question, a first look, a search of the model's own, in that order."""
    session = store.create_session()
    look = ToolCall(id="call_look_1", name="search", arguments={"query": "port"})
    own = ToolCall(id="call_1", name="search", arguments={"query": "billing port"})
    store.extend(
        session.id,
        [
            user("x" * 1_001),  # 1: a paste
            assistant("Noted."),  # 2
            user("What port?"),  # 3: too short to list
            assistant("", tool_calls=(look,)),  # 4
            tool_result(look, "first look's hits"),  # 5
            assistant("", tool_calls=(own,)),  # 6
            tool_result(own, "compose.yaml:12: 8101"),  # 7
            assistant("8101."),  # 8
            user("é" * 600),  # 9: 1,200 bytes but 600 characters, not a paste
        ],
    )
    return session.id


def test_messages_after_a_number_are_the_tail(any_store):
    sid = listing_session(any_store)
    assert [m.seq for m in any_store.messages(sid, after=6)] == [7, 8, 9]
    assert any_store.messages(sid, after=9) == []
    assert any_store.messages(sid, after=0) == any_store.messages(sid)
    assert any_store.oldest_seq(sid) == 1


def test_listable_reads_what_covered_material_can_name_and_nothing_else(any_store):
    sid = listing_session(any_store)
    listed = any_store.listable(sid, 1, 9, rule=listable)
    # The paste, the model's own call and its result; not the first look's call or result (a look's
    # call names nothing listed, and a session has one a reply).
    assert [m.seq for m in listed] == [1, 6, 7]
    assert [m.seq for m in any_store.listable(sid, 2, 6, rule=listable)] == [6]
    assert listed == [m for m in any_store.messages(sid) if m.seq in (1, 6, 7)]


def test_a_memory_session_past_its_400_reads_its_tail_by_number():
    memory = MemoryStore(clock=Ticks())
    session = memory.create_session()
    for number in range(1, MEMORY_MESSAGE_LIMIT + 11):
        memory.append(session.id, user(f"message {number}"))
    assert memory.oldest_seq(session.id) == 11
    assert [m.seq for m in memory.messages(session.id, after=5)] == list(range(11, 411))
    assert [m.seq for m in memory.messages(session.id, after=407)] == [408, 409, 410]


# --- decoded messages kept between reads --------------------------------------------------------


def counting_decodes(monkeypatch) -> list[int]:
    """A one-item list counting the stored rows ``Store`` decodes into messages from now on."""
    decoded = [0]
    decode = store_module._message_from_row

    def counted(row: tuple) -> Message:
        decoded[0] += 1
        return decode(row)

    monkeypatch.setattr(store_module, "_message_from_row", counted)
    return decoded


def test_a_read_decodes_only_what_was_stored_since_the_last_one(db, monkeypatch):
    decoded = counting_decodes(monkeypatch)
    session = db.create_session()
    for turn in range(1, 21):
        db.extend(session.id, [user(f"question {turn}"), assistant(f"answer {turn}")])
        before = decoded[0]
        assert [m.content for m in db.messages(session.id, after=2 * turn - 1)] == [f"answer {turn}"]
        assert decoded[0] - before <= 2  # the two new messages, however long the session grows
    before = decoded[0]
    assert len(db.messages(session.id)) == 40 and decoded[0] == before
    listed = db.listable(session.id, 1, 40, rule=is_user)
    assert [m.seq for m in listed] == list(range(1, 40, 2)) and decoded[0] == before


def test_listable_looks_only_at_what_was_stored_since_its_last_call(db):
    looked_at = [0]

    def counted(message: Message) -> bool:  # the summary's rule, counting the messages it is asked about
        looked_at[0] += 1
        return listable(message)

    session = db.create_session()
    look = ToolCall(id="call_look_1", name="search", arguments={"query": "port"})
    for turn in range(1, 31):
        own = ToolCall(id=f"call_{turn}", name="search", arguments={"query": f"port {turn}"})
        db.extend(
            session.id,
            [
                user(f"question {turn}" + ("x" * LONG_PASTE_CHARS if turn % 3 == 0 else "")),
                assistant("", tool_calls=(look,)),
                tool_result(look, "hits"),
                assistant("", tool_calls=(own,)),
                tool_result(own, "more hits"),
                assistant(f"answer {turn}"),
            ],
        )
        before = looked_at[0]
        listed = db.listable(session.id, 1, 6 * turn, rule=counted)
        assert looked_at[0] - before == 6  # this turn's messages, however long the session grows
        # What the rule lists read over the whole session: the pastes, the model's own calls and results.
        whole = [
            m
            for m in db.messages(session.id)
            if (m.role == "user" and len(m.content) > LONG_PASTE_CHARS)
            or (m.role == "tool" and m.tool_call_id != look.id)
            or any(call.id != look.id for call in m.tool_calls)
        ]
        assert listed == whole and len(listed) == 2 * turn + turn // 3
    # A range within: the same messages as reading it afresh would give.
    within = db.listable(session.id, 7, 18, rule=counted)
    assert [m.seq for m in within] == [10, 11, 13, 16, 17]


def test_what_a_read_returns_is_the_callers_to_change(db):
    session = db.create_session()
    db.extend(session.id, [user("one"), assistant("two")])
    db.messages(session.id).clear()
    db.messages(session.id, after=1).append(user("not stored"))
    assert [m.content for m in db.messages(session.id)] == ["one", "two"]


def test_no_message_of_a_deleted_session_is_served_again(db):
    session = db.create_session(session_id="named-by-the-front-door")
    db.extend(session.id, [user("old question"), assistant("old answer")])
    assert len(db.messages(session.id)) == 2
    db.delete_session(session.id)
    with pytest.raises(SessionNotFound):
        db.messages(session.id)
    db.create_session(session_id=session.id)
    db.append(session.id, user("new question"))
    assert [m.content for m in db.messages(session.id)] == ["new question"]
    assert db.listable(session.id, 1, 5, rule=every) == db.messages(session.id)


def test_a_session_deleted_and_made_again_by_another_imprintd_is_read_anew(db):
    session = db.create_session(session_id="shared")
    db.extend(session.id, [user("old question"), assistant("old answer")])
    assert len(db.messages(session.id)) == 2
    # Another daemon on the same database, its clock later (the session's new rowid is the old one).
    with Store.open(db.path, clock=lambda: 5_000.0) as other:
        other.delete_session(session.id)
        with pytest.raises(SessionNotFound):
            db.messages(session.id)
        other.create_session(session_id=session.id)
        other.extend(session.id, [user("new question"), assistant("new answer"), user("and more")])
    assert [m.content for m in db.messages(session.id)] == ["new question", "new answer", "and more"]


def test_a_session_made_again_in_the_same_clock_tick_is_read_anew(isolated_dirs):
    # Deleted and made again by another daemon whose clock reads what this one's read: the same
    # id, the same creation time, and (the row was the newest) the same rowid.
    with Store.open(clock=lambda: 1_000.0) as db:
        session = db.create_session(session_id="shared")
        db.extend(session.id, [user("old question"), assistant("old answer")])
        assert len(db.messages(session.id)) == 2
        with Store.open(db.path, clock=lambda: 1_000.0) as other:
            other.delete_session(session.id)
            again = other.create_session(session_id=session.id)
            other.extend(session.id, [user("new question"), assistant("new answer"), user("and more")])
        assert again.created_at == session.created_at
        assert [m.content for m in db.messages(session.id)] == ["new question", "new answer", "and more"]


def test_messages_another_imprintd_stores_are_read(db):
    session = db.create_session()
    db.append(session.id, user("mine"))
    assert len(db.messages(session.id)) == 1
    with Store.open(db.path, clock=Ticks()) as other:
        other.append(session.id, assistant("theirs"))
    assert [m.content for m in db.messages(session.id, after=0)] == ["mine", "theirs"]


def test_session_views_stay_within_their_limit(isolated_dirs, monkeypatch):
    monkeypatch.setattr(session_view, "SESSION_VIEW_BYTES", 5_000)  # one small session
    decoded = counting_decodes(monkeypatch)
    with Store.open(clock=Ticks()) as db:
        small, large = db.create_session(), db.create_session()
        db.extend(small.id, [user("a" * 500), assistant("b" * 500)])
        db.extend(large.id, [user("c" * 2_000), assistant("d" * 2_000)])  # larger than the limit alone
        for _ in range(2):
            assert [len(m.content) for m in db.messages(large.id)] == [2_000, 2_000]
            assert [len(m.content) for m in db.messages(small.id)] == [500, 500]
        before = decoded[0]
        db.messages(small.id)
        assert decoded[0] == before  # kept
        db.messages(large.id)
        assert decoded[0] == before + 2  # read from the database each time
        # A second small session passes the limit with the first: the least recently read goes.
        other = db.create_session()
        db.extend(other.id, [user("e" * 500), assistant("f" * 500)])
        db.messages(other.id)
        before = decoded[0]
        assert [len(m.content) for m in db.messages(other.id)] == [500, 500] and decoded[0] == before
        assert [len(m.content) for m in db.messages(small.id)] == [500, 500] and decoded[0] == before + 2


def _longer_than_5(message: Message) -> bool:
    return message.role == "user" and len(message.content) > 5


def _user_longer_than_3(message: Message) -> bool:
    return message.role == "user" and len(message.content) > 3


def test_a_deleted_session_s_view_and_what_hangs_on_it_go_with_it(db, monkeypatch):
    decoded = counting_decodes(monkeypatch)
    session = db.create_session(session_id="again")
    db.extend(session.id, [user("x" * 20), assistant("old answer")])
    assert [m.seq for m in db.listable(session.id, 1, 2, rule=_longer_than_5)] == [1]
    db.delete_session(session.id)
    db.create_session(session_id=session.id)  # the same id, in the same process
    db.extend(session.id, [user("short"), assistant("new answer")])
    before = decoded[0]
    assert [m.content for m in db.messages(session.id)] == ["short", "new answer"]
    assert decoded[0] == before + 2  # read afresh: nothing of the old view served it
    assert db.listable(session.id, 1, 2, rule=_longer_than_5) == []


def test_a_memory_session_s_view_begins_again_with_what_it_keeps():
    store = MemoryStore()
    session = store.create_session()
    store.extend(session.id, [user(f"question {index}") for index in range(399)])
    assert len(store.view(session.id)) == 399
    store.extend(session.id, [user("one"), user("two"), user("three")])  # the oldest two drop out
    assert [m.seq for m in store.view(session.id).messages()] == list(range(3, 403))
    assert [m.seq for m in store.messages(session.id, after=400)] == [401, 402]
    listed = store.listable(session.id, 1, 402, rule=_user_longer_than_3)
    assert [m.seq for m in listed] == [*range(3, 400), 402]  # "one" and "two" are not longer than 3


def test_a_new_session_is_stored_with_its_first_message(any_store):
    info, question = any_store.start_session(
        user("\n Why does the build fail? \nlog: ..."), workspace="/w", session_id="a" * 32
    )
    assert (info.id, info.workspace, info.title, info.message_count) == (
        "a" * 32,
        "/w",
        "Why does the build fail?",
        1,
    )
    assert any_store.session(info.id) == info
    assert any_store.messages(info.id) == [question] and question.seq == 1
    # A later message is numbered after it, as after ``create_session`` then ``append``.
    assert any_store.append(info.id, assistant("a")).seq == 2
    assert any_store.start_session(user("q"))[0].id not in ("", info.id)


def test_a_commit_not_waiting_for_the_disk_syncs_nothing_and_the_next_that_waits_syncs_both(tmp_path):
    path = tmp_path / "imprint.sqlite3"
    with counting_syncs() as disk:
        store = Store.open(path, clock=Ticks())
        try:
            assert store.sessions() == []  # opened and migrated before counting
            disk.synced.clear()
            info, _ = store.start_session(user("Which port?"), wait_for_disk=False)
            store.append(info.id, user("And the host?"), wait_for_disk=False)
            assert disk.synced == []
            # Committed all the same: another connection reads both.
            with Store.open(path) as other:
                assert [m.content for m in other.messages(info.id)] == ["Which port?", "And the host?"]
            store.append(info.id, assistant("8080 on 0.0.0.0."))
            assert disk.synced == [f"{path.name}-wal"]  # one sync, of the log holding all three
            # The connection waits for the disk again after the commit that did not.
            assert connection_of(store).pragma("synchronous") == 2  # FULL
        finally:
            store.close()


def test_make_durable_syncs_the_log_holding_commits_that_did_not_wait(tmp_path, monkeypatch):
    path = tmp_path / "imprint.sqlite3"
    with Store.open(path, clock=Ticks()) as store:
        info, _ = store.start_session(user("Which port?"), wait_for_disk=False)
        log = os.stat(f"{path}-wal")
        synced: list[tuple[int, int]] = []
        fsync = os.fsync

        def recording(fd: int) -> None:
            found = os.fstat(fd)
            synced.append((found.st_dev, found.st_ino))
            fsync(fd)

        monkeypatch.setattr(os, "fsync", recording)
        store.make_durable()
        assert synced == [(log.st_dev, log.st_ino)]
        assert [m.content for m in store.messages(info.id)] == ["Which port?"]


def test_a_new_session_and_its_first_message_are_one_commit_or_nothing(db):
    commits = []
    connection_of(db).set_commit_hook(lambda: commits.append(1) or False)
    info, _ = db.start_session(user("q"))
    assert len(commits) == 1
    # Refused by the schema's CHECK: neither the session nor the message is left behind.
    with pytest.raises(apsw.ConstraintError):
        db.start_session(Message(role="narrator", content="x"), session_id="b" * 32)
    assert [s.id for s in db.sessions()] == [info.id]
    with pytest.raises(SessionNotFound):
        db.session("b" * 32)
