"""The daemon's own files inside the workspace: with ``--log-file <workspace>/imprintd.log -v``
the log holds every session's messages, and the data and cache dirs may sit in the workspace
too. ``read_file`` refuses each of them (a symlink or a hard link to one included) with a
refusal the model sees, and neither search nor the index shows their text."""

from __future__ import annotations

import os

from tests.e2e.rawclient import RawClient
from tests.openai_stub import StubReply

PRIVATE = "The launch word is quokka-7731."  # answered in a persist:false session


def read(path: str, call_id: str) -> dict:
    return {"id": call_id, "name": "read_file", "arguments": {"path": path}}


def tool_results(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def test_the_log_data_and_index_files_are_refused_wherever_they_sit(daemon_env, stub, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("billing listens on 8101\n")
    log = workspace / "imprintd.log"
    env = {**daemon_env, "IMPRINT_DATA_DIR": str(workspace / "state"), "IMPRINT_CACHE_DIR": str(workspace / "cachedir")}
    raw = RawClient(env, args=("serve", "--log-file", str(log), "-v"))
    try:
        raw.initialize(rootUri=workspace.as_uri())
        stub.queue(PRIVATE)
        question = {"text": "What is the launch word?", "persist": False}
        assert raw.response(raw.request("imprint/chat", question))["result"]["text"] == PRIVATE
        assert "quokka-7731" in log.read_text()  # -v: the log holds the conversation
        (workspace / "log-link.txt").symlink_to(log)
        os.link(log, workspace / "log-copy.txt")
        names = [
            "imprintd.log",
            "log-link.txt",
            "log-copy.txt",
            "cachedir/workspace-index.sqlite3",
            "state/imprint.sqlite3",
        ]
        stub.queue(StubReply(tool_calls=[read(name, f"r{n}") for n, name in enumerate(names)]), "Nothing to see.")
        answer = raw.response(raw.request("imprint/chat", {"text": "What is in the log?"}))
        assert "result" in answer, answer
        after_reads = stub.requests[-1]
        search = {"id": "s1", "name": "search", "arguments": {"query": "quokka launch word billing"}}
        stub.queue(StubReply(tool_calls=[search]), "Billing is on 8101.")
        answer = raw.response(raw.request("imprint/chat", {"text": "Where is the launch word?"}))
        assert "result" in answer, answer
        after_search = stub.requests[-1]
    finally:
        raw.kill()
    reads = tool_results(after_reads)
    assert len(reads) == len(names)
    for name, result in zip(names, reads, strict=True):
        assert "quokka" not in result, (name, result)
        assert "refused path" in result, (name, result)
        if not name.startswith("state/"):  # the data dir's files are refused by name as well
            assert "imprintd's own files" in result, (name, result)
    [searched] = tool_results(after_search)
    assert "notes.txt" in searched  # the search ran and found the workspace's own text
    assert "quokka" not in searched and "imprintd.log" not in searched and "log-copy" not in searched, searched
