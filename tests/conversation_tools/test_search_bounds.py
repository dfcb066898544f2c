"""What one search may cost (SECURITY.md, "Bounds"): a query's terms are bounded however many words
and dates it names, a cancelled search stops, and searches never hold the threads that short
requests need."""

from __future__ import annotations

import asyncio
import functools
import threading
import tracemalloc
from types import SimpleNamespace

import anyio
import pytest

from imprintd import offload
from imprintd import protocol as wire
from imprintd import server as server_module
from imprintd.context.history import ConversationHistory
from imprintd.conversations import search as search_module
from imprintd.conversations.search import search
from imprintd.messages import assistant, user
from imprintd.store import ReadStopped, Store
from imprintd.store.history_index import SqliteHistoryIndex
from imprintd.store.history_terms import MAX_DATE_TERMS, MAX_QUERY_STEMS, query_terms

MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]


def peak_bytes(fn, *args):
    """What ``fn(*args)`` returns and the most memory it held at once (tracemalloc)."""
    tracemalloc.start()
    try:
        result = fn(*args)
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_query_of_month_words_and_numbers_costs_a_pass_over_its_words_not_their_product():
    # A pasted syslog: "jan 1" over and over. Pairing every month word with every number before
    # removing duplicates built 4,000,000 strings for this query (and 64,000,000 for 8,000 pairs).
    query = "jan 1 " * 2_000
    terms, peak = peak_bytes(query_terms, query)
    assert terms == ["jan", "1", "date:1-1"]
    assert peak < 30 * len(query), peak  # its words, once: linear in the query


def test_a_query_naming_every_date_asks_for_the_first_few():
    query = " ".join(f"{month} {day} {2000 + day}" for month in MONTHS for day in range(1, 32)) * 20
    terms, peak = peak_bytes(query_terms, query)
    dates = [term for term in terms if term.startswith("date:")]
    assert dates[:3] == ["date:1-1", "date:1-2", "date:1-3"] and len(dates) == MAX_DATE_TERMS
    assert len(terms) == MAX_QUERY_STEMS + MAX_DATE_TERMS and peak < 30 * len(query), peak


def test_a_query_of_thousands_of_known_words_searches_the_first_ones(tmp_path, monkeypatch):
    # Six thousand words every stored message holds: the search asks the store about the
    # first MAX_QUERY_STEMS stems, not six thousand.
    words = [f"word{n}x" for n in range(6_000)]
    with Store.open(tmp_path / "data.sqlite3") as db:
        info = db.create_session()
        db.extend(info.id, [user(" ".join(words[:3_000])), assistant(" ".join(words[3_000:]))])
        asked: list[int] = []
        counted = search_module._window_counts
        monkeypatch.setattr(
            search_module, "_window_counts", lambda store, terms: asked.append(len(terms)) or counted(store, terms)
        )
        page = search(db, " ".join(words))
        assert asked == [MAX_QUERY_STEMS] and [hit.seq for hit in page.hits] == [1]

        # The conversation_history tool and request read the same index, with the same bound.
        looked_up: list[int] = []
        lookup = SqliteHistoryIndex.lookup
        monkeypatch.setattr(
            SqliteHistoryIndex, "lookup", lambda self, terms: looked_up.append(len(terms)) or lookup(self, terms)
        )
        history = ConversationHistory(db.messages(info.id), db.history_index(info.id))
        text, peak = peak_bytes(history.search, " ".join(words) + " jan 1" * 1_000)
        assert "#1" in text and looked_up == [MAX_QUERY_STEMS + 1] and peak < 20_000_000, peak


def test_a_search_whose_stop_is_set_ends_instead_of_running_on(tmp_path):
    with Store.open(tmp_path / "data.sqlite3") as db:
        info = db.create_session()
        db.extend(info.id, [user("Which port does billing use?"), assistant("Billing listens on 8101.")])
        stop = threading.Event()
        assert [hit.seq for hit in search(db, "billing", stop=stop).hits] == [2, 1]
        stop.set()
        with pytest.raises(ReadStopped):
            search(db, "billing port", stop=stop)
        # The connection serves the next search as before: the stop flag was taken off it.
        assert [hit.seq for hit in search(db, "billing").hits] == [2, 1]


def handler_of(method: str, fake_server):
    """The request handler for ``method`` as ``build_server`` registers it (off the loop, core
    errors as JSON-RPC errors), serving ``fake_server``."""
    [handler] = [handler for name, _, handler in server_module.IMPRINT_HANDLERS if name == method]
    bound = functools.partial(handler, fake_server)
    return server_module._answering_core_errors(server_module._in_worker_thread(bound))


async def test_a_cancelled_search_request_stops_its_thread(tmp_path, monkeypatch):
    from imprintd.store import database as store_module

    with Store.open(tmp_path / "data.sqlite3") as db:
        info = db.create_session()
        db.extend(info.id, [user("Which port does billing use?"), assistant("Billing listens on 8101.")])
        # The store looks at the stop flag every this many steps; at 1 a search of two messages
        # is long enough to be stopped in.
        monkeypatch.setattr(store_module, "STOP_CHECK_STEPS", 1, raising=False)
        started, release, done, outcome = threading.Event(), threading.Event(), threading.Event(), []
        searched = search_module._best

        def held(*args, **kwargs):
            started.set()
            release.wait()
            return searched(*args, **kwargs)

        def recorded_search(query, **filters):
            try:
                page = search(db, query, **filters)
                outcome.append("ran to the end")
                return page
            except ReadStopped:
                outcome.append("stopped")
                raise
            finally:
                done.set()

        monkeypatch.setattr(search_module, "_best", held)
        serving = SimpleNamespace(chat=SimpleNamespace(search_conversations=recorded_search))
        request = asyncio.ensure_future(
            handler_of(wire.SEARCH_CONVERSATIONS, serving)(wire.SearchConversationsParams(query="billing"))
        )
        await anyio.to_thread.run_sync(started.wait)
        request.cancel()  # $/cancelRequest: pygls cancels the handler's task
        with pytest.raises(asyncio.CancelledError):
            await request
        release.set()
        await anyio.to_thread.run_sync(done.wait)
        assert outcome == ["stopped"]


async def test_searches_at_once_never_hold_the_threads_a_session_list_needs():
    # More heavy searches than there are worker threads, all running: imprint/sessions answers
    # meanwhile, and only SEARCH_THREADS of the searches hold threads.
    lock, release, first_ones = threading.Lock(), threading.Event(), threading.Event()
    running = [0]

    def heavy_search(query, **filters):
        with lock:
            running[0] += 1
            if running[0] == 4:
                first_ones.set()
        release.wait()
        return SimpleNamespace(hits=(), next_offset=None)

    serving = SimpleNamespace(chat=SimpleNamespace(search_conversations=heavy_search, sessions=lambda: []))
    searching = handler_of(wire.SEARCH_CONVERSATIONS, serving)
    searches = [
        asyncio.ensure_future(searching(wire.SearchConversationsParams(query=f"q{n}")))
        for n in range(offload.WORKER_THREADS + 8)
    ]
    try:
        await anyio.to_thread.run_sync(first_ones.wait)
        listing = handler_of(wire.SESSIONS, serving)(wire.SessionsParams())
        # (a guard against hanging, not a timing: the list waited for the searches before)
        listed = await asyncio.wait_for(listing, 60)
        assert listed.sessions == []
        with lock:
            assert running[0] == offload.SEARCH_THREADS
    finally:
        release.set()
        pages = await asyncio.gather(*searches)
    assert len(pages) == offload.WORKER_THREADS + 8 and running[0] == len(pages)
