"""What ``imprintd serve`` loads before it answers ``initialize``: only what every session needs.

The remote model's HTTP client, the served-models client, gitleaks' rule set and the history
search's stemmer load when a session first uses them (docs/benchmarks.md: `initialize`). Checked
in a fresh interpreter, on the path ``initialize`` takes: the command line, the server, the
model as ``initialize`` describes it (a local GGUF's template read from its header).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Modules a session loads on first use, never at start with the local model.
LOADED_ON_FIRST_USE = (
    "httpx",
    "imprintd.models.remote",
    "imprintd.models.served",
    "imprintd.secret_rules",
    "imprintd.go_regex",
    "snowballstemmer",
    "llama_cpp",
)

INITIALIZE_PATH = """
import json, sys
import imprintd.cli
from imprintd import server, settings
from imprintd.chat import Chat
chat = Chat(settings.load())
built = server.build_server(chat)
built.model_info()  # what initialize's result tells: the model, its chat format
print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in ("httpx", "imprintd", "snowballstemmer", "llama_cpp"))))
"""


def _loaded_at_start(tmp_path: Path, **env: str) -> set[str]:
    environ = {key: value for key, value in os.environ.items() if not key.startswith("IMPRINT_")}
    environ.update(
        IMPRINT_DATA_DIR=str(tmp_path / "data"),
        IMPRINT_CACHE_DIR=str(tmp_path / "cache"),
        IMPRINT_CONFIG=str(tmp_path / "none.toml"),
        PYTHONPATH=str(ROOT),
        **env,
    )
    done = subprocess.run(
        [sys.executable, "-c", INITIALIZE_PATH], capture_output=True, text=True, env=environ, check=True, timeout=120
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_initialize_with_the_local_model_loads_no_remote_client_rules_or_stemmer(tmp_path):
    loaded = _loaded_at_start(tmp_path)
    assert "imprintd.server" in loaded and "imprintd.models.local" in loaded  # the path was taken
    assert [name for name in LOADED_ON_FIRST_USE if name in loaded] == []


def test_a_remote_provider_loads_its_client_when_initialize_describes_it(tmp_path):
    loaded = _loaded_at_start(
        tmp_path,
        IMPRINT_CHAT_PROVIDER="openai",
        IMPRINT_CHAT_MODEL="served",
        IMPRINT_CHAT_BASE_URL="http://127.0.0.1:9/v1",
    )
    assert "imprintd.models.remote" in loaded and "httpx" in loaded
    assert "imprintd.secret_rules" not in loaded and "snowballstemmer" not in loaded
