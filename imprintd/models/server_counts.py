"""Exact prompt counts from a server that tokenizes: llama-server and vLLM.

A served model is counted by the UTF-8-byte estimate (``remote.py``) unless its server can say
what the prompt really costs, by its own chat template and tokenizer:

* llama-server: ``POST /apply-template`` (the messages and tools, rendered as it would render
  them) then ``POST /tokenize`` of that prompt;
* vLLM: ``POST /tokenize`` with the messages (and tools), which renders and counts in one step.

Counts are cached by the request they count (a bounded number of them), as a local model's are,
so fitting a long session asks once per distinct prompt. Blocking: counting is called from
worker threads (``Model.count_prompt``), never on the event loop; each request is
``server_http``'s bounded one, over the model's own client. A server that fails to count (an
old build, an error, a timeout, an answer too large or not JSON) is not asked again: the
estimate stands.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from typing import Any

import httpx
import msgspec

from imprintd.models.server_http import BoundedRequestError, Bounds, request_json_sync
from imprintd.models.server_window import server_root

logger = logging.getLogger(__name__)

#: The kinds of server that can count, as ``server_window.ServerWindow.server`` names them.
COUNTING_SERVERS = ("llama-server", "vllm")
#: Distinct prompts whose counts are kept (the oldest go first).
CACHE_SIZE = 1024
#: Seconds one count's request may take in all (a long prompt is rendered and tokenized by the server).
COUNT_TIMEOUT_S = 30.0
#: Bytes of one count's answer read at most, as sent and decoded (a token list of a long prompt included).
MAX_ANSWER_BYTES = 64 << 20


class ServerCounts:
    """Counts prompts with the server's own template and tokenizer (one per model)."""

    def __init__(self, server: str, base_url: str, model: str, headers: dict[str, str], verify: Any) -> None:
        if server not in COUNTING_SERVERS:
            raise ValueError(f"{server!r} cannot count prompts")
        self.server = server
        self._root = server_root(base_url)
        self._model = model
        self._headers = {**headers, "Content-Type": "application/json", "Accept": "application/json"}
        self._client = httpx.Client(verify=verify, timeout=COUNT_TIMEOUT_S)
        self._counts: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()
        #: False once the server failed to count: the estimate stands from then on.
        self.working = True

    def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int | None:
        """Tokens of the prompt the server would build from ``messages`` and ``tools`` (generation
        prompt included); None when it cannot say."""
        if not self.working:
            return None
        key = hashlib.blake2b(msgspec.json.encode([messages, tools]), digest_size=20).digest()
        with self._lock:
            if key in self._counts:
                self._counts.move_to_end(key)
                return self._counts[key]
        try:
            counted = self._ask(messages, tools)
        except (BoundedRequestError, KeyError, TypeError) as error:
            logger.info("the server at %s could not count a prompt (%s): the estimate stands", self._root, error)
            self.working = False
            return None
        with self._lock:
            self._counts[key] = counted
            while len(self._counts) > CACHE_SIZE:
                self._counts.popitem(last=False)
        return counted

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        bounds = Bounds(timeout_s=COUNT_TIMEOUT_S, max_bytes=MAX_ANSWER_BYTES)
        content = msgspec.json.encode(body)
        return request_json_sync(
            "POST", f"{self._root}{path}", bounds, client=self._client, content=content, headers=self._headers
        )

    def _ask(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        if self.server == "llama-server":
            body: dict[str, Any] = {"messages": messages}
            if tools:
                body["tools"] = tools
            prompt = self._post("/apply-template", body)["prompt"]
            if not isinstance(prompt, str):
                raise TypeError("/apply-template gave no prompt")
            tokens = self._post("/tokenize", {"content": prompt, "add_special": True})["tokens"]
            return len(tokens)
        body = {"model": self._model, "messages": messages, "add_generation_prompt": True}
        if tools:
            body["tools"] = tools
        answer = self._post("/tokenize", body)
        count = answer.get("count")
        return count if isinstance(count, int) else len(answer["tokens"])

    def close(self) -> None:
        self._client.close()
