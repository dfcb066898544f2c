"""Searching every stored conversation (imprintd/conversations/search.py)."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import pytest

from imprintd.conversations import search as search_module
from imprintd.conversations.search import SearchError, SearchPage, plain, search, snippet
from imprintd.messages import ToolCall, assistant, tool_result, user
from imprintd.store import MemoryStore, Store
from imprintd.store.history_score import K1, B


class Clock:
    """Stored times the test sets: ``now`` is what the next write records."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def local(day: str) -> float:
    return datetime.fromisoformat(day).timestamp()


@pytest.fixture
def clock() -> Clock:
    return Clock(local("2026-11-20T12:00"))


@pytest.fixture
def db(clock) -> Iterator[Store]:
    opened = Store.open(clock=clock)
    yield opened
    opened.close()


def stored(db: Store, *messages, workspace: str | None = None) -> str:
    info = db.create_session(workspace=workspace)
    db.extend(info.id, list(messages))
    return info.id


def test_finds_messages_of_every_session_best_first_with_title_role_and_marked_snippet(db):
    billing = stored(
        db,
        user("Which port does the billing service listen on?"),
        assistant("The billing service listens on port 8101, set in services/billing.yaml."),
    )
    other = stored(db, user("How do I deploy the gateway?"), assistant("Run make deploy; billing is not involved."))
    stored(db, user("What is the weather like?"), assistant("I cannot tell."))

    page = search(db, "billing port")
    assert [(h.session_id, h.seq) for h in page.hits][:2] in (
        [(billing, 2), (billing, 1)],
        [(billing, 1), (billing, 2)],
    )
    assert {(h.session_id, h.seq) for h in page.hits} == {(billing, 1), (billing, 2), (other, 2)}
    assert page.next_offset is None
    top = page.hits[0]
    assert top.title == "Which port does the billing service listen on?"
    assert top.role in ("user", "assistant") and top.created_at == local("2026-11-20T12:00")
    assert {p.text for p in top.snippet if p.match} == {"billing", "port"}
    assert page.hits[-1].session_id == other  # one word of two ranks below both


def test_words_match_by_stem_and_the_snippet_marks_the_words_as_written(db):
    session = stored(db, user("We billed the customers twice in November."))
    page = search(db, "billing")
    assert [(h.session_id, h.seq) for h in page.hits] == [(session, 1)]
    assert plain(page.hits[0].snippet) == "We [billed] the customers twice in November."


def test_pages_follow_each_other_without_gaps_or_repeats(db):
    for n in range(7):
        stored(db, user(f"question {n} about the invoice service"))
    first = search(db, "invoice", limit=3)
    second = search(db, "invoice", limit=3, offset=first.next_offset)
    third = search(db, "invoice", limit=3, offset=second.next_offset)
    assert (first.next_offset, second.next_offset, third.next_offset) == (3, 6, None)
    found = [h.session_id for page in (first, second, third) for h in page.hits]
    assert len(found) == len(set(found)) == 7


def test_workspace_keeps_sessions_of_that_folder_and_folders_inside_it(db, tmp_path):
    shop = tmp_path / "shop"
    (shop / "api").mkdir(parents=True)
    (tmp_path / "shopfront").mkdir()
    a = stored(db, user("the invoice job"), workspace=str(shop))
    b = stored(db, user("the invoice job"), workspace=str(shop / "api"))
    stored(db, user("the invoice job"), workspace=str(tmp_path / "shopfront"))
    stored(db, user("the invoice job"))
    page = search(db, "invoice", workspace=str(shop) + "/")
    assert {h.session_id for h in page.hits} == {a, b}


def test_since_and_until_are_local_days_both_included(db, clock):
    days = {}
    for day in ("2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"):
        clock.now = local(f"{day}T23:30")
        days[day] = stored(db, user("the invoice job"))
    page = search(db, "invoice", since="2026-11-02", until="2026-11-03")
    assert {h.session_id for h in page.hits} == {days["2026-11-02"], days["2026-11-03"]}


def test_a_date_in_the_query_finds_that_days_messages(db, clock):
    clock.now = local("2026-11-12T10:00")
    that_day = stored(db, user("ordered a new keyboard"))
    clock.now = local("2026-11-13T10:00")
    stored(db, user("ordered a new mouse"))
    assert search(db, "ordered November 12").hits[0].session_id == that_day


def test_a_tool_result_is_found_by_its_calls_query(db):
    call = ToolCall(id="c1", name="search", arguments={"query": "flush interval"})
    session = stored(db, user("how often?"), assistant("", tool_calls=(call,)), tool_result(call, "cache.yaml:3 30s"))
    hits = search(db, "flush interval").hits
    assert (session, 3) in {(h.session_id, h.seq) for h in hits}


def test_sessions_stored_before_the_index_existed_are_indexed_before_the_first_search(db):
    session = stored(db, user("the quarterly invoice run"))
    with db.transaction() as conn:  # as a database of before migration 2 holds it
        conn.execute("DELETE FROM history_sessions")
    reopened = Store.open(db.path)
    assert [h.session_id for h in search(reopened, "quarterly").hits] == [session]


def test_persist_false_sessions_are_not_searched(db):
    memory = MemoryStore()
    info = memory.create_session()
    memory.extend(info.id, [user("the secret invoice plan")])
    assert search(db, "invoice").hits == ()


def test_punctuation_in_the_query_is_not_syntax(db):
    session = stored(db, user('the "billing" service (port 8101)'))
    for query in ['"billing', "billing AND NOT", "port:8101*", "(8101"]:
        assert search(db, query).hits[0].session_id == session, query


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"query": ""}, "query: '' has no word to search for"),
        ({"query": '  "*" () '}, "has no word to search for; give at least one word"),
        ({"query": "x", "limit": 0}, "limit: 0 is out of range; expected 1 to 100"),
        ({"query": "x", "offset": -1}, "offset: -1 is out of range; expected 0 to 10,000"),
        ({"query": "x", "offset": 2**62}, f"offset: {2**62} is out of range; expected 0 to 10,000"),
        ({"query": "x", "since": "0001-01-01"}, "since: 0001-01-01 is out of range; expected a date from 1970-01-01"),
        (
            {"query": "x", "until": "9999-12-31"},
            "until: 9999-12-31 is out of range; expected a date from 1970-01-01 to 9999-12-30",
        ),
        ({"query": "x", "since": "11/02/2026"}, "since: '11/02/2026' is not a date; expected YYYY-MM-DD"),
        ({"query": "x", "until": "2026-02-30"}, "until: '2026-02-30' is not a date"),
        ({"query": "x", "since": "2026-11-03", "until": "2026-11-02"}, "until: 2026-11-02 is before since"),
        ({"query": "x", "workspace": "a\0b"}, "workspace: 'a\\x00b' is not a folder path"),
    ],
)
def test_bad_input_is_refused_naming_the_field(db, arguments, message):
    with pytest.raises(SearchError, match=re.escape(message)):
        search(db, **arguments)


def test_snippet_centers_on_the_first_match_cuts_at_words_and_joins_lines():
    text = " ".join(f"word{n}" for n in range(100)) + "\nthe billing\nport " + " ".join("tail" for _ in range(60))
    parts = snippet(text, 0, len(text), {"bill", "port"}, width=80)
    shown = plain(parts)
    assert shown.startswith("…") and shown.endswith("…")
    assert "[billing] [port]" in shown and "\n" not in shown
    assert len("".join(p.text for p in parts)) <= 80 + 2  # the two ellipses
    assert shown.startswith("…word") and shown.split()[0][5:].isdigit()  # whole words at the cut


def as_older_schema(conn, version: int) -> None:
    """Make a database of the current schema, with its messages indexed, one of ``version`` 4 or 5:
    before migration 7 the sessions have no incarnation, before migration 6 the postings have no window
    length, before migration 5 no index by term."""
    conn.execute("DROP TRIGGER sessions_incarnation; ALTER TABLE sessions DROP COLUMN incarnation")
    conn.execute("DROP INDEX history_postings_by_term; ALTER TABLE history_postings DROP COLUMN words")
    if version == 5:
        conn.execute("CREATE INDEX history_postings_by_term ON history_postings (term, history_id, window, count)")
    conn.pragma("user_version", version)


def test_a_version_4_database_gets_the_postings_by_term_and_the_search_reads_them(isolated_dirs):
    from imprintd.store import migrations

    path = isolated_dirs / "imprint.sqlite3"
    old = Store.open(path)
    session = stored(old, user("the quarterly invoice run"))
    with old.reading() as conn:
        as_older_schema(conn, 4)
    old.close()

    with Store.open(path) as upgraded, upgraded.reading() as conn:
        assert conn.pragma("user_version") == len(migrations.MIGRATIONS)
        plan = " ".join(
            str(row[-1])
            for row in conn.execute(
                "EXPLAIN QUERY PLAN SELECT window, count, words FROM history_postings WHERE term = 'invoic'"
            ).fetchall()
        )
        assert "COVERING INDEX history_postings_by_term" in plan
        assert [h.session_id for h in search(upgraded, "invoice").hits] == [session]


def test_a_version_5_database_gets_each_window_length_in_its_postings_and_ranks_as_before(isolated_dirs):
    path = isolated_dirs / "imprint.sqlite3"
    old = Store.open(path)
    short = stored(old, user("invoice run"))
    long = stored(old, user("the invoice run " + "and then many more words about other things " * 8))
    before = [(h.session_id, h.score) for h in search(old, "invoice run").hits]
    with old.reading() as conn:
        as_older_schema(conn, 5)
    old.close()

    with Store.open(path) as upgraded, upgraded.reading() as conn:
        assert conn.execute(
            "SELECT count(*) FROM history_postings p JOIN history_windows w"
            " ON w.history_id = p.history_id AND w.window = p.window WHERE p.words != w.words"
        ).fetchone() == (0,)
        assert conn.execute("SELECT min(words) FROM history_postings").fetchone()[0] > 0
        after = [(h.session_id, h.score) for h in search(upgraded, "invoice run").hits]
    # BM25 favours the shorter window: it takes the window's length from the postings now.
    assert after == before and [session for session, _ in after] == [short, long]


def common_and_rare(db: Store) -> dict[str, str]:
    """60 sessions whose messages mostly hold the common words "deploy" and "region", a few "eu-west"
    too; the session of each message holding "eu-west", by its text."""
    rng = random.Random(34)
    common = ["deploy", "region", "replica", "volume", "gateway", "route", "cache", "queue"]
    rare: dict[str, str] = {}
    for n in range(60):
        messages = []
        for m in range(10):
            words = [rng.choice(common) for _ in range(rng.randint(4, 30))]
            if rng.random() < 0.08:
                words.insert(rng.randrange(len(words)), "eu-west")
            text = f"Message {n}.{m}: " + " ".join(words)
            messages.append(user(text) if m % 2 == 0 else assistant(text))
        session = stored(db, *messages)
        rare |= {message.content: session for message in messages if "eu-west" in message.content}
    return rare


class Recording:
    """The scoring statement's runs (``_best``) as ``search`` makes them, recorded: which windows it
    was told to score."""

    def __init__(self, db: Store, monkeypatch) -> None:
        self.holding: list[tuple[str, ...]] = []
        scored = search_module._best

        def recorded(store, weights, **kwargs):
            self.holding.append(tuple(kwargs.get("holding", ())))
            return scored(store, weights, **kwargs)

        monkeypatch.setattr(search_module, "_best", recorded)


def every_window_scored(monkeypatch, query: str, db: Store, **kwargs) -> SearchPage:
    with monkeypatch.context() as patched:
        patched.setattr(search_module, "_without_common_only_windows", lambda *args: None)
        return search(db, query, **kwargs)


def test_windows_holding_only_common_words_are_not_scored_when_none_could_rank(db, monkeypatch):
    rare = common_and_rare(db)
    assert len(rare) > 45  # more rare-word messages than two pages: a full page needs no common-only window
    recording = Recording(db, monkeypatch)
    for limit, offset in [(20, 0), (20, 20), (5, 3), (1, 0)]:
        recording.holding.clear()
        page = search(db, "deployment region eu-west", limit=limit, offset=offset)
        # Only the windows holding "eu" or "west" were scored, every term counted in their scores:
        assert recording.holding == [("eu", "west")]
        assert all(rare.get(db.messages(h.session_id)[h.seq - 1].content) == h.session_id for h in page.hits)
        assert page == every_window_scored(monkeypatch, "deployment region eu-west", db, limit=limit, offset=offset)


def test_every_window_is_scored_when_a_common_only_window_could_reach_the_page(db, monkeypatch):
    rare = common_and_rare(db)
    recording = Recording(db, monkeypatch)
    past_the_rare = len(rare) - 5
    page = search(db, "deployment region eu-west", limit=20, offset=past_the_rare)
    # The rare windows cannot fill this page: every window is scored, as without the pruning.
    assert recording.holding == [("eu", "west"), ()]
    assert page == every_window_scored(monkeypatch, "deployment region eu-west", db, limit=20, offset=past_the_rare)
    assert sum(rare.get(db.messages(h.session_id)[h.seq - 1].content) == h.session_id for h in page.hits) == 5
    recording.holding.clear()
    search(db, "deployment region")  # no rare term: nothing to prune by
    assert recording.holding == [()]


def search_plan(db: Store, query: str, **kwargs) -> tuple[SearchPage, list[str]]:
    """The page, and how SQLite ran the statement that scored the windows (EXPLAIN QUERY PLAN)."""
    statements: list[tuple[str, dict]] = []

    def traced(cursor, sql: str, bindings) -> bool:
        if "best(history_id, window, score)" in sql:
            statements.append((sql, bindings))
        return True

    with db.reading() as conn:  # search's calls on this thread share this connection
        conn.exec_trace = traced
        try:
            page = search(db, query, **kwargs)
        finally:
            conn.exec_trace = None
        sql, bindings = statements[-1]  # the last run (a pruned search may run again, unpruned)
        plan = [str(row[-1]) for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", bindings)]
    return page, plan


def test_the_postings_are_summed_in_window_order_without_sorting_them_first(db, tmp_path):
    """Each term's postings come in window order: merged, a window's are summed as they pass (no
    temporary B-tree for the grouping), with a filter too; one word ranks by its postings' scores."""
    rare = common_and_rare(db)
    for query, kwargs in [
        ("deployment region", {}),  # every word common: every window holding one is scored
        ("deployment region", {"workspace": str(tmp_path)}),
        ("deployment region", {"since": "2026-11-01"}),
        ("eu", {"limit": 100}),
    ]:
        page, plan = search_plan(db, query, **kwargs)
        assert any("MERGE" in step for step in plan) or query == "eu", plan
        assert not any("B-TREE FOR GROUP BY" in step for step in plan), plan
    one_word = page
    # One word: a window's score is its posting's, best first.
    assert sorted((h.session_id, h.seq) for h in one_word.hits) == sorted(
        (session, seq)
        for session in set(rare.values())
        for seq, m in enumerate(db.messages(session), 1)
        if "eu-west" in m.content
    )
    scores = [h.score for h in one_word.hits]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) > 1
    assert plain(one_word.hits[0].snippet).count("[eu]") >= 1


def test_a_query_of_more_terms_than_are_merged_groups_them_and_ranks_the_same(db, monkeypatch):
    common_and_rare(db)
    query = "deployment region gateway"  # every word common: no pruning, every window scored
    merged, plan = search_plan(db, query, limit=50)
    assert any("MERGE" in step for step in plan)
    monkeypatch.setattr(search_module, "MERGED_TERMS", 2)
    grouped, plan = search_plan(db, query, limit=50)
    assert any("B-TREE FOR GROUP BY" in step for step in plan)
    assert grouped == merged and len(merged.hits) == 50


class StatisticsCalls:
    """``_window_counts`` as ``search`` calls it: the terms it asked the index to count."""

    def __init__(self, db: Store, monkeypatch) -> None:
        self.asked: list[list[str]] = []
        counted = search_module._window_counts

        def recorded(store, terms):
            self.asked.append(list(terms))
            return counted(store, terms)

        monkeypatch.setattr(search_module, "_window_counts", recorded)


def uncached(db: Store, query: str, **kwargs) -> SearchPage:
    """The page as a search with nothing cached ranks it (every term counted again)."""
    search_module._cached.clear()
    return search(db, query, **kwargs)


def test_the_window_counts_are_asked_once_while_nothing_is_written(db, monkeypatch):
    stored(db, user("the invoice run for billing"), assistant("billing runs nightly"))
    search(db, "invoice")
    calls = StatisticsCalls(db, monkeypatch)
    first = search(db, "invoice billing")
    again = search(db, "invoice billing")
    narrower = search(db, "billing nightly")
    assert calls.asked == [["bill"], ["night"]]  # only the terms not counted yet
    assert again == first and narrower == uncached(db, "billing nightly")


def test_a_write_after_a_search_is_seen_by_the_next_search(db, monkeypatch):
    one = stored(db, user("the quarterly invoice run"), assistant("invoices go out on the first"))
    stored(db, user("unrelated words here"))
    search(db, "warm up")
    before = search(db, "invoice run")
    calls = StatisticsCalls(db, monkeypatch)
    other = stored(db, user("an invoice for the run of March"))  # written on the searching thread's connection
    after = search(db, "invoice run")
    assert calls.asked == [["invoic", "run"]]  # counted again: the cached counts were of before
    assert after == uncached(db, "invoice run")
    assert {h.session_id for h in after.hits} == {one, other}
    # More windows hold the words now: their weights fell, and so did the first message's scores.
    assert [h.score for h in after.hits if h.session_id == one] < [h.score for h in before.hits]


def test_a_write_by_another_connection_is_seen_by_the_next_search(db):
    search(db, "warm up")
    stored(db, user("the quarterly invoice run"))
    before = search(db, "invoice")
    with Store.open(db.path) as elsewhere:  # another imprintd on the same file, say
        other = stored(elsewhere, user("invoice invoice"), assistant("the invoice is paid"))
    after = search(db, "invoice")
    assert after == uncached(db, "invoice") and after != before
    assert [h.session_id for h in after.hits].count(other) == 2


@contextmanager
def traced(db: Store) -> Iterator[list[str]]:
    """The SQL statements run on the store's reading connection meanwhile."""
    statements: list[str] = []
    with db.reading() as conn:
        conn.exec_trace = lambda cursor, sql, bindings: statements.append(sql) or True
        try:
            yield statements
        finally:
            conn.exec_trace = None


def test_a_one_word_query_is_ranked_without_grouping_its_postings(db):
    """One term has one posting a window: its score is that posting's BM25, nothing to sum."""
    rare = common_and_rare(db)
    with traced(db) as statements:
        page = search(db, "eu", limit=100)
    with db.reading() as conn:
        windows, words = conn.execute("SELECT sum(windows), sum(words) FROM history_sessions").fetchone()
        postings = conn.execute(
            "SELECT s.id, w.seq, p.count, p.words FROM history_postings p"
            " JOIN history_windows w ON w.history_id = p.history_id AND w.window = p.window"
            " JOIN history_sessions h ON h.id = p.history_id JOIN sessions s ON s.id = h.session_id"
            " WHERE p.term = 'eu'"
        ).fetchall()
    scoring = [sql for sql in statements if "best(history_id, window, score)" in sql]
    assert scoring and "GROUP BY" not in scoring[-1]
    df = len(postings)
    weight = math.log(1 + (windows - df + 0.5) / (df + 0.5))
    average = words / windows
    expected: dict[tuple[str, int], float] = {}
    for session, seq, count, length in postings:  # a message scores its best window
        score = weight * count * (K1 + 1) / (count + K1 * (1 - B + B * length / average)) * weight / weight
        expected[session, seq] = max(score, expected.get((session, seq), score))
    assert {(h.session_id, h.seq): h.score for h in page.hits} == expected  # to the last bit
    assert len(page.hits) == len(rare)


def test_a_snippet_joins_every_kind_of_white_space_into_one_space():
    text = "rotate\u00a0the\u2028key  now\tand\r\nthen rotate it"
    assert plain(snippet(text, 0, len(text), {"rotat"})) == "[rotate] the key now and then [rotate] it"
    assert plain(snippet("rotate the key", 0, 14, {"key"})) == "rotate the [key]"


def test_a_pages_messages_are_read_in_one_statement(db):
    common_and_rare(db)
    with traced(db) as statements:
        page = search(db, "deployment region", limit=20)
    assert len(page.hits) == 20
    assert len([sql for sql in statements if "m.content" in sql]) == 1
    for hit in page.hits:  # each hit with its own message's text and session's title
        message = db.messages(hit.session_id)[hit.seq - 1]
        assert plain(hit.snippet, ("", "")).strip("…") in " ".join(message.content.split())
        assert hit.role == message.role and hit.title == db.session(hit.session_id).title


def test_past_the_cached_terms_the_cache_starts_again_and_ranks_the_same(db, monkeypatch):
    common_and_rare(db)
    monkeypatch.setattr(search_module, "CACHED_TERMS", 2)
    search(db, "deployment region gateway")  # three terms kept: past the bound
    calls = StatisticsCalls(db, monkeypatch)
    page = search(db, "deployment route")  # one kept, one new: the cache starts again with both
    again = search(db, "route deployment")
    assert calls.asked == [["rout"]]
    assert page == uncached(db, "deployment route") and again == uncached(db, "route deployment")
