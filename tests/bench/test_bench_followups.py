"""How ``bench/bench_followups.py`` traces a follow-up's first request: docs/benchmarks.md's floor and
excess figures rest on it."""

from __future__ import annotations

from imprintd.messages import Message, ToolCall
from tests.bench import load_bench

followups = load_bench("bench_followups")

SYSTEM = Message(role="system", content="You are Imprint.")


def turn(number: int) -> list[Message]:
    """A question, its first look (call and result) and its answer."""
    call = ToolCall(id=f"call_look{number}", name="search", arguments={"query": f"q{number}"})
    return [
        Message(role="user", content=f"Question {number}?"),
        Message(role="assistant", tool_calls=(call,)),
        Message(role="tool", content=f"[1] hits {number}", tool_call_id=call.id),
        Message(role="assistant", content=f"Answer {number}."),
    ]


def request(session: str, messages, tokens, held, turn_start, evaluated):
    return followups.Request(
        coordinator=True,
        prompt=len(tokens),
        evaluated=evaluated,
        session_id=session,
        messages=messages,
        tokens=tokens,
        held=held,
        turn_start=turn_start,
    )


def test_an_appending_follow_up_costs_its_floor_and_a_drop_is_named(capsys):
    bench = followups.Bench()
    first, second, third = turn(1), turn(2), turn(3)
    # Reply 1: system (10 tokens) and its turn; it held its prompt and answer, 40 tokens.
    one = followups.Reply("first", session_id="s")
    one.requests.append(request("s", [SYSTEM, *first[:3]], list(range(36)), list(range(40)), 10, 36))
    # Reply 2 only appends: its turn starts at 40 (what reply 1 held), 30 tokens new.
    two = followups.Reply("follow-ups", session_id="s")
    prompt_two = [SYSTEM, *first, *second[:3]]
    two.requests.append(request("s", prompt_two, list(range(70)), list(range(74)), 40, 30))
    # Reply 3 drops reply 1's look: the prompt parts from the state at token 12, before its turn at 50.
    three = followups.Reply("follow-ups", session_id="s")
    prompt_three = [SYSTEM, first[0], first[3], *second, *third[:3]]
    three.requests.append(request("s", prompt_three, [*range(12), *range(100, 168)], [], 50, 68))
    bench.replies = [one, two, three]

    followups.trace(bench)

    out = capsys.readouterr().out
    assert "     1: P 70 E 30 floor 30 excess +0; shared 40 of 40 held, turn starts at 40" in out
    assert "     2: P 80 E 68 floor 30 excess +38; shared 12 of 74 held, turn starts at 50" in out
    # The first message of reply 2's prompt not rendered alike in reply 3's: reply 1's look call.
    assert "parts at: message 2 (tool exchange, dropped), 2 of the earlier 8 gone; tools same" in out
    assert "evaluated 0.65 of the prompt, the floor 0.40 (98/60/150); excess 38 tokens" in out


def test_the_held_out_session_has_its_own_questions():
    in_sample, _ = followups.REPOS["httpx"]
    held_out, others = followups.REPOS["anyio"]
    assert not set(in_sample) & set(held_out)
    # The first question, 10 follow-ups and a switch and a restart at each point: none asked twice.
    assert len(held_out) >= 1 + 10 + 2 * len(followups.POINTS) and others


class FakeChat:
    """``Chat`` as ``run_session`` drives it: each reply recorded with its chat, session and question."""

    made: list[FakeChat] = []
    asked: list[tuple[int, str | None, str]] = []
    summarize: set[str] = set()  # questions whose reply writes the running summary

    def __init__(self, settings, model_factory=None) -> None:
        FakeChat.made.append(self)
        self.closed = False

    async def reply(self, request, events):
        chat = FakeChat.made.index(self)
        assert not self.closed
        FakeChat.asked.append((chat, request.session_id, request.text))
        if request.text in FakeChat.summarize:
            events.summary("summary", 1, 2)
        session = request.session_id or f"s{len(FakeChat.asked)}"
        return type("Outcome", (), {"session_id": session})()

    def close(self) -> None:
        self.closed = True


async def run_fake(monkeypatch, tmp_path, summarize=()):
    import imprintd.chat

    monkeypatch.setenv("IMPRINT_CONFIG", str(tmp_path / "config.toml"))
    monkeypatch.setattr(imprintd.chat, "Chat", FakeChat)
    FakeChat.made, FakeChat.asked, FakeChat.summarize = [], [], set(summarize)
    bench = followups.Bench()
    asks = [f"q{n}" for n in range(40)]
    others = [f"o{n}" for n in range(4)]
    await followups.run_session(
        bench, n_ctx=4096, max_tokens=64, asks=asks, follow_ups=10, workspace=None, others=others
    )
    return bench


async def test_the_session_is_switched_to_and_restarted_before_follow_ups_4_7_and_10(monkeypatch, tmp_path):
    bench = await run_fake(monkeypatch, tmp_path)

    scenarios = [reply.scenario for reply in bench.replies]
    point = ["other session", "switch", "restart"]
    follow = ["follow-ups"]
    assert scenarios == ["first", *follow * 3, *point, *follow * 3, *point, *follow * 3, *point, *follow]
    # The session asks its questions in order whatever the reply is labelled; the other session
    # is one session throughout; each restart is a new Chat, the one before it closed.
    first_session = [text for _, session, text in FakeChat.asked if session in (None, "s1") and text[0] == "q"]
    assert first_session == [f"q{n}" for n in range(17)]
    others = [(session, text) for _, session, text in FakeChat.asked if text[0] == "o"]
    assert others == [(None, "o0"), ("s5", "o1"), ("s5", "o2")]
    restarts = [chat for (chat, _, _), s in zip(FakeChat.asked, scenarios, strict=True) if s == "restart"]
    assert restarts == [1, 2, 3] and all(chat.closed for chat in FakeChat.made)


async def test_a_switch_on_a_summary_rewrite_is_tried_again(monkeypatch, tmp_path):
    bench = await run_fake(monkeypatch, tmp_path, summarize={"q4"})  # the first switch's question

    scenarios = [reply.scenario for reply in bench.replies]
    assert scenarios[4:9] == ["other session", "switch, summary", "other session", "switch", "restart"]


def test_switch_and_restart_are_reported_at_each_point_and_as_their_mean():
    bench = followups.Bench()
    for scenario, evaluated in (("switch", 45), ("follow-ups", 90), ("switch", 30), ("switch", 30)):
        reply = followups.Reply(scenario)
        reply.requests.append(followups.Request(coordinator=True, prompt=100, evaluated=evaluated))
        bench.replies.append(reply)
    assert followups.point_shares(bench, "switch") == "0.45, 0.30, 0.30; mean 0.35 of 3"
    assert followups.point_shares(bench, "restart") == "none"
