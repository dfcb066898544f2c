"""The core message types' helpers: which calls each result answers, and the first look's identity."""

from __future__ import annotations

from imprintd.messages import FIRST_LOOK_CALL_PREFIX, ToolCall, assistant, calls_by_id, is_first_look, tool_result, user


def test_is_first_look_tells_the_daemon_s_look_from_the_model_s_calls():
    look = ToolCall(id=FIRST_LOOK_CALL_PREFIX + "0a1b2c3d", name="search", arguments={"query": "port"})
    own = ToolCall(id="call_0a1b2c3d", name="search", arguments={"query": "port"})
    assert is_first_look(assistant("", tool_calls=(look,))) and is_first_look(tool_result(look, "x"))
    assert not is_first_look(assistant("", tool_calls=(own,))) and not is_first_look(tool_result(own, "x"))
    assert not is_first_look(user("call_look at this")) and not is_first_look(assistant("call_look"))
    # A call on its own, as the research loop and the export see it.
    assert is_first_look(look) and not is_first_look(own)
    # A message that makes the model's own call beside a look is the model's.
    assert not is_first_look(assistant("", tool_calls=(look, own)))


def test_calls_by_id_names_the_last_call_made_under_an_id():
    first = ToolCall(id="call_1", name="search", arguments={"query": "port"})
    again = ToolCall(id="call_1", name="read_file", arguments={"path": "compose.yaml"})
    other = ToolCall(id="call_2", name="search", arguments={"query": "billing"})
    messages = [user("q"), assistant("", tool_calls=(first,)), assistant("", tool_calls=(again, other))]
    assert calls_by_id(messages) == {"call_1": again, "call_2": other}
