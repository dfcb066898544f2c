"""What the front doors' tests need of ``mcp-server-git`` beyond ``tests/mcp/servers.py`` (the
repository with its known history): the server's command line as an editor or an ACP client
writes it, the repository's branches (a tool that may act made one, or did not), and the
server processes still running for a repository.

Test modules import these from here, never from one another.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.mcp.servers import COMMITS
from tests.mcp.servers import git_repo as git_repository

__all__ = ["LATEST", "branches", "git_repository", "git_server", "git_server_processes"]

#: The newest commit's message: what a question about the history is answered from.
LATEST = COMMITS[-1][0]


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
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # gone meanwhile
            continue
        if b"mcp_server_git" in command and str(repo).encode() in command and state != "Z":
            found.append(int(entry.name))
    return found
