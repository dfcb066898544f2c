"""The conversation_history index kept with its session: in the data database,
written in the transaction that stores the messages; in memory for persist-false sessions.
A search reads it and tokenizes no stored message."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import msgspec
import pytest

from imprintd.context.history import OUTPUT_LIMIT, ConversationHistory, query_terms
from imprintd.messages import FIRST_LOOK_CALL_PREFIX, ToolCall, assistant, tool_result, user
from imprintd.store import MEMORY_MESSAGE_LIMIT, MIGRATIONS, MemoryStore, Store, history_index, migrations
from tests.conversations import compose_paste
from tests.helpers import connection_of

NOV_29 = time.mktime((2026, 11, 29, 10, 0, 0, 0, 0, -1))  # local time, as the headers show it
DEC_3 = time.mktime((2026, 12, 3, 18, 30, 0, 0, 0, -1))


class Clock:
    """A settable clock: ``now`` is what the next stored message is dated."""

    def __init__(self, now: float = NOV_29) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def db(clock) -> Iterator[Store]:
    opened = Store.open(clock=clock)
    yield opened
    opened.close()


@pytest.fixture(params=["sqlite", "memory"])
def any_store(request, clock):
    if request.param == "memory":
        yield MemoryStore(clock=clock)
        return
    opened = Store.open(clock=clock)
    yield opened
    opened.close()


def conversation():
    call = ToolCall(id="call_7", name="search", arguments={"query": "retention policy"})
    return [
        user(compose_paste()),
        assistant("Noted: the compose file has about a hundred services."),
        user("Which database do we run? I think Postgres 16."),
        assistant("You said Postgres 16 on bedrock."),
        user("What do our docs say about keeping data?"),
        assistant("", tool_calls=(call,)),
        tool_result(call, "docs/ops.md: Logs are kept for 30 days, backups for a year."),
        assistant("Logs are kept for 30 days and backups for a year."),
    ]


def without_dates(text: str) -> str:
    return re.sub(r" \(\d{4}-\d{2}-\d{2}\)", "", text)


def count_tokenizing(monkeypatch) -> list[int]:
    """Count every message window tokenized from now on (by the index or a scan)."""
    calls: list[int] = []
    original = history_index.windows_of

    def counting(message):
        calls.append(message.seq)
        return original(message)

    monkeypatch.setattr(history_index, "windows_of", counting)
    return calls


QUERIES = ("billing port", "billing port in the compose file", "Postgres", "retention policy", "backups year")


def test_the_stored_index_answers_as_an_index_built_from_the_messages(any_store):
    session = any_store.create_session()
    stored = any_store.extend(session.id, conversation())
    from_store = ConversationHistory(stored, any_store.history_index(session.id))
    built = ConversationHistory(stored)
    for query in QUERIES:
        found, expected = from_store.search_places(query), built.search_places(query)
        assert found.places == expected.places, query
        assert without_dates(found.text) == expected.text, query
        assert "(2026-11-29)" in found.text and "(2026-11-29)" not in expected.text


def test_a_search_reads_the_index_and_tokenizes_no_stored_message(any_store, monkeypatch):
    session = any_store.create_session()
    stored = any_store.extend(session.id, conversation())
    tokenized = count_tokenizing(monkeypatch)
    history = ConversationHistory(stored, any_store.history_index(session.id))
    for query in QUERIES:
        assert "Nothing found" not in history.search(query)
    assert tokenized == []
    # Storing a message indexes that message only.
    any_store.append(session.id, user("The quokka cluster moved to eu-west-2."))
    assert tokenized == [9]


def test_messages_are_searchable_as_soon_as_they_are_stored(any_store):
    session = any_store.create_session()
    any_store.extend(session.id, conversation())
    index = any_store.history_index(session.id)
    any_store.extend(
        session.id, [user("Where did the quokka cluster go?"), assistant("It moved to eu-west-2 last week.")]
    )
    history = ConversationHistory(any_store.messages(session.id), index)
    found = history.search_places("quokka cluster")
    assert [p.seq for p in found.places][:2] == [9, 10]  # the question, then its answer
    assert "#10 assistant (2026-11-29):\nIt moved to eu-west-2 last week." in found.text


def test_only_the_messages_handed_in_are_quoted(any_store):
    # A reply's history holds the messages before its question; the index holds the question too.
    session = any_store.create_session()
    stored = any_store.extend(session.id, [*conversation(), user("What was the billing port again?")])
    history = ConversationHistory(stored[:-1], any_store.history_index(session.id))
    found = history.search_places("billing port again")
    assert found.places and all(p.seq <= 8 for p in found.places)
    assert "#9" not in found.text


def test_a_tool_result_stored_after_its_call_is_found_by_the_calls_query(any_store):
    call = ToolCall(id="c1", name="search", arguments={"query": "retention policy"})
    session = any_store.create_session()
    any_store.extend(session.id, [user("What do we keep?"), assistant("", tool_calls=(call,))])
    any_store.append(session.id, tool_result(call, "docs/ops.md: Logs are kept for 30 days."))
    history = ConversationHistory(any_store.messages(session.id), any_store.history_index(session.id))
    found = history.search_places("retention policy")
    assert found.places[0].seq in (2, 3)
    assert "#3 tool result: search for “retention policy” (2026-11-29):\ndocs/ops.md" in found.text


def test_headers_show_the_date_and_a_month_with_a_number_finds_that_days_messages(any_store, clock):
    session = any_store.create_session()
    any_store.extend(session.id, [user("Booked the dentist."), assistant("Good, it was overdue.")])
    clock.now = DEC_3
    any_store.extend(session.id, [user("The dentist moved my appointment."), assistant("Annoying.")])
    history = ConversationHistory(any_store.messages(session.id), any_store.history_index(session.id))

    found = history.search_places("dentist")
    assert "#1 user (2026-11-29):\nBooked the dentist." in found.text
    assert "#3 user (2026-12-03):\nThe dentist moved my appointment." in found.text
    # Naming the month and the day brings that day's message first.
    assert [p.seq for p in history.search_places("dentist on December 3").places][0] == 3
    assert [p.seq for p in history.search_places("what about the dentist on 29 November").places][0] == 1
    assert history.search_places("what did I say on November 29").places[0].seq in (1, 2)
    # A number alone is never taken for a day.
    assert history.search("29").startswith("Nothing found for “29”")


def test_date_terms_need_a_month_and_a_number():
    assert [t for t in query_terms("on November 29, 2026") if t.startswith("date:")] == ["date:11-29", "date:2026-11"]
    assert [t for t in query_terms("what changed on 2026-12-03") if t.startswith("date:")] == [
        "date:12-3",
        "date:2026-12",
    ]
    assert not [t for t in query_terms("port 8101 and 29 services") if t.startswith("date:")]
    assert not [t for t in query_terms("in November we moved") if t.startswith("date:")]


def test_a_session_stored_before_the_index_is_indexed_once_when_first_searched(monkeypatch, clock):
    monkeypatch.setattr(migrations, "MIGRATIONS", MIGRATIONS[:1])
    with Store.open(clock=clock) as old:  # as an imprintd without the index wrote it
        session = old.create_session()
        with old.transaction() as db:
            for seq, message in enumerate(conversation(), start=1):
                db.execute(
                    "INSERT INTO messages (session_id, seq, role, content, tool_calls, tool_call_id, name, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        session.id,
                        seq,
                        message.role,
                        message.content,
                        msgspec.json.encode(message.tool_calls).decode(),
                        message.tool_call_id,
                        message.name,
                        NOV_29,
                    ),
                )
        assert connection_of(old).pragma("user_version") == 1
    monkeypatch.setattr(migrations, "MIGRATIONS", MIGRATIONS)
    tokenized = count_tokenizing(monkeypatch)
    with Store.open(clock=clock) as upgraded:
        assert connection_of(upgraded).pragma("user_version") == len(MIGRATIONS)
        assert connection_of(upgraded).execute("SELECT count(*) FROM history_windows").fetchone() == (0,)
        history = ConversationHistory(upgraded.messages(session.id), upgraded.history_index(session.id))
        assert "8101" in history.search("billing port")
        assert sorted(tokenized) == list(range(1, 9))  # every stored message, once
        assert "Postgres 16" in history.search("Postgres")
        assert sorted(tokenized) == list(range(1, 9))  # and not again
        windows = connection_of(upgraded).execute("SELECT count(*) FROM history_windows").fetchone()[0]
        # The paste's windows, and one for each other message (#6, a call without text, is
        # found by its query).
        assert windows == len(history_index.window_spans(compose_paste())) + 7
    with Store.open(clock=clock) as again:  # extending an old session indexes what it lacks too
        second = again.create_session()
        again.append(second.id, user("hello"))
        assert connection_of(again).execute(
            "SELECT last_seq FROM history_sessions JOIN sessions ON sessions.id = session_id WHERE session_id = ?",
            (second.id,),
        ).fetchone() == (1,)


def test_deleting_a_session_deletes_its_index(db):
    session = db.create_session()
    db.extend(session.id, conversation())
    kept = db.create_session()
    db.append(kept.id, user("billing is on 8101"))
    counts = [
        connection_of(db).execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        for table in ("history_sessions", "history_windows", "history_postings")
    ]
    assert all(count > 0 for count in counts)
    db.delete_session(session.id)
    assert connection_of(db).execute("SELECT count(*) FROM history_sessions").fetchone() == (1,)
    assert connection_of(db).execute("SELECT count(*) FROM history_windows").fetchone() == (1,)
    history = ConversationHistory(db.messages(kept.id), db.history_index(kept.id))
    assert "#1 user" in history.search("billing")


def test_a_persist_false_session_forgets_the_index_of_messages_that_drop_out(clock):
    memory = MemoryStore(clock=clock)
    session = memory.create_session()
    memory.append(session.id, user("The quokka password hint is the blue door."))
    for i in range(MEMORY_MESSAGE_LIMIT):
        memory.append(session.id, assistant(f"Filler turn {i}."))
    index = memory.history_index(session.id)
    assert index.lookup(["quokka"]).df == {"quokka": 0}
    history = ConversationHistory(memory.messages(session.id), index)
    assert history.search("quokka").startswith("Nothing found")
    assert "#401 assistant (2026-11-29):\nFiller turn 399." in history.search("filler 399")


def test_a_stored_search_stays_within_the_budget_on_a_long_session(db):
    session = db.create_session()
    for i in range(60):
        db.extend(session.id, [user(f"Note {i}: the invoice queue is invoices-{i}."), assistant("Noted, thanks.")])
    history = ConversationHistory(db.messages(session.id), db.history_index(session.id))
    text = history.search("invoice queue")
    assert OUTPUT_LIMIT - 120 <= len(text) <= OUTPUT_LIMIT


def test_common_terms_are_looked_up_where_rarer_ones_hit_alike_in_every_index(db, monkeypatch):
    # 30 windows say "service"; with the threshold at 10 it is common.
    monkeypatch.setattr(history_index, "COMMON_WINDOWS", 10)
    session = db.create_session()
    messages = [user(f"The service note {i}: all fine with the service.") for i in range(30)]
    messages[5] = user("The quokka service moved to eu-west-2.")
    stored = db.extend(session.id, messages)
    index = db.history_index(session.id)
    memory = history_index.MemoryHistoryIndex(history_index.indexed_messages(stored))

    # A rarer term: "service" counts only in the windows "quokka" found.
    for lookup in (index.lookup(["quokka", "servic"]), memory.lookup(["quokka", "servic"])):
        assert lookup.df == {"quokka": 1, "servic": 30}
        assert [(w.seq, found) for w, found in lookup.hits.items()] == [(6, {"quokka": 1, "servic": 1})]
    # Only common terms: the newest ten windows holding it.
    for lookup in (index.lookup(["servic"]), memory.lookup(["servic"])):
        assert sorted(w.seq for w in lookup.hits) == list(range(21, 31))
    # The scan applies the same rule, so all three answer alike.
    history = ConversationHistory(stored, index)
    for query in ("quokka service", "service", "service note"):
        assert history.search_places(query) == history.search_places(query, scan=True)
        assert history.search_places(query).places == ConversationHistory(stored, memory).search_places(query).places


def test_the_index_never_holds_a_first_look(any_store):
    look = ToolCall(id=FIRST_LOOK_CALL_PREFIX + "00c0ffee", name="search", arguments={"query": "zebra"})
    own = ToolCall(id="call_00c0ffee", name="search", arguments={"query": "zebra"})
    session = any_store.create_session()
    stored = any_store.extend(
        session.id,
        [
            user("Where is the zebra config?"),
            assistant("", tool_calls=(look,)),
            tool_result(look, "[1] zoo/zebra.yaml:1-3\nzebra: striped"),
            assistant("", tool_calls=(own,)),
            tool_result(own, "[1] zoo/zebra.md:1-2\nzebra notes"),
            assistant("It is in zoo."),
        ],
    )
    lookup = any_store.history_index(session.id).lookup(["zebra", "stripe"])
    assert {window.seq for window in lookup.hits} == {stored[0].seq, stored[3].seq, stored[4].seq}
    assert lookup.df == {"zebra": 3, "stripe": 0} and lookup.windows == 4  # #2, #3: not indexed
