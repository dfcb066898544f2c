"""Nothing the user waited for is thrown away: every stop after work ends in an answer from that
work, end to end (docs/decisions.md, "When research stops"; protocol.md, "Errors").

The real daemon over stdio (a raw client that sends a progress token, so ``$/progress`` is
seen), the scripted OpenAI-compatible model on loopback. Each test asserts what the user got
(the result and what streamed), what reached the model, and what was stored.
"""

from __future__ import annotations

import json
import re

import pytest

from imprintd.context.summary import SUMMARIZER_SYSTEM
from tests.conversations import BILLING_QUESTION, FOLLOW_UPS, PASTE
from tests.e2e import summary_script
from tests.e2e.rawclient import RawClient
from tests.helpers import estimated_prompt
from tests.openai_stub import RETRY_AT_ONCE, StubReply

WORKER_SYSTEM_START = "You take notes for another assistant"
SECTION = re.compile(r"Section (\d+) of (\d+) of the user message")
TOKEN = "failures-progress"
ANSWER = "Billing listens on 8101 [1]."


def is_worker(body: dict) -> bool:
    return "tools" not in body and body["messages"][0]["content"].startswith(WORKER_SYSTEM_START)


def is_final(body: dict) -> bool:
    """The tools-free final answer written from notes."""
    return "tools" not in body and "Research notes:" in body["messages"][-1]["content"]


def paste(lines: int) -> str:
    return "Here is the service log:\n" + "".join(
        f"{n:06d} service_{n % 97:02d} answered in {100 + n % 900} ms\n" for n in range(lines)
    )


class Daemon:
    """One daemon over stdio: ``chat`` returns the response and every notification before it."""

    def __init__(self, env: dict[str, str], workspace=None) -> None:
        self.raw = RawClient(env)
        root = workspace.as_uri() if workspace is not None else None
        self.raw.initialize(rootUri=root)

    def chat(self, **params) -> tuple[dict, list[dict]]:
        request_id = self.raw.request("imprint/chat", {"workDoneToken": TOKEN, **params})
        notes = []
        while True:
            message = self.raw.next()
            assert message is not None, self.raw.stderr_text()
            if "method" in message:
                notes.append(message)
            elif message.get("id") == request_id:
                return message, notes

    def request(self, method: str, **params) -> dict:
        return self.raw.response(self.raw.request(method, params))["result"]

    def stored(self, session_id: str) -> list[tuple[str, str]]:
        return [(m["role"], m["content"]) for m in self.request("imprint/session", sessionId=session_id)["messages"]]


def streamed(notes: list[dict]) -> str:
    """The answer as it streamed: every part not marked preamble."""
    parts: dict[int, str] = {}
    preamble = set()
    for note in notes:
        if note["method"] == "imprint/replyDelta":
            parts[note["params"]["part"]] = parts.get(note["params"]["part"], "") + note["params"]["text"]
        elif note["method"] == "imprint/replyPreamble":
            preamble.add(note["params"]["part"])
    return "".join(text for part, text in sorted(parts.items()) if part not in preamble)


def progress(notes: list[dict]) -> list[str]:
    return [
        n["params"]["value"]["message"]
        for n in notes
        if n["method"] == "$/progress" and n["params"]["value"].get("message")
    ]


@pytest.fixture
def daemon(daemon_env):
    """Starts a daemon with the shared environment plus ``settings`` (IMPRINT_CHAT_* variables)."""
    started: list[Daemon] = []

    def start(workspace=None, **settings: str) -> Daemon:
        env = {**daemon_env, **{f"IMPRINT_CHAT_{key.upper()}": value for key, value in settings.items()}}
        started.append(Daemon(env, workspace))
        return started[-1]

    yield start
    for one in started:
        one.raw.kill()


def failing(status: int, times: int, then) -> list:
    """``times`` answers of ``status`` (a try and its retries, each at once: ``RETRY_AT_ONCE``), then ``then``."""
    body = json.dumps({"error": {"message": f"upstream {status}"}})
    return [StubReply(status=status, body=body, headers=RETRY_AT_ONCE)] * times + [then]


# -- a section worker fails at section k ------------------------------------------------------------
def test_a_worker_failing_at_section_3_ends_in_an_answer_from_sections_1_and_2(daemon, stub):
    text = paste(600)

    def model(body: dict):
        if is_worker(body):
            number = int(SECTION.search(body["messages"][1]["content"]).group(1))
            if number == 3:
                return StubReply(status=502, body='{"error": {"message": "bad gateway"}}', headers=RETRY_AT_ONCE)
            return f"- [s{number}] NOTE-{number}: services answer in about 500 ms"
        if is_final(body):
            return "The log shows services answering in about 500 ms."
        return StubReply(text="unexpected coordinator round")

    stub.queue(*[model] * 20)
    one = daemon(n_ctx="2048", max_tokens="256")
    response, notes = one.chat(text=text + "\nHow fast do the services answer?")
    result = response["result"]  # not -32803: sections 1–2 were read

    assert result["stopReason"] == "model_error"
    workers = [b for b in stub.requests if is_worker(b)]
    numbers = [int(SECTION.search(b["messages"][1]["content"]).group(1)) for b in workers]
    assert numbers == [1, 2, 3, 3, 3, 3]  # section 3 tried, then retried three times; nothing after it
    planned = int(SECTION.search(workers[0]["messages"][1]["content"]).group(2))
    assert planned > 3
    [final] = [b for b in stub.requests if is_final(b)]
    assert "NOTE-1" in final["messages"][-1]["content"] and "NOTE-2" in final["messages"][-1]["content"]
    unread = re.search(
        r"Characters ([\d,]+)–([\d,]+) of your message \(([\d,]+) characters\) were not read", result["text"]
    )
    assert unread and unread.group(3) == f"{len(text) + len(chr(10) + 'How fast do the services answer?'):,}"
    assert (
        "a note-taking worker's model request failed (worker 1 on section 3: server error 502: bad gateway "
        "(tried 4 times)) after 2 of" in result["text"]
    )
    assert result["text"].startswith("The log shows services answering in about 500 ms.")
    assert streamed(notes) == result["text"]
    # Each retry was visible; no section that never ran was announced.
    said = progress(notes)
    assert sum("Retrying in" in m for m in said) == 3
    assert [m for m in said if m.startswith("Analyzing section")] == [
        f"Analyzing section {n} of {planned}" for n in (1, 2, 3)
    ]
    assert one.stored(result["sessionId"]) == [
        ("user", text + "\nHow fast do the services answer?"),
        ("assistant", result["text"]),
    ]


# -- a coordinator round fails after a search --------------------------------------------------------
def test_a_round_failing_after_a_search_ends_in_an_answer_from_the_search(daemon, stub, workspace):
    search = StubReply(tool_calls=[{"id": "call_s", "name": "search", "arguments": {"query": "billing port"}}])
    stub.queue(search, *failing(500, 4, ANSWER))
    one = daemon(workspace)
    response, notes = one.chat(text="Which port does billing use?")
    result = response["result"]

    assert result["stopReason"] == "model_error"
    assert result["text"].startswith(ANSWER)
    assert (
        "Research stopped early: the model failed in round 2 (server error 500: upstream 500 (tried 4 times)), "
        "so this answer is written from what round 1 found." in result["text"]
    )
    assert "Sources:\n[1] services/billing.yaml" in result["text"]
    assert result["sources"] and result["sources"][0]["path"] == "services/billing.yaml"
    final = stub.requests[-1]
    assert is_final(final) and "port: 8101" in final["messages"][-1]["content"]
    assert len(stub.requests) == 1 + 4 + 1
    assert streamed(notes) == result["text"]
    assert sum("Retrying in" in m for m in progress(notes)) == 3
    stored = one.stored(result["sessionId"])
    assert stored[0] == ("user", "Which port does billing use?") and stored[-1] == ("assistant", result["text"])
    assert any(role == "tool" and "port: 8101" in content for role, content in stored)  # the search, kept


def test_a_round_failing_before_anything_was_gathered_fails_the_reply(daemon, stub, workspace):
    stub.queue(*failing(503, 4, "never asked"))
    one = daemon(workspace)
    response, _ = one.chat(text="Which port does billing use?")
    assert response["error"]["code"] == -32803
    assert "server error 503: upstream 503 (tried 4 times)" in response["error"]["message"]
    listed = one.request("imprint/sessions")["sessions"]
    assert one.stored(listed[0]["sessionId"]) == [("user", "Which port does billing use?")]


# -- the final turn fails after a paste analysis -------------------------------------------------------
def test_a_final_turn_failing_after_a_paste_analysis_still_answers(daemon, stub):
    text = paste(250)
    state = {"coordinator": 0}

    def model(body: dict):
        if is_worker(body):
            number = SECTION.search(body["messages"][1]["content"]).group(1)
            return f"- [s{number}] NOTE-{number}: service_07 answers in 107 ms"
        if "tools" in body:
            state["coordinator"] += 1
            return StubReply(status=400, body='{"error": {"message": "round refused"}}')
        return StubReply(status=400, body='{"error": {"message": "final refused"}}')

    stub.queue(*[model] * 40)
    one = daemon(n_ctx="2048", max_tokens="256")
    response, notes = one.chat(text=text + "\nHow fast is service_07?")
    result = response["result"]  # the paste's notes were gathered: an answer, not -32803
    assert result["stopReason"] == "model_error"
    assert state["coordinator"] == 1  # a refusal is not retried
    assert "Research stopped early: the model failed in round 1" in result["text"]
    assert "written from what the question's analysis found" in result["text"]
    # The final turn failed too: the strongest findings are the paste's own notes, never "nothing to report".
    assert result["text"].startswith("I couldn't write a full answer. The strongest findings of the research:")
    assert "service_07 answers in 107 ms" in result["text"] and "nothing to report" not in result["text"]
    finals = [b for b in stub.requests if is_final(b)]
    assert finals and "service_07 answers in 107 ms" in finals[0]["messages"][-1]["content"].split("Research notes:")[1]
    assert streamed(notes) == result["text"]
    assert one.stored(result["sessionId"])[-1] == ("assistant", result["text"])


# -- a paste after two short exchanges -----------------------------------------------------------------
def test_a_paste_after_two_short_exchanges_summarizes_nothing(daemon, stub):
    exchanges = [("Hi, I work on the shop.", "Hello!"), ("Billing is on 8101.", "Noted: 8101.")]
    text = paste(400) + "\nWhich service is slowest?"

    def model(body: dict):
        if is_worker(body):
            number = SECTION.search(body["messages"][1]["content"]).group(1)
            return f"- [s{number}] NOTE-{number}: service_42 is slowest at 999 ms"
        last = body["messages"][-1]["content"]
        return dict(exchanges).get(last, "service_42 is slowest.")

    stub.queue(*[model] * 40)
    one = daemon(n_ctx="4096", max_tokens="512")
    first, _ = one.chat(text=exchanges[0][0])
    sid = first["result"]["sessionId"]
    one.chat(text=exchanges[1][0], sessionId=sid)
    response, notes = one.chat(text=text, sessionId=sid)
    result = response["result"]

    assert result["text"] == "service_42 is slowest." and result["stopReason"] == "answer"
    assert not any(b["messages"][0]["content"] == SUMMARIZER_SYSTEM for b in stub.requests)
    assert not any(n["method"] == "imprint/summaryUpdated" for n in notes)
    assert one.request("imprint/summary", sessionId=sid)["summary"] is None
    coordinator = [b for b in stub.requests if "tools" in b][-1]
    assert all(
        (role, content) in [(m["role"], m["content"]) for m in coordinator["messages"]]
        for pair in exchanges
        for role, content in (("user", pair[0]), ("assistant", pair[1]))
    )  # both earlier exchanges reached the model exactly


# -- a 300k paste at n_ctx 2048 with the default max_tokens --------------------------------------------
def test_a_300k_paste_at_2048_tokens_is_answered_from_its_notes_and_names_a_setting_that_helps(daemon, stub):
    text = paste(8_000)[:300_000] + "\nWhich service answers slowest?"
    note = "service_42 answered in 999 ms, the slowest; " * 25  # long notes, as a real worker writes

    def model(body: dict):
        if is_worker(body):
            number = SECTION.search(body["messages"][1]["content"]).group(1)
            return f"- [s{number}] {note}"
        return "service_42 is the slowest, at 999 ms."

    stub.queue(*[model] * 80)
    one = daemon(n_ctx="2048", research_token_budget="1048576")
    response, notes = one.chat(text=text)
    result = response["result"]

    workers = [b for b in stub.requests if is_worker(b)]
    assert len(workers) == 64  # the reply's section limit
    assert result["text"].startswith("service_42 is the slowest, at 999 ms.")
    assert "nothing to report" not in result["text"]
    assert (
        "chat.analysis_context is capped by chat.n_ctx (2,048): raising both to" in result["text"]
    )  # not "raise chat.analysis_context", which n_ctx caps
    for body in stub.requests:
        assert estimated_prompt(body) + body["max_tokens"] <= 2048
    answered = stub.requests[-1]
    assert "tools" not in answered and "service_42" in answered["messages"][-1]["content"]
    assert streamed(notes) == result["text"]
    assert one.stored(result["sessionId"]) == [("user", text), ("assistant", result["text"])]


# -- a no-workspace session whose paste was summarized ----------------------------------------------------
def test_without_a_workspace_a_summarized_paste_is_read_back_exactly(daemon, stub):
    stub.queue(*[summary_script.model] * 30)
    # No folder: no search or read_file schemas, so a smaller context than the shared scenario's
    # (3,072) is needed for the summary to cover the paste by the billing question.
    one = daemon(n_ctx="2560", max_tokens=str(summary_script.MAX_TOKENS))
    first, _ = one.chat(text=PASTE)
    sid = first["result"]["sessionId"]
    for question, _reply in FOLLOW_UPS:
        one.chat(text=question, sessionId=sid)
    response, notes = one.chat(text=BILLING_QUESTION, sessionId=sid)
    result = response["result"]

    assert result["text"] == 'Billing listens on 8101: the compose file you pasted has `ports: ["8101:8101"]`.'
    summary = one.request("imprint/summary", sessionId=sid)["summary"]
    assert summary["firstSeq"] <= 1 <= summary["lastSeq"]  # the paste left the prompt
    assert PASTE not in "".join(m["content"] or "" for b in stub.requests[-2:] for m in b["messages"][:-1])
    coordinator = [b for b in stub.requests if "tools" in b]
    assert coordinator and [t["function"]["name"] for t in coordinator[0]["tools"]] == ["conversation_history"]
    stored = one.stored(sid)
    assert any(role == "tool" and summary_script.PORTS.search(content) for role, content in stored[-3:])
    assert stored[-1] == ("assistant", result["text"])


# -- a direct answer cut off by the output limit -------------------------------------------------------
def test_a_cut_off_answer_says_so(daemon, stub):
    stub.queue(StubReply(text="Billing listens on 8101 and the gateway forwards", finish_reason="length"))
    one = daemon(max_tokens="64")
    response, notes = one.chat(text="Tell me about billing.")
    result = response["result"]
    line = "(The answer was cut off at the output limit of 64 tokens; raising chat.max_tokens would let it finish.)"
    assert result["stopReason"] == "length"
    assert result["text"] == f"Billing listens on 8101 and the gateway forwards\n\n{line}"
    assert streamed(notes) == result["text"]
    assert one.stored(result["sessionId"])[-1] == ("assistant", result["text"])


# -- a model's call nested thousands deep --------------------------------------------------------------
def test_call_arguments_nested_thousands_deep_are_told_to_the_model_and_the_reply_goes_on(daemon, stub, workspace):
    deep = '{"query": ' + "[" * 1_500 + "]" * 1_500 + "}"
    call = {"index": 0, "id": "call_deep", "type": "function", "function": {"name": "search", "arguments": deep}}
    events = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    stub.queue(StubReply(raw_events=[*map(json.dumps, events), "[DONE]"]), "Billing listens on 8101.")
    one = daemon(workspace)
    response, notes = one.chat(text="Which port does billing use?")

    result = response["result"]
    assert result["text"].startswith("Billing listens on 8101.")
    told = stub.requests[1]["messages"][-1]
    assert told["role"] == "user" and told["content"].startswith("Your tool call could not be run: ")
    assert (
        "the arguments of the 'search' call hold arrays and objects nested more than 64 levels deep" in told["content"]
    )
    assert streamed(notes) == result["text"]
    stored = one.stored(result["sessionId"])
    assert stored[0] == ("user", "Which port does billing use?") and stored[-1] == ("assistant", result["text"])
    assert "[[[" not in json.dumps(stored)  # the malformed call is not stored
