"""Params that are not what they claim, on ``imprintd acp``'s raw wire: a ``cwd`` too long for
the system, holding a NUL or a symbolic link loop, a resource URI that does not parse, bytes
that are not UTF-8, and a prompt too long to read. Each is answered -32602 naming the param
(-32700 for bytes outside any string), nothing is stored, and the agent keeps serving."""

from __future__ import annotations

import json

import apsw
import pytest

from tests.acp.peer import RawAgent

LONG = "/" + "a" * 5000  # past PATH_MAX (4096) and NAME_MAX (255): ENAMETOOLONG


@pytest.fixture
def agent(raw_agent: RawAgent) -> RawAgent:
    raw_agent.request(1, "initialize", {"protocolVersion": 1})
    assert "result" in raw_agent.read()
    return raw_agent


def new_session(agent: RawAgent, request_id: int, cwd: str) -> dict:
    agent.request(request_id, "session/new", {"cwd": cwd, "mcpServers": []})
    return agent.read()


def still_serves(agent: RawAgent, workspace) -> str:
    answer = new_session(agent, 99, str(workspace))
    assert "result" in answer, answer
    published = agent.read()  # the slash commands follow the response that names the session
    assert published["params"]["update"]["sessionUpdate"] == "available_commands_update", published
    return answer["result"]["sessionId"]


def stored_messages(daemon_env) -> list[tuple[str, int]]:
    database = apsw.Connection(f"{daemon_env['IMPRINT_DATA_DIR']}/imprint.sqlite3")
    try:
        return [(role, length) for role, length in database.execute("SELECT role, length(content) FROM messages")]
    finally:
        database.close()


def bad_folders(tmp_path) -> dict[str, tuple[str, str]]:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    return {
        "too long": (LONG, "too long"),
        "NUL": (str(tmp_path) + "/a\x00b", "NUL"),
        "symlink loop": (str(loop), "symbolic link loop"),
    }


@pytest.mark.parametrize("kind", ["too long", "NUL", "symlink loop"])
def test_a_cwd_that_is_not_a_path_is_32602_naming_cwd_on_new_load_and_list(agent, tmp_path, workspace, kind):
    cwd, named = bad_folders(tmp_path)[kind]
    answer = new_session(agent, 2, cwd)
    error = answer["error"]
    assert error["code"] == -32602 and error["message"].startswith("cwd:") and named in error["message"], error
    assert "incident" not in error["message"] and len(error["message"]) < 400  # the 5,000 characters are not echoed
    session_id = still_serves(agent, workspace)
    agent.request(3, "session/load", {"sessionId": session_id, "cwd": cwd, "mcpServers": []})
    error = agent.read()["error"]
    assert error["code"] == -32602 and error["message"].startswith("cwd:") and named in error["message"], error
    agent.request(4, "session/list", {"cwd": cwd})
    error = agent.read()["error"]
    assert error["code"] == -32602 and error["message"].startswith("cwd:") and named in error["message"], error
    assert agent.close() == 0
    assert b"Traceback" not in agent.stderr


def test_resource_uris_that_do_not_parse_are_shown_as_sent(agent, stub, workspace, daemon_env):
    session_id = still_serves(agent, workspace)
    stub.queue("Read it.")
    prompt = [
        {"type": "text", "text": "What do these say?"},
        {"type": "resource_link", "uri": "file://[::1/x" + "b" * 5000, "name": "odd"},
        {"type": "resource", "resource": {"uri": "http://[broken", "text": "port: 8101"}},
        {"type": "resource", "resource": {"uri": "file://" + LONG + "\x00", "text": "hello"}},
    ]
    agent.request(5, "session/prompt", {"sessionId": session_id, "prompt": prompt})
    while "id" not in (answer := agent.read()):
        pass
    assert answer["result"]["stopReason"] == "end_turn", answer
    [request] = stub.requests
    asked = request["messages"][-1]["content"]
    assert "http://[broken" in asked and "port: 8101" in asked


def test_params_that_are_not_utf8_are_32602_naming_the_field_and_minus_32700_outside_strings(agent, workspace):
    agent.write(b'{"jsonrpc":"2.0","id":6,"method":"session/new","params":{"cwd":"/tmp/\xff\xfe","mcpServers":[]}}\n')
    error = agent.read()["error"]
    assert error["code"] == -32602 and "params.cwd" in error["message"] and "UTF-8" in error["message"], error
    agent.write(
        b'{"jsonrpc":"2.0","id":7,"method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"a\xc3"}]}}\n'
    )
    error = agent.read()["error"]
    assert error["code"] == -32602 and "params.prompt[0].text" in error["message"], error
    agent.write(b'{"jsonrpc":"2.0","id":8,"method":"session/new","params":{"cwd":"/tmp"}\xff}\n')
    answer = agent.read()
    assert answer["id"] is None and answer["error"]["code"] == -32700, answer
    agent.write(b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"\xff"}}\n')  # dropped
    still_serves(agent, workspace)
    assert agent.close() == 0
    assert b"Traceback" not in agent.stderr


def test_a_refused_prompt_of_a_15_mb_resource_stores_nothing(agent, stub, workspace, daemon_env):
    session_id = still_serves(agent, workspace)
    resource = {"uri": f"file://{workspace}/dump.log", "text": "x" * 15_000_000}
    prompt = [{"type": "text", "text": "What went wrong?"}, {"type": "resource", "resource": resource}]
    agent.write(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 9,
                "method": "session/prompt",
                "params": {"sessionId": session_id, "prompt": prompt},
            }
        ).encode()
        + b"\n"
    )
    error = agent.read()["error"]
    assert error["code"] == -32602 and error["message"].startswith("prompt:"), error
    assert "1,000,000" in error["message"] and "15,000," in error["message"]
    assert stub.requests == []
    assert agent.close() == 0
    assert stored_messages(daemon_env) == []  # not the 15 MB question, not anything
