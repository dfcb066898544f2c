"""Runs llama-cpp-python's OpenAI-compatible server for the remote tests (``running_server``
starts one on a free port and waits until it answers).

``python -m tests.models.llama_server --model X --port N ...`` is ``python -m llama_cpp.server``
with the same arguments, except that on llama.cpp builds that use AMX the model loads without
extra buffer types, as ``imprintd.models.local`` does: that build's AMX matmul segfaults on the
first multi-token batch (llama.cpp's https://github.com/ggml-org/llama.cpp/issues/20824), and the server offers no flag to turn it off.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.models.real_model import EMBEDDED_GGUF, missing_real_model

API_KEY = "test-key-7c1d"
READY_WITHIN = 180.0  # seconds: loading is quick, but CI machines can be slow and busy
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running_server(tmp_path_factory, n_ctx: int) -> Iterator[str]:
    """Base URL of llama-cpp-python's server on the embedded GGUF with a window of ``n_ctx``."""
    try:
        import fastapi  # noqa: F401  (the [server] extra)
        import sse_starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as error:
        missing_real_model(f"llama-cpp-python[server] is not installed ({error})")
    port = free_port()
    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    command = [
        sys.executable,
        "-m",
        "tests.models.llama_server",
        "--model",
        str(EMBEDDED_GGUF),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--api_key",
        API_KEY,
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_until_ready(process, base_url, log_path)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


def wait_until_ready(process: subprocess.Popen, base_url: str, log_path: Path) -> None:
    deadline = time.monotonic() + READY_WITHIN
    with httpx.Client(timeout=5.0) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(
                    f"llama-cpp-python's server exited with {process.returncode}:\n"
                    f"{log_path.read_text(errors='replace')[-3000:]}"
                )
            try:
                if client.get(f"{base_url}/models", headers={"Authorization": f"Bearer {API_KEY}"}).status_code == 200:
                    return
            except httpx.TransportError:
                pass  # not listening yet
            try:
                process.wait(timeout=0.2)  # a bounded pause between polls that also notices an exit
            except subprocess.TimeoutExpired:
                pass
    pytest.fail(
        f"llama-cpp-python's server was not ready within {READY_WITHIN:g} s:\n"
        f"{log_path.read_text(errors='replace')[-3000:]}"
    )


def main() -> None:
    from llama_cpp import llama_cpp as lib

    from imprintd.models.local import _has_amx

    if _has_amx():
        default_params = lib.llama_model_default_params

        def without_extra_buffers():
            params = default_params()
            params.use_extra_bufts = False
            return params

        # This process only serves tests; Llama.__init__ looks the function up on this module.
        lib.llama_model_default_params = without_extra_buffers

    from llama_cpp.server.__main__ import main as serve

    serve()


if __name__ == "__main__":
    main()
