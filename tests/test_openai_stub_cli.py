"""The scripted model server as a process (tests/openai_stub_cli.py), as the VS Code tests drive it."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_commands_queue_replies_report_requests_and_refuse_unknown_ones():
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.openai_stub_cli"],
        cwd=ROOT,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:

        def command(payload: dict) -> dict:
            proc.stdin.write(json.dumps(payload) + "\n")
            proc.stdin.flush()
            return json.loads(proc.stdout.readline())

        base_url = json.loads(proc.stdout.readline())["baseUrl"]
        assert base_url.startswith("http://127.0.0.1:")
        assert command({"cmd": "queue", "replies": [{"text": "hello there"}]}) == {"ok": True}
        body = json.dumps({"model": "stub", "messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()
        request = urllib.request.Request(f"{base_url}/chat/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            stream = response.read().decode()
        assert '"content": "hello"' in stream and '"content": " there"' in stream and "[DONE]" in stream
        assert command({"cmd": "requests"}) == {"requests": [json.loads(body)]}
        props = {"default_generation_settings": {"n_ctx": 1024}}
        assert command({"cmd": "endpoint", "key": "GET /props", "body": props}) == {"ok": True}
        with urllib.request.urlopen(f"{base_url.removesuffix('/v1')}/props", timeout=30) as response:
            assert json.loads(response.read()) == props
        assert "an endpoint is" in command({"cmd": "endpoint", "key": "/props", "body": {}})["error"]
        assert "accepted: queue, requests, release, endpoint" in command({"cmd": "nope"})["error"]
        assert "bad command" in command(["not", "an", "object"])["error"]
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
