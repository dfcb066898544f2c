"""The one bounded JSON request to a model server (``models/server_http.py``), over a model's own
async client as the window questions and the server's counts use it: what goes over the wire,
the connection kept between requests, and every bound refused by name."""

from __future__ import annotations

import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from imprintd.models.server_counts import ServerCounts
from imprintd.models.server_http import BoundedRequestError, Bounds, request_json, tls_context


class Loopback:
    """A loopback server whose ``/<behaviour>`` answers as that behaviour says (GET or POST)."""

    def __init__(self) -> None:
        self.seen: list[dict] = []
        seen, stop = self.seen, threading.Event()
        self.stop = stop

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def send(self, body: bytes, **headers: str) -> None:
                self.send_response(200)
                for name, value in {"Content-Length": str(len(body)), **headers}.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                sent = self.rfile.read(length) if length else b""
                seen.append(
                    {
                        "request": f"{self.command} {self.path}",
                        "headers": dict(self.headers),
                        "body": sent,
                        "port": self.client_address[1],
                    }
                )
                behaviour = self.path.strip("/").split("/")[0]
                if behaviour == "echo":
                    self.send(json.dumps({"got": json.loads(sent or b"null")}).encode())
                elif behaviour == "bomb":  # about 2 KB sent, 2 MiB decoded
                    self.send(gzip.compress(b'{"pad": "' + b" " * (2 << 20) + b'"}'), **{"Content-Encoding": "gzip"})
                elif behaviour == "declared":  # says 2 MiB before sending any of it
                    self.send_response(200)
                    self.send_header("Content-Length", str(2 << 20))
                    self.end_headers()
                elif behaviour == "deep":
                    self.send(b'{"tokens": ' + b"[" * 40 + b"]" * 40 + b', "count": 5}')
                elif behaviour == "drip":  # a byte every 50 ms, for 4 s: each read is quick
                    self.send_response(200)
                    self.send_header("Content-Length", "80")
                    self.end_headers()
                    for _ in range(80):
                        if stop.wait(0.05):
                            return
                        self.wfile.write(b" ")
                        self.wfile.flush()
                elif behaviour == "brotli":
                    self.send(b"{}", **{"Content-Encoding": "br"})
                else:
                    self.send_error(404)

            do_GET = do_POST = answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def url(self, behaviour: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/{behaviour}"

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def loopback():
    server = Loopback()
    yield server
    server.close()


BOUNDS = Bounds(timeout_s=5.0, max_bytes=1 << 20)


async def test_a_post_goes_as_the_caller_encoded_it_and_the_model_client_keeps_its_connection(loopback):
    async with httpx.AsyncClient(verify=tls_context()) as client:
        for number in (1, 2):
            answer = await request_json(
                client,
                "POST",
                loopback.url("echo"),
                BOUNDS,
                content=json.dumps({"n": number}).encode(),
                headers={"Accept": "application/json", "Content-Type": "application/json"},
            )
            assert answer == {"got": {"n": number}}
    first, second = loopback.seen
    assert first["body"] == b'{"n": 1}' and first["request"] == "POST /echo"
    assert first["headers"]["Accept"] == "application/json"
    assert first["headers"]["Content-Type"] == "application/json"
    assert first["headers"]["Accept-Encoding"] == "gzip, deflate"  # what is decoded here, httpx's own default
    assert first["port"] == second["port"]  # one connection, kept: the model's client reused


@pytest.mark.parametrize(
    ("behaviour", "problem"),
    [
        ("bomb", "the answer is larger than 1,048,576 bytes"),
        ("declared", "the answer is 2,097,152 bytes; at most 1,048,576 are read"),
        ("deep", "the answer is nested more than 32 levels deep (arrays and objects)"),
        ("brotli", "the answer is encoded as 'br'; gzip, deflate or none is read"),
        ("missing", "the server answered 404"),
    ],
)
async def test_each_bound_is_refused_by_name(loopback, behaviour, problem):
    async with httpx.AsyncClient() as client:
        with pytest.raises(BoundedRequestError) as error:
            await request_json(client, "GET", loopback.url(behaviour), BOUNDS)
    assert str(error.value) == f"GET {loopback.url(behaviour)}: {problem}"
    assert error.value.status == (404 if behaviour == "missing" else None)


async def test_the_time_limit_is_for_the_whole_answer_not_each_read(loopback):
    async with httpx.AsyncClient() as client:
        with pytest.raises(BoundedRequestError) as error:
            await request_json(client, "GET", loopback.url("drip"), Bounds(timeout_s=0.5, max_bytes=1 << 20))
    assert error.value.problem == "no complete answer within 0.5 s"


def test_a_count_nested_past_the_bound_leaves_the_estimate(loopback):
    counts = ServerCounts("vllm", loopback.url("deep"), "m", {"Accept": "application/json"}, tls_context())
    try:
        assert counts.count([{"role": "user", "content": "hi"}], []) is None
        assert counts.working is False
        [asked] = loopback.seen
        assert asked["request"] == "POST /deep/tokenize"
        assert json.loads(asked["body"]) == {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "add_generation_prompt": True,
        }
    finally:
        counts.close()
