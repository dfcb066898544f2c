"""A workspace that changes under the daemon: files replaced by symlinks to outside, FIFOs,
2 GB sparse files and folders, while it is indexed and in the middle of a reply.

The real daemon over stdio, the scripted model on loopback. Whatever the interleaving, no
text from outside the workspace (and no NUL) reaches the model, every reply answers, and the
process exits promptly on shutdown + exit and on stdin EOF. The churn's seed is printed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
from pathlib import Path

import pytest

from tests.e2e.rawclient import RawClient
from tests.openai_stub import StubReply

CANARY = "OUTSIDE-CANARY-7f3a"
FILES = 120


def make_workspace(root: Path) -> list[str]:
    names = []
    for n in range(FILES):
        folder = root / f"pkg{n % 6}"
        folder.mkdir(parents=True, exist_ok=True)
        name = f"pkg{n % 6}/module{n}.txt"
        (root / name).write_text(f"zanzibar module {n} handles the billing port {8000 + n}\n" * 3)
        names.append(name)
    return names


def make_outside(tmp_path: Path) -> tuple[Path, Path]:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text(f"zanzibar billing port {CANARY}\n" * 3)
    (outside / "module1.txt").write_text(f"zanzibar {CANARY}\n")
    return secret, outside


def become(path: Path, state: str, secret: Path, outside: Path) -> None:
    """Replace whatever is at ``path`` with ``state``; a racing reader may see any moment of it."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
    if state == "symlink":
        path.symlink_to(secret)
    elif state == "fifo":
        os.mkfifo(path)
    elif state == "sparse":
        with open(path, "wb") as handle:
            handle.write(b"zanzibar sparse head\n")
            handle.truncate(2 * 1024**3)
    elif state == "folder":
        path.mkdir()
        (path / "inner.txt").write_text("zanzibar inner\n")
    elif state == "folder-link":
        path.symlink_to(outside, target_is_directory=True)
    else:
        path.write_text(f"zanzibar rewritten {random.random()}\n")


STATES = ["symlink", "fifo", "sparse", "folder", "folder-link", "text"]


class Churn:
    """A thread that keeps turning the workspace's files into every state until stopped."""

    def __init__(self, root: Path, names: list[str], secret: Path, outside: Path, seed: int) -> None:
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.swaps = 0
        self.thread = threading.Thread(target=self._run, args=(root, names, secret, outside), daemon=True)

    def _run(self, root, names, secret, outside) -> None:
        while not self.stop.is_set():
            name = self.rng.choice(names)
            try:
                become(root / name, self.rng.choice(STATES), secret, outside)
                self.swaps += 1
            except OSError:
                pass  # the daemon or another swap got there first: churn on

    def __enter__(self) -> Churn:  # noqa: PYI034
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(30)


def search(query: str, call_id: str) -> dict:
    return {"id": call_id, "name": "search", "arguments": {"query": query}}


def read(path: str, call_id: str, **lines) -> dict:
    return {"id": call_id, "name": "read_file", "arguments": {"path": path, **lines}}


def assert_nothing_outside_reached_the_model(stub, seed) -> None:
    for request in stub.requests:
        sent = json.dumps(request)
        assert CANARY not in sent, f"seed {seed}: outside text reached the model"
        assert "\\u0000" not in sent, f"seed {seed}: a NUL reached the model"


def end(client: RawClient, how: str) -> None:
    if how == "exit":
        client.request("shutdown")
        client.notify("exit")
        assert client.wait(timeout=30) == 0
    else:
        client.close_input()
        assert client.wait(timeout=30) in (0, 1)


@pytest.mark.parametrize("how", ["exit", "eof"])
def test_replies_while_the_workspace_churns_during_indexing(tmp_path, daemon_env, stub, how):
    seed = random.randrange(2**32)
    print(f"churn seed {seed}")
    root = tmp_path / "ws"
    names = make_workspace(root)
    secret, outside = make_outside(tmp_path)
    reads = [read(name, f"r{n}") for n, name in enumerate(names[:8])]
    client = RawClient(daemon_env)
    try:
        client.initialize()
        with Churn(root, names, secret, outside, seed) as churn:
            for turn in range(4):
                stub.queue(StubReply(tool_calls=[search("zanzibar billing port", "s1"), *reads]), "Done looking.")
                response = client.response(
                    client.request(
                        "imprint/chat", {"text": f"Which port, take {turn}?", "workspace": str(root), "persist": False}
                    )
                )
                assert "result" in response, f"seed {seed}: {response}"
        assert churn.swaps > 0
        end(client, how)
    finally:
        client.kill()
    assert_nothing_outside_reached_the_model(stub, seed)


@pytest.mark.parametrize("how", ["exit", "eof"])
def test_files_swapped_in_the_middle_of_a_reply_never_leak_or_hang(tmp_path, daemon_env, stub, how):
    root = tmp_path / "ws"
    names = make_workspace(root)
    secret, outside = make_outside(tmp_path)
    swapped = {names[1]: "symlink", names[2]: "fifo", names[3]: "sparse", names[4]: "folder", "pkg5": "folder-link"}

    def swap_then_read(request):
        # Runs when the model is asked after the search: the hits name these files as they were.
        for name, state in swapped.items():
            become(root / name, state, secret, outside)
        return StubReply(
            tool_calls=[read(name, f"r{n}") for n, name in enumerate(names[1:6])]
            + [
                read(names[3], "r-late", start_line=2),
                read("pkg5/module5.txt", "r-link"),
                search("zanzibar billing port", "s2"),
            ]
        )

    stub.queue(StubReply(tool_calls=[search("zanzibar billing port", "s1")]), swap_then_read, "All read.")
    client = RawClient(daemon_env)
    try:
        client.initialize()
        response = client.response(
            client.request("imprint/chat", {"text": "Which port?", "workspace": str(root), "persist": False})
        )
        assert response["result"]["text"] == "All read."
        # A follow-up indexes the churned workspace again: FIFO, sparse file and links in place.
        stub.queue("Again.")
        again = client.response(
            client.request("imprint/chat", {"text": "And now?", "workspace": str(root), "persist": False})
        )
        assert again["result"]["text"] == "Again."
        end(client, how)
    finally:
        client.kill()
    assert len(stub.requests) == 4
    tool_results = {m["tool_call_id"]: m["content"] for m in stub.requests[2]["messages"] if m["role"] == "tool"}
    assert len(tool_results) == 9  # the first search and every later call answered
    assert "binary" in tool_results["r2"] and "binary" in tool_results["r-late"]  # the sparse file
    assert "no file" in tool_results["r1"] and "no file" in tool_results["r3"]  # FIFO and folder
    assert "outside the workspace" in tool_results["r-link"]
    assert_nothing_outside_reached_the_model(stub, "fixed")
