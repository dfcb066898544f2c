"""A small git repository with a known history, and ``mcp-server-git`` (the PyPI package, in the
test environment) serving it over stdio: the real MCP server the front doors' tests configure.

Test modules import these from here, never from one another.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: The history, oldest first: (file, its text, the commit message).
COMMITS = [
    ("services/billing.yaml", "name: billing\nport: 8080\n", "Add the billing service on port 8080"),
    ("services/billing.yaml", "name: billing\nport: 8101\n", "Move billing to port 8101 behind the gateway"),
]
#: The commit message a question about the history is answered from.
LATEST = COMMITS[-1][2]


def git_repository(root: Path) -> Path:
    """``root`` made a git repository holding ``COMMITS``, on branch ``main``."""
    root.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "Imprint Tests",
        "GIT_AUTHOR_EMAIL": "tests@imprint.invalid",
        "GIT_COMMITTER_NAME": "Imprint Tests",
        "GIT_COMMITTER_EMAIL": "tests@imprint.invalid",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True, env=env)
    for path, text, message in COMMITS:
        file = root / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text, encoding="utf-8")
        subprocess.run(["git", "-C", str(root), "add", path], check=True, env=env)
        subprocess.run(["git", "-C", str(root), "commit", "-q", "-m", message], check=True, env=env)
    return root


def git_server(repo: Path) -> tuple[str, list[str]]:
    """The command and arguments that start ``mcp-server-git`` confined to ``repo``."""
    return sys.executable, ["-m", "mcp_server_git", "--repository", str(repo)]


def branches(repo: Path) -> list[str]:
    found = subprocess.run(
        ["git", "-C", str(repo), "branch", "--format=%(refname:short)"], check=True, capture_output=True, text=True
    )
    return found.stdout.split()


def git_server_processes(repo: Path) -> list[int]:
    """The ids of running ``mcp-server-git`` processes serving ``repo`` (zombies left out)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            status = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # gone meanwhile
            continue
        if b"mcp_server_git" in command and str(repo).encode() in command and status != "Z":
            found.append(int(entry.name))
    return found
