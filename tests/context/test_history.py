"""The conversation_history tool (docs/decisions.md, "Conversation history"): search and exact reads over the messages handed to a reply."""

from __future__ import annotations

import re

import pytest

from imprintd.context.history import (
    OUTPUT_LIMIT,
    READ_CHARS,
    STRATEGY_LINE,
    TOOL_NAME,
    ConversationHistory,
    ConversationHistoryTool,
    HistoryError,
    search_by_scan,
)
from imprintd.messages import FIRST_LOOK_CALL_PREFIX, Message, ToolCall, assistant, is_first_look, tool_result, user
from imprintd.tools.base import ToolError, ToolResult
from tests.conversations import compose_paste

PLACE = re.compile(r"\[#(\d+) offset (\d+)–(\d+)\]\n")


def session() -> list[Message]:
    paste = compose_paste()
    call = ToolCall(id="call_7", name="search", arguments={"query": "retention policy"})
    return [
        user(paste, seq=1),
        assistant("Noted: the compose file has about a hundred services.", seq=2),
        user("Which database do we run? I think Postgres 16.", seq=3),
        assistant("You said Postgres 16 on bedrock.", seq=4),
        user("What do our docs say about keeping data?", seq=5),
        assistant("", seq=6, tool_calls=(call,)),
        tool_result(call, "docs/ops.md: Logs are kept for 30 days, backups for a year.", seq=7),
        assistant("Logs are kept for 30 days and backups for a year.", seq=8),
    ]


def shown(history: ConversationHistory, query: str) -> list[int]:
    """The messages a search shows, best first (each once)."""
    return list(dict.fromkeys(place.seq for place in history.search_places(query).places))


def places(text: str) -> list[tuple[int, int, int]]:
    return [(int(a), int(b), int(c)) for a, b, c in PLACE.findall(text)]


def quoted(text: str) -> list[str]:
    """The quoted passages, in order (each runs from its header to the next header or end)."""
    parts = PLACE.split(text)
    # split gives [heading, seq, start, end, body, seq, start, end, body, ...]
    bodies = parts[4::4]
    # A body runs up to the next message header ("\n#N role, …"), which is not part of the quote.
    return [re.split(r"\n#\d+ [a-z]", body)[0] for body in bodies]


def test_search_finds_a_passage_deep_inside_a_long_paste_and_reads_it_back_exactly():
    messages = session()
    paste = messages[0].content
    history = ConversationHistory(messages)

    text = history.search("billing port")

    assert len(text) <= OUTPUT_LIMIT
    found = places(text)
    assert found and found[0][0] == 1
    # The quoted place holds the billing block, deep inside the paste, and names its offsets.
    seq, start, end = next(p for p in found if "billing" in paste[p[1] : p[2]])
    assert start > 4_000 and '"8101:8101"' in paste[start:end]
    assert paste[start:end] in quoted(text)
    # Reading the message from that offset returns exactly those characters.
    read = history.read(seq, start)
    assert paste[start : start + READ_CHARS] in read
    assert read.startswith(f"#1 user, characters {start}–")


def test_a_long_paste_shows_the_place_that_names_it_and_the_place_asked_about():
    history = ConversationHistory(session())
    text = history.search("billing port in the compose file")
    paste = session()[0].content
    spans = [(s, e) for seq, s, e in places(text) if seq == 1]
    assert any(s == 0 and "compose file" in paste[s:e] for s, e in spans)
    assert any("8101" in paste[s:e] for s, e in spans)
    assert len(spans) <= 3


def test_reading_pages_through_a_long_message_to_its_end():
    messages = session()
    paste = messages[0].content
    history = ConversationHistory(messages)
    offset, pieces = 0, []
    while True:
        page = history.read(1, offset)
        header, _, rest = page.partition("\n")
        assert header == f"#1 user, characters {offset}–{min(len(paste), offset + READ_CHARS)} of {len(paste):,}:"
        if offset + READ_CHARS < len(paste):
            body, _, footer = rest.rpartition("\n")
            assert footer == (
                f"… continues: read message 1 from offset {offset + READ_CHARS}; {len(paste):,} characters in all"
            )
            pieces.append(body)
            offset += READ_CHARS
        else:
            body, _, footer = rest.rpartition("\n")
            assert footer == "(end of message #1)"
            pieces.append(body)
            break
    assert "".join(pieces) == paste
    assert len(pieces) == -(-len(paste) // READ_CHARS)


def test_reads_refuse_unknown_numbers_and_bad_offsets():
    history = ConversationHistory(session())
    with pytest.raises(HistoryError, match="no message #99.*#1 to #8"):
        history.read(99)
    with pytest.raises(HistoryError, match="past the end of message #3"):
        history.read(3, 10_000)
    with pytest.raises(HistoryError, match="0 or more"):
        history.read(3, -1)
    assert history.read(3, 5).startswith("#3 user, characters 5–")
    with pytest.raises(HistoryError, match="no earlier messages"):
        ConversationHistory([]).read(1)


def test_results_are_numbered_by_stored_seq_and_see_only_the_messages_handed_in():
    # A later slice of a conversation: numbers are the stored ones, not positions.
    handed = [
        user("The staging gateway listens on port 9443.", seq=41),
        assistant("Noted, 9443 for the staging gateway.", seq=42),
    ]
    history = ConversationHistory(handed)
    text = history.search("gateway port")
    assert {seq for seq, _, _ in places(text)} <= {41, 42}
    assert "#41 user" in text
    # Another conversation's words are simply not there.
    assert history.search("billing").startswith("Nothing found for “billing”")
    with pytest.raises(HistoryError):
        history.read(1)


def test_tool_results_are_searchable_by_their_query_and_named_by_it():
    history = ConversationHistory(session())
    text = history.search("retention policy")  # words only the call's query used
    assert "#7 tool result: search for “retention policy”:\ndocs/ops.md: Logs are kept" in text
    assert shown(history, "retention policy")[0] in (6, 7)


def test_words_match_by_shared_stem():
    history = ConversationHistory(
        [user("The customer was billed twice in March.", seq=1), assistant("I will look at it.", seq=2)]
    )
    text = history.search("billing")
    assert shown(history, "billing")[0] == 1 and "#1 user:\nThe customer was billed twice in March." in text


def test_rarer_words_weigh_more():
    common = [user(f"Deploy note {i}: the deploy went fine.", seq=i) for i in range(1, 9)]
    rare = user("The deploy of quokka failed.", seq=9)
    plain = user("Another deploy, another deploy, deploy again.", seq=10)
    history = ConversationHistory([*common, rare, plain])
    assert shown(history, "deploy quokka")[0] == 9


def test_output_stays_within_the_limit_for_many_long_matches():
    long = " ".join(f"billing port {i} " + "filler " * 80 for i in range(60))
    history = ConversationHistory([user(long, seq=1), user(long, seq=2), user(long, seq=3)])
    found = history.search_places("billing port")
    assert 3_500 < len(found.text) <= OUTPUT_LIMIT  # the budget is used, not exceeded
    assert found.text.count("\n[#") == len(found.places)
    # Smoothing: #2 has a match on either side, so it leads; ties go to the newer (#3 before #1).
    assert [p.seq for p in found.places][:4] == [2, 2, 2, 3]
    assert {p.seq for p in found.places} == {1, 2, 3}
    for place in found.places:  # exact quotes, each after its offset line
        assert f"[#{place.seq} offset {place.start}–{place.end}]\n{long[place.start : place.end]}" in found.text


def test_indexed_search_and_plain_scan_agree():
    history = ConversationHistory(session())
    for query in ("billing port", "Postgres", "retention policy", "invoices-eu queue", "nothing like this"):
        assert history.search(query) == search_by_scan(history, query)


def test_empty_query_is_an_error_and_no_match_says_so():
    history = ConversationHistory(session())
    for query in ("", "   ", "?!"):
        with pytest.raises(HistoryError):
            history.search(query)
    assert history.search("zebra crossing").startswith("Nothing found for “zebra crossing”")
    assert "no earlier messages" in ConversationHistory([]).search("anything")


def test_earlier_lookups_are_readable_but_not_searched():
    call = ToolCall(id="c1", name=TOOL_NAME, arguments={"query": "billing port"})
    messages = [
        *session(),
        assistant("", seq=9, tool_calls=(call,)),
        tool_result(call, "#1 user … billing … 8101", seq=10),
    ]
    history = ConversationHistory(messages)
    assert {seq for seq, _, _ in places(history.search("billing port"))} <= {1, 2}
    assert "billing" in history.read(10)


# --- the tool -------------------------------------------------------------------------------


async def test_tool_searches_and_reads_with_subject_and_evidence():
    tool = ConversationHistoryTool(ConversationHistory(session()))
    assert tool.spec.name == "conversation_history"
    assert set(tool.spec.parameters["properties"]) == {"query", "message", "offset"}
    assert "earlier messages" in tool.spec.description and "no longer shown" in tool.spec.description

    found = await tool.run({"query": "billing port"})
    assert isinstance(found, ToolResult) and found.ok and found.subject == "billing port"
    expected = tool.history.search_places("billing port").places
    assert found.evidence == tuple(f"history:{p.seq}:{p.start}" for p in expected)
    assert found.evidence[0].startswith("history:1:") and "history:2:0" in found.evidence

    read = await tool.run({"message": 1, "offset": 4000})
    assert read.subject == "message #1" and read.evidence == ("history:1:4000",)
    assert read.text.startswith("#1 user, characters 4000–")


def test_tool_titles():
    tool = ConversationHistoryTool(ConversationHistory(session()))
    assert tool.title({"query": "billing port"}) == "Searching earlier in this conversation for “billing port”"
    assert tool.title({"message": 12}) == "Reading message #12 from earlier in this conversation"
    assert tool.title({}) == "Looking back through this conversation"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "give query (words to search for) or message (a number to read)"),
        ({"query": "x", "message": 1}, "give either query (to search) or message (to read), not both"),
        ({"query": ""}, "query must be the words to look for, not ''"),
        ({"query": 5}, "query must be a string, not 5"),
        ({"message": "twelve"}, "message must be an integer, 1 or more, not 'twelve'"),
        ({"message": 0}, "message must be an integer, 1 or more, not 0"),
        ({"message": True}, "message must be an integer, 1 or more, not True"),
        ({"message": 1, "offset": -3}, "offset must be an integer, 0 or more, not -3"),
        ({"message": 1, "offset": "far"}, "offset must be an integer, 0 or more, not 'far'"),
        ({"query": "port", "offset": 100}, "offset goes with message, not with query"),
        ({"query": "port", "path": "a.py"}, "conversation_history takes only query, message and offset, not path"),
        ({"message": 99}, "there is no message #99"),
        ({"message": 1, "offset": 1_000_000}, "offset 1000000 is past the end of message #1"),
    ],
)
async def test_tool_refuses_bad_arguments_naming_what_is_accepted(arguments, message):
    tool = ConversationHistoryTool(ConversationHistory(session()))
    with pytest.raises(ToolError, match=re.escape(message)):
        await tool.run(arguments)


async def test_tool_takes_a_number_written_as_text():
    tool = ConversationHistoryTool(ConversationHistory(session()))
    result = await tool.run({"message": "#3"})
    assert result.text.startswith("#3 user")
    # null is "not given", and 3.0 is 3
    assert (await tool.run({"message": 3.0, "offset": None, "query": None})).text == result.text


def test_strategy_line():
    assert "conversation_history" in STRATEGY_LINE and "not search" in STRATEGY_LINE
    assert "quoting it briefly" in STRATEGY_LINE


def test_a_very_long_query_still_leaves_room_for_the_quotes():
    history = ConversationHistory(session())
    query = "billing port " + "and some more words " * 200
    text = history.search(query)
    assert len(text) <= OUTPUT_LIMIT
    assert places(text) and all(end > start for _, start, end in places(text))


# --- ranking by neighbourhood, filling the budget, compact printing ------------------


def chatter(first: int, count: int) -> list[Message]:
    """Short turns about nothing the tests ask for."""
    lines = [
        "Morning! How was the weekend?",
        "Quiet, thanks. Yours?",
        "Busy, lots of errands.",
        "Sounds tiring.",
        "It was fine in the end.",
        "Good to hear.",
    ]
    return [(user if i % 2 == 0 else assistant)(lines[i % len(lines)], seq=first + i) for i in range(count)]


def test_an_answer_that_shares_no_word_with_the_query_is_found_through_its_question():
    messages = [
        *chatter(1, 20),
        user("What made you start counselling?", seq=21),
        assistant("Honestly, after the burnout in 2019 a friend recommended someone.", seq=22),
        *chatter(23, 20),
    ]
    history = ConversationHistory(messages)
    found = history.search_places("start counselling")
    # The question matches; the answer right after it comes next, before the one before it.
    assert [p.seq for p in found.places][:3] == [21, 22, 20]
    assert (
        "#21 user:\nWhat made you start counselling?\n"
        "#22 assistant:\nHonestly, after the burnout in 2019 a friend recommended someone."
    ) in found.text
    assert len(found.text) <= OUTPUT_LIMIT


def test_a_window_matching_every_query_word_beats_one_repeating_a_rare_word():
    messages = [
        *chatter(1, 10),
        user("billing billing billing billing, billing again", seq=11),
        *chatter(12, 10),
        user("The staging port for billing is 8101.", seq=22),
        *chatter(23, 10),
    ]
    for i in range(33, 41):  # "staging" and "port" are common in this conversation
        messages.append(user(f"Staging port note {i}: nothing changed on staging.", seq=i))
    history = ConversationHistory(messages)
    assert shown(history, "billing port staging")[0] == 22


def test_the_whole_budget_is_filled_with_matching_messages():
    messages = []
    for i in range(1, 81):
        messages.append(user(f"Invoice {i} went to customer {i * 7} with a total of {i * 13} euros.", seq=2 * i - 1))
        messages.append(assistant("Noted.", seq=2 * i))
    history = ConversationHistory(messages)
    found = history.search_places("invoice total")
    assert OUTPUT_LIMIT - 120 <= len(found.text) <= OUTPUT_LIMIT
    assert len({p.seq for p in found.places}) > 20  # far more than the best two
    for place in found.places:  # every message shown whole and exactly
        message = next(m for m in messages if m.seq == place.seq)
        assert (place.start, place.end) == (0, len(message.content))
        assert f"#{place.seq} {message.role}:\n{message.content}" in found.text


def test_groups_print_in_conversation_order_and_by_their_best_member():
    messages = [*chatter(1, 30)]
    messages[2] = user("A small note on the quokka.", seq=3)
    messages[19] = user("The quokka migration to eu-west-2 is done: quokka lives there now.", seq=20)
    history = ConversationHistory(messages)
    text = history.search("quokka migration")
    # The best group (around #20) first, its members in conversation order; then #3's group.
    order = [int(n) for n in re.findall(r"^#(\d+) ", text, flags=re.MULTILINE)]
    assert order == [18, 19, 20, 21, 22, 1, 2, 3, 4, 5]
    assert "\n\n#1 user:" in text  # groups are separated by a blank line


def test_a_neighbour_is_shown_by_its_beginning_and_a_long_paste_neighbour_is_skipped():
    answer = "The fix: " + "raise the buffer sizes and reload; " * 40  # 1,409 characters, no query word
    paste = "\n".join(f"line {i}: upstream keepalive 32" for i in range(200))  # long, no query word
    messages = [
        *chatter(1, 10),
        user("Why does nginx drop uploads?", seq=11),
        assistant(answer, seq=12),
        *chatter(13, 10),
        user("Here is the nginx error log from today:", seq=23),
        user(paste, seq=24),
        *chatter(25, 10),
    ]
    history = ConversationHistory(messages)
    found = history.search_places("nginx")
    by_seq = {p.seq: p for p in found.places}
    assert by_seq[12].start == 0 and 300 <= by_seq[12].end <= 400  # the answer's beginning
    assert f"[#12 offset 0–{by_seq[12].end}]\n{answer[: by_seq[12].end]}" in found.text
    assert "#12 assistant, 1,409 characters:" in found.text
    assert 24 not in by_seq  # a long paste chosen only as a neighbour says nothing where it begins


def test_a_message_that_does_not_fit_shows_its_best_place_shortened_to_the_room_left():
    filler = "words about nothing in particular. " * 16  # ~560 characters: whole when matched
    messages = [user(f"Release {i} of quokka shipped. " + filler, seq=i) for i in range(1, 11)]
    history = ConversationHistory(messages)
    found = history.search_places("quokka release")
    assert len(found.text) <= OUTPUT_LIMIT
    whole = [p for p in found.places if p.end - p.start == len(messages[p.seq - 1].content)]
    cut = [p for p in found.places if p not in whole]
    assert len(whole) >= 5 and len(cut) == 1  # the last one, shortened to what was left
    assert f"[#{cut[0].seq} offset {cut[0].start}–{cut[0].end}]" in found.text
    assert "quokka" in messages[cut[0].seq - 1].content[cut[0].start : cut[0].end]


def first_looked(seq: int, question: str, answer: str, found: str) -> list[Message]:
    """A reply with a first look, as stored: question, the look's call and result, answer."""
    look = ToolCall(id=f"{FIRST_LOOK_CALL_PREFIX}{seq:08x}", name="search", arguments={"query": question})
    return [
        user(question, seq=seq),
        assistant("", seq=seq + 1, tool_calls=(look,)),
        tool_result(look, found, seq=seq + 2),
        assistant(answer, seq=seq + 3),
    ]


def test_first_looks_are_not_searched_and_a_question_and_its_answer_stay_neighbours():
    # Each look's query is the user's own words and its result quotes the workspace at length:
    # both match a later question's words better than what was said.
    messages: list[Message] = []
    for n in range(12):
        found = f"[1] src/counselling_{n}.py:1-40\n" + "counselling start session start " * 40
        messages += first_looked(1 + 4 * n, f"Why did you start counselling, part {n}?", "Fine.", found)
    messages += first_looked(
        49, "What made you start counselling?", "Honestly, after the burnout in 2019 a friend recommended someone.", ""
    )
    history = ConversationHistory(messages)
    found = history.search_places("start counselling")
    looks = {m.seq for m in messages if is_first_look(m)}
    assert looks and not looks & {place.seq for place in found.places}
    assert "src/counselling_" not in found.text and "search for" not in found.text
    # The answer after the look is the question's neighbour: found, printed with it.
    assert "#49 user:\nWhat made you start counselling?\n#52 assistant:\nHonestly, after the burnout" in found.text
    assert search_by_scan(history, "start counselling") == found.text
    # A look stays readable by its number.
    assert "src/counselling_0.py" in history.read(3)
