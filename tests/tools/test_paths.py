"""Containment of workspace paths (docs/architecture.md, "tools/: what a reply may look at"): nothing outside is read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from imprintd.tools.base import ToolError
from imprintd.tools.paths import is_secret_path, normalized, resolve_in_workspace
from imprintd.tools.workspace import ReadFileTool

SECRET = "TOP-SECRET-OUTSIDE-7f3a"


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace with ordinary files, and a secret file and folder outside it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET + "\n")
    (outside / "dir").mkdir()
    (outside / "dir" / "more.txt").write_text(SECRET + " again\n")
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hello')\n")
    (root / "link_file.txt").symlink_to(outside / "secret.txt")
    (root / "link_dir").symlink_to(outside / "dir", target_is_directory=True)
    (root / "src" / "inner_link.py").symlink_to(root / "src" / "app.py")
    (root / "innocent.txt").symlink_to(root / ".env")
    (root / ".env").write_text("API_KEY=inside-secret\n")
    (root / ".env.local").write_text("API_KEY=inside-secret\n")
    (root / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[remote]\nurl = https://token@example.com\n")
    return root, outside


REFUSED = [
    ("../outside/secret.txt", "'..'"),
    ("src/../../outside/secret.txt", "'..'"),
    ("..", "'..'"),
    ("/etc/passwd", "absolute"),
    ("C:\\Windows\\win.ini", "absolute"),
    ("~/secret.txt", "'~'"),
    ("~root/.bashrc", "'~'"),
    ("", "empty"),
    ("   ", "empty"),
    ("src/app.py\x00.txt", "NUL"),
    ("src/app.py\n", "newline"),
    ("src/\rapp.py", "control"),
    ("link_file.txt", "symbolic link"),
    ("link_dir/more.txt", "symbolic link"),
    (".env", "secret"),
    (".env.local", "secret"),
    ("id_rsa", "secret"),
    (".git/config", ".git"),
    ("innocent.txt", "secret"),  # a harmless name symlinked to .env
    (".", "workspace itself"),
]


@pytest.mark.parametrize(("relative", "reason"), REFUSED)
def test_refused_paths_name_the_path_and_reason(layout, relative, reason):
    root, _ = layout
    with pytest.raises(ToolError) as refused:
        resolve_in_workspace(root, relative)
    message = str(refused.value)
    assert repr(relative) in message
    assert reason in message


@pytest.mark.parametrize(("relative", "_reason"), REFUSED)
async def test_read_file_never_reads_outside_or_secrets(layout, relative, _reason):
    root, _ = layout
    with pytest.raises(ToolError) as refused:
        await ReadFileTool(root).run({"path": relative})
    assert SECRET not in str(refused.value)
    assert "inside-secret" not in str(refused.value)


def test_non_string_path_is_refused(layout):
    root, _ = layout
    with pytest.raises(ToolError, match="must be a string"):
        resolve_in_workspace(root, 42)  # type: ignore[arg-type]


def test_contained_paths_resolve(layout):
    root, _ = layout
    assert resolve_in_workspace(root, "src/app.py") == (root / "src" / "app.py").resolve()
    assert resolve_in_workspace(root, "./src//app.py") == (root / "src" / "app.py").resolve()
    # A symlink that stays inside the workspace is fine.
    assert resolve_in_workspace(root, "src/inner_link.py") == (root / "src" / "app.py").resolve()
    # A missing file resolves (the caller reports it missing).
    assert resolve_in_workspace(root, "src/new.py") == (root / "src" / "new.py").resolve()
    assert normalized("./src\\app.py") == "src/app.py"


def test_root_given_through_a_symlink(layout, tmp_path):
    root, _ = layout
    alias = tmp_path / "alias"
    alias.symlink_to(root, target_is_directory=True)
    assert resolve_in_workspace(alias, "src/app.py") == (root / "src" / "app.py").resolve()
    with pytest.raises(ToolError):
        resolve_in_workspace(alias, "link_file.txt")


def test_symlink_loop_is_refused(layout):
    root, _ = layout
    os.symlink("loop_b", root / "loop_a")
    os.symlink("loop_a", root / "loop_b")
    with pytest.raises(ToolError):
        resolve_in_workspace(root, "loop_a/x")


@pytest.mark.parametrize(
    "relative",
    [
        ".env",
        ".env.production",
        "config/.ENV",
        "certs/server.pem",
        "tls/server.key",
        "id_rsa",
        "id_rsa.pub",
        "id_ed25519",
        "store.p12",
        "store.pfx",
        "ca.crt",
        "ca.cer",
        ".netrc",
        "data/imprint.sqlite3",
        "data/imprint.sqlite3-wal",
        ".git/config",
        ".git",
        "a/.ssh/config",
    ],
)
def test_secret_paths(relative):
    assert is_secret_path(relative)


@pytest.mark.parametrize(
    "relative",
    [
        "src/app.py",
        "environment.md",
        "env/settings.py",
        "keys.py",
        "docs/certificate.md",
        "src/.envrc.example.txt",
        "gitignore.txt",
        "README",
    ],
)
def test_ordinary_paths_are_not_secret(relative):
    assert not is_secret_path(relative)
