"""``imprintd ask`` and a follow-up for each of several chat-format families, all in one process.

``test_ask.py`` runs this once for every family it checks, instead of two ``imprintd`` processes
a family: each ask is the command's own ``main`` (its arguments, settings from the environment,
the reply, what it prints), with stdout and stderr captured. Each family gets its own GGUF
file name (a model is known by its path), data folder and cache folder, as a fresh process would.

    python -m tests.models.chat_formats.ask_families EMBEDDED.gguf FOLDER OUT.json FAMILY...

OUT.json holds, per family, ``first`` and ``second`` (the follow-up, or null when the first
failed), each with ``returncode``, ``stdout`` and ``stderr``; or ``error``, the traceback of what
failed before or around them (a template the GGUF copy could not take, say).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import traceback
from pathlib import Path

from imprintd import cli
from tests.models.chat_formats.families import FAMILIES
from tests.models.chat_formats.gguf_copy import with_chat_template

QUESTION = "Which port does the server listen on?"
FOLLOW_UP = "And which host?"
#: The workspace's one file: the server's port and host, then forty upstreams, each with a port
#: and a host too. The first look finds them all, so the coordinator round's prompt (the system
#: prompt, the tools, the look's call and its result) comes to more than the research token
#: budget: it is rendered through the family's template and counted, then refused before
#: anything is evaluated, whatever the machine's speed, and the final answer is written from the
#: notes. (With a look that fitted, the round was cut by the time budget after a first batch of
#: 512 tokens, or not, as the machine's load had it.)
CONFIG = "\n".join(
    ["[server]", "port = 8080", 'host = "0.0.0.0"', ""]
    + [
        line
        for n in range(1, 41)
        for line in (
            f"[server.upstream_{n}]",
            f"port = {9000 + n}",
            f'host = "10.0.0.{n}"',
            f"listen_timeout_s = {n}",
            "",
        )
    ]
)
#: Kept cheap: the least output a turn may have and the least research token budget, no section
#: workers; a 2,048-token context holds the system prompt, the tools and the first look. The time
#: budget is long enough never to be what stops research.
CHEAP = {
    "IMPRINT_CHAT_N_CTX": "2048",
    "IMPRINT_CHAT_MAX_TOKENS": "16",
    "IMPRINT_CHAT_ANALYSIS_WORKERS": "0",
    "IMPRINT_CHAT_RESEARCH_TOKEN_BUDGET": "1024",
    "IMPRINT_CHAT_RESEARCH_TIME_BUDGET": "120",
    "IMPRINT_CHAT_REASONING": "on",  # the thinking prompts are rendered too
}


def ask(argv: list[str], env: dict[str, str]) -> dict:
    """One ``imprintd ask`` in this process, with ``env`` as its environment."""
    for name in [name for name in os.environ if name.startswith("IMPRINT_")]:
        del os.environ[name]
    os.environ.update(env)
    for handler in logging.root.handlers[:]:  # each command sets up its own log, as a new process would
        logging.root.removeHandler(handler)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(["ask", *argv])
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 1
    return {"returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def session_of(stderr: str) -> str:
    return [line for line in stderr.splitlines() if line.startswith("session ")][-1].split()[1]


def run_family(name: str, embedded: Path, folder: Path) -> dict:
    family = next(f for f in FAMILIES if f.name == name)
    home = folder / name
    workspace = home / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "config.toml").write_text(CONFIG, encoding="utf-8")
    for old in folder.glob("*.gguf"):  # one copy at a time: 98 MB each
        old.unlink()
    model = with_chat_template(embedded, folder / f"{name}.gguf", family.source)
    env = {
        **CHEAP,
        "IMPRINT_CHAT_MODEL": str(model),
        "IMPRINT_DATA_DIR": str(home / "data"),
        "IMPRINT_CACHE_DIR": str(home / "cache"),
        "IMPRINT_CONFIG": str(home / "config.toml"),
    }
    first = ask([QUESTION, "--workspace", str(workspace)], env)
    second = None
    if first["returncode"] == 0:
        second = ask([FOLLOW_UP, "--workspace", str(workspace), "--session", session_of(first["stderr"])], env)
    return {"first": first, "second": second}


def main() -> None:
    embedded, folder, out, *names = sys.argv[1:]
    results = {}
    for name in names:
        try:
            results[name] = run_family(name, Path(embedded), Path(folder))
        except Exception:  # one family's failure is its test's, not every family's
            results[name] = {"error": traceback.format_exc()}
    Path(out).write_text(json.dumps(results), encoding="utf-8")


if __name__ == "__main__":
    main()
