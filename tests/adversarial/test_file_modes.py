"""Every file the real daemon writes is 0600 and every folder it creates 0700, whatever the
umask and whether its folders existed: the data database, the workspace index (each with its
-wal and -shm), the ``--log-file``. Folders that existed are left as they were."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from imprintd import private
from tests.e2e.rawclient import RawClient
from tests.openai_stub import StubReply


def modes(*roots: Path) -> dict[Path, int]:
    """Every path under ``roots`` (the roots included) and its permission bits."""
    found = {}
    for root in roots:
        if not root.exists():
            continue
        found[root] = stat.S_IMODE(root.stat().st_mode)
        for folder, folders, files in os.walk(root):
            for name in folders + files:
                path = Path(folder) / name
                found[path] = stat.S_IMODE(path.lstat().st_mode)
    return found


def wrong_modes(seen: dict[Path, int], before: dict[Path, int]) -> dict[str, str]:
    """Paths the daemon made whose mode is not 0600 (files) or 0700 (folders), and old files left open."""
    wrong = {}
    for path, mode in seen.items():
        if path in before and path.is_dir():
            assert mode == before[path], f"{path}: an existing folder's mode was changed"
            continue
        expected = private.FOLDER_MODE if path.is_dir() else private.FILE_MODE
        if mode != expected:
            wrong[str(path)] = oct(mode)
    return wrong


@pytest.mark.parametrize("umask", [0o022, 0o000], ids=["umask 022", "umask 000"])
@pytest.mark.parametrize("folders", ["existing", "missing"])
def test_every_file_the_daemon_writes_is_private(tmp_path, daemon_env, stub, workspace, umask, folders):
    base = tmp_path / "state"
    data, cache, logs = base / "data", base / "cache", base / "logs"
    if folders == "existing":
        for folder in (data, cache, logs):
            folder.mkdir(parents=True, mode=0o755)
            folder.chmod(0o755)
        # An index an older imprintd left readable by everyone.
        (cache / "workspace-index.sqlite3").touch(mode=0o644)
        (cache / "workspace-index.sqlite3").chmod(0o644)
    else:
        data, cache, logs = base / "a" / "data", base / "b" / "cache", base / "c" / "logs"
        logs.mkdir(parents=True)  # the --log-file's folder is the user's to make
        for folder in (logs, logs.parent):
            folder.chmod(0o755)
    base.chmod(0o755)
    before = modes(base)
    search = StubReply(tool_calls=[{"name": "search", "arguments": {"query": "billing port"}}])
    stub.queue(search, "Billing listens on 8101.", "Still 8101.")
    env = {**daemon_env, "IMPRINT_DATA_DIR": str(data), "IMPRINT_CACHE_DIR": str(cache)}

    previous = os.umask(umask)
    try:
        client = RawClient(env, args=("serve", "--log-file", str(logs / "imprintd.log"), "-v"))
    finally:
        os.umask(previous)
    try:
        client.initialize()
        first = client.response(client.request("imprint/chat", {"text": "Which port?", "workspace": str(workspace)}))
        session_id = first["result"]["sessionId"]
        client.response(client.request("imprint/chat", {"text": "Sure?", "sessionId": session_id}))
        running = modes(base)  # while the databases are open: their -wal and -shm files exist
        client.request("shutdown")
        client.notify("exit")
        assert client.wait() == 0, client.stderr_text()[-3000:]
    finally:
        client.kill()
    after = modes(base)

    names = {path.name for path in running}
    assert {"imprint.sqlite3", "workspace-index.sqlite3", "imprintd.log"} <= names
    assert {
        "imprint.sqlite3-wal",
        "imprint.sqlite3-shm",
        "workspace-index.sqlite3-wal",
        "workspace-index.sqlite3-shm",
    } <= names
    assert wrong_modes(running, before) == {}
    assert wrong_modes(after, before) == {}
    if folders == "missing":  # every folder on the way was made private, not just the last one
        assert {oct(after[path]) for path in (data, data.parent, cache, cache.parent)} == {"0o700"}


def test_the_private_helpers_win_over_a_umask_that_takes_the_owners_bits(tmp_path):
    previous = os.umask(0o277)
    try:
        folder = private.private_folder(tmp_path / "x" / "y")
        file = private.private_file(folder / "f")
    finally:
        os.umask(previous)
    assert [oct(stat.S_IMODE(p.stat().st_mode)) for p in (folder.parent, folder, file)] == ["0o700", "0o700", "0o600"]
    file.chmod(0o644)
    private.private_file(file)  # an existing file of ours that others can read is narrowed
    assert oct(stat.S_IMODE(file.stat().st_mode)) == "0o600"
