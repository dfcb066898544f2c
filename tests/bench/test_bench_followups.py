"""How ``bench/bench_followups.py`` traces a follow-up's first request: the README's floor and
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
    assert len(held_out) >= 10 + followups.SWITCH_TRIES + 2 and len(others) == followups.SWITCH_TRIES + 1
