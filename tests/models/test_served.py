"""The models an OpenAI-compatible server lists (imprintd/models/served.py)."""

from __future__ import annotations

import json
import socket

import pytest

from imprintd.models.base import ModelError
from imprintd.models.served import served_models


def test_the_servers_model_ids_with_the_key_in_the_header(stub, monkeypatch):
    monkeypatch.setenv("IMPRINT_CHAT_API_KEY", "sk-test")
    assert served_models(stub.base_url) == ["stub"]


def test_a_server_that_cannot_be_reached_is_named_never_the_key(monkeypatch):
    monkeypatch.setenv("IMPRINT_CHAT_API_KEY", "sk-secret")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(ModelError) as error:
        served_models(f"http://127.0.0.1:{port}/v1")
    assert f"127.0.0.1:{port}" in str(error.value) and "could not be asked" in str(error.value)
    assert "sk-secret" not in str(error.value)


# --- a hostile or broken server: every answer bounded, every refusal a ModelError ------------


class Hostile:
    """A loopback server whose ``/<behaviour>/v1/models`` answers as that behaviour says."""

    def __init__(self) -> None:
        import gzip
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        padding = b" " * (16 << 20)
        stop = self.stop = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def send(self, body: bytes, **headers: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                for name, value in headers.items():
                    self.send_header(name.replace("_", "-"), value)
                if "Content_Length" not in headers:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                behaviour = self.path.split("/")[1]
                if behaviour == "bomb":  # about 16 KB sent, 16 MiB decoded: valid JSON all the same
                    body = gzip.compress(b'{"data": [{"id": "a"}], "pad": "' + padding + b'"}')
                    self.send(body, Content_Encoding="gzip")
                elif behaviour == "endless":  # no length; 32 MiB before it ends (MemoryError if never)
                    self.send_response(200)
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(b'{"data": [], "pad": "')
                    for _ in range(512):
                        if stop.is_set():
                            return
                        self.wfile.write(b" " * (64 << 10))
                    self.wfile.write(b'"}')
                elif behaviour == "drip":  # a byte every 50 ms, for 4 s: each read is quick
                    self.send_response(200)
                    self.send_header("Content-Length", str(80 + 11))
                    self.end_headers()
                    for _ in range(80):
                        if stop.wait(0.05):
                            return
                        self.wfile.write(b" ")
                        self.wfile.flush()
                    self.wfile.write(b'{"data": []}'[:11])
                elif behaviour == "deep":
                    self.send(b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
                elif behaviour == "many":
                    ids = [{"id": f"model-{n}"} for n in range(5_000)] + [{"id": "x" * 300}, {"id": 7}]
                    self.send(json.dumps({"data": ids}).encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    def url(self, behaviour: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/{behaviour}/v1"

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hostile():
    server = Hostile()
    yield server
    server.close()


@pytest.mark.parametrize(
    ("behaviour", "problem"),
    [
        ("bomb", "the answer is larger than 8,388,608 bytes"),
        ("endless", "the answer is larger than 8,388,608 bytes"),
        ("deep", "the answer is nested more than 32 levels deep (arrays and objects)"),
    ],
)
def test_an_answer_too_large_or_too_deep_is_refused_by_name(hostile, behaviour, problem):
    with pytest.raises(ModelError) as error:
        served_models(hostile.url(behaviour))
    assert (
        str(error.value) == f"the model server at {hostile.url(behaviour)} could not be asked for its models: {problem}"
    )


def test_the_time_limit_is_for_the_whole_answer_not_each_read(hostile, monkeypatch):
    import imprintd.models.served

    monkeypatch.setattr(imprintd.models.served, "TIMEOUT_S", 0.5)  # each byte comes within 0.05 s
    with pytest.raises(ModelError) as error:
        served_models(hostile.url("drip"))
    assert str(error.value).endswith("could not be asked for its models: no complete answer within 0.5 s")


def test_a_list_of_thousands_keeps_the_first_ids_and_skips_odd_ones(hostile):
    import imprintd.models.served

    listed = served_models(hostile.url("many"))
    assert listed == [f"model-{n}" for n in range(imprintd.models.served.MAX_IDS)]
