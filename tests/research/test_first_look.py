"""The first look: the workspace searched with the question before the model's first round.

With the stand-in model and the shop workspace: what the first prompt holds, what the client is
shown, what is stored, when the look is skipped, its share of the context, follow-ups, and the
notes a research stop writes from it.
"""

from __future__ import annotations

import re

from imprintd import messages as msg
from imprintd.messages import ToolSpec, is_first_look
from imprintd.research import first_look
from imprintd.research.loop import research
from imprintd.tools.base import Hit, ToolError, ToolResult
from tests.helpers import ask, make_chat, tool_turn
from tests.recording import RecordingEvents
from tests.research.fakes import scope
from tests.standin import StandInModel, call

ON = {"chat.first_look": True}


def first_look_exchange(request):
    """This reply's first look in a prompt (the last one: earlier replies' are history), or None."""
    found = None
    for index, message in enumerate(request.messages):
        if message.role == "assistant" and message.tool_calls and is_first_look(message.tool_calls[0]):
            found = message.tool_calls[0], request.messages[index + 1]
    return found


async def test_the_model_starts_with_the_best_hits_for_the_question(model, workspace):
    chat = make_chat(model, **ON)
    model.queue("Billing listens on port 8101 [1].")
    outcome, events = await ask(chat, "Which port does the billing service listen on?", workspace=workspace)

    [request] = model.requests
    look_call, look_result = first_look_exchange(request)
    assert look_call.name == "search" and look_call.arguments == {"query": "port billing service listen"}
    assert (
        look_result.role == "tool"
        and "services/billing.yaml" in look_result.content
        and "port: 8101" in look_result.content
    )
    assert request.messages[-2:] == [request.messages[-2], look_result]  # after the question, as research

    started, finished = events.steps  # the look is the reply's first step
    assert (started.call_id, started.state, finished.state) == ("step-1", "started", "finished")
    assert started.tool == "search"
    assert started.title == "Looking in the workspace for “Which port does the billing service listen on?”"

    stored = chat.session(outcome.session_id).messages
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert is_first_look(stored[1].tool_calls[0]) and "port: 8101" in stored[2].content
    # The look is a numbered result like any other: the answer's [1] is a source.
    assert stored[3].content == "Billing listens on port 8101 [1].\n\nSources:\n[1] services/billing.yaml:1-4"
    assert [(s.number, s.path, s.cited) for s in outcome.sources] == [(1, "services/billing.yaml", True)]


async def test_the_model_may_still_search_and_read_more(model, workspace):
    chat = make_chat(model, **ON)
    model.queue(tool_turn(call("read_file", path="docs/deploy.md")), "Rollouts take 5 minutes.")
    await ask(chat, "How long do billing rollouts take?", workspace=workspace)
    first, second = model.requests
    assert [t.name for t in first.tools] == ["search", "read_file", "conversation_history"]
    assert first_look_exchange(first) is not None and first_look_exchange(second) is not None
    assert "Rollouts take 5 minutes." in second.messages[-1].content


async def test_no_look_without_words_to_search_for_without_a_workspace_or_with_the_setting_off(model, workspace):
    cases = [
        (make_chat(model, **ON), "What is it?", workspace),
        (make_chat(model, **ON), "Which port does billing use?", None),
        (make_chat(model), "Which port does billing use?", workspace),  # the tests' default: off
        (make_chat(model, **{"chat.first_look": False}), "Which port does billing use?", workspace),
    ]
    for chat, question, folder in cases:
        model.queue("An answer.")
        outcome, events = await ask(chat, question, workspace=folder)
        assert first_look_exchange(model.requests[-1]) is None, question
        assert not events.steps
        assert [m.role for m in chat.session(outcome.session_id).messages] == ["user", "assistant"]


async def test_a_look_that_finds_nothing_leaves_nothing_in_the_prompt_or_the_store(model, workspace):
    chat = make_chat(model, **ON)
    model.queue("I found nothing about that.")
    outcome, events = await ask(chat, "Which quaternion library renders the zebra sprites?", workspace=workspace)
    [request] = model.requests
    assert first_look_exchange(request) is None
    assert [m.role for m in request.messages] == ["system", "user"]
    assert not any("No results" in m.content for m in request.messages)
    assert not events.steps  # the client is not shown a look that found nothing
    stored = chat.session(outcome.session_id).messages
    assert [(m.role, m.content) for m in stored] == [
        ("user", "Which quaternion library renders the zebra sprites?"),
        ("assistant", "I found nothing about that."),
    ]


async def test_a_look_is_searched_once_and_run_as_the_call_from_that_search(model, workspace):
    class Counting:
        def __init__(self, tool):
            self.tool, self.spec, self.runs = tool, tool.spec, 0

        async def run(self, arguments):
            self.runs += 1
            return await self.tool.run(arguments)

    chat = make_chat(model, **ON)
    [search] = [t for t in await chat.workspace_tools(str(workspace), RecordingEvents()) if t.spec.name == "search"]
    counting = Counting(search)
    looking = first_look.FirstLookSearch(counting, model.count_text, 2_000, "Which port does billing use?")
    arguments = {"query": "port billing"}
    looked = await looking.look(arguments)
    assert looked.hits and await looking.run(arguments) is looked and counting.runs == 1
    assert (await looking.run({"query": "gateway"})).hits and counting.runs == 2


async def test_a_follow_up_searches_with_the_words_of_the_exchange_it_follows(model, workspace):
    chat = make_chat(model, **ON)
    model.queue("It is deployed behind the gateway.", "Port 8101.")
    first, _ = await ask(chat, "Where is the billing service deployed?", workspace=workspace)
    await ask(chat, "And its port?", first.session_id)
    look_call, _ = first_look_exchange(model.requests[-1])
    query = look_call.arguments["query"]
    assert query.startswith("port ") and "billing" in query and "gateway" in query
    earlier_call, _ = first_look_exchange(model.requests[0])
    assert earlier_call.id != look_call.id  # each reply's look is its own call


async def test_a_follow_up_s_look_is_titled_with_what_the_user_asked(model, workspace):
    # The query carries words of the exchange before; the step shows the question as asked.
    chat = make_chat(model, **ON)
    model.queue("It is deployed behind the gateway.", "Port 8101.")
    first, _ = await ask(chat, "Where is the billing service deployed?", workspace=workspace)
    events = RecordingEvents()
    await ask(chat, "And its\nport?", first.session_id, events=events)
    look_call, _ = first_look_exchange(model.requests[-1])
    assert "gateway" in look_call.arguments["query"]
    assert [(step.state, step.title) for step in events.steps] == [
        ("started", "Looking in the workspace for “And its port?”"),
        ("finished", "Looking in the workspace for “And its port?”"),
    ]
    long_question = "Which port " + "and which billing host " * 10
    assert first_look.step_title(long_question) == f"Looking in the workspace for “{long_question[:79].rstrip()}…”"


async def look_over_billing_notes(workspace, n_ctx: int, max_tokens: int) -> tuple[StandInModel, str]:
    """The model and the look that reached it, asked over twelve files of sixty billing lines
    each: far more hits than any look's share holds."""
    for n in range(12):
        (workspace / "docs" / f"billing-{n}.md").write_text(
            "\n".join(f"Billing note {n}.{line}: the billing port is 8101 on host {line}." for line in range(60)),
            encoding="utf-8",
        )
    model = StandInModel(n_ctx=n_ctx)
    chat = make_chat(model, **ON, **{"chat.n_ctx": n_ctx, "chat.max_tokens": max_tokens})
    model.queue("Port 8101.")
    await ask(chat, "Which billing port?", workspace=workspace)
    _, look_result = first_look_exchange(model.requests[0])
    return model, look_result.content


async def test_the_look_keeps_its_best_hits_within_its_share_of_the_context(workspace):
    model, look = await look_over_billing_notes(workspace, 2048, 512)
    share = first_look.token_share(2048, 512)
    assert model.count_text(look) <= share
    assert re.search(r"^\[1\] docs/billing-\d+\.md:", look, re.MULTILINE)  # the best ones, not nothing


def test_a_small_room_gives_the_look_a_smaller_share_and_a_large_room_a_quarter():
    # n_ctx 4,096 less 64 for the answer: a fifth; the default 8,192 less 1,024: a quarter, as before.
    assert first_look.token_share(4096, 64) == int(4032 * 0.2) == 806
    assert first_look.token_share(4096, 1024) == int(3072 * 0.2)
    assert first_look.token_share(8192, 1024) == int(7168 * 0.25) == 1792
    assert first_look.token_share(4096 + 1024, 1024) == 1024  # a room of exactly SMALL_ROOM: a quarter


async def test_at_n_ctx_4096_the_look_fills_a_fifth_of_the_room(workspace):
    model, look = await look_over_billing_notes(workspace, 4096, 64)
    # What reached the model: within a fifth of the room (806 tokens), not a quarter (1,008),
    # and still the best hits, more than half of that fifth.
    assert 806 // 2 < model.count_text(look) <= 806
    assert re.search(r"^\[1\] docs/billing-\d+\.md:", look, re.MULTILINE)


async def test_an_oversized_question_gets_no_look_it_is_the_subject_itself(model, workspace):
    chat = make_chat(model, **ON, **{"chat.analysis_workers": 0})
    model.queue("It is a long log.")
    long_question = "Which port does billing use in this log? " + "billing port 8101 log line. " * 400
    share = first_look.token_share(model.n_ctx, 1024)
    assert model.count_text(long_question) > share
    await ask(chat, long_question, workspace=workspace)
    assert first_look_exchange(model.requests[0]) is None


async def test_a_research_stop_writes_the_answer_from_the_look_s_notes(model, workspace):
    chat = make_chat(model, **ON)
    # The model repeats the look's own search: no new evidence twice, then the final answer.
    repeat = tool_turn(call("search", call_id="again", query="port billing service listen"))
    model.queue(repeat, repeat, "Billing listens on port 8101 [1].")
    outcome, _ = await ask(chat, "Which port does the billing service listen on?", workspace=workspace)
    assert outcome.stop_reason == "no_new_evidence"
    final = model.requests[-1]
    assert final.tools == [] and "port: 8101" in final.messages[-1].content
    assert outcome.sources and outcome.sources[0].path == "services/billing.yaml"


def test_the_query_leaves_out_question_words_and_keeps_identifiers():
    assert first_look.query("What is the default timeout of an httpx client, in seconds?", []) == (
        "default timeout httpx client seconds"
    )
    assert (
        first_look.query("Which hash does DigestAuth use for MD5 in _auth.py?", []) == "hash DigestAuth use MD5 auth.py"
    )
    assert first_look.query("What is it?", []) is None
    assert first_look.query("?", []) is None
    # A hyphenated word also as code writes it (max_keepalive_connections holds "keepalive").
    assert first_look.query("How many keep-alive connections by default?", []) == (
        "keep alive connections default keepalive"
    )


async def test_the_look_ends_with_the_lines_that_match_the_question_best(model, workspace):
    chat = make_chat(model, **ON)
    model.queue("Port 8101 [1].")
    await ask(chat, "Which port does the billing service listen on?", workspace=workspace)
    _, look_result = first_look_exchange(model.requests[0])
    heading = look_result.content.index(first_look.BEST_LINES_HEADING)
    best, question = look_result.content[heading:].split("\n\n")
    best = best.splitlines()[1:]
    # Each line named by its file and number, as a pointer into the numbered hits above it.
    assert "services/billing.yaml:3: port: 8101" in best and len(best) <= first_look.BEST_LINES
    assert look_result.content.startswith("[1] services/billing.yaml:1–4\n")
    # Last, the question again: a small model at the end of a long result has lost it.
    assert question == f"{first_look.ASK_AGAIN} Which port does the billing service listen on?"


def hit(path: str, start_line: int, excerpt: str) -> Hit:
    return Hit(
        id=path, path=path, start_line=start_line, end_line=start_line + excerpt.count("\n"), score=1.0, excerpt=excerpt
    )


def test_best_lines_weigh_rare_words_over_common_ones_and_name_each_line():
    hits = [
        hit(
            "httpx/_config.py",
            10,
            "import httpx\nfrom httpx import Client\nDEFAULT_TIMEOUT_CONFIG = Timeout(timeout=5.0)",
        ),
        hit("httpx/_client.py", 40, "class Client:\n    timeout = None\n" + "x" * 300),
    ]
    lines = first_look.best_lines(hits, ["default", "timeout", "httpx", "client"], limit=2)
    # "default" is in one line, the others in two: the constant first, named by its line; then
    # the line with two words of the same weight, before those with one.
    assert lines == [
        "httpx/_config.py:12: DEFAULT_TIMEOUT_CONFIG = Timeout(timeout=5.0)",
        "httpx/_config.py:11: from httpx import Client",
    ]
    assert first_look.best_lines(hits, ["nowhere"]) == []
    long = first_look.best_lines([hit("a.txt", 1, "x" * 300)], ["xxx"])
    assert len(long[0]) == len("a.txt:1: ") + first_look.BEST_LINE_CHARS and long[0].endswith("…")


def test_a_line_scoring_under_half_the_best_lines_score_is_left_out():
    # Each word is in two of the three lines, so each weighs the same: the lines score 3, 2 and 1.
    hits = [hit("n.txt", 1, "alpha beta gamma\nalpha beta\ngamma")]
    assert first_look.MIN_SCORE_SHARE == 0.5
    # The third shares a third of the first's score: too little to point at the answer.
    assert first_look.best_lines(hits, ["alpha", "beta", "gamma"]) == [
        "n.txt:1: alpha beta gamma",
        "n.txt:2: alpha beta",
    ]


def test_a_best_line_binding_a_question_word_to_a_value_comes_first():
    hits = [hit("t.py", 1, "transport = HTTPTransport(retries=retries)\nretries: int = 0,\nretries = retries")]
    # All three hold "retries" once; only the middle one says what it is.
    assert first_look.best_lines(hits, ["retries"])[0] == "t.py:2: retries: int = 0,"


async def test_the_look_follows_a_constant_its_best_lines_use_to_where_it_is_bound(model, tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    (root / "client.py").write_text(
        "class Client:\n    def __init__(self, timeout=WAIT_LIMIT, pool=POOL_KIND, retry=RETRIES_BOUND):\n"
        "        RETRIES_BOUND = 3\n        self.timeout = timeout\n"
    )
    # Without a word of the question: the search alone does not find these lines.
    (root / "constants.py").write_text("WAIT_LIMIT = 5.0  # seconds\nPOOL_KIND = make_pool()\n")
    chat = make_chat(model, **ON)
    model.queue("5 seconds [2].")
    outcome, _ = await ask(chat, "What is the default timeout?", workspace=root)
    _, look_result = first_look_exchange(model.requests[0])
    best = look_result.content.split(first_look.BEST_LINES_HEADING)[1].split("\n\n")[0].splitlines()[1:]
    # After the line using it, the binding with a value; not one naming another thing
    # (POOL_KIND), nor one the hits show already (RETRIES_BOUND).
    assert best[:2] == [
        "client.py:2: def __init__(self, timeout=WAIT_LIMIT, pool=POOL_KIND, retry=RETRIES_BOUND):",
        "constants.py:1: WAIT_LIMIT = 5.0  # seconds",
    ]
    assert len(best) == 3
    # The binding is a numbered hit of its own, last, so the answer can cite the value's file.
    hits = look_result.content.split(first_look.BEST_LINES_HEADING)[0]
    assert hits.startswith("[1] client.py:1–4\n") and hits.endswith(
        "[2] constants.py:1\nWAIT_LIMIT = 5.0  # seconds\n\n"
    )
    assert [(source.number, source.path, source.cited) for source in outcome.sources] == [(2, "constants.py", True)]


async def test_a_long_question_is_cut_where_the_look_asks_it_again(model, workspace):
    chat = make_chat(model, **ON)
    model.queue("8101 [1].")
    await ask(
        chat, "Which port does the billing service listen on?\n" + "Say why, in detail. " * 40, workspace=workspace
    )
    _, look_result = first_look_exchange(model.requests[0])
    last = look_result.content.rsplit("\n\n", 1)[1]
    assert last.startswith(f"{first_look.ASK_AGAIN} Which port does the billing service listen on? Say why")
    assert last.endswith("…") and len(last) == len(first_look.ASK_AGAIN) + 1 + first_look.ASK_AGAIN_CHARS


async def test_a_look_whose_search_fails_finds_nothing_and_so_leaves_nothing(model):
    class Failing:
        spec = ToolSpec(name="search", description="", parameters={})

        async def run(self, arguments):
            raise ToolError("the index is being rebuilt")

    looking = first_look.FirstLookSearch(Failing(), model.count_text, 2_000, "Which port?")
    looked = await looking.look({"query": "port"})
    assert not looked.ok and not looked.hits and "rebuilt" in looked.text


class _LongSearch:
    """A search whose one hit is long (some 330 tokens): a look that fits its share, not a full prompt."""

    spec = ToolSpec(
        name="search",
        description="Search the workspace.",
        parameters={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    )

    def __init__(self) -> None:
        self.runs = 0

    async def run(self, arguments):
        self.runs += 1
        found = hit("services/billing.yaml", 1, "\n".join(f"port_{n}: {8100 + n}  # billing port" for n in range(44)))
        return ToolResult(text="(raw)", subject="billing", evidence=(found.id,), hits=(found,))


async def _research_beside_a_long_system_prompt(workers: int):
    """A reply whose system prompt leaves room for the question but not for the question and its look."""
    model = StandInModel(n_ctx=2048)
    model.queue("Port 8101.")
    system = msg.system("You are Imprint. " + "Keep this in mind. " * 300)  # some 1,430 tokens
    search, events = _LongSearch(), RecordingEvents()
    outcome = await research(
        scope(model, events, first_look=True, analysis_workers=workers),
        system=system,
        history=[],
        question=msg.user("Which port does billing listen on?", seq=1),
        tools=[search],
    )
    return model, search, events, outcome


async def test_a_look_that_does_not_fit_beside_the_question_leaves_nothing_in_the_prompt_or_the_store():
    for workers in (0, 2):  # clipped with analysis off, analyzed with it on: neither, the look is left out
        model, search, events, outcome = await _research_beside_a_long_system_prompt(workers)
        assert search.runs == 1  # it was looked for
        [request] = model.requests  # no section worker read the daemon's own look
        assert first_look_exchange(request) is None and [m.role for m in request.messages] == ["system", "user"]
        assert outcome.stop == "answer" and outcome.exchange == []  # nothing to store
        assert not events.steps and outcome.steps == []  # no step shown, none for notes
        assert outcome.numbering.by_number() == {}  # no number the model never read can be cited


async def test_a_look_that_fits_is_stored_as_the_model_read_it():
    model = StandInModel(n_ctx=4096)
    model.queue("Port 8101 [1].")
    outcome = await research(
        scope(model, first_look=True),
        system=msg.system("You are Imprint."),
        history=[],
        question=msg.user("Which port does billing listen on?", seq=1),
        tools=[_LongSearch()],
    )
    [request] = model.requests
    look_call, look_result = first_look_exchange(request)
    stored_call, stored_result = outcome.exchange
    assert stored_call.tool_calls == (look_call,)
    # Stored once, as the model read it (numbered, as the answer cites it): the next prompt
    # renders it token for token, and a session of looks is not stored twice over.
    assert stored_result.content == look_result.content and stored_result.model_text is None
    assert stored_result.content.startswith("[1] services/billing.yaml:1–44\n")
